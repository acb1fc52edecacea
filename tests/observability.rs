//! What the scheduler reports about each tick — listener hooks, run history rows, `metrics`
//! counters and histograms, `tracing` spans — checked against each other and against what ran.
//!
//! One process-wide metrics recorder and tracing subscriber serve every test here; each test
//! uses job names of its own, so their figures never mix.
#![allow(missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::metric_names;
use shedlock::scheduler::{RunFinished, RunHistory, RunInfo, SchedulerListener};
use shedlock::settings::KeepAlive;
use shedlock::{Job, LockAdmin, LockConfiguration, RunStore, Schedule, Scheduler, run_locked};
use shedlock_suite::{Opts, SqlTestDb, Sqlite, TestDb, unique_name};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

// --- process-wide collectors --------------------------------------------------------------

type MetricKey = (String, Vec<(String, String)>);
/// Closed spans: (name, fields).
type Spans = Arc<Mutex<Vec<(String, BTreeMap<String, String>)>>>;

struct Collectors {
    metrics: Snapshotter,
    /// Every snapshot folded in: the debugging recorder's snapshots drain what they read.
    seen: Mutex<HashMap<MetricKey, f64>>,
    spans: Spans,
}

fn collectors() -> &'static Collectors {
    static COLLECTORS: OnceLock<Collectors> = OnceLock::new();
    COLLECTORS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let metrics = recorder.snapshotter();
        recorder.install().expect("the only metrics recorder");
        let spans = Arc::default();
        let subscriber = tracing_subscriber::registry().with(SpanCapture(Arc::clone(&spans)));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        Collectors {
            metrics,
            seen: Mutex::default(),
            spans,
        }
    })
}

/// Every metric seen so far: (name, labels) → value. Counters are summed over snapshots, gauges
/// keep their last value other than zero, histograms count their samples.
fn all_metrics() -> HashMap<MetricKey, f64> {
    let collectors = collectors();
    let mut seen = collectors.seen.lock().unwrap();
    for (key, _, _, value) in collectors.metrics.snapshot().into_vec() {
        let kind_is_gauge = matches!(value, DebugValue::Gauge(_));
        let key = key.key();
        let labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        #[allow(clippy::cast_precision_loss)]
        let value = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(samples) => samples.len() as f64,
        };
        let slot = seen.entry((key.name().to_owned(), labels)).or_default();
        if kind_is_gauge {
            if value != 0.0 {
                *slot = value;
            }
        } else {
            *slot += value;
        }
    }
    seen.clone()
}

/// Every metric whose `job` label is `job`: (name, other labels) → value.
fn metrics_of(job: &str) -> HashMap<MetricKey, f64> {
    metrics_labelled("job", job)
}

/// Every metric whose label `key` is `value`: (name, other labels) → value.
fn metrics_labelled(key: &str, value: &str) -> HashMap<MetricKey, f64> {
    all_metrics()
        .into_iter()
        .filter(|((_, labels), _)| labels.iter().any(|(k, v)| k == key && v == value))
        .map(|((name, labels), seen)| {
            let rest = labels.into_iter().filter(|(k, _)| k != key).collect();
            ((name, rest), seen)
        })
        .collect()
}

fn metric(all: &HashMap<MetricKey, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let labels = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    all.get(&(name.to_owned(), labels)).copied().unwrap_or(0.0)
}

struct SpanCapture(Spans);

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for SpanCapture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span.extensions_mut().remove::<Fields>().unwrap_or_default();
            self.0
                .lock()
                .unwrap()
                .push((span.name().to_owned(), fields.0));
        }
    }
}

// --- a listener that writes everything down -----------------------------------------------

/// (instance, job, tick) → the events heard, in order.
type Heard = Arc<Mutex<BTreeMap<(String, String, DateTime<Utc>), Vec<String>>>>;

struct Recorder {
    instance: String,
    heard: Heard,
}

impl Recorder {
    fn note(&self, run: &RunInfo, event: String) {
        self.heard
            .lock()
            .unwrap()
            .entry((self.instance.clone(), run.job.clone(), run.tick))
            .or_default()
            .push(event);
    }
}

