//! Ticks due at one instant, claimed together: many jobs on three instances still run every
//! (job, tick) once; the jobs whose lock the scheduler knows ([`Job::with_lock`], or learned
//! from their previous run) are claimed with one `lock_many` call per tick instead of a `lock`
//! call each; a claimed lock the run does not take is released.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::TimeDelta;
use shedlock::scheduler::{JobStats, MisfirePolicy};
use shedlock::{
    Job, LockAdmin, LockConfiguration, LockContext, LockProvider, Schedule, Scheduler, TaskResult,
    run_locked,
};

use super::{MS, eventually};
use crate::db::{Opts, TestDb};
use crate::hooked::{Hooked, Turn};

/// How many jobs each case registers, all due every second.
pub(super) const JOBS: usize = 20;

pub(super) const SEC: Duration = Duration::from_secs(1);

/// What a provider counted of the calls the scheduler and the runs made through it: `lock`
/// calls, and the size of each `lock_many` call (forwarded to the wrapped provider's own
/// `lock_many`).
#[derive(Debug, Default)]
pub(super) struct Counts {
    locks: AtomicU64,
    lock_many: Mutex<Vec<usize>>,
}

impl Counts {
    pub(super) fn locks(&self) -> u64 {
        self.locks.load(Ordering::SeqCst)
    }

    /// The number of configurations of each `lock_many` call, in order.
    pub(super) fn lock_many_sizes(&self) -> Vec<usize> {
        self.lock_many.lock().unwrap().clone()
    }
}

/// `inner`, counting the calls made through it; without its [`LockAdmin`] side (no fleet seat:
/// the scheduler's own `lock` calls would be counted with the runs').
pub(super) fn counting<P: LockAdmin>(inner: P) -> (Arc<Hooked<P>>, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    let (on_lock, on_lock_many) = (Arc::clone(&counts), Arc::clone(&counts));
    let provider = Hooked::new(inner)
        .without_admin()
        .before_lock(move |_| {
            on_lock.locks.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Box::new(()) as Turn })
        })
        .before_lock_many(move |configs| {
            on_lock_many.lock_many.lock().unwrap().push(configs);
            Box::pin(async { Box::new(()) as Turn })
        });
    (Arc::new(provider), counts)
}

pub(super) fn every_second() -> Schedule {
    Schedule::parse("* * * * * *", "UTC").unwrap()
}

pub(super) fn lock_config(job: usize) -> LockConfiguration {
    LockConfiguration::new(
        format!("batch_{job:02}"),
        Duration::from_secs(30),
        Duration::ZERO,
    )
    .unwrap()
}

/// Job `job`: its lock via `run_locked`, inside which it records (tick, `batch_<job>@<who>`,
/// token) in the test's runs table.
fn recording_job<D: TestDb>(db: &Arc<D>, job: usize, who: &str) -> Job {
    let (db, who) = (Arc::clone(db), format!("batch_{job:02}@{who}"));
    Job::new(format!("batch_{job:02}"), every_second(), move || {
        let (db, who) = (Arc::clone(&db), who.clone());
        run_locked(lock_config(job), async move {
            let ctx = LockContext::current().expect("inside the lock");
            let tick = ctx.tick().expect("scheduled runs carry their tick");
            tokio::time::sleep(5 * MS).await;
            db.record_run(tick.timestamp_millis(), &who, ctx.fencing_token())
                .await;
        })
    })
}

/// A scheduler on `provider` (misfire grace zero) with `jobs`, started, run until `done` holds
/// of it (checked every 100 ms for up to `within`), then shut down; and whether `done` held.
pub(super) async fn run_until<P: LockProvider + 'static>(
    provider: P,
    jobs: impl IntoIterator<Item = Job>,
    within: Duration,
    done: impl Fn(&Scheduler) -> bool,
) -> (Scheduler, bool) {
    let scheduler = Scheduler::builder(provider)
        .misfire_grace(Duration::ZERO)
        .build();
    for job in jobs {
        scheduler.add(job).unwrap();
    }
    scheduler.start();
    let held = eventually(within, async || done(&scheduler)).await;
    scheduler.shutdown().await;
    (scheduler, held)
}

