//! [`LeaderElector`]: one instance of many leads, through a lease kept in the lock table (or in
//! Redis) as an ordinary lock; the others stand by and take over when the lease lapses or the
//! leader resigns. What [`SchedulerBuilder::leader_election`](crate::scheduler::SchedulerBuilder::leader_election)
//! uses so that only the leader fires ticks, and what an application can use for singleton work
//! of its own.
//!
//! The reasons for the defaults (15 s lease, 10 s renew deadline, 2 s retry period) and for
//! keeping the incumbent as leader are in `docs/adr/0008-leader-election.md`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::LockConfiguration;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::provider::LockProvider;

/// Which lease an election uses and how it keeps it: the lock `name`, the `lease` it is taken
/// and renewed for, the `renew_deadline` after which a leader that could not renew steps down,
/// and the `retry_period` between attempts (a follower's to take the lease, the leader's to
/// renew it).
///
/// The defaults are Kubernetes' leader election's: 15 s, 10 s and 2 s.
/// [`timing`](Self::timing) requires `lease > renew_deadline > 1.2 × retry_period`, so a leader
/// steps down (by its own monotonic clock) before its lease can lapse in the database, and has
/// at least one renewal attempt within each deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElection {
    config: LockConfiguration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl LeaderElection {
    /// Lease of a new election (what the leader's lock is taken and renewed for).
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);
    /// How long a leader that cannot renew keeps leading, counted from its last renewal.
    pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
    /// Time between a follower's attempts to take the lease, and between the leader's renewals.
    pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

    /// An election over the lock `name` with the default timing. The name follows the rules
    /// of every lock name ([`LockConfiguration::new`]); it must not be the name of a lock a
    /// job takes.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        Ok(Self {
            config: LockConfiguration::new(name, Self::DEFAULT_LEASE, Duration::ZERO)?,
            renew_deadline: Self::DEFAULT_RENEW_DEADLINE,
            retry_period: Self::DEFAULT_RETRY_PERIOD,
        })
    }

    /// Sets the lease, the renew deadline and the retry period together.
    ///
    /// [`Error::InvalidLeaderElection`] unless `lease > renew_deadline > 1.2 × retry_period`
    /// and `retry_period` is at least 10 ms; the lease itself is checked as every
    /// `lock_at_most_for` is (rounded up to whole milliseconds, at most
    /// [`MAX_LOCK_DURATION`](crate::settings::MAX_LOCK_DURATION)).
    pub fn timing(
        mut self,
        lease: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self> {
        let invalid = |reason: String| {
            Err(Error::InvalidLeaderElection {
                name: self.config.name().to_owned(),
                reason,
            })
        };
        let show = |d: Duration| humantime::format_duration(d).to_string();
        if retry_period < Duration::from_millis(10) {
            return invalid(format!(
                "retry_period {} is shorter than 10ms",
                show(retry_period)
            ));
        }
        if renew_deadline.as_secs_f64() <= 1.2 * retry_period.as_secs_f64() {
            return invalid(format!(
                "renew_deadline {} must be more than 1.2 × retry_period {}, so a leader has more than one renewal attempt before it steps down",
                show(renew_deadline),
                show(retry_period)
            ));
        }
        if lease <= renew_deadline {
            return invalid(format!(
                "lease {} must be longer than renew_deadline {}, so a leader steps down before its lease can lapse",
                show(lease),
                show(renew_deadline)
            ));
        }
        self.config = LockConfiguration::new(self.config.name(), lease, Duration::ZERO)?;
        self.renew_deadline = renew_deadline;
        self.retry_period = retry_period;
        Ok(self)
    }

    /// The lock name of the lease.
    pub fn name(&self) -> &str {
        self.config.name()
    }

    /// The lease taken and renewed.
    pub fn lease(&self) -> Duration {
        self.config.lock_at_most_for()
    }

    /// How long a leader that cannot renew keeps leading after its last renewal.
    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    /// Time between attempts.
    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }
}

/// Whether this instance leads, and with which term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// Another instance leads, or none does yet (or this elector has stopped).
    Follower,
    /// This instance leads.
    Leader {
        /// The fencing token of this term: the lease's lock token, greater than that of every
        /// earlier term of the election. Pass it with writes that only the leader may make.
        fencing_token: i64,
    },
}