impl SchedulerListener for Recorder {
    fn on_attempt(&self, run: &RunInfo) {
        assert!(run.lock.is_some() && run.fencing_token.is_none(), "{run:?}");
        self.note(run, "attempt".into());
    }
    fn on_acquired(&self, run: &RunInfo) {
        self.note(run, format!("acquired {}", run.fencing_token.unwrap()));
    }
    fn on_not_acquired(&self, run: &RunInfo, outcome: RunOutcome, error: Option<&str>) {
        self.note(
            run,
            format!("not-acquired {outcome} {}", error.unwrap_or("")),
        );
    }
    fn on_started(&self, run: &RunInfo) {
        self.note(run, "started".into());
    }
    fn on_finished(&self, run: &RunInfo, finished: &RunFinished) {
        self.note(
            run,
            format!(
                "finished {} {}",
                finished.outcome,
                finished.error.as_deref().unwrap_or("")
            ),
        );
    }
}

/// The outcome a listener's events end in; panics on a sequence the docs do not allow.
fn outcome_of(events: &[String]) -> RunOutcome {
    let parse = |text: &str| {
        text.split(' ')
            .next()
            .unwrap()
            .parse::<RunOutcome>()
            .unwrap()
    };
    match events {
        [one] if one.starts_with("not-acquired skipped-overlap") => RunOutcome::SkippedOverlap,
        [attempt, skip] if attempt == "attempt" && skip.starts_with("not-acquired ") => {
            parse(&skip["not-acquired ".len()..])
        }
        [attempt, acquired, started, finished]
            if attempt == "attempt"
                && acquired.starts_with("acquired ")
                && started == "started"
                && finished.starts_with("finished ") =>
        {
            parse(&finished["finished ".len()..])
        }
        other => panic!("not a documented sequence: {other:?}"),
    }
}

/// A job named `job` locking `job`, doing `work`.
fn job<W, Fut>(job: &str, work: W) -> Job
where
    W: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let name = job.to_owned();
    let work = Arc::new(work);
    Job::new(
        job,
        Schedule::parse("* * * * * *", "UTC").unwrap(),
        move || {
            let (name, work) = (name.clone(), Arc::clone(&work));
            async move {
                let cfg = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO)?;
                run_locked(cfg, async move { work().await }).await
            }
        },
    )
}

/// A scheduler with an hour of history and a [`Recorder`] for `instance`.
fn recorded(provider: impl RunStore + 'static, instance: &str, heard: &Heard) -> Scheduler {
    Scheduler::builder(provider)
        .misfire_grace(Duration::ZERO)
        .history(RunHistory::keep_for(Duration::from_secs(3600)))
        .listener(Recorder {
            instance: instance.into(),
            heard: Arc::clone(heard),
        })
        .build()
}

// --- the tests ------------------------------------------------------------------------------

