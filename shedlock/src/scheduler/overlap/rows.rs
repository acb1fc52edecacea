//! Where an overlap policy lives in the store: rows of the lock table beside the job's own,
//! taken and read through the provider traits every backend implements, so the policy holds
//! on PostgreSQL, MySQL, SQLite, Redis and etcd alike.
//!
//! For a job whose lock is `L`:
//!
//! | row | what it is | lease |
//! |---|---|---|
//! | `L` | the tick's claim: each tick once, fleet-wide (`last_tick`), as for every job | 1 ms |
//! | `L:run1` … `L:runN` | a run's place: a run holds one, with keep-alive and its fencing token | the job's `lock_at_most_for` |
//! | `L:wait1` … `L:waitK` | a waiting tick (its `last_tick`), taken off by the run that starts it | long ([`wait_lease`]) |
//! | `L:cancel` | the newest tick that asked the running run to stop (`cancel_other`) | 1 ms |
//!
//! A waiting tick is taken off with [`LockAdmin::force_release`] of its row's token, which
//! succeeds once: the instance it succeeds for holds a run's place and starts the tick.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::policy::Overlap;
use crate::config::LockConfiguration;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::history::LockState;
use crate::provider::{LockAdmin, LockProvider};

/// The longest suffix a row adds to the job's lock name (`:wait100`).
pub(crate) const LONGEST_SUFFIX: usize = ":wait100".len();

/// The lease of a claim that only marks a tick (the tick's row, a cancel request).
const MARK: Duration = Duration::from_millis(1);

/// The rows of one job's policy.
#[derive(Debug, Clone)]
pub(crate) struct Rows {
    lock: String,
    policy: Overlap,
}

impl Rows {
    pub(crate) fn new(lock: &str, policy: Overlap) -> Self {
        Self {
            lock: lock.to_owned(),
            policy,
        }
    }

    /// The name of run place `k` (1-based).
    pub(crate) fn run_name(&self, k: u32) -> String {
        format!("{}:run{k}", self.lock)
    }

    fn cancel_name(&self) -> String {
        self.policy
            .cancel_row(&self.lock)
            .unwrap_or_else(|| format!("{}:cancel", self.lock))
    }

    /// The names of the run places.
    pub(crate) fn run_names(&self) -> Vec<String> {
        self.policy.run_rows(&self.lock)
    }

    fn wait_names(&self) -> Vec<String> {
        self.policy.wait_rows(&self.lock)
    }

    /// The claim of `tick` alone: the job's lock for the tick, held 1 ms.
    pub(crate) fn tick_claim(&self, tick: DateTime<Utc>) -> Result<LockConfiguration> {
        Ok(LockConfiguration::new(self.lock.clone(), MARK, Duration::ZERO)?.for_tick(tick))
    }

    /// Run place `k`, held as `acquire` (the run's lock for its tick) would be, without a
    /// tick (a place is not a tick: the tick's row decided that) and without a minimum hold
    /// (the next waiting tick takes the place as soon as the run ends).
    pub(crate) fn run_place(
        &self,
        k: u32,
        acquire: &LockConfiguration,
    ) -> Result<LockConfiguration> {
        LockConfiguration::new(self.run_name(k), acquire.lock_at_most_for(), Duration::ZERO)
    }

    /// The place a tick tries first: the places taken in turn, so that with runs that
    /// outlast their period the place a tick tries is the one freed longest ago.
    pub(crate) fn first_place(&self, tick: DateTime<Utc>) -> u32 {
        let n = i64::from(self.policy.max_running());
        u32::try_from(tick.timestamp().rem_euclid(n)).unwrap_or(0) + 1
    }

    /// A place other than `tried` (already refused), if one is free: all tried in one
    /// statement, the first won kept and the others let go.
    pub(crate) async fn other_place(
        &self,
        provider: &dyn LockProvider,
        tried: u32,
        acquire: &LockConfiguration,
    ) -> Result<Option<LockGuard>> {
        let configs = (1..=self.policy.max_running())
            .filter(|k| *k != tried)
            .map(|k| self.run_place(k, acquire))
            .collect::<Result<Vec<_>>>()?;
        first_won(provider, &configs).await
    }

    /// Any free place, trying `first` first.
    pub(crate) async fn any_place(
        &self,
        provider: &dyn LockProvider,
        first: u32,
        acquire: &LockConfiguration,
    ) -> Result<Option<LockGuard>> {
        if let Some(guard) = provider.lock(&self.run_place(first, acquire)?).await? {
            return Ok(Some(guard));
        }
        if self.policy.max_running() == 1 {
            return Ok(None);
        }
        self.other_place(provider, first, acquire).await
    }

    /// The rows of the run places now held.
    pub(crate) async fn running(&self, admin: &dyn LockAdmin) -> Result<Vec<LockState>> {
        let mut held = admin.lock_states(&self.run_names()).await?;
        held.retain(LockState::is_held);
        Ok(held)
    }

