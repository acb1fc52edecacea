//! The backfills' keys (`{<prefix>}:backfills`, `{<prefix>}:backfill_id`): the JSON of a row as
//! the scripts write it, ids that never go back when the counter is deleted by hand, a row that
//! does not read and a key of another type named in the error, nothing written.

use chrono::{TimeZone, Utc};
use redis::AsyncCommands;
use shedlock::Error;
use shedlock::schedules::{BackfillCount, BackfillState, NewBackfill, ScheduleStore};

use super::Keys;

fn spec(job: &str) -> NewBackfill {
    let from = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap()
        + chrono::Duration::microseconds(123_456);
    NewBackfill::new(job, from, from + chrono::Duration::hours(6), 6, "ops")
        .max_running(2)
        .rate_per_min(Some(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_backfills_are_json_rows_of_a_hash() {
    let k = Keys::new().await;
    let p = &k.provider;
    let mut conn = k.conn.clone();
    let created = p.create_backfill(&spec("report")).await.unwrap();
    let json: String = conn.hget(k.key("backfills"), created.id).await.unwrap();
    let row: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(row["id"], created.id, "{json}");
    assert_eq!(row["job"], "report");
    assert_eq!(
        row["from_tick"],
        created.spec.from.timestamp_micros().to_string(),
        "a time is a string of microseconds: {json}"
    );
    assert_eq!(
        row["created_at"],
        created.created_at.timestamp_micros().to_string()
    );
    assert_eq!(
        (row["max_running"].as_u64(), row["rate_per_min"].as_u64()),
        (Some(2), Some(30))
    );
    assert_eq!(
        (row["state"].as_str(), row["done"].as_u64()),
        (Some("running"), Some(0))
    );
    let counter: i64 = conn.get(k.key("backfill_id")).await.unwrap();
    assert_eq!(counter, created.id);
    k.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_backfill_ids_never_go_back_when_the_counter_is_deleted() {
    let k = Keys::new().await;
    let p = &k.provider;
    let mut conn = k.conn.clone();
    let mut last = 0;
    for i in 0..3 {
        last = p.create_backfill(&spec(&format!("j{i}"))).await.unwrap().id;
    }
    let _: () = conn.del(k.key("backfill_id")).await.unwrap();
    let next = p.create_backfill(&spec("after")).await.unwrap();
    assert_eq!(next.id, last + 1, "above every id the hash holds");
    assert_eq!(p.backfills().await.unwrap().len(), 4, "none overwritten");
    let again = p.create_backfill(&spec("again")).await.unwrap();
    assert_eq!(again.id, last + 2);
    k.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_backfill_that_does_not_read_is_named_and_left_as_it_is() {
    let k = Keys::new().await;
    let p = &k.provider;
    let mut conn = k.conn.clone();
    let created = p.create_backfill(&spec("report")).await.unwrap();
    let broken = r#"{"job": "report", "state": 7}"#;
    let _: () = conn
        .hset(k.key("backfills"), created.id, broken)
        .await
        .unwrap();
    let errors = [
        p.backfill(created.id).await.unwrap_err(),
        p.backfills().await.unwrap_err(),
        p.set_backfill_state(
            created.id,
            BackfillState::Paused,
            &[BackfillState::Running],
            "ops",
        )
        .await
        .unwrap_err(),
        p.count_backfill(created.id, BackfillCount::Ran)
            .await
            .unwrap_err(),
    ];
    for error in errors {
        match &error {
            Error::UnreadableRow {
                location,
                name,
                problem,
                ..
            } => {
                assert_eq!(location, &k.key("backfills"));
                assert_eq!(name, &format!("backfill {}", created.id));
                assert!(problem.contains("is no backfill"), "{problem}");
            }
            other => panic!("{other:?}"),
        }
    }
    let kept: String = conn.hget(k.key("backfills"), created.id).await.unwrap();
    assert_eq!(kept, broken, "nothing written");

    let _: () = conn.del(k.key("backfills")).await.unwrap();
    let _: () = conn.set(k.key("backfills"), "a string").await.unwrap();
    let error = p.create_backfill(&spec("report")).await.unwrap_err();
    assert!(matches!(error, Error::WrongType { .. }), "{error:?}");
    k.cleanup().await;
}
