//! A database that cannot be used: unreachable servers, missing tables, a missing SQLite file.

use shedlock_suite::{SqlTestDb, Sqlite, TestDb, unique_name};

use crate::common::{CliDb, cli, run};

#[tokio::test]
async fn an_unreachable_server_is_one_line_naming_its_address() {
    for (url, address) in [
        ("postgres://postgres@127.0.0.1:1/test", "127.0.0.1:1"),
        ("mysql://root@127.0.0.1:1/test", "127.0.0.1:1"),
    ] {
        for command in ["list", "history", "migrate"] {
            let out = run(&["--database-url", url, command], &[], "").await;
            assert_eq!(out.code, 1, "{out:#?}");
            assert_eq!(out.stdout, "");
            let line = out.error_line();
            assert!(
                line.starts_with("shedlock: error: cannot reach the ") && line.contains(address),
                "{line}"
            );
        }
    }
}

#[tokio::test]
async fn missing_tables_say_run_shedlock_migrate() {
    let db = Sqlite::setup().await.unwrap();
    let url = db.url();
    let other = unique_name("cli_none");
    for (command, missing) in [
        ("list", format!("the lock table `{other}`")),
        ("history", format!("the run history table `{other}_runs`")),
    ] {
        let out = run(
            &["--database-url", &url, "--table", &other, command],
            &[],
            "",
        )
        .await;
        assert_eq!(out.code, 1, "{out:#?}");
        let line = out.error_line();
        assert!(
            line.starts_with(&format!(
                "shedlock: error: {missing} does not exist in the SQLite database"
            )),
            "{line}"
        );
        assert!(line.contains("run `shedlock migrate`"), "{line}");
        // A table of another name is the likelier cause: the way to name it comes first.
        assert!(line.contains("give it with --table"), "{line}");
    }
    let out = run(
        &[
            "--database-url",
            &url,
            "--table",
            &other,
            "unlock",
            "x",
            "--yes",
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(out.error_line().contains("shedlock migrate"), "{out:#?}");
    // The lock table is there, its history table is not.
    db.exec(&format!("DROP TABLE {}_runs", db.table())).await;
    let out = cli(&db, &["history"], "").await;
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(
        out.error_line().starts_with(&format!(
            "shedlock: error: the run history table `{}_runs` does not exist",
            db.table()
        )),
        "{out:#?}"
    );
    assert_eq!(cli(&db, &["list"], "").await.code, 0);
    db.teardown().await;
}

#[tokio::test]
async fn a_missing_sqlite_file_is_reported_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let shown = path.display().to_string();
    for url in [
        shown.clone(),
        format!("sqlite://{shown}"),
        format!("sqlite://{shown}?mode=rwc"),
    ] {
        for args in [&["list"][..], &["history"], &["unlock", "job", "--yes"]] {
            let out = run(
                &[&["--database-url", url.as_str()][..], args].concat(),
                &[],
                "",
            )
            .await;
            assert_eq!(out.code, 1, "{url} {args:?}: {out:#?}");
            assert_eq!(
                out.error_line(),
                format!(
                    "shedlock: error: the SQLite database file {shown} does not exist (check the path; `shedlock migrate` creates it)"
                )
            );
            assert!(!path.exists(), "{url} {args:?} created {shown}");
        }
    }
    let url = format!("sqlite://{shown}");
    let out = run(&["--database-url", &url, "migrate"], &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stdout,
        "tables shedlock and shedlock_runs are up to date (SQLite)\n"
    );
    assert!(path.exists());
    let out = run(&["--database-url", &shown, "list"], &[], "").await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "no locks in table shedlock (SQLite)\n")
    );
}