/// Two instances, three jobs (fast, slow enough to overlap itself, failing): every fired tick
/// gives a documented listener sequence, a history row with the same outcome, and metrics that
/// count the same events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listeners_history_metrics_and_spans_agree_on_every_tick() {
    let collectors = collectors();
    let db = Sqlite::setup().await.unwrap();
    let (fast, slow, failing) = (
        unique_name("fast"),
        unique_name("slow"),
        unique_name("failing"),
    );
    let heard: Heard = Arc::default();
    let mut schedulers = Vec::new();
    for instance in ["a", "b"] {
        let provider = db.provider_with(Opts::own_pool().locked_by(instance)).await;
        let scheduler = recorded(provider, instance, &heard);
        scheduler.add(job(&fast, || async { Ok(()) })).unwrap();
        scheduler
            .add(job(&slow, || async {
                tokio::time::sleep(Duration::from_millis(2300)).await;
                Ok(())
            }))
            .unwrap();
        scheduler
            .add(job(&failing, || async {
                Err("upstream said no".to_owned())
            }))
            .unwrap();
        schedulers.push(scheduler);
    }
    for s in &schedulers {
        s.start();
    }
    tokio::time::sleep(Duration::from_millis(4600)).await;
    for s in &schedulers {
        s.shutdown().await;
    }

    let heard = heard.lock().unwrap().clone();
    let provider = db.provider();
    let mut seen = HashMap::<(String, RunOutcome), usize>::new();
    for ((instance, job, tick), events) in &heard {
        let outcome = outcome_of(events);
        *seen.entry((job.clone(), outcome)).or_default() += 1;
        // The history row of this instance for this tick says the same.
        let rows: Vec<_> = provider
            .runs(&RunQuery::latest(1000).name(job.as_str()))
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.locked_by == *instance && r.tick == Some(*tick))
            .collect();
        // A tick another instance claimed leaves no row here: its row is that instance's.
        if outcome == RunOutcome::SkippedHeld {
            assert!(rows.is_empty(), "{instance} {job} {tick}: {rows:?}");
            continue;
        }
        assert_eq!(rows.len(), 1, "{instance} {job} {tick}: {rows:?}");
        let row = &rows[0];
        assert_eq!(row.outcome, outcome, "{events:?} vs {row:?}");
        assert_eq!(row.name, *job, "lock name recorded, also for overlaps");
        assert!(row.finished_at.is_some(), "{row:?}");
        if let Some(acquired) = events.iter().find(|e| e.starts_with("acquired ")) {
            let token: i64 = acquired["acquired ".len()..].parse().unwrap();
            assert_eq!(row.fencing_token, Some(token));
        } else {
            assert_eq!(row.fencing_token, None);
        }
        if outcome == RunOutcome::Failed {
            assert_eq!(row.error.as_deref(), Some("upstream said no"));
        }
    }
    let count = |job: &str, outcome| seen.get(&(job.to_owned(), outcome)).copied().unwrap_or(0);
    eprintln!("outcomes heard: {seen:?}");
    assert!(count(&fast, RunOutcome::Executed) >= 3);
    assert!(count(&failing, RunOutcome::Failed) >= 3);
    assert!(count(&slow, RunOutcome::SkippedOverlap) >= 1, "{seen:?}");
    assert!(count(&slow, RunOutcome::Executed) >= 1);
    for job in [&fast, &slow, &failing] {
        let total: usize = seen
            .iter()
            .filter(|((j, outcome), _)| j == job && *outcome != RunOutcome::SkippedHeld)
            .map(|(_, n)| n)
            .sum();
        let rows = provider
            .runs(&RunQuery::latest(1000).name(job.as_str()))
            .await
            .unwrap();
        assert_eq!(
            rows.len(),
            total,
            "{job}: one row per heard tick and no other"
        );
    }

    // Metrics count the same events.
    for job in [&fast, &slow, &failing] {
        let m = metrics_of(job);
        let n = |outcome| count(job, outcome) as f64;
        let ran = n(RunOutcome::Executed) + n(RunOutcome::Failed);
        let held = n(RunOutcome::SkippedHeld);
        let overlap = n(RunOutcome::SkippedOverlap);
        assert_eq!(
            metric(&m, metric_names::ATTEMPTS, &[]),
            ran + held,
            "{job} {m:?}"
        );
        assert_eq!(metric(&m, metric_names::ACQUIRED, &[]), ran, "{job}");
        assert_eq!(
            metric(&m, metric_names::SKIPPED, &[("reason", "held")]),
            held,
            "{job}"
        );
        assert_eq!(
            metric(&m, metric_names::SKIPPED, &[("reason", "overlap")]),
            overlap
        );
        assert_eq!(
            metric(&m, metric_names::RUNS, &[("outcome", "executed")]),
            n(RunOutcome::Executed)
        );
        assert_eq!(
            metric(&m, metric_names::RUNS, &[("outcome", "failed")]),
            n(RunOutcome::Failed)
        );
        assert_eq!(
            metric(&m, metric_names::FIRE_LATENESS, &[]),
            ran + held + overlap,
            "one lateness sample per fired tick"
        );
        let durations = metric(&m, metric_names::JOB_DURATION, &[("outcome", "executed")])
            + metric(&m, metric_names::JOB_DURATION, &[("outcome", "failed")]);
        assert_eq!(durations, ran, "one duration sample per run");
        assert_eq!(metric(&m, metric_names::ERRORS, &[]), 0.0);
        assert_eq!(metric(&m, metric_names::HISTORY_ERRORS, &[]), 0.0);
    }
    let last_success = metric(&metrics_of(&fast), metric_names::LAST_SUCCESS, &[]);
    let age = Utc::now().timestamp_millis() as f64 / 1000.0 - last_success;
    assert!((0.0..10.0).contains(&age), "last success {age} s ago");
    assert_eq!(
        metric(&metrics_of(&failing), metric_names::LAST_SUCCESS, &[]),
        0.0
    );

    // Spans: one `shedlock.run` per fired tick with its outcome; one `shedlock.lock` per lock
    // attempt with the token of each run that took it.
    let spans = collectors.spans.lock().unwrap().clone();
    for job in [&fast, &slow, &failing] {
        let runs: Vec<_> = spans
            .iter()
            .filter(|(name, f)| name == "shedlock.run" && f.get("job") == Some(job))
            .collect();
        let heard_here = seen
            .iter()
            .filter(|((j, _), _)| j == job)
            .map(|(_, n)| *n)
            .sum::<usize>();
        assert_eq!(runs.len(), heard_here, "{job}");
        for (_, fields) in &runs {
            let outcome: RunOutcome = fields["outcome"].parse().unwrap();
            assert!(fields.contains_key("tick"));
            assert!(count(job, outcome) > 0, "{fields:?}");
        }
        let locks: Vec<_> = spans
            .iter()
            .filter(|(name, f)| name == "shedlock.lock" && f.get("lock") == Some(job))
            .collect();
        let with_token = locks
            .iter()
            .filter(|(_, f)| f.contains_key("token"))
            .count();
        let ran = count(job, RunOutcome::Executed) + count(job, RunOutcome::Failed);
        assert_eq!(with_token, ran, "{job}: {locks:?}");
        assert!(
            locks
                .iter()
                .all(|(_, f)| f.contains_key("outcome") && f.contains_key("tick"))
        );
    }
    db.teardown().await;
}

