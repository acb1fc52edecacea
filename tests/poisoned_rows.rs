//! Rows someone else wrote wrong: a lock row whose time cannot be read (PostgreSQL `infinity`
//! or a year past chrono's 262142, a MariaDB zero date, an SQLite integer past the range of a
//! time). Each is named, never a panic: the provider lists the others and names it, a lookup
//! of it says what is wrong, and a fleet of two schedulers under `MisfirePolicy::All`, whose
//! look at the others' claims and whose catch-up read such rows, keeps firing every other job,
//! each tick once. (The `shedlock` tool's `list` and `unlock` of such rows: the tool's tests.)
#![allow(missing_docs)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shedlock::scheduler::MisfirePolicy;
use shedlock::{
    Error, Job, LockAdmin, LockConfiguration, LockContext, LockProvider, Schedule, Scheduler,
};
use shedlock_suite::{Opts, SqlTestDb, poison, scheduler_suite::eventually};

/// The provider names the row it cannot read and reads every other one.
async fn unreadable_rows_are_named_and_the_others_read<D: SqlTestDb>(db: &D) {
    let provider = db.provider_with(Opts::default().locked_by("me")).await;
    let cfg =
        |name: &str| LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
    let guard = provider.lock(&cfg("a_good")).await.unwrap().unwrap();
    let problem = poison(db, "b_bad", false).await;
    let second = poison(db, "c_bad", true).await;

    let rows = provider.lock_rows().await.unwrap();
    let names: Vec<&str> = rows.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["a_good"], "{rows:?}");
    let unreadable: Vec<&str> = rows.unreadable.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(unreadable, ["b_bad", "c_bad"], "{rows:?}");
    assert!(
        rows.unreadable[0].problem.contains("`locked_until`")
            && rows.unreadable[0].problem.contains(problem),
        "{rows:?}"
    );
    assert!(rows.unreadable[1].problem.contains(second), "{rows:?}");

    let locks = provider.locks().await.unwrap();
    assert_eq!(locks.len(), 1);
    let names = [
        "a_good".to_owned(),
        "b_bad".to_owned(),
        "zz_none".to_owned(),
    ];
    let states = provider.lock_states(&names).await.unwrap();
    assert_eq!(states.len(), 1, "{states:?}");
    assert_eq!(states[0].fencing_token, guard.fencing_token());

    match provider.lock_state("b_bad").await {
        Err(Error::UnreadableRow { name, problem, .. }) => {
            assert_eq!(name, "b_bad");
            assert!(problem.contains("locked_until"), "{problem}");
        }
        other => panic!("an unreadable row is an error naming it: {other:?}"),
    }
    let message = provider.lock_state("b_bad").await.unwrap_err().to_string();
    assert!(
        message.contains("\"b_bad\"") && message.contains(problem),
        "{message}"
    );

    assert!(guard.unlock().await.unwrap());
    // A time that cannot be read is no lease that ran out on PostgreSQL (`infinity`) and
    // SQLite (past any time): nobody takes the lock. MySQL's zero date lies before every
    // time, so the lock is free, and taking it writes a good row.
    let taken = provider.lock(&cfg("b_bad")).await.unwrap();
    assert_eq!(taken.is_some(), D::BACKEND == shedlock::Backend::MySql);
    if let Some(guard) = taken {
        assert!(guard.unlock().await.unwrap());
        assert!(provider.lock_state("b_bad").await.unwrap().is_some());
    }
}

/// Runs of (job, tick in µs): who ran each.
type Ledger = Arc<Mutex<HashMap<(String, i64), usize>>>;

fn jobs(ledger: &Ledger) -> Vec<Job> {
    ["p_one", "p_two", "p_three", "p_bad"]
        .into_iter()
        .map(|name| {
            let lock =
                LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
            let ledger = Arc::clone(ledger);
            Job::locked(
                name,
                Schedule::parse("* * * * * *", "UTC").unwrap(),
                lock,
                move |lock: LockContext| {
                    let ledger = Arc::clone(&ledger);
                    async move {
                        let tick = lock.tick().unwrap().timestamp_micros();
                        *ledger
                            .lock()
                            .unwrap()
                            .entry((lock.name().to_owned(), tick))
                            .or_default() += 1;
                    }
                },
            )
        })
        .collect()
}

/// Two instances scheduling the same per-second jobs under `MisfirePolicy::All`, one job's row
/// and one stray row unreadable: every other job keeps firing, each tick once, before and after
/// a restart (whose catch-up reads the rows).
async fn a_fleet_keeps_firing_beside_unreadable_rows<D: SqlTestDb>(db: &Arc<D>) {
    poison(db.as_ref(), "p_bad", false).await;
    poison(db.as_ref(), "stray", false).await;
    let ledger = Ledger::default();
    let count = |ledger: &Ledger, name: &str| {
        ledger
            .lock()
            .unwrap()
            .keys()
            .filter(|(job, _)| job == name)
            .count()
    };
    for round in 0..2 {
        let mut schedulers = Vec::new();
        for instance in 0..2 {
            let provider = db
                .provider_with(Opts::own_pool().locked_by(&format!("i{instance}")))
                .await;
            let scheduler = Scheduler::builder(provider)
                .misfire_policy(MisfirePolicy::All)
                .misfire_grace(Duration::from_secs(30))
                .build();
            for job in jobs(&ledger) {
                scheduler.add(job).unwrap();
            }
            scheduler.start();
            schedulers.push(scheduler);
        }
        let before = count(&ledger, "p_three");
        let fired = eventually(Duration::from_secs(60), async || {
            ["p_one", "p_two", "p_three"]
                .iter()
                .all(|job| count(&ledger, job) >= before + 4)
        })
        .await;
        for scheduler in &schedulers {
            scheduler.shutdown().await;
        }
        assert!(fired, "round {round}: every readable job fires: {ledger:?}");
        if round == 0 {
            // Ticks missed while the fleet is down are caught up after the restart.
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
    let ledger = ledger.lock().unwrap();
    let twice: Vec<_> = ledger.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "no tick ran twice: {twice:?}");
    // `All` ran every tick from the first, those missed while the fleet was down included (the
    // catch-up read the rows, the unreadable ones among them).
    for job in ["p_one", "p_two", "p_three"] {
        let mut ticks: Vec<i64> = ledger
            .keys()
            .filter(|(name, _)| name == job)
            .map(|(_, tick)| tick / 1_000_000)
            .collect();
        ticks.sort_unstable();
        let (first, last) = (ticks[0], ticks[ticks.len() - 1]);
        let missing: Vec<i64> = (first..=last).filter(|t| !ticks.contains(t)).collect();
        assert!(
            missing.is_empty(),
            "{job}: every tick ran, missing {missing:?} of {ticks:?}"
        );
    }
    // PostgreSQL's `infinity` and SQLite's time past any other never end: that job never
    // runs. MySQL's zero date lies before every time: its first claim writes a good row.
    let bad_ran = ledger.keys().any(|(job, _)| job == "p_bad");
    assert_eq!(
        bad_ran,
        D::BACKEND == shedlock::Backend::MySql,
        "{ledger:?}"
    );
}

shedlock_suite::backend_tests!(super => [
    unreadable_rows_are_named_and_the_others_read,
    a_fleet_keeps_firing_beside_unreadable_rows,
]);
