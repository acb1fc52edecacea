//! Issue 50, point 3 through a `kill -9` of the sender, on every store (PostgreSQL, MariaDB,
//! SQLite, Redis, etcd), with processes written the README's way (`shedlock-beats
//! --failing`: a `#[scheduled(…, failures_in_a_row = 2)]` function whose every run fails, the
//! run history on with its ledger, alerts to a webhook).
//!
//! A receiver here checks every delivery's Standard Webhooks signature itself (HMAC-SHA256
//! over `<webhook-id>.<webhook-timestamp>.<body>`, base64) and holds the first delivery of each
//! alert without answering. Once it holds one, the sending process is killed with `-9`
//! mid-delivery, and another process starts. Then:
//!
//! - the held alert is delivered again by the new process, with the same `webhook-id`, and
//!   answered: each alert is delivered at least once;
//! - every delivery is signed right;
//! - the history records the alert raised once (the new process's sweeps read it open, and
//!   raise nothing twice), and delivered (`alert-sent`).
//!
//! On a failure the processes' logs are kept, and the failure says where.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use shedlock::Backend;
use shedlock::history::{RunOutcome, RunQuery};
use shedlock_suite::place::Place;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BEATS: &str = env!("CARGO_BIN_EXE_shedlock-beats");

/// The secret `shedlock-beats` signs with by default (`--webhook-secret`).
const SECRET: &str = "whsec_c2hlZGxvY2stdGVzdC1zZWNyZXQ=";

/// One request the receiver got.
#[derive(Debug, Clone)]
struct Delivery {
    id: String,
    signed_right: bool,
    answered: bool,
    body: String,
}

#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Delivery>>>);

impl Received {
    fn all(&self) -> Vec<Delivery> {
        self.0.lock().unwrap().clone()
    }
}

/// Whether `signature` (`v1,<base64>`, space-separated when several) signs `id.timestamp.body`.
fn signed_right(id: &str, timestamp: &str, body: &str, signature: &str) -> bool {
    let key = base64::engine::general_purpose::STANDARD
        .decode(SECRET.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    let expected = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    signature
        .split(' ')
        .any(|s| s.strip_prefix("v1,") == Some(expected.as_str()))
}

/// Serves `listener`: each request recorded, the first of each `webhook-id` held unanswered.
async fn receive(listener: tokio::net::TcpListener, received: Received) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let received = received.clone();
        tokio::spawn(async move {
            let mut data = Vec::new();
            let mut buf = [0u8; 4096];
            let (head, mut body) = loop {
                let Ok(n) = socket.read(&mut buf).await else {
                    return;
                };
                if n == 0 {
                    return;
                }
                data.extend_from_slice(&buf[..n]);
                if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&data[..end]).into_owned();
                    break (head, data[end + 4..].to_vec());
                }
            };
            let headers: BTreeMap<String, String> = head
                .lines()
                .skip(1)
                .filter_map(|line| line.split_once(':'))
                .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
                .collect();
            let length: usize = headers
                .get("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while body.len() < length {
                let Ok(n) = socket.read(&mut buf).await else {
                    return;
                };
                if n == 0 {
                    return;
                }
                body.extend_from_slice(&buf[..n]);
            }
            let body = String::from_utf8_lossy(&body).into_owned();
            let header = |name: &str| headers.get(name).cloned().unwrap_or_default();
            let id = header("webhook-id");
            let signed = signed_right(
                &id,
                &header("webhook-timestamp"),
                &body,
                &header("webhook-signature"),
            );
            let first = {
                let mut all = received.0.lock().unwrap();
                let first = !all.iter().any(|d| d.id == id);
                all.push(Delivery {
                    id: id.clone(),
                    signed_right: signed,
                    answered: !first,
                    body,
                });
                first
            };
            if first {
                // Held: the sender waits for an answer that does not come.
                tokio::time::sleep(Duration::from_secs(300)).await;
                return;
            }
            let _ = socket
                .write_all(
                    b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await;
        });
    }
}

