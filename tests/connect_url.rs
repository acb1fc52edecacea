//! A provider with a pool of its own and settings of the application's, from a URL alone
//! (`SqlLockProvider::url(url).table_name(..).build()`): no pool to build, no `sqlx` in the
//! application's `Cargo.toml`. The settings apply, a bad one is refused before connecting, and
//! the builder's `Debug` masks the URL's password.
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::{
    Backend, Error, LockAdmin, LockConfiguration, MySqlLockProvider, PostgresLockProvider,
    SqliteLockProvider,
};
use shedlock_suite::{mysql_url, postgres_url, skipped, unique_name};

async fn settings_apply<P: LockAdmin>(provider: P, table: &str) {
    assert_eq!(provider.table_name(), table);
    assert_eq!(provider.locked_by(), "url-built");
    provider.migrate().await.unwrap();
    let cfg = LockConfiguration::new("url_job", Duration::from_secs(60), Duration::ZERO).unwrap();
    let guard = provider.lock(&cfg).await.unwrap().unwrap();
    assert_eq!(provider.locks().await.unwrap()[0].locked_by, "url-built");
    assert!(guard.unlock().await.unwrap());
}

#[tokio::test]
async fn a_provider_from_a_url_takes_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("url.db").display().to_string();
    let table = unique_name("url_built");
    let sqlite = SqliteLockProvider::url(&file)
        .table_name(&table)
        .locked_by("url-built")
        .build()
        .await
        .unwrap();
    settings_apply(sqlite, &table).await;
    if !skipped(shedlock::Backend::Postgres) {
        let table = unique_name("url_built");
        let pg = PostgresLockProvider::url(&postgres_url())
            .table_name(&table)
            .locked_by("url-built")
            .build()
            .await
            .unwrap();
        settings_apply(pg.clone(), &table).await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP TABLE {table}, {table}_runs, _{table}_migrations; DROP SEQUENCE {table}_tokens"
        )))
        .execute(pg.pool())
        .await
        .ok();
    }
    if !skipped(shedlock::Backend::MySql) {
        let table = unique_name("url_built");
        let my = MySqlLockProvider::url(&mysql_url())
            .table_name(&table)
            .locked_by("url-built")
            .build()
            .await
            .unwrap();
        settings_apply(my.clone(), &table).await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP TABLE {table}, {table}_runs, _{table}_migrations"
        )))
        .execute(my.pool())
        .await
        .ok();
    }
}

#[tokio::test]
async fn a_bad_setting_is_refused_before_connecting_and_the_password_is_masked() {
    // Nothing listens on port 1: a refusal that names the table name was made before trying.
    let builder = PostgresLockProvider::url("postgres://app:topsecret@127.0.0.1:1/db");
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains("topsecret") && shown.contains("app:***@"),
        "{shown}"
    );
    let error = builder.table_name("bad name").build().await.unwrap_err();
    assert!(matches!(error, Error::InvalidTableName { .. }), "{error:?}");
    let error = PostgresLockProvider::url("postgres://app:topsecret@127.0.0.1:1/db")
        .build()
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Unreachable { .. }), "{error:?}");
    assert!(!error.to_string().contains("topsecret"));
}

/// A URL naming a database the server does not have: the error names the database and how to
/// create it, gives the server's address once, and carries no line of the server's source
/// (before: `PostgreSQL error while trying to connect to 127.0.0.1:5432 (127.0.0.1:5432): …
/// database "x" does not exist at line 948`).
#[tokio::test]
async fn an_unknown_database_is_named_with_how_to_create_it() {
    let name = unique_name("no_such_db");
    for (backend, base) in [
        (Backend::Postgres, postgres_url()),
        (Backend::MySql, mysql_url()),
    ] {
        if skipped(backend) {
            continue;
        }
        let (server, _) = base.rsplit_once('/').expect("a URL with a database");
        let url = format!("{server}/{name}");
        let error = match backend {
            Backend::Postgres => PostgresLockProvider::connect(&url).await.err(),
            _ => MySqlLockProvider::connect(&url).await.err(),
        }
        .expect("no such database");
        assert!(
            matches!(&error, Error::UnknownDatabase { database, .. } if *database == name),
            "{backend}: {error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!("has no database `{name}`"))
                && text.contains(&format!("CREATE DATABASE {name}")),
            "{text}"
        );
        let address = server.rsplit_once('@').map_or(server, |(_, host)| host);
        assert_eq!(text.matches(address).count(), 1, "the address once: {text}");
        assert!(!text.contains(" at line "), "{text}");
    }
}

/// A password the server refuses is `Auth`, naming the server, not a generic database error
/// (MariaDB here; this machine's PostgreSQL trusts every local user, so no password is wrong).
#[tokio::test]
async fn a_refused_password_is_an_auth_error() {
    if skipped(Backend::MySql) {
        return;
    }
    let base = mysql_url();
    let (scheme, rest) = base.split_once("://").expect("a URL");
    let (user, host) = rest.split_once('@').expect("a URL with a user");
    let user = user.split(':').next().unwrap_or(user);
    let url = format!("{scheme}://{user}:not-the-password@{host}");
    let error = MySqlLockProvider::connect(&url)
        .await
        .expect_err("a wrong password is refused");
    assert!(
        matches!(
            &error,
            Error::Auth {
                backend: Backend::MySql,
                ..
            }
        ),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(
        !text.contains("not-the-password"),
        "the password is never shown: {text}"
    );
}
