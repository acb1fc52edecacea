//! The reference job, `examples/repo_sync`: incremental correctness, idempotent re-runs,
//! fenced writes, run history, and three copies of `run` against one database. Its modules are
//! included by path; its own unit tests (chunking, extraction, git, embedders, adaptive refresh)
//! run with the example (`test = true`).
#![allow(missing_docs, dead_code, unreachable_pub)]

#[path = "../examples/repo_sync/chunk.rs"]
mod chunk;
#[path = "../examples/repo_sync/db.rs"]
mod db;
#[path = "../examples/repo_sync/embed/mod.rs"]
mod embed;
#[path = "../examples/repo_sync/extract.rs"]
mod extract;
#[path = "../examples/repo_sync/git.rs"]
mod git;
#[path = "../examples/repo_sync/gitlab/mod.rs"]
mod gitlab;
#[path = "../examples/repo_sync/http/mod.rs"]
mod http;
#[path = "../examples/repo_sync/refresh.rs"]
mod refresh;
#[path = "../examples/repo_sync/source.rs"]
mod source;
#[path = "../examples/repo_sync/sync.rs"]
mod sync;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use shedlock::{LockProvider, SqliteLockProvider, TaskResult, with_provider, with_tick};

use crate::chunk::ChunkConfig;
use crate::db::{Db, SqlVectorStore, StoreError, point_id};
use crate::embed::LexicalHashEmbedder;
use crate::sync::{Ctx, Outcome, Trigger};

/// A git repository in a temporary directory.
struct TempRepo {
    dir: tempfile::TempDir,
}