/// The sum of a job's counters over schedulers.
fn stats_of(schedulers: &[Scheduler], job: &str) -> JobStats {
    let mut sum = JobStats::default();
    for s in schedulers {
        let one = s.stats(job).unwrap();
        sum.fired += one.fired;
        sum.executed += one.executed;
        sum.skipped_held += one.skipped_held;
        sum.skipped_overlap += one.skipped_overlap;
        sum.lock_errors += one.lock_errors;
        sum.failed += one.failed;
    }
    sum
}

/// Three schedulers on three pools, 20 jobs each, all due every second (half with
/// [`Job::with_lock`], half learning their lock from their first run), for about six ticks
/// under `MisfirePolicy::All` with a 5 s grace: no (job, tick) ran twice, each job's fencing
/// tokens grow with its ticks, most ticks ran, and every fired tick either ran or was skipped
/// (held elsewhere, or an overlap).
pub async fn many_jobs_on_three_instances_run_every_tick_once<D: TestDb>(db: &Arc<D>) {
    // Created before the jobs race to create it (PostgreSQL's `CREATE TABLE IF NOT EXISTS` can
    // fail on a concurrent one).
    db.ran_table().await;
    let mut schedulers = Vec::new();
    let mut counters = Vec::new();
    for i in 0..3 {
        let who = format!("instance-{i}");
        let (provider, counts) = counting(db.provider_with(Opts::own_pool().locked_by(&who)).await);
        // Every missed tick within a grace of 5 s, in order: with no grace, a machine too busy
        // to fire on time dropped ticks without a fault (CI, PostgreSQL: batch_00 ran 1 tick of
        // 6), as in `three_instances_run_every_tick_exactly_once`.
        let scheduler = Scheduler::builder(Arc::clone(&provider))
            .misfire_grace(Duration::from_secs(5))
            .misfire_policy(MisfirePolicy::All)
            .build();
        for job in 0..JOBS {
            let mut job_def = recording_job(db, job, &who);
            if job % 2 == 0 {
                job_def = job_def.with_lock(lock_config(job));
            }
            scheduler.add(job_def).unwrap();
        }
        schedulers.push(scheduler);
        counters.push(counts);
    }
    let started_ms = chrono::Utc::now().timestamp_millis();
    for s in &schedulers {
        s.start();
    }
    // Until every job ran 3 ticks that came after the start (about 3 s; the missed ticks of
    // the grace before it are caught up at once), with a generous deadline: a fixed 6.5 s
    // window on a loaded machine left a job with 2 ticks (CI, PostgreSQL, batch_13).
    let ran_three = super::eventually(Duration::from_secs(60), async || {
        let runs = db.runs().await;
        (0..JOBS).all(|job| {
            let name = format!("{job:02}");
            let live = runs
                .iter()
                .filter(|(tick, who, _)| who[6..8] == name && *tick >= started_ms);
            live.count() >= 3
        })
    })
    .await;
    for s in &schedulers {
        s.shutdown().await;
    }
    assert!(ran_three, "every job ran 3 ticks within 60 s");

    let runs = db.runs().await; // ordered by token... of different locks: regroup per job
    let mut per_job: Vec<Vec<(i64, i64)>> = vec![Vec::new(); JOBS];
    for (tick, who, token) in &runs {
        let job: usize = who[6..8].parse().unwrap();
        per_job[job].push((*tick, *token));
    }
    for (job, ran) in per_job.iter_mut().enumerate() {
        ran.sort_unstable();
        let name = format!("batch_{job:02}");
        let mut ticks: Vec<i64> = ran.iter().map(|(tick, _)| *tick).collect();
        ticks.dedup();
        assert_eq!(ticks.len(), ran.len(), "{name}: a tick ran twice: {ran:?}");
        assert!(
            ran.windows(2).all(|w| w[1].1 > w[0].1),
            "{name}: tokens grow with the ticks: {ran:?}"
        );
        let stats = stats_of(&schedulers, &name);
        assert_eq!(stats.executed as usize, ran.len(), "{name}: {stats:?}");
        assert_eq!(
            stats.fired,
            stats.executed + stats.skipped_held + stats.skipped_overlap,
            "{name}: every fired tick ran, or was skipped: {stats:?}"
        );
        assert_eq!(stats.lock_errors + stats.failed, 0, "{name}: {stats:?}");
        // About six ticks in the window; a tick fired late still runs within the grace, so a
        // loaded machine may lose at most a tick it fired past the grace, not most of them.
        assert!(ran.len() >= 3, "{name}: only {} ticks ran", ran.len());
        // No bound on `fired` from the ticks that ran: under MisfirePolicy::All a tick found
        // held is fired again once the hold ends, so `fired` counts attempts. That every
        // missed tick runs once under All is what
        // `every_missed_tick_runs_once_with_misfire_policy_all` checks.
    }
    let batched: usize = counters.iter().flat_map(|c| c.lock_many_sizes()).sum();
    let single: u64 = counters.iter().map(|c| c.locks()).sum();
    eprintln!(
        "{} runs of {JOBS} jobs on 3 instances; {batched} ticks claimed in batches, {single} alone",
        runs.len()
    );
    assert!(batched > 0, "the ticks were claimed in batches");
}

