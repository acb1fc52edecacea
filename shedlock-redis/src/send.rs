//! How the provider talks to Redis: a script (`EVALSHA`, and `SCRIPT LOAD` the first time a
//! server meets it) or a command, each sent once more on a fresh connection when the
//! connection broke, each failure named ([`Inner::fail`]).

use std::sync::atomic::Ordering;

use redis::{FromRedisValue, ScriptInvocation};
use shedlock::Result;

use crate::Inner;

impl Inner {
    /// Runs a prepared script: one `EVALSHA` (and a `SCRIPT LOAD` the first time a server
    /// meets it), once more on a fresh connection when the connection broke. The first attempt
    /// may have run before the break, so a second run must do no harm: extend, unlock, the
    /// operator's release and the reads change nothing more (a release then answers 0, a read
    /// finds the names it removed gone), an acquire carries a request id with which it
    /// gets its own lease back, and so does each schedule script that writes (it answers what
    /// its first run did).
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        operation: impl Fn() -> String,
    ) -> Result<T> {
        self.send(Request::Script(invocation), operation).await
    }

    /// Sends a command that only reads (`SSCAN`), as [`run`](Self::run) sends a script.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        operation: impl Fn() -> String,
    ) -> Result<T> {
        self.send(Request::Command(cmd), operation).await
    }

    /// Sends `request`, once more on a fresh connection when the connection broke; counted in
    /// `sent` each time.
    async fn send<T: FromRedisValue>(
        &self,
        request: Request<'_, '_>,
        operation: impl Fn() -> String,
    ) -> Result<T> {
        let mut retried = false;
        loop {
            self.sent.fetch_add(1, Ordering::Relaxed);
            let mut conn = self.conn.clone();
            let answer = match request {
                Request::Script(invocation) => invocation.invoke_async(&mut conn).await,
                Request::Command(cmd) => cmd.query_async(&mut conn).await,
            };
            match answer {
                Ok(value) => return Ok(value),
                Err(e) if !retried && e.is_connection_dropped() => {
                    tracing::info!(address = %self.address, error = %e,
                        "the Redis connection broke; sending the request once more on a new one");
                    retried = true;
                }
                Err(e) => return Err(self.fail(operation(), request.command(), e)),
            }
        }
    }
}

/// What [`Inner::send`] sends.
#[derive(Clone, Copy)]
pub(crate) enum Request<'a, 'b> {
    /// A prepared script.
    Script(&'a ScriptInvocation<'b>),
    /// A command that only reads.
    Command(&'a redis::Cmd),
}

impl Request<'_, '_> {
    /// What a refused permission names.
    fn command(&self) -> &'static str {
        match self {
            Request::Script(_) => "EVALSHA, SCRIPT LOAD or a command of the script",
            Request::Command(_) => "SSCAN",
        }
    }
}
