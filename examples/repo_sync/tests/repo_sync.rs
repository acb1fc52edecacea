//! The reference job, `repo_sync`: incremental correctness, idempotent re-runs, fenced writes,
//! run history, and three copies of `run` against one database. Its modules are included by
//! path, so their unit tests (chunking, extraction, git, embedders, HTTP, GitLab, adaptive
//! refresh, the breaker) run here. What needs a feature (PostgreSQL, the HTTP clients, the
//! metrics endpoint) runs when the package is built with it (`scripts/test`: all features).
#![allow(missing_docs, dead_code, unreachable_pub)]

#[path = "../chunk.rs"]
mod chunk;
#[path = "../db/mod.rs"]
mod db;
#[path = "../embed/mod.rs"]
mod embed;
#[path = "../extract.rs"]
mod extract;
#[path = "../features.rs"]
mod features;
#[path = "../git/mod.rs"]
mod git;
#[cfg(feature = "http")]
#[path = "../gitlab/mod.rs"]
mod gitlab;
#[cfg(feature = "http")]
#[path = "../http/mod.rs"]
mod http;
#[path = "../job.rs"]
mod job;
#[cfg(feature = "metrics")]
#[path = "../metrics.rs"]
mod metrics;
#[path = "../refresh.rs"]
mod refresh;
#[path = "../show.rs"]
mod show;
#[path = "../source.rs"]
mod source;
#[path = "../store.rs"]
mod store;
#[path = "../sync.rs"]
mod sync;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use shedlock::context::with_tick;
use shedlock::{LockAdmin, LockProvider, RunStore, SqliteLockProvider, TaskResult, with_provider};

use crate::chunk::ChunkConfig;
use crate::db::{Db, Location};
use crate::embed::LexicalHashEmbedder;
use crate::job::{Outcome, Trigger, sync_locked};
use crate::store::{SqlVectorStore, StoreError, point_id};
use crate::sync::Ctx;

/// A git repository in a temporary directory.
struct TempRepo {
    dir: tempfile::TempDir,
    /// Set when the repository is not the temporary directory itself.
    root: Option<PathBuf>,
}

