//! The dashboard (`shedlock-web`) in a real browser: headless Chromium driven through
//! chromedriver (WebDriver, `fantoccini`), against three `shedlock-harness` processes on
//! PostgreSQL that run `job_0` every second, watch the store's schedules and write the run
//! history.
//!
//! Through the pages, as an operator would: pause the job (no process runs it while paused,
//! read from the database), resume it, pause it again and ask for a run now (exactly one run,
//! with `requested_by`, and one bar for it on the timeline once the page refreshed itself),
//! release a lock held by the test through its confirmation page (the row is free in the
//! database), and a read-only dashboard that offers no action on any page.
//!
//! Each page is saved as a PNG in `target/dashboard-screenshots/` (or `SHEDLOCK_SCREENSHOTS`);
//! with `SHEDLOCK_UPDATE_SCREENSHOTS=1` the overview, jobs, job and locks pages are also copied
//! to `docs/screenshots/`.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (`apt-get install -y chromium
//! chromium-driver`; `scripts/test` installs them when missing); `SHEDLOCK_CHROMIUM` and
//! `SHEDLOCK_CHROMEDRIVER` name others.
#![allow(missing_docs)]

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;
use shedlock::schedules::ScheduleStore;
use shedlock::{Backend, LockConfiguration, PostgresLockProvider};
use shedlock_suite::place::Place;
use sqlx::{AssertSqlSafe, PgPool};

const HARNESS: &str = env!("CARGO_BIN_EXE_shedlock-harness");

/// A generous deadline for what takes a poll, a tick, a page refresh or a browser's start.
const DEADLINE: Duration = Duration::from_secs(30);

/// How long the test watches a paused job after every process applied the pause.
const PAUSED_WATCH: Duration = Duration::from_secs(5);

/// The job the harness processes run every second.
const JOB: &str = "job_0";

/// The lock the test holds by hand and releases through the pages.
const HELD: &str = "held_by_hand";

const INSTALL: &str = "apt-get install -y chromium chromium-driver";

/// The browser's and the driver's binaries, or a failure naming the command that installs them.
fn browser_binaries() -> (PathBuf, PathBuf) {
    let chromium = std::env::var_os("SHEDLOCK_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let driver = std::env::var_os("SHEDLOCK_CHROMEDRIVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver"));
    let missing: Vec<String> = [&chromium, &driver]
        .into_iter()
        .filter(|path| !path.exists())
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "the browser test needs {} (not found). Install them with: {INSTALL} \
         (scripts/test does when they are missing), or name others with SHEDLOCK_CHROMIUM and \
         SHEDLOCK_CHROMEDRIVER",
        missing.join(" and ")
    );
    (chromium, driver)
}

/// A port nobody listens on now (the kernel's choice).
fn free_port() -> u16 {
    let listener = StdListener::bind("127.0.0.1:0").expect("binding a port on loopback");
    listener.local_addr().expect("its address").port()
}

/// chromedriver and its headless Chromium: the session is closed by [`Browser::close`]; the
/// driver's process group (the driver and the browsers it started) is killed when this is
/// dropped, also when the test fails.
struct Browser {
    client: Option<Client>,
    driver: Child,
}

impl Browser {
    /// Starts chromedriver (its log in `logs/chromedriver.log`) and a browser session, with
    /// `extra` command-line arguments for Chromium.
    async fn start(logs: &Path, extra: &[&str]) -> Browser {
        let (chromium, driver_bin) = browser_binaries();
        let port = free_port();
        let log = logs.join("chromedriver.log");
        let mut command = Command::new(&driver_bin);
        command
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group, so that Drop ends the browsers with it.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let driver = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver_bin.display()));
        let mut browser = Browser {
            client: None,
            driver,
        };
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        let mut args = vec![
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--window-size=1400,1000",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ];
        args.extend_from_slice(extra);
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({ "binary": chromium.display().to_string(), "args": args }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let client = loop {
            let builder = ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await;
            match builder {
                Ok(client) => break client,
                Err(error) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "no browser session from chromedriver at {url} within {DEADLINE:?}: \
                         {error} (its log: {})",
                        log.display()
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        browser.client = Some(client);
        browser
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a browser session")
    }

    /// Ends the session (the browser quits); the driver is ended by Drop.
    async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.close().await;
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and the Chromium processes it started.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where the screenshots go: `SHEDLOCK_SCREENSHOTS`, else `dashboard-screenshots/` in the
/// target directory.
fn screenshot_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHEDLOCK_SCREENSHOTS") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // <target>/<profile>/deps/<test>-<hash>
            let exe = std::env::current_exe().expect("the test's path");
            exe.ancestors()
                .nth(3)
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("target"))
        });
    let target = if target.is_relative() {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(target)
    } else {
        target
    };
    target.join("dashboard-screenshots")
}

