//! Serving a router on a listener with bounds on what a client can hold: [`serve`] and its
//! [`Limits`].

use std::convert::Infallible;
use std::future::{Future, IntoFuture};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// The address a connection was accepted on, for the `Host` check: an IP literal naming the
/// very address the client reached is no DNS name an attacker could rebind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalAddr(pub(crate) SocketAddr);

/// The first wait after a failed accept; it doubles up to [`MAX_ACCEPT_BACKOFF`].
const FIRST_ACCEPT_BACKOFF: Duration = Duration::from_millis(10);
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// After the first failed accept is logged, at most one line per this interval.
const ACCEPT_LOG_EVERY: Duration = Duration::from_secs(60);

/// What [`serve`] lets a client hold. [`Limits::default`] is the dashboard's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_connections: usize,
    header_timeout: Duration,
    request_timeout: Duration,
    connection_lifetime: Duration,
    max_head_bytes: usize,
    keep_alive: bool,
}

impl Default for Limits {
    /// 64 connections, 5 s for a request head of at most 64 KiB, 30 s for a request, 5 min
    /// for a connection, kept alive between requests.
    fn default() -> Self {
        Limits {
            max_connections: 64,
            header_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            connection_lifetime: Duration::from_secs(300),
            max_head_bytes: 64 * 1024,
            keep_alive: true,
        }
    }
}

impl Limits {
    /// Connections open at once (at least 1); more wait in the listen queue.
    #[must_use]
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// How long a client has to send a request head (also how long a kept-alive connection
    /// may sit idle).
    #[must_use]
    pub fn header_timeout(mut self, timeout: Duration) -> Self {
        self.header_timeout = timeout;
        self
    }

    /// How long a request may take to be answered, its body's read included.
    #[must_use]
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long a connection lives before it is closed (after the request in flight).
    #[must_use]
    pub fn connection_lifetime(mut self, lifetime: Duration) -> Self {
        self.connection_lifetime = lifetime;
        self
    }

    /// The largest request head read, in bytes (at least 8 KiB, hyper's smallest buffer).
    #[must_use]
    pub fn max_head_bytes(mut self, bytes: usize) -> Self {
        self.max_head_bytes = bytes.max(8 * 1024);
        self
    }

    /// Whether a connection serves more than one request (`true` by default).
    #[must_use]
    pub fn keep_alive(mut self, keep_alive: bool) -> Self {
        self.keep_alive = keep_alive;
        self
    }
}

type Signal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A server in the making: [`serve`]'s answer; `.await` it to serve.
#[must_use = "a Serve does nothing until it is awaited"]
pub struct Serve {
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: Signal,
}

