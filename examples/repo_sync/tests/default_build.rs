//! The default build of repo_sync (`cargo run -p repo_sync`: SQLite, the lexical embedder, local
//! git): how many packages it compiles, and how it refuses what it leaves out.
//!
//! The package count is read from `cargo tree` in every build of these tests. The refusals are
//! tested in a build without the feature each needs: `scripts/test` runs this file once more
//! without features (`cargo test -p repo_sync --test default_build`), after the run with all of
//! them.
#![allow(missing_docs)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};

/// The most packages the default build may compile, repo_sync included (issue 35: at most 150;
/// 148 when this test was written).
const MAX_PACKAGES: usize = 150;

/// The packages `cargo run -p repo_sync` compiles: every `name version` in the graph of its
/// normal and build dependencies with its default features, for this machine's target, read
/// from `cargo tree` without the network (`--offline`: the registry cache has them).
fn default_build_packages() -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-p",
            "repo_sync",
            "-e",
            "normal,build",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some(format!("{} {}", words.next()?, words.next()?))
        })
        .collect()
}

#[test]
fn the_default_build_compiles_at_most_150_packages() {
    let packages = default_build_packages();
    println!(
        "cargo run -p repo_sync compiles {} packages",
        packages.len()
    );
    // The graph is read right: the package itself and what it is built on are in it, what
    // only a feature or the tests bring is not.
    for name in ["repo_sync ", "shedlock ", "sqlx-sqlite ", "clap "] {
        assert!(
            packages.iter().any(|p| p.starts_with(name)),
            "{name}missing from {packages:?}"
        );
    }
    for name in [
        "sqlx-postgres ",
        "apalis ",
        "reqwest ",
        "hyper ",
        "tempfile ",
        "shedlock-suite ",
    ] {
        assert!(
            !packages.iter().any(|p| p.starts_with(name)),
            "{name}is in the default build: {packages:?}"
        );
    }
    assert!(
        packages.len() <= MAX_PACKAGES,
        "the default build of repo_sync compiles {} packages, more than {MAX_PACKAGES}: \
         put what it added behind a feature (Cargo.toml), or lift the bound with a reason:\n{}",
        packages.len(),
        packages.iter().cloned().collect::<Vec<_>>().join("\n")
    );
}

/// `repo_sync ARGS` in `dir`, its database a file there unless `ARGS` name another.
#[allow(dead_code, reason = "used by the tests of a build without a feature")]
fn repo_sync(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_repo_sync"))
        .args(args)
        .current_dir(dir)
        .env("GIT_CEILING_DIRECTORIES", dir)
        .output()
        .expect("repo_sync runs")
}

/// What a refused command wrote, after checking it failed and wrote nothing to stdout.
#[allow(dead_code, reason = "used by the tests of a build without a feature")]
fn refused(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "not refused: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// The files in `dir`.
#[allow(dead_code, reason = "used by the tests of a build without a feature")]
fn files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_postgres_url_names_the_feature_and_the_command_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let out = repo_sync(
        dir.path(),
        &[
            "--database-url",
            "postgres://postgres:topsecret@127.0.0.1:5432/test",
            "status",
        ],
    );
    let stderr = refused(&out);
    assert!(
        stderr.contains("PostgreSQL (--database-url postgres://…) needs the `postgres` feature"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "cargo run -p repo_sync --features postgres -- --database-url 'postgres://postgres:***@127.0.0.1:5432/test' status"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("topsecret"), "{stderr}");
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}

#[cfg(not(feature = "workers"))]
#[test]
fn worker_mode_names_the_feature_before_anything_opens() {
    let dir = tempfile::tempdir().unwrap();
    for role in ["scheduler", "worker"] {
        let out = repo_sync(
            dir.path(),
            &["--database-url", "app.db", "run", "--role", role],
        );
        let stderr = refused(&out);
        assert!(
            stderr.contains(&format!(
                "worker mode (run --role {role}) needs the `workers` feature"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "cargo run -p repo_sync --features workers -- --database-url app.db run --role {role}"
            )),
            "{stderr}"
        );
    }
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}

#[cfg(not(any(feature = "workers", feature = "postgres")))]
#[test]
fn every_missing_feature_is_named_in_one_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = repo_sync(
        dir.path(),
        &[
            "run",
            "--role",
            "worker",
            "--database-url=postgres://u@h/db",
        ],
    );
    let stderr = refused(&out);
    assert!(stderr.contains("Build them in"), "{stderr}");
    assert!(
        stderr.contains(
            "cargo run -p repo_sync --features postgres,workers -- run --role worker --database-url=postgres://u@h/db"
        ),
        "{stderr}"
    );
}