impl Leadership {
    /// Whether this is [`Leadership::Leader`].
    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader { .. })
    }

    /// The term's fencing token while leading.
    pub fn fencing_token(&self) -> Option<i64> {
        match self {
            Leadership::Leader { fencing_token } => Some(*fencing_token),
            Leadership::Follower => None,
        }
    }
}

/// Takes part in a [`LeaderElection`] until resigned: a task that takes the lease when it is
/// free and renews it while leading.
///
/// ```no_run
/// # #[cfg(feature = "sqlite")]
/// # async fn demo() -> shedlock::Result<()> {
/// use shedlock::SqliteLockProvider;
/// use shedlock::leader::{LeaderElection, LeaderElector};
///
/// let provider = SqliteLockProvider::connect("locks.db").await?;
/// provider.migrate().await?;
/// let elector = LeaderElector::start(provider, LeaderElection::new("reports-leader")?);
/// let mut changes = elector.subscribe();
/// loop {
///     let token = elector.until_leader().await;
///     println!("leading, term {token}");
///     // ... singleton work, passing `token` along with its writes, until:
///     changes.wait_for(|l| !l.is_leader()).await.ok();
/// #   break;
/// }
/// elector.resign().await;
/// # Ok(()) }
/// ```
///
/// # How it elects
///
/// - A follower tries to take the lease (a lock with `lock_at_most_for` = the lease and no
///   `lock_at_least_for`) every retry period. Whoever takes it leads; its term's fencing token
///   is the lock's token.
/// - The leader renews the lease every retry period (an extend guarded by its token). If a
///   renewal is refused (the lease was lost), it steps down at once; if renewals fail (the
///   database does not answer), it keeps leading until the renew deadline after its last
///   renewal, then steps down. The deadline is shorter than the lease, so it has stepped down
///   by its own clock before another instance can take the lease by the database's.
/// - The incumbent keeps leading while it renews; no instance takes over a live lease, however
///   old or new it is.
/// - [`resign`](Self::resign) releases the lease at once, so a follower takes over within its
///   retry period instead of after the lease. Dropping every handle resigns too.
///
/// Two instances may both believe they lead for a moment only if a leader's process stalls
/// (a pause longer than the renew deadline) and then acts before its task notices; whatever
/// must never happen twice should check the term's token, as the scheduler's tick claims do.
#[derive(Clone)]
pub struct LeaderElector {
    shared: Arc<Shared>,
}

/// What the handles share. Dropping the last one closes `stop`, which the task takes as a
/// resignation.
struct Shared {
    election: LeaderElection,
    state: watch::Receiver<Leadership>,
    stop: watch::Sender<bool>,
    /// The election task, awaited by `resign`.
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl LeaderElector {
    /// Starts taking part in `election` through `provider`, in a task on the current Tokio
    /// runtime (so it must be called from within one).
    pub fn start(provider: impl LockProvider + 'static, election: LeaderElection) -> Self {
        Self::start_arc(Arc::new(provider), election)
    }

    /// [`start`](Self::start) with a shared provider.
    pub(crate) fn start_arc(provider: Arc<dyn LockProvider>, election: LeaderElection) -> Self {
        let (state_tx, state) = watch::channel(Leadership::Follower);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(elect(provider, election.clone(), state_tx, stop_rx));
        Self {
            shared: Arc::new(Shared {
                election,
                state,
                stop,
                task: tokio::sync::Mutex::new(Some(task)),
            }),
        }
    }

    /// Whether this instance leads now.
    pub fn is_leader(&self) -> bool {
        self.shared.state.borrow().is_leader()
    }

    /// This instance's leadership now.
    pub fn leadership(&self) -> Leadership {
        *self.shared.state.borrow()
    }

    /// The current term's fencing token while this instance leads.
    pub fn fencing_token(&self) -> Option<i64> {
        self.leadership().fencing_token()
    }

    /// A watch of this instance's leadership: it changes when this instance becomes leader
    /// (with the term's token) and when it steps down or resigns.
    ///
    /// Do not keep a `Ref` of it (what `borrow()` and `wait_for()` return) across an
    /// `.await`: the elector cannot record a change while one is held. Copy the
    /// [`Leadership`] out (it is `Copy`).
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.shared.state.clone()
    }