impl TempRepo {
    fn new() -> Self {
        let repo = Self {
            dir: tempfile::tempdir().unwrap(),
            root: None,
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    /// A repository at `path` (created), removed with the test's temporary directory.
    fn at(path: &Path) -> Self {
        std::fs::create_dir_all(path).unwrap();
        let repo = Self {
            dir: tempfile::TempDir::new_in(path).unwrap(),
            root: Some(path.to_owned()),
        };
        repo.git(&["init", "-q", "-b", "main"]);
        repo
    }

    fn path(&self) -> &Path {
        self.root.as_deref().unwrap_or(self.dir.path())
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
    let db = Db::open(&Location::Sqlite(path.clone())).await.unwrap();
    let provider = SqliteLockProvider::connect(&path.display().to_string())
        .await
        .unwrap();
    provider.migrate().await.unwrap();
    let ctx = test_ctx(db);
    App {
        ctx,
        provider,
        _dir: dir,
    }
}

/// What every test sync uses: the lexical embedder, small chunks, a 10 kB file limit.
fn test_ctx(db: Db) -> Ctx {
    Ctx {
        store: Arc::new(SqlVectorStore::new(db.clone())),
        db,
        embedder: Arc::new(LexicalHashEmbedder::default()),
        chunking: ChunkConfig::new(300, 60).unwrap(),
        max_file_bytes: 10_000,
        policy: Default::default(),
        lock_at_most_for: Duration::from_secs(60),
        lock_at_least_for: Duration::ZERO,
        locked_by: "test".into(),
        progress: false,
        gitlab_token: None,
        write_hook: None,
        pending: Default::default(),
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
        sync_locked(&app.ctx, id, Trigger::Manual),
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
        .add_session("demo", &repo.path().display().to_string())
        .await
        .unwrap();

    let TaskResult::Executed(Ok(Outcome::Synced(first))) = sync_manual(&app, session.id).await
    else {
        panic!("first sync ran")
    };
    assert!(first.full);
    assert_eq!(
        (first.files, first.skipped_files()),
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
    let embedder = app.ctx.embedder.name();
    let hits = app.ctx.store.search(&query, embedder, 3).await.unwrap();
    assert!(
        app.ctx
            .store
            .search(&query, "http:another-model", 3)
            .await
            .unwrap()
            .is_empty(),
        "vectors of another embedder are never compared"
    );
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
    let err = store.stage(7, 99, &["x.rs".into()], &[]).await.unwrap_err();
    assert!(err.to_string().contains("older than 100"), "{err}");
    let err = store.publish(7, 99).await.unwrap_err();
    assert!(err.to_string().contains("older than 100"), "{err}");
    // The same or a newer token may write.
    store.stage(7, 100, &["x.rs".into()], &[]).await.unwrap();
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
        .add_session("good", &repo.path().display().to_string())
        .await
        .unwrap();
    // A source that does not exist yet: every sync fails until a repository appears there.
    let later = tempfile::tempdir().unwrap();
    let bad_path = later.path().join("repo");
    let bad = app
        .ctx
        .db
        .add_session("bad", &bad_path.display().to_string())
        .await
        .unwrap();

    assert!(matches!(
        sync_manual(&app, good.id).await,
        TaskResult::Executed(Ok(Outcome::Synced(_)))
    ));
    // Five failures (by hand: each counts) open the breaker.
    for n in 1..=5 {
        let failed = sync_manual(&app, bad.id).await;
        assert!(
            matches!(&failed, TaskResult::Executed(Err(e)) if e.contains("git")),
            "{failed:?}"
        );
        let session = app.ctx.db.session(bad.id).await.unwrap().unwrap();
        assert_eq!(session.consecutive_failures, n);
    }
    let scheduled = |at: chrono::DateTime<chrono::Utc>| {
        let trigger = Trigger::Tick {
            tick_ms: at.timestamp_millis(),
            interval_ms: 60_000,
        };
        with_provider(
            app.provider.clone(),
            with_tick(at, sync_locked(&app.ctx, bad.id, trigger)),
        )
    };
    let tick = chrono::Utc::now();
    let skipped = scheduled(tick).await.unwrap();
    assert!(
        matches!(&skipped, TaskResult::Executed(Ok(Outcome::NotSynced(r))) if r.contains("circuit open")),
        "{skipped:?}"
    );
    // The cool-down (one hour from the last failure) passes: half-open, one tick probes. (The
    // failure is moved back an hour: a tick cannot be claimed ahead of the database's clock.)
    let hour = 3_600_000;
    app.ctx
        .db
        .exec(
            "UPDATE schedule_sessions SET last_failure_at = last_failure_at - $1 WHERE id = $2",
            vec![db::V::I(hour + 1_000), db::V::I(bad.id)],
        )
        .await
        .unwrap();
    let cooled = chrono::Utc::now();
    let probe = scheduled(cooled).await.unwrap();
    assert!(
        matches!(&probe, TaskResult::Executed(Err(e)) if e.contains("git")),
        "the probe ran and failed: {probe:?}"
    );
    // It failed: open again, now for two hours from the probe's failure.
    let session = app.ctx.db.session(bad.id).await.unwrap().unwrap();
    assert_eq!(session.consecutive_failures, 6);
    let reopened = refresh::Breaker::at(&session, db::now_ms(), &app.ctx.policy);
    assert!(
        matches!(reopened, refresh::Breaker::Open { failures: 6, cool_down_ms, .. } if cool_down_ms == 2 * hour),
        "{reopened:?}"
    );
    let skipped_again = scheduled(cooled + chrono::TimeDelta::seconds(1))
        .await
        .unwrap();
    assert!(
        matches!(&skipped_again, TaskResult::Executed(Ok(Outcome::NotSynced(r))) if r.contains("circuit open")),
        "{skipped_again:?}"
    );
    // The repository appears; sync-now runs despite the open breaker, and its success closes it.
    let fixed = TempRepo::at(&bad_path);
    fixed.write("b.txt", "fixed\n");
    fixed.commit("fixed");
    assert!(matches!(
        sync_manual(&app, bad.id).await,
        TaskResult::Executed(Ok(Outcome::Synced(_)))
    ));
    let session = app.ctx.db.session(bad.id).await.unwrap().unwrap();
    assert_eq!(
        (session.consecutive_failures, session.last_failure_at),
        (0, None)
    );
    assert_eq!(
        refresh::Breaker::at(&session, db::now_ms(), &app.ctx.policy),
        refresh::Breaker::Closed { failures: 0 }
    );

    let good_logs = app.ctx.db.logs(Some(good.id), 10).await.unwrap();
    assert_eq!(good_logs.len(), 1);
    assert_eq!(good_logs[0].status, "completed");
    assert!(
        good_logs[0].fencing_token.is_some()
            && good_logs[0].files_processed == 1
            && good_logs[0].chunks_written >= 1
    );
    let mut bad_logs = app.ctx.db.logs(Some(bad.id), 20).await.unwrap();
    bad_logs.sort_by_key(|l| l.id);
    let statuses: Vec<&str> = bad_logs.iter().map(|l| l.status.as_str()).collect();
    assert_eq!(
        statuses,
        [
            "failed",
            "failed",
            "failed",
            "failed",
            "failed",
            "skipped",
            "failed",
            "skipped",
            "completed"
        ]
    );
    assert_eq!(bad_logs[5].tick, Some(tick.timestamp_millis()));
    assert!(
        bad_logs[5]
            .error_message
            .as_deref()
            .unwrap_or_default()
            .contains("circuit open")
    );
    assert!(
        bad_logs
            .iter()
            .filter(|l| l.status == "failed")
            .all(|l| l.error_message.is_some()),
        "{bad_logs:?}"
    );
}

/// An embeddings server that answers `1e39` (beyond `f32`) for one chunk: the sync fails
/// naming that chunk's file and lines, and nothing is stored, neither published nor staged
/// (before, the vector became NaN after normalizing, was stored, and `search` showed NaN).
#[cfg(feature = "http")]
#[tokio::test]
async fn an_embedding_that_is_not_a_number_fails_the_sync_and_stores_nothing() {
    use crate::http::test_server::{Reply, serve};
    let server = serve(|_, r| {
        let inputs: Vec<String> = serde_json::from_value(r.json()["input"].clone()).unwrap();
        let data: Vec<serde_json::Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let embedding = if t.contains("poison") {
                    serde_json::json!([1e39, 1.0, 0.0])
                } else {
                    serde_json::json!([0.0, 1.0, 0.0])
                };
                serde_json::json!({"index": i, "embedding": embedding})
            })
            .collect();
        Reply::Json(200, vec![], serde_json::json!({ "data": data }))
    })
    .await;
    let mut app = app().await;
    app.ctx.embedder = Arc::new(crate::embed::HttpEmbedder::new(&server.base_url, "m").unwrap());
    let repo = TempRepo::new();
    repo.write("a.rs", "fn fine() {}\n");
    repo.write("b.rs", "fn poison() {}\n");
    repo.commit("two");
    let id = app
        .ctx
        .db
        .add_session("r", &repo.path().display().to_string())
        .await
        .unwrap()
        .id;
    let TaskResult::Executed(Err(error)) = sync_manual(&app, id).await else {
        panic!("the sync must fail");
    };
    assert!(
        error.contains("b.rs:1-1") && error.contains("not a finite number"),
        "{error}"
    );
    assert!(stored_points(&app.ctx, id).await.is_empty());
    assert_eq!(app.ctx.store.staged(id).await.unwrap(), 0);
    let logs = app.ctx.db.logs(Some(id), 10).await.unwrap();
    assert_eq!(logs[0].status, "failed", "{logs:?}");

    // A NaN vector an older version stored is left out of the ranking (not shown first with
    // a NaN score), and its row is kept.
    for (point, path, vector) in [
        ("p1", "old.rs", [f32::NAN, 0.0, 0.0]),
        ("p2", "ok.rs", [0.0, 1.0, 0.0]),
    ] {
        app.ctx
            .db
            .exec(
                "INSERT INTO chunks (point_id, collection, repository_id, path, chunk_index, start_line, end_line,
                     text, embedding, embedder, commit_sha, fencing_token)
                 VALUES ($1, 'code', $2, $3, 0, 1, 1, 'x', $4, 'http:m', 'c', 1)",
                vec![db::V::S(point.into()), db::V::I(id), db::V::S(path.into()), db::V::B(embed::to_bytes(&vector))],
            )
            .await
            .unwrap();
    }
    let hits = app
        .ctx
        .store
        .search(&[0.0, 1.0, 0.0], "http:m", 10)
        .await
        .unwrap();
    let paths: Vec<&str> = hits.iter().map(|h| h.path.as_str()).collect();
    assert_eq!(paths, ["ok.rs"]);
    assert_eq!(stored_points(&app.ctx, id).await.len(), 2);
}

/// The package's binary, built by cargo for these tests with the same features.
fn example_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_repo_sync"))
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

/// Runs three copies of `repo_sync run` on `url` (`SHEDLOCK_LOCKED_BY` copy-0 … copy-2, schedules
/// re-read every second) with `args`, and waits for each to exit successfully.
async fn run_copies(bin: &std::path::Path, url: &str, args: &[&str]) {
    let mut children = Vec::new();
    for i in 0..3 {
        children.push(
            tokio::process::Command::new(bin)
                .args(["--database-url", url, "run", "--poll-schedules-every", "1s"])
                .args(args)
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
    run_copies(&bin, &url, &["--run-for", "9s"]).await;
    let db = Db::open(&Location::parse(&url).unwrap()).await.unwrap();
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
        .runs(&shedlock::history::RunQuery::latest(10_000))
        .await
        .unwrap();
    let mut executed = std::collections::BTreeMap::<(i64, i64), Vec<String>>::new();
    for row in history
        .iter()
        .filter(|r| r.outcome == shedlock::history::RunOutcome::Executed)
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
            .all(|r| r.outcome != shedlock::history::RunOutcome::Running),
        "every run finished before its copy exited: {history:?}"
    );
    eprintln!(
        "{} ticks across 2 repositories, each run once, by {by:?}",
        per_tick.len()
    );
}

/// `run --max-concurrent-syncs 1`: three copies with four repositories due at each tick. No
/// copy ever syncs two at once (its executions never overlap in time), every repository runs
/// each tick once, and the ticks' work is spread over the copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_limit_keeps_each_copy_to_its_slots_and_every_tick_runs_once() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("limit.db").display()
    );
    let repos: Vec<TempRepo> = (0..4).map(|_| TempRepo::new()).collect();
    for (i, repo) in repos.iter().enumerate() {
        repo.write("lib.rs", &lines(&format!("repo{i}"), 20));
        repo.commit("first");
        add_repo(&bin, &url, repo, "*/3 * * * * *");
    }
    run_copies(
        &bin,
        &url,
        &["--max-concurrent-syncs", "1", "--run-for", "12s"],
    )
    .await;
    let db = Db::open(&Location::parse(&url).unwrap()).await.unwrap();
    let logs = db.logs(None, 1000).await.unwrap();
    let mut per_tick = std::collections::BTreeMap::<(i64, i64), usize>::new();
    let mut per_copy = std::collections::BTreeMap::<String, Vec<(i64, i64)>>::new();
    for log in logs.iter().filter(|l| l.tick.is_some()) {
        *per_tick
            .entry((log.schedule_id, log.tick.unwrap()))
            .or_default() += 1;
        per_copy
            .entry(log.locked_by.clone().unwrap())
            .or_default()
            .push((log.started_at, log.completed_at.unwrap_or(i64::MAX)));
    }
    assert!(
        per_tick.values().all(|n| *n == 1),
        "one execution per tick per repository: {per_tick:?}"
    );
    assert!(
        per_tick.len() >= 8,
        "at least two ticks of each repository: {per_tick:?}"
    );
    for (copy, runs) in &mut per_copy {
        runs.sort_unstable();
        assert!(
            runs.windows(2).all(|w| w[1].0 >= w[0].1),
            "{copy} synced two repositories at once: {runs:?}"
        );
    }
    assert!(
        per_copy.len() >= 2,
        "the work was spread over the copies: {per_copy:?}"
    );
    eprintln!(
        "{} executions, per copy {:?}",
        per_tick.len(),
        per_copy
            .iter()
            .map(|(c, r)| (c, r.len()))
            .collect::<Vec<_>>()
    );
}

/// `run --max-concurrent-syncs 0` is refused before anything starts, naming the option.
#[test]
fn a_sync_limit_of_zero_is_refused() {
    let out = std::process::Command::new(example_binary())
        .args(["run", "--max-concurrent-syncs", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("--max-concurrent-syncs"), "{stderr}");
}

/// A zero where zero makes no sense is refused while the arguments are read, naming the
/// option, before anything opens (no database file appears): `--poll-schedules-every 0s` would
/// read the store in a busy loop, `--embedder-timeout 0s` fail every request, `--lock-at-most-for
/// 0s` hold no lock, `--keep-history 0s` delete every run at once, `--embedder-batch-size 0`
/// send nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_settings_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("zero.db").display().to_string();
    for (args, option) in [
        (
            &["run", "--poll-schedules-every", "0s", "--run-for", "2s"][..],
            "--poll-schedules-every",
        ),
        (
            &["--embedder-timeout", "0s", "status"],
            "--embedder-timeout",
        ),
        (
            &["--embedder-timeout", "0ms", "status"],
            "--embedder-timeout",
        ),
        (
            &["--lock-at-most-for", "0s", "status"],
            "--lock-at-most-for",
        ),
        (
            &["run", "--keep-history", "0s", "--run-for", "2s"],
            "--keep-history",
        ),
        (
            &["--embedder-batch-size", "0", "status"],
            "--embedder-batch-size",
        ),
    ] {
        let args: Vec<&str> = ["--database-url", &db]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        let (ok, stderr, _) = run_bounded(dir.path(), &args).await;
        assert!(!ok, "{args:?}: {stderr}");
        assert!(stderr.contains(option), "{args:?}: {stderr}");
        assert!(
            !Path::new(&db).exists(),
            "{args:?} opened the database: {stderr}"
        );
    }
}

/// `run --metrics-addr` serves the scheduler's counters for Prometheus while it runs; the
/// figures agree with the run history written by the same process.
#[cfg(feature = "metrics")]
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
            "--poll-schedules-every",
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
            &shedlock::history::RunQuery::latest(100)
                .name("repo_sync_1")
                .outcome(shedlock::history::RunOutcome::Executed),
        )
        .await
        .unwrap();
    assert!(
        rows.len() as f64 >= executed,
        "{} rows, {executed} counted",
        rows.len()
    );
}

