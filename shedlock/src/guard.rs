//! [`LockGuard`]: a held lock, its fencing token, and how it is extended and released.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{LockConfiguration, validate_durations};
use crate::error::{Error, Result};
use crate::lease::{Acquired, Lease, Unlock};

/// A held lock. Carries the fencing token; [`extend`](Self::extend) and
/// [`unlock`](Self::unlock) act only while the row still carries that token.
///
/// # Releasing
///
/// Call [`unlock`](Self::unlock). A guard dropped without it (a cancelled or panicking job)
/// releases the lock in a background task if a Tokio runtime is running, and otherwise leaves it
/// to expire at `lock_at_most_for`. Either way `lock_at_least_for` is honoured.
///
/// An unlock that fails (the database briefly unreachable) or gets no answer within 30 s is
/// retried in the background, with backoff, until the lease would have run out anyway (at most
/// an hour): a lock
/// whose holder finished is not kept for the rest of its `lock_at_most_for` because of one lost
/// statement. Each failure counts in [`metric_names::UNLOCK_FAILED`](crate::metric_names::UNLOCK_FAILED),
/// each background retry's end in [`metric_names::UNLOCK_RETRIED`](crate::metric_names::UNLOCK_RETRIED).
///
/// # Fencing
///
/// [`fencing_token`](Self::fencing_token) is strictly greater than every earlier token of the
/// same lock name. Pass it along with writes to other systems and let them refuse a write whose
/// token is lower than the highest they have seen: a holder that stalled past its lease can then
/// do no harm.
pub struct LockGuard {
    name: String,
    token: i64,
    /// The original `lock_at_least_for`, counted from `locked_at`.
    at_least: Duration,
    /// `lock_at_most_for - lock_at_least_for` of the newest lease (acquire or extend), so
    /// `locked_until - slack` is that lease's "held at least until".
    slack: Duration,
    /// Until when the lock is surely held, by this process's monotonic clock: when the newest
    /// acquire or extend was sent, plus its lease. Never later than the database's
    /// `locked_until`, which counts from when the database granted it.
    held_until: Instant,
    lease: Arc<dyn Lease>,
    /// Set by `unlock`, so `drop` does not release again.
    released: bool,
}

