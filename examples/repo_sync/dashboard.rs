//! `run --dashboard ADDR`: the dashboard (`shedlock-web`) beside the scheduler, over the same
//! store: the repositories' jobs, their locks, their run history and a timeline, with pause,
//! resume, run now, reschedule and the release of a stuck lock.
//!
//! On a loopback address it needs no sign-in (and answers only for the host names `localhost`,
//! `127.0.0.1` and `[::1]`); on any other it needs the token in `REPO_SYNC_DASHBOARD_TOKEN` (a
//! bearer token of at least 16 characters; a browser signs in once at `/login`), and is refused
//! without one, before anything is served. With a token it answers for the loopback names, the
//! IP address a connection reached, and the host names in `REPO_SYNC_DASHBOARD_HOSTS`
//! (comma-separated: the names browsers use to reach it); any other `Host` is answered 421. It
//! is served by `shedlock_web::serve`: a header read timeout, 64 connections at most, a request
//! timeout.

use std::net::SocketAddr;
use std::sync::Arc;

use shedlock_web::{Auth, Options, Source};
use tokio::net::TcpListener;

use crate::Locks;
use crate::show::say;

/// The variable holding the dashboard's token.
pub(crate) const TOKEN_VAR: &str = "REPO_SYNC_DASHBOARD_TOKEN";
/// The variable naming the host names the dashboard answers for besides loopback's.
pub(crate) const HOSTS_VAR: &str = "REPO_SYNC_DASHBOARD_HOSTS";

/// The host names of [`HOSTS_VAR`].
fn allowed_hosts() -> Vec<String> {
    std::env::var(HOSTS_VAR)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Who may see the dashboard at `addr`.
pub(crate) fn auth(addr: SocketAddr) -> Result<Auth, String> {
    match std::env::var(TOKEN_VAR)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        Some(token) => Auth::try_bearer(token).map_err(|e| format!("{TOKEN_VAR}: {e}")),
        None if addr.ip().is_loopback() => Ok(Auth::None),
        None => Err(format!(
            "--dashboard {addr}: a dashboard on an address other than loopback needs a token: \
             set {TOKEN_VAR} (a long random secret; a browser signs in with it at /login)"
        )),
    }
}

/// Starts serving the dashboard over `provider` at `addr`, in a task of its own.
pub(crate) async fn serve_dashboard(
    addr: SocketAddr,
    provider: Arc<dyn Locks>,
) -> Result<(), String> {
    let auth = auth(addr)?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot serve the dashboard on {addr}: {e}"))?;
    let addr = listener.local_addr().unwrap_or(addr);
    let signed = matches!(auth, Auth::Bearer(_));
    let router = shedlock_web::router(
        Source::with_history(provider),
        Options::new(auth)
            .title("repo_sync")
            .allowed_hosts(allowed_hosts()),
    );
    tokio::spawn(async move {
        if let Err(error) = shedlock_web::serve(listener, router).await {
            tracing::warn!(%error, "the dashboard stopped");
        }
    });
    say!(
        "the dashboard at http://{addr}/{}",
        if signed {
            " (sign in with the token in REPO_SYNC_DASHBOARD_TOKEN)"
        } else {
            ""
        }
    );
    Ok(())
}
