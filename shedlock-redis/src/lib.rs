//! [`RedisLockProvider`]: shedlock's locks in a single Redis primary, each operation one
//! server-side Lua script run in one round trip over redis-rs's tokio
//! `ConnectionManager`.
//!
//! A provider written against `shedlock`'s public API only, as a provider for any other store
//! would be: it builds its guards with [`LockGuard::new`] over its own [`Lease`], takes its
//! settings from shedlock's [`ProviderBuilder`](shedlock::ProviderBuilder) (the key prefix is
//! what `table_name` sets) and reports failures as shedlock's [`Error`](shedlock::Error),
//! tagged [`Backend::Redis`]. It passes the same provider and scheduler suites as the SQL
//! providers.
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
mod fail;
mod lease;
mod read;
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
use redis::{FromRedisValue, Script, ScriptInvocation};
use shedlock::lease::{Acquired, Lease, Releases};
use shedlock::{
    Backend, KeepAlive, LockAdmin, LockConfiguration, LockGuard, LockProvider, LockRows, LockState,
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
    /// Scripts and commands sent (each attempt of a retried one counts).
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
    read: Script,
    check: Script,
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
            read: Script::new(scripts::READ),
            check: Script::new(scripts::CHECK),
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
        self.inner.names_key()
    }

    /// How many scripts and commands this provider has sent (each attempt of a retried one
    /// counts): one per operation, and per page of a listing one `SSCAN` and one script. For
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

    /// The key of a name that may be no UTF-8 (one found in the set of names).
    fn key_bytes(&self, kind: &str, name: &[u8]) -> Vec<u8> {
        [self.tag.as_bytes(), kind.as_bytes(), name].concat()
    }

    /// `{<prefix>}:names`.
    fn names_key(&self) -> String {
        format!("{}names", self.tag)
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
    /// operator's release and the reads change nothing more (a release then answers 0, a read
    /// finds the names it removed gone), and an acquire carries a request id with which it
    /// gets its own lease back.
    async fn run<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        operation: impl Fn() -> String,
    ) -> Result<T> {
        self.send(Request::Script(invocation), operation).await
    }

    /// Sends a command that only reads (`SSCAN`), as [`run`](Self::run) sends a script.
    async fn query<T: FromRedisValue>(
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
                Err(e) => return Err(self.fail(operation(), e)),
            }
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
        let answers: Vec<(String, Option<i64>)> = self
            .run(&invocation, || match configs {
                [one] => format!("acquire lock {:?}", one.name()),
                many => format!("claim {} locks in one script", many.len()),
            })
            .await?;
        let operation = || format!("read the answer of a claim of {} locks", configs.len());
        if answers.len() != configs.len() {
            return Err(self.unexpected(
                &operation(),
                "a different number of answers than locks".into(),
            ));
        }
        let mut decided = Vec::with_capacity(configs.len());
        for (config, (token, ahead_us)) in configs.iter().zip(answers) {
            let Some(token) = read::parse_token(token.as_bytes()) else {
                return Err(self.unexpected(&operation(), format!("the token {token:?}")));
            };
            decided.push(self.decide(config, token, ahead_us, sent_at));
        }
        Ok(decided)
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
        read::parse_time(micros.as_bytes()).ok_or_else(|| {
            self.unexpected("read the server's clock", format!("the time {micros:?}"))
        })
    }

    /// Checks that the set of names is a set or absent: one script, whatever it holds.
    pub(crate) async fn check(&self) -> Result<()> {
        let mut invocation = self.scripts.check.prepare_invoke();
        invocation.key(self.names_key());
        let _: i64 = self
            .run(&invocation, || {
                format!("check the keys under {:?}", self.tag)
            })
            .await?;
        Ok(())
    }

    /// Where the locks are, for the log line of a lock that cannot be read.
    fn place(&self) -> String {
        format!(
            "key prefix {} on the Redis server at {}",
            self.prefix, self.address
        )
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

/// What [`Inner::send`] sends.
#[derive(Clone, Copy)]
enum Request<'a, 'b> {
    Script(&'a ScriptInvocation<'b>),
    Command(&'a redis::Cmd),
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
    /// Nothing to create in Redis: checks, in one script, that the server answers (and runs
    /// this provider's scripts) and that the key prefix's set of names (`{<prefix>}:names`) is a
    /// set or absent. The same work whatever the number of locks: the keys of each lock are
    /// checked by every operation that touches them.
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.inner.check())
    }

    /// Every readable lock, ordered by name, read a page at a time ([`lock_rows`]); a lock
    /// whose keys hold a value that cannot be read is left out and logged.
    ///
    /// [`lock_rows`]: LockAdmin::lock_rows
    fn locks(&self) -> BoxFuture<'_, Result<Vec<LockState>>> {
        Box::pin(async move {
            let rows = self.inner.lock_rows().await?;
            Ok(rows.readable(&self.inner.place()))
        })
    }

    /// Every lock under the prefix, ordered by name, and those whose keys hold a value that
    /// cannot be read (a token that is no 64-bit non-negative integer, a time that is no
    /// integer, a name that is no UTF-8), each named with its key, field and value. The set of
    /// names is read a page at a time (`SSCAN`), each page's keys by one script, so no step
    /// holds the server for long; a name whose keys are both gone is removed from the set.
    fn lock_rows(&self) -> BoxFuture<'_, Result<LockRows>> {
        Box::pin(self.inner.lock_rows())
    }

    /// The lock `name`; [`Error::UnreadableRow`](shedlock::Error::UnreadableRow), naming the
    /// key, when its keys hold a value that cannot be read.
    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        Box::pin(async move {
            let names = [name.to_owned()];
            let (mut states, mut bad) = self.inner.named(&names).await?;
            match bad.pop() {
                Some(bad) => Err(bad.into_error()),
                None => Ok(states.pop()),
            }
        })
    }

    /// The locks `names` that exist and can be read, ordered by name; one that cannot be read
    /// is left out and logged.
    fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
        Box::pin(async move {
            let (states, bad) = self.inner.named(names).await?;
            let rows = bad.into_iter().map(read::Bad::into_unreadable).collect();
            Ok(LockRows::new(states, rows).readable(&self.inner.place()))
        })
    }

    fn force_release<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.force_release(name, fencing_token))
    }
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
    /// `read`, `check`, `now`), exactly as the provider sends it; `None` for an unknown name. Its
    /// `KEYS` and `ARGV` are described on each script in `shedlock-redis/src/scripts.rs`.
    pub fn script(name: &str) -> Option<&'static str> {
        Some(match name {
            "acquire" => scripts::ACQUIRE,
            "extend" => scripts::EXTEND,
            "unlock" => scripts::UNLOCK,
            "is_held" => scripts::IS_HELD,
            "release" => scripts::RELEASE,
            "read" => scripts::READ,
            "check" => scripts::CHECK,
            "now" => scripts::NOW,
            _ => return None,
        })
    }
}
