//! What a guard needs from its provider ([`Lease`]: extend and unlock, guarded by the fencing
//! token), and grouped releases ([`Releases`]).
//!
//! A provider written outside this crate implements [`Lease`] on its shared state and hands
//! each acquisition to [`LockGuard::new`](crate::LockGuard::new) with that state as the lease;
//! keep-alive, the pause gate, the unlock retry and grouped releases then work for it as for the
//! providers this crate ships. The project's "Writing a provider" guide (`docs/writing-a-provider.md`)
//! walks through one.
//!
//! Grouped releases: unlocks that arrive while an earlier one is on its way go to the store
//! together, in one statement (one script on Redis), each row still guarded by its own token
//! and `lock_at_least_for`.
//!
//! This is group commit, as a database's log does it: the first unlock of a quiet moment
//! starts a group at once; its task yields to the runtime once, so the unlocks of runs ending
//! in the same turn join it, and a lone release goes through the provider's one-lock statement
//! after waiting for nothing but that turn. While two groups are on their way, later unlocks
//! queue; when a group comes back, everything queued meanwhile (up to 500) goes in the next
//! one. A tick whose runs end within a few milliseconds of each other is released in a handful
//! of statements instead of one per run.
//!
//! Each group runs in a task of its own, so an unlock whose caller gave up waiting (its 30 s
//! bound, a cancelled job) cannot strand the queue.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

use futures_util::future::BoxFuture;

use crate::error::Result;

/// What a store answered to one acquire, before it becomes what
/// [`LockProvider::lock`](crate::LockProvider::lock) returns ([`Acquired::into_guard`]): every
/// provider decides the same three cases the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquired {
    /// Taken, with this fencing token.
    Token(i64),
    /// Not taken (held, or the tick already claimed); the tick, if any, was this many
    /// microseconds ahead of the store's clock (`None`: not known, or no tick).
    NotTaken {
        /// How far the tick was ahead of the store's clock, in microseconds.
        ahead_us: Option<i64>,
    },
    /// Not taken because the tick was too far ahead, by an amount the store did not say.
    TickRefused,
}

/// What a guard needs from its provider after acquisition: the two statements that act on a
/// held lock, both guarded by the fencing token.
///
/// A provider implements it on the state its guards share (usually the provider's own
/// `Arc`'d inner value) and passes that as the lease of every [`LockGuard`](crate::LockGuard)
/// it builds. Times are the store's clock, or the application's clock in
/// [`ClockMode::Application`](crate::settings::ClockMode::Application), as the provider's acquire reads
/// them; durations arrive rounded up to whole milliseconds.
///
/// # Contract
///
/// - Each method acts only on the lock `name` while it still carries `token`; a row that
///   carries another token (the lock expired and someone else took it) is left untouched and
///   the answer is `Ok(false)` (for [`unlock_many`](Self::unlock_many): not counted).
/// - `Err` means the store did not answer or refused. The guard retries a failed unlock in
///   the background until the lease would have run out, so [`unlock`](Self::unlock) must be
///   idempotent: a lock released once stays released when the same unlock comes again.
/// - A future must not panic; a panic in one is caught where the guard can (a grouped
///   release), but it is a bug in the provider.
///
/// The conformance suites check all of this against a live store.
pub trait Lease: Send + Sync + fmt::Debug {
    /// `locked_until = now + at_most` where name and token match and the lock has not expired
    /// (`locked_until > now`). Answers whether it matched: `Ok(false)` tells the holder to
    /// stop.
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// `locked_until = max(now, locked_at + at_least, locked_until - slack)` where name and
    /// token match: the lock frees now, but never before `lock_at_least_for` (counted from the
    /// acquisition) nor before the newest lease's own "at least" (`locked_until - slack`).
    /// Answers whether the row still carried `token`.
    fn unlock<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> BoxFuture<'a, Result<bool>>;

    /// Every unlock of `unlocks` (names distinct, in name order) in one statement, each as
    /// [`unlock`](Self::unlock) does it; answers how many rows it released. By default one
    /// [`unlock`](Self::unlock) after another.
    fn unlock_many<'a>(&'a self, unlocks: &'a [Unlock]) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let mut released = 0;
            for u in unlocks {
                released += u64::from(self.unlock(&u.name, u.token, u.at_least, u.slack).await?);
            }
            Ok(released)
        })
    }

    /// The queue that groups this provider's releases ([`Releases`]), if it groups them; by
    /// default none, and every unlock is its own statement.
    fn releases(&self) -> Option<&Releases> {
        None
    }
}

/// How many groups one provider has on their way at once.
const MAX_RUNNING: usize = 2;

/// The most unlocks in one statement.
const MAX_GROUP: usize = 500;

