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
    // No URL at all (issue 46): a libpq `key=value` string and a URL whose `:` is missing were
    // SQLite files in the current folder, and the second printed its password.
    urls.push(format!(
        "host=127.0.0.1 user=app password={SECRET} dbname=test"
    ));
    urls.push(format!("host=127.0.0.1 password='{SECRET} x'"));
    urls.push(format!("postgresql//app:{SECRET}@127.0.0.1/test"));
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

/// Every public type of the workspace that holds a secret (a URL's password, an etcd user's
/// password, the dashboard's token), printed with `{:?}` and with `{}` where it has `Display`,
/// shows none (issue 46: `EtcdTarget` and the etcd builder showed `http://app:urlsecret@…`
/// and `ConnectOptions { user: Some(("root", "optsecret")) }`). Nothing is connected: the
/// values are what a program holds before `build()`, or a provider over a pool not yet opened.
#[tokio::test]
async fn debug_and_display_of_every_type_that_holds_a_secret_show_none() {
    use shedlock::secret::SecretUrl;
    use shedlock_etcd::{EtcdLockProvider, EtcdTarget};
    use shedlock_redis::{RedisLockProvider, RedisTarget};

    let postgres = format!("postgres://app:{SECRET}@127.0.0.1:1/test?sslpassword={SECRET}");
    let mysql = format!("mysql://root:{SECRET}@127.0.0.1:1/test");
    let redis = format!("redis://app:{SECRET}@127.0.0.1:1/0");
    let etcd = format!("http://app:{SECRET}@127.0.0.1:1");
    let mut printed: Vec<(&str, String)> = Vec::new();
    let secret = SecretUrl::new(postgres.as_str());
    printed.push(("SecretUrl", format!("{secret:?} {secret}")));
    let builder = PostgresLockProvider::url(&postgres).table_name("t");
    printed.push(("ProviderBuilder<SqlUrl<Postgres>>", format!("{builder:?}")));
    let builder = MySqlLockProvider::url(&mysql);
    printed.push(("ProviderBuilder<SqlUrl<MySql>>", format!("{builder:?}")));
    let pool = sqlx::postgres::PgPoolOptions::new()
        .connect_lazy(&postgres)
        .unwrap();
    let builder = PostgresLockProvider::builder(pool.clone());
    printed.push(("ProviderBuilder<SqlPool<Postgres>>", format!("{builder:?}")));
    let provider = builder.build().unwrap();
    printed.push(("PostgresLockProvider", format!("{provider:?}")));
    let target = RedisTarget::new(redis.as_str());
    printed.push(("RedisTarget", format!("{target:?}")));
    let builder = RedisLockProvider::builder(redis.as_str());
    printed.push(("ProviderBuilder<RedisTarget>", format!("{builder:?}")));
    let mut target = EtcdTarget::new(&etcd);
    target.options(etcd_client::ConnectOptions::new().with_user("root", SECRET));
    printed.push(("EtcdTarget", format!("{target:?}")));
    let builder = EtcdLockProvider::builder(&etcd);
    printed.push(("ProviderBuilder<EtcdTarget>", format!("{builder:?}")));
    let auth = shedlock_web::Auth::bearer(format!("{SECRET}-{SECRET}"));
    printed.push(("shedlock_web::Auth", format!("{auth:?}")));
    let options = shedlock_web::Options::new(auth);
    printed.push(("shedlock_web::Options", format!("{options:?}")));
    for url in [
        postgres.clone(),
        format!("host=db user=app password={SECRET} dbname=test"),
        format!("postgresql//app:{SECRET}@db/test"),
    ] {
        let error = match shedlock::settings::backend_of_url(&url) {
            Err(error) => error,
            Ok(backend) => shedlock::Error::invalid_url(backend, &url, "refused by the test"),
        };
        printed.push(("Error", format!("{error:?} {error}")));
    }
    for (what, text) in &printed {
        assert_clean(what, "", text);
    }
    // Each still says where it points.
    let all: String = printed.iter().map(|(_, t)| t.as_str()).collect();
    assert!(all.contains("127.0.0.1"), "{all}");
    pool.close().await;
}
