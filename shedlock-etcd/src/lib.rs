//! [`EtcdLockProvider`]: shedlock's locks in an etcd cluster (v3 API, etcd 3.4 or later), each
//! operation one etcd transaction, each lock's liveness an etcd lease that the cluster expires.
//!
//! A provider written against `shedlock`'s public API only, as a provider for any other store
//! would be: it builds its guards through [`Acquired::into_guard`](shedlock::lease::Acquired)
//! over its own [`Lease`](shedlock::lease::Lease), takes its settings from shedlock's
//! [`ProviderBuilder`] (the key prefix is what `table_name` sets) and reports failures as
//! shedlock's [`Error`], tagged `Backend::Other("etcd")` ([`BACKEND`]).
//!
//! # Keys
//!
//! Under the prefix `<p>` (default `shedlock`), each lock `name` has up to three keys:
//!
//! - `<p>/record/<name>`: the record, JSON `{"by", "at", "until"}` (times in microseconds since
//!   1970), written by every acquisition and by nothing else; no lease, so it outlives the lock.
//!   Its `mod_revision` is the lock's **fencing token** (see below).
//! - `<p>/held/<name>`: present while the lock is held, attached to an etcd lease that the
//!   cluster expires; its value is `locked_until` (20 digits of microseconds), its
//!   `create_revision` the holder's token.
//! - `<p>/tick/<name>`: the newest cron tick claimed through the lock (20 digits of
//!   microseconds); no lease.
//!
//! # Fencing tokens
//!
//! A token is the store's revision of the transaction that took the lock (the header of its
//! response). etcd's revision grows by one with every write anywhere in the store and never
//! goes back (not on a restart, not on a compaction, not when a key is deleted), so a token
//! is strictly greater than every earlier token of the same name, also after its keys were
//! deleted by hand. Locks taken in one transaction (a tick's batch) share the revision.
//!
//! # Expiry
//!
//! In [`ClockMode::Database`](shedlock::settings::ClockMode::Database) the cluster decides: a
//! lock is held while its `held` key exists, and the key lives on a lease whose TTL is
//! `lock_at_most_for` rounded up to whole seconds (etcd's unit), raised by the server to its
//! minimum TTL (1.5 election timeouts rounded up: 2 s with etcd's defaults). The lease is
//! granted after the acquirer read its clock for `locked_at`, so the cluster never ends a lock
//! before `locked_at + lock_at_most_for`; it may end it up to the rounding later (and later
//! still after a leader change, which renews leases). A shorter `lock_at_most_for` is honoured
//! as the guard honours it (its body is paused when its own lease runs out) while the cluster
//! keeps others out until the lease ends. `lock_at_least_for` is kept after an unlock by
//! putting the `held` key again under a new lease of the time that remains, instead of
//! deleting it.
//!
//! etcd has no clock to read: `locked_at`, `locked_until` as reported and the tick tolerance
//! are measured by this process's clock (the application's clock in
//! [`ClockMode::Application`](shedlock::settings::ClockMode::Application), where a lock whose
//! `locked_until` that clock has passed is also free, as with the SQL providers).
//!
//! # Batches
//!
//! [`lock_many`](LockProvider::lock_many) claims a tick's locks in one transaction, one nested
//! transaction per lock, after one lease grant per distinct `lock_at_most_for` (sent
//! together): two round trips whatever the batch. etcd refuses a transaction with more
//! operations than its `--max-txn-ops` ([`EtcdTarget::max_txn_ops`], 128 by default) and counts
//! nested levels against what the levels above left, so one transaction carries
//! `max_txn_ops - 8` locks (120); a larger batch is several transactions, sent together. A lease
//! nothing was put on is revoked in the background. The unlocks that end together go the same
//! way: one read, one grant per distinct time still to keep, one transaction.
//!
//! # Credentials
//!
//! A cluster with authentication on takes a user and password: in the endpoint
//! (`http://user:password@host:2379`, percent-encoded as in any URL; the client gets the
//! endpoint without them and authenticates with them) or in the client's options
//! ([`EtcdTarget::options`] with `ConnectOptions::with_user`). `build()` reads one key under
//! the prefix after the cluster answered, so a cluster that wants credentials none were given
//! for is reported then, as [`Error::Auth`] saying so, and a refused password as
//! [`Error::Auth`] too; endpoints that name different credentials, or a user without a
//! password, are refused as [`Error::InvalidSetting`]. No password shows in an error,
//! [`address`](EtcdLockProvider::address) or `Debug` value.
//!
//! # Administration
//!
//! [`LockAdmin`]: `locks` lists the records a page of 128 at a time and reads each page's keys
//! in one transaction; `lock_states` reads the named locks in one transaction per batch;
//! `force_release` deletes the `held` key where the token still holds (token and tick stay).
//! A lock is reported held while its `held` key exists, also past `locked_until`.
//!
//! # Run history
//!
//! [`RunStore`](shedlock::RunStore): the scheduler's run history, its ledger of due ticks and
//! its alerts, in keys beside the locks (`<p>/run/…`, `<p>/end/…`, `<p>/runs/…`; see the
//! `history` module's documentation in the source for each key). Ids come from the store's
//! revision; the times are this process's clock. etcd keeps no schedules
//! ([`ScheduleStore`](shedlock::schedules::ScheduleStore)): the ledger of a fleet on etcd knows
//! the jobs through its instances, each sweeping its own jobs under a lock per job, and reports
//! a job whose lock no instance sweeps any more as missing its carrier.
//!
//! etcd keeps every revision of every key until it is compacted, and it compacts nothing by
//! default: each lock taken, each history row and each end is a revision more. Run the cluster
//! with `--auto-compaction-retention` (for example `1h`) so its database does not grow up to its
//! quota (2 GiB by default), past which it refuses every write; the history's retention
//! ([`RunHistory::keep_for`](shedlock::scheduler::RunHistory::keep_for)) deletes the rows, and
//! the compaction frees them.
//!
//! # Features
//!
//! - `testkit`: [`testkit::Etcd`], this store's backend for the conformance kit
//!   (`shedlock-testkit`); `tests/kit.rs` runs both suites on it, whole: the kit leaves out by
//!   itself what needs a lock shorter than [`LockProvider::shortest_lease`].
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod connect;
mod history;
mod lease;
mod read;
mod send;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use connect::{
    DEFAULT_MAX_TXN_OPS, DEFAULT_RESPONSE_TIMEOUT, EtcdTarget, MAX_KEY_PREFIX_BYTES,
};

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp, TxnResponse};
use futures_util::future::BoxFuture;
use shedlock::history::{LockRows, LockState};
use shedlock::settings::{ProviderBuilder, ProviderSettings};
use shedlock::{Backend, Error, LockAdmin, LockConfiguration, LockGuard, LockProvider, Result};

