//! [`RedisLockProvider`]: the locks in a single Redis primary, each operation one server-side
//! script ([`scripts`]) run in one round trip over redis-rs's tokio
//! [`ConnectionManager`](redis::aio::ConnectionManager).

mod scripts;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisError, Script, ScriptInvocation};
use tokio::time::Instant;

use crate::lease::{Lease, Releases, Unlock};
use crate::settings::{validate_locked_by, validate_tick_tolerance};
use crate::sql::micros;
use crate::{
    Backend, ClockMode, DEFAULT_TICK_TOLERANCE, Error, KeepAlive, LockAdmin, LockConfiguration,
    LockGuard, LockProvider, LockState, Result, default_locked_by,
};

/// The default key prefix: keys are `{shedlock}:lock:<name>`, `{shedlock}:meta:<name>` and
/// `{shedlock}:names`.
pub const DEFAULT_KEY_PREFIX: &str = "shedlock";

/// The longest key prefix accepted, in bytes.
pub const MAX_KEY_PREFIX_BYTES: usize = 48;

/// How long a script may go without an answer before it fails as [`Error::Timeout`], unless
/// the builder sets another.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A lock provider over a single Redis primary (Redis 6.2 or later, or a compatible server):
/// the lock of each name is a lease key that Redis expires beside a record that never expires,
/// each operation one Lua script run by `EVALSHA`.
///
/// It implements [`LockProvider`] and [`LockAdmin`], with the guarantees of the SQL providers:
/// a lease decided by the server's clock (`TIME`), fencing tokens that never go back (also
/// after its keys are deleted by hand), each tick claimed once, a tick too far ahead of the
/// server's clock refused, the jobs due at one instant claimed in one script. It does not
/// implement [`RunStore`](crate::RunStore): the run history lives in an SQL table, and giving
/// this provider to [`SchedulerBuilder::history`](crate::SchedulerBuilder::history) does not
/// compile.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{LockConfiguration, LockProvider, RedisLockProvider};
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
    locked_by: String,
    clock_mode: ClockMode,
    keep_alive: KeepAlive,
    tick_tolerance: Duration,
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
            .field("locked_by", &self.inner.locked_by)
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

/// Builds a [`RedisLockProvider`]: `RedisLockProvider::builder(url)`, the settings, then
/// `.build().await`, which validates every setting and connects.
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use shedlock::RedisLockProvider;
///
/// let provider = RedisLockProvider::builder("redis://:secret@redis.internal:6379/0")
///     .key_prefix("reports")
///     .locked_by("reports-worker-1")
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "call .build().await to get the provider"]
pub struct RedisProviderBuilder {
    url: String,
    prefix: String,
    locked_by: Option<String>,
    clock_mode: ClockMode,
    keep_alive: KeepAlive,
    tick_tolerance: Duration,
    response_timeout: Duration,
}

impl RedisProviderBuilder {
    /// The key prefix (default [`DEFAULT_KEY_PREFIX`]): what a table name is to the SQL
    /// providers. 1 to 48 ASCII letters, digits, `_`, `-`, `.`, `:` or `/`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Who holds the lock, as recorded in its keys (default: [`default_locked_by`]).
    pub fn locked_by(mut self, locked_by: impl Into<String>) -> Self {
        self.locked_by = Some(locked_by.into());
        self
    }

    /// Which clock decides expiry (default [`ClockMode::Database`]: the server's `TIME`).
    pub fn clock_mode(mut self, mode: ClockMode) -> Self {
        self.clock_mode = mode;
        self
    }

    /// Keep-alive settings (default: on, lease `lock_at_most_for`, renewed every third).
    pub fn keep_alive(mut self, keep_alive: KeepAlive) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// How far ahead of the server's clock a claimed tick may be (default
    /// [`DEFAULT_TICK_TOLERANCE`], 1 s), as for the SQL providers.
    pub fn tick_tolerance(mut self, tolerance: Duration) -> Self {
        self.tick_tolerance = tolerance;
        self
    }

