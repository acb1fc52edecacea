//! Lock cycles through the provider beside the same requests sent by a plain `etcd-client`
//! loop (issue 38, point 4), at 1, 8 and 32 workers, in one run on one cluster.
//!
//! A cycle is what `provider.lock(config)` then `guard.unlock()` sends for a lock without a
//! tick and without `lock_at_least_for` (`src/acquire.rs`, `src/lease.rs`):
//!
//! 1. a lease grant of `lock_at_most_for` (30 s);
//! 2. the claim: one transaction holding a nested one, "no `held` key" then put the record and
//!    the `held` key on the lease;
//! 3. the unlock's read: one transaction holding a nested one that gets the three keys;
//! 4. the release: one transaction holding a nested one, "record and `held` key still carry
//!    the token" then delete the `held` key.
//!
//! The plain loop sends exactly these four requests with `etcd-client`, on a client of its own.
//! Each worker cycles its own lock name for `--seconds` (default 5) per row; rows alternate
//! provider and plain loop, twice each, and the table gives cycles per second and the ratio
//! (provider / plain, the better of the two runs of each). Nothing here asserts a time.
//!
//! ```text
//! cargo bench -p shedlock-etcd --bench lock_cycle                      # SHEDLOCK_ETCD_URL
//! cargo bench -p shedlock-etcd --bench lock_cycle -- --seconds 10
//! ```
//!
//! Under `cargo test` (which runs this target, `test = true`, without `--bench`) it runs a short
//! version, the test `etcd_lock_cycle`: 1 and 8 workers, one 1 s row each of the provider and of
//! the plain loop, asserting counts only: every cycle took its lock and released it (a cycle
//! that does not panics its worker, which fails the run), each side completed cycles, and the
//! provider counted at least two requests a cycle (every `lock` sends its own lease grant and
//! claim). It honours the test binary's arguments that name tests (`--skip etcd`, a filter,
//! `--list`, `--ignored`) and `SHEDLOCK_SKIP_BACKENDS`, as `scripts/test` passes them when etcd
//! is down.
#![allow(missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use shedlock::{LockConfiguration, LockProvider};
use shedlock_etcd::EtcdLockProvider;

const AT_MOST: Duration = Duration::from_secs(30);

/// The name of the short version `cargo test` runs.
const TEST_NAME: &str = "etcd_lock_cycle";

fn url() -> String {
    std::env::var("SHEDLOCK_ETCD_URL").unwrap_or_else(|_| "http://127.0.0.1:2379".to_owned())
}