/// How this provider names its store in errors and logs: `Backend::Other("etcd")`.
pub const BACKEND: Backend = Backend::Other("etcd");

/// A lock provider over an etcd cluster: see the [crate documentation](crate) for its keys,
/// tokens and expiry.
///
/// It implements [`LockProvider`], [`LockAdmin`] and [`RunStore`](shedlock::RunStore) (the
/// run history, for
/// [`SchedulerBuilder::history`](shedlock::scheduler::SchedulerBuilder::history)); not
/// [`ScheduleStore`](shedlock::schedules::ScheduleStore).
///
/// ```no_run
/// # async fn demo() -> shedlock::Result<()> {
/// use std::time::Duration;
/// use shedlock::{LockConfiguration, LockProvider};
/// use shedlock_etcd::EtcdLockProvider;
///
/// let provider = EtcdLockProvider::builder("http://127.0.0.1:2379").build().await?;
/// let cfg = LockConfiguration::new("nightly", Duration::from_secs(1800), Duration::from_secs(10))?;
/// if let Some(guard) = provider.lock(&cfg).await? {
///     // ... the job, passing guard.fencing_token() to downstream writes ...
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct EtcdLockProvider {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    client: Client,
    /// The endpoints, comma-separated, for messages.
    address: String,
    /// The key prefix, without its trailing `/`.
    prefix: String,
    settings: ProviderSettings,
    /// Requests sent (transactions, reads, lease grants and revocations).
    sent: AtomicU64,
    /// Of those, the lease grants and revocations.
    lease_requests: AtomicU64,
    /// The longest TTL, in seconds, the server raised a lease grant to (its minimum TTL); 1
    /// (etcd's unit) until it raised one.
    min_ttl: AtomicU64,
    /// Unlocks grouped into one request.
    releases: shedlock::lease::Releases,
    /// The locks one transaction carries ([`Inner::batch`]).
    batch: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for EtcdLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.inner, f)
    }
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockProvider")
            .field("address", &self.address)
            .field("key_prefix", &self.prefix)
            .field("locked_by", &self.settings.locked_by)
            .finish_non_exhaustive()
    }
}

