//! [`SchedulerBuilder`]: a scheduler's settings, checked and turned into its state.

use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;

use super::Scheduler;
use super::capacity::Capacity;
use super::control::{Control, ScheduleWatch};
use super::fleet::Fleet;
use super::job::MisfirePolicy;
use super::misfire::{Backlog, Misfire};
use super::registry::Jobs;
use super::state::Inner;
use crate::clock_sync::DbClock;
use crate::history_writer::HistoryWriter;
use crate::leader::LeaderElection;
use crate::observe::{Observer, RunHistory, SchedulerListener};
use crate::provider::{LockProvider, RunStore};
use crate::schedules::ScheduleStore;
use crate::settings::AppClock;

/// Settings for a [`Scheduler`] over the provider `P`.
#[derive(Debug)]
#[must_use = "call .build()"]
pub struct SchedulerBuilder<P> {
    provider: Arc<P>,
    clock: AppClock,
    clock_check_every: Duration,
    misfire_grace: Duration,
    misfire_policy: MisfirePolicy,
    shutdown_timeout: Duration,
    run_history: Option<(Arc<dyn RunStore>, RunHistory)>,
    listeners: Vec<Arc<dyn SchedulerListener>>,
    #[cfg(feature = "webhook")]
    webhook: Option<crate::scheduler::Webhook>,
    election: Option<LeaderElection>,
    max_concurrent_runs: Option<usize>,
    fleet: String,
    help_after: Duration,
    schedules: Option<(Arc<dyn ScheduleStore>, ScheduleWatch)>,
}

impl fmt::Debug for dyn SchedulerListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SchedulerListener")
    }
}

