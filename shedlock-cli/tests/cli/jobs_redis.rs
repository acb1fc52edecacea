//! The schedule commands on Redis: the main path of `jobs.rs` under a key prefix of its own,
//! whose keys are deleted at the end (the server is shared: nothing is flushed).

use shedlock::Backend;
use shedlock_redis::RedisLockProvider;
use shedlock_suite::unique_name;

use crate::common::HOLDER;
use crate::common::{TEN_MINUTES, cfg};
use crate::jobs::{
    at, cancel_named_lock_path, main_path, object, override_path, tuning_path, unknown_names_path,
};
use shedlock::LockProvider;

/// Deletes every key under `prefix`, found with `SCAN`.
pub(crate) async fn delete_keys(url: &str, prefix: &str) {
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

/// The shared server's URL, a key prefix of the test's own and a provider on it; `None` when
/// `scripts/test` reported Redis unreachable.
async fn setup() -> Option<(String, String, RedisLockProvider)> {
    if shedlock_suite::skipped(Backend::Redis) {
        eprintln!("skipped: Redis was reported unreachable by scripts/test");
        return None;
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
    Some((url, prefix, store))
}

#[tokio::test]
async fn redis_schedule_commands_main_path() {
    let Some((url, prefix, store)) = setup().await else {
        return;
    };
    main_path(&url, &prefix, &store).await;
    let jobs = object(&at(&url, &prefix, &["jobs", "--json"]).await);
    assert_eq!(jobs["backend"], "Redis");
    drop(store);
    delete_keys(&url, &prefix).await;
}

#[tokio::test]
async fn redis_pause_cancel_running_and_reset_of_an_override() {
    let Some((url, prefix, store)) = setup().await else {
        return;
    };
    crate::jobs::failed_nightly(&store).await;
    override_path(&url, &prefix, &store).await;
    drop(store);
    delete_keys(&url, &prefix).await;
}

#[tokio::test]
async fn redis_unknown_names_fleet_pause_and_bad_input() {
    let Some((url, prefix, store)) = setup().await else {
        return;
    };
    unknown_names_path(&url, &prefix, &store).await;
    drop(store);
    delete_keys(&url, &prefix).await;
}

#[tokio::test]
async fn redis_jitter_and_retry_from_the_command_line() {
    let Some((url, prefix, store)) = setup().await else {
        return;
    };
    tuning_path(&url, &prefix, &store).await;
    drop(store);
    delete_keys(&url, &prefix).await;
}

/// No run of the job recorded: a lock named otherwise than its job is given with `--lock` (the
/// SQL stores' case records one, found through the history).
#[tokio::test]
async fn redis_pause_cancel_running_of_a_lock_named_otherwise() {
    let Some((url, prefix, store)) = setup().await else {
        return;
    };
    let guard = store
        .lock(&cfg("steered_lock", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    cancel_named_lock_path(&url, &prefix, &store, token, false).await;
    drop(guard);
    drop(store);
    delete_keys(&url, &prefix).await;
}

#[tokio::test]
async fn redis_changes_are_recorded_with_who_and_from_where() {
    let Some((url, prefix, store)) = setup().await else {
        return;
    };
    crate::audit::changes_are_recorded(&url, &prefix, &store).await;
    drop(store);
    delete_keys(&url, &prefix).await;
}

/// The jobs an instance registered, on Redis.
#[tokio::test]
async fn redis_registered_jobs_are_listed_and_found() {
    let Some((url, prefix, store)) = setup().await else {
        return;
    };
    crate::jobs::registered_jobs_path(&url, &prefix, &store).await;
    drop(store);
    delete_keys(&url, &prefix).await;
}