async fn alert_through_a_kill(backend: Backend) {
    let Some(place) = Place::new(backend, "alertkill", BEATS) else {
        return;
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let received = Received::default();
    tokio::spawn(receive(listener, received.clone()));
    let logs = place.logs.path().display().to_string();
    let args = [
        "--runs-dir",
        logs.as_str(),
        "--jobs",
        "0",
        "--failing",
        "--ledger",
        "2s",
        "--webhook",
        url.as_str(),
    ];
    // etcd keeps no schedules: its processes watch none.
    let watch = ["--schedules", "300ms"];
    let args: Vec<&str> = match backend {
        shedlock_etcd::BACKEND => args.to_vec(),
        _ => args.iter().chain(&watch).copied().collect(),
    };
    macro_rules! fail {
        ($what:expr) => {{
            let what: String = $what;
            let kept = place.logs.keep();
            panic!("{backend}: {what} (logs kept in {kept:?})");
        }};
    }
    let a = place.spawn("pod-a", &args).await;
    // Until pod-a is mid-delivery of an alert.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let held = loop {
        if let Some(first) = received.all().first() {
            break first.clone();
        }
        if tokio::time::Instant::now() > deadline {
            fail!("no alert reached the webhook within 60 s".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    a.signal("KILL");
    let _ = a.wait().await;
    let b = place.spawn("pod-b", &args).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if received.all().iter().any(|d| d.id == held.id && d.answered) {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            fail!(format!(
                "the alert held when its sender was killed, {}, was not delivered again within 60 s: {:?}",
                held.id,
                received.all()
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A few more sweeps of pod-b: the open alert is not raised again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    b.signal("TERM");
    let _ = b.wait().await;

    let deliveries = received.all();
    if let Some(bad) = deliveries.iter().find(|d| !d.signed_right) {
        fail!(format!("a delivery is not signed right: {bad:?}"));
    }
    if !held.body.contains("\"kind\":\"failing\"") || !held.body.contains("\"job\":\"failing\"") {
        fail!(format!("the held alert is failing's: {}", held.body));
    }
    let provider = place.target.run_store().await;
    let rows = provider.runs(&RunQuery::latest(100_000)).await.unwrap();
    let raised: Vec<_> = rows
        .iter()
        .filter(|r| r.outcome.is_alert() && r.job == "failing" && r.name == "failing")
        .collect();
    if raised.len() != 1
        || !raised[0]
            .error
            .as_deref()
            .unwrap_or("")
            .starts_with("raised: ")
    {
        fail!(format!("failing's alert raised once: {raised:?}"));
    }
    if raised[0].outcome != RunOutcome::AlertSent || format!("alert-{}", raised[0].id) != held.id {
        fail!(format!(
            "the alert held ({}) is recorded delivered: {:?}",
            held.id, raised[0]
        ));
    }
    // Every alert row delivered is one the receiver answered.
    for row in rows.iter().filter(|r| r.outcome == RunOutcome::AlertSent) {
        let id = format!("alert-{}", row.id);
        if !deliveries.iter().any(|d| d.id == id && d.answered) {
            fail!(format!(
                "{id} is recorded sent, and the receiver never answered it"
            ));
        }
    }
    eprintln!(
        "alert kill {backend}: {} deliveries, {} of {} held then delivered again after the kill",
        deliveries.len(),
        deliveries.iter().filter(|d| d.id == held.id).count(),
        held.id
    );
    place.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_survives_its_senders_kill_postgres() {
    alert_through_a_kill(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_survives_its_senders_kill_mysql() {
    alert_through_a_kill(Backend::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_survives_its_senders_kill_sqlite() {
    alert_through_a_kill(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_survives_its_senders_kill_redis() {
    alert_through_a_kill(Backend::Redis).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_survives_its_senders_kill_etcd() {
    alert_through_a_kill(shedlock_etcd::BACKEND).await;
}
