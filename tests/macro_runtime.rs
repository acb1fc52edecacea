//! `#[scheduler_lock]` durations given as expressions (not literals): evaluated on each call,
//! before the body, in the function's scope; validated as `LockConfiguration::new` validates,
//! an invalid one failing the call without running the body or touching the lock table; a
//! valid one is the lock's. On SQLite, which needs no server. And the lock a `#[scheduled]`
//! job declares when its durations are literals. And, on every backend, a `#[scheduled]` job
//! on a scheduler watching the store's schedules, steered by them. And a `#[scheduled]` body
//! that reads the span of schedule its run covers (`LockContext::interval`). And the time rules
//! (`exclude`, `on_excluded`, `start`, `end`, `max_runs`) a `#[scheduled]` job takes.
#![allow(missing_docs)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shedlock::settings::MAX_LOCK_DURATION;
use shedlock::{Error, LockConfiguration, TaskResult, scheduled, scheduler_lock, with_provider};
use shedlock_suite::{Sqlite, TestDb};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

/// The application's settings, decided at run time.
struct Settings {
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
}

/// Runs under `sync_{id}` for as long as `settings` says; counts its runs in `runs` and returns
/// the lock's remaining lease as the table shows it while the body runs.
#[scheduler_lock(
    name = "sync_{id}",
    lock_at_most_for = settings.lock_at_most_for,
    lock_at_least_for = settings.lock_at_least_for
)]
async fn sync(id: u32, settings: &Settings, db: &Sqlite, runs: &AtomicUsize) -> Option<i64> {
    runs.fetch_add(1, Ordering::SeqCst);
    db.row(&format!("sync_{id}"))
        .await
        .map(|row| row.remaining_ms)
}

fn settings(lock_at_most_for: Duration, lock_at_least_for: Duration) -> Settings {
    Settings {
        lock_at_most_for,
        lock_at_least_for,
    }
}

#[tokio::test]
async fn a_runtime_duration_is_the_locks() {
    let db = Sqlite::setup().await.unwrap();
    let runs = AtomicUsize::new(0);
    with_provider(db.provider(), async {
        let two_hours = settings(2 * HOUR, HOUR);
        let outcome = sync(1, &two_hours, &db, &runs).await.unwrap();
        let TaskResult::Executed(Some(remaining)) = outcome else {
            panic!("the body should run and see its lock: {outcome:?}");
        };
        let (most, least) = (2 * HOUR.as_millis() as i64, HOUR.as_millis() as i64);
        assert!(
            (most - 60_000..=most).contains(&remaining),
            "held for lock_at_most_for while running: {remaining} ms"
        );
        // Released, but kept for lock_at_least_for: the next call is skipped.
        let row = db.row("sync_1").await.unwrap();
        assert!(
            (least - 60_000..=least).contains(&row.remaining_ms),
            "kept for lock_at_least_for: {} ms",
            row.remaining_ms
        );
        assert_eq!(
            sync(1, &two_hours, &db, &runs).await.unwrap(),
            TaskResult::Skipped
        );
        // Another value on the next call: evaluated each time.
        let short = settings(MINUTE, Duration::ZERO);
        let outcome = sync(2, &short, &db, &runs).await.unwrap();
        let TaskResult::Executed(Some(remaining)) = outcome else {
            panic!("{outcome:?}");
        };
        assert!((1..=60_000).contains(&remaining), "{remaining} ms");
    })
    .await;
}

