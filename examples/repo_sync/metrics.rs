//! `run --metrics-addr`: the scheduler's metrics for Prometheus at `GET /metrics`.
//!
//! The metrics come from `metrics-exporter-prometheus`'s recorder (every metric the scheduler
//! records through the `metrics` facade: `shedlock_attempts_total`,
//! `shedlock_job_duration_seconds`, ...); the endpoint is served here with hyper's HTTP/1
//! server, so that what reaches the process from the network is bounded:
//!
//! - `GET /metrics` only: another method on `/metrics` is 405, another path 404; a request
//!   body is never read (the connection closes after the answer);
//! - a client has [`HEADER_TIMEOUT`] to send its request head (a slow or idle client is cut
//!   off), at most [`MAX_HEAD_BYTES`] of it, and [`CONNECTION_TIMEOUT`] for the whole exchange;
//! - at most [`MAX_CONNECTIONS`] connections are open at once: beyond, new ones wait in the
//!   listen queue until one closes;
//! - when accepting fails for want of resources (`too many open files`), the loop waits,
//!   10 ms doubling up to 1 s, instead of spinning, and logs the first failure and then at
//!   most one line a minute with the count.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::show::say;

/// Connections served at once; more wait in the listen queue.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a client has to send its request line and headers.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last, the answer's writing included.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head read (hyper's smallest buffer limit).
pub(crate) const MAX_HEAD_BYTES: usize = 8 * 1024;
/// The first wait after a failed accept; it doubles up to [`MAX_ACCEPT_BACKOFF`].
const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// After the first failed accept is logged, at most one line per this interval.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(60);
/// How often the recorder's histograms are trimmed (the exporter's default).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder and serves it at `http://addr/metrics` on the current
/// Tokio runtime. Fails, naming the address, when it cannot listen there.
pub(crate) async fn serve_metrics(addr: std::net::SocketAddr) -> Result<(), String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    let handle = PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP_EVERY).await;
            upkeep.run_upkeep();
        }
    });
    tokio::spawn(accept_loop(listener, handle));
    say!("metrics for Prometheus at http://{addr}/metrics");
    Ok(())
}

/// Accepts connections, [`MAX_CONNECTIONS`] at a time, each served in a task of its own.
async fn accept_loop(listener: TcpListener, handle: PrometheusHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut failures = AcceptFailures::default();
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return; // never closed
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                failures.succeeded();
                stream
            }
            // The client gave up before we took its connection: nothing to wait for.
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                drop(slot);
                tokio::time::sleep(failures.failed(&e)).await;
                continue;
            }
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let service = hyper::service::service_fn(move |request| {
                let response = respond(&handle, &request);
                async move { Ok::<_, std::convert::Infallible>(response) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            // A failed or timed-out connection concerns that client only.
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
        });
    }
}

/// The answer to one request; its body is never read.
fn respond(handle: &PrometheusHandle, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/metrics") => (StatusCode::OK, handle.render()),
        (_, "/metrics") => (
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET is served at /metrics\n".to_owned(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let content_type = if status == StatusCode::OK {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    response
}

/// An accept error that concerns one connection (the client reset or aborted it before it was
/// taken), not the listener: the next accept may succeed at once.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}

/// Failed accepts in a row (out of descriptors, out of memory): how long to wait before the
/// next, and what to log.
#[derive(Debug, Default)]
struct AcceptFailures {
    /// The current wait; zero after a success.
    backoff: Duration,
    /// When the last line was logged, and the failures since.
    logged: Option<Instant>,
    unlogged: u64,
}

impl AcceptFailures {
    fn succeeded(&mut self) {
        self.backoff = Duration::ZERO;
    }

    /// Records a failure; returns how long to wait before accepting again.
    fn failed(&mut self, error: &std::io::Error) -> Duration {
        self.backoff = (self.backoff * 2).clamp(FIRST_ACCEPT_BACKOFF, MAX_ACCEPT_BACKOFF);
        self.unlogged += 1;
        match self.logged {
            None => {
                tracing::warn!(
                    "metrics endpoint: cannot accept a connection ({error}); retrying with a \
                     wait of up to {} s, and logging further failures at most once a minute",
                    MAX_ACCEPT_BACKOFF.as_secs()
                );
                self.logged = Some(Instant::now());
                self.unlogged = 0;
            }
            Some(at) if at.elapsed() >= ACCEPT_LOG_EVERY => {
                tracing::warn!(
                    "metrics endpoint: {} connection(s) could not be accepted in the last {} s \
                     (latest: {error})",
                    self.unlogged,
                    at.elapsed().as_secs()
                );
                self.logged = Some(Instant::now());
                self.unlogged = 0;
            }
            Some(_) => {}
        }
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_failures_back_off_and_log_rarely() {
        let mut failures = AcceptFailures::default();
        let error = std::io::Error::from_raw_os_error(24);
        let waits: Vec<Duration> = (0..9).map(|_| failures.failed(&error)).collect();
        let ms = Duration::from_millis;
        assert_eq!(
            waits,
            [
                ms(10),
                ms(20),
                ms(40),
                ms(80),
                ms(160),
                ms(320),
                ms(640),
                ms(1000),
                ms(1000)
            ]
        );
        // Logged once (the first); the others are counted for the next line.
        assert_eq!(failures.unlogged, 8);
        failures.succeeded();
        assert_eq!(failures.failed(&error), ms(10));
    }
}
