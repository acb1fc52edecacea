//! [`RedisLockProvider`]: shedlock's locks in a single Redis primary, each operation one
//! server-side Lua script run in one round trip over redis-rs's tokio
//! `ConnectionManager`.
//!
//! A provider written against `shedlock`'s public API only, as a provider for any other store
//! would be: it builds its guards with [`LockGuard::new`] over its own [`Lease`], takes its
//! settings from shedlock's [`ProviderBuilder`](shedlock::ProviderBuilder) (the key prefix is
//! what `table_name` sets) and reports failures as shedlock's
//! [`Error`], tagged [`Backend::Redis`]. It passes the same provider and scheduler suites as
//! the SQL providers.
//!
//! # Features
//!
//! - `test-util`: what tests and benchmarks need: a lock's keys and the count of scripts sent
//!   (methods of [`RedisLockProvider`]), a script's text ([`test_util`]); not for production
//!   code.
//! - `testkit`: [`testkit::Redis`], this store's backend for the conformance kit
//!   (`shedlock-testkit`); `tests/kit.rs` runs both suites on it, every case that does not
//!   need SQL.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod connect;
mod lease;
mod scripts;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use connect::{DEFAULT_RESPONSE_TIMEOUT, MAX_KEY_PREFIX_BYTES, RedisTarget};

// The README's example compiles as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use redis::aio::ConnectionManager;
use redis::{FromRedisValue, RedisError, Script, ScriptInvocation};
use shedlock::lease::{Acquired, Lease, Releases};
use shedlock::{
    Backend, Error, KeepAlive, LockAdmin, LockConfiguration, LockGuard, LockProvider, LockState,
    ProviderSettings, Result,
};
use tokio::time::Instant;

/// The default key prefix ([`shedlock::DEFAULT_TABLE_NAME`]): keys are
/// `{shedlock}:lock:<name>`, `{shedlock}:meta:<name>` and `{shedlock}:names`.
pub const DEFAULT_KEY_PREFIX: &str = shedlock::DEFAULT_TABLE_NAME;

/// A lock provider over a single Redis primary (Redis 6.2 or later, or a compatible server):
/// the lock of each name is a lease key that Redis expires beside a record that never expires,
/// each operation one Lua script run by `EVALSHA`.
///
/// It implements [`LockProvider`] and [`LockAdmin`], with the guarantees of the SQL providers:
/// a lease decided by the server's clock (`TIME`), fencing tokens that never go back (also
/// after its keys are deleted by hand), each tick claimed once, a tick too far ahead of the
/// server's clock refused, the jobs due at one instant claimed in one script. It does not
/// implement [`RunStore`](shedlock::RunStore): the run history lives in an SQL table, and giving
/// this provider to [`SchedulerBuilder::history`](shedlock::SchedulerBuilder::history) does not
/// compile.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{LockConfiguration, LockProvider};
/// use shedlock_redis::RedisLockProvider;
///
/// let provider = RedisLockProvider::connect("redis://127.0.0.1:6379").await?;
/// let cfg = LockConfiguration::new("nightly", Duration::from_secs(1800), Duration::from_secs(10))?;
/// if let Some(guard) = provider.lock(&cfg).await? {
///     // ... the job, passing guard.fencing_token() to downstream writes ...
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
///
/// # What Redis must keep for the promises to hold
///
/// The promises that outlive a lease (each tick once, tokens that never go back) are only as
/// durable as the server's data. Run the primary with `appendonly yes` and
/// `appendfsync always` (or `everysec`, and accept losing up to a second of claims in a
/// crash), and `maxmemory-policy noeviction`, so Redis never evicts a lock's record to make
/// room. A server that restarts without its data forgets every lease and claimed tick: a
/// job running at that moment can be started again elsewhere, and a tick claimed just before
/// can be claimed again. Tokens still never go back, because a new token is never below the
/// server's clock in microseconds. A replica promoted by Sentinel may lack the newest writes in
/// the same way. `docs/reliability.md` has the measured cases.
///
/// # Cluster
///
/// Every key of one prefix carries the hash tag `{<prefix>}`, so they all live in one slot, on
/// one shard, as a lock table lives on one SQL server; the scripts are valid on a cluster.
/// This provider connects to one node: give it the address of the shard's primary.
#[derive(Clone)]
pub struct RedisLockProvider {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ConnectionManager,
    /// `host:port` of the server, for messages.
    address: String,
    /// The prefix as given.
    prefix: String,
    /// `{<prefix>}:`, the start of every key.
    tag: String,
    /// `locked_by`, the clock, keep-alive and the tick tolerance, as the builder checked them.
    settings: ProviderSettings,
    response_timeout: Duration,
    scripts: Scripts,
    /// Scripts sent (each attempt of a retried one counts).
    sent: AtomicU64,
    /// What makes this provider's acquire request ids unique: its process and start time.
    request_prefix: String,
    /// Acquire calls made, the rest of each request id.
    requests: AtomicU64,
    /// Unlocks grouped into one script.
    releases: Releases,
}