    /// The waiting ticks' rows, oldest tick first.
    pub(crate) async fn waiting(&self, admin: &dyn LockAdmin) -> Result<Vec<LockState>> {
        if self.policy.buffer_limit() == 0 {
            return Ok(Vec::new());
        }
        let mut waiting = admin.lock_states(&self.wait_names()).await?;
        waiting.retain(|row| row.is_held() && row.last_tick.is_some());
        waiting.sort_by_key(|row| row.last_tick);
        Ok(waiting)
    }

    /// Puts `tick` among the waiting ones, if fewer than the limit wait: in a free row whose
    /// last tick is older. Returns the row's name and token, or `None` when the buffer is
    /// full.
    pub(crate) async fn push(
        &self,
        provider: &dyn LockProvider,
        admin: &dyn LockAdmin,
        tick: DateTime<Utc>,
        lease: Duration,
    ) -> Result<Option<(String, i64)>> {
        // Two instances may race for one free row; the loser reads again.
        for _ in 0..3 {
            let rows = admin.lock_states(&self.wait_names()).await?;
            let held = rows.iter().filter(|row| row.is_held()).count();
            if held >= self.policy.buffer_limit() as usize {
                return Ok(None);
            }
            let free = self.wait_names().into_iter().find(|name| {
                match rows.iter().find(|row| &row.name == name) {
                    None => true,
                    Some(row) => !row.is_held() && row.last_tick.is_none_or(|last| last < tick),
                }
            });
            let Some(free) = free else {
                return Ok(None);
            };
            let config =
                LockConfiguration::new(free.clone(), lease, Duration::ZERO)?.for_tick(tick);
            if let Some(guard) = provider.lock(&config).await? {
                let token = guard.fencing_token();
                guard.expire(); // held for the lease, taken off by the run that starts it
                return Ok(Some((free, token)));
            }
        }
        Ok(None)
    }

    /// Takes the oldest waiting tick off, for a run that holds a place: its row released by
    /// its token, which succeeds for one instance only. `None` when none waits (or each was
    /// taken by another instance first).
    pub(crate) async fn pop(&self, admin: &dyn LockAdmin) -> Result<Option<DateTime<Utc>>> {
        for row in self.waiting(admin).await? {
            if admin.force_release(&row.name, row.fencing_token).await? {
                return Ok(row.last_tick);
            }
        }
        Ok(None)
    }

    /// Asks the run going to stop, for `tick` (`cancel_other`).
    pub(crate) async fn request_cancel(
        &self,
        provider: &dyn LockProvider,
        tick: DateTime<Utc>,
    ) -> Result<()> {
        let config =
            LockConfiguration::new(self.cancel_name(), MARK, Duration::ZERO)?.for_tick(tick);
        // Refused: a newer tick asked already.
        if let Some(guard) = provider.lock(&config).await? {
            guard.expire();
        }
        Ok(())
    }

    /// Whether a tick newer than `tick` asked the run of `tick` to stop.
    pub(crate) async fn cancel_requested(
        &self,
        admin: &dyn LockAdmin,
        tick: DateTime<Utc>,
    ) -> Result<Option<DateTime<Utc>>> {
        let row = admin.lock_state(&self.cancel_name()).await?;
        Ok(row
            .and_then(|row| row.last_tick)
            .filter(|asked| *asked > tick))
    }
}

/// How long a waiting tick's row is held: long enough for every tick ahead of it to run to
/// its `lock_at_most_for` (and one more), at least a minute, at most a week. A row whose
/// lease ran out (every instance gone that long) is a tick that no longer waits.
pub(crate) fn wait_lease(policy: Overlap, lock_at_most_for: Duration) -> Duration {
    let ahead = policy.buffer_limit().saturating_add(1);
    lock_at_most_for
        .saturating_mul(ahead)
        .clamp(Duration::from_secs(60), Duration::from_secs(7 * 24 * 3600))
}

/// The first won of `configs`, claimed in one statement; the others won are let go.
async fn first_won(
    provider: &dyn LockProvider,
    configs: &[LockConfiguration],
) -> Result<Option<LockGuard>> {
    if configs.is_empty() {
        return Ok(None);
    }
    let mut kept = None;
    let mut error: Option<Error> = None;
    for answer in provider.lock_many(configs).await? {
        match answer {
            Ok(Some(guard)) if kept.is_none() => kept = Some(guard),
            Ok(Some(extra)) => {
                if let Err(e) = extra.unlock().await {
                    tracing::debug!(%e, "could not let go of a run place not needed (it runs out)");
                }
            }
            Ok(None) => {}
            Err(e) => error = Some(e),
        }
    }
    match (kept, error) {
        (None, Some(error)) => Err(error),
        (kept, _) => Ok(kept),
    }
}