/// Fails unless the page has its stylesheet applied (the header laid out as a flex row) and
/// every link of its header leads to `base` (the path the dashboard is mounted at, empty at
/// the root) or under it: what a wrong mount path breaks.
async fn assert_framed(client: &Client, base: &str) {
    let url = client
        .current_url()
        .await
        .map(|u| u.to_string())
        .unwrap_or_default();
    let display = read(client, "header", "getComputedStyle(el).display").await;
    let stylesheet = attr(client, "link[rel=stylesheet]", "href").await;
    assert_eq!(
        display, "flex",
        "{url}: the stylesheet ({stylesheet}) is not applied"
    );
    let links = client
        .execute("return Array.from(document.querySelectorAll('header a')).map(a => a.getAttribute('href'));", vec![])
        .await
        .expect("reading the header's links");
    let links: Vec<String> = serde_json::from_value(links).expect("the header's links");
    let home = if base.is_empty() { "/" } else { base };
    let outside: Vec<&String> = links
        .iter()
        .filter(|href| href.as_str() != home && !href.starts_with(&format!("{base}/")))
        .collect();
    assert!(
        outside.is_empty(),
        "{url}: header links outside {base}/: {outside:?}"
    );
}

/// Saves the whole page (the window grown to its height for the shot) as `<name>.png`.
async fn screenshot(client: &Client, dir: &Path, name: &str) -> PathBuf {
    let height = client
        .execute(
            "return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight);",
            vec![],
        )
        .await
        .expect("the page's height")
        .as_u64()
        .unwrap_or(1000)
        .clamp(1000, 4000);
    client
        .set_window_size(1400, u32::try_from(height).unwrap_or(1000))
        .await
        .expect("resizing the window");
    let png = client.screenshot().await.expect("a screenshot");
    client
        .set_window_size(1400, 1000)
        .await
        .expect("resizing the window back");
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    path
}

/// Waits (up to [`DEADLINE`]) for an element.
async fn wait_for(client: &Client, css: &str) -> fantoccini::elements::Element {
    match client
        .wait()
        .at_most(DEADLINE)
        .for_element(Locator::Css(css))
        .await
    {
        Ok(element) => element,
        Err(error) => {
            let url = client
                .current_url()
                .await
                .map(|u| u.to_string())
                .unwrap_or_default();
            let page = client
                .execute(
                    "return document.body ? document.body.innerText : '';",
                    vec![],
                )
                .await
                .ok()
                .and_then(|text| text.as_str().map(str::to_owned))
                .unwrap_or_default();
            let page: String = page.chars().take(2000).collect();
            panic!("no {css} on {url} within {DEADLINE:?} ({error}); the page says: {page}")
        }
    }
}

