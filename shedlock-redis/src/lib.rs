//! [`RedisLockProvider`]: shedlock's locks in a single Redis primary, each operation one
//! server-side Lua script run in one round trip over redis-rs's tokio `ConnectionManager`
//! (the operator's listing: a few small steps per page of lock names), and the schedules an
//! operator changes while the fleet runs ([`ScheduleStore`](shedlock::schedules::ScheduleStore))
//! in keys beside the locks.
//!
//! A provider written against `shedlock`'s public API only, as a provider for any other store
//! would be: it builds its guards with [`LockGuard::new`] over its own
//! [`Lease`](shedlock::lease::Lease), takes its settings from shedlock's
//! [`ProviderBuilder`](shedlock::settings::ProviderBuilder) (the key prefix is what `table_name` sets)
//! and reports failures as shedlock's [`Error`](shedlock::Error), tagged [`Backend::Redis`].
//! It passes the same provider and scheduler suites as the SQL providers.
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

mod acquire;
mod connect;
mod fail;
mod history;
mod lease;
mod read;
mod schedules;
mod scripts;
mod send;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use connect::{DEFAULT_RESPONSE_TIMEOUT, MAX_KEY_PREFIX_BYTES, RedisTarget};
pub use fail::{HISTORY_COMMANDS, REQUIRED_COMMANDS, SCHEDULE_COMMANDS};

// The README's example compiles as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;
use redis::Script;
use redis::aio::ConnectionManager;
use shedlock::history::{LockRows, LockState};
use shedlock::lease::Releases;
use shedlock::settings::ProviderSettings;
use shedlock::{Backend, LockAdmin, LockConfiguration, LockGuard, LockProvider, Result};

/// The default key prefix ([`shedlock::settings::DEFAULT_TABLE_NAME`]): keys are
/// `{shedlock}:lock:<name>`, `{shedlock}:meta:<name>` and `{shedlock}:names` for the locks,
/// `{shedlock}:schedule:<name>`, `{shedlock}:schedules` and `{shedlock}:schedules:version` for
/// the schedules.
pub const DEFAULT_KEY_PREFIX: &str = shedlock::settings::DEFAULT_TABLE_NAME;

