//! Errors a user meets before anything works: each names the backend and what to do. None of
//! these needs a running server.
#![allow(missing_docs)]

use std::time::Duration;

use shedlock::{
    Error, LockConfiguration, MySqlLockProvider, PostgresLockProvider, SqliteLockProvider,
};

fn cfg() -> LockConfiguration {
    LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap()
}

/// A loopback port nothing listens on: bound, then released.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn unreachable_postgres_names_backend_and_address() {
    let port = closed_port();
    let err = PostgresLockProvider::connect(&format!("postgres://postgres@127.0.0.1:{port}/test"))
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("PostgreSQL") && text.contains(&format!("127.0.0.1:{port}")),
        "{text}"
    );
}

#[tokio::test]
async fn unreachable_mysql_names_backend_and_address() {
    let port = closed_port();
    let err = MySqlLockProvider::connect(&format!("mysql://root@127.0.0.1:{port}/test"))
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("MySQL/MariaDB") && text.contains(&format!("127.0.0.1:{port}")),
        "{text}"
    );
}

#[tokio::test]
async fn unopenable_sqlite_file_names_backend_and_path() {
    let err = SqliteLockProvider::connect("/nonexistent-shedlock-dir/deeper/locks.db")
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("SQLite") && text.contains("/nonexistent-shedlock-dir/deeper/locks.db"),
        "{text}"
    );
}

#[tokio::test]
async fn a_lazy_pool_to_a_closed_port_fails_the_lock_call_with_the_address() {
    let port = closed_port();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&format!("postgres://postgres@127.0.0.1:{port}/test"))
        .unwrap();
    let err = PostgresLockProvider::new(pool)
        .lock(&cfg())
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Unreachable { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}")),
        "{err}"
    );

    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy(&format!("mysql://root@127.0.0.1:{port}/test"))
        .unwrap();
    let err = MySqlLockProvider::new(pool).migrate().await.unwrap_err();
    assert!(matches!(&err, Error::Unreachable { .. }), "{err:?}");
}

#[tokio::test]
async fn malformed_urls_are_refused_as_urls() {
    let err = PostgresLockProvider::connect("postgres://user@host:notaport/db")
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::InvalidUrl { .. }), "{err:?}");
    assert!(
        err.to_string()
            .starts_with("invalid PostgreSQL URL \"postgres://***@host:notaport/db\""),
        "{err}"
    );
    let err = MySqlLockProvider::connect("mysql://root@127.0.0.1:99999/test")
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::InvalidUrl { .. }), "{err:?}");
    let err = SqliteLockProvider::connect("sqlite://locks.db?mode=sideways")
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::InvalidUrl { .. }), "{err:?}");
}