#[tokio::test]
async fn an_invalid_runtime_duration_fails_the_call_without_running_it() {
    let db = Sqlite::setup().await.unwrap();
    let runs = AtomicUsize::new(0);
    // Each with what its message says (humantime spells 1000 years oddly, so that is left out).
    let invalid: [(Settings, &[&str]); 5] = [
        (
            settings(Duration::ZERO, Duration::ZERO),
            &["`lock_at_most_for` must be greater than zero (got 0s)"],
        ),
        (
            settings(MINUTE, HOUR),
            &["`lock_at_least_for` (1h) must not exceed `lock_at_most_for` (1m)"],
        ),
        (
            settings(MAX_LOCK_DURATION + MINUTE, Duration::ZERO),
            &[
                "`lock_at_most_for` (",
                "is longer than the limit of 1000 years",
            ],
        ),
        (
            settings(HOUR, MAX_LOCK_DURATION + MINUTE),
            &[
                "`lock_at_least_for` (",
                "is longer than the limit of 1000 years",
            ],
        ),
        // Rounded up to whole milliseconds before they are compared: 1ms < 1.000001ms = 2ms.
        (
            settings(Duration::from_millis(1), Duration::from_nanos(1_000_001)),
            &["`lock_at_least_for` (1ms 1ns) must not exceed `lock_at_most_for` (1ms)"],
        ),
    ];
    with_provider(db.provider(), async {
        for (id, (settings, expected)) in (10..).zip(&invalid) {
            let err = sync(id, settings, &db, &runs).await.unwrap_err();
            assert!(
                matches!(
                    &err,
                    Error::ZeroLockAtMostFor { .. }
                        | Error::LockAtLeastForExceedsAtMostFor { .. }
                        | Error::DurationTooLong { .. }
                ),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("invalid lock configuration for \"sync_{id}\": ")),
                "{text}"
            );
            for fragment in *expected {
                assert!(text.contains(fragment), "{fragment:?} in {text}");
            }
            assert_eq!(runs.load(Ordering::SeqCst), 0, "the body ran for sync_{id}");
            assert!(
                db.row(&format!("sync_{id}")).await.is_none(),
                "sync_{id} was locked"
            );
        }
        // Equal once rounded: valid, as `LockConfiguration::new` has it.
        let rounded = settings(
            MINUTE + Duration::from_micros(1500),
            MINUTE + Duration::from_millis(2),
        );
        assert!(matches!(
            sync(20, &rounded, &db, &runs).await,
            Ok(TaskResult::Executed(Some(_)))
        ));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    })
    .await;
}

/// What happened, in order.
static EVENTS: Mutex<Vec<&str>> = Mutex::new(Vec::new());

fn event(what: &'static str) {
    EVENTS.lock().unwrap().push(what);
}

fn most() -> Duration {
    event("lock_at_most_for");
    MINUTE
}

fn least() -> Duration {
    event("lock_at_least_for");
    Duration::ZERO
}

#[scheduler_lock(name = "ordered", lock_at_least_for = least(), lock_at_most_for = most())]
async fn ordered() {
    event("body");
}

#[tokio::test]
async fn expressions_run_once_per_call_before_the_body_held_or_not() {
    let db = Sqlite::setup().await.unwrap();
    with_provider(db.provider(), async {
        assert_eq!(ordered().await.unwrap(), TaskResult::Executed(()));
        // Held elsewhere: the expressions still run, the body does not.
        let config = LockConfiguration::new("ordered", MINUTE, Duration::ZERO).unwrap();
        let held = db.provider().lock(&config).await.unwrap();
        assert!(held.is_some());
        assert_eq!(ordered().await.unwrap(), TaskResult::Skipped);
    })
    .await;
    // `lock_at_most_for` first, whatever the order the attribute gives them in.
    assert_eq!(
        *EVENTS.lock().unwrap(),
        [
            "lock_at_most_for",
            "lock_at_least_for",
            "body",
            "lock_at_most_for",
            "lock_at_least_for"
        ]
    );
}

/// A `#[scheduled]` job whose durations are literals.
#[scheduled(cron = "0 */5 * * * *")]
#[scheduler_lock(
    name = "declared_{id}",
    lock_at_most_for = "10m",
    lock_at_least_for = "30s"
)]
async fn declared(id: u32) {
    let _ = id;
}

/// The same with a duration given as an expression.
#[scheduled(cron = "0 */5 * * * *")]
#[scheduler_lock(name = "computed_{id}", lock_at_most_for = most())]
async fn computed(id: u32) {
    let _ = id;
}

/// `job(…)` declares a lock known at compile time (its name rendered with the job's
/// arguments), so the scheduler claims the job's first tick together with the others'; a lock
/// with a duration computed on each call is learned from the first run instead.
#[test]
fn a_scheduled_job_with_literal_durations_declares_its_lock() {
    let job = declared::job(7);
    let lock = job.lock().expect("the lock is declared");
    assert_eq!(lock.name(), "declared_7");
    assert_eq!(lock.lock_at_most_for(), Duration::from_secs(600));
    assert_eq!(lock.lock_at_least_for(), Duration::from_secs(30));
    assert!(computed::job(7).lock().is_none());
}