/// A `repo_sync run --metrics-addr` on a free port, one repository due every second (so the
/// scheduler records metrics), stderr to a file; killed when dropped.
#[cfg(feature = "metrics")]
struct MetricsRun {
    child: tokio::process::Child,
    addr: String,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
    _repo: TempRepo,
}

#[cfg(feature = "metrics")]
impl MetricsRun {
    /// Starts it, under `ulimit -n LIMIT` when `fd_limit` is set, and waits (up to 60 s) until
    /// `GET /metrics` shows a metric of the scheduler.
    async fn start(fd_limit: Option<u32>) -> Self {
        let bin = example_binary();
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("metrics.db").display().to_string();
        let repo = TempRepo::new();
        repo.write("a.rs", &lines("a", 3));
        repo.commit("a");
        add_repo(&bin, &url, &repo, "* * * * * *");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let stderr = dir.path().join("stderr.log");
        let args = [
            "--database-url",
            &url,
            "run",
            "--run-for",
            "180s",
            "--metrics-addr",
            &addr,
        ];
        let mut command = match fd_limit {
            None => tokio::process::Command::new(&bin),
            Some(limit) => {
                let mut sh = tokio::process::Command::new("sh");
                sh.args(["-c", &format!("ulimit -n {limit} && exec \"$0\" \"$@\"")])
                    .arg(&bin);
                sh
            }
        };
        let child = command
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let run = MetricsRun {
            child,
            addr,
            stderr,
            _dir: dir,
            _repo: repo,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(page) = run.try_get("/metrics").await
                && page.starts_with("HTTP/1.1 200")
                && page.contains("shedlock_attempts_total")
            {
                return run;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no metrics within 60 s: {}",
                std::fs::read_to_string(&run.stderr).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }

    /// `GET path` on a new connection: the whole answer (or why there is none).
    async fn try_get(&self, path: &str) -> std::io::Result<String> {
        raw_http(
            &self.addr,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
    }

    /// Lines written to stderr so far.
    fn stderr_lines(&self) -> usize {
        std::fs::read(&self.stderr)
            .unwrap_or_default()
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count()
    }

    /// CPU seconds (user and system) the process has used.
    fn cpu_seconds(&self) -> f64 {
        let pid = self.child.id().unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        let per_second: f64 = String::from_utf8(
            Command::new("getconf")
                .arg("CLK_TCK")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
        .parse()
        .unwrap();
        ticks / per_second
    }
}

/// Sends `request` on a new connection to `addr` and reads the answer until the server closes
/// the connection (at most 30 s).
#[cfg(feature = "metrics")]
async fn raw_http(addr: &str, request: &[u8]) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut socket = tokio::net::TcpStream::connect(addr).await?;
        socket.write_all(request).await?;
        let mut answer = Vec::new();
        socket.read_to_end(&mut answer).await?;
        Ok(String::from_utf8_lossy(&answer).into_owned())
    };
    tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .unwrap_or_else(|_| Err(std::io::Error::other("no complete answer within 30 s")))
}

/// The metrics endpoint serves `GET /metrics` only: another method is 405 (a 10 MB `PUT` is
/// answered before its body is sent), another path 404.
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_endpoint_serves_get_metrics_only() {
    let run = MetricsRun::start(None).await;
    for (request, status) in [
        (
            "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            "405",
        ),
        (
            "DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "405",
        ),
        // The body is never sent: the answer must not wait for it.
        (
            "PUT /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\nConnection: close\r\n\r\n",
            "405",
        ),
        (
            "GET /other HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "404",
        ),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "404",
        ),
        (
            "GET /metrics/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            "404",
        ),
    ] {
        let answer = raw_http(&run.addr, request.as_bytes()).await.unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{request:?}: {answer}"
        );
        assert!(!answer.contains("shedlock_"), "{request:?}: {answer}");
    }
    let answer = run.try_get("/metrics").await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.contains("shedlock_attempts_total"),
        "{answer}"
    );
}

/// A client that sends half a request line and waits is cut off (here within 30 s), and so
/// are 100 of them at once, while the endpoint goes on answering scrapes.
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_clients_are_cut_off_and_scrapes_still_answered() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let run = MetricsRun::start(None).await;
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut socket = tokio::net::TcpStream::connect(&run.addr).await.unwrap();
        socket.write_all(b"GET /metr").await.unwrap();
        slow.push(tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            // Cut off: end of stream or a reset, never an answer.
            tokio::time::timeout(Duration::from_secs(30), async {
                loop {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            })
            .await
            .is_ok()
        }));
    }
    let answer = run.try_get("/metrics").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let mut cut = 0;
    for client in slow {
        cut += usize::from(client.await.unwrap());
    }
    assert_eq!(cut, 100, "slow clients disconnected within 30 s");
    let answer = run.try_get("/metrics").await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

