//! `run --metrics-addr`: the scheduler's metrics for Prometheus at `GET /metrics`.
//!
//! The metrics come from `metrics-exporter-prometheus`'s recorder (every metric the scheduler
//! records through the `metrics` facade: `shedlock_attempts_total`,
//! `shedlock_job_duration_seconds`, ...); the endpoint is a small axum router served by
//! `shedlock_web::serve`, the loop that serves the dashboard too, so that what reaches the
//! process from the network is bounded:
//!
//! - `GET /metrics` only: another method on `/metrics` is 405, another path 404; a request
//!   body is never read (the connection closes after the answer);
//! - a client has [`HEADER_TIMEOUT`] to send its request head (a slow or idle client is cut
//!   off), at most [`MAX_HEAD_BYTES`] of it, and [`CONNECTION_TIMEOUT`] for the whole exchange;
//! - at most [`MAX_CONNECTIONS`] connections are open at once: beyond, new ones wait in the
//!   listen queue until one closes;
//! - when accepting fails for want of resources (`too many open files`), the loop waits,
//!   10 ms doubling up to 1 s, instead of spinning, and logs the first failure and then at
//!   most one line a minute.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use shedlock_web::Limits;
use tokio::net::TcpListener;

use crate::show::say;

/// Connections served at once; more wait in the listen queue.
pub(crate) const MAX_CONNECTIONS: usize = 64;
/// How long a client has to send its request line and headers.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection may last, the answer's writing included.
pub(crate) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest request head read (hyper's smallest buffer limit).
pub(crate) const MAX_HEAD_BYTES: usize = 8 * 1024;
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
    let limits = Limits::default()
        .max_connections(MAX_CONNECTIONS)
        .header_timeout(HEADER_TIMEOUT)
        .request_timeout(CONNECTION_TIMEOUT)
        .connection_lifetime(CONNECTION_TIMEOUT)
        .max_head_bytes(MAX_HEAD_BYTES)
        .keep_alive(false);
    let served = shedlock_web::serve(listener, endpoint(handle)).limits(limits);
    tokio::spawn(async move {
        if let Err(error) = served.await {
            tracing::warn!(%error, "the metrics endpoint stopped");
        }
    });
    say!("metrics for Prometheus at http://{addr}/metrics");
    Ok(())
}

/// `GET /metrics`, and nothing else; no request body is read.
fn endpoint(handle: PrometheusHandle) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(render).fallback(|| async {
                (
                    StatusCode::METHOD_NOT_ALLOWED,
                    [(header::ALLOW, "GET")],
                    "only GET is served at /metrics\n",
                )
            }),
        )
        .fallback(|| async {
            (
                StatusCode::NOT_FOUND,
                "not found: the metrics are at /metrics\n",
            )
        })
        .with_state(handle)
}

async fn render(State(handle): State<PrometheusHandle>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}