impl<P: LockProvider + 'static> SchedulerBuilder<P> {
    /// The default settings over `provider` ([`Scheduler::builder`]): the schedule watch is
    /// on when the provider keeps schedules ([`LockProvider::schedule_store`]).
    pub(super) fn new(provider: P) -> Self {
        let provider = Arc::new(provider);
        let schedules = Arc::clone(&provider)
            .schedule_store()
            .map(|store| (store, ScheduleWatch::default()));
        Self {
            provider,
            clock: AppClock::system(),
            clock_check_every: Duration::from_secs(60),
            misfire_grace: Duration::from_secs(300),
            misfire_policy: MisfirePolicy::default(),
            shutdown_timeout: Duration::from_secs(30),
            run_history: None,
            listeners: Vec::new(),
            #[cfg(feature = "webhook")]
            webhook: None,
            election: None,
            max_concurrent_runs: None,
            fleet: "default".to_owned(),
            help_after: Duration::from_millis(250),
            schedules,
        }
    }

    /// Turns the schedule watch off: this instance neither reads the schedules kept in the
    /// store (an operator's pause, new cron or "run now" does not reach it) nor registers its
    /// jobs there. On by default where the provider keeps schedules (see
    /// [`schedules`](Self::schedules)); over a provider that keeps none (etcd) it is off
    /// anyway.
    pub fn without_schedules(mut self) -> Self {
        self.schedules = None;
        self
    }

    /// How old a missed tick may be and still run at start-up (default 5 minutes; zero turns
    /// catch-up off).
    pub fn misfire_grace(mut self, grace: Duration) -> Self {
        self.misfire_grace = grace;
        self
    }

    /// What happens to ticks not fired on time, for jobs without a policy of their own
    /// ([`Job::misfire_policy`](crate::Job::misfire_policy)): [`MisfirePolicy::Latest`] by default (the latest missed tick
    /// within the grace runs at start-up, when a job is added and when an instance becomes
    /// leader); [`MisfirePolicy::All`] runs every one within the grace, oldest first, each
    /// once fleet-wide; [`MisfirePolicy::Skip`] none.
    pub fn misfire_policy(mut self, policy: MisfirePolicy) -> Self {
        self.misfire_policy = policy;
        self
    }

    /// How long shutdown waits for running jobs before cancelling them (default 30 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// This instance's clock (default: the system clock), to stand for a machine whose clock is
    /// wrong: the scheduler measures this clock's offset to the provider's (the database's)
    /// and fires ticks by the database's time, and the lock decides expiry by the database's
    /// clock. Feature `test-util`.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn clock(mut self, clock: AppClock) -> Self {
        self.clock = clock;
        self
    }

    /// How often the offset between this instance's clock and the database's is measured
    /// (default 1 minute; at least 1 second). It is also measured when the scheduler starts;
    /// each measurement is logged when it changed, and exposed as the
    /// [`metric_names::CLOCK_OFFSET`](crate::metric_names::CLOCK_OFFSET) gauge.
    pub fn clock_check_every(mut self, every: Duration) -> Self {
        self.clock_check_every = every.max(Duration::from_secs(1));
        self
    }

    /// Adds a [`SchedulerListener`]; every listener hears every job's ticks, in the order
    /// added.
    pub fn listener(mut self, listener: impl SchedulerListener) -> Self {
        self.listeners.push(Arc::new(listener));
        self
    }

    /// Delivers every alert the ledger raises or recovers to `webhook` (feature `webhook`),
    /// signed, retried, and kept as a dead letter when every try fails (see
    /// [`Webhook`](crate::scheduler::Webhook)). Alerts need the run history
    /// ([`history`](Self::history)).
    #[cfg(feature = "webhook")]
    pub fn alert_webhook(mut self, webhook: crate::scheduler::Webhook) -> Self {
        self.webhook = Some(webhook);
        self
    }

    /// Only the leader of `election` fires ticks; the other instances keep their jobs
    /// registered and planned, fire nothing, and take over when the leader's lease lapses or it
    /// resigns (on [`shutdown`](Scheduler::shutdown)). Off by default: every instance fires
    /// every tick and the tick's claim picks the one that runs it.
    ///
    /// The tick claims stay on: during a hand-over two instances may both fire for a moment,
    /// and each tick still runs once. An instance that becomes leader runs each job's latest
    /// past tick within the misfire grace that no instance ran (the tick the old leader did
    /// not fire). [`Scheduler::leader_elector`] gives the elector (whether this instance
    /// leads, the term's fencing token). See [`LeaderElector`](crate::leader::LeaderElector) for how it elects.
    pub fn leader_election(mut self, election: LeaderElection) -> Self {
        self.election = Some(election);
        self
    }

    /// At most `n` job bodies run at once on this instance (default: no limit).
    ///
    /// A job due when every slot is taken is neither started nor claimed: its tick stays free
    /// for the other instances, and this instance claims it when a slot frees, oldest tick
    /// first, as long as the tick is within the [misfire grace](Self::misfire_grace) (older
    /// ones are counted in [`JobStats::misfires_skipped`](crate::scheduler::JobStats::misfires_skipped)). Each deferral is counted in
    /// [`JobStats::deferred_capacity`](crate::scheduler::JobStats::deferred_capacity) and the
    /// [`metric_names::DEFERRED`](crate::metric_names::DEFERRED) counter. If a newer tick of a
    /// waiting job comes first, the newer one takes its place. A tick skipped because the
    /// previous run is still going takes no slot. `n` of zero is taken as one.
    pub fn max_concurrent_runs(mut self, n: usize) -> Self {
        self.max_concurrent_runs = Some(n.max(1));
        self
    }

    /// The fleet this instance belongs to (default `"default"`): the instances that share each
    /// tick's jobs (see [Sharing a tick](Scheduler#sharing-a-tick)). Give services that share a
    /// lock table but not their jobs fleets of their own, so each counts only its peers.
    pub fn fleet(mut self, name: impl Into<String>) -> Self {
        self.fleet = name.into();
        self
    }

    /// How long after a tick this instance starts the due jobs of the other instances' shares
    /// that nobody took (default 250 ms; see [Sharing a tick](Scheduler#sharing-a-tick)). It
    /// reads which of them were claimed halfway through the delay.
    /// Zero turns sharing off: every instance claims every due job at once, and the first
    /// claim to arrive takes them all.
    pub fn help_after(mut self, delay: Duration) -> Self {
        self.help_after = delay;
        self
    }

    /// The scheduler (not yet started).
    pub fn build(self) -> Scheduler {
        Scheduler {
            inner: Arc::new(Inner {
                observer: Arc::new(Observer {
                    writer: self
                        .run_history
                        .as_ref()
                        .map(|(store, _)| HistoryWriter::new(Arc::clone(store))),
                    history: self.run_history,
                    listeners: self.listeners,
                    #[cfg(feature = "webhook")]
                    webhook: self.webhook,
                }),
                provider: self.provider as Arc<dyn LockProvider>,
                clock: DbClock::new(self.clock),
                clock_check_every: self.clock_check_every,
                misfire: Misfire {
                    grace: self.misfire_grace,
                    policy: self.misfire_policy,
                },
                backlog: Backlog::default(),
                shutdown_timeout: self.shutdown_timeout,
                jobs: Mutex::new(Jobs::default()),
                wake: Notify::new(),
                started: AtomicBool::new(false),
                leading: AtomicBool::new(false),
                stop_firing: watch::Sender::new(false),
                cancel_runs: watch::Sender::new(false),
                runs: Mutex::new(JoinSet::new()),
                loops: Mutex::new(JoinSet::new()),
                chores: Mutex::new(JoinSet::new()),
                // With leader election only the leader fires: nothing to share.
                fleet: Fleet::new(
                    &self.fleet,
                    if self.election.is_some() {
                        Duration::ZERO
                    } else {
                        self.help_after
                    },
                ),
                election: self.election,
                leader: OnceLock::new(),
                capacity: self.max_concurrent_runs.map(Capacity::new),
                claim_gate: Arc::new(tokio::sync::Semaphore::new(super::shed::CLAIMS_IN_FLIGHT)),
                control: self
                    .schedules
                    .map(|(store, watch)| Control::new(store, watch)),
                overlap_looks: Mutex::default(),
                after_release: Mutex::default(),
            }),
        }
    }
}

