//! Run-now requests: pending, claimed, leases that run out, started, finished.

use std::time::Duration;

use shedlock::schedules::{ScheduleStore, TriggerAnswer};

use super::{Keys, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_schedules_triggers_are_requested_claimed_leased_started_and_finished() {
    let k = Keys::new().await;
    let p = &k.provider;
    let long = Duration::from_secs(60);
    let short = Duration::from_millis(300);
    // A code-defined job without a row: the request creates an override.
    let TriggerAnswer::Requested { id } = p.request_trigger("nightly", "alice").await.unwrap()
    else {
        panic!("requested")
    };
    let row = p.schedule("nightly").await.unwrap().unwrap();
    assert_eq!((row.handler.as_deref(), row.version), (None, id));
    let t = row.trigger.unwrap();
    assert_eq!(
        (t.id, t.requested_by.as_str(), t.started),
        (id, "alice", false)
    );
    match p.request_trigger("nightly", "bob").await.unwrap() {
        TriggerAnswer::AlreadyPending(t) => {
            assert_eq!((t.id, t.requested_by.as_str()), (id, "alice"))
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !p.claim_trigger("nightly", id + 1, "a", long).await.unwrap(),
        "another id"
    );
    assert!(p.claim_trigger("nightly", id, "a", short).await.unwrap());
    assert!(
        !p.claim_trigger("nightly", id, "b", long).await.unwrap(),
        "a live claim"
    );
    assert!(matches!(
        p.request_trigger("nightly", "bob").await.unwrap(),
        TriggerAnswer::AlreadyPending(_)
    ));
    // a's claim runs out: b takes it over, and a can no longer start it.
    eventually(
        async || p.claim_trigger("nightly", id, "b", long).await.unwrap(),
        "b's claim",
    )
    .await;
    assert!(
        !p.start_trigger("nightly", id, "a", long).await.unwrap(),
        "a's claim was lost"
    );
    assert!(p.start_trigger("nightly", id, "b", long).await.unwrap());
    assert!(
        !p.start_trigger("nightly", id, "b", long).await.unwrap(),
        "started once"
    );
    assert!(
        !p.claim_trigger("nightly", id, "c", long).await.unwrap(),
        "started: no claim"
    );
    match p.request_trigger("nightly", "bob").await.unwrap() {
        TriggerAnswer::AlreadyPending(t) => {
            assert!(t.started);
            assert_eq!(t.claimed_by.as_deref(), Some("b"));
        }
        other => panic!("{other:?}"),
    }
    let before = p.schedules_version().await.unwrap();
    assert!(!p.finish_trigger("nightly", id + 1).await.unwrap());
    assert!(p.finish_trigger("nightly", id).await.unwrap());
    assert!(!p.finish_trigger("nightly", id).await.unwrap());
    let row = p.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(row.trigger, None);
    assert!(row.version > before, "readers learn the request is gone");

    // A run that started and whose lease ran out (its instance died) counts as ended.
    let TriggerAnswer::Requested { id: id2 } = p.request_trigger("nightly", "c").await.unwrap()
    else {
        panic!("requested")
    };
    assert!(id2 > id);
    assert!(p.claim_trigger("nightly", id2, "a", long).await.unwrap());
    assert!(p.start_trigger("nightly", id2, "a", short).await.unwrap());
    eventually(
        async || {
            matches!(
                p.request_trigger("nightly", "d").await.unwrap(),
                TriggerAnswer::Requested { .. }
            )
        },
        "a request after the started run's lease ran out",
    )
    .await;
    k.cleanup().await;
}

/// A script the provider sends again after its connection broke (the first run may have
/// happened) carries the same request id, and answers what the first run did: the schedule
/// created (not "exists"), the run-now request made (not "already pending"), the claim and the
/// start taken (not "no"), with one version per change. Another id is answered anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_schedules_a_script_sent_twice_answers_what_its_first_run_did() {
    use redis::Value;
    use shedlock_redis::test_util::script;
    let k = Keys::new().await;
    let p = &k.provider;
    let conn = k.conn.clone();
    let (hash, zset, counter) = (
        k.key("schedule:a"),
        k.key("schedules"),
        k.key("schedules:version"),
    );
    let twice = async |name: &str, keys: &[&str], args: &[&str]| -> Vec<Value> {
        let s = redis::Script::new(script(name).unwrap());
        let mut answers = Vec::new();
        for _ in 0..2 {
            let mut invocation = s.prepare_invoke();
            for key in keys {
                invocation.key(*key);
            }
            for arg in args {
                invocation.arg(*arg);
            }
            answers.push(
                invocation
                    .invoke_async::<Value>(&mut conn.clone())
                    .await
                    .unwrap(),
            );
        }
        answers
    };
    let keys = [hash.as_str(), zset.as_str(), counter.as_str()];
    let channel = k.key("schedules");
    let ok = |v: &Value| matches!(v, Value::Array(a) if a.first() == Some(&Value::BulkString(b"ok".to_vec())));
    // The cap on run-time schedules and the keys' prefix, as the provider sends them.
    let prefix = k.key("");
    let create = [
        "create",
        "a",
        "ops",
        "sync",
        &channel,
        "req-1",
        "100000",
        &prefix,
        "1",
        "cron",
        "0 * * * * *",
    ];
    let answers = twice("schedule_write", &keys, &create).await;
    assert!(answers.iter().all(ok), "{answers:?}");
    assert_eq!(p.schedules_version().await.unwrap(), 1, "one change");
    let other = twice(
        "schedule_write",
        &keys,
        &[
            "create",
            "a",
            "ops",
            "sync",
            &channel,
            "req-2",
            "100000",
            &prefix,
            "1",
            "cron",
            "0 * * * * *",
        ],
    )
    .await;
    assert!(
        other
            .iter()
            .all(|v| matches!(v, Value::Array(a) if a.len() == 1)),
        "exists: {other:?}"
    );

    let answers = twice("trigger_request", &keys, &["a", "ops", &channel, "req-3"]).await;
    let requested = |v: &Value| matches!(v, Value::Array(a) if a.first() == Some(&Value::BulkString(b"requested".to_vec())) && a.get(1) == Some(&Value::BulkString(b"2".to_vec())));
    assert!(answers.iter().all(requested), "{answers:?}");
    let id = "2";
    let lease = "60000000";
    assert_eq!(
        twice("trigger_claim", &[&hash], &[id, "me", lease, "req-4"]).await,
        [Value::Int(1), Value::Int(1)]
    );
    assert_eq!(
        twice("trigger_claim", &[&hash], &[id, "me", lease, "req-5"]).await,
        [Value::Int(0), Value::Int(0)]
    );
    assert_eq!(
        twice("trigger_start", &[&hash], &[id, "me", lease, "req-6"]).await,
        [Value::Int(1), Value::Int(1)]
    );
    assert_eq!(
        twice("trigger_start", &[&hash], &[id, "me", lease, "req-7"]).await,
        [Value::Int(0), Value::Int(0)]
    );
    assert_eq!(
        twice("trigger_finish", &keys, &[id, "a", &channel, "req-8"]).await,
        [Value::Int(1), Value::Int(1)]
    );
    assert_eq!(
        twice("schedule_delete", &keys, &["a", "ops", &channel, "req-9"]).await,
        [Value::Int(1), Value::Int(1)]
    );
    assert_eq!(
        p.schedules_version().await.unwrap(),
        4,
        "create, request, finish, delete"
    );
    assert!(p.schedule("a").await.unwrap().unwrap().deleted);
    k.cleanup().await;
}