/// The scripts, hashed once.
struct Scripts {
    acquire: Script,
    extend: Script,
    unlock: Script,
    is_held: Script,
    release: Script,
    states: Script,
    now: Script,
}

impl Scripts {
    fn new() -> Self {
        Self {
            acquire: Script::new(scripts::ACQUIRE),
            extend: Script::new(scripts::EXTEND),
            unlock: Script::new(scripts::UNLOCK),
            is_held: Script::new(scripts::IS_HELD),
            release: Script::new(scripts::RELEASE),
            states: Script::new(scripts::STATES),
            now: Script::new(scripts::NOW),
        }
    }
}

impl fmt::Debug for RedisLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockProvider")
            .field("address", &self.inner.address)
            .field("key_prefix", &self.inner.prefix)
            .field("locked_by", &self.inner.settings.locked_by)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLease")
            .field("address", &self.address)
            .field("key_prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisLockProvider {
    /// The server's address, `host:port`.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The lease key of lock `name`: `{<prefix>}:lock:<name>`. Redis expires it when the lease
    /// runs out. For tests that look at the keys.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn lock_key(&self, name: &str) -> String {
        self.inner.key("lock:", name)
    }

    /// The record key of lock `name`: `{<prefix>}:meta:<name>`, which keeps the newest fencing
    /// token and claimed tick and never expires. For tests that look at the keys.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn meta_key(&self, name: &str) -> String {
        self.inner.key("meta:", name)
    }

    /// The set of every lock name: `{<prefix>}:names`. For tests that look at the keys.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn names_key(&self) -> String {
        format!("{}names", self.inner.tag)
    }

    /// How many scripts this provider has sent (each attempt of a retried one counts). For
    /// tests and benchmarks that count round trips, as `SqlLockProvider::statements_sent`.
    #[cfg(feature = "test-util")]
    #[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
    pub fn statements_sent(&self) -> u64 {
        self.inner.sent.load(Ordering::Relaxed)
    }
}