impl EtcdLockProvider {
    /// A builder for a provider on the cluster at `endpoints` (`http://host:port`, several
    /// separated by commas), with shedlock's common settings; `build().await` connects.
    pub fn builder(endpoints: &str) -> ProviderBuilder<EtcdTarget> {
        ProviderBuilder::new(EtcdTarget::new(endpoints))
    }

    /// The endpoints, as given, each with its secrets masked (a password or token in a URL).
    pub fn address(&self) -> &str {
        &self.inner.address
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The record key of lock `name`: `<prefix>/record/<name>`.
    pub fn record_key(&self, name: &str) -> String {
        self.inner.key(Kind::Record, name)
    }

    /// The key of lock `name` that exists while it is held, on its lease:
    /// `<prefix>/held/<name>`.
    pub fn held_key(&self, name: &str) -> String {
        self.inner.key(Kind::Held, name)
    }

    /// The key of the newest claimed tick of lock `name`: `<prefix>/tick/<name>`.
    pub fn tick_key(&self, name: &str) -> String {
        self.inner.key(Kind::Tick, name)
    }

    /// How many requests this provider has sent to the cluster: transactions, reads, lease
    /// grants and revocations. For tests and benchmarks that count round trips.
    pub fn requests_sent(&self) -> u64 {
        self.inner.sent.load(Ordering::Relaxed)
    }

    /// The etcd client this provider uses, for requests of the application's own.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }
}

/// A lease the cluster granted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    pub(crate) id: i64,
}

/// The three keys of a lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Record,
    Held,
    Tick,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Record => "record",
            Kind::Held => "held",
            Kind::Tick => "tick",
        }
    }
}

impl Inner {
    pub(crate) fn key(&self, kind: Kind, name: &str) -> String {
        format!("{}/{}/{name}", self.prefix, kind.word())
    }

    /// `<prefix>/<kind>/`, the start of every key of that kind.
    pub(crate) fn kind_prefix(&self, kind: Kind) -> String {
        format!("{}/{}/", self.prefix, kind.word())
    }