/// Twenty jobs with [`Job::with_lock`] due at the same instants: each instant is claimed with
/// one `lock_many` call carrying the twenty locks, and no run sends a `lock` of its own.
pub async fn jobs_with_a_lock_are_claimed_in_one_call_per_tick<D: TestDb>(db: &Arc<D>) {
    db.ran_table().await;
    let (provider, counts) = counting(db.provider_with(Opts::own_pool()).await);
    let names: Vec<String> = (0..JOBS).map(|job| format!("batch_{job:02}")).collect();
    let jobs = (0..JOBS).map(|job| recording_job(db, job, "one").with_lock(lock_config(job)));
    let (scheduler, done) = run_until(Arc::clone(&provider), jobs, 20 * SEC, |s| {
        names
            .iter()
            .all(|name| s.stats(name).unwrap().executed >= 2)
    })
    .await;
    assert!(done, "every job ran twice within 20 s");

    let sizes = counts.lock_many_sizes();
    assert_eq!(counts.locks(), 0, "no run claimed its tick alone");
    assert_eq!(
        sizes.first(),
        Some(&JOBS),
        "the first tick: one call for all: {sizes:?}"
    );
    let claimed: usize = sizes.iter().sum();
    let mut attempted = 0;
    for name in &names {
        let stats = scheduler.stats(name).unwrap();
        assert_eq!(
            stats.executed + stats.skipped_overlap,
            stats.fired,
            "{name}: {stats:?}"
        );
        attempted += stats.executed as usize;
    }
    assert_eq!(
        claimed, attempted,
        "each run's tick was claimed once: {sizes:?}"
    );
    // One call per tick instant: at most as many calls as the ticks a job fired.
    let fired = names
        .iter()
        .map(|name| scheduler.stats(name).unwrap().fired)
        .max()
        .unwrap();
    assert!(sizes.len() as u64 <= fired, "{sizes:?} for {fired} ticks");
    let rows = db.runs().await;
    assert_eq!(rows.len(), attempted, "every claimed run did its work");
}

/// Twenty jobs built with [`Job::new`] around `run_locked`, no `with_lock`: their first tick
/// each sends a `lock` of its own, and from their second tick on they are claimed in batches.
pub async fn a_learned_lock_is_claimed_in_batches_from_the_second_tick<D: TestDb>(db: &Arc<D>) {
    db.ran_table().await;
    let (provider, counts) = counting(db.provider_with(Opts::own_pool()).await);
    let names: Vec<String> = (0..JOBS).map(|job| format!("batch_{job:02}")).collect();
    let jobs = (0..JOBS).map(|job| recording_job(db, job, "one"));
    let (scheduler, done) = run_until(Arc::clone(&provider), jobs, 20 * SEC, |s| {
        names
            .iter()
            .all(|name| s.stats(name).unwrap().executed >= 3)
    })
    .await;
    assert!(done, "every job ran three times within 20 s");

    let sizes = counts.lock_many_sizes();
    assert_eq!(
        counts.locks(),
        JOBS as u64,
        "each job claimed its first tick alone, then never again: {sizes:?}"
    );
    let claimed: usize = sizes.iter().sum();
    let attempted: u64 = names
        .iter()
        .map(|name| {
            let stats = scheduler.stats(name).unwrap();
            assert_eq!(
                stats.executed + stats.skipped_overlap,
                stats.fired,
                "{name}: {stats:?}"
            );
            stats.executed
        })
        .sum();
    assert_eq!(
        claimed as u64 + JOBS as u64,
        attempted,
        "every later tick was claimed in a batch: {sizes:?}"
    );
    assert!(sizes.len() >= 2, "{sizes:?}");
}

