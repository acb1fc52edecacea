//! The provider suite against Sqlite.
#![allow(missing_docs)]

/// Every test here is named `sqlite::…`, so a run can leave the backend out by name
/// (`scripts/test` does, with `--skip sqlite`, when its server does not answer).
mod sqlite {
    shedlock_suite::backend_tests!(in sqlite: provider suite);
    shedlock_suite::backend_tests!(in sqlite: schedule suite);

    /// Two separate pools on one file, opened the recommended way (WAL, busy timeout), hammered
    /// by several tasks each: every tick is claimed exactly once and no attempt fails with
    /// "database is locked".
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_pools_on_one_file_in_wal_mode_stay_exclusive() {
        use std::time::Duration;

        use chrono::{TimeZone, Utc};
        use shedlock::{LockConfiguration, SqliteLockProvider};
        use shedlock_suite::TestDb;

        let db = shedlock_suite::Sqlite::setup().await.unwrap();
        let pools = [
            shedlock_suite::sqlite_pool(db.path(), 4).await,
            shedlock_suite::sqlite_pool(db.path(), 4).await,
        ];
        for pool in &pools {
            let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(mode, "wal");
            let timeout: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
                .fetch_one(pool)
                .await
                .unwrap();
            assert!(timeout >= 5_000, "busy timeout {timeout} ms");
        }
        let providers: Vec<SqliteLockProvider> = pools
            .iter()
            .map(|pool| {
                SqliteLockProvider::builder(pool.clone())
                    .table_name(db.table())
                    .build()
                    .unwrap()
            })
            .collect();
        const TICKS: i64 = 40;
        let mut tasks = Vec::new();
        for task in 0..8 {
            let provider = providers[task % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut won = Vec::new();
                for t in 0..TICKS {
                    let tick = Utc.timestamp_opt(1_600_000_000 + t, 0).unwrap();
                    let cfg =
                        LockConfiguration::new("tick_job", Duration::from_secs(60), Duration::ZERO)
                            .unwrap()
                            .for_tick(tick);
                    if let Some(guard) = provider
                        .lock(&cfg)
                        .await
                        .expect("no 'database is locked' with WAL and a busy timeout")
                    {
                        won.push(t);
                        guard.unlock().await.unwrap();
                    }
                }
                won
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all.sort_unstable();
        // Tasks run at their own pace, so a slow task finds later ticks already claimed; what
        // matters is that no tick was claimed twice.
        let mut dedup = all.clone();
        dedup.dedup();
        assert_eq!(all, dedup, "a tick claimed twice");
        assert!(!all.is_empty());
        db.teardown().await;
    }

    /// SQLite keeps what a deleted row knew (`<table>_retired`, filled by a trigger): a row an
    /// operator deleted comes back with a higher token, and its claimed tick stays claimed.
    #[tokio::test]
    async fn a_deleted_row_keeps_its_claimed_tick() {
        use std::time::Duration;

        use chrono::{TimeZone, Utc};
        use shedlock::LockConfiguration;
        use shedlock_suite::TestDb;

        let db = shedlock_suite::Sqlite::setup().await.unwrap();
        let provider = db.provider();
        let tick = |n: i64| Utc.timestamp_opt(1_600_000_000 + n, 0).unwrap();
        let cfg = LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
        let guard = provider
            .lock(&cfg.clone().for_tick(tick(10)))
            .await
            .unwrap()
            .unwrap();
        let token = guard.fencing_token();
        guard.unlock().await.unwrap();
        db.delete_row("job").await;
        assert!(
            provider
                .lock(&cfg.clone().for_tick(tick(10)))
                .await
                .unwrap()
                .is_none(),
            "the claimed tick does not run again"
        );
        assert!(
            provider
                .lock(&cfg.clone().for_tick(tick(9)))
                .await
                .unwrap()
                .is_none(),
            "nor an older one"
        );
        let next = provider
            .lock(&cfg.for_tick(tick(11)))
            .await
            .unwrap()
            .expect("the next tick runs");
        assert!(next.fencing_token() > token);
        next.unlock().await.unwrap();
        db.teardown().await;
    }

    /// `:memory:` is one database shared by the pool's connections (issue 46): a lock taken
    /// on one connection is held on the others, for the life of the provider. (Before, each
    /// connection of the pool opened a database of its own, so two callers could both hold it.)
    #[tokio::test]
    async fn memory_is_one_database_for_the_whole_pool() {
        use shedlock::LockConfiguration;
        let provider = shedlock::SqliteLockProvider::connect(":memory:")
            .await
            .unwrap();
        provider.migrate().await.unwrap();
        let cfg = LockConfiguration::new(
            "in_memory",
            std::time::Duration::from_secs(60),
            std::time::Duration::ZERO,
        )
        .unwrap();
        let mut guards = Vec::new();
        let mut refused = 0;
        // Many callers at once: the pool opens several connections.
        let tries = futures_util::future::join_all((0..8).map(|_| provider.lock(&cfg))).await;
        for outcome in tries {
            match outcome.unwrap() {
                Some(guard) => guards.push(guard),
                None => refused += 1,
            }
        }
        assert_eq!((guards.len(), refused), (1, 7), "one holder");
        assert!(provider.pool().size() >= 1);
    }

    /// The file is opened with `synchronous = FULL`: a committed acquire survives a power loss.
    #[tokio::test]
    async fn connect_syncs_every_commit() {
        let dir = tempfile::tempdir().unwrap();
        let provider =
            shedlock::SqliteLockProvider::connect(&dir.path().join("l.db").display().to_string())
                .await
                .unwrap();
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(provider.pool())
            .await
            .unwrap();
        assert_eq!(level, 2, "FULL");
        let pool = shedlock_suite::sqlite_pool(&dir.path().join("m.db"), 1).await;
        let level: i64 = sqlx::query_scalar("PRAGMA synchronous")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(level, 2, "recommended_options: FULL");
    }
}
