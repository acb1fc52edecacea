//! How long the dashboard (`shedlock-web`) takes to answer, server side (issue 37: the jobs
//! page with 10,000 jobs within 300 ms, a history page over 1,000,000 rows within 100 ms).
//! Every request goes through the dashboard's router in this process (`tower`'s `oneshot`, no
//! socket), as a browser's request would, and the time is from the request to the last byte
//! of its body: the store's reads, the cron parsing, the rendering.
//!
//! - **jobs** (every backend): J run-time schedules (default 10,000) created in one call, with
//!   varied crons and time zones; 500 of their locks taken, 100 of them still held; on the SQL
//!   backends a last run recorded for each job. Timed: `GET /jobs` (first page, sorted by
//!   name), `/jobs?sort=next`, `/jobs?q=…` (a filter matching 20 jobs), `/api/v1/jobs?page=1`,
//!   `/` (the overview), `/locks` (500 rows) and `/jobs/{name}` (one job's page, which reads the same snapshot).
//! - **history** (the SQL backends, whose rows one SQL statement writes; not run on Redis): R history rows (default 1,000,000)
//!   written by one SQL statement into `<table>_runs` of a table of 50 jobs: 4 instances,
//!   about 91% executed, 8% skipped-held, 1% failed, started over the last 30 days (ids rise
//!   with the start); then `ANALYZE`, and a check that migrations 5 and 6's indexes are there. Timed:
//!   `GET /history` (first page), filtered by job, by `outcome=failed`, by instance, by a
//!   one-day `since`/`until` window, a deep page (`before=` the middle id), `/jobs/{name}` with
//!   its timeline over 1 h and 24 h, `/api/v1/runs?job=…` and `/` (the overview counts the
//!   failures of the last 24 h).
//!
//! Each request is sent twice to warm up, then N times (default 20): p50, p95 and the worst
//! in ms, and the body's size in KB. Every answer must be `200 OK`.
//!
//! ```text
//! cargo bench --bench dashboard                                   # every backend, both parts
//! cargo bench --bench dashboard -- --backend postgres --part history --rows 200000
//! cargo bench --bench dashboard -- --backend sqlite --reps 50 --save /tmp/pages   # + the bodies
//! ```
//! Figures go to BENCHMARKS.md; nothing here asserts a time.
#![allow(missing_docs)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures_util::StreamExt;
use shedlock::history::{NewRun, RunOutcome};
use shedlock::schedules::{NewSchedule, ScheduleStore};
use shedlock::{Backend, LockAdmin, LockConfiguration, LockProvider};
use shedlock_suite::{TestDb, mysql_url, postgres_url};
use shedlock_web::{Auth, Options, Source};
use sqlx::{AssertSqlSafe, Executor, Row};
use tower::ServiceExt;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Jobs,
    History,
    Both,
}

struct Args {
    backends: Vec<Backend>,
    part: Part,
    jobs: usize,
    rows: u64,
    reps: usize,
    save: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut args = Args {
        backends: vec![
            Backend::Postgres,
            Backend::MySql,
            Backend::Sqlite,
            Backend::Redis,
        ],
        part: Part::Both,
        jobs: 10_000,
        rows: 1_000_000,
        reps: 20,
        save: None,
    };
    let mut it = std::env::args().skip(1).filter(|a| a != "--bench");
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--backend" => {
                args.backends = match value().as_str() {
                    "all" => args.backends.clone(),
                    "postgres" => vec![Backend::Postgres],
                    "mysql" => vec![Backend::MySql],
                    "sqlite" => vec![Backend::Sqlite],
                    "redis" => vec![Backend::Redis],
                    other => panic!("unknown backend {other}"),
                }
            }
            "--part" => {
                args.part = match value().as_str() {
                    "jobs" => Part::Jobs,
                    "history" => Part::History,
                    "both" => Part::Both,
                    other => panic!("unknown part {other} (jobs, history or both)"),
                }
            }
            "--jobs" => args.jobs = value().parse().expect("a number"),
            "--rows" => args.rows = value().parse().expect("a number"),
            "--reps" => args.reps = value().parse().expect("a number"),
            "--save" => args.save = Some(PathBuf::from(value())),
            other => panic!("unknown flag {other}"),
        }
    }
    assert!(args.reps > 0, "--reps must be at least 1");
    args
}