/// Under `ulimit -n 64`, 100 idle connections exhaust the process's descriptors: accepting
/// backs off instead of spinning, so over 10 s the process writes a few lines at most and uses
/// little CPU, and it serves again once the connections close.
#[cfg(feature = "metrics")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn descriptor_exhaustion_neither_spins_nor_floods_the_log() {
    let run = MetricsRun::start(Some(64)).await;
    let (lines, cpu) = (run.stderr_lines(), run.cpu_seconds());
    let mut idle = Vec::new();
    for _ in 0..100 {
        idle.push(tokio::net::TcpStream::connect(&run.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (logged, used) = (run.stderr_lines() - lines, run.cpu_seconds() - cpu);
    eprintln!("over 10 s: {logged} lines logged, {used:.2} CPU seconds");
    assert!(
        logged < 300,
        "{logged} lines logged in 10 s: {}",
        String::from_utf8_lossy(
            &std::fs::read(&run.stderr)
                .unwrap()
                .into_iter()
                .take(2000)
                .collect::<Vec<u8>>()
        )
    );
    assert!(used < 3.0, "{used:.2} CPU seconds in 10 s");
    drop(idle);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match run.try_get("/metrics").await {
            Ok(answer) if answer.starts_with("HTTP/1.1 200") => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "not serving 30 s after the connections closed: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The value of one sample in Prometheus text format: `name{labels} value`, with exactly
/// these labels (in any order); 0 when absent.
#[cfg(feature = "metrics")]
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

#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_same_works_on_postgres() {
    if shedlock_suite::skipped(shedlock::Backend::Postgres) {
        return;
    }
    let (url, database) = shedlock_suite::postgres_database("repo_sync").await;
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
    shedlock_suite::drop_postgres_database(&database).await;
}

// The schedules in the store (add, status, pause, resume, sync-now): `tests/schedules.rs`.

// ---- both backends: fenced writes, staged publishing, abandoned runs, awkward files ----------

/// The example's database and lock provider on one backend. On PostgreSQL each test has a
/// database of its own, dropped at the end.
struct On {
    ctx: Ctx,
    provider: Arc<dyn shedlock_suite::AdminAndRuns>,
    location: Location,
    pg_database: Option<String>,
    _dir: tempfile::TempDir,
}

impl On {
    /// `None` when PostgreSQL is wanted but left out of this run (scripts/test says so).
    async fn open(postgres: bool) -> Option<On> {
        let dir = tempfile::tempdir().unwrap();
        let (location, provider, pg_database): (
            Location,
            Arc<dyn shedlock_suite::AdminAndRuns>,
            _,
        ) = if postgres {
            if shedlock_suite::skipped(shedlock::Backend::Postgres) {
                return None;
            }
            let (url, database) = shedlock_suite::postgres_database("repo_sync").await;
            let provider = shedlock::PostgresLockProvider::connect(&url).await.unwrap();
            (
                Location::Postgres(url.into()),
                Arc::new(provider),
                Some(database),
            )
        } else {
            let path = dir.path().join("app.db");
            let provider = SqliteLockProvider::connect(&path.display().to_string())
                .await
                .unwrap();
            (Location::Sqlite(path), Arc::new(provider), None)
        };
        provider.migrate().await.unwrap();
        let db = Db::open(&location).await.unwrap();
        Some(On {
            ctx: test_ctx(db),
            provider,
            location,
            pg_database,
            _dir: dir,
        })
    }

    async fn register(&self, repo: &TempRepo) -> i64 {
        let source = repo.path().display().to_string();
        let session = self.ctx.db.add_session("r", &source);
        session.await.unwrap().id
    }

    async fn sync(&self, ctx: &Ctx, id: i64) -> TaskResult<Result<Outcome, String>> {
        with_provider(
            Arc::clone(&self.provider),
            sync_locked(ctx, id, Trigger::Manual),
        )
        .await
        .unwrap()
    }

    /// `(commit, fencing token)` of every live chunk of repository `id`, distinct.
    async fn written_by(&self, id: i64) -> Vec<(String, i64)> {
        let rows = self
            .ctx
            .db
            .rows(
                "SELECT DISTINCT commit_sha, fencing_token FROM chunks WHERE repository_id = $1 ORDER BY commit_sha",
                vec![db::V::I(id)],
            )
            .await
            .unwrap();
        use sqlx::Row;
        rows.iter().map(|r| (r.get(0), r.get(1))).collect()
    }

    async fn close(self) {
        if let Some(database) = self.pg_database {
            drop(self.ctx);
            shedlock_suite::drop_postgres_database(&database).await;
        }
    }
}

/// `mod $test { sqlite, postgres }`, each running `$test(postgres: bool)`.
macro_rules! on_both_backends {
    ($($test:ident),* $(,)?) => {$(
        mod $test {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                super::$test(false).await
            }
            #[cfg(feature = "postgres")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                super::$test(true).await
            }
        }
    )*};
}

on_both_backends!(
    a_stale_holder_paused_before_its_write_writes_nothing,
    a_failed_or_cancelled_sync_leaves_the_index_as_it_was,
    runs_left_running_are_closed_as_abandoned,
    awkward_files_are_skipped_and_counted_and_renames_and_deletions_apply,
);

/// A hook that pauses the first sync to reach `at` until released, and says when it got there.
fn pause_at(
    at: store::WritePoint,
) -> (
    store::WriteHook,
    tokio::sync::mpsc::UnboundedReceiver<()>,
    Arc<tokio::sync::Semaphore>,
) {
    let (reached, reached_rx) = tokio::sync::mpsc::unbounded_channel();
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let gate = Arc::clone(&release);
    let hook: store::WriteHook = Arc::new(move |point| {
        let (reached, gate) = (reached.clone(), Arc::clone(&gate));
        Box::pin(async move {
            if point == at {
                let _ = reached.send(());
                let _ = gate.acquire().await.map(|permit| permit.forget());
            }
        })
    });
    (hook, reached_rx, release)
}

const DEADLINE: Duration = Duration::from_secs(120);

async fn a_stale_holder_paused_before_its_write_writes_nothing(postgres: bool) {
    let Some(on) = On::open(postgres).await else {
        return;
    };
    let repo = TempRepo::new();
    for (round, at) in [store::WritePoint::Publish, store::WritePoint::Stage(0)]
        .into_iter()
        .enumerate()
    {
        let round = round as i64;
        repo.write("src/a.rs", &lines(&format!("a{round}"), 40));
        repo.commit("base");
        let id = on.register(&repo).await;
        let base = round * 100;
        let session = on.ctx.db.session(id).await.unwrap().unwrap();
        sync::sync_repository(&on.ctx, &session, base + 10)
            .await
            .unwrap();
        let synced = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
        on.ctx.db.record_success(id, &synced).await.unwrap();
        let session = on.ctx.db.session(id).await.unwrap().unwrap();

        // The stale holder (token +11) reads the next commit and stops right before a write.
        repo.write("src/a.rs", &lines("stale", 40));
        repo.commit("seen by the stale holder");
        let (hook, mut reached, release) = pause_at(at);
        let mut stale_ctx = on.ctx.clone();
        stale_ctx.write_hook = Some(hook);
        let stale_session = session.clone();
        let stale = tokio::spawn(async move {
            sync::sync_repository(&stale_ctx, &stale_session, base + 11).await
        });
        tokio::time::timeout(DEADLINE, reached.recv())
            .await
            .expect("the stale holder reaches its write")
            .unwrap();

        // The new holder (token +12) syncs a newer commit to the end.
        let fresh = lines("fresh", 25);
        repo.write("src/a.rs", &fresh);
        repo.commit("seen by the new holder");
        let head = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
        sync::sync_repository(&on.ctx, &session, base + 12)
            .await
            .unwrap();

        // The stale holder goes on: refused, and it wrote nothing.
        release.add_permits(1);
        let refused = tokio::time::timeout(DEADLINE, stale)
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(
                &refused,
                Err(sync::SyncError::Store(StoreError::Fenced { token, current, .. }))
                    if *token == base + 11 && *current == base + 12
            ),
            "{at:?}: {refused:?}"
        );
        assert_eq!(
            on.written_by(id).await,
            [(head, base + 12)],
            "{at:?}: only the new holder's chunks are live"
        );
        assert_eq!(
            stored_points(&on.ctx, id).await,
            expected_points(id, &[("src/a.rs", &fresh)], &on.ctx.chunking)
        );
        assert_eq!(on.ctx.store.staged(id).await.unwrap(), 0, "{at:?}");
        on.ctx.db.remove_session(id).await.unwrap();
    }
    on.close().await;
}

/// The lexical embedder, failing from its `fail_from`-th call on (1-based).
#[derive(Debug)]
struct FailingEmbedder {
    inner: LexicalHashEmbedder,
    calls: std::sync::atomic::AtomicUsize,
    fail_from: usize,
}

impl embed::Embedder for FailingEmbedder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> futures_util::future::BoxFuture<'a, Result<Vec<embed::Embedding>, embed::EmbedError>> {
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        if call >= self.fail_from {
            let err = embed::EmbedError::InvalidConfig {
                reason: "overloaded (test)".into(),
            };
            return Box::pin(async move { Err(err) });
        }
        self.inner.embed(texts)
    }
}