    /// How long a script may go without an answer before it fails as [`Error::Timeout`]
    /// (default [`DEFAULT_RESPONSE_TIMEOUT`], 10 s). It also bounds `build()`: the first
    /// connection, with its retries, and its first command.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Validates the settings, connects, checks that the server answers a `PING`, and builds
    /// the provider.
    ///
    /// A URL redis-rs cannot read is [`Error::InvalidRedisUrl`]; a server that does not answer
    /// within the response timeout is [`Error::RedisUnreachable`], one that refuses the
    /// password (or wants one the URL lacks) [`Error::RedisAuth`], each naming the address.
    pub async fn build(self) -> Result<RedisLockProvider> {
        let prefix = validate_prefix(self.prefix)?;
        let locked_by = validate_locked_by(self.locked_by.unwrap_or_else(default_locked_by))?;
        let tick_tolerance = validate_tick_tolerance(self.tick_tolerance)?;
        if self.response_timeout.is_zero() {
            return Err(Error::InvalidRedisUrl {
                url: redact(&self.url),
                reason: "the response timeout must be greater than zero".into(),
            });
        }
        if self.url.to_ascii_lowercase().starts_with("rediss://") {
            // rustls needs a process-wide cryptography provider; one the application installed
            // is kept.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client =
            redis::Client::open(self.url.as_str()).map_err(|e| Error::InvalidRedisUrl {
                url: redact(&self.url),
                reason: e.to_string(),
            })?;
        let address = client.get_connection_info().addr().to_string();
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.response_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_secs(1));
        let tls = self.url.starts_with("rediss:");
        let connect = async {
            let mut conn = ConnectionManager::new_with_config(client, config).await?;
            // A server that wants a password the URL lacks accepts the connection and refuses
            // its first command: ask it now, not at the first lock.
            redis::cmd("PING")
                .query_async::<()>(&mut conn)
                .await
                .map(|()| conn)
        };
        let conn = match tokio::time::timeout(self.response_timeout, connect).await {
            Ok(connected) => connected.map_err(|source| connect_error(&address, tls, source))?,
            Err(_) => {
                let source = RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "no answer within {}",
                        humantime::format_duration(self.response_timeout)
                    ),
                ));
                return Err(connect_error(&address, tls, source));
            }
        };
        Ok(RedisLockProvider {
            inner: Arc::new(Inner {
                conn,
                address,
                tag: format!("{{{prefix}}}:"),
                prefix,
                locked_by,
                clock_mode: self.clock_mode,
                keep_alive: self.keep_alive,
                tick_tolerance,
                response_timeout: self.response_timeout,
                scripts: Scripts::new(),
                sent: AtomicU64::new(0),
                request_prefix: request_prefix(),
                requests: AtomicU64::new(0),
                releases: Releases::default(),
            }),
        })
    }
}

impl RedisLockProvider {
    /// Connects to `url` (`redis://[user][:password@]host[:port][/db]`, or `rediss://` for
    /// TLS) with default settings: key prefix `shedlock`, the server's clock, default
    /// `locked_by`. One multiplexed connection, reconnected when it breaks.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).build().await
    }

    /// A builder to set the key prefix, `locked_by`, clock mode, keep-alive or timeouts.
    pub fn builder(url: impl Into<String>) -> RedisProviderBuilder {
        RedisProviderBuilder {
            url: url.into(),
            prefix: DEFAULT_KEY_PREFIX.into(),
            locked_by: None,
            clock_mode: ClockMode::Database,
            keep_alive: KeepAlive::default(),
            tick_tolerance: DEFAULT_TICK_TOLERANCE,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
        }
    }

    /// The server's address, `host:port`.
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The lease key of lock `name`: `{<prefix>}:lock:<name>`. Redis expires it when the lease
    /// runs out.
    pub fn lock_key(&self, name: &str) -> String {
        self.inner.key("lock:", name)
    }

    /// The record key of lock `name`: `{<prefix>}:meta:<name>`, which keeps the newest fencing
    /// token and claimed tick and never expires.
    pub fn meta_key(&self, name: &str) -> String {
        self.inner.key("meta:", name)
    }

    /// The set of every lock name: `{<prefix>}:names`.
    pub fn names_key(&self) -> String {
        format!("{}names", self.inner.tag)
    }

    /// How many scripts this provider has sent (each attempt of a retried one counts). For
    /// tests and benchmarks that count round trips.
    #[cfg(feature = "test-util")]
    pub fn statements_sent(&self) -> u64 {
        self.inner.sent.load(Ordering::Relaxed)
    }
}

