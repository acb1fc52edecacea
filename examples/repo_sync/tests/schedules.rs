//! The repositories' schedules are the library's, kept in the store (the control plane), driven
//! through the `repo_sync` binary: `add` creates the run-time schedule `repo_sync_<id>` of the
//! handler `repo_sync` (payload `{"repository_id": N}`) and a running `run` picks it up without
//! a restart; `status` shows it; `pause` stops its runs on every instance and `resume` restarts
//! them; `sync-now` is a "run now" request, run once (recorded with who asked), and says who
//! holds the lock when it is held, leaving the request pending. On SQLite, and on PostgreSQL
//! with the `postgres` feature.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use shedlock::history::{RunOutcome, RunQuery, RunRecord};
use shedlock::schedules::ScheduleStore;
use shedlock::{LockConfiguration, LockProvider, RunStore};

/// What the test reads the store with.
trait Store: RunStore + ScheduleStore {}
impl<P: RunStore + ScheduleStore> Store for P {}

const DEADLINE: Duration = Duration::from_secs(60);

fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_repo_sync"))
}

/// A git repository with one commit, in a temporary directory.
fn repository() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
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
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q"]);
    std::fs::write(dir.path().join("a.rs"), "fn a() { lock() }\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "a"]);
    dir
}

/// `repo_sync --database-url URL ARGS`, which must succeed; its stdout.
fn cli(url: &str, args: &[&str]) -> String {
    let out = Command::new(binary())
        .arg("--database-url")
        .arg(url)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The history rows of repository 1's job, newest first.
async fn runs(store: &dyn Store) -> Vec<RunRecord> {
    store
        .runs(&RunQuery::latest(10_000).name("repo_sync_1"))
        .await
        .unwrap()
}

/// Waits until `check` holds of the history, or fails after [`DEADLINE`] saying `what`.
async fn until(store: &dyn Store, what: &str, check: impl Fn(&[RunRecord]) -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let rows = runs(store).await;
        if check(&rows) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {rows:#?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn executed_ticks_after(rows: &[RunRecord], after: chrono::DateTime<chrono::Utc>) -> usize {
    rows.iter()
        .filter(|r| r.outcome == RunOutcome::Executed && r.tick.is_some() && r.started_at > after)
        .count()
}

async fn scenario(url: &str, store: Arc<dyn Store>, holder: Arc<dyn LockProvider>, repo: &Path) {
    cli(url, &["status"]); // the tables, nothing registered
    let runner = tokio::process::Command::new(binary())
        .args(["--database-url", url, "run"])
        .args(["--poll-schedules-every", "200ms"])
        .env("SHEDLOCK_LOCKED_BY", "runner")
        .process_group(0) // as a shell runs a foreground job
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();

    // add: a schedule in the store, with the repository as payload; run picks it up.
    let repo_path = repo.display().to_string();
    let said = cli(
        url,
        &["add", &repo_path, "--cron", "* * * * * *", "--name", "live"],
    );
    assert!(said.contains("registered #1 live"), "{said}");
    let row = store
        .schedule("repo_sync_1")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(row.handler.as_deref(), Some("repo_sync"));
    assert_eq!(row.payload.as_deref(), Some(r#"{"repository_id":1}"#));
    assert_eq!(row.cron.as_deref(), Some("* * * * * *"));
    assert!(!row.paused);
    let status = cli(url, &["status"]);
    assert!(
        status.contains("#1 live  active  \"* * * * * *\" UTC") && status.contains("next tick 20"),
        "{status}"
    );
    until(
        store.as_ref(),
        "a tick synced by the running scheduler",
        |rows| executed_ticks_after(rows, chrono::DateTime::UNIX_EPOCH) >= 1,
    )
    .await;

    // pause: no run after the pause is applied; the ticks are recorded skipped-paused.
    cli(url, &["pause", "live"]);
    assert!(store.schedule("repo_sync_1").await.unwrap().unwrap().paused);
    let status = cli(url, &["status"]);
    assert!(
        status.contains("#1 live  paused") && status.contains("resume 1"),
        "{status}"
    );
    until(store.as_ref(), "paused ticks recorded", |rows| {
        rows.iter()
            .filter(|r| r.outcome == RunOutcome::SkippedPaused)
            .count()
            >= 2
    })
    .await;
    let first_paused = runs(store.as_ref())
        .await
        .into_iter()
        .filter(|r| r.outcome == RunOutcome::SkippedPaused)
        .map(|r| r.started_at)
        .min()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rows = runs(store.as_ref()).await;
    assert_eq!(
        executed_ticks_after(&rows, first_paused),
        0,
        "no sync once the pause applied: {rows:#?}"
    );

    // resume: runs again.
    cli(url, &["resume", "live"]);
    let resumed = chrono::Utc::now();
    until(store.as_ref(), "a tick synced after resume", |rows| {
        executed_ticks_after(rows, resumed) >= 1
    })
    .await;
    cli(url, &["pause", "live"]); // a run by hand runs a paused schedule too
    // Stopped with Ctrl-C (until then it runs): a sync going on finishes and releases the
    // lock.
    let pid = runner.id().unwrap().to_string();
    // Bash's own `kill` (procps-ng's misreads some pids).
    let kill = Command::new("bash")
        .args(["-c", &format!("kill -INT {pid}")])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = tokio::time::timeout(DEADLINE, runner.wait_with_output())
        .await
        .expect("run stops on Ctrl-C")
        .unwrap();
    assert!(
        out.status.success(),
        "{:?} {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // sync-now: one run, asked for by this command and run once.
    let before = runs(store.as_ref()).await.len();
    let said = cli(url, &["sync-now", "live"]);
    assert!(said.contains("sync at"), "{said}");
    let rows = runs(store.as_ref()).await;
    // The rows written since, without a tick's: the command's scheduler may also see a
    // scheduled tick go by while it runs (a row of its own, skipped as the run by hand holds
    // the lock), more often on a loaded machine.
    let manual: Vec<_> = rows[..rows.len() - before]
        .iter()
        .filter(|r| r.tick.is_none())
        .collect();
    assert_eq!(manual.len(), 1, "one run, by hand: {rows:#?}");
    assert_eq!(manual[0].outcome, RunOutcome::Executed);
    assert_ne!(manual[0].locked_by, "runner");
    assert!(
        store
            .schedule("repo_sync_1")
            .await
            .unwrap()
            .unwrap()
            .trigger
            .is_none()
    );

    // Held elsewhere: sync-now says by whom; the request stays pending, shown by status, and
    // the next sync-now waits for it and runs it once the lock is free.
    let cfg =
        LockConfiguration::new("repo_sync_1", Duration::from_secs(60), Duration::ZERO).unwrap();
    let guard = holder.lock(&cfg).await.unwrap().expect("free");
    let said = cli(url, &["sync-now", "live"]);
    assert!(
        said.contains("held by nightly-pod-7") && said.contains("until"),
        "{said}"
    );
    let status = cli(url, &["status"]);
    assert!(status.contains("run now asked by"), "{status}");
    guard.unlock().await.unwrap();
    let said = cli(url, &["sync-now", "live"]);
    assert!(
        said.contains("already asked for") && said.contains("sync at"),
        "{said}"
    );
    assert!(
        store
            .schedule("repo_sync_1")
            .await
            .unwrap()
            .unwrap()
            .trigger
            .is_none()
    );

    // remove: the schedule goes too.
    cli(url, &["remove", "live"]);
    let row = store.schedule("repo_sync_1").await.unwrap();
    assert!(row.as_ref().is_none_or(|r| r.deleted), "{row:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_status_pause_resume_and_sync_now_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
    let repo = repository();
    cli(&url, &["status"]);
    let store = shedlock::SqliteLockProvider::connect(&url).await.unwrap();
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let holder = shedlock::SqliteLockProvider::builder(pool)
        .locked_by("nightly-pod-7")
        .build()
        .unwrap();
    scenario(&url, Arc::new(store), Arc::new(holder), repo.path()).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_status_pause_resume_and_sync_now_on_postgres() {
    if shedlock_suite::skipped(shedlock::Backend::Postgres) {
        return;
    }
    let (url, database) = shedlock_suite::postgres_database("repo_sync_sched").await;
    let repo = repository();
    cli(&url, &["status"]);
    let store = shedlock::PostgresLockProvider::connect(&url).await.unwrap();
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let holder = shedlock::PostgresLockProvider::builder(pool)
        .locked_by("nightly-pod-7")
        .build()
        .unwrap();
    scenario(&url, Arc::new(store), Arc::new(holder), repo.path()).await;
    shedlock_suite::drop_postgres_database(&database).await;
}

/// A database an earlier version made (schedules in `schedule_sessions`): the first command
/// moves each schedule into the store, once, paused where it was; one the store refuses is
/// named and kept until `add` gives the repository a schedule.
#[tokio::test]
async fn schedules_of_an_earlier_version_are_moved_into_the_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let repo = repository();
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query(
        "CREATE TABLE schedule_sessions (id INTEGER PRIMARY KEY, display_name TEXT NOT NULL,
            source TEXT NOT NULL UNIQUE, cron TEXT NOT NULL, time_zone TEXT NOT NULL,
            is_active INTEGER NOT NULL DEFAULT 1, collection TEXT NOT NULL, last_sync_at BIGINT NULL,
            last_synced_commit TEXT NULL, consecutive_failures INTEGER NOT NULL DEFAULT 0,
            last_viewed_at BIGINT NULL, created_at BIGINT NOT NULL, last_failure_at BIGINT NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO schedule_sessions (display_name, source, cron, time_zone, is_active, collection, created_at)
         VALUES ('old', ?1, '0 0 * * * *', 'Asia/Seoul', 0, 'code', 0),
                ('bad', '/nowhere', '0 0 0 31 2 *', 'UTC', 1, 'code', 0)",
    )
    .bind(repo.path().display().to_string())
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let out = Command::new(binary())
        .args(["--database-url", &url, "status"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "moved the schedule of #1 old into the store: \"0 0 * * * *\" in Asia/Seoul, paused"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("#1 old  paused  \"0 0 * * * *\" Asia/Seoul"),
        "{stdout}"
    );
    assert!(
        stderr.contains("#2 bad: its schedule \"0 0 0 31 2 *\" in UTC")
            && stderr.contains("add /nowhere --cron"),
        "{stderr}"
    );
    // Once: the next command moves nothing again.
    let stdout = cli(&url, &["status"]);
    assert!(!stdout.contains("moved the schedule"), "{stdout}");
    let store = shedlock::SqliteLockProvider::connect(&url).await.unwrap();
    let row = store.schedule("repo_sync_1").await.unwrap().unwrap();
    assert_eq!(row.payload.as_deref(), Some(r#"{"repository_id":1}"#));
    assert!(row.paused);
    assert!(store.schedule("repo_sync_2").await.unwrap().is_none());
}

/// Worker mode: a `run --role scheduler` process's handler hands each tick of the schedule to
/// the queue, a `run --role worker` process syncs it; a run now that the scheduler process
/// claims is handed off too, and the worker syncs it as a run by hand.
#[cfg(feature = "workers")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_mode_syncs_the_ticks_the_handler_hands_off() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display());
    let repo = repository();
    cli(
        &url,
        &[
            "add",
            &repo.path().display().to_string(),
            "--cron",
            "* * * * * *",
        ],
    );
    let start = |role: &str, extra: &[&str]| {
        tokio::process::Command::new(binary())
            .args(["--database-url", &url, "run", "--role", role])
            .args(extra)
            .env("SHEDLOCK_LOCKED_BY", role)
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap()
    };
    let scheduler = start("scheduler", &["--poll-schedules-every", "200ms"]);
    let worker = start("worker", &["--poll-interval", "100ms"]);
    let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
    let synced = |manual: bool| {
        let pool = pool.clone();
        async move {
            let sql = if manual {
                "SELECT COUNT(*) FROM schedule_execution_logs WHERE tick IS NULL AND status = 'completed' AND locked_by = 'worker'"
            } else {
                "SELECT COUNT(*) FROM schedule_execution_logs WHERE tick IS NOT NULL AND status = 'completed' AND locked_by = 'worker'"
            };
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while synced(false).await < 2 {
        if tokio::time::Instant::now() > deadline {
            // What the two processes said, for the failure's cause.
            let mut said = String::new();
            for child in [scheduler, worker] {
                let _ = Command::new("kill")
                    .arg(child.id().unwrap().to_string())
                    .status();
                let out = child.wait_with_output().await.unwrap();
                said.push_str(&String::from_utf8_lossy(&out.stdout));
                said.push_str(&String::from_utf8_lossy(&out.stderr));
            }
            panic!("the worker syncs the handed-off ticks; the processes said:\n{said}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cli(&url, &["pause", "1"]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let said = cli(&url, &["sync-now", "1"]);
    if said.contains("handed to the workers by scheduler") || said.contains("run by worker") {
        while synced(true).await < 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the worker syncs the run by hand"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    } else {
        assert!(said.contains("sync at"), "run here or handed off: {said}");
        assert!(synced(true).await == 0, "{said}");
    }
    for child in [scheduler, worker] {
        let pid = child.id().unwrap();
        let kill = Command::new("bash")
            .args(["-c", &format!("kill -INT {pid}")])
            .status()
            .unwrap();
        assert!(kill.success());
        let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
