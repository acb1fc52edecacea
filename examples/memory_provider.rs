//! A lock provider written outside `shedlock`, against its public API only: the locks of one
//! process, kept in a map. The "Writing a provider" guide (`docs/writing-a-provider.md`) walks
//! through it; `tests/memory_provider.rs` runs it through the scheduler.
//!
//! Its store is this process's memory, so it coordinates tasks of one process only: a real
//! provider keeps the same rows in a store every instance reaches (a table, a key space) and
//! makes each method one atomic operation there, as these are under one mutex.
//!
//! It implements the methods the traits require, eight: `lock_many`, `is_held` and `settings`
//! of [`LockProvider`]; `extend` and `unlock` of [`Lease`]; `locks`, `lock_state` and
//! `force_release` of [`LockAdmin`]. Of the methods with a default it overrides one,
//! `as_admin`, which every provider that implements [`LockAdmin`] overrides to say so. Every
//! other method keeps the trait's default (`lock` is a batch of one, `migrate` creates
//! nothing, `backend` names this type, and the rest).
//!
//! `tests/memory_provider.rs` also runs the conformance kit on it (`shedlock-testkit`), with a
//! `TestDb` of the eight hooks the kit requires; [`MemoryLockProvider::by_hand`] is what those
//! hooks write through, as a test of a real store would write its table.
//!
//! Run it: `cargo run --example memory_provider`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use shedlock::history::LockState;
use shedlock::lease::{Acquired, Lease};
use shedlock::settings::ProviderSettings;
use shedlock::{LockAdmin, LockConfiguration, LockGuard, LockProvider, Result};
use tokio::time::Instant;

/// One lock's row: what a table's row or a key's record holds.
#[derive(Debug, Clone)]
pub struct Row {
    /// Held until then.
    pub locked_until: DateTime<Utc>,
    /// When the holder took it.
    pub locked_at: DateTime<Utc>,
    /// Who took it.
    pub locked_by: String,
    /// The fencing token of the last acquisition.
    pub token: i64,
    /// The newest tick claimed through it.
    pub last_tick: Option<DateTime<Utc>>,
}

/// What the provider and every guard it built share: the rows and the token counter, which
/// stand for the store every instance reaches, and this instance's settings.
#[derive(Debug)]
struct Store {
    rows: Arc<Mutex<HashMap<String, Row>>>,
    /// The last fencing token handed out: tokens never go back, even for a row deleted.
    tokens: Arc<AtomicI64>,
    /// This instance's settings: who takes the locks, keep-alive, the tick tolerance, the clock.
    settings: ProviderSettings,
}

impl Store {
    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<String, Row>> {
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The time every decision is taken by: the store's clock (here the process's), or the
    /// application's where the settings say so (`ClockMode::App`), as a provider passes its
    /// clock into its statements then.
    fn now(&self) -> DateTime<Utc> {
        self.settings.app_now().unwrap_or_else(Utc::now)
    }

    fn unlock_row(&self, name: &str, token: i64, at_least: Duration, slack: Duration) -> bool {
        let now = self.now();
        match self.rows().get_mut(name) {
            Some(row) if row.token == token => {
                row.locked_until = now
                    .max(row.locked_at + at_least)
                    .max(row.locked_until - slack);
                true
            }
            _ => false,
        }
    }
}

/// The in-memory provider. Cheap to clone: clones share the rows.
#[derive(Debug, Clone)]
pub struct MemoryLockProvider {
    store: Arc<Store>,
}

impl MemoryLockProvider {
    /// A provider over a new, empty store, whose locks are taken in the name of `locked_by`.
    pub fn new(locked_by: impl Into<String>) -> Self {
        Self::over(Arc::default(), Arc::default(), settings(locked_by.into()))
    }

    /// Another instance over the same store, taking locks in the name of `locked_by`.
    pub fn instance(&self, locked_by: impl Into<String>) -> Self {
        self.with_settings(settings(locked_by.into()))
    }

    /// Another instance over the same store with `settings` (a real provider takes them from
    /// its builder, [`ProviderBuilder::into_parts`](shedlock::settings::ProviderBuilder::into_parts)).
    pub fn with_settings(&self, settings: ProviderSettings) -> Self {
        Self::over(
            Arc::clone(&self.store.rows),
            Arc::clone(&self.store.tokens),
            settings,
        )
    }

    /// The rows, changed by hand (as an operator or a test changes a table): `f` runs under
    /// the store's mutex.
    pub fn by_hand<T>(&self, f: impl FnOnce(&mut HashMap<String, Row>) -> T) -> T {
        f(&mut self.store.rows())
    }

    fn over(
        rows: Arc<Mutex<HashMap<String, Row>>>,
        tokens: Arc<AtomicI64>,
        settings: ProviderSettings,
    ) -> Self {
        Self {
            store: Arc::new(Store {
                rows,
                tokens,
                settings,
            }),
        }
    }

    /// One acquisition: the store's atomic step (here, under the mutex), then the answer
    /// decided as every provider decides it ([`Acquired::into_guard`]).
    fn acquire(&self, config: &LockConfiguration, sent_at: Instant) -> Result<Option<LockGuard>> {
        let now = self.store.now();
        let tolerance = self.store.settings.tick_tolerance;
        // How far the tick is ahead of the store's clock: a tick too far ahead is refused
        // without writing anything (it would block every other instance until then).
        let ahead_us = config
            .tick()
            .map(|tick| (tick - now).num_microseconds().unwrap_or(i64::MAX));
        let acquired = match ahead_us {
            Some(ahead) if ahead > tolerance.as_micros() as i64 => Acquired::NotTaken { ahead_us },
            _ => self.take(config, now),
        };
        // The guard shares the store as its lease: extend and unlock come back to it.
        let lease = || Arc::clone(&self.store) as Arc<dyn Lease>;
        acquired.into_guard(config, lease, sent_at, tolerance)
    }