impl Inner {
    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}{kind}{name}", self.tag)
    }

    fn app_now(&self) -> String {
        match &self.clock_mode {
            ClockMode::Database => String::new(),
            ClockMode::Application(clock) => clock.now().timestamp_micros().to_string(),
        }
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
            return Error::RedisWrongType {
                address: self.address.clone(),
                key: key.to_owned(),
                found: found.to_owned(),
            };
        }
        if is_auth(&source) {
            return Error::RedisAuth {
                address: self.address.clone(),
                source,
            };
        }
        if source.is_timeout() {
            return Error::Timeout {
                operation: format!("{operation} on the Redis server at {}", self.address),
                after: self.response_timeout,
            };
        }
        Error::Redis {
            address: self.address.clone(),
            operation,
            source,
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
            .arg(&self.locked_by)
            .arg(micros(self.tick_tolerance))
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
            return Err(Error::Redis {
                address: self.address.clone(),
                operation: format!("read the answer of a claim of {} locks", configs.len()),
                source: RedisError::from((
                    redis::ErrorKind::UnexpectedReturnType,
                    "a different number of answers than locks",
                )),
            });
        }
        Ok(configs
            .iter()
            .zip(answers)
            .map(|(config, (token, ahead_us))| self.decide(config, token, ahead_us, sent_at))
            .collect())
    }

    /// What an acquire answers: a guard, `None`, or a tick refused as too far ahead.
    fn decide(
        self: &Arc<Self>,
        config: &LockConfiguration,
        token: i64,
        ahead_us: Option<i64>,
        sent_at: Instant,
    ) -> Result<Option<LockGuard>> {
        if token > 0 {
            let lease = Arc::clone(self) as Arc<dyn Lease>;
            return Ok(Some(LockGuard::new(config, token, lease, sent_at)));
        }
        match (config.tick(), ahead_us) {
            (Some(tick), Some(ahead)) if ahead > micros(self.tick_tolerance) => {
                Err(Error::TickInFuture {
                    name: config.name().to_owned(),
                    tick,
                    tolerance: self.tick_tolerance,
                    ahead_by: Some(Duration::from_micros(ahead.unsigned_abs())),
                })
            }
            _ => Ok(None),
        }
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
        if let ClockMode::Application(clock) = &self.clock_mode {
            return Ok(clock.now());
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
            .map(|(name, token, by, at, until, tick)| LockState {
                name,
                locked_until: parse_time(&until),
                locked_at: parse_time(&at),
                locked_by: by,
                fencing_token: token.parse().unwrap_or_default(),
                last_tick: tick.as_deref().map(parse_time),
                read_at,
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

impl Lease for Inner {
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let mut invocation = self.scripts.extend.prepare_invoke();
            invocation
                .key(self.key("lock:", name))
                .key(self.key("meta:", name))
                .arg(token)
                .arg(micros(at_most))
                .arg(self.app_now());
            let extended: i64 = self
                .run(&invocation, || format!("extend lock {name:?}"))
                .await?;
            Ok(extended == 1)
        })
    }

    fn unlock<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let unlock = Unlock {
                name: name.to_owned(),
                token,
                at_least,
                slack,
            };
            let released = self
                .unlock_script(std::slice::from_ref(&unlock), || {
                    format!("unlock lock {name:?}")
                })
                .await?;
            Ok(released == 1)
        })
    }

    fn unlock_many<'a>(&'a self, unlocks: &'a [Unlock]) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.unlock_script(unlocks, || {
            format!("release {} locks in one script", unlocks.len())
        }))
    }

    fn releases(&self) -> Option<&Releases> {
        Some(&self.releases)
    }
}

impl Inner {
    /// The unlock script for `unlocks`: how many it released.
    async fn unlock_script(
        &self,
        unlocks: &[Unlock],
        operation: impl Fn() -> String,
    ) -> Result<u64> {
        let mut invocation = self.scripts.unlock.prepare_invoke();
        invocation.arg(self.app_now());
        for u in unlocks {
            invocation
                .key(self.key("lock:", &u.name))
                .key(self.key("meta:", &u.name))
                .arg(u.token)
                .arg(micros(u.at_least))
                .arg(micros(u.slack));
        }
        self.run(&invocation, operation).await
    }
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
        &self.inner.locked_by
    }

    fn keep_alive(&self) -> KeepAlive {
        self.inner.keep_alive
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

/// The text of script `name`, for [`test_util::redis_script`](crate::test_util::redis_script).
#[cfg(feature = "test-util")]
pub(crate) fn script_text(name: &str) -> Option<&'static str> {
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

/// A time the scripts wrote, in microseconds since the epoch.
fn parse_time(micros: &str) -> DateTime<Utc> {
    micros
        .parse::<i64>()
        .ok()
        .and_then(DateTime::from_timestamp_micros)
        .unwrap_or_default()
}

fn validate_prefix(prefix: String) -> Result<String> {
    let refuse = |reason: &str| {
        Err(Error::InvalidKeyPrefix {
            prefix: prefix.clone(),
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

/// `url` with its password replaced by `***`, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{scheme}://{masked}@{host}{}", &rest[authority_end..])
        }
        None => url.to_owned(),
    }
}

/// Whether the server refused the credentials, or wants some it was not given: `NOAUTH`,
/// `WRONGPASS`, or the protocol error Redis 7 gives an unauthenticated client whose command is
/// too long to read before `AUTH` (every script call of more than a few keys).
fn is_auth(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || e.detail()
            .is_some_and(|d| d.starts_with("Protocol error: unauthenticated"))
}

/// What a failed first connection becomes: refused credentials, or an unreachable server. A
/// `rediss://` URL's failure says that the port may not serve TLS: a plain Redis port answers a
/// TLS handshake with nothing (it waits for the end of a line) or with an error that is no TLS.
fn connect_error(address: &str, tls: bool, source: RedisError) -> Error {
    if is_auth(&source) {
        return Error::RedisAuth {
            address: address.to_owned(),
            source,
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
    Error::RedisUnreachable {
        address: address.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://:secret@h:6379/0"), "redis://:***@h:6379/0");
        assert_eq!(redact("rediss://app:secret@h/1"), "rediss://app:***@h/1");
        assert_eq!(redact("redis://token@h"), "redis://***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
    }

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