impl Inner {
    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}{name}", self.tag)
    }

    fn app_now(&self) -> String {
        self.settings
            .app_now()
            .map(|now| now.timestamp_micros().to_string())
            .unwrap_or_default()
    }

    /// Runs a prepared script: one `EVALSHA` (and a `SCRIPT LOAD` the first time a server
    /// meets it), once more on a fresh connection when the connection broke. The first attempt
    /// may have run before the break, so a second run must do no harm: extend, unlock, the
    /// operator's release and the reads change nothing more (a release then answers 0), and an
    /// acquire carries a request id with which it gets its own lease back.
    async fn run<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        operation: impl Fn() -> String,
    ) -> Result<T> {
        let mut retried = false;
        loop {
            self.sent.fetch_add(1, Ordering::Relaxed);
            let mut conn = self.conn.clone();
            match invocation.invoke_async(&mut conn).await {
                Ok(value) => return Ok(value),
                Err(e) if !retried && e.is_connection_dropped() => {
                    tracing::info!(address = %self.address, error = %e,
                        "the Redis connection broke; running the script once more on a new one");
                    retried = true;
                }
                Err(e) => return Err(self.fail(operation(), e)),
            }
        }
    }

    /// What a failed script becomes: a key of the wrong type, refused credentials, a timeout,
    /// or an error naming the server and what was being done.
    fn fail(&self, operation: String, source: RedisError) -> Error {
        if source.code() == Some("SHEDLOCK_WRONGTYPE") {
            let detail = source.detail().unwrap_or_default();
            let detail = detail.rsplit_once(" script: ").map_or(detail, |(d, _)| d);
            let (found, key) = detail.split_once(' ').unwrap_or(("unknown", detail));
            return Error::WrongType {
                backend: Backend::Redis,
                address: self.address.clone(),
                key: key.to_owned(),
                found: found.to_owned(),
            };
        }
        if connect::is_auth(&source) {
            return Error::Auth {
                backend: Backend::Redis,
                address: self.address.clone(),
                source: source.into(),
            };
        }
        if source.is_timeout() {
            return Error::Timeout {
                operation: format!("{operation} on the Redis server at {}", self.address),
                after: self.response_timeout,
            };
        }
        Error::Database {
            backend: Backend::Redis,
            operation,
            location: self.address.clone(),
            source: source.into(),
        }
    }

    async fn acquire_many(
        self: &Arc<Self>,
        configs: &[LockConfiguration],
    ) -> Result<Vec<Result<Option<LockGuard>>>> {
        // One id per call, the same for its retry: a retry whose first attempt took the lock
        // (the connection broke before the answer came) gets that lease back, instead of
        // finding the lock held (by itself) and the tick claimed, and leaving both unused
        // until the lease runs out.
        let request = format!(
            "{}-{}",
            self.request_prefix,
            self.requests.fetch_add(1, Ordering::Relaxed)
        );
        let mut invocation = self.scripts.acquire.prepare_invoke();
        invocation
            .key(format!("{}names", self.tag))
            .arg(&self.settings.locked_by)
            .arg(micros(self.settings.tick_tolerance))
            .arg(self.app_now())
            .arg(request);
        for config in configs {
            invocation
                .key(self.key("lock:", config.name()))
                .key(self.key("meta:", config.name()))
                .arg(config.name())
                .arg(micros(config.lock_at_most_for()))
                .arg(
                    config
                        .tick()
                        .map(|t| t.timestamp_micros().to_string())
                        .unwrap_or_default(),
                );
        }
        let sent_at = Instant::now();
        let answers: Vec<(i64, Option<i64>)> = self
            .run(&invocation, || match configs {
                [one] => format!("acquire lock {:?}", one.name()),
                many => format!("claim {} locks in one script", many.len()),
            })
            .await?;
        if answers.len() != configs.len() {
            return Err(Error::Database {
                backend: Backend::Redis,
                operation: format!("read the answer of a claim of {} locks", configs.len()),
                location: self.address.clone(),
                source: RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a different number of answers than locks",
                ))
                .into(),
            });
        }
        Ok(configs
            .iter()
            .zip(answers)
            .map(|(config, (token, ahead_us))| self.decide(config, token, ahead_us, sent_at))
            .collect())
    }

    /// What an acquire answers (shedlock's [`Acquired::into_guard`], as every provider
    /// decides it): a token is a guard over this provider; no token, with how far the tick was
    /// ahead of the server's `TIME`, is `None` or a tick refused as too far ahead.
    fn decide(
        self: &Arc<Self>,
        config: &LockConfiguration,
        token: i64,
        ahead_us: Option<i64>,
        sent_at: Instant,
    ) -> Result<Option<LockGuard>> {
        let acquired = if token > 0 {
            Acquired::Token(token)
        } else {
            Acquired::NotTaken { ahead_us }
        };
        let lease = || Arc::clone(self) as Arc<dyn Lease>;
        acquired.into_guard(config, lease, sent_at, self.settings.tick_tolerance)
    }

    async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let mut invocation = self.scripts.is_held.prepare_invoke();
        invocation
            .key(self.key("lock:", name))
            .arg(token)
            .arg(self.app_now());
        let held: i64 = self
            .run(&invocation, || format!("check lock {name:?}"))
            .await?;
        Ok(held == 1)
    }

    async fn now(&self) -> Result<DateTime<Utc>> {
        if let Some(now) = self.settings.app_now() {
            return Ok(now);
        }
        let invocation = self.scripts.now.prepare_invoke();
        let micros: String = self
            .run(&invocation, || "read the server's clock".into())
            .await?;
        Ok(parse_time(&micros))
    }

    /// The states of every lock (`All`) or of one.
    async fn states(&self, which: Which<'_>) -> Result<Vec<LockState>> {
        type Row = (String, String, String, String, String, Option<String>);
        let mut invocation = self.scripts.states.prepare_invoke();
        invocation.key(format!("{}names", self.tag)).arg(&self.tag);
        match which {
            Which::All => invocation.arg("all"),
            Which::Named(names) => {
                invocation.arg("named");
                let mut sorted: Vec<&String> = names.iter().collect();
                sorted.sort();
                for name in sorted {
                    invocation
                        .key(self.key("lock:", name))
                        .key(self.key("meta:", name))
                        .arg(name);
                }
                &mut invocation
            }
        };
        let (now, rows): (String, Vec<Row>) = self
            .run(&invocation, || match which {
                Which::Named([name]) => format!("read lock {name:?}"),
                Which::Named(names) => format!("read {} locks", names.len()),
                Which::All => format!("list the locks under {:?}", self.tag),
            })
            .await?;
        let read_at = parse_time(&now);
        Ok(rows
            .into_iter()
            .map(|(name, token, by, at, until, tick)| {
                LockState::new(
                    name,
                    parse_time(&until),
                    parse_time(&at),
                    by,
                    token.parse().unwrap_or_default(),
                    tick.as_deref().map(parse_time),
                    read_at,
                )
            })
            .collect())
    }

    async fn force_release(&self, name: &str, token: i64) -> Result<bool> {
        let mut invocation = self.scripts.release.prepare_invoke();
        invocation
            .key(self.key("lock:", name))
            .key(self.key("meta:", name))
            .arg(token);
        let released: i64 = self
            .run(&invocation, || format!("release lock {name:?}"))
            .await?;
        Ok(released == 1)
    }
}

