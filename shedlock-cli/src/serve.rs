//! `shedlock serve`: the dashboard ([`shedlock_web`]) over the store given, until Ctrl-C or
//! SIGTERM, served by [`shedlock_web::serve`] (a header read timeout, 64 connections at most, a
//! request timeout) over plain HTTP.

use shedlock_web::{Auth, Options, Source};
use tokio::net::TcpListener;

use crate::args::ServeArgs;
use crate::db::Db;
use crate::failure::Failure;

/// Who may see the dashboard, from the options; refuses to serve without authentication
/// anywhere but on loopback.
pub(crate) fn auth(args: &ServeArgs) -> Result<Auth, Failure> {
    match (&args.token, args.no_auth) {
        (Some(token), _) if token.trim().is_empty() => Err(Failure::Usage(
            "the dashboard's token is empty: give a long random one with --token or SHEDLOCK_WEB_TOKEN".into(),
        )),
        (Some(token), _) => Auth::try_bearer(token.as_str())
            .map_err(|e| Failure::Usage(format!("{e} (--token or SHEDLOCK_WEB_TOKEN)"))),
        (None, true) if args.listen.ip().is_loopback() => Ok(Auth::None),
        (None, true) => Err(Failure::Usage(format!(
            "--no-auth serves the dashboard to anyone who reaches it: it is only allowed on a \
             loopback address, not on {}; give a token instead (--token or SHEDLOCK_WEB_TOKEN)",
            args.listen
        ))),
        (None, false) => Err(Failure::Usage(
            "the dashboard needs authentication: give a bearer token (--token, or \
             SHEDLOCK_WEB_TOKEN to keep it out of the process list), or --no-auth on a \
             loopback --listen address"
                .into(),
        )),
    }
}

impl Db {
    /// The dashboard's view of the store.
    fn into_source(self) -> Source {
        match self {
            Db::Postgres(p) => p.into(),
            Db::MySql(p) => p.into(),
            Db::Sqlite(p) => p.into(),
            Db::Redis(p) => p.into(),
        }
    }
}

pub(crate) async fn serve(db: Db, args: &ServeArgs) -> Result<(), Failure> {
    let auth = auth(args)?;
    let how = match &auth {
        Auth::None => "no authentication (loopback only)",
        _ => "a bearer token; a browser signs in at /login",
    };
    let source = db.into_source();
    let what = format!(
        "{} {} {}",
        source.backend(),
        if source.has_history() {
            "with run history"
        } else {
            "without run history"
        },
        if args.read_only { "(read-only)" } else { "" }
    );
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| Failure::Usage(format!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener
        .local_addr()
        .map_err(|e| Failure::Usage(format!("cannot listen: {e}")))?;
    let options = Options::new(auth)
        .read_only(args.read_only)
        .allowed_hosts(&args.allowed_hosts)
        .trust_proxy_headers(args.trust_proxy_headers);
    let router = shedlock_web::router(source, options);
    crate::output::print(&format!(
        "shedlock: serving the dashboard of {} at http://{address}/ ({how}); Ctrl-C stops it\n",
        what.trim_end()
    ));
    shedlock_web::serve(listener, router)
        .with_graceful_shutdown(stopped())
        .await
        .map_err(|e| Failure::Usage(format!("the dashboard stopped: {e}")))
}

/// Ctrl-C, or SIGTERM on Unix.
async fn stopped() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}