/// Jobs with an overlap policy, from the macro's keys.
#[scheduled(cron = "0 */5 * * * *", overlap = "buffer_all", buffer_limit = 4)]
#[scheduler_lock(name = "buffered_{id}", lock_at_most_for = "10m")]
async fn buffered(id: u32) {
    let _ = id;
}

#[scheduled(
    cron = "0 */5 * * * *",
    overlap = "allow_all",
    max_running = 3,
    when_full = "buffer_one"
)]
#[scheduler_lock(name = "parallel", lock_at_most_for = "10m")]
async fn parallel() {}

/// `overlap = …` and its bounds become the job's policy; a job per parameter whose lock name
/// leaves no room for the policy's rows is refused when added, naming the job and the limit.
#[tokio::test]
async fn a_scheduled_job_takes_its_overlap_policy_from_the_macro() {
    use shedlock::Overlap;
    use shedlock::scheduler::WhenFull;
    assert_eq!(
        buffered::job(1).overlap_policy(),
        Overlap::BufferAll { limit: 4 }
    );
    assert_eq!(
        parallel::job().overlap_policy(),
        Overlap::AllowAll {
            max_running: 3,
            when_full: WhenFull::BufferOne
        }
    );
    assert_eq!(declared::job(1).overlap_policy(), Overlap::Skip);
    let db = Sqlite::setup().await.unwrap();
    let scheduler = shedlock::Scheduler::builder(db.provider()).build();
    scheduler.add(buffered::job(1)).unwrap();
    scheduler.add(cancelling::job("x".repeat(49))).unwrap();
    let refused = scheduler.add(cancelling::job("x".repeat(50))).unwrap_err();
    assert!(matches!(refused, Error::InvalidOverlap { .. }), "{refused}");
    let message = refused.to_string();
    assert!(message.contains("at most 56 bytes; it has 57"), "{message}");
}

/// A job with time rules, from the macro's keys.
#[scheduled(
    cron = "0 0 9 * * *",
    exclude = "x",
    on_excluded = "next",
    start = "2026-12-01T00:00:00Z",
    max_runs = 3
)]
#[scheduler_lock(name = "ruled", lock_at_most_for = "10m")]
async fn ruled() {}

/// The longest series `max_runs` takes, with an instant given with an offset.
#[scheduled(
    cron = "0 0 9 * * *",
    exclude = ["kr-holidays", "us-holidays"],
    start = "2026-12-01T09:00:00+09:00",
    end = "2027-12-01T00:00:00.25Z",
    max_runs = 10_000
)]
#[scheduler_lock(name = "longest", lock_at_most_for = "10m")]
async fn longest() {}

/// `exclude`, `on_excluded`, `start`, `end` and `max_runs` become the job's own time rules,
/// the instants read at compile time; the schedule walks by them; the macro's limit on
/// `max_runs` is the runtime's.
#[test]
fn a_scheduled_job_takes_its_time_rules_from_the_macro() {
    use shedlock::schedules::{MAX_RUNS, OnExcluded, TimeRules};
    let t = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    let job = ruled::job();
    let expected = TimeRules::new()
        .exclude("x")
        .on_excluded(OnExcluded::Next)
        .start(t("2026-12-01T00:00:00Z"))
        .max_runs(3);
    assert_eq!(job.code_time_rules(), Some(&expected));
    // Three runs from the start, then none (the calendar excludes nothing it does not hold).
    let ticks =
        job.schedule()
            .ticks_between(t("2026-11-01T00:00:00Z"), t("2027-01-01T00:00:00Z"), 100);
    assert_eq!(
        ticks,
        [
            t("2026-12-01T09:00:00Z"),
            t("2026-12-02T09:00:00Z"),
            t("2026-12-03T09:00:00Z")
        ]
    );

    assert_eq!(
        MAX_RUNS, 10_000,
        "the macro's copy of MAX_RUNS (time_rules.rs) is 10_000"
    );
    let rules = longest::job().code_time_rules().cloned().unwrap();
    let expected = TimeRules::new()
        .exclude("kr-holidays")
        .exclude("us-holidays")
        .start(t("2026-12-01T00:00:00Z"))
        .end(t("2027-12-01T00:00:00.250Z"))
        .max_runs(MAX_RUNS);
    assert_eq!(rules, expected);
    rules.check("longest").unwrap();
    assert_eq!(declared::job(1).code_time_rules(), None);
}