/// Reads `what` (a JavaScript expression on `el`) of the first element `css` finds, waiting
/// (up to [`DEADLINE`]) for one. Read in the page in one step: the page's refresh replaces its
/// content every second, which leaves an element found earlier stale.
async fn read(client: &Client, css: &str, what: &str) -> String {
    let script = format!(
        "const el = document.querySelector(arguments[0]); return el ? String({what}) : null;"
    );
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let value = client
            .execute(&script, vec![json!(css)])
            .await
            .unwrap_or_else(|e| panic!("reading {css}: {e}"));
        if let Some(value) = value.as_str() {
            return value.to_owned();
        }
        if tokio::time::Instant::now() >= deadline {
            wait_for(client, css).await;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The text of an element, trimmed.
async fn text(client: &Client, css: &str) -> String {
    read(client, css, "el.textContent.trim()").await
}

/// An attribute of an element (empty when it has none).
async fn attr(client: &Client, css: &str, name: &str) -> String {
    read(client, css, &format!("el.getAttribute({name:?}) ?? ''")).await
}

/// How many elements `css` finds.
async fn count(client: &Client, css: &str) -> usize {
    client
        .find_all(Locator::Css(css))
        .await
        .expect("finding elements")
        .len()
}

/// Clicks `css` (as a user does, through WebDriver) and waits for the page it leads to to
/// have `then`. A click that found the element replaced by the page's refresh is tried again.
///
/// Every click here leads to a new page, and the page before it can have `then` too (the
/// flash of the action before). So the current page is marked first, and `then` is looked for
/// only once a page without the mark has loaded.
async fn click(client: &Client, css: &str, then: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    client
        .execute("window.__shedlock_left = false; return null;", vec![])
        .await
        .expect("marking the page before a click");
    loop {
        let element = wait_for(client, css).await;
        match element.click().await {
            Ok(()) => break,
            Err(error) if tokio::time::Instant::now() < deadline => {
                eprintln!("clicking {css} again: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("clicking {css}: {error}"),
        }
    }
    loop {
        // The mark is gone once the browser has left the page; errors while it navigates
        // are asked again.
        let left = client
            .execute(
                "return window.__shedlock_left === undefined && document.readyState !== 'loading';",
                vec![],
            )
            .await
            .ok()
            .and_then(|value| value.as_bool())
            .unwrap_or(false);
        if left {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("clicking {css} led to no new page within {DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_for(client, then).await;
}

/// The message an action left on the page (`#flash`), failing when it is a refusal.
async fn flash_ok(client: &Client, action: &str) -> String {
    let flash = text(client, "#flash").await;
    assert_eq!(
        count(client, "#flash.error").await,
        0,
        "{action} was refused: {flash}"
    );
    flash
}

/// One history row, as the test reads it.
#[derive(Debug, sqlx::FromRow)]
struct HistoryRow {
    id: i64,
    outcome: String,
    locked_by: String,
    requested_by: Option<String>,
    finished: bool,
    /// When it started, by the database's clock (ms since the epoch).
    started_ms: i64,
}

/// The history rows of `job` with an id above `after`, oldest first.
async fn history(pool: &PgPool, table: &str, job: &str, after: i64) -> Vec<HistoryRow> {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id, outcome::TEXT AS outcome, locked_by::TEXT AS locked_by, \
         requested_by::TEXT AS requested_by, finished_at IS NOT NULL AS finished, \
         (EXTRACT(EPOCH FROM started_at) * 1000)::BIGINT AS started_ms FROM {table}_runs WHERE name = $1 AND id > $2 ORDER BY id"
    )))
    .bind(job)
    .bind(after)
    .fetch_all(pool)
    .await
    .expect("reading the run history")
}

/// The highest id of the run history now (0 when empty).
async fn last_history_id(pool: &PgPool, table: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT COALESCE(MAX(id), 0)::BIGINT FROM {table}_runs"
    )))
    .fetch_one(pool)
    .await
    .expect("reading the run history")
}

/// Waits (up to [`DEADLINE`]) until `job`'s history after `after` has a row `matches` accepts;
/// returns the rows then.
async fn history_until(
    pool: &PgPool,
    table: &str,
    job: &str,
    after: i64,
    what: &str,
    matches: impl Fn(&HistoryRow) -> bool,
) -> Vec<HistoryRow> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let rows = history(pool, table, job, after).await;
        if rows.iter().any(&matches) {
            return rows;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} within {DEADLINE:?}; {job}'s history after id {after}: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until every one of the three processes applied `job`'s current schedule version;
/// returns when the last did (ms, this machine's clock).
async fn applied_everywhere(place: &Place, store: &dyn ScheduleStore, job: &str) -> i64 {
    let version = store
        .schedule(job)
        .await
        .expect("reading the schedule")
        .expect("a stored schedule")
        .version;
    place.applied_by_all(3, version).await
}

/// Serves `router` on a free loopback port with `shedlock_web::serve`; returns its address.
async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the dashboard's port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        shedlock_web::serve(listener, router)
            .await
            .expect("serving the dashboard");
    });
    format!("http://{address}")
}