/// A job whose lock the scheduler claims ([`Job::with_lock`], a 60 s lease) but whose function
/// takes no lock at all: the claimed lock is released when the run ends (free for a lock by
/// hand at once, long before its lease), and the tick stays claimed.
pub async fn a_claimed_lock_the_run_does_not_take_is_released<D: TestDb>(db: &Arc<D>) {
    let provider = db.provider_with(Opts::own_pool()).await;
    let config =
        LockConfiguration::new("claimed_unused", Duration::from_secs(60), Duration::ZERO).unwrap();
    let job = Job::new("claimed_unused", every_second(), || async {
        Ok(TaskResult::Executed(()))
    })
    .with_lock(config.clone());
    let (_, ran) = run_until(provider.clone(), [job], 15 * SEC, |s| {
        s.stats("claimed_unused").unwrap().executed >= 1
    })
    .await;
    assert!(ran, "the job ran");
    let row = db
        .row("claimed_unused")
        .await
        .expect("the scheduler claimed the lock");
    assert!(row.last_tick_ms.is_some(), "the tick is claimed: {row:?}");
    assert!(
        row.remaining_ms <= 0,
        "released, not held for its 60 s lease: {row:?}"
    );
    let guard = provider
        .lock(&config)
        .await
        .unwrap()
        .expect("the lock is free afterwards");
    guard.unlock().await.unwrap();
}

/// A job whose [`Job::with_lock`] says a 60 s lease with no `lock_at_least_for`, while its
/// function asks for 20 s and 10 s: the claimed lock is extended to the run's lease, and kept
/// after the run for the run's `lock_at_least_for`.
pub async fn a_run_that_asks_for_another_lease_gets_it<D: TestDb>(db: &Arc<D>) {
    let provider = db.provider_with(Opts::own_pool()).await;
    let claimed = LockConfiguration::new("relet", Duration::from_secs(60), Duration::ZERO).unwrap();
    let leases = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&leases);
    let db_in_job = Arc::clone(db);
    let job = Job::new("relet", every_second(), move || {
        let (seen, db) = (Arc::clone(&seen), Arc::clone(&db_in_job));
        let asked =
            LockConfiguration::new("relet", Duration::from_secs(20), Duration::from_secs(10))
                .unwrap();
        run_locked(asked, async move {
            let row = db.row("relet").await.unwrap();
            seen.lock().unwrap().push(row.remaining_ms);
        })
    })
    .with_lock(claimed);
    let (_, ran) = run_until(provider, [job], 15 * SEC, |s| {
        s.stats("relet").unwrap().executed >= 1
    })
    .await;
    assert!(ran, "the job ran");
    let remaining = leases.lock().unwrap()[0];
    assert!(
        remaining > 15_000 && remaining <= 20_000,
        "the run's 20 s lease, not the claimed 60 s: {remaining} ms left"
    );
    let row = db.row("relet").await.unwrap();
    assert!(
        row.remaining_ms > 0 && row.remaining_ms <= 10_000,
        "kept for the run's 10 s lock_at_least_for after it: {row:?}"
    );
}

