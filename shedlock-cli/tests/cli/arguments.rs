//! Arguments and the environment, answered the same by every backend: usage errors, help,
//! `DATABASE_URL` and `SHEDLOCK_TABLE`, `mariadb://` URLs.

use std::path::Path;

use shedlock::SqliteLockProvider;
use shedlock_suite::{MySql, Sqlite, TestDb};

use crate::common::{CliDb, HOLDER, TEN_MINUTES, cfg, provider, run};

#[tokio::test]
async fn bad_arguments_are_usage_errors_with_exit_2() {
    let cases: [(&[&str], &[&str]); 7] = [
        (
            &[
                "--database-url",
                "mongodb://admin:hunter2@cache:27017/0",
                "list",
            ],
            &[
                "unsupported database URL scheme \"mongodb\"",
                "postgres://",
                "mariadb://",
                "sqlite:",
                "redis:// or rediss://",
            ],
        ),
        (
            &["--database-url", "x.db", "history", "--outcome", "bogus"],
            &[
                "\"bogus\"",
                "skipped-held",
                "cancelled-lost-lock",
                "executed",
            ],
        ),
        (
            &[
                "--database-url",
                "x.db",
                "--table",
                "locks; drop table x",
                "list",
            ],
            &["invalid table name \"locks; drop table x\""],
        ),
        (&["list"], &["--database-url", "DATABASE_URL"]),
        (
            &["--database-url", "x.db", "history", "--limit", "0"],
            &["--limit"],
        ),
        (&["--database-url", "x.db", "lsit"], &["lsit"]),
        (&["--database-url", "x.db", "unlock"], &["<NAME>"]),
    ];
    for (args, expected) in cases {
        let out = run(args, &[], "").await;
        assert_eq!(out.code, 2, "{args:?}: {out:#?}");
        assert_eq!(out.stdout, "");
        let line = out.error_line();
        assert!(line.starts_with("shedlock: error: "), "{line}");
        for text in expected {
            assert!(line.contains(text), "{text:?} in {line}");
        }
        assert!(
            !line.contains("hunter2"),
            "the password is not echoed: {line}"
        );
    }
    assert!(!Path::new("x.db").exists(), "no file made by a usage error");
}

#[tokio::test]
async fn help_lists_the_exit_codes() {
    let out = run(
        &["--help"],
        &[("DATABASE_URL", "postgres://u:hunter2@h/db")],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    for line in [
        "Exit codes:",
        "  0  success",
        "  1  the database failed",
        "  2  usage error",
        "  3  unlock: no lock of that name",
        "  4  nothing done: unlock not released",
    ] {
        assert!(out.stdout.contains(line), "{line:?} in {}", out.stdout);
    }
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    let text = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    for redis in [
        "redis:// or rediss:// (Redis; rediss:// is TLS)",
        "[alias: --key-prefix]",
        "On Redis, the key prefix",
        "the run history {NAME}:run:<id>",
        "trigger already pending (a request of that job is pending or its run is going)",
        "pause, resume, trigger, reschedule, reset, delete: no schedule or lock of that name",
        "The schedule named shedlock.fleet pauses every job of the fleet",
    ] {
        assert!(text.contains(redis), "{redis:?} in {text}");
    }
    // Where an operator reads before deleting a row by hand.
    let out = run(&["unlock", "--help"], &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let text = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains("rather than deleting the row by hand")
            && text.contains("so that tick can run again"),
        "{text}"
    );
}

#[tokio::test]
async fn database_url_and_table_come_from_the_environment() {
    let db = Sqlite::setup().await.unwrap();
    let provider = SqliteLockProvider::builder(shedlock_suite::sqlite_pool(db.path(), 2).await)
        .table_name(db.table())
        .locked_by(HOLDER)
        .build()
        .unwrap();
    let guard = provider
        .lock(&cfg("env_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let url = format!("sqlite://{}", db.path().display());
    let out = run(
        &["list", "--json"],
        &[("DATABASE_URL", &url), ("SHEDLOCK_TABLE", &db.table())],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let locks = out.json();
    assert_eq!(locks.len(), 1, "{}", out.stdout);
    assert_eq!(locks[0]["name"], "env_job");
    assert_eq!(locks[0]["fencing_token"], guard.fencing_token());
    assert!(guard.unlock().await.unwrap());
    db.teardown().await;
}

#[tokio::test]
async fn a_mariadb_url_is_read_as_mysql() {
    let Some(db) = MySql::setup().await else {
        return;
    };
    let provider = provider(&db).await;
    let guard = provider
        .lock(&cfg("maria_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let url = db.url().replacen("mysql://", "mariadb://", 1);
    assert!(url.starts_with("mariadb://"), "{url}");
    let out = run(
        &[
            "--database-url",
            &url,
            "--table",
            &db.table(),
            "list",
            "--json",
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let locks = out.json();
    assert_eq!(locks.len(), 1, "{}", out.stdout);
    assert_eq!(locks[0]["locked_by"], HOLDER);
    assert_eq!(locks[0]["fencing_token"], guard.fencing_token());
    assert!(guard.unlock().await.unwrap());
    db.teardown().await;
}

/// What is no URL of a backend (issue 46): before, `migrate` of a libpq `key=value` string made
/// an SQLite file of that name in the current folder and said "(SQLite) up to date", a URL
/// whose `:` is missing printed its password, and a URL given without `--database-url` was
/// echoed whole by clap's usage error. Now each is a usage error (exit 2) naming the accepted
/// forms, its password masked, and no file is made.
#[tokio::test]
async fn what_is_no_database_url_is_refused_masked_and_makes_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (
            &[
                "migrate",
                "--database-url",
                "host=127.0.0.1 user=app password=hunter2 dbname=db",
            ],
            "password=***",
        ),
        (
            &[
                "list",
                "--database-url",
                "host=127.0.0.1 user=app password=hunter2 dbname=db",
            ],
            "key=value connection string",
        ),
        (
            &["list", "--database-url", "postgresql//app:hunter2@db/app"],
            "`postgresql` lacks the `:`",
        ),
        (
            &["migrate", "--database-url", "locks"],
            "neither a URL nor an SQLite file path",
        ),
        (
            &["list", "postgres://app:hunter2@db/app"],
            "unexpected argument 'postgres://app:***@db/app'",
        ),
    ];
    for (args, says) in cases {
        let out = crate::common::finish(
            crate::common::command(args)
                .current_dir(dir.path())
                .output()
                .await
                .unwrap(),
        );
        assert_eq!(out.code, 2, "{args:?}: {out:#?}");
        assert_eq!(out.stdout, "", "{args:?}");
        let line = out.error_line();
        assert!(line.contains(says), "{args:?}: {line}");
        assert!(!line.contains("hunter2"), "{args:?}: {line}");
        if !args.contains(&"postgres://app:hunter2@db/app") {
            assert!(
                line.contains("postgres:// or postgresql://") && line.contains("sqlite:"),
                "the accepted forms are named: {line}"
            );
        }
    }
    let made: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(made.is_empty(), "files made: {made:?}");
}