/// A connection of the benchmark's own to the store's database, for the bulk writes and the
/// catalog reads the provider does not offer.
enum Raw {
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
    Sqlite(sqlx::SqlitePool),
    None,
}

impl Raw {
    async fn exec(&self, sql: &str) {
        let sql = AssertSqlSafe(sql.to_owned());
        let done = match self {
            Raw::Postgres(pool) => pool.execute(sql).await.map(drop),
            Raw::MySql(pool) => pool.execute(sql).await.map(drop),
            Raw::Sqlite(pool) => pool.execute(sql).await.map(drop),
            Raw::None => Ok(()),
        };
        if let Err(e) = done {
            panic!("{e}");
        }
    }

    /// The first column of every row, as text.
    async fn texts(&self, sql: &str) -> Vec<String> {
        let sql = AssertSqlSafe(sql.to_owned());
        match self {
            Raw::Postgres(pool) => sqlx::query(sql)
                .fetch_all(pool)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
            Raw::MySql(pool) => sqlx::query(sql)
                .fetch_all(pool)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
            Raw::Sqlite(pool) => sqlx::query(sql)
                .fetch_all(pool)
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect(),
            Raw::None => Vec::new(),
        }
    }
}

/// A backend of the suite, with a raw connection to its database.
trait Bench: TestDb {
    async fn raw(&self) -> Raw;
}

impl Bench for shedlock_suite::Postgres {
    async fn raw(&self) -> Raw {
        Raw::Postgres(sqlx::PgPool::connect(&postgres_url()).await.unwrap())
    }
}

impl Bench for shedlock_suite::MySql {
    async fn raw(&self) -> Raw {
        Raw::MySql(sqlx::MySqlPool::connect(&mysql_url()).await.unwrap())
    }
}

impl Bench for shedlock_suite::Sqlite {
    async fn raw(&self) -> Raw {
        Raw::Sqlite(shedlock_suite::sqlite_pool(self.path(), 1).await)
    }
}

impl Bench for shedlock_suite::Redis {
    async fn raw(&self) -> Raw {
        Raw::None
    }
}

/// One timed request: its label, p50, p95 and worst (ms), the body's size (bytes).
struct Figure {
    label: String,
    p50: f64,
    p95: f64,
    worst: f64,
    bytes: usize,
}

/// Sends `path` to `router` 2 + `reps` times; the figures of the last `reps`.
async fn time(router: &Router, path: &str, reps: usize, save: Option<(&PathBuf, &str)>) -> Figure {
    let mut ms = Vec::with_capacity(reps);
    let mut body = Vec::new();
    for i in 0..reps + 2 {
        // A browser's request names the host (the dashboard answers only for its own names).
        let request = Request::get(path)
            .header("host", "localhost")
            .body(Body::empty())
            .unwrap();
        let started = Instant::now();
        let response = router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 64 << 20)
            .await
            .unwrap();
        let took = started.elapsed();
        assert_eq!(
            status,
            StatusCode::OK,
            "{path}: {}",
            String::from_utf8_lossy(&bytes)
        );
        if i >= 2 {
            ms.push(took.as_secs_f64() * 1e3);
        }
        body = bytes.to_vec();
    }
    if let Some((dir, part)) = save {
        let file: String = path
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(format!("{part}{file}.out")), &body).unwrap();
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
    Figure {
        label: path.to_owned(),
        p50: at(0.5),
        p95: at(0.95),
        worst: ms[ms.len() - 1],
        bytes: body.len(),
    }
}