impl TempRepo {
    fn new() -> Self {
        let repo = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(self.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn write(&self, path: &str, text: &str) {
        let full = self.path().join(path);
        std::fs::create_dir_all(full.parent().unwrap()).unwrap();
        std::fs::write(full, text).unwrap();
    }

    fn commit(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
    }
}

fn lines(prefix: &str, n: usize) -> String {
    (0..n)
        .map(|i| format!("{prefix} line {i}: fn item_{i}() {{ compute({i}) }}\n"))
        .collect()
}

struct App {
    ctx: Ctx,
    provider: SqliteLockProvider,
    _dir: tempfile::TempDir,
}

async fn app() -> App {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let db = Db::open(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    let provider = SqliteLockProvider::connect(&path.display().to_string())
        .await
        .unwrap();
    provider.migrate().await.unwrap();
    let ctx = Ctx {
        store: Arc::new(SqlVectorStore::new(db.clone())),
        db,
        embedder: Arc::new(LexicalHashEmbedder::default()),
        chunking: ChunkConfig::new(300, 60).unwrap(),
        max_file_bytes: 10_000,
        policy: Default::default(),
        locked_by: "test".into(),
        progress: false,
        gitlab_token: None,
    };
    App {
        ctx,
        provider,
        _dir: dir,
    }
}

/// The point ids the store should hold for `files` (path, text) of repository `id`.
fn expected_points(id: i64, files: &[(&str, &str)], config: &ChunkConfig) -> Vec<String> {
    let mut ids: Vec<String> = files
        .iter()
        .flat_map(|(path, text)| {
            chunk::chunk(text, config)
                .into_iter()
                .map(move |c| point_id(id, path, c.index))
        })
        .collect();
    ids.sort();
    ids
}

async fn stored_points(ctx: &Ctx, id: i64) -> Vec<String> {
    let mut ids: Vec<String> = ctx
        .store
        .points(id)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    ids.sort();
    ids
}

async fn sync_manual(app: &App, id: i64) -> TaskResult<Result<Outcome, String>> {
    with_provider(
        app.provider.clone(),
        sync::run(&app.ctx, id, Trigger::Manual),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn incremental_sync_keeps_exactly_the_expected_chunks_and_reruns_write_nothing() {
    let app = app().await;
    let repo = TempRepo::new();
    let (a1, b1) = (lines("a", 30), lines("b", 40));
    repo.write("src/a.rs", &a1);
    repo.write("src/b.rs", &b1);
    repo.write("logo.png", "\u{0}PNG binary");
    repo.commit("first");
    let session = app
        .ctx
        .db
        .add_session(
            "demo",
            &repo.path().display().to_string(),
            "* * * * * *",
            "UTC",
        )
        .await
        .unwrap();

    let TaskResult::Executed(Ok(Outcome::Synced(first))) = sync_manual(&app, session.id).await
    else {
        panic!("first sync ran")
    };
    assert!(first.full);
    assert_eq!(
        (first.files, first.skipped_files),
        (2, 1),
        "two text files, the binary skipped"
    );
    let cfg = app.ctx.chunking;
    assert_eq!(
        stored_points(&app.ctx, session.id).await,
        expected_points(session.id, &[("src/a.rs", &a1), ("src/b.rs", &b1)], &cfg)
    );
    assert!(
        first.chunks_written as usize
            >= expected_points(session.id, &[("src/b.rs", &b1)], &cfg).len()
    );

    // Modify a, delete b, add c.
    let a2 = lines("a2", 12);
    let c1 = lines("c", 25);
    repo.write("src/a.rs", &a2);
    std::fs::remove_file(repo.path().join("src/b.rs")).unwrap();
    repo.write("docs/c.md", &c1);
    repo.commit("second");
    let TaskResult::Executed(Ok(Outcome::Synced(second))) = sync_manual(&app, session.id).await
    else {
        panic!("second sync ran")
    };
    assert!(!second.full, "incremental");
    assert_eq!(
        (second.files, second.deleted_paths),
        (2, 1),
        "a and c read, b's chunks removed"
    );
    assert_eq!(
        stored_points(&app.ctx, session.id).await,
        expected_points(session.id, &[("src/a.rs", &a2), ("docs/c.md", &c1)], &cfg)
    );
    let written =
        expected_points(session.id, &[("src/a.rs", &a2), ("docs/c.md", &c1)], &cfg).len() as u64;
    assert_eq!(
        second.chunks_written, written,
        "only the changed files' chunks were written"
    );

    // Nothing changed: a re-run writes nothing.
    let TaskResult::Executed(Ok(Outcome::Synced(third))) = sync_manual(&app, session.id).await
    else {
        panic!("third sync ran")
    };
    assert_eq!((third.files, third.chunks_written), (0, 0));

    // Searching finds the right file and line range.
    let query = app
        .ctx
        .embedder
        .embed(&["c line 3 item_3 compute".to_owned()])
        .await
        .unwrap()
        .pop()
        .unwrap();
    let hits = app.ctx.store.search(&query, 3).await.unwrap();
    assert_eq!(hits[0].path, "docs/c.md", "{hits:?}");
    assert!(hits[0].start_line >= 1 && hits[0].end_line >= hits[0].start_line);
}

#[tokio::test]
async fn a_stale_token_cannot_write() {
    let app = app().await;
    let store = &app.ctx.store;
    store.fence(7, 100).await.unwrap();
    let err = store.fence(7, 50).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Fenced {
                token: 50,
                current: 100,
                ..
            }
        ),
        "{err}"
    );
    let err = store
        .replace_paths(7, &["x.rs".into()], &[], 99)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("older than 100"), "{err}");
    // The same or a newer token may write.
    store
        .replace_paths(7, &["x.rs".into()], &[], 100)
        .await
        .unwrap();
    store.fence(7, 101).await.unwrap();
}

#[tokio::test]
async fn history_records_completed_failed_and_skipped_runs() {
    let app = app().await;
    let repo = TempRepo::new();
    repo.write("a.txt", "hello fencing token\n");
    repo.commit("one");
    let good = app
        .ctx
        .db
        .add_session(
            "good",
            &repo.path().display().to_string(),
            "0 * * * * *",
            "UTC",
        )
        .await
        .unwrap();
    let gone = tempfile::tempdir().unwrap();
    let bad = app
        .ctx
        .db
        .add_session(
            "bad",
            &gone.path().display().to_string(),
            "0 * * * * *",
            "UTC",
        )
        .await
        .unwrap();

    assert!(matches!(
        sync_manual(&app, good.id).await,
        TaskResult::Executed(Ok(Outcome::Synced(_)))
    ));
    let failed = sync_manual(&app, bad.id).await;
    assert!(
        matches!(&failed, TaskResult::Executed(Err(e)) if e.contains("git")),
        "{failed:?}"
    );
    assert_eq!(
        app.ctx
            .db
            .session(bad.id)
            .await
            .unwrap()
            .unwrap()
            .consecutive_failures,
        1
    );

    // Five failures open the breaker: a scheduled tick is skipped (recorded), sync-now still runs.
    for _ in 0..4 {
        let _ = sync_manual(&app, bad.id).await;
    }
    // sync-now resets the counter before running, so the count is 1 after each manual failure;
    // open the breaker the way five scheduled failures would.
    app.ctx
        .db
        .exec(
            "UPDATE schedule_sessions SET consecutive_failures = 5 WHERE id = $1",
            vec![db::V::I(bad.id)],
        )
        .await
        .unwrap();
    let tick = chrono::Utc::now();
    let trigger = Trigger::Tick {
        tick_ms: tick.timestamp_millis(),
        interval_ms: 60_000,
    };
    let skipped = with_provider(
        app.provider.clone(),
        with_tick(tick, sync::run(&app.ctx, bad.id, trigger)),
    )
    .await
    .unwrap();
    assert!(
        matches!(&skipped, TaskResult::Executed(Ok(Outcome::NotSynced(r))) if r.contains("circuit open")),
        "{skipped:?}"
    );

    let good_logs = app.ctx.db.logs(Some(good.id), 10).await.unwrap();
    assert_eq!(good_logs.len(), 1);
    assert_eq!(good_logs[0].status, "completed");
    assert!(
        good_logs[0].fencing_token.is_some()
            && good_logs[0].files_processed == 1
            && good_logs[0].chunks_written >= 1
    );
    let bad_logs = app.ctx.db.logs(Some(bad.id), 10).await.unwrap();
    assert_eq!(bad_logs[0].status, "skipped");
    assert_eq!(bad_logs[0].tick, Some(tick.timestamp_millis()));
    assert!(
        bad_logs[0]
            .error_message
            .as_deref()
            .unwrap_or_default()
            .contains("circuit open")
    );
    assert!(
        bad_logs[1..]
            .iter()
            .all(|l| l.status == "failed" && l.error_message.is_some()),
        "{bad_logs:?}"
    );
    assert_eq!(bad_logs.len(), 6);
}

/// The example's binary. `cargo test` builds it with the other targets; `cargo test --test
/// repo_sync` alone does not, so a binary older than the example's sources is rebuilt first
/// (with the flags `scripts/test` uses, so nothing else is rebuilt).
fn example_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            // target/debug/deps/repo_sync-<hash> -> target/debug/examples/repo_sync
            let exe = std::env::current_exe().unwrap();
            let bin = exe
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("examples")
                .join("repo_sync");
            let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
            let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/repo_sync");
            let newest = std::fs::read_dir(&sources)
                .unwrap()
                .flatten()
                .filter_map(|e| modified(&e.path()))
                .max();
            if modified(&bin).is_none() || modified(&bin) < newest {
                let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
                let status = Command::new(cargo)
                    .args([
                        "build",
                        "--quiet",
                        "--workspace",
                        "--all-features",
                        "--example",
                        "repo_sync",
                    ])
                    .current_dir(env!("CARGO_MANIFEST_DIR"))
                    .status()
                    .unwrap();
                assert!(status.success(), "cargo build --example repo_sync");
            }
            bin
        })
        .clone()
}