    /// The time of this process (or the application's clock), which etcd does not have.
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.settings.app_now().unwrap_or_else(Utc::now)
    }

    /// Whether the application's clock decides expiry as well as the leases.
    pub(crate) fn app_clock(&self) -> bool {
        self.settings.app_now().is_some()
    }

    pub(crate) fn fail(&self, operation: String, source: etcd_client::Error) -> Error {
        Error::Database {
            backend: BACKEND,
            operation,
            location: format!("etcd at {}", self.address),
            source: Box::new(source),
        }
    }

    /// An answer that does not read as this provider wrote it.
    pub(crate) fn unexpected(&self, operation: &str, what: String) -> Error {
        Error::Database {
            backend: BACKEND,
            operation: operation.to_owned(),
            location: format!("etcd at {}", self.address),
            source: format!("unexpected answer: {what}").into(),
        }
    }

    /// Sends one transaction.
    pub(crate) async fn txn(
        &self,
        txn: Txn,
        operation: impl Fn() -> String,
    ) -> Result<TxnResponse> {
        self.txn_raw(txn)
            .await
            .map_err(|e| self.fail(operation(), e))
    }

    /// Sends one transaction, its error as etcd gave it.
    pub(crate) async fn txn_raw(
        &self,
        txn: Txn,
    ) -> std::result::Result<TxnResponse, etcd_client::Error> {
        self.resend(false, || {
            let (mut kv, txn) = (self.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
    }

    /// [`LockProvider::shortest_lease`]: a second, or the server's minimum TTL once a grant
    /// showed it.
    pub(crate) fn shortest_lease(&self) -> Duration {
        Duration::from_secs(self.min_ttl.load(Ordering::Relaxed).max(1))
    }

    /// The requests sent that were no lease grant or revocation: transactions and reads.
    #[cfg(feature = "testkit")]
    pub(crate) fn statements_sent(&self) -> u64 {
        self.sent
            .load(Ordering::Relaxed)
            .saturating_sub(self.lease_requests.load(Ordering::Relaxed))
    }

    /// The locks one transaction carries now: `max_txn_ops` at first, halved each time the
    /// cluster refuses a transaction as too large (it counts nested operations its own way).
    pub(crate) fn batch(&self) -> usize {
        self.batch.load(Ordering::Relaxed).max(1)
    }

    /// Learns that a transaction of `size` locks was too large.
    pub(crate) fn too_large(&self, size: usize) {
        self.batch.fetch_min((size / 2).max(1), Ordering::Relaxed);
    }

    /// Grants a lease of `ttl` rounded up to whole seconds (at least one; the server raises
    /// it to its minimum).
    pub(crate) async fn grant(&self, ttl: Duration) -> Result<Granted> {
        let seconds = lease_seconds(ttl);
        let granted = self
            .resend(true, || {
                self.lease_requests.fetch_add(1, Ordering::Relaxed);
                let mut lease = self.client.lease_client();
                async move { lease.grant(seconds, None).await }
            })
            .await
            .map_err(|e| self.fail(format!("grant a lease of {seconds} s"), e))?;
        if granted.ttl() > seconds {
            self.min_ttl
                .fetch_max(granted.ttl().unsigned_abs(), Ordering::Relaxed);
        }
        Ok(Granted { id: granted.id() })
    }

    /// `locked_until` of a lock taken (or extended) at `at_us` for `at_most`: `at + at_most`,
    /// the time the lock was asked for. In database-clock mode the cluster keeps it until its
    /// lease ends, at least that long ([`LockAdmin`] reports it held while its key exists).
    pub(crate) fn until(&self, at_us: i64, at_most: Duration) -> i64 {
        at_us.saturating_add(micros(at_most))
    }

    /// Revokes lease `id` in the background: one nothing was attached to. A failure only
    /// leaves it to expire by itself.
    pub(crate) fn revoke_later(&self, id: i64) {
        let mut lease = self.client.lease_client();
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.lease_requests.fetch_add(1, Ordering::Relaxed);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = lease.revoke(id).await;
            });
        }
    }

    /// `locked_until` where `name` still carries `token`: a transaction that compares the
    /// record's `mod_revision` and the `held` key's `create_revision`.
    async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let mut when = vec![
            Compare::mod_revision(self.key(Kind::Record, name), CompareOp::Equal, token),
            Compare::create_revision(self.key(Kind::Held, name), CompareOp::Equal, token),
        ];
        if self.app_clock() {
            when.push(Compare::value(
                self.key(Kind::Held, name),
                CompareOp::Greater,
                pad(micros_of(self.now())),
            ));
        }
        let answer = self
            .txn(Txn::new().when(when), || format!("check lock {name:?}"))
            .await?;
        Ok(answer.succeeded())
    }

    /// Deletes the `held` key of `name` where its record still carries `token`.
    async fn force_release(&self, name: &str, token: i64) -> Result<bool> {
        let txn = Txn::new()
            .when([
                Compare::mod_revision(self.key(Kind::Record, name), CompareOp::Equal, token),
                Compare::create_revision(self.key(Kind::Held, name), CompareOp::Equal, token),
            ])
            .and_then([TxnOp::delete(self.key(Kind::Held, name), None)]);
        let answer = self.txn(txn, || format!("release lock {name:?}")).await?;
        Ok(answer.succeeded())
    }

    /// Where the locks are, for the log line of a lock that cannot be read.
    pub(crate) fn place(&self) -> String {
        format!("key prefix {} on etcd at {}", self.prefix, self.address)
    }
}

impl LockProvider for EtcdLockProvider {
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
        BACKEND
    }

    /// The key prefix, which stands for the table.
    fn table_name(&self) -> &str {
        &self.inner.prefix
    }

    fn settings(&self) -> &ProviderSettings {
        &self.inner.settings
    }

    // `now` is the trait's: this process's clock (the application's clock in
    // application-clock mode), as etcd has none to read.

    /// A whole second at least (etcd's leases are whole seconds), or the longest TTL the
    /// server raised one of this provider's lease grants to (its minimum TTL: 2 s with etcd's
    /// defaults), once it did.
    fn shortest_lease(&self) -> Duration {
        self.inner.shortest_lease()
    }

    fn as_admin(&self) -> Option<&dyn LockAdmin> {
        Some(self)
    }
}