    /// Waits until this instance leads and returns the term's fencing token. Never returns
    /// once the elector has resigned.
    pub async fn until_leader(&self) -> i64 {
        let mut state = self.shared.state.clone();
        let leading = state.wait_for(Leadership::is_leader).await;
        match leading.map(|l| l.fencing_token()) {
            Ok(Some(token)) => token,
            _ => std::future::pending().await,
        }
    }

    /// The election this elector takes part in.
    pub fn election(&self) -> &LeaderElection {
        &self.shared.election
    }

    /// Stops taking part: releases the lease if this instance leads (a follower takes over
    /// within its retry period) and returns once the release was answered (or failed; then
    /// the lease lapses on its own). Later calls return at once.
    pub async fn resign(&self) {
        self.shared.stop.send_replace(true);
        let task = self.shared.task.lock().await.take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

impl fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderElector")
            .field("election", &self.shared.election)
            .field("leadership", &self.leadership())
            .finish()
    }
}

/// The election task: follows until it takes the lease, leads while it renews it, and again;
/// until `stop` turns true or closes.
async fn elect(
    provider: Arc<dyn LockProvider>,
    election: LeaderElection,
    state: watch::Sender<Leadership>,
    mut stop: watch::Receiver<bool>,
) {
    let name = election.name().to_owned();
    loop {
        let Some((guard, taken_at)) = follow(provider.as_ref(), &election, &mut stop).await else {
            return;
        };
        let token = guard.fencing_token();
        state.send_replace(Leadership::Leader {
            fencing_token: token,
        });
        metrics::gauge!(crate::metric_names::LEADER, "election" => name.clone()).set(1.0);
        tracing::info!(election = %name, token, "became leader");
        let (end, guard) = lead(guard, taken_at, &election, &mut stop).await;
        // This instance stops leading before the lease is released (or dropped, which releases
        // it in the background): no moment in which a successor leads while it still does.
        state.send_replace(Leadership::Follower);
        metrics::gauge!(crate::metric_names::LEADER, "election" => name.clone()).set(0.0);
        match end {
            LeadEnd::Resigned => {
                let released = release(guard, &name).await;
                tracing::info!(election = %name, token, released, "resigned");
                return;
            }
            LeadEnd::Lost => {
                drop(guard);
                tracing::warn!(election = %name, token, "lost the lease (taken over or expired): stepped down");
            }
            LeadEnd::Deadline(error) => {
                drop(guard); // releases in the background, in case the database answers again
                tracing::warn!(election = %name, token, error = %error,
                    "could not renew the lease within the renew deadline: stepped down");
            }
        }
        // Back to following, after a retry period.
        if sleep_or_stop(election.retry_period, &mut stop).await {
            return;
        }
    }
}

/// Tries to take the lease every retry period; the guard and when its acquire was sent, or
/// `None` when stopped.
async fn follow(
    provider: &dyn LockProvider,
    election: &LeaderElection,
    stop: &mut watch::Receiver<bool>,
) -> Option<(LockGuard, Instant)> {
    let mut failing = false;
    loop {
        if stopped(stop) {
            return None;
        }
        let sent = Instant::now();
        match tokio::time::timeout(election.renew_deadline, provider.lock(&election.config)).await {
            Ok(Ok(Some(guard))) => {
                if stopped(stop) {
                    release(guard, election.name()).await;
                    return None;
                }
                return Some((guard, sent));
            }
            Ok(Ok(None)) => failing = false,
            Ok(Err(error)) => {
                if !failing {
                    tracing::warn!(election = election.name(), %error, "could not try to take the leader lease; retrying every retry period");
                }
                failing = true;
            }
            Err(_) => {
                if !failing {
                    tracing::warn!(
                        election = election.name(),
                        "taking the leader lease got no answer within the renew deadline; retrying"
                    );
                }
                failing = true;
            }
        }
        if sleep_or_stop(election.retry_period, stop).await {
            return None;
        }
    }
}

