//! Overlap policies hold across a fleet: two instances schedule one job whose runs outlast its
//! period, and whatever instance claims each tick, the policy decides what it does. Never a
//! tick twice, never more runs at once than the policy lets, and what waited starts later, in
//! tick order.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::scheduler::WhenFull;
use shedlock::{Job, LockConfiguration, LockContext, Overlap, Schedule, Scheduler};

use crate::db::{Opts, TestDb};

const INSTANCES: usize = 2;

/// The job's period in seconds: 2, or 3 where the store holds a lease longer than asked (etcd:
/// a second at least, and a 1 ms lease was seen held 2 s), since a tick's 1 ms mark on the
/// job's lock must be over by the next tick.
fn period<P: shedlock::LockProvider>(provider: &P) -> u64 {
    if provider.shortest_lease().is_zero() {
        2
    } else {
        3
    }
}

/// One run of the job.
#[derive(Debug, Clone)]
struct Run {
    instance: usize,
    tick: DateTime<Utc>,
    started: DateTime<Utc>,
    ended: Option<DateTime<Utc>>,
    lost: bool,
}

/// What the fleet's runs did: each run by its tick, and the most running at once.
#[derive(Default)]
struct Ledger {
    runs: Mutex<Vec<Run>>,
    now: AtomicUsize,
    peak: AtomicUsize,
}

/// Ends a run's record when its body ends or is dropped (a cancelled run's future is).
struct Ending<'a> {
    ledger: &'a Ledger,
    index: usize,
    context: LockContext,
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        self.ledger.now.fetch_sub(1, Ordering::SeqCst);
        let mut runs = self.ledger.runs.lock().unwrap();
        runs[self.index].ended = Some(Utc::now());
        runs[self.index].lost = self.context.is_lost();
    }
}