/// A provider of the test's own on the place's table.
async fn provider(pool: &PgPool, table: &str, locked_by: &str) -> PostgresLockProvider {
    let provider = PostgresLockProvider::builder(pool.clone())
        .table_name(table)
        .locked_by(locked_by)
        .build()
        .expect("a provider");
    provider
        .migrate()
        .await
        .expect("migrating the test's table");
    provider
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_a_browser_pauses_runs_now_and_releases_on_postgres() {
    let Some(place) = Place::new(Backend::Postgres, "web", HARNESS) else {
        return;
    };
    // Fails at once, naming the install command, when the browser is missing.
    browser_binaries();
    let started = std::time::Instant::now();
    let table = place.target.table.clone();
    let shots = screenshot_dir();
    std::fs::create_dir_all(&shots).unwrap_or_else(|e| panic!("creating {}: {e}", shots.display()));
    eprintln!("dashboard screenshots go to {}", shots.display());

    // Three scheduler processes, each with job_0 and job_1 every second, watching the store
    // every 200 ms and writing the run history.
    let args = [
        "--schedules",
        "200ms",
        "--history",
        "--jobs",
        "2",
        "--declare-lock",
        "--work",
        "150ms",
    ];
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let pool = PgPool::connect(&place.target.url)
        .await
        .expect("connecting to PostgreSQL");
    let dashboard_provider = provider(&pool, &table, "dashboard").await;
    let store = place.target.schedules().await;
    let store: &dyn ScheduleStore = store.as_ref();
    history_until(&pool, &table, JOB, 0, "job_0 ran", |r| {
        r.outcome == "executed"
    })
    .await;

    // The dashboard, mounted under /shedlock as a service would, refreshing every second, told
    // the code's schedule of the harness's jobs (its default cron, in UTC).
    let options = shedlock_web::Options::new(shedlock_web::Auth::None)
        .refresh_every(1)
        .code_jobs(
            ["job_0", "job_1"].map(|name| shedlock_web::CodeJob::new(name, "* * * * * *", "UTC")),
        );
    let app = axum::Router::new().nest(
        "/shedlock",
        shedlock_web::router(dashboard_provider, options),
    );
    let base = format!("{}/shedlock", serve(app).await);

    let browser = Browser::start(&shots, &[]).await;
    let client = browser.client();

    // Jobs, and the overview through the header's link (both under the mount path).
    client
        .goto(&format!("{base}/jobs"))
        .await
        .expect("opening the jobs page");
    wait_for(client, &format!("tr[data-job={JOB}]")).await;
    assert_framed(client, "/shedlock").await;
    // The header's first link is the overview's.
    click(client, "header nav a:first-child", "#count-jobs").await;
    assert_framed(client, "/shedlock").await;
    let jobs: usize = text(client, "#count-jobs")
        .await
        .parse()
        .expect("#count-jobs is a number");
    assert!(jobs >= 2, "the overview counts job_0 and job_1: {jobs}");
    assert_eq!(
        count(client, "table#instances tbody tr").await,
        3,
        "the overview lists the three instances"
    );
    screenshot(client, &shots, "overview").await;
    click(client, "header nav a[href$='/jobs']", "table#jobs").await;
    wait_for(client, &format!("tr[data-job={JOB}]")).await;
    assert_eq!(
        count(client, "table#jobs tr[data-job=job_1]").await,
        1,
        "job_1 is listed"
    );
    screenshot(client, &shots, "jobs").await;
    click(
        client,
        &format!("tr[data-job={JOB}] a[href$='/jobs/{JOB}']"),
        "svg#timeline",
    )
    .await;
    assert_eq!(text(client, "#job-name").await, JOB);

    // Pause: once every process applied it, no process runs job_0; its ticks are recorded
    // as skipped-paused.
    let before_pause = last_history_id(&pool, &table).await;
    click(client, "#pause", "#flash").await;
    flash_ok(client, "pause").await;
    assert!(
        text(client, "#paused").await.contains("paused"),
        "#paused says paused"
    );
    wait_for(client, "#resume").await;
    let applied = applied_everywhere(&place, store, JOB).await;
    history_until(
        &pool,
        &table,
        JOB,
        before_pause,
        "a paused tick recorded as skipped-paused",
        |r| r.outcome == "skipped-paused",
    )
    .await;
    tokio::time::sleep(PAUSED_WATCH).await;
    let ran: Vec<_> = place
        .runs_of(JOB)
        .await
        .into_iter()
        .filter(|run| run.started_ms > applied + 1000)
        .collect();
    assert!(
        ran.is_empty(),
        "a paused job ran (harness results): {ran:?}"
    );
    let paused_rows = history(&pool, &table, JOB, before_pause).await;
    let ran: Vec<_> = paused_rows
        .iter()
        .filter(|r| r.outcome == "executed" || r.outcome == "running")
        .filter(|r| r.started_ms > applied + 1000)
        .collect();
    assert!(ran.is_empty(), "a paused job ran (run history): {ran:?}");

    // Resume: it runs again.
    let before_resume = last_history_id(&pool, &table).await;
    click(client, "#resume", "#flash").await;
    flash_ok(client, "resume").await;
    wait_for(client, "#pause").await;
    assert_eq!(text(client, "#paused").await.trim(), "no");
    applied_everywhere(&place, store, JOB).await;
    history_until(
        &pool,
        &table,
        JOB,
        before_resume,
        "job_0 runs again after its resume",
        |r| r.outcome == "executed" && r.requested_by.is_none(),
    )
    .await;

    // Pause again, then run now: exactly one run, asked for by the dashboard's operator.
    click(client, "#pause", "#resume").await;
    let applied = applied_everywhere(&place, store, JOB).await;
    let before_run_now = last_history_id(&pool, &table).await;
    click(client, "#run-now", "#flash").await;
    let flash = flash_ok(client, "run now").await;
    assert!(
        flash.contains("asked for a run"),
        "#flash after run now: {flash}"
    );
    let rows = history_until(
        &pool,
        &table,
        JOB,
        before_run_now,
        "the run asked for ran and ended",
        |r| {
            r.outcome != "operator"
                && r.outcome != "skipped-held"
                && r.requested_by.is_some()
                && r.finished
        },
    )
    .await;
    // Time for a second run, were there one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rows_now = history(&pool, &table, JOB, before_run_now).await;
    // An attempt that found the lock held (a paused tick's claim holding it that instant) is
    // recorded `skipped-held` and tried again: not a run.
    let asked: Vec<&HistoryRow> = rows_now
        .iter()
        .filter(|r| {
            r.outcome != "operator" && r.outcome != "skipped-held" && r.requested_by.is_some()
        })
        .collect();
    assert_eq!(asked.len(), 1, "one run for one request: {rows_now:?}");
    let run = asked[0];
    assert_eq!(run.outcome, "executed", "the run asked for: {run:?}");
    let unasked: Vec<_> = rows_now
        .iter()
        .filter(|r| r.requested_by.is_none() && (r.outcome == "executed" || r.outcome == "running"))
        .filter(|r| r.started_ms > applied + 1000)
        .collect();
    assert!(
        unasked.is_empty(),
        "the paused job ran on a tick: {unasked:?} (all: {rows:?})"
    );
    let manual: Vec<_> = place
        .runs_of(JOB)
        .await
        .into_iter()
        .filter(|r| r.tick_ms.is_none())
        .collect();
    assert_eq!(
        manual.len(),
        1,
        "the harness ran one run without a tick: {manual:?}"
    );
    // The page refreshes itself (its script marks body[data-refreshed]) without losing the
    // action's message: one bar for that run on the timeline.
    let bar = format!("svg#timeline rect.run[data-id='{}']", run.id);
    wait_for(client, "body[data-refreshed]").await;
    wait_for(client, &bar).await;
    assert_eq!(
        count(client, "#flash").await,
        1,
        "the refreshed page keeps #flash"
    );
    assert_eq!(count(client, &bar).await, 1, "one bar for run {}", run.id);
    let instance = attr(client, &bar, "data-instance").await;
    assert_eq!(instance, run.locked_by, "the bar's instance");
    assert!(
        count(client, "svg#timeline path.operator").await >= 4,
        "the operator's actions are on the timeline"
    );
    let window = attr(client, "nav.windows a[href$='window=1m']", "href").await;
    client
        .goto(&format!("{base}{}", window.trim_start_matches("/shedlock")))
        .await
        .expect("opening the 1 min window");
    wait_for(client, &bar).await;
    assert_framed(client, "/shedlock").await;
    screenshot(client, &shots, "job").await;

    // A lock held by hand, released through its confirmation page.
    let holder = provider(&pool, &table, "held-by-the-test").await;
    let config = LockConfiguration::new(HELD, Duration::from_secs(600), Duration::ZERO)
        .expect("a lock configuration");
    let guard = holder
        .lock(&config)
        .await
        .expect("taking the lock")
        .expect("the lock is free");
    let (by, token): (String, i64) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT locked_by::TEXT, fencing_token FROM {table} WHERE name = $1"
    )))
    .bind(HELD)
    .fetch_one(&pool)
    .await
    .expect("reading the held lock");
    client
        .goto(&format!("{base}/locks"))
        .await
        .expect("opening the locks page");
    wait_for(client, &format!("tr[data-lock={HELD}] a.release")).await;
    assert_framed(client, "/shedlock").await;
    screenshot(client, &shots, "locks").await;
    click(
        client,
        &format!("tr[data-lock={HELD}] a.release"),
        "#confirm-release",
    )
    .await;
    assert_eq!(text(client, "#holder").await, by, "#holder");
    assert_eq!(text(client, "#token").await, token.to_string(), "#token");
    assert_framed(client, "/shedlock").await;
    screenshot(client, &shots, "release").await;
    click(client, "#confirm-release", "table#locks").await;
    let flash = flash_ok(client, "the release").await;
    assert!(
        flash.starts_with("released"),
        "#flash after the release: {flash}"
    );
    let held: bool = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT locked_until > clock_timestamp() FROM {table} WHERE name = $1"
    )))
    .bind(HELD)
    .fetch_one(&pool)
    .await
    .expect("reading the released lock");
    assert!(!held, "the lock row is free after the release");
    drop(guard);

    client
        .goto(&format!("{base}/history"))
        .await
        .expect("opening the history page");
    wait_for(client, "table.runs").await;
    assert_framed(client, "/shedlock").await;
    screenshot(client, &shots, "history").await;

    // Read-only, at the root of a server of its own, with a lock held: no action anywhere.
    let _held = holder
        .lock(&config.clone())
        .await
        .expect("taking the lock")
        .expect("the lock is free again");
    let read_only = shedlock_web::router(
        provider(&pool, &table, "dashboard").await,
        shedlock_web::Options::new(shedlock_web::Auth::None).read_only(true),
    );
    let read_only = serve(read_only).await;
    for page in [
        "/jobs".to_owned(),
        format!("/jobs/{JOB}"),
        "/locks".to_owned(),
    ] {
        client
            .goto(&format!("{read_only}{page}"))
            .await
            .expect("opening a read-only page");
        wait_for(client, "#read-only").await;
        assert_framed(client, "").await;
        for css in [
            "button.action",
            "form[method=post]",
            "a.release",
            "#pause",
            "#resume",
            "#run-now",
            "#new-cron",
        ] {
            assert_eq!(count(client, css).await, 0, "read-only {page} has no {css}");
        }
        let buttons = client
            .execute("return Array.from(document.querySelectorAll('button')).filter(b => !b.closest('form[method=get]')).length;", vec![])
            .await
            .expect("counting buttons");
        assert_eq!(
            buttons,
            json!(0),
            "read-only {page}: every button is a filter's (a GET form)"
        );
        if page == format!("/jobs/{JOB}") {
            screenshot(client, &shots, "job-read-only").await;
        }
    }
    assert_eq!(
        count(client, &format!("tr[data-lock={HELD}]")).await,
        1,
        "the held lock is listed"
    );

    browser.close().await;
    for process in &fleet {
        process.signal("TERM");
    }
    for process in fleet {
        let exited = process.wait().await;
        assert_eq!(exited.code, Some(0), "{}: {}", exited.name, exited.log);
    }
    if std::env::var("SHEDLOCK_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/screenshots");
        std::fs::create_dir_all(&docs)
            .unwrap_or_else(|e| panic!("creating {}: {e}", docs.display()));
        for name in ["overview", "jobs", "job", "locks"] {
            let from = shots.join(format!("{name}.png"));
            std::fs::copy(&from, docs.join(format!("{name}.png")))
                .unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
        }
        eprintln!(
            "copied the overview, jobs, job and locks screenshots to {}",
            docs.display()
        );
    }
    place.cleanup().await;
    eprintln!(
        "dashboard browser test took {:.1} s; screenshots in {}",
        started.elapsed().as_secs_f64(),
        shots.display()
    );
}