/// How a term ended.
enum LeadEnd {
    /// Stopped by `resign` (or the last handle dropped).
    Resigned,
    /// A renewal was refused: the lease is no longer ours.
    Lost,
    /// No renewal succeeded within the renew deadline; the last error.
    Deadline(String),
}

/// Renews the lease every retry period until it is lost, the renew deadline passes without a
/// renewal, or the elector stops; how it ended, and the lease's guard.
async fn lead(
    mut guard: LockGuard,
    mut renewed_at: Instant,
    election: &LeaderElection,
    stop: &mut watch::Receiver<bool>,
) -> (LeadEnd, LockGuard) {
    let mut last_error = String::from("no renewal attempted");
    loop {
        let deadline = renewed_at + election.renew_deadline;
        let next = (Instant::now() + election.retry_period).min(deadline);
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = stop_requested(stop) => return (LeadEnd::Resigned, guard),
        }
        if Instant::now() >= deadline {
            return (LeadEnd::Deadline(last_error), guard);
        }
        let sent = Instant::now();
        let renewal = guard.extend(election.lease(), Duration::ZERO);
        match tokio::time::timeout_at(deadline, renewal).await {
            Ok(Ok(true)) => renewed_at = sent,
            Ok(Ok(false)) => return (LeadEnd::Lost, guard),
            Ok(Err(error)) => last_error = error.to_string(),
            Err(_) => {
                let error = "the renewal got no answer".to_owned();
                return (LeadEnd::Deadline(error), guard);
            }
        }
    }
}

/// Releases the lease; whether the release was answered.
async fn release(guard: LockGuard, election: &str) -> bool {
    match guard.unlock().await {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(election, %error, "releasing the leader lease failed; it is retried in the background and lapses at its lease anyway");
            false
        }
    }
}

/// Whether the elector was told to stop (or every handle is gone).
fn stopped(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

/// Returns once the elector is told to stop (or every handle is gone).
async fn stop_requested(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Sleeps `period`; `true` when told to stop meanwhile.
async fn sleep_or_stop(period: Duration, stop: &mut watch::Receiver<bool>) -> bool {
    let slept = tokio::select! {
        () = tokio::time::sleep(period) => true,
        () = stop_requested(stop) => false,
    };
    !slept || stopped(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn defaults_are_kubernetes_and_satisfy_the_rule() {
        let e = LeaderElection::new("leader").unwrap();
        assert_eq!(
            (e.lease(), e.renew_deadline(), e.retry_period()),
            (15 * S, 10 * S, 2 * S)
        );
        let again = e
            .clone()
            .timing(e.lease(), e.renew_deadline(), e.retry_period())
            .unwrap();
        assert_eq!(again, e);
    }

    #[test]
    fn timing_that_contradicts_itself_is_refused_with_the_reason() {
        let e = LeaderElection::new("leader").unwrap();
        let cases = [
            (
                10 * S,
                10 * S,
                2 * S,
                "lease 10s must be longer than renew_deadline 10s",
            ),
            (
                15 * S,
                2400 * MS,
                2 * S,
                "renew_deadline 2s 400ms must be more than 1.2 × retry_period 2s",
            ),
            (
                15 * S,
                10 * S,
                5 * MS,
                "retry_period 5ms is shorter than 10ms",
            ),
        ];
        for (lease, renew, retry, reason) in cases {
            let error = e.clone().timing(lease, renew, retry).unwrap_err();
            let text = error.to_string();
            assert!(
                text.starts_with("invalid leader election \"leader\": ") && text.contains(reason),
                "{text}"
            );
        }
        let error = e.clone().timing(Duration::MAX, 10 * S, 2 * S).unwrap_err();
        assert!(error.to_string().contains("lock_at_most_for"), "{error}");
        assert!(LeaderElection::new("").is_err());
    }

    #[test]
    fn leadership_reports_its_token() {
        assert_eq!(Leadership::Follower.fencing_token(), None);
        let leader = Leadership::Leader { fencing_token: 7 };
        assert!(leader.is_leader() && leader.fencing_token() == Some(7));
    }
}