impl<P: RunStore + 'static> SchedulerBuilder<P> {
    /// Writes the run history into `<table>_runs` (see [`RunHistory`]); off by default.
    /// The table is created by the provider's `migrate()`. Only a provider that keeps a run
    /// history ([`RunStore`]) has this option.
    pub fn history(mut self, history: RunHistory) -> Self {
        self.run_history = Some((Arc::clone(&self.provider) as Arc<dyn RunStore>, history));
        self
    }
}

impl<P: ScheduleStore + 'static> SchedulerBuilder<P> {
    /// Tunes the schedule watch, which is on by default over a provider that keeps schedules
    /// (PostgreSQL, MySQL/MariaDB, SQLite, Redis; not etcd, whose provider keeps none:
    /// nothing steers its schedulers). Turn it off with
    /// [`without_schedules`](Self::without_schedules).
    ///
    /// The scheduler keeps its schedules in the store too, watched as `watch` says: an
    /// operator's override of a job (a new cron and time zone, a pause, a jitter, a retry
    /// policy) made in the store wins over the code's, on every instance, until it is cleared;
    /// jobs created in the store for a handler ([`Scheduler::handler`]) run here when this
    /// instance registered the handler; a "run now" request
    /// ([`Scheduler::trigger`], `shedlock trigger`) runs the job once, on one instance; and
    /// the whole fleet can be paused ([`FLEET_SCHEDULE`](super::FLEET_SCHEDULE)).
    ///
    /// A change reaches every instance within `watch`'s poll interval (2 s by default; one
    /// statement per poll), on PostgreSQL as soon as it is made (`LISTEN`/`NOTIFY`). Each tick
    /// is still claimed through its lock: an instance that applies a change later than another
    /// never runs a tick twice. At start the timer fires nothing before the first read of the
    /// store (or its failure, logged), so a job paused in the store does not fire on a
    /// restart. The store needs its schedules table (`migrate()`).
    ///
    /// At start the scheduler registers its code-defined jobs in the store (one write: each
    /// job's name, lock, cron, time zone, misfire policy, jitter and retry), again when a job
    /// is added or removed, and sends a heartbeat every 30 s at most
    /// ([`ScheduleWatch::forget_jobs_after`]), so `shedlock jobs`, the dashboard and
    /// `/api/v1/jobs` list every job of the fleet with the instances that carry it, and
    /// `pause`, `trigger` and the others find it by name.
    pub fn schedules(mut self, watch: ScheduleWatch) -> Self {
        self.schedules = Some((Arc::clone(&self.provider) as Arc<dyn ScheduleStore>, watch));
        self
    }
}