async fn a_failed_or_cancelled_sync_leaves_the_index_as_it_was(postgres: bool) {
    let Some(on) = On::open(postgres).await else {
        return;
    };
    let repo = TempRepo::new();
    // 70 files: two batches, so a failure in the second comes after the first was staged.
    let files = |v: &str| -> Vec<(String, String)> {
        (0..70)
            .map(|i| (format!("src/f{i:02}.rs"), lines(&format!("{v} {i}"), 3)))
            .collect()
    };
    for (path, text) in files("one") {
        repo.write(&path, &text);
    }
    repo.commit("one");
    let first = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
    let id = on.register(&repo).await;
    assert!(matches!(
        on.sync(&on.ctx, id).await,
        TaskResult::Executed(Ok(Outcome::Synced(_)))
    ));
    let before = on.written_by(id).await;
    let points_before = stored_points(&on.ctx, id).await;
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].0, first);
    for (path, text) in files("two") {
        repo.write(&path, &text);
    }
    repo.commit("two");

    // Failed in the second batch.
    let mut failing = on.ctx.clone();
    failing.embedder = Arc::new(FailingEmbedder {
        inner: LexicalHashEmbedder::default(),
        calls: Default::default(),
        fail_from: 2,
    });
    let failed = on.sync(&failing, id).await;
    assert!(
        matches!(&failed, TaskResult::Executed(Err(e)) if e.contains("overloaded")),
        "{failed:?}"
    );
    assert_eq!(
        on.written_by(id).await,
        before,
        "nothing of the failed sync is live"
    );
    assert_eq!(stored_points(&on.ctx, id).await, points_before);
    assert_eq!(on.ctx.store.staged(id).await.unwrap(), 0);
    let session = on.ctx.db.session(id).await.unwrap().unwrap();
    assert_eq!(session.last_synced_commit.as_deref(), Some(first.as_str()));

    // Cancelled right before publishing (what a shutdown past its timeout does).
    let (hook, mut reached, _never) = pause_at(store::WritePoint::Publish);
    let mut paused = on.ctx.clone();
    paused.write_hook = Some(hook);
    let provider = Arc::clone(&on.provider);
    let run = tokio::spawn(async move {
        with_provider(provider, sync_locked(&paused, id, Trigger::Manual)).await
    });
    tokio::time::timeout(DEADLINE, reached.recv())
        .await
        .expect("the sync reaches its publish")
        .unwrap();
    assert!(
        on.ctx.store.staged(id).await.unwrap() > 0,
        "staged, not live"
    );
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    tokio::time::timeout(DEADLINE, on.ctx.pending.wait())
        .await
        .unwrap();
    assert_eq!(
        on.written_by(id).await,
        before,
        "nothing of the cancelled sync is live"
    );
    assert_eq!(on.ctx.store.staged(id).await.unwrap(), 0);
    let mut logs = on.ctx.db.logs(Some(id), 10).await.unwrap();
    logs.sort_by_key(|l| l.id);
    let statuses: Vec<&str> = logs.iter().map(|l| l.status.as_str()).collect();
    assert_eq!(statuses, ["completed", "failed", "cancelled"]);
    assert!(
        logs[2]
            .error_message
            .as_deref()
            .unwrap_or_default()
            .starts_with("cancelled"),
        "{logs:?}"
    );

    // And the next sync publishes the new commit whole (once the cancelled run's lock is
    // released: a dropped run unlocks in the background).
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let next = loop {
        match on.sync(&on.ctx, id).await {
            TaskResult::Skipped if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => break other,
        }
    };
    assert!(
        matches!(next, TaskResult::Executed(Ok(Outcome::Synced(_)))),
        "{next:?}"
    );
    let second = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
    assert_eq!(on.written_by(id).await.len(), 1);
    assert_eq!(on.written_by(id).await[0].0, second);
    on.close().await;
}

async fn runs_left_running_are_closed_as_abandoned(postgres: bool) {
    let Some(on) = On::open(postgres).await else {
        return;
    };
    let db = &on.ctx.db;
    let id = db.add_session("r", "/nowhere/r").await.unwrap().id;
    let never_locked = db.add_session("n", "/nowhere/n").await.unwrap().id;
    let config = shedlock::LockConfiguration::new(
        db::lock_name(id),
        Duration::from_secs(600),
        Duration::ZERO,
    )
    .unwrap();
    // A run whose process died: its lock released (as keep-alive's end would leave it).
    let first = on.provider.lock(&config).await.unwrap().expect("free");
    let t1 = first.fencing_token();
    let died = db.log_start(id, None, "dead-pod", t1).await.unwrap();
    assert_eq!(
        db.close_abandoned().await.unwrap(),
        0,
        "its lock is held: running"
    );
    first.unlock().await.unwrap();
    // A second holder, with a run of its own, and a row of the first token still open.
    let second = on.provider.lock(&config).await.unwrap().expect("free");
    let t2 = second.fencing_token();
    let live = db.log_start(id, None, "live-pod", t2).await.unwrap();
    let overtaken = db.log_start(id, None, "dead-pod", t1).await.unwrap();
    let orphan = db
        .log_start(never_locked, None, "dead-pod", 5)
        .await
        .unwrap();

    assert_eq!(db.close_abandoned().await.unwrap(), 3);
    let logs = db.logs(None, 10).await.unwrap();
    let row = |log_id: i64| logs.iter().find(|l| l.id == log_id).unwrap().clone();
    assert_eq!(row(live).status, "running", "its token holds the lock");
    for (log_id, says) in [
        (died, "taken by fencing token"),
        (overtaken, "taken by fencing token"),
        (orphan, "no longer exists"),
    ] {
        let r = row(log_id);
        assert_eq!(r.status, "abandoned", "{r:?}");
        assert!(r.completed_at.is_some());
        assert!(
            r.error_message
                .as_deref()
                .unwrap_or_default()
                .contains(says),
            "{r:?}"
        );
    }
    // The live run's lock expires without an end: abandoned, said so.
    second.unlock().await.unwrap();
    assert_eq!(db.close_abandoned().await.unwrap(), 1);
    let r = db
        .logs(Some(id), 10)
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.id == live)
        .unwrap();
    assert_eq!(r.status, "abandoned");
    assert!(
        r.error_message
            .as_deref()
            .unwrap_or_default()
            .contains("expired"),
        "{r:?}"
    );

    // On start-up: any command of the example closes such rows, and `status` shows them.
    let again = db
        .log_start(never_locked, None, "killed-pod", 6)
        .await
        .unwrap();
    let url = match &on.location {
        Location::Sqlite(path) => path.display().to_string(),
        Location::Postgres(url) => url.expose().to_owned(),
    };
    let out = Command::new(example_binary())
        .args(["--database-url", &url, "status"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("closed as abandoned"), "{stderr}");
    assert!(
        stdout.contains("abandoned") && stdout.contains("no longer exists"),
        "{stdout}"
    );
    let r = db.logs(Some(never_locked), 10).await.unwrap();
    assert_eq!(
        r.iter().find(|l| l.id == again).unwrap().status,
        "abandoned"
    );
    on.close().await;
}

async fn awkward_files_are_skipped_and_counted_and_renames_and_deletions_apply(postgres: bool) {
    let Some(on) = On::open(postgres).await else {
        return;
    };
    let repo = TempRepo::new();
    let (a, b) = (lines("a", 20), lines("b", 30));
    repo.write("src/a.rs", &a);
    repo.write("src/b.rs", &b);
    repo.write("empty.txt", "");
    // Text to git (no NUL in the first 8000 bytes), but with a NUL further in, as ripgrep's
    // tests/data/sherlock-nul.txt: PostgreSQL's TEXT cannot hold it.
    let mut nul = "x".repeat(9000).into_bytes();
    nul.extend_from_slice(b"\0after the NUL\n");
    std::fs::write(repo.path().join("nul.txt"), nul).unwrap();
    std::fs::write(repo.path().join("logo.png"), b"\x89PNG\r\n\x1a\n\0\0binary").unwrap();
    std::fs::write(repo.path().join("latin1.txt"), b"caf\xe9 au lait\n").unwrap();
    repo.write("big.txt", &"y".repeat(20_000)); // over the 10 kB limit of these tests
    std::os::unix::fs::symlink("src/a.rs", repo.path().join("link.rs")).unwrap();
    repo.git(&["add", "-A"]);
    // A submodule entry (a gitlink: a commit, not a file).
    repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        "160000,1111111111111111111111111111111111111111,vendor/sub",
    ]);
    repo.git(&["commit", "-q", "-m", "awkward"]);
    let id = on.register(&repo).await;
    let TaskResult::Executed(Ok(Outcome::Synced(first))) = on.sync(&on.ctx, id).await else {
        panic!("the first sync succeeds on every backend")
    };
    assert_eq!(
        (
            first.files,
            first.binary_files,
            first.large_files,
            first.not_utf8_files,
            first.unstorable_files
        ),
        (3, 1, 1, 1, 1),
        "a.rs, b.rs and the empty file indexed; one of each skipped: {first:?}"
    );
    let cfg = on.ctx.chunking;
    assert_eq!(
        stored_points(&on.ctx, id).await,
        expected_points(id, &[("src/a.rs", &a), ("src/b.rs", &b)], &cfg)
    );

    // A rename and a deletion.
    repo.git(&["mv", "src/b.rs", "src/c.rs"]);
    repo.git(&["rm", "-q", "src/a.rs"]);
    repo.git(&["commit", "-q", "-m", "rename b, delete a"]);
    let TaskResult::Executed(Ok(Outcome::Synced(second))) = on.sync(&on.ctx, id).await else {
        panic!("the second sync succeeds")
    };
    assert!(!second.full);
    assert_eq!(second.deleted_paths, 2, "{second:?}");
    assert_eq!(
        stored_points(&on.ctx, id).await,
        expected_points(id, &[("src/c.rs", &b)], &cfg)
    );
    let session = on.ctx.db.session(id).await.unwrap().unwrap();
    assert_eq!(session.consecutive_failures, 0);
    assert!(session.last_sync_at.is_some());
    on.close().await;
}