#[scheduled(cron = "0 */5 * * * *", overlap = "cancel_other")]
#[scheduler_lock(name = "cancel_{key}", lock_at_most_for = "10m")]
async fn cancelling(key: String) {
    let _ = key;
}

/// A job whose lock name is filled with its argument.
#[scheduled(cron = "0 */5 * * * *")]
#[scheduler_lock(name = "named_by_{key}", lock_at_most_for = "10m")]
async fn named_by(key: String) {
    let _ = key;
}

/// A lock name too long because of an argument is refused when the job is added, not at every
/// tick (before, `add()` took it and each run failed with the name's error).
#[tokio::test]
async fn a_lock_name_too_long_for_its_argument_is_refused_by_add() {
    let db = Sqlite::setup().await.unwrap();
    let scheduler = shedlock::Scheduler::new(db.provider());
    let long = "k".repeat(60);
    match scheduler.add(named_by::job(long.clone())) {
        Err(Error::LockNameTooLong { name, len, max }) => {
            assert_eq!(name, format!("named_by_{long}"));
            assert_eq!(len, 69);
            assert_eq!(max, 64);
        }
        other => panic!("refused by add(): {other:?}"),
    }
    assert!(scheduler.job_names().is_empty());
    scheduler.add(named_by::job("short".into())).unwrap();
    assert_eq!(scheduler.job_names(), ["named_by_short"]);
}

/// A job per parameter, as the README shows it: the job takes its lock's name filled in
/// (`named_by_eu`, `named_by_us`), so one function scheduled for two regions is two jobs, each
/// known by the name of its lock (before, the second `add` failed with `DuplicateJob`).
#[tokio::test]
async fn a_job_per_parameter_is_named_after_its_filled_in_lock() {
    let db = Sqlite::setup().await.unwrap();
    let scheduler = shedlock::Scheduler::new(db.provider());
    scheduler.add(named_by::job("eu".into())).unwrap();
    scheduler.add(named_by::job("us".into())).unwrap();
    let mut names = scheduler.job_names();
    names.sort();
    assert_eq!(names, ["named_by_eu", "named_by_us"]);
    assert_eq!(declared::job(7).name(), "declared_7");
    assert_eq!(computed::job(8).name(), "computed_8");
    assert!(matches!(
        scheduler.add(named_by::job("eu".into())),
        Err(Error::DuplicateJob { name }) if name == "named_by_eu"
    ));
    // A lock name without a parameter leaves the job named after its function.
    assert_eq!(steered::job(Default::default()).name(), "steered");
}

/// The job the README has users write: `#[scheduled]` over `#[scheduler_lock]`, its lock named
/// otherwise than its job (`steered`); a yearly cron in code. Counts its runs.
#[scheduled(cron = "0 0 0 1 1 *", time_zone = "UTC")]
#[scheduler_lock(name = "macro_steered_lock", lock_at_most_for = "30s")]
async fn steered(runs: std::sync::Arc<AtomicUsize>) {
    runs.fetch_add(1, Ordering::SeqCst);
}

/// A generous deadline for what takes a poll interval or a few ticks.
const DEADLINE: Duration = Duration::from_secs(20);

mod steered_by_the_store {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use chrono::Utc;
    use shedlock::scheduler::{RunHistory, ScheduleWatch};
    use shedlock::schedules::{ScheduleChange, ScheduleStore};
    use shedlock::{LockAdmin, Scheduler};
    use shedlock_suite::scheduler_suite::eventually;
    use shedlock_suite::{Opts, TestDb};

    use super::{DEADLINE, steered};

    /// Waits until `scheduler` applied the store's current schedule version.
    async fn applied<P: ScheduleStore>(store: &P, scheduler: &Scheduler) {
        let version = store.schedules_version().await.unwrap();
        assert!(
            eventually(DEADLINE, async || scheduler
                .schedules_applied()
                .is_some_and(|v| v >= version))
            .await,
            "version {version} applied within {DEADLINE:?}"
        );
    }

