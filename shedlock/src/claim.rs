//! The scheduler's claim of a run's lock, made before the run starts, and how the run's lock
//! call takes it: the pre-claim hand-off, in one place.
//!
//! When jobs are due at one instant, the scheduler claims their ticks together
//! ([`LockProvider::lock_many`], in `scheduler/fire.rs`) and hands each run the answer for its
//! lock, a [`PreClaim`]. The answer reaches the run's lock call one of two ways:
//!
//! - **as an argument**: a [`Job::locked`](crate::Job::locked) run and a `#[scheduled]`
//!   function's with a declared lock (`macro_support::run_claimed`) pass it to
//!   `run::hold_claimed`, which keeps it only if it is [`mine`];
//! - **through the run's scope**: a [`Job::new`](crate::Job::new) function takes its own lock;
//!   its answer waits in the run's [`Slot`], and the lock call (`run::hold`) [`take`]s it.
//!
//! Both ask one rule, [`PreClaim::answers`]: the claim answers a lock call on the same provider
//! (by address), for the same lock name and the same tick. A claim that answers the call
//! stands in for its acquire ([`PreClaim::into_answer`]); one that does not is left alone
//! (in the slot, for a later call of the run) or dropped (an argument: its won lock's guard
//! releases it). A won lock no call took is released when the run ends
//! ([`Slot::release_unused`]); its tick stays claimed.

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::config::LockConfiguration;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::provider::LockProvider;

tokio::task_local! {
    static SLOT: Slot;
}

/// A lock the scheduler claimed for a run before calling the job: one answer of a
/// [`LockProvider::lock_many`] for the ticks due at one instant, waiting for the run's own lock
/// call to take it.
pub(crate) struct PreClaim {
    /// The provider that answered; only a lock call on this same provider takes the answer.
    pub(crate) provider: Arc<dyn LockProvider>,
    /// The configuration sent: name, lease (after keep-alive's shortening), at-least, tick.
    pub(crate) sent: LockConfiguration,
    /// When the claim was sent: a won lock's lease counts from then.
    pub(crate) sent_at: Instant,
    /// What the provider answered for this lock: what [`LockProvider::lock`] would have.
    pub(crate) answer: Result<Option<LockGuard>>,
    /// Under overlap `cancel_other`, turns true when a newer tick asks the run to stop: the
    /// run's lock counts as lost from then on (see `run::hold_claimed`).
    pub(crate) cancel: Option<tokio::sync::watch::Receiver<bool>>,
}

impl std::fmt::Debug for PreClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreClaim")
            .field("sent", &self.sent)
            .field("answer", &self.answer)
            .finish_non_exhaustive()
    }
}

impl PreClaim {
    /// **The rule** for "is this claim mine": it answers a lock call for `config` on
    /// `provider` when it was made on that same provider (by address: the scheduler runs each
    /// job inside a scope of its own `Arc`), for the same lock name, and for the same tick. A
    /// call without a tick (a lock taken by hand inside a run) is never answered by a claim.
    pub(crate) fn answers(&self, provider: &dyn LockProvider, config: &LockConfiguration) -> bool {
        config.tick().is_some()
            && std::ptr::addr_eq(Arc::as_ptr(&self.provider), provider)
            && self.sent.name() == config.name()
            && self.sent.tick() == config.tick()
    }