/// One lock to release: `locked_until = max(now, locked_at + at_least, locked_until - slack)`
/// where `name` still carries `token`.
///
/// Built by the guard, read by a provider in [`Lease::unlock_many`]; a provider whose one-lock
/// [`Lease::unlock`] shares the group's statement builds one with [`Unlock::new`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Unlock {
    /// The lock name.
    pub name: String,
    /// The holder's fencing token.
    pub token: i64,
    /// The original `lock_at_least_for`, counted from `locked_at`.
    pub at_least: Duration,
    /// `lock_at_most_for - lock_at_least_for` of the newest lease.
    pub slack: Duration,
}

impl Unlock {
    /// The unlock of `name` held with `token`, as [`Lease::unlock`] takes it.
    pub fn new(name: impl Into<String>, token: i64, at_least: Duration, slack: Duration) -> Self {
        Self {
            name: name.into(),
            token,
            at_least,
            slack,
        }
    }
}

/// A provider's queue of unlocks (see the [module](self)). A provider that groups its releases
/// keeps one (`Releases::default()`) beside its connection and returns it from
/// [`Lease::releases`]; the guards then send their unlocks through it, and it calls the
/// provider's [`Lease::unlock_many`] for each group.
#[derive(Debug, Default)]
pub struct Releases {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Groups on their way.
    running: usize,
    /// Unlocks waiting for the next group, with where their answer goes.
    waiting: Vec<(Unlock, oneshot::Sender<Result<bool>>)>,
}

impl Releases {
    /// Releases `unlock` through `lease` (whose [`Lease::releases`] is `self`), in a group with
    /// the unlocks that arrive while earlier groups are on their way. Answers whether the row
    /// still carried the token, as the one-lock statement does.
    pub(crate) async fn unlock(&self, lease: &Arc<dyn Lease>, unlock: Unlock) -> Result<bool> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return lease
                .unlock(&unlock.name, unlock.token, unlock.at_least, unlock.slack)
                .await;
        };
        let (answer, answered) = oneshot::channel();
        let again = unlock.clone();
        let start = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            state.waiting.push((unlock, answer));
            let start = state.running < MAX_RUNNING;
            if start {
                state.running += 1;
            }
            start
        };
        if start {
            runtime.spawn(send_groups(Arc::clone(lease)));
        }
        match answered.await {
            Ok(outcome) => outcome,
            // The group's task ended without answering (only a panic in a provider does that):
            // this unlock goes alone.
            Err(_) => {
                lease
                    .unlock(&again.name, again.token, again.at_least, again.slack)
                    .await
            }
        }
    }

    /// The next group, or `None` (and one fewer running) when nothing waits.
    fn next_group(&self) -> Option<Vec<(Unlock, oneshot::Sender<Result<bool>>)>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.waiting.is_empty() {
            state.running -= 1;
            return None;
        }
        let take = state.waiting.len().min(MAX_GROUP);
        Some(state.waiting.drain(..take).collect())
    }
}

/// Sends groups until nothing waits.
async fn send_groups(lease: Arc<dyn Lease>) {
    let Some(releases) = lease.releases() else {
        return;
    };
    let mut running = Running {
        releases,
        done: false,
    };
    // Let the runs that end in the same turn of the runtime queue their unlocks first: a
    // tick's runs end together, and the first group then takes them all.
    tokio::task::yield_now().await;
    while let Some(mut group) = releases.next_group() {
        // Rows are taken in name order, as the batch acquire takes them, so a group and a
        // claim racing over the same rows wait for each other instead of deadlocking.
        group.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        let (unlocks, answers): (Vec<Unlock>, Vec<_>) = group.into_iter().unzip();
        for (outcome, answer) in send(&lease, &unlocks).await.into_iter().zip(answers) {
            let _ = answer.send(outcome);
        }
    }
    running.done = true;
}

/// One running group task, counted off if it ends without [`Releases::next_group`] having
/// done so (a panic in a provider), so the queue never waits for a task that is gone.
struct Running<'a> {
    releases: &'a Releases,
    done: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.done {
            let mut state = self
                .releases
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            state.running -= 1;
        }
    }
}

/// One group: the one-lock statement for a group of one; else the group's statement, which
/// answers how many rows it released. When that is all of them, every unlock is answered
/// `true`. Otherwise (some lock was taken over by another holder) or when the group's
/// statement failed, each unlock is sent again alone, which tells them apart: an unlock is
/// idempotent, a row released once stays released when the same unlock comes again.
async fn send(lease: &Arc<dyn Lease>, unlocks: &[Unlock]) -> Vec<Result<bool>> {
    if unlocks.len() > 1 {
        match lease.unlock_many(unlocks).await {
            Ok(released) if released == unlocks.len() as u64 => {
                return unlocks.iter().map(|_| Ok(true)).collect();
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, unlocks = unlocks.len(), "a grouped release failed; releasing each lock alone");
            }
        }
    }
    futures_util::future::join_all(
        unlocks
            .iter()
            .map(|u| lease.unlock(&u.name, u.token, u.at_least, u.slack)),
    )
    .await
}
