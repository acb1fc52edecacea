//! The provider of `examples/memory_provider.rs`, written against `shedlock`'s public API only,
//! under what the crate builds on a provider: guards, fencing, tick claims, keep-alive, many
//! releases at once and the scheduler of several instances. If a piece a provider needs went private
//! again, this file would stop compiling.
//!
//! And the conformance kit on it, as a provider author outside this workspace would run it:
//! both suites `without sql`, over a [`TestDb`](shedlock_testkit::TestDb) of exactly the eight
//! methods the kit requires (module `kit`). What a default says this store cannot do (count
//! statements, cut a wire) is left out by the cases, each saying so on stderr.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/memory_provider.rs"]
mod memory_provider;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use memory_provider::MemoryLockProvider;
use shedlock::{
    Job, LockAdmin, LockConfiguration, LockContext, LockProvider, Schedule, Scheduler, TaskResult,
    run_locked,
};
use shedlock_suite::scheduler_suite::eventually;

const SEC: Duration = Duration::from_secs(1);

/// Who ran each (job, tick).
type Runs = HashMap<(usize, DateTime<Utc>), Vec<String>>;

fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

#[tokio::test]
async fn a_provider_outside_the_crate_hands_out_guards_with_growing_tokens() {
    let one = MemoryLockProvider::new("one");
    let two = one.instance("two");
    let cfg = config("nightly", 60 * SEC, Duration::ZERO);

    let first = one.lock(&cfg).await.unwrap().expect("free at first");
    assert!(two.lock(&cfg).await.unwrap().is_none(), "held by one");
    assert!(one.is_held("nightly", first.fencing_token()).await.unwrap());
    let token = first.fencing_token();
    assert!(
        first.unlock().await.unwrap(),
        "the row still carried the token"
    );
    assert!(!one.is_held("nightly", token).await.unwrap());

    let second = two
        .lock(&cfg)
        .await
        .unwrap()
        .expect("free after the unlock");
    assert!(second.fencing_token() > token, "tokens grow");
    assert_eq!(
        one.lock_state("nightly").await.unwrap().unwrap().locked_by,
        "two"
    );
    second.unlock().await.unwrap();

    // lock_at_least_for holds after an early unlock, through the guard's own arithmetic.
    let kept = config("kept", 60 * SEC, 30 * SEC);
    one.lock(&kept)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert!(two.lock(&kept).await.unwrap().is_none(), "kept 30 s");
}

#[tokio::test]
async fn a_tick_claimed_through_it_is_never_claimed_again() {
    let one = MemoryLockProvider::new("one");
    let two = one.instance("two");
    let tick = Utc::now();
    let cfg = config("tick", 60 * SEC, Duration::ZERO).for_tick(tick);
    one.lock(&cfg)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
    assert!(
        two.lock(&cfg).await.unwrap().is_none(),
        "the tick was claimed once and the lock is free: still refused"
    );
    let ahead =
        config("tick", 60 * SEC, Duration::ZERO).for_tick(tick + chrono::Duration::hours(1));
    let error = two.lock(&ahead).await.unwrap_err();
    assert!(
        error.to_string().contains("tick"),
        "a tick an hour ahead is refused by name: {error}"
    );
}