fn print(backend: Backend, figures: &[Figure]) {
    for f in figures {
        println!(
            "| {backend:?} | `{}` | {:.1} | {:.1} | {:.1} | {:.1} |",
            f.label,
            f.p50,
            f.p95,
            f.worst,
            f.bytes as f64 / 1024.0
        );
    }
}

const CRONS: [&str; 8] = [
    "0 */5 * * * *",
    "0 0 * * * *",
    "30 15 3 * * *",
    "0 0 0 * * MON",
    "*/10 * * * * *",
    "0 0 12 1 * *",
    "0 15,45 8-18 * * MON-FRI",
    "0 0 0 1 1 *",
];
const ZONES: [&str; 7] = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Asia/Tokyo",
    "Australia/Sydney",
    "America/Sao_Paulo",
    "Asia/Kolkata",
];
const FAMILIES: [&str; 5] = ["sync", "report", "cleanup", "billing", "mail"];

/// Part 1: `args.jobs` schedules, their locks and last runs; the jobs pages.
async fn jobs_part<B: Bench>(args: &Args) -> Option<Vec<Figure>>
where
    B::Provider: Into<Source> + ScheduleStore + LockProvider,
{
    let db = B::setup().await?;
    let provider = db.provider();
    let names: Vec<String> = (0..args.jobs)
        .map(|i| format!("{}-{i:05}", FAMILIES[i % FAMILIES.len()]))
        .collect();
    let schedules: Vec<NewSchedule> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            // Not a multiple of either list's length: every cron meets every zone.
            let zone = ZONES[(i / 3) % ZONES.len()];
            NewSchedule::job(
                name.as_str(),
                "bench",
                "{}",
                CRONS[i % CRONS.len()],
                Some(zone.to_owned()),
            )
        })
        .collect();
    let started = Instant::now();
    provider
        .create_schedules(&schedules, "bench")
        .await
        .unwrap();
    eprintln!(
        "{:?}: {} schedules created in {} ms",
        B::BACKEND,
        names.len(),
        started.elapsed().as_millis()
    );
    // 500 locks (every 20th job), 100 of them still held (every 100th).
    let mut held = Vec::new();
    for (i, name) in names.iter().enumerate().step_by(20).take(500) {
        let config = LockConfiguration::new(name, Duration::from_secs(3_600), Duration::ZERO)
            .expect("a lock configuration");
        let guard = provider.lock(&config).await.unwrap().expect("a free lock");
        if i % 100 == 0 {
            held.push(guard);
        } else {
            guard.unlock().await.unwrap();
        }
    }
    if let Some(runs) = B::run_store(&provider) {
        let started = Instant::now();
        futures_util::stream::iter(names.iter().enumerate())
            .map(|(i, name)| {
                let runs = runs.clone();
                async move {
                    let outcome = match i % 10 {
                        0 => RunOutcome::Failed,
                        1 => RunOutcome::SkippedHeld,
                        _ => RunOutcome::Executed,
                    };
                    let run = NewRun::new(name.as_str(), name.as_str(), None, outcome)
                        .fencing_token(Some(i as i64 + 1));
                    runs.record_run(&run).await.unwrap();
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await;
        eprintln!(
            "{:?}: {} last runs recorded in {} ms",
            B::BACKEND,
            names.len(),
            started.elapsed().as_millis()
        );
    }
    let router = shedlock_web::router(provider.clone().into(), Options::new(Auth::None));
    let one = &names[names.len() / 2];
    let mut figures = Vec::new();
    for path in [
        "/jobs".to_owned(),
        "/jobs?sort=next".to_owned(),
        "/jobs?q=billing-001".to_owned(),
        "/api/v1/jobs?page=1".to_owned(),
        "/".to_owned(),
        "/locks".to_owned(),
        format!("/jobs/{one}"),
    ] {
        let save = args.save.as_ref().map(|dir| (dir, "jobs"));
        figures.push(time(&router, &path, args.reps, save).await);
    }
    figures.extend(parts::<B>(&provider, &names[..100], args.reps).await);
    for guard in held {
        guard.unlock().await.unwrap();
    }
    drop(router);
    db.teardown().await;
    Some(figures)
}

/// The parts of what `/jobs` reads and computes, each timed alone as the page does it: the
/// store's clock, every schedule, every lock row, `Schedule::next_after` called once per job
/// (each (cron, zone) parsed once: what the page did before it kept one next tick per pair),
/// the last runs of a page of 100 jobs.
async fn parts<B: Bench>(provider: &B::Provider, page: &[String], reps: usize) -> Vec<Figure>
where
    B::Provider: ScheduleStore,
{
    let mut figures = Vec::new();
    let mut timed = |label: &str, mut ms: Vec<f64>| {
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() as f64 - 1.0) * q).round() as usize];
        figures.push(Figure {
            label: label.to_owned(),
            p50: at(0.5),
            p95: at(0.95),
            worst: ms[ms.len() - 1],
            bytes: 0,
        });
    };
    let ms = |started: Instant| started.elapsed().as_secs_f64() * 1e3;
    let (mut now, mut schedules, mut locks, mut next, mut last) =
        (vec![], vec![], vec![], vec![], vec![]);
    let runs = B::run_store(provider);
    for i in 0..reps + 2 {
        let started = Instant::now();
        let at = provider.now().await.unwrap();
        let now_ms = ms(started);
        let started = Instant::now();
        let rows = provider.schedules_since(0).await.unwrap();
        let schedules_ms = ms(started);
        let started = Instant::now();
        provider.lock_rows().await.unwrap();
        let locks_ms = ms(started);
        let started = Instant::now();
        let mut parsed = std::collections::HashMap::new();
        let mut ticks = 0;
        for row in &rows {
            let (Some(cron), Some(zone)) = (row.cron.as_deref(), row.time_zone.as_deref()) else {
                continue;
            };
            let schedule = parsed
                .entry((cron.to_owned(), zone.to_owned()))
                .or_insert_with(|| shedlock::Schedule::parse(cron, zone).ok());
            ticks += usize::from(schedule.as_ref().and_then(|s| s.next_after(at)).is_some());
        }
        assert!(ticks > 0, "no next tick computed");
        let next_ms = ms(started);
        let started = Instant::now();
        if let Some(runs) = &runs {
            runs.latest_runs(page).await.unwrap();
        }
        let last_ms = ms(started);
        if i >= 2 {
            now.push(now_ms);
            schedules.push(schedules_ms);
            locks.push(locks_ms);
            next.push(next_ms);
            last.push(last_ms);
        }
    }
    timed("part: the store's now()", now);
    timed("part: schedules_since(0), every schedule", schedules);
    timed("part: lock_rows(), every lock row", locks);
    timed("part: next_after() once per job", next);
    if runs.is_some() {
        timed("part: latest_runs() of 100 jobs", last);
    }
    figures
}