    /// Whether `runs` stays where it is for 3 s, once a run that was starting ended.
    async fn stays(runs: &AtomicUsize) -> (usize, usize) {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = runs.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(3)).await;
        (before, runs.load(Ordering::SeqCst))
    }

    /// A `#[scheduled]` + `#[scheduler_lock]` job on a scheduler watching the store: an
    /// override of its cron moves it, a pause stops it, a resume starts it again, and clearing
    /// the override (`shedlock reset`) restores the code's cron.
    pub(crate) async fn a_macro_job_is_steered_by_the_store<D: TestDb>(db: &Arc<D>)
    where
        D::Provider: ScheduleStore + LockAdmin,
    {
        let provider = db
            .provider_with(Opts::own_pool().locked_by("macro-instance"))
            .await;
        let watch = ScheduleWatch::new()
            .poll_every(Duration::from_millis(100))
            .unwrap();
        let builder = Scheduler::builder(provider.clone())
            .misfire_grace(Duration::ZERO)
            .schedules(watch);
        let scheduler =
            D::with_history(builder, RunHistory::keep_for(Duration::from_secs(86_400))).build();
        let runs = Arc::new(AtomicUsize::new(0));
        scheduler.add(steered::job(Arc::clone(&runs))).unwrap();
        assert_eq!(scheduler.job_names(), ["steered"]);
        scheduler.start();
        let yearly = |scheduler: &Scheduler| {
            let next = scheduler.next_tick("steered").unwrap();
            next - Utc::now() > chrono::TimeDelta::days(1)
        };
        assert!(yearly(&scheduler), "the code's yearly cron");

        // An override moves it to every second.
        provider
            .update_schedule(
                "steered",
                &ScheduleChange::new().cron("* * * * * *", None),
                "test",
            )
            .await
            .unwrap();
        applied(&provider, &scheduler).await;
        assert!(
            eventually(DEADLINE, async || runs.load(Ordering::SeqCst) >= 2).await,
            "the overridden job runs every second: {} runs",
            runs.load(Ordering::SeqCst)
        );
        assert!(!yearly(&scheduler));
        // Under the lock its macro names.
        let lock = provider
            .lock_state("macro_steered_lock")
            .await
            .unwrap()
            .expect("the macro's lock was taken");
        assert!(lock.fencing_token >= 2, "{lock:?}");
        assert!(provider.lock_state("steered").await.unwrap().is_none());

        // A pause stops it.
        provider
            .update_schedule("steered", &ScheduleChange::new().paused(true), "test")
            .await
            .unwrap();
        applied(&provider, &scheduler).await;
        let (before, after) = stays(&runs).await;
        assert_eq!(after, before, "a paused job does not run");

        // Resumed, it runs again on the override's cron.
        provider
            .update_schedule("steered", &ScheduleChange::new().paused(false), "test")
            .await
            .unwrap();
        applied(&provider, &scheduler).await;
        assert!(
            eventually(DEADLINE, async || runs.load(Ordering::SeqCst) >= after + 2).await,
            "a resumed job runs again"
        );

        // Cleared (`shedlock reset`): the code's yearly cron is back.
        assert!(provider.delete_schedule("steered", "test").await.unwrap());
        applied(&provider, &scheduler).await;
        let (before, after) = stays(&runs).await;
        assert_eq!(after, before, "the code's yearly schedule is back");
        assert!(yearly(&scheduler), "the next tick is the code's");
        scheduler.shutdown().await;
    }
}

shedlock_suite::backend_tests!([postgres, mysql, sqlite, redis]: crate::steered_by_the_store => [
    a_macro_job_is_steered_by_the_store
]);

/// The intervals the runs of `hourly_export` saw, in order.
static EXPORTED: Mutex<Vec<shedlock::scheduler::Interval>> = Mutex::new(Vec::new());

/// A job written the README's way that reads the span its run covers.
#[scheduled(cron = "*/2 * * * * *")]
#[scheduler_lock(name = "hourly_export_{region}", lock_at_most_for = "1m")]
async fn hourly_export(region: String) {
    let _ = region;
    let interval = shedlock::LockContext::current()
        .and_then(|context| context.interval())
        .expect("a scheduled run knows its interval");
    EXPORTED.lock().unwrap().push(interval);
}