/// `repo_sync --database-url URL add REPO --cron CRON`, which must succeed.
fn add_repo(bin: &Path, url: &str, repo: &TempRepo, cron: &str) {
    let out = Command::new(bin)
        .args([
            "--database-url",
            url,
            "add",
            &repo.path().display().to_string(),
            "--cron",
            cron,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_copies_of_run_sync_each_repository_once_per_tick() {
    let bin = example_binary();
    assert!(bin.exists(), "{} is built by cargo test", bin.display());
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("shared.db").display()
    );
    let (one, two) = (TempRepo::new(), TempRepo::new());
    one.write("one.rs", &lines("one", 20));
    one.commit("one");
    two.write("two.rs", &lines("two", 20));
    two.commit("two");
    for repo in [&one, &two] {
        add_repo(&bin, &url, repo, "*/2 * * * * *");
    }
    let mut children = Vec::new();
    for i in 0..3 {
        children.push(
            tokio::process::Command::new(&bin)
                .args([
                    "--database-url",
                    &url,
                    "run",
                    "--run-for",
                    "9s",
                    "--reload-every",
                    "1s",
                ])
                .env("SHEDLOCK_LOCKED_BY", format!("copy-{i}"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    for child in children {
        let out = child.wait_with_output().await.unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let db = Db::open(&url).await.unwrap();
    let logs = db.logs(None, 1000).await.unwrap();
    let mut per_tick = std::collections::BTreeMap::<(i64, i64), usize>::new();
    for log in logs.iter().filter(|l| l.tick.is_some()) {
        *per_tick
            .entry((log.schedule_id, log.tick.unwrap()))
            .or_default() += 1;
    }
    assert!(
        per_tick.len() >= 6,
        "at least three ticks of each repository: {per_tick:?}"
    );
    assert!(
        per_tick.values().all(|n| *n == 1),
        "one execution per tick per repository: {per_tick:?}"
    );
    let by: std::collections::BTreeSet<_> =
        logs.iter().filter_map(|l| l.locked_by.clone()).collect();
    assert!(logs.iter().all(|l| l.status == "completed"), "{logs:?}");

    // The scheduler's own history (`shedlock_runs`) names the same executions: for each
    // repository and tick, one `executed` row by the copy that synced it.
    let provider = shedlock::SqliteLockProvider::connect(&url).await.unwrap();
    let history = provider
        .runs(&shedlock::RunQuery::latest(10_000))
        .await
        .unwrap();
    let mut executed = std::collections::BTreeMap::<(i64, i64), Vec<String>>::new();
    for row in history
        .iter()
        .filter(|r| r.outcome == shedlock::RunOutcome::Executed)
    {
        let id: i64 = row.job.trim_start_matches("repo_sync_").parse().unwrap();
        executed
            .entry((id, row.tick.unwrap().timestamp_millis()))
            .or_default()
            .push(row.locked_by.clone());
    }
    let from_logs: std::collections::BTreeMap<(i64, i64), Vec<String>> = logs
        .iter()
        .filter(|l| l.tick.is_some())
        .map(|l| {
            (
                (l.schedule_id, l.tick.unwrap()),
                vec![l.locked_by.clone().unwrap()],
            )
        })
        .collect();
    assert_eq!(executed, from_logs, "history rows match what ran");
    assert!(
        history
            .iter()
            .all(|r| r.outcome != shedlock::RunOutcome::Running),
        "every run finished before its copy exited: {history:?}"
    );
    eprintln!(
        "{} ticks across 2 repositories, each run once, by {by:?}",
        per_tick.len()
    );
}

/// `run --metrics-addr` serves the scheduler's counters for Prometheus while it runs; the
/// figures agree with the run history written by the same process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_endpoint_serves_the_scheduler_counters() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("metrics.db").display()
    );
    let repo = TempRepo::new();
    repo.write("a.rs", &lines("a", 10));
    repo.commit("a");
    add_repo(&bin, &url, &repo, "* * * * * *");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let child = tokio::process::Command::new(&bin)
        .args([
            "--database-url",
            &url,
            "run",
            "--run-for",
            "7s",
            "--reload-every",
            "1s",
            "--metrics-addr",
            &addr,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Scrape once the job has run a few ticks.
    let client = reqwest::Client::new();
    let mut page = String::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(resp) = client.get(format!("http://{addr}/metrics")).send().await {
            assert!(resp.status().is_success(), "{}", resp.status());
            page = resp.text().await.unwrap();
            if value(
                &page,
                "shedlock_runs_total",
                &[("job", "repo_sync_1"), ("outcome", "executed")],
            ) >= 3.0
            {
                break;
            }
        }
    }
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("http://{addr}/metrics")),
        "{stdout}"
    );
    let job = [("job", "repo_sync_1")];
    let executed = value(
        &page,
        "shedlock_runs_total",
        &[("job", "repo_sync_1"), ("outcome", "executed")],
    );
    assert!(executed >= 3.0, "three runs counted while running:\n{page}");
    let attempts = value(&page, "shedlock_attempts_total", &job);
    let acquired = value(&page, "shedlock_acquired_total", &job);
    assert!(attempts >= acquired && acquired >= executed, "{page}");
    assert!(value(&page, "shedlock_fire_lateness_seconds_count", &job) >= attempts);
    assert!(
        value(
            &page,
            "shedlock_job_duration_seconds_count",
            &[("job", "repo_sync_1"), ("outcome", "executed")]
        ) >= executed
    );
    assert!(value(&page, "shedlock_last_success_timestamp_seconds", &job) > 1.7e9);
    assert_eq!(value(&page, "shedlock_errors_total", &job), 0.0);
    // The history written by the same process has at least as many executed rows as were
    // counted at the scrape, and no more than the runs the process made in total.
    let provider = shedlock::SqliteLockProvider::connect(&url).await.unwrap();
    let rows = provider
        .runs(
            &shedlock::RunQuery::latest(100)
                .name("repo_sync_1")
                .outcome(shedlock::RunOutcome::Executed),
        )
        .await
        .unwrap();
    assert!(
        rows.len() as f64 >= executed,
        "{} rows, {executed} counted",
        rows.len()
    );
}

/// The value of one sample in Prometheus text format: `name{labels} value`, with exactly
/// these labels (in any order); 0 when absent.
fn value(page: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    want.sort();
    for line in page.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, number)) = line.rsplit_once(' ') else {
            continue;
        };
        let (metric, found) = match series.split_once('{') {
            Some((metric, rest)) => (metric, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        if metric != name {
            continue;
        }
        let mut found: Vec<String> = found
            .split(',')
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        found.sort();
        if found == want {
            return number.parse().unwrap();
        }
    }
    0.0
}

#[tokio::test]
async fn the_first_run_registers_syncs_and_is_searchable() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("first.db").display()
    );
    let repo = TempRepo::new();
    repo.write("src/lock.rs", "/// Takes the lock and returns the fencing token of this holder.\nfn fencing_token() -> i64 { 42 }\n");
    repo.write(
        "README.md",
        "# demo\nA demo repository about pasta recipes.\n",
    );
    repo.commit("init");
    let out = Command::new(&bin)
        .args(["--database-url", &url])
        .current_dir(repo.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("registered #1") && stdout.contains("2 files indexed"),
        "{stdout}"
    );
    let out = Command::new(&bin)
        .args(["--database-url", &url, "search", "fencing token", "-k", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("src/lock.rs:1-2"), "{stdout}");
    let out = Command::new(&bin)
        .args(["--database-url", &url, "status"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("completed") && stdout.contains("repo_sync_1"),
        "{stdout}"
    );
}

#[tokio::test]
async fn the_same_works_on_postgres() {
    if shedlock_suite::skipped(shedlock::Backend::Postgres) {
        return;
    }
    use sqlx::Executor;
    let admin = sqlx::PgPool::connect(&shedlock_suite::postgres_url())
        .await
        .unwrap();
    let database = shedlock_suite::unique_name("repo_sync");
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .await
        .unwrap();
    let base = shedlock_suite::postgres_url();
    let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
    let repo = TempRepo::new();
    repo.write("src/lock.rs", "/// Takes the lock and returns the fencing token of this holder.\nfn fencing_token() -> i64 { 42 }\n");
    repo.commit("init");
    let bin = example_binary();
    let out = Command::new(&bin)
        .args(["--database-url", &url])
        .current_dir(repo.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 files indexed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&bin)
        .args(["--database-url", &url, "search", "fencing token", "-k", "1"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("src/lock.rs:1-2"));
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {database} WITH (FORCE)"
        )))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_are_reread_while_running_and_sync_now_says_who_holds_the_lock() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let repo = TempRepo::new();
    repo.write("a.rs", &lines("a", 5));
    repo.commit("a");
    let cli = |args: &[&str]| {
        let out = Command::new(&bin)
            .arg("--database-url")
            .arg(&url)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // A scheduler with nothing to do yet.
    cli(&["status"]);
    let runner = tokio::process::Command::new(&bin)
        .args([
            "--database-url",
            &url,
            "run",
            "--run-for",
            "8s",
            "--reload-every",
            "500ms",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cli(&[
        "add",
        &repo.path().display().to_string(),
        "--cron",
        "* * * * * *",
        "--name",
        "live",
    ]);
    tokio::time::sleep(Duration::from_millis(3000)).await;
    cli(&["pause", "live"]);
    let paused_at = db::now_ms();
    let out = runner.wait_with_output().await.unwrap();
    assert!(out.status.success());
    let db = Db::open(&url).await.unwrap();
    let logs = db.logs(None, 100).await.unwrap();
    assert!(
        logs.iter().any(|l| l.tick.is_some()),
        "added while running: scheduled without a restart ({logs:?})"
    );
    let late: Vec<_> = logs
        .iter()
        .filter(|l| l.started_at > paused_at + 1500)
        .collect();
    assert!(
        late.is_empty(),
        "paused while running: no run after the next reload ({late:?})"
    );

    // Another holder has the lock: sync-now says who, and until when.
    let provider = SqliteLockProvider::builder(shedlock_suite::sqlite_pool(&path, 1).await)
        .locked_by("nightly-pod-7")
        .build()
        .unwrap();
    let cfg =
        shedlock::LockConfiguration::new("repo_sync_1", Duration::from_secs(60), Duration::ZERO)
            .unwrap();
    let guard = provider.lock(&cfg).await.unwrap().expect("free");
    let said = cli(&["sync-now", "live"]);
    assert!(
        said.contains("held by nightly-pod-7") && said.contains("until"),
        "{said}"
    );
    guard.unlock().await.unwrap();
    let said = cli(&["sync-now", "live"]);
    assert!(said.contains("sync at"), "{said}");
}
