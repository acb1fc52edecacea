//! No secret of a URL reaches a message: each form of URL a user may write, with the secret in
//! its password (a `/` in it too, which stopped the old masking), in a query parameter, or in a
//! URL whose `//` is missing, given to every backend's `connect` and to the `shedlock` tool. The
//! error (`Display` and `Debug`), the tool's stdout and stderr never hold the secret; where a
//! URL is refused, the message names what is wrong.
#![allow(missing_docs)]

use shedlock::{MySqlLockProvider, PostgresLockProvider, SqliteLockProvider};

const SECRET: &str = "topsecret";

/// URLs that cannot connect (a closed port, a URL that does not parse, a typo), each holding
/// [`SECRET`] somewhere.
fn urls() -> Vec<String> {
    let mut urls = Vec::new();
    for (scheme, port) in [
        ("postgres", 5432),
        ("postgresql", 5432),
        ("mysql", 3306),
        ("mariadb", 3306),
        ("redis", 6379),
        ("rediss", 6379),
    ] {
        urls.extend([
            format!("{scheme}://app:{SECRET}@127.0.0.1:1/test"),
            format!("{scheme}://app:top/{SECRET}@127.0.0.1:{port}/test"),
            format!("{scheme}://app:{SECRET}/x@127.0.0.1:{port}/test"),
            format!("{scheme}://app@127.0.0.1:1/test?password={SECRET}"),
            format!("{scheme}://app@127.0.0.1:1/test?sslmode=disable&auth_token={SECRET}"),
            format!("{scheme}:app:{SECRET}@127.0.0.1"),
            format!("{scheme}://app:{SECRET}@127.0.0.1:notaport/test"),
        ]);
    }
    urls.push(format!("ftp://u:{SECRET}@h/x"));
    urls
}

fn assert_clean(what: &str, url: &str, text: &str) {
    assert!(
        !text.contains(SECRET),
        "{what} of {url} holds the secret: {text}"
    );
}

#[tokio::test]
async fn connect_errors_never_hold_the_secret() {
    for url in urls() {
        let errors = [
            PostgresLockProvider::connect(&url).await.err(),
            MySqlLockProvider::connect(&url).await.err(),
            SqliteLockProvider::connect(&url).await.err(),
            shedlock_redis::RedisLockProvider::connect(&url).await.err(),
        ];
        for (backend, error) in ["PostgreSQL", "MySQL", "SQLite", "Redis"]
            .iter()
            .zip(errors)
        {
            let error = error.unwrap_or_else(|| panic!("{backend} refuses {url}"));
            assert_clean(&format!("{backend}'s error"), &url, &error.to_string());
            assert_clean(
                &format!("{backend}'s error (Debug)"),
                &url,
                &format!("{error:?}"),
            );
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                assert_clean(
                    &format!("{backend}'s error source"),
                    &url,
                    &cause.to_string(),
                );
                source = cause.source();
            }
        }
    }
}

/// A URL of another backend, and a scheme without its `//`, is named for what it is (before,
/// `mysql://` given to PostgreSQL failed with `unexpected message: CopyData`, and a typo became
/// an SQLite file).
#[tokio::test]
async fn a_url_of_another_backend_is_named() {
    let error = PostgresLockProvider::connect("mysql://root@127.0.0.1:3306/test")
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("mysql: URL, for MySQL/MariaDB"), "{error}");
    let typo = format!("postgres:postgres:{SECRET}@127.0.0.1");
    let outcome = SqliteLockProvider::connect(&typo).await;
    let created = std::path::Path::new(&typo).exists();
    if created {
        let _ = std::fs::remove_file(&typo);
    }
    let error = outcome.unwrap_err().to_string();
    assert!(!created, "{typo} became an SQLite file");
    assert!(error.contains("postgres: URL, for PostgreSQL"), "{error}");
    assert_clean("SQLite's error", &typo, &error);
}

#[tokio::test]
async fn the_tool_never_prints_the_secret() {
    let binary = shedlock_suite::shedlock_binary();
    let dir = tempfile::tempdir().unwrap();
    for url in urls() {
        for command in [&["list"][..], &["migrate"], &["unlock", "x", "--yes"]] {
            let out = tokio::process::Command::new(&binary)
                .arg("--database-url")
                .arg(&url)
                .args(command)
                .current_dir(dir.path())
                .env_remove("DATABASE_URL")
                .output()
                .await
                .unwrap();
            assert_ne!(out.status.code(), Some(0), "{url} {command:?}");
            assert_ne!(out.status.code(), Some(101), "no panic: {url} {command:?}");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_clean("the tool's stdout", &url, &stdout);
            assert_clean("the tool's stderr", &url, &stderr);
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no URL became an SQLite file"
    );
}
