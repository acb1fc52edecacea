//! The change feed, and the ACL rules the schedules need.

use std::time::Duration;

use futures_util::StreamExt;
use shedlock::LockAdmin;
use shedlock::schedules::{
    BackfillCount, BackfillState, NewBackfill, ScheduleChange, ScheduleStore, TriggerAnswer,
};
use shedlock_redis::RedisLockProvider;

use super::{Keys, Private, job};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_schedules_change_feed_yields_after_a_change() {
    let k = Keys::new().await;
    let p = &k.provider;
    let mut feed = p.change_feed().await.unwrap().expect("Redis has a feed");
    p.create_schedule(&job("a", "0 * * * * *"), "ops")
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(20), feed.next())
        .await
        .expect("a notice within 20 s")
        .expect("the feed is open");
    k.cleanup().await;
}

/// The feed's connection lost (its private server stopped): the stream ends, so a watcher
/// knows to read the changes and ask for a new feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_schedules_change_feed_ends_when_its_connection_is_lost() {
    let mut server = Private::start().await;
    let p = RedisLockProvider::connect(&server.url("")).await.unwrap();
    let mut feed = p.change_feed().await.unwrap().unwrap();
    p.create_schedule(&job("a", "0 * * * * *"), "ops")
        .await
        .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(20), feed.next()).await;
    server.stop();
    assert_eq!(first.expect("a notice within 20 s"), Some(()));
    let end = tokio::time::timeout(Duration::from_secs(20), feed.next())
        .await
        .expect("the feed ends within 20 s of the server's death");
    assert_eq!(end, None);
}

/// A user with the documented rules (`~{<prefix>}:*`, `REQUIRED_COMMANDS`,
/// `SCHEDULE_COMMANDS`, `&{<prefix>}:schedules`) can do every schedule operation and
/// follow the feed; one without the channel still makes changes (the feed is refused); one
/// with the lock rules only is told what the schedules need.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_schedules_acl_rules_are_documented() {
    use shedlock_redis::{REQUIRED_COMMANDS, SCHEDULE_COMMANDS};
    let server = Private::start().await;
    let rules = |extra: &[&'static str]| -> Vec<&'static str> {
        let mut rules = vec!["~{acl}:*"];
        rules.extend(REQUIRED_COMMANDS.split(' '));
        rules.extend(extra);
        rules
    };
    let schedules: Vec<&str> = SCHEDULE_COMMANDS.split(' ').collect();
    for (user, extra) in [
        ("app", [&schedules[..], &["&{acl}:schedules"]].concat()),
        ("no_channel", schedules.clone()),
        ("locks_only", Vec::new()),
    ] {
        let mut args = vec!["ACL", "SETUSER", user, "reset", "on", ">pw"];
        args.extend(rules(&extra));
        server.command(&args).await;
    }
    let provider = async |user: &str| {
        RedisLockProvider::builder(server.url(user).as_str())
            .table_name("acl")
            .build()
            .await
            .unwrap()
    };
    let p = provider("app").await;
    p.migrate().await.unwrap();
    let mut feed = p.change_feed().await.unwrap().unwrap();
    p.create_schedule(&job("a", "0 * * * * *"), "ops")
        .await
        .unwrap();
    p.update_schedule("a", &ScheduleChange::new().paused(true), "ops")
        .await
        .unwrap();
    let TriggerAnswer::Requested { id } = p.request_trigger("a", "ops").await.unwrap() else {
        panic!("requested")
    };
    let lease = Duration::from_secs(60);
    assert!(p.claim_trigger("a", id, "me", lease).await.unwrap());
    assert!(p.start_trigger("a", id, "me", lease).await.unwrap());
    assert!(p.finish_trigger("a", id).await.unwrap());
    assert!(p.delete_schedule("a", "ops").await.unwrap());
    assert_eq!(p.schedules_since(0).await.unwrap().len(), 1);
    assert!(p.schedule("a").await.unwrap().unwrap().deleted);
    assert!(p.schedules_version().await.unwrap() > 0);
    let from = chrono::Utc::now() - chrono::Duration::hours(2);
    let backfill = p
        .create_backfill(&NewBackfill::new("a", from, chrono::Utc::now(), 2, "ops"))
        .await
        .unwrap();
    p.count_backfill(backfill.id, BackfillCount::Ran)
        .await
        .unwrap();
    let paused = p
        .set_backfill_state(
            backfill.id,
            BackfillState::Paused,
            &[BackfillState::Running],
            "ops",
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((paused.state, paused.done), (BackfillState::Paused, 1));
    assert_eq!(
        p.backfill(backfill.id).await.unwrap().as_ref(),
        Some(&paused)
    );
    assert_eq!(p.backfills().await.unwrap(), [paused]);
    tokio::time::timeout(Duration::from_secs(20), feed.next())
        .await
        .expect("a notice within 20 s")
        .expect("open");

    let p = provider("no_channel").await;
    p.create_schedule(&job("b", "0 * * * * *"), "ops")
        .await
        .unwrap();
    let e = p.change_feed().await.err().expect("no channel, no feed");
    assert!(e.to_string().contains("permission denied"), "{e}");

    let p = provider("locks_only").await;
    let e = p
        .create_schedule(&job("c", "0 * * * * *"), "ops")
        .await
        .unwrap_err();
    let text = e.to_string();
    for part in ["permission denied", SCHEDULE_COMMANDS, "&{acl}:schedules"] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
}