impl LockAdmin for EtcdLockProvider {
    /// Nothing to create in etcd: checks that the cluster answers, with one read that counts
    /// the records under the prefix.
    fn migrate(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let txn = Txn::new().and_then([TxnOp::get(
                self.inner.kind_prefix(Kind::Record),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )]);
            self.inner
                .txn(txn, || {
                    format!("check the keys under {:?}", self.inner.prefix)
                })
                .await?;
            Ok(())
        })
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

    /// Every lock under the prefix, ordered by name, and those whose keys cannot be read: the
    /// records are listed a page at a time, each page's keys read in one transaction.
    fn lock_rows(&self) -> BoxFuture<'_, Result<LockRows>> {
        Box::pin(self.inner.lock_rows())
    }

    /// The lock `name`; [`Error::UnreadableRow`] when its keys cannot be read.
    fn lock_state<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<LockState>>> {
        Box::pin(async move {
            let names = [name.to_owned()];
            let rows = self.inner.named(&names).await?;
            let (mut states, mut bad) = rows;
            match bad.pop() {
                Some(bad) => Err(bad.into_error()),
                None => Ok(states.pop()),
            }
        })
    }

    /// The locks `names` that exist and can be read, ordered by name, read in one transaction
    /// per batch of names (`max_txn_ops - 8`); one that cannot be read is left out and logged.
    fn lock_states<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<LockState>>> {
        Box::pin(async move {
            let (states, bad) = self.inner.named(names).await?;
            let rows = bad.into_iter().map(read::Bad::into_unreadable).collect();
            Ok(LockRows::new(states, rows).readable(&self.inner.place()))
        })
    }

    /// Deletes the `held` key of `name` where its record carries `fencing_token` and the lock
    /// is held by it: its token and last tick stay.
    fn force_release<'a>(
        &'a self,
        name: &'a str,
        fencing_token: i64,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.force_release(name, fencing_token))
    }
}

/// Whether etcd refused a transaction for carrying too many operations (`--max-txn-ops`):
/// nothing of it was applied.
pub(crate) fn too_many_ops(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.message().contains("too many operations"))
}

/// etcd's longest lease TTL (`MaxLeaseTTL`, 9,000,000,000 s: about 285 years).
pub(crate) const MAX_LEASE_SECONDS: i64 = 9_000_000_000;

/// Whole seconds of a lease for `ttl`: rounded up, at least one, at most
/// [`MAX_LEASE_SECONDS`].
pub(crate) fn lease_seconds(ttl: Duration) -> i64 {
    let whole = ttl
        .as_secs()
        .saturating_add(u64::from(ttl.subsec_nanos() > 0));
    i64::try_from(whole.max(1))
        .unwrap_or(i64::MAX)
        .min(MAX_LEASE_SECONDS)
}

/// A time in whole microseconds since 1970.
pub(crate) fn micros_of(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// A duration in whole microseconds.
pub(crate) fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// Microseconds as the keys keep them: 20 digits, so that etcd's byte-wise compare of values
/// orders them as numbers (a time before 1970 as 0).
pub(crate) fn pad(us: i64) -> String {
    format!("{:020}", us.max(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padded_times_order_as_numbers_byte_wise() {
        let times = [0_i64, 9, 10, 999_999, 1_764_000_000_000_000, i64::MAX];
        for pair in times.windows(2) {
            assert!(
                pad(pair[0]).as_bytes() < pad(pair[1]).as_bytes(),
                "{pair:?}"
            );
        }
        assert_eq!(pad(-5), pad(0), "a time before 1970 reads as 0");
        assert_eq!(read::parse_micros(pad(1_234).as_bytes()), Some(1_234));
        assert_eq!(read::parse_micros(b"12a"), None);
        assert_eq!(read::parse_micros(b""), None);
    }

    #[test]
    fn leases_are_whole_seconds_rounded_up() {
        assert_eq!(lease_seconds(Duration::from_millis(1)), 1);
        assert_eq!(lease_seconds(Duration::from_millis(1000)), 1);
        assert_eq!(lease_seconds(Duration::from_millis(1001)), 2);
        assert_eq!(lease_seconds(Duration::ZERO), 1);
        assert_eq!(lease_seconds(Duration::MAX), MAX_LEASE_SECONDS);
    }

    #[test]
    fn the_range_of_a_prefix_ends_after_its_last_key() {
        assert_eq!(read::prefix_end(b"p/record/"), b"p/record0".to_vec());
        assert_eq!(read::prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(read::prefix_end(b"\xff"), vec![0]);
    }

    #[test]
    fn a_record_reads_back_and_a_foreign_one_is_named() {
        let record = read::Record {
            by: "host:1".into(),
            at: 5,
            until: 7,
        };
        assert_eq!(read::Record::parse(record.to_json().as_bytes()), Ok(record));
        let bad = read::Record::parse(br#"{"by": "x", "at": "soon", "until": 1}"#).unwrap_err();
        assert!(bad.contains("\"at\""), "{bad}");
        assert!(read::Record::parse(b"not json").is_err());
    }
}
