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