/// An operator's release during a run: keep-alive's next renewal is refused, the run is
/// cancelled, and listener, history and metrics all say `cancelled-lost-lock`. A database
/// without the tables: the attempt is an `error` everywhere it can be recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lock_and_missing_table_are_reported() {
    collectors();
    let db = Sqlite::setup().await.unwrap();
    let lost_job = unique_name("released");
    let heard: Heard = Arc::default();
    let provider = db
        .provider_with(
            Opts::own_pool().keep_alive(KeepAlive::lease(Duration::from_millis(900)).unwrap()),
        )
        .await;
    let scheduler = recorded(provider.clone(), "a", &heard);
    let name = lost_job.clone();
    scheduler
        .add(Job::new(
            lost_job.as_str(),
            Schedule::parse("*/10 * * * * *", "UTC").unwrap(),
            move || {
                let name = name.clone();
                async move {
                    let cfg =
                        LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO)?;
                    run_locked(cfg, async {
                        tokio::time::sleep(Duration::from_secs(20)).await;
                        Ok::<_, String>(())
                    })
                    .await
                }
            },
        ))
        .unwrap();
    scheduler.start();
    // Wait for the run to hold its lock, then release it as an operator would.
    let state = loop {
        if let Some(state) = provider.lock_state(&lost_job).await.unwrap()
            && state.is_held()
        {
            break state;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        provider
            .force_release(&lost_job, state.fencing_token)
            .await
            .unwrap()
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while scheduler.stats(&lost_job).unwrap().lock_lost == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the run did not notice"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    scheduler.shutdown().await;
    let rows = provider
        .runs(&RunQuery::latest(10).name(lost_job.as_str()))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].outcome, RunOutcome::CancelledLostLock);
    assert_eq!(rows[0].fencing_token, Some(state.fencing_token));
    assert!(
        rows[0].error.as_deref().unwrap().contains("lost"),
        "{rows:?}"
    );
    let events: Vec<_> = heard.lock().unwrap().values().cloned().collect();
    assert_eq!(events.len(), 1);
    assert_eq!(outcome_of(&events[0]), RunOutcome::CancelledLostLock);
    let m = metrics_of(&lost_job);
    assert_eq!(metric(&m, metric_names::LOCK_LOST, &[]), 1.0);
    assert_eq!(
        metric(
            &m,
            metric_names::RUNS,
            &[("outcome", "cancelled-lost-lock")]
        ),
        1.0
    );

    // No tables: the lock cannot be attempted and the history cannot be written; both counted.
    let broken_job = unique_name("no_table");
    let heard: Heard = Arc::default();
    let broken = db.provider_for_table(&unique_name("missing"));
    let scheduler = recorded(broken, "a", &heard);
    scheduler
        .add(job(&broken_job, || async { Ok(()) }))
        .unwrap();
    scheduler.start();
    tokio::time::sleep(Duration::from_millis(1600)).await;
    scheduler.shutdown().await;
    let heard = heard.lock().unwrap().clone();
    assert!(!heard.is_empty());
    for events in heard.values() {
        assert_eq!(outcome_of(events), RunOutcome::Error, "{events:?}");
        assert!(
            events[1].contains("migrate"),
            "the error names the fix: {events:?}"
        );
    }
    let m = metrics_of(&broken_job);
    assert_eq!(metric(&m, metric_names::ERRORS, &[]), heard.len() as f64);
    assert_eq!(
        metric(&m, metric_names::HISTORY_ERRORS, &[]),
        heard.len() as f64
    );
    db.teardown().await;
}

