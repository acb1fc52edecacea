//! `run --dashboard ADDR`: the dashboard (`shedlock-web`) beside the scheduler, over the same
//! store: the repositories' jobs, their locks, their run history and a timeline, with pause,
//! resume, run now, reschedule and the release of a stuck lock.
//!
//! On a loopback address it needs no sign-in; on any other it needs the token in
//! `REPO_SYNC_DASHBOARD_TOKEN` (a bearer token; a browser signs in once at `/login`), and is
//! refused without one, before anything is served.

use std::net::SocketAddr;
use std::sync::Arc;

use shedlock_web::{Auth, Options, Source};
use tokio::net::TcpListener;

use crate::Locks;
use crate::show::say;

/// The variable holding the dashboard's token.
pub(crate) const TOKEN_VAR: &str = "REPO_SYNC_DASHBOARD_TOKEN";

/// Who may see the dashboard at `addr`.
pub(crate) fn auth(addr: SocketAddr) -> Result<Auth, String> {
    match std::env::var(TOKEN_VAR)
        .ok()
        .filter(|t| !t.trim().is_empty())
    {
        Some(token) => Ok(Auth::bearer(token.trim())),
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
        Options::new(auth).title("repo_sync"),
    );
    tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, router).await {
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
