//! The "run now" requests: claimed once, asked for again, and their leases.

use std::time::Duration;

use shedlock::LockProvider;
use shedlock::schedules::{ScheduleStore, StoredSchedule, TriggerAnswer};

use super::job;
use crate::db::TestDb;
use crate::scheduler_suite::eventually;
use crate::suite::{LONG, SEC};

/// The store's time, by the provider's clock (the database's).
async fn store_now<P: LockProvider>(p: &P) -> chrono::DateTime<chrono::Utc> {
    p.now().await.unwrap()
}

fn trigger_of(s: &Option<StoredSchedule>) -> shedlock::schedules::Trigger {
    s.as_ref()
        .and_then(|s| s.trigger.clone())
        .expect("a pending request")
}

pub async fn a_trigger_is_claimed_once_and_asked_for_again_after_it_finishes<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    p.create_schedule(&job("sync_now"), "ops").await.unwrap();
    let TriggerAnswer::Requested { id } = p.request_trigger("sync_now", "alice").await.unwrap()
    else {
        panic!("nothing was pending");
    };
    match p.request_trigger("sync_now", "bob").await.unwrap() {
        TriggerAnswer::AlreadyPending(t) => {
            assert_eq!(
                (t.id, t.requested_by.as_str(), t.started),
                (id, "alice", false)
            );
        }
        other => panic!("asked twice: {other:?}"),
    }
    let short = Duration::from_secs(1);
    assert!(p.claim_trigger("sync_now", id, "A", short).await.unwrap());
    let a_until = trigger_of(&p.schedule("sync_now").await.unwrap())
        .claimed_until
        .unwrap();
    assert!(
        !p.claim_trigger("sync_now", id + 1, "B", LONG)
            .await
            .unwrap(),
        "another id"
    );
    // B is refused while A's lease lives, by the store's clock; it claims once that ran out.
    let mut b_claimed_at = None;
    assert!(
        eventually(30 * SEC, async || {
            if p.claim_trigger("sync_now", id, "B", LONG).await.unwrap() {
                let t = trigger_of(&p.schedule("sync_now").await.unwrap());
                b_claimed_at =
                    Some(t.claimed_until.unwrap() - chrono::Duration::from_std(LONG).unwrap());
                return true;
            }
            false
        })
        .await,
        "B claims once A's lease ran out"
    );
    assert!(
        b_claimed_at.unwrap() >= a_until,
        "B claimed before A's lease ran out"
    );
    assert!(
        !p.start_trigger("sync_now", id, "A", LONG).await.unwrap(),
        "A lost its claim"
    );
    assert!(p.start_trigger("sync_now", id, "B", LONG).await.unwrap());
    assert!(
        !p.claim_trigger("sync_now", id, "C", LONG).await.unwrap(),
        "started"
    );
    match p.request_trigger("sync_now", "carol").await.unwrap() {
        TriggerAnswer::AlreadyPending(t) => {
            assert!(t.started && t.claimed_by.as_deref() == Some("B"))
        }
        other => panic!("asked while running: {other:?}"),
    }
    assert!(p.finish_trigger("sync_now", id).await.unwrap());
    assert!(
        !p.finish_trigger("sync_now", id).await.unwrap(),
        "finished once"
    );
    assert!(trigger_of_none(&p.schedule("sync_now").await.unwrap()));
    match p.request_trigger("sync_now", "carol").await.unwrap() {
        TriggerAnswer::Requested { id: next } => assert!(next > id),
        other => panic!("nothing was pending: {other:?}"),
    }
    assert!(store_now(&p).await >= a_until);
}

fn trigger_of_none(s: &Option<StoredSchedule>) -> bool {
    s.as_ref().is_some_and(|s| s.trigger.is_none())
}

pub async fn a_started_trigger_whose_lease_ran_out_no_longer_blocks_a_request<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    // A code-defined job: the request makes its override row.
    let TriggerAnswer::Requested { id } = p.request_trigger("cleanup", "ops").await.unwrap() else {
        panic!("nothing was pending");
    };
    let row = p.schedule("cleanup").await.unwrap().unwrap();
    assert!(
        row.handler.is_none() && row.cron.is_none(),
        "an override row: {row:?}"
    );
    assert!(p.claim_trigger("cleanup", id, "A", LONG).await.unwrap());
    assert!(p.start_trigger("cleanup", id, "A", SEC).await.unwrap());
    let until = trigger_of(&p.schedule("cleanup").await.unwrap())
        .claimed_until
        .unwrap();
    let mut next = None;
    assert!(
        eventually(30 * SEC, async || {
            let now = store_now(&p).await;
            match p.request_trigger("cleanup", "ops").await.unwrap() {
                TriggerAnswer::Requested { id } => {
                    next = Some((id, now));
                    true
                }
                TriggerAnswer::AlreadyPending(t) => {
                    assert_eq!(t.id, id);
                    false
                }
                other => panic!("{other:?}"),
            }
        })
        .await,
        "a run whose instance died stops blocking requests"
    );
    let (next, asked_at) = next.unwrap();
    assert!(next > id);
    let t = trigger_of(&p.schedule("cleanup").await.unwrap());
    assert!(
        t.requested_at >= until && asked_at <= t.requested_at,
        "{t:?} {until}"
    );
    assert!(
        !p.finish_trigger("cleanup", id).await.unwrap(),
        "the old request is gone"
    );
    assert!(!t.started && t.claimed_by.is_none());
}

/// The cases of this file, for [`schedule_suite!`](macro@crate::schedule_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_suite_schedules_triggers {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::suite => [
            a_trigger_is_claimed_once_and_asked_for_again_after_it_finishes,
            a_started_trigger_whose_lease_ran_out_no_longer_blocks_a_request,
        ]);
    };
    (sql $db:ty) => {};
}