impl std::fmt::Debug for Serve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serve")
            .field("listener", &self.listener.local_addr().ok())
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Serves `router` (the dashboard's, or any axum router) on `listener` under [`Limits`], until
/// [`Serve::with_graceful_shutdown`]'s signal, if any.
///
/// `axum::serve` sets no timer: a client that opens a connection and never finishes its request
/// head holds it (and a file descriptor) for as long as it likes, and enough of them leave a real
/// request unanswered. This is hyper's HTTP/1 server with its timers set, under a cap:
///
/// - a client has [`Limits::header_timeout`] to send each request head (the first, and the next
///   on a kept-alive connection: an idle connection is closed after as long), at most
///   [`Limits::max_head_bytes`] of it;
/// - a request is answered within [`Limits::request_timeout`] (`503 Service Unavailable`
///   after that, the body read included);
/// - a connection lives at most [`Limits::connection_lifetime`]: then it is closed once its
///   request in flight is answered (and cut after another request timeout if that never
///   comes: a client that does not read its answer);
/// - at most [`Limits::max_connections`] connections are open at once: beyond, new ones wait
///   in the listen queue (the kernel's, no descriptor of the process) until one closes;
/// - a failed accept for want of resources (`too many open files`) waits, 10 ms doubling up to
///   1 s, instead of spinning, and is logged once and then at most once a minute;
/// - each request carries its client's address as axum's [`ConnectInfo`]`<SocketAddr>`, which
///   the dashboard records with each action;
/// - a graceful shutdown ([`Serve::with_graceful_shutdown`]) stops accepting, lets the requests
///   in flight finish (at most a request timeout) and closes every connection.
///
/// ```no_run
/// # async fn example(provider: shedlock::SqliteLockProvider) -> std::io::Result<()> {
/// use shedlock_web::{Auth, Limits, Options};
///
/// let dashboard = shedlock_web::router(provider, Options::new(Auth::None));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
/// let (stop, stopped) = tokio::sync::oneshot::channel::<()>(); // `stop.send(())` ends it
/// shedlock_web::serve(listener, dashboard)
///     .limits(Limits::default().max_connections(32))
///     .with_graceful_shutdown(async {
///         let _ = stopped.await;
///     })
///     .await
/// # }
/// ```
pub fn serve(listener: TcpListener, router: Router) -> Serve {
    Serve {
        listener,
        router,
        limits: Limits::default(),
        shutdown: Box::pin(std::future::pending()),
    }
}

impl Serve {
    /// Other limits than [`Limits::default`].
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Stops when `signal` completes: no new connection, the requests in flight answered
    /// (for at most a request timeout), every connection closed.
    pub fn with_graceful_shutdown(
        mut self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        self.shutdown = Box::pin(signal);
        self
    }

    async fn run(self) -> std::io::Result<()> {
        let Serve {
            listener,
            router,
            limits,
            mut shutdown,
        } = self;
        let slots = Arc::new(Semaphore::new(limits.max_connections));
        let (stop, stopping) = watch::channel(false);
        let mut failures = AcceptFailures::default();
        loop {
            let slot = tokio::select! {
                slot = Arc::clone(&slots).acquire_owned() => match slot {
                    Ok(slot) => slot,
                    Err(_) => break, // never closed
                },
                () = &mut shutdown => break,
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut shutdown => break,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => {
                    failures.succeeded();
                    accepted
                }
                // The client gave up before we took its connection: nothing to wait for.
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    drop(slot);
                    tokio::time::sleep(failures.failed(&e)).await;
                    continue;
                }
            };
            let local = stream.local_addr().ok().map(LocalAddr);
            let router = router.clone();
            let mut stopping = stopping.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let router = router.clone();
                    answer(router, request, peer, local, limits.request_timeout)
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder
                    .timer(TokioTimer::new())
                    .header_read_timeout(limits.header_timeout)
                    .max_buf_size(limits.max_head_bytes)
                    .keep_alive(limits.keep_alive);
                let connection = builder.serve_connection(TokioIo::new(stream), service);
                let mut connection = std::pin::pin!(connection);
                // A failed or timed-out connection concerns that client only.
                tokio::select! {
                    _ = connection.as_mut() => return,
                    () = tokio::time::sleep(limits.connection_lifetime) => {}
                    _ = stopping.wait_for(|stop| *stop) => {}
                }
                connection.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(limits.request_timeout, connection).await;
            });
        }
        drop(listener);
        let _ = stop.send(true);
        // Every connection gives its slot back once closed; the last within a request timeout
        // and a little.
        let all = u32::try_from(limits.max_connections).unwrap_or(u32::MAX);
        let _ = tokio::time::timeout(
            limits.request_timeout + Duration::from_secs(1),
            slots.acquire_many(all),
        )
        .await;
        Ok(())
    }
}

impl IntoFuture for Serve {
    type Output = std::io::Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = std::io::Result<()>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// One request through the router, with its client's address, answered within `timeout`.
async fn answer(
    router: Router,
    mut request: Request<Incoming>,
    peer: SocketAddr,
    local: Option<LocalAddr>,
    timeout: Duration,
) -> Result<Response, Infallible> {
    request.extensions_mut().insert(ConnectInfo(peer));
    if let Some(local) = local {
        request.extensions_mut().insert(local);
    }
    let request = request.map(Body::new);
    match tokio::time::timeout(timeout, router.oneshot(request)).await {
        Ok(answered) => answered,
        Err(_) => Ok((
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the request was not answered within {} s\n",
                timeout.as_secs()
            ),
        )
            .into_response()),
    }
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
                    "cannot accept a connection ({error}); retrying with a wait of up to {} s, \
                     and logging further failures at most once a minute",
                    MAX_ACCEPT_BACKOFF.as_secs()
                );
                self.logged = Some(Instant::now());
                self.unlogged = 0;
            }
            Some(at) if at.elapsed() >= ACCEPT_LOG_EVERY => {
                tracing::warn!(
                    "{} connection(s) could not be accepted in the last {} s (latest: {error})",
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
