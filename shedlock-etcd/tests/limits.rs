//! The cluster's transaction limit: how many operations one transaction may carry
//! (`--max-txn-ops`, measured), and how a claim of more locks than fit in one is sent (split,
//! every lock still claimed once). Prints the figures.
#![allow(missing_docs)]

use std::time::Duration;

use etcd_client::{Client, DeleteOptions, Txn, TxnOp};
use shedlock::{LockConfiguration, LockProvider};
use shedlock_etcd::EtcdLockProvider;
use shedlock_etcd::testkit::etcd_url;
use shedlock_testkit::unique_name;

/// The largest `n` in `low..=high` for which `ok(n)` holds, `ok` true at `low` and monotone.
async fn largest(mut low: usize, mut high: usize, mut ok: impl AsyncFnMut(usize) -> bool) -> usize {
    while low < high {
        let mid = (low + high).div_ceil(2);
        if ok(mid).await {
            low = mid
        } else {
            high = mid - 1
        }
    }
    low
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_transaction_limits() {
    let url = etcd_url();
    let client = Client::connect([url.as_str()], None)
        .await
        .expect("etcd answers");
    let prefix = unique_name("shedlock_limits");
    let flat = largest(1, 1024, async |n| {
        let ops: Vec<TxnOp> = (0..n)
            .map(|i| TxnOp::put(format!("{prefix}/f/{i}"), "x", None))
            .collect();
        client
            .kv_client()
            .txn(Txn::new().and_then(ops))
            .await
            .is_ok()
    })
    .await;
    println!("max operations per transaction: {flat}");
    for (round, with_tick) in [false, true].into_iter().enumerate() {
        // A batch of 500 in transactions of 120 locks.
        let mut builder = EtcdLockProvider::builder(&url).table_name(format!("{prefix}_{round}"));
        builder.backend_mut().max_txn_ops(128);
        let provider = builder.build().await.unwrap();
        let configs: Vec<LockConfiguration> = (0..500)
            .map(|i| {
                let c = LockConfiguration::new(
                    format!("job{i}"),
                    Duration::from_secs(5),
                    Duration::ZERO,
                )
                .unwrap();
                if with_tick {
                    c.for_tick(chrono::Utc::now())
                } else {
                    c
                }
            })
            .collect();
        // The guards of the first attempt are kept: a dropped guard releases its lock.
        let mut kept = Vec::new();
        for attempt in 0..2 {
            let before = provider.requests_sent();
            let answers = provider.lock_many(&configs).await.unwrap();
            let taken = answers.iter().filter(|a| matches!(a, Ok(Some(_)))).count();
            println!(
                "500 locks (tick: {with_tick}), attempt {attempt}: {} requests, {taken} taken",
                provider.requests_sent() - before
            );
            assert_eq!(taken, if attempt == 0 { 500 } else { 0 });
            kept.push(answers);
        }
    }
    client
        .kv_client()
        .delete(prefix, Some(DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    assert!(flat >= 1);
}