#[test]
fn database_urls_are_read_as_users_type_them() {
    use std::path::PathBuf;
    let sqlite = |p: &str| Ok(Location::Sqlite(PathBuf::from(p)));
    assert_eq!(
        Location::parse("/srv/repo_sync/x.db"),
        sqlite("/srv/repo_sync/x.db")
    );
    assert_eq!(Location::parse("x.db"), sqlite("x.db"));
    assert_eq!(Location::parse("sqlite:///srv/x.db"), sqlite("/srv/x.db"));
    assert_eq!(Location::parse("sqlite://data/x.db"), sqlite("data/x.db"));
    assert_eq!(Location::parse("sqlite:x.db?mode=rwc"), sqlite("x.db"));
    assert_eq!(Location::parse("sqlite:///a%20b/x.db"), sqlite("/a b/x.db"));
    assert_eq!(
        Location::parse("postgres://u@h/db"),
        Ok(Location::Postgres("postgres://u@h/db".into()))
    );
    for (bad, says) in [
        ("sqlite::memory:", "names no file"),
        (":memory:", "names no file"),
        ("", "it is empty"),
        ("sqlite:x.db?mode=ro", "unsupported option \"mode=ro\""),
        // A scheme with its `//` missing is a mistyped URL, never a file name.
        (
            "postgres:postgres:topsecret@127.0.0.1:5432/",
            "`postgres:` is not followed by `//`",
        ),
        (
            "postgresql:u:topsecret@h/db",
            "`postgresql:` is not followed by `//`",
        ),
        ("POSTGRES:u:topsecret@h/db", "`POSTGRES:` is not followed"),
        ("mysql:root:topsecret@h", "`mysql:` is not followed"),
        ("mariadb:root:topsecret@h", "`mariadb:` is not followed"),
        ("redis:topsecret@h", "`redis:` is not followed"),
        ("rediss://:topsecret@h", "unsupported database \"rediss\""),
        ("mysql://root@h/test", "unsupported database \"mysql\""),
        // A password with an unescaped `/` leaves the port unreadable.
        ("postgres://u:pa/ss@h:5432/db", "not a valid postgres URL"),
        (
            "ftp://u:topsecret@h/x",
            "unsupported database URL scheme \"ftp\"",
        ),
        // Not a file of its own per instance (issue 46): only what says it is a file is one.
        (
            "host=127.0.0.1 user=app password=topsecret dbname=db",
            "key=value connection string",
        ),
        ("postgresql//app:topsecret@db/app", "lacks the `:`"),
        ("locks", "neither a URL nor an SQLite file path"),
    ] {
        let err = Location::parse(bad).unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
        assert!(
            !err.contains("topsecret") && !err.contains("pa/ss"),
            "{bad}: {err}"
        );
    }
    for path in ["./locks", "../locks", "/srv/locks", "data/x.sqlite3"] {
        assert_eq!(Location::parse(path), sqlite(path));
    }
    // A file whose name starts like a scheme is written as a path.
    assert_eq!(
        Location::parse("./postgres:x.db"),
        sqlite("./postgres:x.db")
    );
    // Printed, a PostgreSQL location masks its password.
    let location = Location::parse("postgres://u:topsecret@h/db?sslpassword=topsecret").unwrap();
    assert_eq!(
        location.to_string(),
        "postgres://u:***@h/db?sslpassword=***"
    );
    assert!(!format!("{location:?}").contains("topsecret"));
}

/// Text from the database or a repository reaches the terminal with its control characters
/// escaped: a name, an error text, a `locked_by`, a lock name, a path and a chunk's text holding
/// `ESC[31m`, `ESC]0;…BEL` and `\r` are printed as `\x1b[31m`, `\r`, … by `status`, `search` and
/// `sync-now`, never as the codes themselves. A stored commit id of multi-byte characters is
/// cut whole (it panicked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_from_the_database_reaches_the_terminal_escaped() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("escape.db").display().to_string();
    let repo = TempRepo::new();
    repo.write(
        "evil\x1b[2J.rs",
        "fn evil() {} // \x1b[31mred\r\x1b]0;title\x07\n",
    );
    repo.commit("evil");
    add_repo(&bin, &url, &repo, "0 0 * * * *");
    let cli = |args: &[&str]| {
        let out = Command::new(&bin)
            .args(["--database-url", &url])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    cli(&["sync-now", "1"]);
    let db = Db::open(&Location::parse(&url).unwrap()).await.unwrap();
    let evil = "x\x1b[31mred\r\u{9b}2J\u{202e}";
    // A commit id of multi-byte characters: `status` prints its first 12 characters, whole.
    db.exec(
        "UPDATE schedule_sessions SET display_name = $1, last_synced_commit = $2",
        vec![
            db::V::S(format!("name-{evil}")),
            db::V::S("aééééééééééééé\x1b".into()),
        ],
    )
    .await
    .unwrap();
    db.exec(
        "UPDATE schedule_execution_logs SET error_message = $1, locked_by = $2",
        vec![
            db::V::S(format!("error-{evil}")),
            db::V::S(format!("by-{evil}")),
        ],
    )
    .await
    .unwrap();
    db.exec(
        "UPDATE shedlock SET locked_by = $1",
        vec![db::V::S(format!("holder-{evil}"))],
    )
    .await
    .unwrap();
    let escaped = r"x\x1b[31mred\r\u{9b}2J\u{202e}";
    let status = cli(&["status"]);
    let search = cli(&["search", "fn evil", "-k", "1"]);
    let sync = cli(&["sync-now", "1"]);
    for (what, out) in [
        ("status", &status),
        ("search", &search),
        ("sync-now", &sync),
    ] {
        assert!(
            !out.contains(['\x1b', '\r', '\x07', '\u{9b}', '\u{202e}']),
            "{what} printed a control character: {out:?}"
        );
    }
    for text in ["name-", "error-", "by-", "holder-"] {
        assert!(
            status.contains(&format!("{text}{escaped}")),
            "{text}: {status}"
        );
    }
    assert!(status.contains("at aééééééééééé "), "{status}");
    assert!(search.contains(r"evil\x1b[2J.rs"), "{search}");
    assert!(
        search.contains(r"\x1b[31mred\r\x1b]0;title\x07"),
        "{search}"
    );
    assert!(sync.contains(&format!("name-{escaped}")), "{sync}");
}