/// A lock provider over a single Redis primary (Redis 6.2 or later, or a compatible server):
/// the lock of each name is a lease key that Redis expires beside a record that never expires,
/// each operation one Lua script run by `EVALSHA` (the listing: one per page of names).
///
/// It implements [`LockProvider`] and [`LockAdmin`], with the guarantees of the SQL providers:
/// a lease decided by the server's clock (`TIME`), fencing tokens that never go back (also
/// after its keys are deleted by hand), each tick claimed once, a tick too far ahead of the
/// server's clock refused, the jobs due at one instant claimed in one script. It implements
/// [`RunStore`](shedlock::RunStore): the run history, its ledger of due ticks and its alerts
/// live in keys beside the locks (`{P}:run:<id>` and its indexes; each write one script per 500
/// rows), so a scheduler on Redis keeps one as on an SQL store. It implements
/// [`ScheduleStore`](shedlock::schedules::ScheduleStore) (see [Schedules](#schedules)).
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::Scheduler;
/// use shedlock::scheduler::RunHistory;
/// use shedlock_redis::RedisLockProvider;
///
/// let provider = RedisLockProvider::connect("redis://127.0.0.1:6379").await?;
/// let scheduler = Scheduler::builder(provider)
///     .history(RunHistory::keep_for(Duration::from_secs(3 * 86_400)))
///     .build();
/// # Ok(()) }
/// ```
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
/// # Schedules
///
/// The schedules ([`ScheduleStore`](shedlock::schedules::ScheduleStore)) live beside the locks,
/// under the same prefix:
///
/// - `{<prefix>}:schedule:<name>`: a hash per schedule: `handler`, `payload`, `cron`,
///   `time_zone`, `paused`, `jitter`, `retry_attempts`, `retry_base`, `retry_cap`,
///   `retry_past`; `version`, `deleted`, `updated_at`, `updated_by`; and while a "run now" is
///   pending, `trigger_id`, `trigger_by`, `trigger_at`, `claimed_by`, `claimed_until`,
///   `started`; `req`, the id of the last call that wrote it (a script sent again after a
///   broken connection finds it and answers what its first run did). Durations and times are
///   whole microseconds, flags `0` or `1`. A delete keeps
///   the hash as a tombstone (`deleted` `1`, its fields kept, a request not yet started
///   dropped); creating the name again reuses it.
/// - `{<prefix>}:schedules`: a sorted set of the names, each scored by its schedule's
///   version: [`schedules_since`](shedlock::schedules::ScheduleStore::schedules_since)`(v)`
///   reads it from `(v` up, 250 schedules per script (about 2 ms of the server's time each;
///   100,000 schedules in 400 scripts).
/// - `{<prefix>}:schedules:version`: the counter each change's version comes from, one more
///   than the highest version handed out (also when the counter was deleted by hand: a new
///   version is above every score in the sorted set, so versions never go back).
/// - `{<prefix>}:backfills`: a hash of the backfills
///   ([`create_backfill`](shedlock::schedules::ScheduleStore::create_backfill)), per backfill
///   (its id) the JSON of its row, its times whole microseconds written as strings;
///   `{<prefix>}:backfill_id`: the counter their ids come from (`INCR`).
///
/// Every operation is one Lua script, atomic, which reads the server's clock (`TIME`) for
/// `updated_at` and for the leases of a run-now request (a claim, a started run), whatever the
/// clock mode of the locks. A change publishes its version on the channel
/// `{<prefix>}:schedules`; [`change_feed`](shedlock::schedules::ScheduleStore::change_feed) is a
/// `SUBSCRIBE` to it on a connection of its own, and ends when that connection is lost. A
/// server that refuses the `PUBLISH` still makes the change (the watchers poll).
///
/// Before a script is sent, a name is checked by the lock-name rules, a cron expression and
/// time zone by [`Schedule::parse`](shedlock::Schedule::parse) and a payload as JSON; a
/// run-time job without a cron, or a payload on an override, is refused by the script before
/// it writes. A field someone else wrote that does not read (`paused` `yes`, a `version` of
/// `1e9`) fails every operation on that schedule with [`Error::UnreadableRow`] naming the key,
/// the field and the value, nothing written, except an update that sets that field (which
/// repairs it); a key of another type is [`Error::WrongType`](shedlock::Error::WrongType), and
/// [`migrate`](LockAdmin::migrate) checks the types of the sorted set and the counter.
///
/// # Cluster
///
/// Every key of one prefix carries the hash tag `{<prefix>}` (`{<prefix>}:lock:<name>`,
/// `{<prefix>}:meta:<name>`, `{<prefix>}:names`), so they all live in one slot, on one shard,
/// as a lock table lives on one SQL server; every script declares each key it touches in
/// `KEYS`, and the listing's `SSCAN` names its key, so they are valid on a cluster; the one
/// exception, the schedules' read, reads the hashes of the names it finds in the sorted set,
/// which carry the same hash tag and so live in the same slot. This
/// provider connects to one node and does not follow redirections: give it the address of
/// the primary of the shard that holds the prefix's slot (`CLUSTER KEYSLOT {<prefix>}`).
///
/// # Permissions (ACL)
///
/// The provider's Redis user needs the keys `~{<prefix>}:*` and the commands
/// [`REQUIRED_COMMANDS`] (`+ping +evalsha +script|load +sscan +time +type +hget +hmget +hset
/// +pexpire +del +exists +sadd +srem`; `+select` too for a URL that names a database other
/// than 0): `PING` when it connects, `EVALSHA` for each operation, `SCRIPT LOAD` when the
/// server does not have a script yet, `SSCAN` to list the locks, and the commands the scripts
/// run. For the default prefix:
///
/// ```text
/// ACL SETUSER locks on >secret ~{shedlock}:* +ping +evalsha +script|load +sscan +time +type +hget +hmget +hset +pexpire +del +exists +sadd +srem
/// ```
///
/// The schedules need [`SCHEDULE_COMMANDS`] too (`+hgetall +hdel +get +set +zadd
/// +zrangebyscore +zrevrange +zcard +zrange +publish +subscribe +incr`) and, for the change feed,
/// the channel
/// `&{<prefix>}:schedules`. The run history needs [`HISTORY_COMMANDS`] (`+incr +zadd +zrem
/// +zrange +zrevrangebyscore +smembers +get +set +hdel`).
///
/// A command the server refuses to the user (`NOPERM`) is an [`Error::Database`] that says
/// permission denied, names the command (the server names it, except for a command a script
/// runs) and lists these rules; at `build()`, a refused `PING` is that error too, not
/// [`Error::Unreachable`].
///
/// # Values someone else wrote
///
/// A token is an integer from 0 to 2^63 − 1, a time (`at`, `until`, `tick`) whole
/// microseconds since 1970; the scripts never read either as a Lua number (a double, exact
/// only to 2^53). A value that is neither (`1e300`, `nan`, `inf`, a token past 2^63 − 1) makes
/// an operation on that lock fail with [`Error::UnreadableRow`] naming the key, the field and
/// the value, before anything is written; the next token after 2^63 − 1 does not exist, and
/// is refused the same way. [`lock_rows`](LockAdmin::lock_rows) lists such a lock among the
/// unreadable ones (and one whose name in the set is no UTF-8), [`locks`](LockAdmin::locks)
/// and [`lock_states`](LockAdmin::lock_states) leave it out and log it,
/// [`lock_state`](LockAdmin::lock_state) is that error. Fix the field or delete the lock's
/// keys: its next token is still higher than every earlier one (see the tokens above).
///
/// # Many locks
///
/// No step holds the server for long, whatever the number of names under the prefix:
/// [`migrate`](LockAdmin::migrate) is one script that checks the type of the set of names;
/// the listing reads the set with `SSCAN` (250 names a step) and the locks' keys with one
/// script per 40 names (on a loaded two-core machine, 0.3 to 0.5 ms each on average with
/// 200,000 names); a name whose keys are both gone is removed from the set by the read that
/// finds so.
///
/// [`Error::Database`]: shedlock::Error::Database
/// [`Error::Unreachable`]: shedlock::Error::Unreachable
/// [`Error::UnreadableRow`]: shedlock::Error::UnreadableRow
#[derive(Clone)]
pub struct RedisLockProvider {
    inner: Arc<Inner>,
}

