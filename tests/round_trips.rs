//! Acquire, extend and unlock each cost one statement round trip, counted on the wire: the
//! provider talks to the database through a loopback proxy that counts how often the client
//! starts speaking after the server has answered.
//!
//! sqlx also pings every connection it takes back into the pool (a lone `Sync` on PostgreSQL,
//! `COM_PING` on MySQL), after the caller already has its answer. Those turns are counted
//! apart: they cost the server a round trip but not the caller's latency.
#![allow(missing_docs)]

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use shedlock::{LockAdmin, LockConfiguration, MySqlLockProvider, PostgresLockProvider};
use shedlock_suite::{MySql, Postgres, TestDb, skipped, unique_name};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Counts client turns: a burst of client bytes after server bytes (or at the start) is one
/// round trip, however the bytes are split into segments.
#[derive(Default)]
struct Turns {
    statements: AtomicUsize,
    pings: AtomicUsize,
    server_spoke_last: AtomicBool,
}

/// PostgreSQL's `Sync` alone, and MySQL's `COM_PING` packet.
const PINGS: [&[u8]; 2] = [b"S\0\0\0\x04", b"\x01\0\0\0\x0e"];

async fn proxy(upstream: String) -> (u16, Arc<Turns>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let turns = Arc::new(Turns {
        server_spoke_last: AtomicBool::new(true),
        ..Turns::default()
    });
    let counter = Arc::clone(&turns);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let server = TcpStream::connect(&upstream).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let up = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = cr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if up.server_spoke_last.swap(false, Ordering::SeqCst) {
                        let kind = if PINGS.contains(&&buf[..n]) {
                            &up.pings
                        } else {
                            &up.statements
                        };
                        kind.fetch_add(1, Ordering::SeqCst);
                    }
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
            let down = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = sr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    down.server_spoke_last.store(true, Ordering::SeqCst);
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, turns)
}

/// `(statement round trips, release pings)` of one operation.
async fn count<T>(turns: &Turns, op: impl Future<Output = T>) -> (T, (usize, usize)) {
    // Let earlier traffic (the previous release ping) finish first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = (
        turns.statements.load(Ordering::SeqCst),
        turns.pings.load(Ordering::SeqCst),
    );
    let out = op.await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = (
        turns.statements.load(Ordering::SeqCst),
        turns.pings.load(Ordering::SeqCst),
    );
    (out, (after.0 - before.0, after.1 - before.1))
}

/// Warms the prepared statements up, then counts each operation.
async fn assert_one_round_trip_each<P: LockAdmin>(provider: &P, turns: &Turns, max_pings: usize) {
    let cfg =
        LockConfiguration::new(unique_name("rt"), Duration::from_secs(60), Duration::ZERO).unwrap();
    provider.migrate().await.unwrap();
    let mut warm = provider.lock(&cfg).await.unwrap().unwrap();
    assert!(
        warm.extend(Duration::from_secs(60), Duration::ZERO)
            .await
            .unwrap()
    );
    assert!(provider.lock(&cfg).await.unwrap().is_none());
    warm.unlock().await.unwrap();

    let (guard, acquire) = count(turns, provider.lock(&cfg)).await;
    let mut guard = guard.unwrap().unwrap();
    let (held, refused) = count(turns, provider.lock(&cfg)).await;
    assert!(held.unwrap().is_none());
    let (extended, extend) =
        count(turns, guard.extend(Duration::from_secs(60), Duration::ZERO)).await;
    assert!(extended.unwrap());
    let (released, unlock) = count(turns, guard.unlock()).await;
    assert!(released.unwrap());
    let statements = (acquire.0, refused.0, extend.0, unlock.0);
    let pings = (acquire.1, refused.1, extend.1, unlock.1);
    eprintln!(
        "statement round trips {statements:?}, release pings {pings:?} for (acquire, acquire while held, extend, unlock)"
    );
    assert_eq!(
        statements,
        (1, 1, 1, 1),
        "statement round trips for (acquire, acquire while held, extend, unlock)"
    );
    assert!(
        [pings.0, pings.1, pings.2, pings.3]
            .iter()
            .all(|p| *p <= max_pings),
        "at most {max_pings} release ping(s) per operation: {pings:?}"
    );
}

#[tokio::test]
async fn postgres_one_round_trip_per_operation() {
    postgres_round_trips(0).await;
}

/// With held connections sqlx's release ping is gone too.
#[tokio::test]
async fn postgres_one_round_trip_and_no_ping_with_held_connections() {
    postgres_round_trips(1).await;
}

