//! etcd for the conformance kit: a key prefix of its own per test on the cluster of
//! `SHEDLOCK_ETCD_URL` (default `http://127.0.0.1:2379`), every key under it deleted by the
//! teardown (one range delete of `<prefix>/`).
//!
//! What the suite reads back as a [`Row`] is the lock's record with its `held` and `tick` keys,
//! read together in one transaction: the remaining time is the `held` key's `locked_until`
//! less this process's clock (etcd has none) while the key of the record's token exists, else
//! negative (the lock is free). This backend implements only the methods every store can give;
//! the suites run here `without sql`.
//!
//! Feature `testkit`: `tests/kit.rs` runs the kit on it.

use std::fmt;
use std::time::Duration;

use etcd_client::{
    Client, DeleteOptions, GetOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
};
use shedlock::settings::ProviderBuilder;
use shedlock_testkit::{Opts, Proxy, Row, TestDb, host_port, skipped, unique_name};

use crate::read::{Record, parse_micros};
use crate::{BACKEND, EtcdLockProvider, EtcdTarget, pad};

/// How to start a member for the tests on this machine's loopback, as the panic of a test that
/// finds none says (`scripts/etcd start` does the same with a data folder under `target/`).
pub const HOW_TO_START: &str = "scripts/etcd start 127.0.0.1:2379  (or: etcd --data-dir /tmp/shedlock-etcd \
     --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 &)";

/// The cluster the suites use: `SHEDLOCK_ETCD_URL`, or the local default.
pub fn etcd_url() -> String {
    std::env::var("SHEDLOCK_ETCD_URL").unwrap_or_else(|_| "http://127.0.0.1:2379".into())
}

/// One test's keys on the shared etcd cluster.
pub struct Etcd {
    /// For the requests the suite sends itself.
    client: Client,
    /// The key prefix, unique to this test: what the table is to SQL.
    prefix: String,
    /// A provider with default settings on a client of its own.
    provider: EtcdLockProvider,
    /// An [`empty_database`](TestDb::empty_database)'s proxy, which its
    /// [`connect`](TestDb::connect) goes through and its [`kill_sessions`](TestDb::kill_sessions)
    /// severs.
    proxy: Option<Proxy>,
}

impl fmt::Debug for Etcd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("prefix", &self.prefix)
            .field("proxy", &self.proxy)
            .finish_non_exhaustive()
    }
}

/// A builder on `url` for the keys of `prefix`, with the options every backend takes.
fn builder(url: &str, prefix: &str, opts: Opts) -> ProviderBuilder<EtcdTarget> {
    opts.apply(EtcdLockProvider::builder(url).table_name(prefix))
}

fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

impl Etcd {
    /// Connects, for the keys of a new prefix named after `prefix`; `None` when etcd is skipped.
    async fn open(prefix: &str) -> Option<Self> {
        let url = etcd_url();
        if skipped(BACKEND) {
            eprintln!("skipped: etcd was reported unreachable by scripts/test");
            return None;
        }
        let connect = async {
            let mut client = Client::connect([url.as_str()], None).await?;
            client.status().await?;
            Ok::<_, etcd_client::Error>(client)
        };
        let client = connect.await.unwrap_or_else(|error| {
            panic!(
                "etcd at {url} is not reachable ({error}).\n  start it with: {HOW_TO_START}\n  \
                 or run scripts/test, which installs etcd and starts a member for the tests"
            )
        });
        let prefix = unique_name(prefix);
        let provider = builder(&url, &prefix, Opts::default())
            .build()
            .await
            .expect("a provider on the etcd cluster that answered");
        Some(Self {
            client,
            prefix,
            provider,
            proxy: None,
        })
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A client for requests of the test's own.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    async fn delete_prefix(&self, prefix: String) {
        self.client
            .kv_client()
            .delete(prefix, Some(DeleteOptions::new().with_prefix()))
            .await
            .expect("deleting a test's keys");
    }

    async fn put(&self, key: String, value: String) {
        self.client
            .kv_client()
            .put(key, value, None)
            .await
            .expect("writing a key by hand");
    }

    /// Where the test's runs are recorded: `<prefix>/ran/`.
    fn ran_prefix(&self) -> String {
        format!("{}/ran/", self.prefix)
    }
}

impl TestDb for Etcd {
    type Provider = EtcdLockProvider;
    const BACKEND: shedlock::Backend = BACKEND;

    async fn setup() -> Option<Self> {
        Self::open("shedlock_t").await
    }

    fn table(&self) -> String {
        self.prefix.clone()
    }