/// How long an unlock may take before it counts as failed (and is retried in the background).
const UNLOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a failed unlock is retried in the background at most (shorter when the lease runs
/// out sooner).
const UNLOCK_RETRY_LIMIT: Duration = Duration::from_secs(3600);

// How a store's answer to an acquire becomes a guard: here, beside the guard it makes, so
// `lease.rs` (what a guard needs from its provider) stays below this file.
impl Acquired {
    /// A guard for a token, over the lease `lease()` gives (called only then); for a tick
    /// refused, or more than `tick_tolerance` ahead of the store's clock,
    /// [`Error::TickInFuture`] (a tick that far ahead would block every other instance until
    /// then); otherwise `None`, "held elsewhere". `sent_at` as for [`LockGuard::new`].
    pub fn into_guard(
        self,
        config: &LockConfiguration,
        lease: impl FnOnce() -> Arc<dyn Lease>,
        sent_at: Instant,
        tick_tolerance: Duration,
    ) -> Result<Option<LockGuard>> {
        let too_far = |tick, ahead_by| Error::TickInFuture {
            name: config.name().to_owned(),
            tick,
            tolerance: tick_tolerance,
            ahead_by,
        };
        let tolerance_us = i64::try_from(tick_tolerance.as_micros()).unwrap_or(i64::MAX);
        match (self, config.tick()) {
            (Acquired::Token(token), _) => {
                Ok(Some(LockGuard::new(config, token, lease(), sent_at)))
            }
            (
                Acquired::NotTaken {
                    ahead_us: Some(ahead),
                },
                Some(tick),
            ) if ahead > tolerance_us => {
                let ahead_by = Duration::from_micros(ahead.unsigned_abs());
                Err(too_far(tick, Some(ahead_by)))
            }
            (Acquired::TickRefused, Some(tick)) => Err(too_far(tick, None)),
            _ => Ok(None),
        }
    }
}

impl LockGuard {
    /// A guard for a lock a provider just acquired: `config` as asked, the acquisition's
    /// fencing `token` (strictly greater than every earlier token of that name), the `lease`
    /// that extends and unlocks it (the provider's shared state), and `sent_at`, when the
    /// acquire statement was sent by this process's monotonic clock (taken *before* sending, so
    /// the guard never believes itself held longer than the store does).
    ///
    /// This is how a provider written outside this crate returns a guard from
    /// [`LockProvider::lock`](crate::LockProvider::lock); see [`Lease`] and the project's
    /// "Writing a provider" guide.
    pub fn new(
        config: &LockConfiguration,
        token: i64,
        lease: Arc<dyn Lease>,
        sent_at: Instant,
    ) -> Self {
        Self {
            name: config.name().to_owned(),
            token,
            at_least: config.lock_at_least_for(),
            slack: config.lock_at_most_for() - config.lock_at_least_for(),
            held_until: later(sent_at, config.lock_at_most_for()),
            lease,
            released: false,
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of this acquisition: strictly greater than every earlier token of this
    /// lock name.
    pub fn fencing_token(&self) -> i64 {
        self.token
    }

    /// Extends the lock: it is now held until `now + lock_at_most_for` and, once unlocked, kept
    /// at least until `now + lock_at_least_for` (and never shorter than the original
    /// `lock_at_least_for`). Both are rounded up to whole milliseconds, as in
    /// [`LockConfiguration::new`].
    ///
    /// Returns `Ok(false)` when the lock is no longer held by this guard: it expired, or someone
    /// else took it. The job should stop.
    pub async fn extend(
        &mut self,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<bool> {
        let (at_most, at_least) =
            validate_durations(&self.name, lock_at_most_for, lock_at_least_for)?;
        let sent_at = Instant::now();
        let held = self.lease.extend(&self.name, self.token, at_most).await?;
        if held {
            self.renewed(sent_at, at_most, at_least);
        } else {
            tracing::warn!(lock = %self.name, token = self.token, "extend refused: the lock is no longer held by this guard");
        }
        Ok(held)
    }

    /// Releases the lock: `locked_until` becomes `max(now, locked_at + lock_at_least_for)`, so
    /// `lock_at_least_for` holds even for a job that finished sooner.
    ///
    /// Returns whether the row still carried this guard's token. `false` means the lock had
    /// expired and been taken by another holder, whose lock this call left untouched. An `Err`
    /// (the database did not answer within 30 s, or refused) leaves the release to a background
    /// task that retries until the lease would have run out (see [Releasing](Self#releasing)).
    pub async fn unlock(mut self) -> Result<bool> {
        let release = self.release();
        match release.attempt().await {
            Ok(still_ours) => {
                if !still_ours {
                    tracing::warn!(lock = %release.name, token = release.token, "unlock found the lock taken over by another holder; left it alone");
                }
                Ok(still_ours)
            }
            Err(error) => {
                tracing::warn!(lock = %release.name, token = release.token, %error, "unlock failed; retrying in the background until the lease runs out");
                release.retry_in_background();
                Err(error)
            }
        }
    }

    /// What keep-alive needs to renew this lock without borrowing the guard.
    /// Lets the lock run out at its lease instead of releasing it: for a lock whose lease is
    /// over already when it is answered (a fleet's 1 ms share marker), a release would be a
    /// statement for nothing.
    pub(crate) fn expire(mut self) {
        self.released = true;
    }

    pub(crate) fn renewer(&self) -> Renewer {
        Renewer {
            lease: Arc::clone(&self.lease),
            name: self.name.clone(),
            token: self.token,
        }
    }

    /// Records a successful extension sent at `sent_at` (by [`extend`](Self::extend) or by
    /// keep-alive through a [`Renewer`]).
    pub(crate) fn renewed(&mut self, sent_at: Instant, at_most: Duration, at_least: Duration) {
        self.slack = at_most - at_least;
        self.held_until = later(sent_at, at_most);
    }

    /// Marks the guard released and hands what the unlock needs to a [`Release`].
    fn release(&mut self) -> Release {
        self.released = true;
        Release {
            lease: Arc::clone(&self.lease),
            name: std::mem::take(&mut self.name),
            token: self.token,
            at_least: self.at_least,
            slack: self.slack,
            held_until: self.held_until,
        }
    }
}

/// `instant + duration`, or far in the future where that does not fit.
fn later(instant: Instant, duration: Duration) -> Instant {
    instant
        .checked_add(duration)
        .unwrap_or_else(|| instant + Duration::from_secs(100 * 365 * 86_400))
}

/// Renews one held lock: the statement of [`LockGuard::extend`], for keep-alive.
pub(crate) struct Renewer {
    lease: Arc<dyn Lease>,
    name: String,
    token: i64,
}

impl Renewer {
    /// `locked_until = now + at_most` while the token still holds; whether it did.
    pub(crate) async fn extend(&self, at_most: Duration) -> Result<bool> {
        self.lease.extend(&self.name, self.token, at_most).await
    }
}

/// Everything an unlock needs once its guard is gone.
struct Release {
    lease: Arc<dyn Lease>,
    name: String,
    token: i64,
    at_least: Duration,
    slack: Duration,
    held_until: Instant,
}

impl Release {
    /// One unlock statement, bounded by [`UNLOCK_TIMEOUT`]; a failure is counted.
    async fn attempt(&self) -> Result<bool> {
        let unlock = async {
            match self.lease.releases() {
                Some(releases) => releases.unlock(&self.lease, self.unlock()).await,
                None => {
                    self.lease
                        .unlock(&self.name, self.token, self.at_least, self.slack)
                        .await
                }
            }
        };
        let outcome = match tokio::time::timeout(UNLOCK_TIMEOUT, unlock).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::Timeout {
                operation: format!("unlock lock {:?}", self.name),
                after: UNLOCK_TIMEOUT,
            }),
        };
        if outcome.is_err() {
            metrics::counter!(crate::metric_names::UNLOCK_FAILED, "lock" => self.name.clone())
                .increment(1);
        }
        outcome
    }

    /// What the statement needs.
    fn unlock(&self) -> Unlock {
        Unlock {
            name: self.name.clone(),
            token: self.token,
            at_least: self.at_least,
            slack: self.slack,
        }
    }

    /// Retries the unlock in a background task, with backoff from 100 ms to 5 s, until it
    /// succeeds, or the lease has run out (the lock is then free anyway), or
    /// [`UNLOCK_RETRY_LIMIT`] has passed (the lock then expires at its lease). Without a Tokio
    /// runtime the lock expires on its own.
    fn retry_in_background(self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(lock = %self.name, token = self.token, "no Tokio runtime to release the lock in: it expires at its lease");
            return;
        };
        let until = self
            .held_until
            .min(later(Instant::now(), UNLOCK_RETRY_LIMIT));
        runtime.spawn(async move {
            let mut backoff = Duration::from_millis(100);
            loop {
                if Instant::now() + backoff >= until {
                    tracing::warn!(lock = %self.name, token = self.token, "gave up releasing the lock: its lease has run out (or an hour of retries); it expires at its lease");
                    metrics::counter!(crate::metric_names::UNLOCK_RETRIED, "lock" => self.name.clone(), "outcome" => "expired")
                        .increment(1);
                    return;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
                match self.attempt().await {
                    Ok(_) => {
                        tracing::info!(lock = %self.name, token = self.token, "lock released by a background retry");
                        metrics::counter!(crate::metric_names::UNLOCK_RETRIED, "lock" => self.name.clone(), "outcome" => "released")
                            .increment(1);
                        return;
                    }
                    Err(error) => {
                        tracing::debug!(lock = %self.name, token = self.token, %error, "background unlock failed; retrying");
                    }
                }
            }
        });
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let release = self.release();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                tracing::debug!(lock = %release.name, token = release.token, "guard dropped without unlock: releasing in the background");
                runtime.spawn(async move {
                    if let Err(error) = release.attempt().await {
                        tracing::warn!(lock = %release.name, token = release.token, %error, "background unlock failed; retrying until the lease runs out");
                        release.retry_in_background();
                    }
                });
            }
            Err(_) => {
                tracing::warn!(lock = %release.name, token = release.token, "guard dropped outside a Tokio runtime: the lock expires at lock_at_most_for");
            }
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("fencing_token", &self.token)
            .finish_non_exhaustive()
    }
}
