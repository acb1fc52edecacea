//! The backend's part of the builder ([`EtcdTarget`]) and how it connects.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use futures_util::future::BoxFuture;
use shedlock::settings::{Connect, ProviderSettings};
use shedlock::{Error, Result};

use crate::{BACKEND, EtcdLockProvider, Inner};

/// How long a request waits for the cluster's answer by default (10 s).
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most operations this provider puts in one transaction by default: etcd's own default
/// `--max-txn-ops` (128). A batch of locks is one nested transaction per lock, so one
/// transaction claims this many locks.
pub const DEFAULT_MAX_TXN_OPS: usize = 128;

/// The longest key prefix, in bytes.
pub const MAX_KEY_PREFIX_BYTES: usize = 128;

/// Where an [`EtcdLockProvider`] connects, and its etcd-only settings: the part of
/// [`ProviderBuilder<EtcdTarget>`](shedlock::settings::ProviderBuilder) that
/// [`EtcdLockProvider::builder`] makes; change it through
/// [`backend_mut`](shedlock::settings::ProviderBuilder::backend_mut).
#[derive(Debug, Clone)]
pub struct EtcdTarget {
    endpoints: Vec<String>,
    response_timeout: Duration,
    max_txn_ops: usize,
    options: Option<ConnectOptions>,
}

impl EtcdTarget {
    /// The cluster at `endpoints`: `http://host:port` (or `host:port`), several separated by
    /// commas.
    pub fn new(endpoints: &str) -> Self {
        Self {
            endpoints: endpoints
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect(),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            options: None,
        }
    }

    /// How long a request waits for the answer (default [`DEFAULT_RESPONSE_TIMEOUT`]).
    pub fn response_timeout(&mut self, timeout: Duration) -> &mut Self {
        self.response_timeout = timeout;
        self
    }

    /// The most locks claimed (or read) in one transaction: the cluster's `--max-txn-ops`
    /// (default [`DEFAULT_MAX_TXN_OPS`], etcd's default). At least 1.
    pub fn max_txn_ops(&mut self, ops: usize) -> &mut Self {
        self.max_txn_ops = ops.max(1);
        self
    }

    /// Options of the etcd client (user and password, TLS, keep-alive); the response timeout
    /// is set over them.
    pub fn options(&mut self, options: ConnectOptions) -> &mut Self {
        self.options = Some(options);
        self
    }

    /// The endpoints, as they will be given to the client.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }
}

/// The locks one transaction carries for a cluster whose `--max-txn-ops` is `ops`.
///
/// etcd checks each level of a transaction against what the levels above it left: a level's
/// count is the largest of its compares, its success operations and its failure operations,
/// and a nested transaction may count only `ops` less the counts of the levels that hold it.
/// The claim's deepest path (a lock with a tick, in application-clock mode) counts 8 below the
/// batch's own level (1 + 1 + 3 + 3), the read of a lock's keys 3, so a transaction carries
/// `ops - 8` locks: 120 with etcd's default 128 (`tests/limits.rs` measures it). A transaction
/// the cluster still finds too large is sent again as two halves, and the provider keeps the
/// smaller size.
fn locks_per_txn(ops: usize) -> usize {
    ops.saturating_sub(8).max(1)
}

/// Checks a key prefix: not empty, at most [`MAX_KEY_PREFIX_BYTES`], printable ASCII without
/// spaces.
fn check_prefix(prefix: &str) -> Result<()> {
    let reason = if prefix.is_empty() {
        Some("it is empty".to_owned())
    } else if prefix.len() > MAX_KEY_PREFIX_BYTES {
        Some(format!("it is longer than {MAX_KEY_PREFIX_BYTES} bytes"))
    } else if !prefix.bytes().all(|b| b.is_ascii_graphic()) {
        Some("it holds a character other than printable ASCII without spaces".to_owned())
    } else if prefix.ends_with('/') {
        Some("it ends with '/' (the provider adds one)".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::InvalidTableName {
            backend: BACKEND,
            name: prefix.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

impl Connect for EtcdTarget {
    type Provider = EtcdLockProvider;

    /// Connects to the cluster and checks that it answers (one `Status` request).
    fn connect(self, settings: ProviderSettings) -> BoxFuture<'static, Result<EtcdLockProvider>> {
        Box::pin(async move {
            check_prefix(&settings.table)?;
            // What errors, `Debug` and `address()` show: each endpoint with its secrets masked
            // (a password or token in a URL).
            let address = self
                .endpoints
                .iter()
                .map(|endpoint| shedlock::secret::mask_url(endpoint))
                .collect::<Vec<_>>()
                .join(",");
            if self.endpoints.is_empty() {
                return Err(Error::InvalidSetting {
                    backend: BACKEND,
                    setting: "endpoints",
                    reason: "no endpoint given".into(),
                });
            }
            let options = self
                .options
                .unwrap_or_default()
                .with_timeout(self.response_timeout)
                .with_connect_timeout(self.response_timeout)
                // A member without a leader says so at once ("no leader", sent again by the
                // provider) rather than holding the request until the response timeout.
                .with_require_leader(true);
            let unreachable = |source: etcd_client::Error| Error::Unreachable {
                backend: BACKEND,
                address: address.clone(),
                source: Box::new(source),
            };
            let mut client = Client::connect(&self.endpoints, Some(options))
                .await
                .map_err(unreachable)?;
            client.status().await.map_err(unreachable)?;
            Ok(EtcdLockProvider {
                inner: Arc::new(Inner {
                    client,
                    address: address.clone(),
                    prefix: settings.table.clone(),
                    settings,
                    sent: AtomicU64::new(1),
                    releases: shedlock::lease::Releases::default(),
                    batch: std::sync::atomic::AtomicUsize::new(locks_per_txn(self.max_txn_ops)),
                }),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An endpoint with a password that cannot be reached: the error names it masked.
    #[tokio::test]
    async fn an_unreachable_endpoint_is_named_without_its_secret() {
        let error = crate::EtcdLockProvider::builder("http://app:topsecret@127.0.0.1:1")
            .build()
            .await
            .expect_err("nothing listens on port 1");
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains("topsecret"), "the secret shows: {text}");
            assert!(
                text.contains("127.0.0.1:1"),
                "the endpoint is named: {text}"
            );
        }
    }

    #[test]
    fn bad_prefixes_are_refused_before_connecting() {
        for bad in [
            "",
            "a b",
            "a/",
            "tab\t",
            &"x".repeat(MAX_KEY_PREFIX_BYTES + 1),
        ] {
            assert!(
                matches!(check_prefix(bad), Err(Error::InvalidTableName { .. })),
                "{bad:?}"
            );
        }
        for good in ["shedlock", "team-a/locks", "a.b:c"] {
            assert!(check_prefix(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn a_transaction_carries_what_the_nesting_leaves() {
        assert_eq!(locks_per_txn(DEFAULT_MAX_TXN_OPS), 120);
        assert_eq!(locks_per_txn(4), 1);
        let target = EtcdTarget::new(" http://a:2379, ,b:2379 ");
        assert_eq!(target.endpoints(), ["http://a:2379", "b:2379"]);
    }
}