    /// The transactions and reads the provider sent, its statements; not its lease grants
    /// and revocations, which are one per distinct lease a request needs, not one per lock
    /// (a batch of five locks of three durations is one transaction after three grants sent
    /// together).
    fn statements_sent(provider: &Self::Provider) -> Option<u64> {
        Some(provider.inner.statements_sent())
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

    /// A provider of its own (its own client) whatever `opts.own_pool` says.
    async fn provider_with(&self, opts: Opts) -> Self::Provider {
        builder(&etcd_url(), &self.prefix, opts)
            .build()
            .await
            .unwrap()
    }

    async fn row(&self, name: &str) -> Option<Row> {
        let p = &self.provider;
        let txn = Txn::new().and_then([
            TxnOp::get(p.record_key(name), None),
            TxnOp::get(p.held_key(name), None),
            TxnOp::get(p.tick_key(name), None),
        ]);
        let answer = self
            .client
            .kv_client()
            .txn(txn)
            .await
            .expect("reading a lock's keys");
        let mut kvs = answer.op_responses().into_iter().map(|r| match r {
            TxnOpResponse::Get(mut get) => get.take_kvs().into_iter().next(),
            _ => None,
        });
        let (record, held, tick) = (kvs.next()?, kvs.next().flatten(), kvs.next().flatten());
        let record_kv = record?;
        let record = Record::parse(record_kv.value()).expect("a record the provider wrote");
        let token = record_kv.mod_revision();
        let now = now_us();
        let remaining_us = match held {
            Some(held) if held.create_revision() == token => {
                parse_micros(held.value()).expect("a time") - now
            }
            // Free: the time since it ended, at least a millisecond.
            _ => (record.until - now).min(-1000),
        };
        Some(Row {
            locked_by: record.by,
            fencing_token: token,
            remaining_ms: remaining_us.div_euclid(1000),
            last_tick_ms: tick.map(|t| parse_micros(t.value()).expect("a tick").div_euclid(1000)),
        })
    }

    async fn delete_row(&self, name: &str) {
        let p = &self.provider;
        let txn = Txn::new().and_then([
            TxnOp::delete(p.record_key(name), None),
            TxnOp::delete(p.held_key(name), None),
            TxnOp::delete(p.tick_key(name), None),
        ]);
        self.client.kv_client().txn(txn).await.unwrap();
    }

    async fn empty_table(&self) {
        for kind in ["record", "held", "tick"] {
            self.delete_prefix(format!("{}/{kind}/", self.prefix)).await;
        }
    }

    /// A record that expired a minute ago, by `old run`, without a `held` key. Its token is
    /// the revision of this write (a token cannot be chosen in etcd), not `token`.
    /// The record's token is its `mod_revision`, which the store gives: it is written again
    /// until that revision reaches `token` (a fresh member's revisions start at 1, so a row of
    /// token 41 takes up to 41 writes), as a record an older run left at that token would be.
    async fn insert_expired_row(&self, name: &str, token: i64) {
        let now = now_us();
        let record = Record {
            by: "old run".into(),
            at: now - 120_000_000,
            until: now - 60_000_000,
        };
        let key = self.provider.record_key(name);
        loop {
            let put = self
                .client
                .kv_client()
                .put(key.clone(), record.to_json(), None)
                .await
                .expect("writing a key by hand");
            let revision = put.header().map_or(token, |h| h.revision());
            if revision >= token {
                break;
            }
        }
    }

    /// Writes the record again, as it is: its `mod_revision` (the token) rises past the
    /// holder's, as a new holder's write would make it.
    async fn bump_token(&self, name: &str) {
        let key = self.provider.record_key(name);
        let mut kv = self.client.kv_client();
        let got = kv.get(key.clone(), None).await.unwrap();
        if let Some(record) = got.kvs().first() {
            kv.put(key, record.value().to_vec(), None).await.unwrap();
        }
    }

    async fn set_last_tick_ahead(&self, name: &str, ahead: Duration) -> bool {
        let tick = now_us() + i64::try_from(ahead.as_micros()).unwrap();
        self.put(self.provider.tick_key(name), pad(tick)).await;
        true
    }

    /// `tick token instance` under `<prefix>/ran/`, a key of its own per run.
    async fn record_run(&self, tick_ms: i64, instance: &str, token: i64) {
        let key = format!("{}{}", self.ran_prefix(), unique_name("run"));
        self.put(key, format!("{tick_ms} {token} {instance}")).await;
    }

    async fn runs(&self) -> Vec<(i64, String, i64)> {
        let got = self
            .client
            .kv_client()
            .get(
                self.ran_prefix(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Key, SortOrder::Ascend),
                ),
            )
            .await
            .expect("reading the recorded runs");
        let mut runs: Vec<(i64, String, i64)> = got
            .kvs()
            .iter()
            .map(|kv| {
                let run = String::from_utf8_lossy(kv.value()).into_owned();
                let mut parts = run.splitn(3, ' ');
                let mut next = || parts.next().expect("tick token instance").to_owned();
                let (tick, token) = (next().parse().unwrap(), next().parse().unwrap());
                (tick, next(), token)
            })
            .collect();
        runs.sort_by_key(|(_, _, token)| *token);
        runs
    }

    /// The prefix the runs are recorded under: nothing to create.
    async fn ran_table(&self) -> String {
        self.ran_prefix()
    }

    async fn provider_via_proxy(&self, opts: Opts) -> Option<(Self::Provider, Proxy)> {
        let url = etcd_url();
        let proxy = Proxy::start(host_port(&url, 2379)).await;
        let provider = builder(&proxy.url(&url), &self.prefix, opts)
            .build()
            .await
            .unwrap();
        Some((provider, proxy))
    }

    async fn empty_database(&self) -> Self {
        let mut empty = Self::open("shedlock_mig")
            .await
            .expect("etcd answered a moment ago");
        empty.proxy = Some(Proxy::start(host_port(&etcd_url(), 2379)).await);
        empty
    }

    async fn connect(&self) -> Self::Provider {
        let proxy = self
            .proxy
            .as_ref()
            .expect("connect() on an empty_database()");
        builder(&proxy.url(&etcd_url()), &self.prefix, Opts::default())
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
        self.delete_prefix(format!("{}/", self.prefix)).await;
    }
}
