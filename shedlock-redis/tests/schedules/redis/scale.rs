//! Many writers and a poller; 100,000 schedules.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use futures_util::{StreamExt, TryStreamExt, stream};
use shedlock::schedules::{ScheduleChange, ScheduleStore};
use tokio::sync::Mutex;

use super::{Keys, job};

/// Eight writers make twenty updates each while a poller reads what changed since the
/// version it last saw: every update with a version in a poll's range is in that poll's
/// answer (at that version or a later one), and each answer is ordered by version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_schedules_a_poller_never_misses_a_change_of_concurrent_writers() {
    let k = Keys::new().await;
    let p = Arc::new(k.provider.clone());
    let writers = 8;
    let updates = 20;
    for w in 0..writers {
        p.create_schedule(&job(&format!("w{w}"), "0 * * * * *"), "setup")
            .await
            .unwrap();
    }
    let start = p.schedules_version().await.unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    type Poll = (i64, Vec<(String, i64)>);
    let polls: Arc<Mutex<Vec<Poll>>> = Arc::default();
    let poller = {
        let (p, done, polls) = (Arc::clone(&p), Arc::clone(&done), Arc::clone(&polls));
        tokio::spawn(async move {
            let mut seen = start;
            loop {
                let last = done.load(Ordering::SeqCst);
                if p.schedules_version().await.unwrap() > seen {
                    let rows = p.schedules_since(seen).await.unwrap();
                    assert!(rows.windows(2).all(|w| w[0].version < w[1].version));
                    assert!(rows.iter().all(|r| r.version > seen));
                    let max = rows.iter().map(|r| r.version).max().unwrap();
                    polls.lock().await.push((
                        seen,
                        rows.iter().map(|r| (r.name.clone(), r.version)).collect(),
                    ));
                    seen = max;
                }
                if last {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut tasks = Vec::new();
    for w in 0..writers {
        let p = Arc::clone(&p);
        tasks.push(tokio::spawn(async move {
            let name = format!("w{w}");
            let mut versions = Vec::new();
            for i in 0..updates {
                let change = ScheduleChange::new().paused(i % 2 == 0);
                versions.push(
                    p.update_schedule(&name, &change, "writer")
                        .await
                        .unwrap()
                        .version,
                );
            }
            (name, versions)
        }));
    }
    let mut made = Vec::new();
    for t in tasks {
        let (name, versions) = t.await.unwrap();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        made.extend(versions.into_iter().map(|v| (name.clone(), v)));
    }
    done.store(true, Ordering::SeqCst);
    let seen = poller.await.unwrap();
    let mut all: Vec<i64> = made.iter().map(|(_, v)| *v).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), writers * updates, "every version is unique");
    assert_eq!(seen, p.schedules_version().await.unwrap());
    assert_eq!(seen, start + (writers * updates) as i64);
    let polls = polls.lock().await;
    for (name, v) in &made {
        let (_, rows) = polls
            .iter()
            .find(|(from, rows)| *from < *v && rows.iter().any(|(_, r)| r >= v))
            .unwrap_or_else(|| panic!("no poll covers {name} at {v}"));
        assert!(
            rows.iter().any(|(n, r)| n == name && r >= v),
            "{name} at version {v} missed by the poll {rows:?}"
        );
    }
    eprintln!("{} polls saw {} updates", polls.len(), made.len());
    drop(polls);
    k.cleanup().await;
}

/// 20,000 schedules created (64 creates in flight), then read back by one
/// `schedules_since(0)`: prints both durations. `SHEDLOCK_SOAK=1`: 100,000, the default cap on
/// run-time schedules (three minutes of the two cores beside the rest of the suite, where the
/// 20,000 take about a fifth of that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_schedules_by_the_ten_thousand_are_all_read_back() {
    let k = Keys::new().await;
    let p = &k.provider;
    let n = if std::env::var("SHEDLOCK_SOAK").is_ok_and(|v| v == "1") {
        100_000
    } else {
        20_000
    };
    let started = Instant::now();
    stream::iter(0..n)
        .map(|i| async move {
            p.create_schedule(&job(&format!("repo_sync_{i}"), "0 */15 * * * *"), "bulk")
                .await
        })
        .buffer_unordered(64)
        .try_for_each(|_| async { Ok(()) })
        .await
        .unwrap();
    let created = started.elapsed();
    let started = Instant::now();
    let all = p.schedules_since(0).await.unwrap();
    let read = started.elapsed();
    assert_eq!(all.len(), n);
    assert!(all.windows(2).all(|w| w[0].version < w[1].version));
    let names: HashMap<&str, ()> = all.iter().map(|s| (s.name.as_str(), ())).collect();
    assert_eq!(names.len(), n);
    let tail = p.schedules_since(all[n - 10].version).await.unwrap();
    assert_eq!(tail.len(), 9);
    eprintln!(
        "created {n} schedules in {:.2} s; schedules_since(0) read them in {:.3} s",
        created.as_secs_f64(),
        read.as_secs_f64()
    );
    k.cleanup().await;
}