    /// Takes the lock when it is free and, for a tick, when that tick is newer than the last
    /// one claimed: a new token, `locked_until = now + lock_at_most_for`.
    fn take(&self, config: &LockConfiguration, now: DateTime<Utc>) -> Acquired {
        let mut rows = self.store.rows();
        if let Some(row) = rows.get(config.name()) {
            let held = row.locked_until > now;
            let claimed =
                matches!((row.last_tick, config.tick()), (Some(last), Some(tick)) if last >= tick);
            if held || claimed {
                return Acquired::NotTaken { ahead_us: None };
            }
        }
        // Above every token handed out, and above the row's own (a row written by someone
        // else, or raised by hand, may carry a higher one than this store's counter).
        let floor = rows.get(config.name()).map_or(0, |row| row.token);
        self.store.tokens.fetch_max(floor, Ordering::SeqCst);
        let token = self.store.tokens.fetch_add(1, Ordering::SeqCst) + 1;
        let last_tick = config
            .tick()
            .or_else(|| rows.get(config.name()).and_then(|r| r.last_tick));
        rows.insert(
            config.name().to_owned(),
            Row {
                locked_until: now + config.lock_at_most_for(),
                locked_at: now,
                locked_by: self.store.settings.locked_by.clone(),
                token,
                last_tick,
            },
        );
        Acquired::Token(token)
    }
}

impl Lease for Store {
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let now = self.now();
            Ok(match self.rows().get_mut(name) {
                Some(row) if row.token == token && row.locked_until > now => {
                    row.locked_until = now + at_most;
                    true
                }
                _ => false,
            })
        })
    }

    fn unlock<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { Ok(self.unlock_row(name, token, at_least, slack)) })
    }
}

impl LockProvider for MemoryLockProvider {
    /// Each lock decided in turn, each under the mutex: a store that can decide many records
    /// in one round trip (a statement, a script, a transaction) should, as the scheduler claims
    /// a whole tick's jobs with one call. `lock` is the trait's: a batch of one.
    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
        // `sent_at` is taken before the store is asked: the guard must never believe itself
        // held longer than the store does.
        let sent_at = Instant::now();
        Box::pin(async move {
            // A store's round trip lets the task's thread run other tasks meanwhile; an answer
            // from memory comes at once, so it gives way itself, or a task that locks in a
            // loop would keep its thread from every other task (a worker pool starved).
            tokio::task::yield_now().await;
            Ok(configs
                .iter()
                .map(|config| self.acquire(config, sent_at))
                .collect())
        })
    }

    fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            Ok(self.store.rows().get(name).is_some_and(|row| {
                row.token == fencing_token && row.locked_until > self.store.now()
            }))
        })
    }

    fn settings(&self) -> &ProviderSettings {
        &self.store.settings
    }

    /// The one method with a default a provider that implements [`LockAdmin`] overrides: the
    /// scheduler reads its fleet's seats, and whether a new job's lock ever claimed a tick,
    /// through it (without it, no fleet shares a tick's jobs, and `MisfirePolicy::All`
    /// replays the grace for a job new to the store).
    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        Some(self)
    }
}

impl LockAdmin for MemoryLockProvider {
    // `migrate` is the trait's, creating nothing: the map exists already.

    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        Box::pin(async move {
            let read_at = self.store.now();
            let mut states: Vec<LockState> = self
                .store
                .rows()
                .iter()
                .map(|(name, row)| state(name, row, read_at))
                .collect();
            states.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(states)
        })
    }

    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        Box::pin(async move {
            let read_at = self.store.now();
            Ok(self
                .store
                .rows()
                .get(name)
                .map(|row| state(name, row, read_at)))
        })
    }

    fn force_release<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let now = self.store.now();
            Ok(match self.store.rows().get_mut(name) {
                Some(row) if row.token == fencing_token && row.locked_until > now => {
                    row.locked_until = now;
                    true
                }
                _ => false,
            })
        })
    }
}

/// The settings of a provider built without a builder: table `memory`, locks taken in the
/// name of `locked_by`, every other setting the default. A provider with a builder takes them
/// from [`ProviderBuilder::into_parts`](shedlock::settings::ProviderBuilder::into_parts).
fn settings(locked_by: String) -> ProviderSettings {
    let mut settings = ProviderSettings::default();
    settings.table = "memory".into();
    settings.locked_by = locked_by;
    settings
}

fn state(name: &str, row: &Row, read_at: DateTime<Utc>) -> LockState {
    LockState::new(
        name.to_owned(),
        row.locked_until,
        row.locked_at,
        row.locked_by.clone(),
        row.token,
        row.last_tick,
        read_at,
    )
}

#[allow(dead_code)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let provider = MemoryLockProvider::new("example:1");
    let config = LockConfiguration::new("nightly", Duration::from_secs(60), Duration::ZERO)?;
    let guard = provider.lock(&config).await?.expect("the lock is free");
    println!(
        "took {:?} with token {}",
        guard.name(),
        guard.fencing_token()
    );
    println!(
        "a second try while it is held: {:?}",
        provider.lock(&config).await?.map(|g| g.fencing_token())
    );
    guard.unlock().await?;
    let again = provider.lock(&config).await?.expect("released");
    println!("after the unlock: token {}", again.fencing_token());
    again.unlock().await?;
    Ok(())
}
