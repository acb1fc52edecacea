//! `shedlock_web::serve` under slow clients: more connections with unfinished request heads
//! than its cap, and a real request still gets its page; the slow ones are closed by the header
//! timeout; a graceful shutdown ends the server with the slow ones still open. (The `shedlock
//! serve` binary under the same load: `shedlock-cli/tests/cli/serve.rs`.)

use std::future::IntoFuture;
use std::time::Duration;

use shedlock_suite::TestDb;
use shedlock_suite::slow_clients::{closed, count_closed, open};
use shedlock_web::{Auth, Limits, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// More than the cap of 64.
const SLOW: usize = 100;
/// A generous deadline for what the timeouts bound to a few seconds.
const DEADLINE: Duration = Duration::from_secs(60);

/// A whole `GET` on a new connection: the answer's first line.
async fn get(address: &str, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(address).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    Ok(answer.lines().next().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_serve_holds_under_slow_clients_sqlite() {
    let db = shedlock_suite::Sqlite::setup().await.expect("SQLite");
    let router = axum::Router::new().nest(
        "/shedlock",
        shedlock_web::router(db.provider(), Options::new(Auth::None)),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let limits = Limits::default().header_timeout(Duration::from_secs(2));
    let server = tokio::spawn(
        shedlock_web::serve(listener, router)
            .limits(limits)
            .with_graceful_shutdown(async {
                let _ = stopped.await;
            })
            .into_future(),
    );
    let slow = open(&address, SLOW, b"GET /shedlock HT").await;
    let started = std::time::Instant::now();
    let page = tokio::time::timeout(DEADLINE, get(&address, "/shedlock"))
        .await
        .expect("the page within the deadline")
        .unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    eprintln!(
        "the page answered {:.1} s after {SLOW} slow connections",
        started.elapsed().as_secs_f64()
    );
    let cut = count_closed(slow, DEADLINE).await;
    assert_eq!(cut, SLOW, "slow connections closed by the header timeout");

    // A graceful shutdown with slow connections open: the server ends (they are closed).
    let lingering = open(&address, 10, b"GET /shedlock HT").await;
    let _ = stop.send(());
    tokio::time::timeout(DEADLINE, server)
        .await
        .expect("the server ends within the deadline")
        .unwrap()
        .unwrap();
    for stream in lingering {
        assert!(closed(stream, DEADLINE).await, "closed at shutdown");
    }
    db.teardown().await;
}