/// Issue 49, point 1, on the README's path: a `#[scheduled]` function with a lock named per
/// parameter reads `LockContext::interval()` in its body; each run's span is
/// `(previous tick, tick]` and the spans of successive runs follow one another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_function_reads_the_interval_its_run_covers() {
    let db = Sqlite::setup().await.unwrap();
    let scheduler = shedlock::Scheduler::new(db.provider());
    scheduler.add(hourly_export::job("eu".into())).unwrap();
    scheduler.start();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while EXPORTED.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scheduler.shutdown().await;
    let seen = EXPORTED.lock().unwrap().clone();
    assert!(seen.len() >= 2, "{seen:?}");
    let two = chrono::TimeDelta::seconds(2);
    for interval in &seen {
        assert_eq!(interval.start, Some(interval.end - two), "{seen:?}");
    }
    // Under load a tick may be missed (its misfire), so successive runs' spans follow one
    // another or leave a gap; they never overlap.
    for pair in seen.windows(2) {
        assert!(
            pair[1].start >= Some(pair[0].end),
            "spans follow one another: {seen:?}"
        );
    }
}

/// The intervals `daily_report`'s runs were handed, in order.
static HANDED: Mutex<Vec<(String, shedlock::scheduler::Interval)>> = Mutex::new(Vec::new());

/// A job that asks for the span its run covers as a parameter: `job(…)` takes the other
/// parameters, and the scheduler fills the `Interval` one.
#[scheduled(cron = "*/2 * * * * *")]
#[scheduler_lock(name = "daily_report_{region}", lock_at_most_for = "1m")]
async fn daily_report(region: String, covers: shedlock::scheduler::Interval) {
    HANDED.lock().unwrap().push((region, covers));
}

/// The same, with a lock whose duration is an expression (so the function takes its own lock
/// on each run rather than the scheduler's claim).
#[scheduled(cron = "*/2 * * * * *")]
#[scheduler_lock(name = "daily_report_late", lock_at_most_for = Duration::from_secs(60))]
async fn daily_report_late(covers: shedlock::scheduler::Interval, label: &'static str) {
    HANDED.lock().unwrap().push((label.to_owned(), covers));
}

/// Issue 49, point 1: the macros pass the interval to a job that asks for it. `job(…)` leaves
/// the `Interval` parameter out, each run gets `(previous tick, tick]` in it, and a call by
/// hand passes one of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_function_is_handed_the_interval_its_run_covers() {
    let db = Sqlite::setup().await.unwrap();
    with_provider(db.provider(), async {
        let by_hand = shedlock::scheduler::Interval::new(None, chrono::Utc::now());
        let ran = daily_report("by-hand".into(), by_hand).await.unwrap();
        assert!(matches!(ran, TaskResult::Executed(())), "{ran:?}");
        assert_eq!(HANDED.lock().unwrap()[0], ("by-hand".to_owned(), by_hand));
        // What a log line of a run shows.
        let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
        let span = shedlock::scheduler::Interval::new(
            Some(at("2026-03-08T06:00:00Z")),
            at("2026-03-08T07:00:00Z"),
        );
        assert_eq!(
            span.to_string(),
            "(2026-03-08T06:00:00Z, 2026-03-08T07:00:00Z]"
        );
    })
    .await;
    let scheduler = shedlock::Scheduler::new(db.provider());
    scheduler.add(daily_report::job("eu".into())).unwrap();
    scheduler.add(daily_report_late::job("late")).unwrap();
    scheduler.start();
    let count = |label: &str| {
        HANDED
            .lock()
            .unwrap()
            .iter()
            .filter(|(seen, _)| seen == label)
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while (count("eu") < 2 || count("late") < 2) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scheduler.shutdown().await;
    let seen = HANDED.lock().unwrap().clone();
    let two = chrono::TimeDelta::seconds(2);
    for label in ["eu", "late"] {
        let spans: Vec<_> = seen
            .iter()
            .filter(|(seen, _)| seen == label)
            .map(|(_, span)| *span)
            .collect();
        assert!(spans.len() >= 2, "{label}: {seen:?}");
        for span in &spans {
            assert_eq!(span.start, Some(span.end - two), "{label}: {spans:?}");
        }
        for pair in spans.windows(2) {
            assert!(pair[1].start >= Some(pair[0].end), "{label}: {spans:?}");
        }
    }
}