/// One scheduler, twelve jobs with [`Job::with_lock`] due every second: four free, four whose
/// lock another instance holds, four whose ticks were already claimed (the row's `last_tick` a
/// day ahead, as after a claim by an instance whose clock ran ahead). Every tick instant is one
/// `lock_many` call for all twelve; the free jobs run, the others are skipped as held, tick by
/// tick, and nothing is an error.
pub async fn a_batch_mixing_free_held_and_claimed_jobs_runs_only_the_free_ones<D: TestDb>(
    db: &Arc<D>,
) {
    db.ran_table().await;
    for job in 8..12 {
        let name = lock_config(job).name().to_owned();
        db.insert_expired_row(&name, 1).await;
        if !db
            .set_last_tick_ahead(&name, Duration::from_secs(86_400))
            .await
        {
            eprintln!(
                "left out: a_batch_mixing_free_held_and_claimed_jobs_runs_only_the_free_ones: \
                 the TestDb of {} cannot set a tick ahead",
                D::BACKEND
            );
            return;
        }
    }
    let other = db.provider_with(Opts::own_pool().locked_by("other")).await;
    let mut held = Vec::new();
    for job in 4..8 {
        held.push(other.lock(&lock_config(job)).await.unwrap().expect("free"));
    }
    let (provider, counts) = counting(db.provider_with(Opts::own_pool().locked_by("one")).await);
    let name = |job: usize| format!("batch_{job:02}");
    let jobs = (0..12).map(|job| recording_job(db, job, "one").with_lock(lock_config(job)));
    let (scheduler, done) = run_until(Arc::clone(&provider), jobs, 20 * SEC, |s| {
        (0..12).all(|job| {
            let stats = s.stats(&name(job)).unwrap();
            stats.executed + stats.skipped_held >= 2
        })
    })
    .await;
    assert!(done, "every job decided two ticks within 20 s");
    for job in 0..12 {
        let stats = scheduler.stats(&name(job)).unwrap();
        assert_eq!(
            stats.lock_errors + stats.failed + stats.clock_skew,
            0,
            "{}: {stats:?}",
            name(job)
        );
        if job < 4 {
            assert!(
                stats.executed >= 2 && stats.skipped_held == 0,
                "free {}: {stats:?}",
                name(job)
            );
        } else {
            assert!(
                stats.executed == 0 && stats.skipped_held >= 2,
                "{}: {stats:?}",
                name(job)
            );
        }
    }
    assert_eq!(counts.locks(), 0, "no run claimed its tick alone");
    let sizes = counts.lock_many_sizes();
    assert_eq!(
        sizes.first(),
        Some(&12),
        "one call for the twelve: {sizes:?}"
    );
    // The held locks are still the other instance's, and the claimed ticks untouched.
    for guard in held {
        assert!(guard.unlock().await.unwrap(), "still held by its owner");
    }
    let ran = db.runs().await;
    assert!(
        ran.iter()
            .all(|(_, who, _)| who[6..8].parse::<usize>().unwrap() < 4),
        "only the free jobs ran: {ran:?}"
    );
}

/// A batch of future ticks: a scheduler whose provider's clock reads an hour ahead (so it fires
/// an hour early by the database's real clock) claims each instant's five jobs with one
/// `lock_many`; the database refuses every tick as too far ahead, each run reports clock skew,
/// none runs, and nothing is written.
pub async fn a_batch_of_future_ticks_is_refused_as_clock_skew<D: TestDb>(db: &Arc<D>) {
    // An hour ahead: the clock that `Hooked` skews is the one the scheduler measures.
    let (provider, counts) = counting(
        Hooked::new(db.provider_with(Opts::own_pool()).await).clock_ahead(TimeDelta::hours(1)),
    );
    let name = |job: usize| format!("batch_{job:02}");
    let jobs = (0..5).map(|job| recording_job(db, job, "ahead").with_lock(lock_config(job)));
    let (scheduler, refused) = run_until(Arc::clone(&provider), jobs, 30 * SEC, |s| {
        (0..5).all(|job| s.stats(&name(job)).unwrap().clock_skew >= 2)
    })
    .await;
    for job in 0..5 {
        let stats = scheduler.stats(&name(job)).unwrap();
        assert!(refused, "{}: {stats:?}", name(job));
        assert_eq!(
            (stats.executed, stats.skipped_held, stats.lock_errors),
            (0, 0, 0),
            "{}: {stats:?}",
            name(job)
        );
        assert_eq!(
            db.row(&name(job)).await,
            None,
            "nothing claimed for {}",
            name(job)
        );
    }
    assert_eq!(counts.locks(), 0, "no run claimed its tick alone");
    let sizes = counts.lock_many_sizes();
    assert_eq!(sizes.first(), Some(&5), "one call for the five: {sizes:?}");
}

/// The cases of this file, for [`scheduler_suite!`](macro@crate::scheduler_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_scheduler_suite_batch {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            many_jobs_on_three_instances_run_every_tick_once,
            jobs_with_a_lock_are_claimed_in_one_call_per_tick,
            a_learned_lock_is_claimed_in_batches_from_the_second_tick,
            a_claimed_lock_the_run_does_not_take_is_released,
            a_run_that_asks_for_another_lease_gets_it,
            a_batch_mixing_free_held_and_claimed_jobs_runs_only_the_free_ones,
            a_batch_of_future_ticks_is_refused_as_clock_skew,
        ]);
    };
    (sql $db:ty) => {};
}