#[tokio::test]
async fn keep_alive_renews_its_locks_and_many_releases_at_once_all_land() {
    let provider = MemoryLockProvider::new("one");
    let other = provider.instance("two");
    // lock_at_most_for 2 s, a body of 5 s: keep-alive (default: renew every third of the
    // lease) keeps the lock held through it.
    let cfg = config("long", 2 * SEC, Duration::ZERO);
    let watcher = other.clone();
    let outcome = shedlock::with_provider(Arc::new(provider.clone()), async {
        run_locked(cfg, async move {
            tokio::time::sleep(5 * SEC).await;
            let token = LockContext::current().unwrap().fencing_token();
            watcher.is_held("long", token).await.unwrap()
        })
        .await
    })
    .await
    .unwrap();
    assert!(
        matches!(outcome, TaskResult::Executed(true)),
        "held 5 s into a 2 s lease: {outcome:?}"
    );

    // 50 unlocks at once: each one its own `unlock` (the example keeps no queue of grouped
    // releases, `Lease::releases`), all answered.
    let mut guards = Vec::new();
    for i in 0..50 {
        let cfg = config(&format!("many_{i:02}"), 60 * SEC, Duration::ZERO);
        guards.push(provider.lock(&cfg).await.unwrap().unwrap());
    }
    let answers = futures_util::future::join_all(guards.into_iter().map(|g| g.unlock())).await;
    assert!(
        answers.into_iter().all(|a| a.unwrap()),
        "every unlock answered true"
    );
    assert!(
        provider.locks().await.unwrap().iter().all(|s| !s.is_held()),
        "every lock is free"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_over_it_run_each_tick_of_each_job_once() {
    const JOBS: usize = 12;
    let store = MemoryLockProvider::new("seed");
    let runs: Arc<Mutex<Runs>> = Arc::default();
    let schedulers: Vec<Scheduler> = (0..3)
        .map(|i| {
            let who = format!("instance-{i}");
            let scheduler = Scheduler::builder(store.instance(who.clone()))
                .fleet("memory")
                .misfire_grace(Duration::ZERO)
                .build();
            for job in 0..JOBS {
                let (runs, who) = (Arc::clone(&runs), who.clone());
                scheduler
                    .add(Job::locked(
                        format!("job_{job:02}"),
                        Schedule::parse("* * * * * *", "UTC").unwrap(),
                        config(&format!("job_{job:02}"), 30 * SEC, Duration::ZERO),
                        move |lock: LockContext| {
                            let (runs, who) = (Arc::clone(&runs), who.clone());
                            async move {
                                let tick = lock.tick().expect("a scheduled run has its tick");
                                runs.lock()
                                    .unwrap()
                                    .entry((job, tick))
                                    .or_default()
                                    .push(who);
                            }
                        },
                    ))
                    .unwrap();
            }
            scheduler
        })
        .collect();
    for s in &schedulers {
        s.start();
    }
    let ticks = |runs: &Runs| {
        let mut ticks: Vec<DateTime<Utc>> = runs.keys().map(|(_, t)| *t).collect();
        ticks.sort();
        ticks.dedup();
        ticks
    };
    let enough = eventually(30 * SEC, async || ticks(&runs.lock().unwrap()).len() >= 4).await;
    for s in &schedulers {
        s.shutdown().await;
    }
    assert!(enough, "four ticks ran within 30 s");
    let runs = runs.lock().unwrap();
    let doubled: Vec<_> = runs.iter().filter(|(_, who)| who.len() > 1).collect();
    assert!(doubled.is_empty(), "a tick ran twice: {doubled:?}");
    // The ticks between the first and the last (both may be cut by start and shutdown) ran
    // every job.
    let all = ticks(&runs);
    for tick in &all[1..all.len() - 1] {
        let jobs = (0..JOBS)
            .filter(|job| runs.contains_key(&(*job, *tick)))
            .count();
        assert_eq!(jobs, JOBS, "every job ran at {tick}");
    }
}

/// The kit's hooks for the in-memory store: the eight `TestDb` requires, none of its defaults
/// overridden.
mod kit {
    use std::time::Duration;

    use shedlock::Backend;
    use shedlock::settings::ProviderBuilder;
    use shedlock_testkit::{Opts, TestDb};

    use super::memory_provider::{MemoryLockProvider, Row};

    /// One test's store.
    pub(super) struct Memory {
        provider: MemoryLockProvider,
    }

    fn fresh() -> Memory {
        Memory {
            provider: MemoryLockProvider::new(shedlock_suite::unique_name("memory")),
        }
    }

    impl TestDb for Memory {
        type Provider = MemoryLockProvider;
        const BACKEND: Backend = Backend::Other("memory");

        async fn setup() -> Option<Self> {
            Some(fresh())
        }

        fn provider(&self) -> MemoryLockProvider {
            self.provider.clone()
        }

        async fn provider_with(&self, opts: Opts) -> MemoryLockProvider {
            let builder = opts.apply(ProviderBuilder::new(()).table_name("memory"));
            let (_, settings) = builder.into_parts().expect("the options are valid");
            self.provider.with_settings(settings)
        }

        async fn delete_row(&self, name: &str) {
            self.provider.by_hand(|rows| rows.remove(name));
        }

        async fn insert_expired_row(&self, name: &str, token: i64) {
            let now = chrono::Utc::now();
            let row = Row {
                locked_until: now - Duration::from_secs(60),
                locked_at: now - Duration::from_secs(120),
                locked_by: "an older run".into(),
                token,
                last_tick: None,
            };
            self.provider
                .by_hand(|rows| rows.insert(name.to_owned(), row));
        }

        async fn bump_token(&self, name: &str) {
            self.provider.by_hand(|rows| {
                if let Some(row) = rows.get_mut(name) {
                    row.token += 1000;
                }
            });
        }

        async fn empty_database(&self) -> Self {
            fresh()
        }

        async fn connect(&self) -> MemoryLockProvider {
            self.provider
                .instance(shedlock_suite::unique_name("connected"))
        }
    }
}

mod memory {
    shedlock_testkit::provider_suite!(in super::kit::Memory, without sql);
    shedlock_testkit::scheduler_suite!(in super::kit::Memory, without sql);
}