/// The digits 0 to 9 as a derived table (MariaDB and SQLite: no `generate_series`).
const DIGITS: &str = "(SELECT 0 AS x UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
     UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
     UNION ALL SELECT 8 UNION ALL SELECT 9)";

/// `0 .. rows` as `n` (MariaDB and SQLite): the digits crossed with themselves.
fn numbers(rows: u64) -> String {
    let mut places = 1;
    while 10u64.pow(places as u32) < rows {
        places += 1;
    }
    let mut terms = Vec::new();
    let mut from = Vec::new();
    for p in 0..places {
        terms.push(format!("d{p}.x * {}", 10u64.pow(p as u32)));
        from.push(format!("{DIGITS} AS d{p}"));
    }
    format!(
        "(SELECT {} AS n FROM {}) AS s WHERE n < {rows}",
        terms.join(" + "),
        from.join(" CROSS JOIN ")
    )
}

/// The SQL that writes `rows` history rows into `runs` (see the module's doc).
fn fill_sql(backend: Backend, runs: &str, rows: u64) -> String {
    let columns =
        "job, name, tick, started_at, finished_at, outcome, locked_by, fencing_token, error";
    let outcome = |n: &str| {
        format!(
            "CASE WHEN {n} % 97 = 0 THEN 'failed' WHEN {n} % 13 = 0 THEN 'skipped-held' ELSE 'executed' END"
        )
    };
    let error =
        |n: &str| format!("CASE WHEN {n} % 97 = 0 THEN 'exit status 1: connection refused' END");
    // 30 days over `rows` rows, the newest a step before now.
    let step_us = 30 * 86_400 * 1_000_000 / rows;
    match backend {
        Backend::Postgres => format!(
            "INSERT INTO {runs} ({columns})
             SELECT 'hist-' || lpad((g % 50)::TEXT, 2, '0'), 'hist-' || lpad((g % 50)::TEXT, 2, '0'),
                    t, t, t + ((g % 7) * 1000 + 250) * INTERVAL '1 millisecond', {}, 'instance-' || (g / 50 % 4),
                    g + 1, {}
             FROM generate_series(0, {last}) AS g,
                  LATERAL (SELECT now() - ({rows} - g)::BIGINT * {step_us} * INTERVAL '1 microsecond' AS t) AS s
             ORDER BY g",
            outcome("g"),
            error("g"),
            last = rows - 1,
        ),
        Backend::MySql => format!(
            "INSERT INTO {runs} ({columns})
             SELECT CONCAT('hist-', LPAD(n % 50, 2, '0')), CONCAT('hist-', LPAD(n % 50, 2, '0')),
                    t, t, t + INTERVAL ((n % 7) * 1000 + 250) * 1000 MICROSECOND, {}, CONCAT('instance-', FLOOR(n / 50) % 4),
                    n + 1, {}
             FROM (SELECT n, UTC_TIMESTAMP(6) - INTERVAL ({rows} - n) * {step_us} MICROSECOND AS t FROM {}) AS q
             ORDER BY n",
            outcome("n"),
            error("n"),
            numbers(rows),
        ),
        _ => format!(
            "INSERT INTO {runs} ({columns})
             SELECT printf('hist-%02d', n % 50), printf('hist-%02d', n % 50),
                    t, t, t + (n % 7) * 1000 + 250, {}, 'instance-' || (n / 50 % 4), n + 1, {}
             FROM (SELECT n, CAST(unixepoch('subsec') * 1000 AS INTEGER) - ({rows} - n) * {step_ms} AS t FROM {}) AS q
             ORDER BY n",
            outcome("n"),
            error("n"),
            numbers(rows),
            step_ms = step_us / 1_000,
        ),
    }
}