/// What [`Inner::states`] reads.
#[derive(Debug, Clone, Copy)]
enum Which<'a> {
    All,
    /// These locks (a name without keys is left out).
    Named(&'a [String]),
}

impl LockProvider for RedisLockProvider {
    fn lock<'a>(
        &'a self,
        config: &'a LockConfiguration,
    ) -> BoxFuture<'a, Result<Option<LockGuard>>> {
        Box::pin(async move {
            let mut answers = self
                .inner
                .acquire_many(std::slice::from_ref(config))
                .await?;
            answers.pop().unwrap_or(Ok(None))
        })
    }

    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
        Box::pin(async move {
            if configs.is_empty() {
                return Ok(Vec::new());
            }
            self.inner.acquire_many(configs).await
        })
    }

    fn is_held<'a>(&'a self, name: &'a str, fencing_token: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.is_held(name, fencing_token))
    }

    fn backend(&self) -> Backend {
        Backend::Redis
    }

    /// The key prefix, which stands for the table.
    fn table_name(&self) -> &str {
        &self.inner.prefix
    }

    fn locked_by(&self) -> &str {
        &self.inner.settings.locked_by
    }

    fn keep_alive(&self) -> KeepAlive {
        self.inner.settings.keep_alive
    }

    fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
        Box::pin(self.inner.now())
    }
    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        Some(self)
    }
}

impl LockAdmin for RedisLockProvider {
    /// Nothing to create in Redis: checks, in one script, that the server answers, that the key
    /// prefix's set of names (`{<prefix>}:names`) is a set or absent, and that the keys of every
    /// lock it names are hashes or absent.
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.inner.states(Which::All).await.map(drop) })
    }

    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        Box::pin(self.inner.states(Which::All))
    }

    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        Box::pin(async move {
            let names = [name.to_owned()];
            Ok(self.inner.states(Which::Named(&names)).await?.pop())
        })
    }

    fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
        Box::pin(self.inner.states(Which::Named(names)))
    }

    fn force_release<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.force_release(name, fencing_token))
    }
}

/// A time the scripts wrote, in microseconds since the epoch.
fn parse_time(micros: &str) -> DateTime<Utc> {
    micros
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_micros)
        .unwrap_or_default()
}

/// A duration in whole microseconds, as the scripts take it.
fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// What tests and benchmarks need and users do not (feature `test-util`, as in tokio).
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod test_util {
    use crate::scripts;

    /// The Lua text of script `name` (`acquire`, `extend`, `unlock`, `is_held`, `release`,
    /// `states`, `now`), exactly as the provider sends it; `None` for an unknown name. Its
    /// `KEYS` and `ARGV` are described on each script in `shedlock-redis/src/scripts.rs`.
    pub fn script(name: &str) -> Option<&'static str> {
        Some(match name {
            "acquire" => scripts::ACQUIRE,
            "extend" => scripts::EXTEND,
            "unlock" => scripts::UNLOCK,
            "is_held" => scripts::IS_HELD,
            "release" => scripts::RELEASE,
            "states" => scripts::STATES,
            "now" => scripts::NOW,
            _ => return None,
        })
    }
}