#[cfg(not(feature = "metrics"))]
#[test]
fn the_metrics_endpoint_names_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let out = repo_sync(
        dir.path(),
        &[
            "--database-url",
            "app.db",
            "run",
            "--metrics-addr",
            "127.0.0.1:9464",
        ],
    );
    let stderr = refused(&out);
    assert!(
        stderr.contains("the Prometheus endpoint (run --metrics-addr) needs the `metrics` feature"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cargo run -p repo_sync --features metrics -- --database-url app.db run --metrics-addr 127.0.0.1:9464"),
        "{stderr}"
    );
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}

#[cfg(not(feature = "dashboard"))]
#[test]
fn the_dashboard_names_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let out = repo_sync(
        dir.path(),
        &[
            "--database-url",
            "app.db",
            "run",
            "--dashboard",
            "127.0.0.1:8081",
        ],
    );
    let stderr = refused(&out);
    assert!(
        stderr.contains("the dashboard (run --dashboard) needs the `dashboard` feature"),
        "{stderr}"
    );
    assert!(
        stderr.contains("cargo run -p repo_sync --features dashboard -- --database-url app.db run --dashboard 127.0.0.1:8081"),
        "{stderr}"
    );
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}

#[cfg(not(feature = "minilm"))]
#[test]
fn the_in_process_model_names_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let out = repo_sync(
        dir.path(),
        &["--database-url", "app.db", "--embedder", "minilm", "status"],
    );
    let stderr = refused(&out);
    assert!(
        stderr.contains(
            "all-MiniLM-L6-v2 in the process (--embedder minilm) needs the `minilm` feature"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("cargo run -p repo_sync --features minilm -- --database-url app.db --embedder minilm status"),
        "{stderr}"
    );
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}

#[cfg(not(feature = "http"))]
#[test]
fn the_http_clients_name_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    for (args, asked_by) in [
        (
            &["--embedder-url", "http://127.0.0.1:8089", "status"][..],
            "--embedder-url",
        ),
        (
            &["add", "https://gitlab.example.com/group/project"][..],
            "add of a GitLab project URL",
        ),
    ] {
        let all: Vec<&str> = ["--database-url", "app.db"]
            .into_iter()
            .chain(args.iter().copied())
            .collect();
        let stderr = refused(&repo_sync(dir.path(), &all));
        assert!(
            stderr.contains(&format!(
                "the HTTP clients (embeddings server, GitLab) ({asked_by}) needs the `http` feature"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "cargo run -p repo_sync --features http -- {}",
                all.join(" ")
            )),
            "{stderr}"
        );
    }
    assert!(files(dir.path()).is_empty(), "{:?}", files(dir.path()));
}

/// A GitLab project registered by a build with `http` and synced by one without: the sync fails
/// saying which feature it needs, and the history records it failed.
#[cfg(not(feature = "http"))]
#[tokio::test]
async fn a_stored_gitlab_registration_fails_its_sync_naming_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    let url = db.display().to_string();
    // A database an earlier version made, its schedule in `schedule_sessions`: the first
    // command moves it into the store.
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{url}?mode=rwc"))
        .await
        .unwrap();
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
        "INSERT INTO schedule_sessions (display_name, source, cron, time_zone, is_active, \
         collection, consecutive_failures, created_at) \
         VALUES ('project', 'https://gitlab.example.com/group/project', '0 0 * * * *', 'UTC', 1, \
         'code', 0, 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let out = repo_sync(dir.path(), &["--database-url", &url, "sync-now", "1"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(
            "the HTTP clients (embeddings server, GitLab) is not built into this repo_sync (the `http` feature): run it with `cargo run -p repo_sync --features http`"
        ),
        "{said}"
    );
    let out = repo_sync(dir.path(), &["--database-url", &url, "status"]);
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("failed"), "{status}");
}

/// A `--database-url` that does not say it is an SQLite file (issue 46): a libpq `key=value`
/// string, a URL whose `:` is missing, a bare word. Before, each became an SQLite file of that
/// name in the current folder, one per instance, and exactly-once was silently gone; now each
/// is refused naming the accepted forms, its password masked, and no file is made.
#[test]
fn a_database_url_that_is_no_url_is_refused_not_a_file() {
    let dir = tempfile::tempdir().unwrap();
    for url in [
        "host=127.0.0.1 user=app password=topsecret dbname=db",
        "postgresql//app:topsecret@db/app",
        "locks",
    ] {
        let out = repo_sync(dir.path(), &["--database-url", url, "status"]);
        let stderr = refused(&out);
        assert!(
            stderr.contains("postgres:// or postgresql://") && stderr.contains("sqlite:"),
            "{url}: {stderr}"
        );
        assert!(!stderr.contains("topsecret"), "{url}: {stderr}");
    }
    let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(made.is_empty(), "files made: {made:?}");
}