/// Part 2: `args.rows` history rows of 50 jobs; the history pages.
async fn history_part<B: Bench>(args: &Args) -> Option<Vec<Figure>>
where
    B::Provider: Into<Source> + ScheduleStore,
{
    let db = B::setup().await?;
    let provider = db.provider();
    let raw = db.raw().await;
    let schedules: Vec<NewSchedule> = (0..50)
        .map(|i| {
            NewSchedule::job(
                format!("hist-{i:02}"),
                "bench",
                "{}",
                CRONS[i % CRONS.len()],
                None,
            )
        })
        .collect();
    provider
        .create_schedules(&schedules, "bench")
        .await
        .unwrap();
    let runs = format!("{}_runs", db.table());
    let started = Instant::now();
    raw.exec(&fill_sql(B::BACKEND, &runs, args.rows)).await;
    let filled = started.elapsed();
    let started = Instant::now();
    raw.exec(&match B::BACKEND {
        Backend::MySql => format!("ANALYZE TABLE {runs}"),
        Backend::Sqlite => "ANALYZE".to_owned(),
        _ => format!("ANALYZE {runs}"),
    })
    .await;
    eprintln!(
        "{:?}: {} history rows written in {} ms, analyzed in {} ms",
        B::BACKEND,
        args.rows,
        filled.as_millis(),
        started.elapsed().as_millis()
    );
    let indexes = raw
        .texts(&match B::BACKEND {
            Backend::Postgres => {
                format!("SELECT indexname::TEXT FROM pg_indexes WHERE tablename = '{runs}'")
            }
            Backend::MySql => format!(
                "SELECT DISTINCT CAST(index_name AS CHAR) FROM information_schema.statistics
                 WHERE table_schema = DATABASE() AND table_name = '{runs}'"
            ),
            _ => format!(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = '{runs}'"
            ),
        })
        .await;
    for wanted in [
        "by_name_id",
        "by_job_id",
        "by_locked_by_id",
        "by_outcome_id",
        "by_outcome_start",
        "by_locked_by_start",
    ] {
        assert!(
            indexes.iter().any(|i| i.ends_with(wanted)),
            "the index {wanted} (migrations 5 and 6) is missing on {runs}: {indexes:?}"
        );
    }
    let mut ends = Vec::new();
    for end in ["MIN", "MAX"] {
        let text = raw
            .texts(&format!("SELECT CAST({end}(id) AS CHAR(20)) FROM {runs}"))
            .await;
        // PostgreSQL's CHAR(20) pads with spaces.
        ends.push(text[0].trim().parse::<i64>().expect("an id"));
    }
    let middle = ends[0] + (ends[1] - ends[0]) / 2;
    let router = shedlock_web::router(provider.clone().into(), Options::new(Auth::None));
    let now = chrono::Utc::now();
    let since = (now - chrono::Duration::days(10)).format("%Y-%m-%dT%H:%M");
    let until = (now - chrono::Duration::days(9)).format("%Y-%m-%dT%H:%M");
    let mut figures = Vec::new();
    for path in [
        "/history".to_owned(),
        "/history?job=hist-07".to_owned(),
        "/history?outcome=failed".to_owned(),
        "/history?instance=instance-2".to_owned(),
        format!("/history?since={since}&until={until}"),
        format!("/history?before={middle}"),
        "/jobs/hist-07?window=1h".to_owned(),
        "/jobs/hist-07?window=24h".to_owned(),
        "/api/v1/runs?job=hist-07".to_owned(),
        "/".to_owned(),
    ] {
        let save = args.save.as_ref().map(|dir| (dir, "history"));
        figures.push(time(&router, &path, args.reps, save).await);
    }
    drop(router);
    db.teardown().await;
    Some(figures)
}

