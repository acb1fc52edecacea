//! The schedule commands on Redis: the main path of `jobs.rs` under a key prefix of its own,
//! whose keys are deleted at the end (the server is shared: nothing is flushed).

use shedlock::Backend;
use shedlock_redis::RedisLockProvider;
use shedlock_suite::unique_name;

use crate::common::HOLDER;
use crate::jobs::{at, main_path, object};

/// Deletes every key under `prefix`, found with `SCAN`.
async fn delete_keys(url: &str, prefix: &str) {
    let client = ::redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pattern = format!("{{{prefix}}}:*");
    let mut cursor = 0_u64;
    let mut keys = Vec::new();
    loop {
        let (next, found): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .unwrap();
        keys.extend(found);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    for key in keys {
        ::redis::cmd("DEL")
            .arg(&key)
            .query_async::<()>(&mut conn)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn redis_schedule_commands_main_path() {
    if shedlock_suite::skipped(Backend::Redis) {
        eprintln!("skipped: Redis was reported unreachable by scripts/test");
        return;
    }
    let url = shedlock_suite::redis_url();
    let prefix = unique_name("cli_j");
    let store = RedisLockProvider::builder(url.as_str())
        .table_name(prefix.as_str())
        .locked_by(HOLDER)
        .build()
        .await
        .unwrap_or_else(|error| {
            panic!(
                "Redis at {url} is not reachable ({error}).\n  start it with: {}",
                shedlock_suite::how_to_start(Backend::Redis)
            )
        });
    main_path(&url, &prefix, &store, false).await;
    let jobs = object(&at(&url, &prefix, &["jobs", "--json"]).await);
    assert_eq!(jobs["backend"], "Redis");
    drop(store);
    delete_keys(&url, &prefix).await;
}