/// Cycles per second of `workers` tasks, each running `cycle(worker)` until `seconds` pass,
/// and the number of cycles.
async fn rate<F, Fut>(workers: usize, seconds: u64, cycle: F) -> (f64, u64)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let cycle = Arc::new(cycle);
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let until = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let (cycle, done) = (Arc::clone(&cycle), Arc::clone(&done));
            tokio::spawn(async move {
                while Instant::now() < until {
                    cycle(w).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a worker panicked");
    }
    let cycles = done.load(Ordering::Relaxed);
    (cycles as f64 / started.elapsed().as_secs_f64(), cycles)
}

/// One cycle of the provider: lock, then unlock.
async fn provider_cycle(provider: &EtcdLockProvider, name: &str) {
    let config = LockConfiguration::new(name, AT_MOST, Duration::ZERO).unwrap();
    let guard = provider
        .lock(&config)
        .await
        .expect("the lock answers")
        .expect("the worker's own lock is free");
    assert!(guard.unlock().await.expect("the unlock answers"));
}

/// The same four requests, sent by `etcd-client` directly.
async fn plain_cycle(client: &Client, prefix: &str, name: &str, by: &str) {
    let record = format!("{prefix}/record/{name}");
    let held = format!("{prefix}/held/{name}");
    let tick = format!("{prefix}/tick/{name}");
    let now_us = chrono::Utc::now().timestamp_micros();
    let until_us = now_us + AT_MOST.as_micros() as i64;
    let mut lease = client.lease_client();
    let granted = lease.grant(AT_MOST.as_secs() as i64, None).await.unwrap();
    let write = vec![
        TxnOp::put(
            record.clone(),
            format!(r#"{{"by":"{by}","at":{now_us},"until":{until_us}}}"#),
            None,
        ),
        TxnOp::put(
            held.clone(),
            format!("{until_us:020}"),
            Some(PutOptions::new().with_lease(granted.id())),
        ),
    ];
    let claim = Txn::new()
        .when([Compare::create_revision(held.clone(), CompareOp::Equal, 0)])
        .and_then(write);
    let mut kv = client.kv_client();
    let answer = kv
        .txn(Txn::new().and_then([TxnOp::txn(claim)]))
        .await
        .unwrap();
    let token = answer.header().unwrap().revision();
    kv.txn(Txn::new().and_then([TxnOp::txn(Txn::new().and_then([
        TxnOp::get(record.clone(), None),
        TxnOp::get(held.clone(), None),
        TxnOp::get(tick, None),
    ]))]))
    .await
    .unwrap();
    let release = Txn::new()
        .when([
            Compare::mod_revision(record, CompareOp::Equal, token),
            Compare::create_revision(held.clone(), CompareOp::Equal, token),
        ])
        .and_then([TxnOp::delete(held, None)]);
    let answer = kv
        .txn(Txn::new().and_then([TxnOp::txn(release)]))
        .await
        .unwrap();
    assert!(!answer.op_responses().is_empty());
}

/// What the command line asks for.
struct Args {
    seconds: u64,
    /// Run by `cargo test` (no `--bench`): the short version, with asserts on counts.
    test: bool,
    /// `cargo test`'s arguments leave the short version out (`--skip`, a filter, `--ignored`).
    filtered_out: bool,
    /// `cargo test -- --list`: name the short version, run nothing.
    list: bool,
}

fn args() -> Args {
    let mut parsed = Args {
        seconds: 5,
        test: true,
        filtered_out: false,
        list: false,
    };
    let (mut filters, mut skips, mut exact, mut ignored_only) =
        (Vec::new(), Vec::new(), false, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => {
                parsed.seconds = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(parsed.seconds);
            }
            "--bench" => parsed.test = false,
            // What `cargo test` may pass a test binary.
            "--skip" => skips.extend(args.next()),
            "--exact" => exact = true,
            "--ignored" => ignored_only = true,
            "--list" => parsed.list = true,
            "--test-threads" | "--format" | "--color" | "--logfile" | "-Z" | "--shuffle-seed" => {
                args.next();
            }
            flag if flag.starts_with('-') => {}
            filter => filters.push(filter.to_owned()),
        }
    }
    let matches = |pattern: &String| {
        if exact {
            TEST_NAME == pattern
        } else {
            TEST_NAME.contains(pattern.as_str())
        }
    };
    // `scripts/test` names a backend it could not reach in SHEDLOCK_SKIP_BACKENDS.
    let etcd_skipped = std::env::var("SHEDLOCK_SKIP_BACKENDS")
        .is_ok_and(|v| v.split(',').any(|b| b.trim() == "etcd"));
    parsed.filtered_out = ignored_only
        || etcd_skipped
        || skips.iter().any(matches)
        || (!filters.is_empty() && !filters.iter().any(matches));
    parsed
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = args();
    if args.test && args.list {
        // `--list --ignored` (how cargo-nextest asks for ignored tests) names none.
        if !args.filtered_out {
            println!("{TEST_NAME}: test");
        }
        return;
    }
    if args.test && args.filtered_out {
        println!("{TEST_NAME}: left out by the test arguments");
        return;
    }
    // The short version: 1 s rows, 1 and 8 workers, one run of each side.
    let (seconds, worker_counts, runs): (u64, &[usize], usize) = if args.test {
        (1, &[1, 8], 1)
    } else {
        (args.seconds, &[1, 8, 32], 2)
    };
    let url = url();
    let prefix = format!("bench_{}", std::process::id());
    let provider = Arc::new(
        EtcdLockProvider::builder(&url)
            .table_name(&prefix)
            .locked_by("bench")
            .build()
            .await
            .unwrap_or_else(|e| panic!("etcd at {url}: {e}")),
    );
    let client = Client::connect([url.as_str()], None).await.unwrap();
    let plain_prefix = format!("{prefix}_plain");
    println!(
        "lock cycles (grant, claim, read, release) on etcd at {url}, {seconds} s a row, best of {runs}\n"
    );
    println!(
        "| workers | provider (cycles/s) | plain etcd-client (cycles/s) | ratio | provider's requests a cycle (plain: 4) |"
    );
    println!("|---|---|---|---|---|");
    for &workers in worker_counts {
        let (mut best_provider, mut best_plain) = (0f64, 0f64);
        let (mut requests, mut cycles, mut plain_cycles) = (0u64, 0u64, 0u64);
        for _ in 0..runs {
            let p = Arc::clone(&provider);
            let names: Arc<Vec<String>> = Arc::new((0..workers).map(|w| format!("w{w}")).collect());
            let n = Arc::clone(&names);
            let sent = provider.requests_sent();
            let (per_second, done) = rate(workers, seconds, move |w| {
                let (p, n) = (Arc::clone(&p), Arc::clone(&n));
                async move { provider_cycle(&p, &n[w]).await }
            })
            .await;
            requests += provider.requests_sent() - sent;
            cycles += done;
            best_provider = best_provider.max(per_second);
            let (c, pp, n) = (client.clone(), plain_prefix.clone(), Arc::clone(&names));
            let (per_second, done) = rate(workers, seconds, move |w| {
                let (c, pp, n) = (c.clone(), pp.clone(), Arc::clone(&n));
                async move { plain_cycle(&c, &pp, &n[w], "bench").await }
            })
            .await;
            plain_cycles += done;
            best_plain = best_plain.max(per_second);
        }
        if args.test {
            assert!(
                cycles > 0,
                "{workers} workers: the provider completed cycles"
            );
            assert!(
                plain_cycles > 0,
                "{workers} workers: the plain loop completed cycles"
            );
            assert!(
                requests >= 2 * cycles,
                "{workers} workers: {requests} requests counted for {cycles} cycles (a grant and a claim each, at least)"
            );
        }
        println!(
            "| {workers} | {best_provider:.0} | {best_plain:.0} | {:.2} | {:.2} |",
            best_provider / best_plain,
            requests as f64 / cycles.max(1) as f64
        );
    }
    let mut kv = client.kv_client();
    for p in [&prefix, &plain_prefix] {
        let _ = kv
            .delete(
                format!("{p}/"),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await;
    }
}