async fn run_backend<B: Bench>(args: &Args)
where
    B::Provider: Into<Source> + ScheduleStore + LockProvider,
{
    if args.part != Part::History {
        match jobs_part::<B>(args).await {
            Some(figures) => print(B::BACKEND, &figures),
            None => println!("| {:?} | skipped | | | | |", B::BACKEND),
        }
    }
    if args.part != Part::Jobs && B::BACKEND != Backend::Redis {
        println!("\nhistory, {} rows:\n", args.rows);
        header();
        match history_part::<B>(args).await {
            Some(figures) => print(B::BACKEND, &figures),
            None => println!("| {:?} | skipped | | | | |", B::BACKEND),
        }
        println!();
    }
}

fn header() {
    println!("| backend | request | p50 ms | p95 ms | worst ms | KB |");
    println!("|---|---|---|---|---|---|");
}

fn main() {
    let args = parse_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "{} jobs, {} history rows, {} repetitions after 2 warm-ups\n",
        args.jobs, args.rows, args.reps
    );
    for backend in args.backends.clone() {
        if args.part != Part::History {
            header();
        }
        runtime.block_on(async {
            match backend {
                Backend::Postgres => run_backend::<shedlock_suite::Postgres>(&args).await,
                Backend::MySql => run_backend::<shedlock_suite::MySql>(&args).await,
                Backend::Sqlite => run_backend::<shedlock_suite::Sqlite>(&args).await,
                _ => run_backend::<shedlock_suite::Redis>(&args).await,
            }
        });
        println!();
    }
}
