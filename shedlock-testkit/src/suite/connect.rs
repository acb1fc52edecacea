//! A provider made by `connect(url)`, as the README shows: it owns its pool and keeps the
//! connections it used checked out between statements (no pool pings), so a connection the
//! server closed in the meantime must cost no failed call.

use std::time::Duration;

use futures_util::future::join_all;
use shedlock::history::{NewRun, RunOutcome, RunQuery};
use shedlock::{LockAdmin, LockProvider};

use super::{LONG, cfg};
use crate::db::TestDb;

/// Every session of a provider from `connect(url)` ended by the server (PostgreSQL
/// `pg_terminate_backend`, MariaDB `KILL`), twice: each time the next `lock()` still takes the
/// lock, with no error (the statement that met a closed connection ran again on a fresh one),
/// and so do four locks at once (every held connection was closed), the unlocks, the operator's
/// listing and the run history (where the backend keeps one). The table shows the tokens the
/// guards were given. SQLite has no server and no session to end: there the case runs the same
/// calls, nothing is killed. On Redis, whose provider has one connection, the connections are
/// closed by a proxy in front of the server (`TestDb::kill_sessions`).
pub async fn connect_provider_recovers_when_the_server_ends_its_sessions<D: TestDb>(db: &D) {
    let empty = db.empty_database().await;
    let provider = empty.connect().await;
    provider
        .migrate()
        .await
        .expect("migrate through connect(url)");
    let configs: Vec<_> = (0..4)
        .map(|i| cfg(&format!("w{i}"), LONG, Duration::ZERO))
        .collect();
    // Four connections in use at once, then held by the provider.
    let four = async || {
        let guards = join_all(configs.iter().map(|c| provider.lock(c)))
            .await
            .into_iter()
            .map(|g| {
                g.expect("lock after the sessions were ended")
                    .expect("free")
            })
            .collect::<Vec<_>>();
        for guard in guards {
            assert!(guard.unlock().await.expect("unlock"));
        }
    };
    four().await;
    for round in 0..2 {
        match empty.kill_sessions().await {
            Some(killed) => assert!(killed >= 1, "round {round}: no session to end"),
            None if round == 0 => eprintln!(
                "left out: ending the sessions: {} has none to end (TestDb::kill_sessions)",
                D::BACKEND
            ),
            None => {}
        }
        // Let the server finish closing them.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let guard = provider
            .lock(&cfg("job", LONG, Duration::ZERO))
            .await
            .unwrap_or_else(|e| panic!("round {round}: the first lock() after the kill: {e}"))
            .expect("free");
        let row = empty.row("job").await.expect("the lock's row");
        assert_eq!(row.fencing_token, guard.fencing_token(), "round {round}");
        assert!(row.remaining_ms > 0, "round {round}: held, {row:?}");
        assert!(guard.unlock().await.expect("unlock"));
        four().await;
        let listed = provider.locks().await.expect("locks() after the kill");
        assert_eq!(listed.len(), 5, "round {round}: {listed:?}");
        if let Some(history) = D::run_store(&provider) {
            let id = history
                .record_run(&NewRun::new("job", "job", None, RunOutcome::Executed))
                .await
                .expect("record_run after the kill");
            let runs = history.runs(&RunQuery::latest(10)).await.unwrap();
            assert_eq!(runs[0].id, id, "round {round}");
        }
    }
    empty.teardown().await;
}

/// Many more statements at once than a `connect(url)` provider has connections (its pool of
/// up to 32, or 10 on SQLite, every one kept between statements): every one gets a connection,
/// as connections come back to the provider, and none waits out the pool's 10 s timeout beside
/// idle held connections (a connection given back goes to the statement waiting longest).
pub async fn more_statements_at_once_than_connections_all_get_one<D: TestDb>(db: &D) {
    let empty = db.empty_database().await;
    let provider = empty.connect().await;
    provider.migrate().await.expect("migrate");
    for round in 0..3 {
        let configs: Vec<_> = (0..200)
            .map(|i| cfg(&format!("many_{round}_{i}"), LONG, Duration::ZERO))
            .collect();
        let started = std::time::Instant::now();
        let answers = join_all(configs.iter().map(|c| provider.lock(c))).await;
        let failed: Vec<String> = answers
            .iter()
            .filter_map(|a| a.as_ref().err().map(ToString::to_string))
            .collect();
        assert!(
            failed.is_empty(),
            "round {round}: {} of 200 locks failed after {:?}, first: {}",
            failed.len(),
            started.elapsed(),
            failed[0]
        );
        let guards: Vec<_> = answers
            .into_iter()
            .map(|a| a.unwrap().expect("free"))
            .collect();
        let unlocked = join_all(guards.into_iter().map(|g| g.unlock())).await;
        assert!(
            unlocked.into_iter().all(|u| u.expect("unlock")),
            "round {round}"
        );
    }
    empty.teardown().await;
}

/// Eight workers cycling locks of their own on one `connect(url)` provider for 2 s, after one
/// statement opened its first connection: each worker gets its turn, none fewer than a fifth
/// of the mean cycles. Until issue 24 a connection given back cancelled the pool's connection
/// still opening for a waiting statement, so in some runs the provider stayed at the two or
/// three connections it had when the burst began, its workers queued for them at a fifth of the
/// database's pace, and one worker finished 1 cycle where the mean was 438.
pub async fn workers_on_a_connect_provider_each_get_their_turn<D: TestDb>(db: &D) {
    const WORKERS: usize = 8;
    let empty = db.empty_database().await;
    let provider = empty.connect().await;
    provider.migrate().await.expect("migrate");
    let deadline = tokio::time::Instant::now() + 2 * super::SEC;
    let tasks = (0..WORKERS).map(|w| {
        let provider = provider.clone();
        tokio::spawn(async move {
            let c = cfg(&format!("w{w}"), LONG, Duration::ZERO);
            let mut cycles = 0usize;
            while tokio::time::Instant::now() < deadline {
                let guard = provider
                    .lock(&c)
                    .await
                    .expect("lock")
                    .expect("its own name");
                assert!(guard.unlock().await.expect("unlock"));
                cycles += 1;
            }
            cycles
        })
    });
    let cycles: Vec<usize> = join_all(tasks)
        .await
        .into_iter()
        .map(|c| c.expect("a worker panicked"))
        .collect();
    let mean = cycles.iter().sum::<usize>() / WORKERS;
    eprintln!("{}: cycles per worker {cycles:?}", D::BACKEND);
    assert!(
        cycles.iter().all(|&c| c * 5 >= mean),
        "a worker starved: {cycles:?} (mean {mean})"
    );
    empty.teardown().await;
}

/// The cases of this file, for [`provider_suite!`](macro@crate::provider_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_connect {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            connect_provider_recovers_when_the_server_ends_its_sessions,
            more_statements_at_once_than_connections_all_get_one,
            workers_on_a_connect_provider_each_get_their_turn,
        ]);
    };
    (sql $db:ty) => {};
}
