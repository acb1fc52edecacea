//! Sending a request again while the cluster did not take it in (ADR 0016: a member down, a
//! member without a leader; a lease grant also after a timeout).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::Inner;

impl Inner {
    /// Sends a request with `send`, and again while the cluster did not take it in: a member
    /// that is down (the client's channel spreads requests over every endpoint and keeps
    /// trying a dead one, whose requests then fail before they are sent) or a member without a
    /// leader (an election; etcd refuses the request before proposing it). Such a request
    /// changed nothing, so sending it again is safe, also for a transaction. The next try goes
    /// after a pause of 25 ms, doubled each time up to 400 ms, for at most
    /// [`RESEND_FOR`]; any other error (among them a request that timed out, which may
    /// have been applied) is answered at once. A request that is `harmless` to apply twice (a
    /// lease grant: a lease nothing is put under ends by itself) is also sent again when it
    /// timed out or its leader changed.
    pub(crate) async fn resend<T, F, Fut>(
        &self,
        harmless: bool,
        mut send: F,
    ) -> std::result::Result<T, etcd_client::Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(25);
        loop {
            self.sent.fetch_add(1, Ordering::Relaxed);
            match send().await {
                Err(e)
                    if (not_taken(&e) || harmless && unanswered(&e))
                        && started.elapsed() + pause < RESEND_FOR =>
                {
                    tracing::debug!(error = %e, "etcd did not take the request in: sending it again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(400));
                }
                answer => return answer,
            }
        }
    }
}

/// How long [`EtcdLockProvider`](crate::EtcdLockProvider) keeps sending a request the cluster did not take in: longer
/// than an election with etcd's defaults (an election timeout of 1 s, and a few rounds).
pub(crate) const RESEND_FOR: Duration = Duration::from_secs(5);

/// Whether `error` says the cluster did not take the request in: the connection to the member
/// could not be made (so nothing was sent), or the member had no leader (etcd refuses such a
/// request before it proposes it).
fn not_taken(error: &etcd_client::Error) -> bool {
    says_any(
        error,
        &[
            "tcp connect error",
            "Connection refused",
            "etcdserver: no leader",
        ],
    )
}

/// Whether `error` says the request got no answer: it timed out (the client's timeout, or the
/// cluster's own while its leader was lost) or the leader changed under it. It may have been
/// applied.
pub(crate) fn unanswered(error: &etcd_client::Error) -> bool {
    says_any(
        error,
        &["request timed out", "leader changed", "Timeout expired"],
    )
}

/// Whether `error` is a gRPC status whose message holds one of `phrases`.
fn says_any(error: &etcd_client::Error, phrases: &[&str]) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message();
            phrases.iter().any(|phrase| message.contains(phrase))
        }
        _ => false,
    }
}