/// The attacker's page of issue 46, served on another port of 127.0.0.1: it plants cookies for
/// the host (cookies ignore ports: a `shedlock_csrf` one on `/act` as the attack did, and a
/// `shedlock_browser` one) and submits a form to `target`'s fleet pause, repeating the planted
/// value as the CSRF token.
async fn attacker() -> String {
    use axum::extract::RawQuery;
    use axum::response::{Html, IntoResponse};
    // `?target=http://127.0.0.1:PORT`, taken as it is (the test writes it).
    async fn page(RawQuery(query): RawQuery) -> axum::response::Response {
        let target = query
            .as_deref()
            .and_then(|q| q.strip_prefix("target="))
            .unwrap_or_default()
            .to_owned();
        let html = format!(
            "<!DOCTYPE html><html><head><title>Free prizes</title></head><body>\
             <h1>Loading your prize…</h1>\
             <form id=\"f\" method=\"post\" action=\"{target}/act/fleet/pause\">\
             <input type=\"hidden\" name=\"csrf\" value=\"planted\"></form>\
             <script>document.getElementById('f').submit();</script></body></html>"
        );
        (
            [
                ("set-cookie", "shedlock_csrf=planted; Path=/act"),
                ("set-cookie", "shedlock_browser=planted; Path=/"),
            ],
            Html(html),
        )
            .into_response()
    }
    let router = axum::Router::new().route("/prize", axum::routing::get(page));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binding the attacker's port");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        axum::serve(listener, router)
            .await
            .expect("serving the attacker's page");
    });
    format!("http://{address}")
}

