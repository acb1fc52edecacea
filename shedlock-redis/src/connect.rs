//! How a [`RedisLockProvider`] is built: its part of the [`ProviderBuilder`] ([`RedisTarget`]:
//! the URL and the response timeout), the checks of its settings, and the first connection.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::RedisError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use shedlock::lease::Releases;
use shedlock::secret::SecretUrl;
use shedlock::settings::{Connect, ProviderBuilder, ProviderSettings};
use shedlock::{Backend, Error, Result};

use crate::fail::is_auth;
use crate::{Inner, RedisLockProvider, Scripts, fail};

/// The longest key prefix accepted, in bytes.
pub const MAX_KEY_PREFIX_BYTES: usize = 48;

/// How long a script may go without an answer before it fails as [`Error::Timeout`], unless
/// [`RedisTarget::response_timeout`] sets another.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Redis's part of a [`ProviderBuilder`]: the server's URL and how long a script may go
/// without an answer. `RedisLockProvider::builder(url)` makes one from a URL; for another
/// response timeout, pass `RedisTarget::new(url).response_timeout(..)`.
///
/// The URL is kept as a [`SecretUrl`]: the `Debug` of a target (and of a builder made from one)
/// prints it with its password, a bare token in its user slot and its secret-named query
/// parameters masked ([`shedlock::secret::mask_url`]), also when it does not parse.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock_redis::{RedisLockProvider, RedisTarget};
///
/// let provider = RedisLockProvider::builder(
///     RedisTarget::new("redis://:secret@redis.internal:6379/0")
///         .response_timeout(Duration::from_secs(2)),
/// )
/// .table_name("reports") // the key prefix
/// .locked_by("reports-worker-1")
/// .build()
/// .await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisTarget {
    url: SecretUrl,
    response_timeout: Duration,
}

impl RedisTarget {
    /// The server of `url` (`redis://[user][:password@]host[:port][/db]`, or `rediss://` for
    /// TLS), with the default response timeout.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: SecretUrl::new(url),
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// How long a script may go without an answer before it fails as [`Error::Timeout`]
    /// (default [`DEFAULT_RESPONSE_TIMEOUT`], 10 s). It also bounds `build()`: the first
    /// connection, with its retries, and its first command. Zero is refused by `build()` as
    /// [`Error::InvalidSetting`].
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }
}

impl From<&str> for RedisTarget {
    fn from(url: &str) -> Self {
        Self::new(url)
    }
}

impl From<String> for RedisTarget {
    fn from(url: String) -> Self {
        Self::new(url)
    }
}

impl From<&String> for RedisTarget {
    fn from(url: &String) -> Self {
        Self::new(url.as_str())
    }
}

impl Connect for RedisTarget {
    type Provider = RedisLockProvider;

    /// Checks the key prefix and the response timeout, connects, checks that the server
    /// answers a `PING`, and builds the provider.
    ///
    /// A URL redis-rs cannot read is [`Error::InvalidUrl`]; a server that does not answer
    /// within the response timeout is [`Error::Unreachable`], one that refuses the password
    /// (or wants one the URL lacks) [`Error::Auth`], one that refuses `PING` to the user (an
    /// ACL rule) [`Error::Database`] saying so and listing the permissions the provider needs
    /// ([`REQUIRED_COMMANDS`](crate::REQUIRED_COMMANDS)), each naming the address.
    fn connect(self, settings: ProviderSettings) -> BoxFuture<'static, Result<RedisLockProvider>> {
        Box::pin(connect(self, settings))
    }
}