/// Retention: a scheduler prunes its own jobs' rows older than its retention when it starts,
/// and leaves another job's (a service sharing the table).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_older_than_the_retention_is_pruned_at_start() {
    collectors();
    let db = Sqlite::setup().await.unwrap();
    let provider = db.provider();
    let ours = unique_name("ours");
    let other = unique_name("other");
    let mut old_ids = Vec::new();
    for job in [&ours, &ours, &other] {
        let id = provider
            .record_run(&shedlock::history::NewRun::new(
                job.as_str(),
                job.as_str(),
                None,
                RunOutcome::Executed,
            ))
            .await
            .unwrap();
        old_ids.push(id);
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let scheduler = Scheduler::builder(provider.clone())
        .misfire_grace(Duration::ZERO)
        .history(RunHistory::keep_for(Duration::from_secs(1)).prune_every(Duration::from_secs(1)))
        .build();
    scheduler.add(job(&ours, || async { Ok(()) })).unwrap();
    scheduler.start();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    scheduler.shutdown().await;
    let ids = |job: &str| {
        let provider = provider.clone();
        let job = job.to_owned();
        async move {
            let rows = provider
                .runs(&RunQuery::latest(10).name(job.as_str()))
                .await
                .unwrap();
            rows.iter().map(|r| r.id).collect::<Vec<i64>>()
        }
    };
    let ours_now = ids(&ours).await;
    assert!(
        !ours_now.contains(&old_ids[0]) && !ours_now.contains(&old_ids[1]),
        "its old rows are pruned: {ours_now:?} (old {old_ids:?})"
    );
    assert!(!ours_now.is_empty(), "rows younger than the retention stay");
    assert_eq!(
        ids(&other).await,
        [old_ids[2]],
        "another job's old row stays"
    );
    db.teardown().await;
}

/// A job that panics on its first run: listeners hear it finish as `panicked`, its history row
/// says so with the message, the runs counter counts it; the next tick runs. An unlock that
/// fails is counted and its background retry too; the clock offset gauge is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_unlock_retries_and_the_clock_offset_are_reported() {
    collectors();
    let db = Sqlite::setup().await.unwrap();
    let name = unique_name("panics");
    let heard: Heard = Arc::default();
    let provider = db.provider_with(Opts::own_pool()).await;
    let scheduler = recorded(provider.clone(), "a", &heard);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    scheduler
        .add(job(&name, move || {
            let calls = Arc::clone(&calls);
            async move {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                    panic!("boom in the job");
                }
                Ok(())
            }
        }))
        .unwrap();
    scheduler.start();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while scheduler.stats(&name).unwrap().executed == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "ran again after the panic"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    scheduler.shutdown().await;
    let outcomes: Vec<RunOutcome> = heard
        .lock()
        .unwrap()
        .values()
        .map(|events| outcome_of(events))
        .collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == RunOutcome::Panicked)
            .count(),
        1,
        "{outcomes:?}"
    );
    let rows = provider
        .runs(
            &RunQuery::latest(50)
                .name(name.as_str())
                .outcome(RunOutcome::Panicked),
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(
        rows[0]
            .error
            .as_deref()
            .unwrap()
            .contains("boom in the job")
    );
    let m = metrics_of(&name);
    assert_eq!(
        metric(&m, metric_names::RUNS, &[("outcome", "panicked")]),
        1.0
    );
    assert!(
        all_metrics()
            .keys()
            .any(|(metric, _)| metric == metric_names::CLOCK_OFFSET),
        "the clock offset gauge is set"
    );

    // An unlock that cannot get the database within its timeout, then can.
    let lock = unique_name("unlock_retry");
    let impatient = db
        .provider_with(Opts::default().lock_timeout(Duration::from_millis(300)))
        .await;
    let cfg =
        LockConfiguration::new(lock.as_str(), Duration::from_secs(60), Duration::ZERO).unwrap();
    let guard = impatient.lock(&cfg).await.unwrap().unwrap();
    let blocker = db.block(&lock, false).await;
    assert!(guard.unlock().await.is_err());
    blocker.release().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = metrics_labelled("lock", &lock);
        if metric(&m, metric_names::UNLOCK_RETRIED, &[("outcome", "released")]) == 1.0 {
            assert!(metric(&m, metric_names::UNLOCK_FAILED, &[]) >= 1.0, "{m:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "retried: {m:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!provider.lock_state(&lock).await.unwrap().unwrap().is_held());
    db.teardown().await;
}