    /// The answer of this claim, as `provider.lock(acquire)` would have given it, and the
    /// instant the lease counts from.
    ///
    /// When the run's lock asks for another lease or `lock_at_least_for` than the scheduler
    /// sent (the job's body changed its configuration since the scheduler learned it, or
    /// [`Job::with_lock`](crate::Job::with_lock) says otherwise), a won lock is extended at once
    /// to the run's lease and at-least, so keep-alive, expiry and the unlock follow the run's
    /// configuration. (The claim's own at-least, counted from the acquire, still holds too: an
    /// unlock keeps the lock until the later of the two.) An extension refused (the lock was
    /// lost in between) makes the tick a skip, as a refused acquire does; one that fails is the
    /// run's error.
    pub(crate) async fn into_answer(
        self,
        acquire: &LockConfiguration,
    ) -> Result<(Option<LockGuard>, Instant)> {
        let Some(mut guard) = self.answer? else {
            return Ok((None, self.sent_at));
        };
        if self.sent.lock_at_most_for() == acquire.lock_at_most_for()
            && self.sent.lock_at_least_for() == acquire.lock_at_least_for()
        {
            return Ok((Some(guard), self.sent_at));
        }
        let sent_at = Instant::now();
        if guard
            .extend(acquire.lock_at_most_for(), acquire.lock_at_least_for())
            .await?
        {
            tracing::debug!(
                lock = acquire.name(),
                token = guard.fencing_token(),
                "the run asked for another lease than the scheduler claimed: extended to it"
            );
            Ok((Some(guard), sent_at))
        } else {
            tracing::warn!(
                lock = acquire.name(),
                token = guard.fencing_token(),
                "the lock the scheduler claimed for this run was lost before the run took it: skipped"
            );
            Ok((None, sent_at))
        }
    }
}

/// The claim handed to a run as an argument, kept if it [`answers`](PreClaim::answers) the lock
/// call for `config` on `provider`. One that does not is dropped, which releases a won lock
/// (its guard's drop), and the call takes its lock itself.
pub(crate) fn mine(
    claim: Option<PreClaim>,
    provider: &dyn LockProvider,
    config: &LockConfiguration,
) -> Option<PreClaim> {
    let claim = claim?;
    if claim.answers(provider, config) {
        return Some(claim);
    }
    tracing::debug!(lock = config.name(), tick = ?config.tick(), claimed = claim.sent.name(),
        claimed_tick = ?claim.sent.tick(),
        "the scheduler's claim is not for this lock call: dropped, the lock is taken as by hand");
    None
}

/// Where a [`Job::new`](crate::Job::new) run's claim waits for its lock call; shared between the
/// run's scope and the scheduler, which releases a won lock that the run did not take.
#[derive(Debug, Clone)]
pub(crate) struct Slot(Arc<Mutex<Option<PreClaim>>>);

impl Slot {
    /// A slot holding `claim` (none: the scheduler did not claim this run's lock).
    pub(crate) fn new(claim: Option<PreClaim>) -> Self {
        Self(Arc::new(Mutex::new(claim)))
    }

    /// Runs `future` with this slot as the one its lock calls may [`take`] from.
    pub(crate) async fn scope<F: Future>(&self, future: F) -> F::Output {
        SLOT.scope(self.clone(), future).await
    }

    /// Takes the claim out if it [`answers`](PreClaim::answers) the call; otherwise leaves it
    /// for a later call of the run.
    fn take_for(
        &self,
        provider: &dyn LockProvider,
        config: &LockConfiguration,
    ) -> Option<PreClaim> {
        let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref()?.answers(provider, config) {
            slot.take()
        } else {
            None
        }
    }

    /// Whether a claim still waits here.
    #[cfg(test)]
    pub(crate) fn is_taken(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    /// Releases a lock the scheduler claimed for a run that did not take it (the tick stays
    /// claimed).
    pub(crate) async fn release_unused(&self) {
        let unused = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(PreClaim {
            answer: Ok(Some(guard)),
            ..
        }) = unused
        else {
            return;
        };
        let (name, token) = (guard.name().to_owned(), guard.fencing_token());
        tracing::info!(lock = %name, token,
            "the run did not take the lock claimed for its tick: released (the tick stays claimed)");
        if let Err(error) = guard.unlock().await {
            tracing::warn!(lock = %name, token, %error, "unlock failed; retrying in the background until the lease runs out");
        }
    }
}

/// The claim waiting in this run's [`Slot`], if it [`answers`](PreClaim::answers) the lock call
/// for `config` on `provider`. Taken out, so a second lock call in the same run goes to the
/// provider.
pub(crate) fn take(provider: &dyn LockProvider, config: &LockConfiguration) -> Option<PreClaim> {
    SLOT.try_with(|slot| slot.take_for(provider, config))
        .ok()
        .flatten()
}
