//! The backend's part of the builder ([`EtcdTarget`]) and how it connects.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use futures_util::future::BoxFuture;
use shedlock::secret::SecretUrl;
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
///
/// Its `Debug` shows the endpoints masked ([`mask_url`](shedlock::secret::mask_url)) and no
/// password: the client's [`ConnectOptions`], which print theirs, are shown only as set or not.
#[derive(Clone)]
pub struct EtcdTarget {
    /// The endpoints as the client gets them: without their user-info.
    endpoints: Vec<String>,
    /// The endpoints as given, for messages (masked when shown).
    given: Vec<SecretUrl>,
    response_timeout: Duration,
    max_txn_ops: usize,
    options: Option<ConnectOptions>,
}

impl fmt::Debug for EtcdTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdTarget")
            .field("endpoints", &self.given)
            .field("response_timeout", &self.response_timeout)
            .field("max_txn_ops", &self.max_txn_ops)
            .field(
                "options",
                &self.options.as_ref().map(|_| "ConnectOptions { .. }"),
            )
            .finish()
    }
}

/// A user name and password for the cluster, from an endpoint's URL; the password never shown.
struct Credentials<'a> {
    user: String,
    password: String,
    /// The endpoint they came from, as given.
    from: &'a SecretUrl,
}

impl EtcdTarget {
    /// The cluster at `endpoints`: `http://host:port` (or `host:port`), several separated by
    /// commas. A user name and password in an endpoint (`http://user:password@host:2379`,
    /// percent-encoded as in any URL) are the cluster's credentials: the provider
    /// authenticates with them ([`ConnectOptions::with_user`], over a user set through
    /// [`options`](Self::options)), and the endpoint is given to the client without them.
    /// Endpoints that name different credentials, or a user without a password, are refused
    /// when the provider is built ([`Error::InvalidSetting`]), never silently ignored.
    pub fn new(endpoints: &str) -> Self {
        let given: Vec<SecretUrl> = endpoints
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(SecretUrl::new)
            .collect();
        Self {
            endpoints: given.iter().map(|e| without_userinfo(e.expose())).collect(),
            given,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            options: None,
        }
    }

    /// The credentials the endpoints carry: `None` when none does; refused when they differ,
    /// or name a user without a password.
    fn credentials(&self) -> Result<Option<Credentials<'_>>> {
        let mut found: Option<Credentials<'_>> = None;
        for given in &self.given {
            let Some((user, password)) = userinfo(given.expose()) else {
                continue;
            };
            let refuse = |reason: String| Error::InvalidSetting {
                backend: BACKEND,
                setting: "endpoints",
                reason,
            };
            let Some(password) = password else {
                return Err(refuse(format!(
                    "{given} names the user {user:?} without a password: write \
                     http://user:password@host:port (etcd authenticates a user by its password)"
                )));
            };
            match &found {
                Some(first) if first.user != user || first.password != password => {
                    return Err(refuse(format!(
                        "{} and {given} name different credentials: every endpoint of a \
                         cluster takes the same user and password",
                        first.from
                    )));
                }
                Some(_) => {}
                None => {
                    found = Some(Credentials {
                        user,
                        password,
                        from: given,
                    });
                }
            }
        }
        Ok(found)
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

    /// The endpoints, as they will be given to the client (without the user-info a URL
    /// carried: its credentials are sent by the client's authentication).
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }
}

/// The user-info of an endpoint (`http://user:password@host:port`, or without a scheme), its
/// parts percent-decoded; `None` when it has none.
fn userinfo(endpoint: &str) -> Option<(String, Option<String>)> {
    let parsed = parsed(endpoint)?;
    if parsed.username().is_empty() && parsed.password().is_none() {
        return None;
    }
    let decode = |part: &str| {
        percent_encoding::percent_decode_str(part)
            .decode_utf8_lossy()
            .into_owned()
    };
    Some((
        decode(parsed.username()),
        parsed.password().map(decode).filter(|p| !p.is_empty()),
    ))
}

/// An endpoint read as a URL (`http://` put before one without a scheme), when it has an `@`.
fn parsed(endpoint: &str) -> Option<url::Url> {
    if !endpoint.contains('@') {
        return None;
    }
    let url = if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("http://{endpoint}")
    };
    url::Url::parse(&url).ok()
}

/// An endpoint without its user-info, as the client takes it.
fn without_userinfo(endpoint: &str) -> String {
    let Some(at) = endpoint.rfind('@') else {
        return endpoint.to_owned();
    };
    match endpoint.find("://") {
        Some(scheme_end) if scheme_end < at => {
            format!("{}{}", &endpoint[..scheme_end + 3], &endpoint[at + 1..])
        }
        _ => endpoint[at + 1..].to_owned(),
    }
}

/// Whether the cluster refused a request for want of credentials (authentication is on and no
/// user was given).
fn no_user_given(error: &etcd_client::Error) -> bool {
    error.to_string().contains("user name is empty")
}

/// Whether the cluster refused the user name or password given, or what that user may do
/// under the prefix.
fn credentials_refused(error: &etcd_client::Error) -> bool {
    let text = error.to_string();
    [
        "authentication failed",
        "invalid auth token",
        "permission denied",
    ]
    .iter()
    .any(|phrase| text.contains(phrase))
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
                .given
                .iter()
                .map(SecretUrl::masked)
                .collect::<Vec<_>>()
                .join(",");
            if self.endpoints.is_empty() {
                return Err(Error::InvalidSetting {
                    backend: BACKEND,
                    setting: "endpoints",
                    reason: "no endpoint given".into(),
                });
            }
            let credentials = self.credentials()?;
            let mut options = self
                .options
                .clone()
                .unwrap_or_default()
                .with_timeout(self.response_timeout)
                .with_connect_timeout(self.response_timeout)
                // A member without a leader says so at once ("no leader", sent again by the
                // provider) rather than holding the request until the response timeout.
                .with_require_leader(true);
            if let Some(credentials) = credentials {
                options = options.with_user(credentials.user, credentials.password);
            }
            let failed = |source: etcd_client::Error| {
                if credentials_refused(&source) {
                    Error::Auth {
                        backend: BACKEND,
                        address: address.clone(),
                        source: Box::new(source),
                    }
                } else {
                    Error::Unreachable {
                        backend: BACKEND,
                        address: address.clone(),
                        source: Box::new(source),
                    }
                }
            };
            let mut client = Client::connect(&self.endpoints, Some(options))
                .await
                .map_err(failed)?;
            client.status().await.map_err(failed)?;
            // `Status` answers without credentials: one read under the prefix tells whether
            // the cluster wants some and none were given.
            let probe = format!("{}/record/", settings.table);
            let count_only = etcd_client::GetOptions::new().with_count_only();
            if let Err(source) = client.get(probe, Some(count_only)).await {
                return Err(if no_user_given(&source) {
                    Error::Auth {
                        backend: BACKEND,
                        address: address.clone(),
                        source: format!(
                            "the cluster has authentication on and no user was given ({source}): \
                             put them in the endpoint (http://user:password@host:2379) or in \
                             EtcdTarget::options (ConnectOptions::with_user)"
                        )
                        .into(),
                    }
                } else {
                    failed(source)
                });
            }
            Ok(EtcdLockProvider {
                inner: Arc::new(Inner {
                    client,
                    address: address.clone(),
                    prefix: settings.table.clone(),
                    settings,
                    sent: AtomicU64::new(1),
                    lease_requests: AtomicU64::new(0),
                    min_ttl: AtomicU64::new(1),
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