/// `add` of a registered repository applies the options given (`--cron`, `--time-zone`,
/// `--name`) to its registration and says what changed; the options not given keep their
/// stored values (the defaults do not overwrite them), and with none it says nothing changed
/// and how to change it. Before, the options were ignored without a word.
#[test]
fn adding_a_registered_repository_again_applies_the_options_given() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("add.db").display().to_string();
    let repo = TempRepo::new();
    repo.write("a.rs", "fn a() {}\n");
    repo.commit("a");
    let path = repo.path().display().to_string();
    let add = |args: &[&str]| {
        let out = Command::new(&bin)
            .args(["--database-url", &url, "add", &path])
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    };
    let row = || {
        let out = Command::new(&bin)
            .args(["--database-url", &url, "status"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let (ok, out, err) = add(&["--cron", "0 0 * * * *", "--time-zone", "Asia/Seoul"]);
    assert!(ok && out.contains("registered #1"), "{out}{err}");

    let (ok, out, err) = add(&[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("already registered")
            && out.contains("nothing changed")
            && out.contains("--cron"),
        "{out}"
    );
    assert!(row().contains("\"0 0 * * * *\" Asia/Seoul"), "{}", row());

    let (ok, out, err) = add(&["--cron", "0 */5 * * * *", "--name", "renamed"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("\"0 0 * * * *\" → \"0 */5 * * * *\"") && out.contains("→ renamed"),
        "{out}"
    );
    let now = row();
    assert!(
        now.starts_with("#1 renamed ") && now.contains("\"0 */5 * * * *\" Asia/Seoul"),
        "{now}"
    );

    // A bad value changes nothing and says why, in one line: a time zone that does not
    // exist, a cron that does not parse, one that never fires (the 31st of February).
    for (args, says) in [
        (&["--time-zone", "Mars/Olympus"][..], "Mars/Olympus"),
        (&["--cron", "every tuesday"], "every tuesday"),
        (&["--cron", "0 0 0 31 2 *"], "0 0 0 31 2 *"),
    ] {
        let (ok, _, err) = add(args);
        assert!(!ok && err.contains(says), "{args:?}: {err}");
        assert!(
            err.starts_with("repo_sync: ") && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
        assert_eq!(row(), now, "{args:?}");
    }
}

/// `status` lists every registration even when one holds a schedule the library refuses (a
/// row written by hand, or by a version that accepted it): that row says why it is not
/// scheduled, and the others are shown as usual. Before, `status` stopped at that row with
/// the error and showed nothing.
#[tokio::test]
async fn status_shows_a_registration_whose_schedule_is_refused() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("bad_cron.db").display().to_string();
    let (one, two) = (TempRepo::new(), TempRepo::new());
    for repo in [&one, &two] {
        repo.write("a.rs", "fn a() {}\n");
        repo.commit("a");
        add_repo(&bin, &url, repo, "0 0 * * * *");
    }
    let db = Db::open(&Location::parse(&url).unwrap()).await.unwrap();
    db.exec(
        "UPDATE shedlock_schedules SET cron = 'every tuesday' WHERE name = 'repo_sync_1'",
        vec![],
    )
    .await
    .unwrap();
    let out = Command::new(&bin)
        .args(["--database-url", &url, "status"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("\"every tuesday\"") && stdout.contains("not scheduled:"),
        "{stdout}"
    );
    assert!(
        stdout.contains("#2 ") && stdout.contains("next tick 20"),
        "{stdout}"
    );
}

/// `repo_sync status | head -1`: output to a pipe whose reader has gone ends the output, not
/// the program (it panicked with "failed printing to stdout: Broken pipe").
#[test]
fn a_closed_stdout_ends_the_output_not_the_program() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("pipe.db").display().to_string();
    let repo = TempRepo::new();
    repo.write("a.rs", "fn a() {}\n");
    repo.commit("a");
    add_repo(&bin, &url, &repo, "0 0 * * * *");
    for args in [&["status"][..], &["sync-now", "1"], &["search", "fn a"]] {
        let mut child = Command::new(&bin)
            .args(["--database-url", &url])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes before the first line is written (the database opens first).
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(out.status.success(), "{args:?}: {stderr}");
    }
}

/// Runs `repo_sync ARGS` in `dir`, giving up after 20 s (a generous bound for a failure that
/// must be reported at once); `(exit success, stderr, seconds taken)`.
async fn run_bounded(dir: &Path, args: &[&str]) -> (bool, String, f64) {
    let started = std::time::Instant::now();
    let child = tokio::process::Command::new(example_binary())
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{args:?} still running after 20 s"))
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        out.status.success(),
        stderr,
        started.elapsed().as_secs_f64(),
    )
}

/// A PostgreSQL server that is down is reported within seconds with its real cause, and no
/// message shows the password, wherever it stands in the URL (a `/` in it, a query
/// parameter); nor does the message for an unsupported scheme.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_named_at_once_without_its_password() {
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (url, says) in [
        (
            format!("postgres://postgres:topsecret@127.0.0.1:{closed}/test"),
            "refused",
        ),
        (
            format!("postgres://postgres@127.0.0.1:{closed}/test?password=topsecret"),
            "refused",
        ),
        (
            format!("postgres://postgres:pa/ss@127.0.0.1:{closed}/test"),
            "not a valid postgres URL",
        ),
        (
            "ftp://u:topsecret@h/x".to_owned(),
            "unsupported database URL scheme \"ftp\"",
        ),
    ] {
        let (ok, stderr, secs) = run_bounded(dir.path(), &["--database-url", &url, "status"]).await;
        eprintln!("{secs:.1} s: {stderr}");
        assert!(!ok, "{url}: {stderr}");
        assert!(stderr.contains(says), "{url}: {stderr}");
        assert!(
            !stderr.contains("topsecret") && !stderr.contains("pa/ss"),
            "{url}: {stderr}"
        );
    }
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// A URL of another backend with a typo (`postgres:` without `//`) is refused by its scheme,
/// without echoing the password, and nothing appears on disk: it was never taken as a path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mistyped_url_is_refused_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for (url, scheme) in [
        ("postgres:postgres:topsecret@127.0.0.1:5432/", "postgres"),
        ("postgres:postgres:topsecret@127.0.0.1", "postgres"),
        ("postgresql:u:topsecret@h/db", "postgresql"),
        ("mysql:root:topsecret@127.0.0.1:3306/test", "mysql"),
        ("mariadb:root:topsecret@h/db", "mariadb"),
        ("redis:topsecret@127.0.0.1:6379", "redis"),
        ("rediss:topsecret@h", "rediss"),
    ] {
        for command in [&["status"][..], &["add", "."], &[]] {
            let args: Vec<&str> = ["--database-url", url]
                .into_iter()
                .chain(command.iter().copied())
                .collect();
            let (ok, stderr, _) = run_bounded(dir.path(), &args).await;
            assert!(!ok, "{args:?}: {stderr}");
            assert!(
                stderr.contains(&format!("`{scheme}:` is not followed by `//`")),
                "{args:?}: {stderr}"
            );
            assert!(!stderr.contains("topsecret"), "{args:?}: {stderr}");
            let left: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(left.is_empty(), "{args:?} created {left:?}");
        }
    }
}

#[test]
fn database_urls_a_user_can_type_create_the_file_and_its_directory() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let absolute = dir.path().join("srv/repo_sync/x.db");
    let run = |url: &str| {
        let out = Command::new(&bin)
            .args(["--database-url", url, "status"])
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&format!("sqlite://{}", absolute.display()));
    assert!(absolute.is_file());
    run("plain/relative.db");
    assert!(dir.path().join("plain/relative.db").is_file());
    let out = Command::new(&bin)
        .args(["--database-url", "mysql://root@127.0.0.1/test", "status"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("unsupported database"),
        "{stderr}"
    );
}

#[test]
fn the_default_database_belongs_to_the_repository_and_vanished_ones_are_reported() {
    let bin = example_binary();
    let here = TempRepo::new();
    here.write("src/lock.rs", "fn fencing_token() -> i64 { 42 }\n");
    here.commit("here");
    let elsewhere = TempRepo::new();
    elsewhere.write("x.rs", "fn x() {}\n");
    elsewhere.commit("x");
    let shared_target = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(&bin)
            .args(args)
            .current_dir(here.path())
            // Several clones sharing one target directory must not share a database.
            .env("CARGO_TARGET_DIR", shared_target.path())
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{args:?}: {text}");
        text
    };
    run(&["add", &elsewhere.path().display().to_string()]);
    assert!(here.path().join(".git/repo_sync.db").is_file());
    assert!(!shared_target.path().join("repo_sync.db").exists());
    let vanished = elsewhere.path().display().to_string();
    drop(elsewhere);
    let said = run(&[]);
    assert!(
        said.contains(&format!("{vanished} no longer exists")),
        "the vanished repository is named: {said}"
    );
    assert!(
        said.contains("1 files indexed"),
        "the repository it stands in is synced: {said}"
    );
}

/// An OpenAI-compatible embeddings stand-in whose first answer takes `first_delay`: it holds
/// a sync in the middle of its work. Sends on `started` when the first request arrives.
#[cfg(feature = "http")]
async fn slow_embedder(
    first_delay: Duration,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (started, started_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let delay = if std::mem::take(&mut first) {
                let _ = started.send(());
                first_delay
            } else {
                Duration::ZERO
            };
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 8192];
                let body = loop {
                    let Ok(n) = socket.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).into_owned();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| {
                                let (k, v) = l.split_once(':')?;
                                k.eq_ignore_ascii_case("content-length")
                                    .then(|| v.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        if body.len() >= length {
                            break body.to_owned();
                        }
                    }
                };
                tokio::time::sleep(delay).await;
                let input: serde_json::Value = serde_json::from_str(&body).unwrap();
                let n = input["input"].as_array().map_or(0, Vec::len);
                let data: Vec<_> = (0..n)
                    .map(|i| serde_json::json!({"index": i, "embedding": [0.6, 0.8, 0.0, 0.0]}))
                    .collect();
                let reply = serde_json::json!({ "data": data }).to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                    reply.len()
                );
                let _ = socket.write_all(response.as_bytes()).await;
            });
        }
    });
    (url, started_rx)
}