struct Inner {
    conn: ConnectionManager,
    /// The client `conn` came from, for the change feed's connection of its own.
    client: redis::Client,
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
    schedules: schedules::ScheduleScripts,
    fleet: schedules::fleet::FleetScripts,
    backfills: schedules::backfills::BackfillScripts,
    history: history::HistoryScripts,
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
            schedules: schedules::ScheduleScripts::new(),
            fleet: schedules::fleet::FleetScripts::new(),
            backfills: schedules::backfills::BackfillScripts::new(),
            history: history::HistoryScripts::new(),
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
        self.inner.sent.load(std::sync::atomic::Ordering::Relaxed)
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

    /// Checks that the set of names is a set or absent, and with `schedules` the schedules'
    /// sorted set and counter: one script, whatever they hold.
    pub(crate) async fn check(&self, schedules: bool) -> Result<()> {
        let mut invocation = self.scripts.check.prepare_invoke();
        invocation.key(self.names_key());
        if schedules {
            invocation.key(self.schedules_key()).key(self.counter_key());
        }
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

impl LockProvider for RedisLockProvider {
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

    fn settings(&self) -> &ProviderSettings {
        &self.inner.settings
    }

    fn now(&self) -> BoxFuture<'_, Result<DateTime<Utc>>> {
        Box::pin(self.inner.now())
    }
    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        Some(self)
    }

    fn schedule_store(
        self: std::sync::Arc<Self>,
    ) -> Option<std::sync::Arc<dyn shedlock::schedules::ScheduleStore>> {
        Some(self)
    }
}

impl LockAdmin for RedisLockProvider {
    /// Nothing to create in Redis: checks, in one script, that the server answers (and runs
    /// this provider's scripts) and that the key prefix's set of names (`{<prefix>}:names`) is a
    /// set, the schedules' sorted set (`{<prefix>}:schedules`) a sorted set and their counter
    /// (`{<prefix>}:schedules:version`) a string, or absent. The same work whatever the number
    /// of locks and schedules: the keys of each are checked by every operation that touches
    /// them.
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.inner.check(true))
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
    /// `read`, `check`, `now`; the schedules' `schedules_version`, `schedules_since`,
    /// `schedule`, `schedule_write`, `schedule_delete`, `trigger_request`, `trigger_claim`,
    /// `trigger_start`, `trigger_finish`, `schedules_live`, `schedules_batch`), exactly as the
    /// provider sends it; `None` for an unknown name. Its
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
            other => return crate::schedules::script(other),
        })
    }
}