async fn postgres_round_trips(held: usize) {
    if skipped(Postgres::BACKEND) {
        return;
    }
    let options =
        sqlx::postgres::PgConnectOptions::from_str(&shedlock_suite::postgres_url()).unwrap();
    let (port, turns) = proxy(format!("{}:{}", options.get_host(), options.get_port())).await;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options.host("127.0.0.1").port(port))
        .await
        .unwrap();
    let table = unique_name("shedlock_rt");
    let provider = PostgresLockProvider::builder(pool.clone())
        .table_name(&table)
        .hold_connections(held)
        .build()
        .unwrap();
    assert_one_round_trip_each(&provider, &turns, hold_pings(held)).await;
    drop(provider); // gives its held connection back to the pool
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP TABLE {table}, {table}_runs, _{table}_migrations"
    )))
    .execute(&pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn mysql_one_round_trip_per_operation() {
    mysql_round_trips(0).await;
}

/// With held connections sqlx's release ping is gone too.
#[tokio::test]
async fn mysql_one_round_trip_and_no_ping_with_held_connections() {
    mysql_round_trips(1).await;
}

async fn mysql_round_trips(held: usize) {
    if skipped(MySql::BACKEND) {
        return;
    }
    let options = sqlx::mysql::MySqlConnectOptions::from_str(&shedlock_suite::mysql_url()).unwrap();
    let (port, turns) = proxy(format!("{}:{}", options.get_host(), options.get_port())).await;
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options.host("127.0.0.1").port(port))
        .await
        .unwrap();
    let table = unique_name("shedlock_rt");
    let provider = MySqlLockProvider::builder(pool.clone())
        .table_name(&table)
        .hold_connections(held)
        .build()
        .unwrap();
    assert_one_round_trip_each(&provider, &turns, hold_pings(held)).await;
    drop(provider); // gives its held connection back to the pool
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP TABLE {table}, {table}_runs, _{table}_migrations"
    )))
    .execute(&pool)
    .await
    .unwrap();
}

/// A provider made by `connect(url)`, as a user would (its own pool, sqlx's default size of 10),
/// on a database of its own reached through the counting proxy: one statement round trip per
/// operation and no ping at all, counted on the wire (the proxy sees PostgreSQL's lone `Sync`
/// and MySQL's `COM_PING`, which no server statistic counts as a statement:
/// `pg_stat_database.xact_commit` does not move for a `Sync`), and one statement per operation
/// by the provider's own count (`statements_sent`).
#[tokio::test]
async fn postgres_connect_url_one_round_trip_and_no_ping() {
    if skipped(Postgres::BACKEND) {
        return;
    }
    let (url, database) = shedlock_suite::postgres_database("shedlock_rt").await;
    let (port, turns) = proxy(shedlock_suite::host_port(&url, 5432)).await;
    let provider = PostgresLockProvider::connect(&via(&url, port))
        .await
        .unwrap();
    assert_one_round_trip_each(&provider, &turns, 0).await;
    assert_one_statement_each(&provider).await;
    provider.close().await;
    shedlock_suite::drop_postgres_database(&database).await;
}

/// [`postgres_connect_url_one_round_trip_and_no_ping`] on MariaDB / MySQL.
#[tokio::test]
async fn mysql_connect_url_one_round_trip_and_no_ping() {
    if skipped(MySql::BACKEND) {
        return;
    }
    let admin = sqlx::MySqlPool::connect(&shedlock_suite::mysql_url())
        .await
        .unwrap();
    let database = unique_name("shedlock_rt");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
        .execute(&admin)
        .await
        .unwrap();
    let base = shedlock_suite::mysql_url();
    let url = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
    let (port, turns) = proxy(shedlock_suite::host_port(&url, 3306)).await;
    let provider = MySqlLockProvider::connect(&via(&url, port)).await.unwrap();
    assert_one_round_trip_each(&provider, &turns, 0).await;
    assert_one_statement_each(&provider).await;
    provider.close().await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE {database}")))
        .execute(&admin)
        .await
        .unwrap();
}

/// `url` pointed at the proxy on `port`.
fn via(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"))
        .unwrap_or_default();
    format!("{scheme}://{user}127.0.0.1:{port}{path}")
}

/// 100 acquire + unlock cycles: 200 statements by the provider's own count.
async fn assert_one_statement_each<D: shedlock::dialect::Dialect>(
    provider: &shedlock::SqlLockProvider<D>,
) {
    let cfg =
        LockConfiguration::new(unique_name("st"), Duration::from_secs(60), Duration::ZERO).unwrap();
    let before = provider.statements_sent();
    for _ in 0..100 {
        let guard = provider.lock(&cfg).await.unwrap().unwrap();
        assert!(guard.unlock().await.unwrap());
    }
    assert_eq!(provider.statements_sent() - before, 200);
}

/// Pings allowed per operation: sqlx's release ping, unless connections are held.
fn hold_pings(held: usize) -> usize {
    if held > 0 { 0 } else { 1 }
}