async fn connect(target: RedisTarget, settings: ProviderSettings) -> Result<RedisLockProvider> {
    let RedisTarget {
        url,
        response_timeout,
    } = target;
    // Only redis-rs sees the URL as given; an error masks it (`Error::invalid_url`).
    let raw = url.expose();
    let prefix = validate_prefix(settings.table.clone())?;
    if response_timeout.is_zero() {
        return Err(Error::InvalidSetting {
            backend: Backend::Redis,
            setting: "response_timeout",
            reason: "it must be greater than zero".into(),
        });
    }
    let tls = raw.to_ascii_lowercase().starts_with("rediss://");
    if tls {
        // rustls needs a process-wide cryptography provider; one the application installed
        // is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let client = redis::Client::open(raw)
        .map_err(|e| Error::invalid_url(Backend::Redis, raw, e.to_string()))?;
    let address = client.get_connection_info().addr().to_string();
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(response_timeout))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_secs(1));
    let first = async {
        let mut conn = ConnectionManager::new_with_config(client.clone(), config).await?;
        // A server that wants a password the URL lacks accepts the connection and refuses
        // its first command: ask it now, not at the first lock.
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .map(|()| conn)
    };
    let conn = match tokio::time::timeout(response_timeout, first).await {
        Ok(Err(source)) if fail::is_denied(&source) => {
            return Err(fail::denied(
                &address,
                &prefix,
                "connect and check that the server answers".into(),
                "PING (or SELECT of the URL's database)",
                source,
            ));
        }
        Ok(connected) => connected.map_err(|source| connect_error(&address, tls, source))?,
        Err(_) => {
            let source = RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "no answer within {}",
                    humantime::format_duration(response_timeout)
                ),
            ));
            return Err(connect_error(&address, tls, source));
        }
    };
    Ok(RedisLockProvider {
        inner: Arc::new(Inner {
            conn,
            client,
            address,
            tag: format!("{{{prefix}}}:"),
            prefix,
            settings,
            response_timeout,
            scripts: Scripts::new(),
            sent: AtomicU64::new(0),
            request_prefix: request_prefix(),
            requests: AtomicU64::new(0),
            releases: Releases::default(),
        }),
    })
}

impl RedisLockProvider {
    /// Connects to `url` (`redis://[user][:password@]host[:port][/db]`, or `rediss://` for
    /// TLS) with default settings: key prefix `shedlock`, the server's clock, default
    /// `locked_by`. One multiplexed connection, reconnected when it breaks.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).build().await
    }

    /// A builder to set the key prefix ([`table_name`](ProviderBuilder::table_name)),
    /// `locked_by`, clock mode, keep-alive or tick tolerance; `target` is the URL, or a
    /// [`RedisTarget`] with its response timeout.
    pub fn builder(target: impl Into<RedisTarget>) -> ProviderBuilder<RedisTarget> {
        ProviderBuilder::new(target.into())
    }
}

/// The start of this provider's acquire request ids: its process id, the time it was built in
/// ns and how many were built before it in this process, which no other provider shares.
fn request_prefix() -> String {
    static BUILT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let built = BUILT.fetch_add(1, Ordering::Relaxed);
    format!("{:x}.{nanos:x}.{built}", std::process::id())
}

/// The key prefix checked: 1 to 48 bytes of ASCII letters, digits, `_ - . : /`.
fn validate_prefix(prefix: String) -> Result<String> {
    let refuse = |reason: &str| {
        Err(Error::InvalidTableName {
            backend: Backend::Redis,
            name: prefix.clone(),
            reason: reason.to_owned(),
        })
    };
    if prefix.is_empty() {
        return refuse("it is empty");
    }
    if prefix.len() > MAX_KEY_PREFIX_BYTES {
        return refuse("it is longer than 48 bytes");
    }
    if let Some(c) = prefix
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_-.:/".contains(*c)))
    {
        return refuse(&format!(
            "it contains {c:?}; use ASCII letters, digits, '_', '-', '.', ':' or '/'"
        ));
    }
    Ok(prefix)
}

/// What a failed first connection becomes: refused credentials, or an unreachable server. A
/// `rediss://` URL's failure says that the port may not serve TLS: a plain Redis port answers a
/// TLS handshake with nothing (it waits for the end of a line) or with an error that is no TLS.
fn connect_error(address: &str, tls: bool, source: RedisError) -> Error {
    if is_auth(&source) {
        return Error::Auth {
            backend: Backend::Redis,
            address: address.to_owned(),
            source: source.into(),
        };
    }
    let source = if tls {
        RedisError::from((
            redis::ErrorKind::Io,
            "TLS connection failed (the URL is rediss://: does this port serve TLS?)",
            source.to_string(),
        ))
    } else {
        source
    };
    Error::Unreachable {
        backend: Backend::Redis,
        address: address.to_owned(),
        source: source.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_checked() {
        assert!(validate_prefix("shedlock".into()).is_ok());
        assert!(validate_prefix("app:locks/v1".into()).is_ok());
        for bad in ["", "a{b", "a}b", "a b", &"x".repeat(49)] {
            let e = validate_prefix(bad.to_owned()).unwrap_err();
            assert!(e.to_string().contains("key prefix"), "{e}");
        }
    }
}