/// Ctrl-C in a terminal signals the whole foreground process group. A sync running then
/// either finishes within the shutdown timeout (git, in a group of its own, is not killed:
/// no "Broken pipe") or is cancelled and recorded as such; never `failed`.
#[cfg(feature = "http")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_lets_a_running_sync_finish_or_records_it_cancelled() {
    let bin = example_binary();
    let repo = TempRepo::new();
    // Two batches: the second is read from git after the signal.
    for i in 0..80 {
        repo.write(&format!("src/f{i:02}.rs"), &lines(&format!("f{i}"), 3));
    }
    repo.commit("files");
    for (first_delay, shutdown_timeout, expected) in [
        (Duration::from_secs(3), "120s", "completed"),
        (Duration::from_secs(600), "1s", "cancelled"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().join("app.db").display().to_string();
        let (embedder, mut started) = slow_embedder(first_delay).await;
        add_repo(&bin, &url, &repo, "* * * * * *");
        let runner = tokio::process::Command::new(&bin)
            .args(["--database-url", &url, "--embedder-url", &embedder])
            .args([
                "--embedder-timeout",
                "900s",
                "run",
                "--poll-schedules-every",
                "500ms",
            ])
            .args(["--shutdown-timeout", shutdown_timeout])
            .process_group(0) // as a shell runs a foreground job
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = runner.id().unwrap();
        tokio::time::timeout(DEADLINE, started.recv())
            .await
            .expect("a sync starts embedding")
            .unwrap();
        // What the terminal does on Ctrl-C: SIGINT to every process of the group. (Bash's own
        // `kill`: procps-ng 4.0.2's reads a negative pid as -1, every process.)
        let kill = Command::new("bash")
            .args(["-c", &format!("kill -INT -- -{pid}")])
            .status()
            .unwrap();
        assert!(kill.success());
        let out = tokio::time::timeout(DEADLINE, runner.wait_with_output())
            .await
            .expect("the scheduler stops")
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let db = Db::open(&Location::parse(&url).unwrap()).await.unwrap();
        let logs = db.logs(None, 100).await.unwrap();
        let first = logs
            .iter()
            .min_by_key(|l| l.id)
            .expect("a run was recorded");
        assert_eq!(first.status, expected, "{logs:?}");
        assert!(
            logs.iter().all(|l| l.status != "failed"),
            "nothing failed: {logs:?}"
        );
        if expected == "cancelled" {
            assert!(
                first
                    .error_message
                    .as_deref()
                    .unwrap_or_default()
                    .starts_with("cancelled"),
                "{first:?}"
            );
            use store::VectorStore;
            let store = SqlVectorStore::new(db.clone());
            assert!(
                store.points(1).await.unwrap().is_empty(),
                "nothing published"
            );
            assert_eq!(store.staged(1).await.unwrap(), 0, "staging dropped");
        }
    }
}

/// A PostgreSQL URL naming a database the server does not have: repo_sync names it and says
/// how to create it, without the server's source line (`… does not exist at line 948`).
#[tokio::test]
async fn an_unknown_postgres_database_is_named_with_how_to_create_it() {
    if shedlock_suite::skipped(shedlock::Backend::Postgres) {
        return;
    }
    let base = shedlock_suite::postgres_url();
    let (server, _) = base.rsplit_once('/').expect("a URL with a database");
    let name = shedlock_suite::unique_name("repo_sync_none");
    let location = Location::parse(&format!("{server}/{name}")).unwrap();
    let Err(error) = Db::open(&location).await else {
        panic!("the database {name} does not exist");
    };
    assert!(
        error.contains(&format!("database \"{name}\" does not exist on the server"))
            && error.contains("CREATE DATABASE"),
        "{error}"
    );
    assert!(!error.contains(" at line "), "{error}");
}

/// `run --help` lists the command's own options first and the global ones apart, under their
/// own heading, so a newcomer tells what `run` takes from what every command takes.
#[test]
fn run_help_lists_the_global_options_apart() {
    let out = Command::new(example_binary())
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    let own = help.find("--role").expect("run's own options");
    let heading = help
        .find("Global options (any command):")
        .expect("a heading for the global options");
    let global = help.find("--database-url").expect("a global option");
    assert!(own < heading && heading < global, "{help}");
}

/// A `RUST_LOG` that is not a log filter is named, and the command still runs (warnings are
/// logged); a valid one is taken without a word.
#[test]
fn a_rust_log_that_is_not_a_filter_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db").display().to_string();
    for (value, named) in [("=bad=", true), ("repo_sync=info,shedlock=debug", false)] {
        let out = Command::new(example_binary())
            .args(["--database-url", &db, "status"])
            .env("RUST_LOG", value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{value}: {stderr}");
        assert_eq!(
            stderr.contains(&format!("RUST_LOG={value:?} is not a log filter")),
            named,
            "{value}: {stderr}"
        );
    }
}

/// `run --role worker --poll-interval` refuses a poll interval of zero, a busy loop's, or one
/// past 10 minutes, naming the flag and the bound, before it opens anything.
#[cfg(feature = "workers")]
#[test]
fn run_refuses_an_unusable_poll_interval() {
    for (value, says) in [
        ("0s", "shorter than 10ms"),
        ("5ms", "shorter than 10ms"),
        ("2h", "longer than 10m"),
        ("often", "\"often\" is not a duration"),
    ] {
        let out = Command::new(example_binary())
            .args(["run", "--role", "worker", "--poll-interval", value])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{value}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--poll-interval") && stderr.contains(says),
            "{value}: {stderr}"
        );
    }
}

/// `run --dashboard` serves the dashboard over the same store while it runs: the repository's
/// job with its runs (by the API and on the timeline of its page), and an operator's pause
/// through the API reaches the store (with the browser's cookie, the CSRF token the pages give
/// and its own Origin; a planted cookie from another port, or another host name, is refused),
/// and it holds under slow clients.
#[cfg(feature = "dashboard")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_and_steers_the_running_scheduler() {
    let bin = example_binary();
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("dashboard.db").display().to_string();
    let repo = TempRepo::new();
    repo.write("a.rs", &lines("a", 3));
    repo.commit("a");
    add_repo(&bin, &url, &repo, "* * * * * *");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = tokio::process::Command::new(&bin)
        .args([
            "--database-url",
            &url,
            "run",
            "--run-for",
            "180s",
            "--poll-schedules-every",
            "1s",
            "--dashboard",
            &addr,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = reqwest::Client::new();
    // Wait (up to 90 s) until the API shows an executed run of the repository's job.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut jobs = serde_json::Value::Null;
    while std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if let Ok(resp) = client
            .get(format!("http://{addr}/api/v1/jobs"))
            .send()
            .await
        {
            jobs = resp.json().await.unwrap_or_default();
            let executed = jobs["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|j| j["name"] == "repo_sync_1" && j["last_run"]["outcome"] == "executed");
            if executed {
                break;
            }
        }
    }
    let job = jobs["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["name"] == "repo_sync_1"));
    let job = job.unwrap_or_else(|| panic!("repo_sync_1 in {jobs:#}"));
    assert_eq!(job["last_run"]["outcome"], "executed", "{jobs:#}");
    assert_eq!(job["kind"], "run-time");

    let page = client
        .get(format!("http://{addr}/jobs/repo_sync_1"))
        .send()
        .await
        .unwrap();
    // The browser's id cookie, and the CSRF token made from it (in a header for scripts).
    let cookie = page
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("shedlock_browser="))
        .and_then(|v| v.split(';').next())
        .expect("the browser's id cookie")
        .to_owned();
    let csrf = page
        .headers()
        .get("x-shedlock-csrf")
        .and_then(|v| v.to_str().ok())
        .expect("the CSRF token")
        .to_owned();
    let html = page.text().await.unwrap();
    assert!(
        html.contains("id=\"timeline\"") && html.contains("class=\"run outcome-executed"),
        "{html}"
    );

    let pause = |cookie: &str, csrf: &str, origin: &str, host: &str| {
        client
            .post(format!("http://{addr}/api/v1/jobs/repo_sync_1/pause"))
            .header("cookie", format!("shedlock_browser={cookie}"))
            .header("x-shedlock-csrf", csrf)
            .header("origin", origin)
            .header("host", host)
            .send()
    };
    let own = format!("http://{addr}");
    // The old attack: a cookie's value repeated, from a page on another port.
    let forged = pause("planted", "planted", "http://127.0.0.1:18090", &addr)
        .await
        .unwrap();
    assert_eq!(forged.status(), 403, "a planted cookie: refused");
    // A DNS name pointed at loopback (rebinding): not answered at all.
    let rebound = pause(
        &cookie,
        &csrf,
        &format!("http://attacker.example:{port}"),
        &format!("attacker.example:{port}"),
    )
    .await
    .unwrap();
    assert_eq!(rebound.status(), 421, "another host name: refused");
    let paused = pause(&cookie, &csrf, &own, &addr).await.unwrap();
    assert_eq!(paused.status(), 200, "{}", paused.text().await.unwrap());
    let provider = shedlock::SqliteLockProvider::connect(&url).await.unwrap();
    use shedlock::schedules::ScheduleStore;
    assert!(
        provider
            .schedule("repo_sync_1")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    // 100 connections with unfinished request heads (more than the 64 served at once): the
    // API still answers, and the header timeout closes them.
    let slow = shedlock_suite::slow_clients::open(&addr, 100, b"GET /api/v1/lo").await;
    let answered = tokio::time::timeout(
        Duration::from_secs(60),
        client.get(format!("http://{addr}/api/v1/locks")).send(),
    )
    .await
    .expect("answered within 60 s under 100 slow clients")
    .unwrap();
    assert_eq!(answered.status(), 200);
    let cut = shedlock_suite::slow_clients::count_closed(slow, Duration::from_secs(60)).await;
    assert_eq!(cut, 100, "slow clients closed by the header timeout");
    let _ = child.kill().await;
}