/// The job on `instance`: each run lasts `body` (or until its lock is lost) and is recorded.
fn job(instance: usize, period: u64, policy: Overlap, body: Duration, ledger: &Arc<Ledger>) -> Job {
    let lock =
        LockConfiguration::new("overlap_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let ledger = Arc::clone(ledger);
    let schedule = Schedule::parse(&format!("*/{period} * * * * *"), "UTC").unwrap();
    Job::locked(
        "overlap_job",
        schedule,
        lock,
        move |context: LockContext| {
            let ledger = Arc::clone(&ledger);
            async move {
                let now = ledger.now.fetch_add(1, Ordering::SeqCst) + 1;
                ledger.peak.fetch_max(now, Ordering::SeqCst);
                let index = {
                    let mut runs = ledger.runs.lock().unwrap();
                    runs.push(Run {
                        instance,
                        tick: context.tick().unwrap(),
                        started: Utc::now(),
                        ended: None,
                        lost: false,
                    });
                    runs.len() - 1
                };
                let _ending = Ending {
                    ledger: &ledger,
                    index,
                    context: context.clone(),
                };
                tokio::select! {
                    () = tokio::time::sleep(body) => {}
                    () = context.lost() => {}
                }
            }
        },
    )
    .overlap(policy)
}

/// Two instances run the job under `policy` for `watch` periods, each run lasting `body`
/// periods (a period is 2 s, or 3 s on a store that holds leases longer than asked), then stop; the
/// runs they made, in start order, and the most at once.
async fn fleet<D: TestDb>(
    db: &Arc<D>,
    policy: Overlap,
    body: f64,
    watch: f64,
) -> (Vec<Run>, usize) {
    let ledger = Arc::<Ledger>::default();
    let mut schedulers = Vec::new();
    let mut watch_for = Duration::ZERO;
    for instance in 0..INSTANCES {
        let provider = db
            .provider_with(Opts::own_pool().locked_by(&format!("instance-{instance}")))
            .await;
        let period = period(&provider);
        let seconds = |periods: f64| Duration::from_secs_f64(periods * period as f64);
        watch_for = seconds(watch);
        let scheduler = Scheduler::builder(provider).build();
        scheduler
            .add(job(instance, period, policy, seconds(body), &ledger))
            .unwrap();
        schedulers.push(scheduler);
    }
    for scheduler in &schedulers {
        scheduler.start();
    }
    tokio::time::sleep(watch_for).await;
    // Every instance stops at once: one after another, the others fired on while the first
    // waited for its run to end (CI19, buffer_one on the in-memory provider: a fifth run
    // started on instance 1 during instance 0's shutdown, "about one tick in 2.5 ran").
    futures_util::future::join_all(schedulers.iter().map(Scheduler::shutdown)).await;
    let mut runs = ledger.runs.lock().unwrap().clone();
    runs.sort_by_key(|run| run.started);
    (runs, ledger.peak.load(Ordering::SeqCst))
}

/// No tick ran twice.
fn once_each(runs: &[Run]) {
    let mut by_tick: BTreeMap<DateTime<Utc>, Vec<usize>> = BTreeMap::new();
    for run in runs {
        by_tick.entry(run.tick).or_default().push(run.instance);
    }
    for (tick, who) in &by_tick {
        assert_eq!(who.len(), 1, "tick {tick} ran on {who:?}: {runs:#?}");
    }
}

/// Whether a run started well after its tick: it waited for the run before it.
fn waited(run: &Run) -> bool {
    run.started - run.tick > chrono::TimeDelta::milliseconds(1500)
}

/// `buffer_one`: runs of 2.5 periods (a period is 2 s, 3 s on etcd). One run at a time fleet-wide; a tick that came
/// during a run waited and started after it (on either instance), and the ticks beyond the
/// one waiting were skipped, so fewer ran than came.
pub async fn buffer_one_starts_a_waiting_tick_when_the_run_ends<D: TestDb>(db: &Arc<D>) {
    let (runs, peak) = fleet(db, Overlap::BufferOne, 2.5, 8.5).await;
    once_each(&runs);
    assert_eq!(peak, 1, "one run at a time: {runs:#?}");
    assert!(
        runs.len() >= 3,
        "the first run and at least two waiting ticks ran: {runs:#?}"
    );
    assert!(
        runs.iter().skip(1).all(waited),
        "each run after the first waited for the one before: {runs:#?}"
    );
    assert!(
        runs.len() <= 4,
        "with one tick waiting at most, about one tick in 2.5 ran: {runs:#?}"
    );
    for pair in runs.windows(2) {
        let ended = pair[0].ended.expect("a run ended");
        assert!(pair[1].started >= ended, "no overlap: {pair:#?}");
        assert!(
            pair[1].started - ended < chrono::TimeDelta::milliseconds(1500),
            "the waiting tick started as soon as the run ended: {pair:#?}"
        );
    }
}

/// `buffer_all` with a limit of 2: runs of 1.5 periods. Every run in tick order,
/// one at a time; the waiting ticks pile up to the limit and the rest are skipped.
pub async fn buffer_all_runs_waiting_ticks_in_order<D: TestDb>(db: &Arc<D>) {
    let policy = Overlap::BufferAll { limit: 2 };
    let (runs, peak) = fleet(db, policy, 1.5, 8.5).await;
    once_each(&runs);
    assert_eq!(peak, 1, "one run at a time: {runs:#?}");
    assert!(runs.len() >= 4, "the waiting ticks ran: {runs:#?}");
    for pair in runs.windows(2) {
        assert!(pair[0].tick < pair[1].tick, "in tick order: {pair:#?}");
    }
    assert!(runs.iter().any(waited), "some tick waited: {runs:#?}");
}

/// `cancel_other`: runs that would last 30 periods. Each new tick cancels the
/// run going (its lock counts as lost) and starts once it ended: one at a time, most runs
/// cancelled.
pub async fn cancel_other_stops_the_running_run_for_the_next_tick<D: TestDb>(db: &Arc<D>) {
    let policy = Overlap::CancelOther;
    let (runs, peak) = fleet(db, policy, 30.0, 6.5).await;
    once_each(&runs);
    assert_eq!(peak, 1, "one run at a time: {runs:#?}");
    assert!(runs.len() >= 3, "new ticks started: {runs:#?}");
    let cancelled = runs.iter().filter(|run| run.lost).count();
    assert!(
        cancelled >= 2,
        "the runs before the last were cancelled: {runs:#?}"
    );
    for pair in runs.windows(2) {
        let ended = pair[0].ended.expect("a run ended");
        assert!(pair[0].lost, "a run was cancelled by the next: {pair:#?}");
        assert!(
            pair[1].started >= ended,
            "the next started after it ended: {pair:#?}"
        );
    }
}

/// `allow_all` with `max_running = 2`: runs of 2.5 periods (a period is 2 s, 3 s on etcd). Two runs at once across
/// the fleet, never three; the tick that would be the third is skipped.
pub async fn allow_all_runs_at_most_n_at_once_across_the_fleet<D: TestDb>(db: &Arc<D>) {
    let policy = Overlap::AllowAll {
        max_running: 2,
        when_full: WhenFull::Skip,
    };
    let (runs, peak) = fleet(db, policy, 2.5, 7.5).await;
    once_each(&runs);
    assert_eq!(peak, 2, "two runs at once, never three: {runs:#?}");
    assert!(runs.len() >= 4, "runs overlapped: {runs:#?}");
    // A tick never waits for a place here: none started later than a loaded machine explains.
    let late = |run: &Run| run.started - run.tick > chrono::TimeDelta::seconds(3);
    assert!(
        !runs.iter().any(late),
        "no tick waited (when_full = skip): {runs:#?}"
    );
}

/// The statements one scheduler sends for one tick of 1,000 jobs (their claim, the runs'
/// releases and whatever the scheduler sends meanwhile), each job under `policy`, and the
/// jobs' names: measured from the end of one tick's runs to the end of the next one's.
async fn statements_for_a_tick<D: TestDb>(db: &Arc<D>, policy: Overlap) -> Option<u64> {
    const JOBS: usize = 1000;
    let provider = db.provider_with(Opts::own_pool()).await;
    let period = period(&provider) + 1;
    let scheduler = Scheduler::builder(provider.clone())
        .without_schedules()
        .build();
    let schedule = Schedule::parse(&format!("*/{period} * * * * *"), "UTC").unwrap();
    for job in 0..JOBS {
        let name = format!("many_{job:04}");
        let lock = LockConfiguration::new(&name, Duration::from_secs(30), Duration::ZERO).unwrap();
        let job = Job::locked(name, schedule.clone(), lock, |_: LockContext| async {});
        scheduler.add(job.overlap(policy)).unwrap();
    }
    let executed = |at_least: u64| {
        let scheduler = &scheduler;
        async move {
            (0..JOBS).all(|job| {
                scheduler
                    .stats(&format!("many_{job:04}"))
                    .is_some_and(|stats| stats.executed >= at_least)
            })
        }
    };
    scheduler.start();
    let within = Duration::from_secs(3 * period + 30);
    assert!(
        super::eventually(within, async || executed(1).await).await,
        "every job ran a tick"
    );
    // The ticks each job fired, to count the tick instants the window holds: a job whose tick
    // was lost on a loaded machine (its claim late) runs "the next tick" one period later,
    // and the window then holds two ticks' statements.
    let fired = |scheduler: &Scheduler| -> Vec<u64> {
        (0..JOBS)
            .map(|job| {
                scheduler
                    .stats(&format!("many_{job:04}"))
                    .map_or(0, |stats| stats.fired)
            })
            .collect()
    };
    let fired_before = fired(&scheduler);
    let before = D::statements_sent(&provider);
    assert!(
        super::eventually(within, async || executed(2).await).await,
        "every job ran the next tick"
    );
    let sent = crate::suite::sent_since::<D>(&provider, before, "statements for a tick");
    let ticks = fired(&scheduler)
        .iter()
        .zip(&fired_before)
        .map(|(after, before)| after - before)
        .max()
        .unwrap_or(1)
        .max(1);
    scheduler.shutdown().await;
    if ticks > 1 {
        eprintln!(
            "{}: the window held {ticks} ticks (a job's tick was lost): {sent:?} statements, counted per tick",
            D::BACKEND
        );
    }
    sent.map(|sent| sent.div_ceil(ticks))
}

/// `allow_all` with `max_running = 3` costs what `skip` costs: the ticks of 1,000 jobs due at
/// one instant are claimed with their run places in one statement (two locks a job), the
/// runs' places released in a few; the count is within a few statements of the same 1,000
/// jobs under `skip` (at most twice it plus 10: etcd's transaction holds 128 operations, so
/// twice the locks take twice the transactions), and below a tenth of the jobs: not one a job.
pub async fn max_running_claims_the_ticks_of_many_jobs_in_one_statement<D: TestDb>(db: &Arc<D>) {
    let Some(skip) = statements_for_a_tick(db, Overlap::Skip).await else {
        return;
    };
    let policy = Overlap::AllowAll {
        max_running: 3,
        when_full: WhenFull::Skip,
    };
    let Some(allow_all) = statements_for_a_tick(db, policy).await else {
        return;
    };
    eprintln!(
        "{}: statements for a tick of 1,000 jobs: skip {skip}, allow_all with max_running 3 {allow_all}",
        D::BACKEND
    );
    assert!(
        allow_all <= 2 * skip + 10 && allow_all < 100,
        "{}: a tick of 1,000 jobs sent {allow_all} statements under allow_all, {skip} under skip",
        D::BACKEND
    );
}

/// A job under a policy kept in the store whose ticks come faster than the store lets a tick's
/// mark go (etcd holds a lease a second at least, and a 1 ms mark was seen held 2 s) is
/// refused by `Scheduler::add`, naming the period it needs, instead of losing every other
/// tick; on a store that holds a lease as long as asked, a tick every second is taken.
pub async fn a_policy_job_faster_than_the_store_lets_a_mark_go_is_refused<D: TestDb>(db: &Arc<D>) {
    let provider = db.provider_with(Opts::own_pool()).await;
    let shortest = shedlock::LockProvider::shortest_lease(&provider);
    let scheduler = Scheduler::builder(provider).without_schedules().build();
    let lock = LockConfiguration::new("fast_job", Duration::from_secs(30), Duration::ZERO).unwrap();
    let every_second = Schedule::parse("* * * * * *", "UTC").unwrap();
    let job = Job::locked("fast_job", every_second, lock, |_: LockContext| async {})
        .overlap(Overlap::BufferOne);
    let added = scheduler.add(job);
    if shortest.is_zero() {
        added.expect("a store that holds a lease as long as asked takes a tick every second");
    } else {
        let refused = added.unwrap_err().to_string();
        assert!(
            refused.contains("overlap buffer_one") && refused.contains("fire at most every"),
            "{refused}"
        );
    }
}

/// The cases of this file, for [`scheduler_suite!`](macro@crate::scheduler_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_scheduler_suite_overlap {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            buffer_one_starts_a_waiting_tick_when_the_run_ends,
            buffer_all_runs_waiting_ticks_in_order,
            cancel_other_stops_the_running_run_for_the_next_tick,
            allow_all_runs_at_most_n_at_once_across_the_fleet,
            max_running_claims_the_ticks_of_many_jobs_in_one_statement,
            a_policy_job_faster_than_the_store_lets_a_mark_go_is_refused,
        ]);
    };
    (sql $db:ty) => {};
}
