//! Redis: a key prefix of its own per test on the server of `SHEDLOCK_REDIS_URL`, its keys
//! (`{<prefix>}:lock:<name>`, `{<prefix>}:meta:<name>`, `{<prefix>}:names`, and the test's
//! runs in `{<prefix>}:ran`) deleted by the teardown, found with `SCAN`: other tests use the
//! same server at the same time, so nothing here flushes a database or lists every key.
//!
//! What the suite reads back as a [`Row`] is the lock's lease key while it exists, else its
//! record (`meta`), with the remaining time by the server's `TIME`, read in the same script.
//! The methods of [`TestDb`] that only mean something for SQL (statements, row locks, schemas,
//! sqlx migrations) keep the kit's defaults, which panic, saying so: the suites run here
//! `without sql`, which leaves out the cases that use them.
//!
//! Feature `testkit`: the workspace's own tests use this backend, and `tests/kit.rs` runs the
//! whole kit on it.

use std::fmt;
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use shedlock::Backend;
use shedlock::settings::ProviderBuilder;
use shedlock_testkit::{Opts, Proxy, Row, TestDb, host_port, reach, unique_name};

use crate::RedisLockProvider;
use crate::connect::RedisTarget;

/// The server the suites use: `SHEDLOCK_REDIS_URL`, or the local default.
pub fn redis_url() -> String {
    std::env::var("SHEDLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// One test's keys on the shared Redis server.
pub struct Redis {
    /// For the commands the suite sends itself.
    conn: MultiplexedConnection,
    /// The key prefix, unique to this test: what the table is to SQL.
    prefix: String,
    /// A provider with default settings on a connection of its own.
    provider: RedisLockProvider,
    /// An [`empty_database`](TestDb::empty_database)'s proxy, which its
    /// [`connect`](TestDb::connect) goes through and its [`kill_sessions`](TestDb::kill_sessions)
    /// severs.
    proxy: Option<Proxy>,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis")
            .field("prefix", &self.prefix)
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

/// `TIME` in microseconds, and `num`, which writes an integer as the provider's scripts do.
const PRELUDE: &str = "
local function num(x) return string.format('%.0f', x) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
";

/// `KEYS`: lease, record. The lease where it exists, else the record: `{by, token, until - now
/// in µs, tick or nil}`, or nil when neither has a token.
const ROW: &str = "
local source = KEYS[1]
if redis.call('EXISTS', KEYS[1]) == 0 then source = KEYS[2] end
local token = redis.call('HGET', source, 'token')
if not token then return false end
local by = redis.call('HGET', source, 'by') or ''
local untl = tonumber(redis.call('HGET', source, 'until')) or 0
return {by, token, num(untl - now), redis.call('HGET', KEYS[2], 'tick')}
";

/// `KEYS`: record, names. `ARGV`: name, token. A record that expired a minute ago, by `old run`,
/// and no lease (an expired lease is no key at all).
const INSERT_EXPIRED: &str = "
redis.call('HSET', KEYS[1], 'token', ARGV[2], 'by', 'old run', 'at', num(now - 120000000),
           'until', num(now - 60000000))
redis.call('SADD', KEYS[2], ARGV[1])
";

/// `KEYS`: lease, record. Adds 1000 to the token of each that has one.
const BUMP_TOKEN: &str = "
for _, key in ipairs(KEYS) do
  if redis.call('HEXISTS', key, 'token') == 1 then redis.call('HINCRBY', key, 'token', 1000) end
end
";

/// `KEYS`: record. `ARGV`: µs. The last claimed tick, that far past the server's clock.
const TICK_AHEAD: &str = "
redis.call('HSET', KEYS[1], 'tick', num(now + tonumber(ARGV[1])))
";

fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{PRELUDE}{body}"))
}

/// A builder on `url` for the keys of `prefix`, with the options every backend takes.
fn builder(url: &str, prefix: &str, opts: Opts) -> ProviderBuilder<RedisTarget> {
    opts.apply(RedisLockProvider::builder(url).table_name(prefix))
}

impl Redis {
    /// Connects, for the keys of a new prefix named after `prefix`; `None` when Redis is skipped.
    async fn open(prefix: &str) -> Option<Self> {
        let url = redis_url();
        let conn = reach(Backend::Redis, &url, async |url| {
            redis::Client::open(url)?
                .get_multiplexed_async_connection()
                .await
        })
        .await?;
        let prefix = unique_name(prefix);
        let provider = builder(&url, &prefix, Opts::default())
            .build()
            .await
            .expect("a provider on the Redis server that answered");
        Some(Self {
            conn,
            prefix,
            provider,
            proxy: None,
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A connection for commands of the test's own.
    pub fn connection(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    /// Every key of this test's prefix (`SCAN … MATCH {<prefix>}*`), sorted (a key that is no
    /// UTF-8, which a test may write, with its odd bytes replaced).
    pub async fn keys(&self) -> Vec<String> {
        let keys = self.scan(&format!("{{{}}}*", self.prefix)).await;
        keys.iter()
            .map(|key| String::from_utf8_lossy(key).into_owned())
            .collect()
    }

    async fn scan(&self, pattern: &str) -> Vec<Vec<u8>> {
        let mut conn = self.conn.clone();
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .expect("SCAN");
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        keys
    }

    async fn delete(&self, keys: &[Vec<u8>]) {
        if keys.is_empty() {
            return;
        }
        let mut conn = self.conn.clone();
        let _: i64 = conn.del(keys).await.expect("DEL");
    }

    /// The list the test's runs are recorded in.
    fn ran_key(&self) -> String {
        format!("{{{}}}:ran", self.prefix)
    }
}

impl TestDb for Redis {
    type Provider = RedisLockProvider;
    const BACKEND: Backend = Backend::Redis;

    async fn setup() -> Option<Self> {
        Self::open("shedlock_t").await
    }

    fn table(&self) -> String {
        self.prefix.clone()
    }

    fn statements_sent(provider: &Self::Provider) -> Option<u64> {
        Some(provider.statements_sent())
    }

    fn run_store(provider: &Self::Provider) -> Option<std::sync::Arc<dyn shedlock::RunStore>> {
        Some(std::sync::Arc::new(provider.clone()))
    }

    fn with_history(
        builder: shedlock::scheduler::SchedulerBuilder<Self::Provider>,
        history: shedlock::scheduler::RunHistory,
    ) -> shedlock::scheduler::SchedulerBuilder<Self::Provider> {
        builder.history(history)
    }

    fn provider(&self) -> Self::Provider {
        self.provider.clone()
    }

    /// A provider of its own (its own connection) whatever `opts.own_pool` says.
    async fn provider_with(&self, opts: Opts) -> Self::Provider {
        builder(&redis_url(), &self.prefix, opts)
            .build()
            .await
            .unwrap()
    }

    async fn row(&self, name: &str) -> Option<Row> {
        let mut conn = self.conn.clone();
        let row: Option<(String, String, String, Option<String>)> = script(ROW)
            .key(self.provider.lock_key(name))
            .key(self.provider.meta_key(name))
            .invoke_async(&mut conn)
            .await
            .expect("reading a lock's keys");
        row.map(|(locked_by, token, remaining_us, tick)| Row {
            locked_by,
            fencing_token: token.parse().expect("a token"),
            remaining_ms: remaining_us.parse::<i64>().unwrap().div_euclid(1000),
            last_tick_ms: tick.map(|us| us.parse::<i64>().unwrap().div_euclid(1000)),
        })
    }

    async fn delete_row(&self, name: &str) {
        let mut conn = self.conn.clone();
        let keys = [self.provider.lock_key(name), self.provider.meta_key(name)];
        let _: i64 = conn.del(&keys).await.unwrap();
        let _: i64 = conn.srem(self.provider.names_key(), name).await.unwrap();
    }

    async fn empty_table(&self) {
        let tag = format!("{{{}}}:", self.prefix);
        let mut keys = self.scan(&format!("{tag}lock:*")).await;
        keys.extend(self.scan(&format!("{tag}meta:*")).await);
        keys.push(self.provider.names_key().into_bytes());
        self.delete(&keys).await;
    }

    async fn insert_expired_row(&self, name: &str, token: i64) {
        let mut conn = self.conn.clone();
        let () = script(INSERT_EXPIRED)
            .key(self.provider.meta_key(name))
            .key(self.provider.names_key())
            .arg(name)
            .arg(token)
            .invoke_async(&mut conn)
            .await
            .unwrap();
    }

    async fn bump_token(&self, name: &str) {
        let mut conn = self.conn.clone();
        let () = script(BUMP_TOKEN)
            .key(self.provider.lock_key(name))
            .key(self.provider.meta_key(name))
            .invoke_async(&mut conn)
            .await
            .unwrap();
    }

    async fn set_last_tick_ahead(&self, name: &str, ahead: Duration) -> bool {
        let mut conn = self.conn.clone();
        let () = script(TICK_AHEAD)
            .key(self.provider.meta_key(name))
            .arg(ahead.as_micros() as i64)
            .invoke_async(&mut conn)
            .await
            .unwrap();
        true
    }

    /// `tick instance token` at the end of the list `{<prefix>}:ran`.
    async fn record_run(&self, tick_ms: i64, instance: &str, token: i64) {
        let mut conn = self.conn.clone();
        let _: i64 = conn
            .rpush(self.ran_key(), format!("{tick_ms} {token} {instance}"))
            .await
            .unwrap();
    }

    async fn runs(&self) -> Vec<(i64, String, i64)> {
        let mut conn = self.conn.clone();
        let recorded: Vec<String> = conn
            .lrange(self.ran_key(), 0, -1)
            .await
            .expect("reading the recorded runs");
        let mut runs: Vec<(i64, String, i64)> = recorded
            .iter()
            .map(|run| {
                let mut parts = run.splitn(3, ' ');
                let mut next = || parts.next().expect("tick token instance");
                let (tick, token) = (next().parse().unwrap(), next().parse().unwrap());
                (tick, next().to_owned(), token)
            })
            .collect();
        runs.sort_by_key(|(_, _, token)| *token);
        runs
    }

    /// The list the runs are recorded in: nothing to create.
    async fn ran_table(&self) -> String {
        self.ran_key()
    }

    async fn provider_via_proxy(&self, opts: Opts) -> Option<(Self::Provider, Proxy)> {
        let url = redis_url();
        let proxy = Proxy::start(host_port(&url, 6379)).await;
        let provider = builder(&proxy.url(&url), &self.prefix, opts)
            .build()
            .await
            .unwrap();
        Some((provider, proxy))
    }

    async fn empty_database(&self) -> Self {
        let mut empty = Self::open("shedlock_mig")
            .await
            .expect("Redis answered a moment ago");
        empty.proxy = Some(Proxy::start(host_port(&redis_url(), 6379)).await);
        empty
    }

    async fn connect(&self) -> Self::Provider {
        let proxy = self
            .proxy
            .as_ref()
            .expect("connect() on an empty_database()");
        builder(&proxy.url(&redis_url()), &self.prefix, Opts::default())
            .build()
            .await
            .unwrap()
    }

    async fn kill_sessions(&self) -> Option<u64> {
        let proxy = self
            .proxy
            .as_ref()
            .expect("kill_sessions() on an empty_database()");
        Some(proxy.sever() as u64)
    }

    async fn teardown(self) {
        let keys = self.scan(&format!("{{{}}}*", self.prefix)).await;
        self.delete(&keys).await;
    }
}