/// Whether the whole fleet is paused in the store.
async fn fleet_paused(provider: &shedlock::SqliteLockProvider) -> bool {
    provider
        .schedule(shedlock::scheduler::FLEET_SCHEDULE)
        .await
        .expect("reading the fleet's schedule")
        .is_some_and(|s| s.paused)
}

/// The attacks of issue 46 from a real browser, as they were run: a page on another port of
/// 127.0.0.1 plants cookies and submits a form to the dashboard's fleet pause, against a
/// dashboard without authentication and against a signed-in token dashboard (its session cookie
/// is `SameSite=Strict`, and another port is the same site); and a DNS name rebound to
/// 127.0.0.1 (Chromium's host resolver maps `rebound.test` there) whose page reads the cookies
/// and posts with them. Each is refused and the fleet stays unpaused. The sign-in, the refusal
/// and the sign-out are saved as screenshots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_a_browser_refuses_other_origins_and_rebound_names_sqlite() {
    use shedlock_suite::TestDb;
    browser_binaries();
    let shots = screenshot_dir();
    std::fs::create_dir_all(&shots).unwrap_or_else(|e| panic!("creating {}: {e}", shots.display()));
    let db = shedlock_suite::Sqlite::setup().await.expect("SQLite");
    let provider = db.provider();
    provider
        .create_schedule(
            &shedlock::schedules::NewSchedule::job("nightly", "h", "{}", "0 0 3 * * *", None),
            "test",
        )
        .await
        .expect("a job");
    let open = serve(shedlock_web::router(
        provider.clone(),
        shedlock_web::Options::new(shedlock_web::Auth::None).refresh_every(0),
    ))
    .await;
    const TOKEN: &str = "a-long-random-dashboard-token";
    let signed = serve(shedlock_web::router(
        provider.clone(),
        shedlock_web::Options::new(shedlock_web::Auth::try_bearer(TOKEN).expect("a token"))
            .refresh_every(0),
    ))
    .await;
    let evil = attacker().await;
    let browser = Browser::start(
        &shots,
        &["--host-resolver-rules=MAP rebound.test 127.0.0.1"],
    )
    .await;
    let client = browser.client();

    // The operator has the open dashboard in a tab; then opens the attacker's page.
    client
        .goto(&format!("{open}/"))
        .await
        .expect("opening the dashboard");
    wait_for(client, "#fleet-pause").await;
    client
        .goto(&format!("{evil}/prize?target={open}"))
        .await
        .expect("opening the attacker's page");
    wait_for(client, "#refused").await;
    let said = text(client, "#refused").await;
    assert!(
        said.contains("another origin") && said.contains(&evil),
        "the refusal names the other origin: {said}"
    );
    assert!(
        client
            .current_url()
            .await
            .expect("the URL")
            .as_str()
            .starts_with(&open),
        "the refusal is the dashboard's page"
    );
    screenshot(client, &shots, "refused-action").await;
    assert!(
        !fleet_paused(&provider).await,
        "the planted cookie paused the fleet"
    );

    // A DNS name rebound to 127.0.0.1: the dashboard answers nothing for it, and a script of
    // that origin that reads the cookies and posts with them is refused too.
    let port = open.rsplit(':').next().expect("a port").to_owned();
    let rebound = format!("http://rebound.test:{port}");
    client
        .goto(&format!("{rebound}/"))
        .await
        .expect("opening the rebound name");
    let page = read(client, "body", "el.innerText").await;
    assert!(
        page.contains(&format!("\"rebound.test:{port}\"")) && page.contains("no authentication"),
        "the rebound name's page: {page}"
    );
    let status = client
        .execute(
            "const m = document.cookie.match(/shedlock_csrf=([^;]+)/); \
             return fetch('/api/v1/fleet/pause', { method: 'POST', \
               headers: { 'X-Shedlock-Csrf': m ? m[1] : '' } }).then(r => r.status);",
            vec![],
        )
        .await
        .expect("the rebound page's script");
    assert_eq!(status, json!(421), "the rebound script's POST");
    screenshot(client, &shots, "refused-host").await;
    assert!(
        !fleet_paused(&provider).await,
        "the rebound script paused the fleet"
    );

    // The token dashboard: the sign-in page, a session, and the same attack refused.
    client
        .goto(&format!("{signed}/"))
        .await
        .expect("opening the token dashboard");
    wait_for(client, "#token").await;
    assert_framed(client, "").await;
    screenshot(client, &shots, "sign-in").await;
    client
        .find(Locator::Css("#token"))
        .await
        .expect("the token field")
        .send_keys(TOKEN)
        .await
        .expect("typing the token");
    click(client, "#sign-in", "#sign-out").await;
    wait_for(client, "#fleet-pause").await;
    assert_framed(client, "").await;
    screenshot(client, &shots, "signed-in").await;
    client
        .goto(&format!("{evil}/prize?target={signed}"))
        .await
        .expect("opening the attacker's page");
    wait_for(client, "#refused").await;
    assert!(
        !fleet_paused(&provider).await,
        "the attack paused the fleet through a session"
    );

    // Sign out: back to the sign-in page, saying so; the dashboard asks for the token again.
    client
        .goto(&format!("{signed}/"))
        .await
        .expect("opening the token dashboard");
    click(client, "#sign-out", "#token").await;
    let said = text(client, "#flash").await;
    assert!(said.starts_with("Signed out"), "after the sign-out: {said}");
    screenshot(client, &shots, "sign-out").await;
    client
        .goto(&format!("{signed}/jobs"))
        .await
        .expect("opening the jobs page");
    wait_for(client, "#token").await;

    // The operator's own pause still works, from the dashboard's page.
    client
        .goto(&format!("{open}/"))
        .await
        .expect("opening the dashboard");
    client
        .execute("window.confirm = () => true; return null;", vec![])
        .await
        .expect("answering the confirmation");
    click(client, "#fleet-pause", "#flash").await;
    flash_ok(client, "the fleet's pause").await;
    assert!(fleet_paused(&provider).await, "the operator's pause");
    browser.close().await;
    db.teardown().await;
}
