//! Schedules kept in the store ([`ScheduleStore`]): versions strictly increasing and seen in
//! order, tombstones, refusals that write nothing, overrides, concurrent writers read by a
//! poller that misses nothing, and the "run now" requests with their leases. Run by
//! [`schedule_suite!`](macro@crate::schedule_suite) on every store that keeps schedules.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shedlock::schedules::{
    NewSchedule, RetryPolicy, ScheduleChange, ScheduleStore, StoredSchedule, TriggerAnswer,
};
use shedlock::{Error, LockAdmin, LockProvider};

use super::{LONG, SEC};
use crate::db::{Opts, TestDb};
use crate::scheduler_suite::eventually;

/// A run-time job `name` for handler `sync`, every minute.
fn job(name: &str) -> NewSchedule {
    NewSchedule::job(
        name,
        "sync",
        r#"{"repository_id": 42}"#,
        "0 * * * * *",
        None,
    )
}

pub async fn schedule_versions_increase_through_create_update_delete<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    assert_eq!(p.schedules_version().await.unwrap(), 0, "no schedule yet");
    let created = p.create_schedule(&job("repo_42"), "ops").await.unwrap();
    assert_eq!(created.handler.as_deref(), Some("sync"));
    assert_eq!(created.payload.as_deref(), Some(r#"{"repository_id": 42}"#));
    assert_eq!(created.cron.as_deref(), Some("0 * * * * *"));
    assert_eq!((created.paused, created.deleted), (false, false));
    assert_eq!(created.updated_by, "ops");
    assert_eq!(
        p.schedule("repo_42").await.unwrap().as_ref(),
        Some(&created)
    );
    let change = ScheduleChange::new()
        .cron("0 30 2 * * *", Some("Europe/Berlin".into()))
        .paused(true)
        .jitter(Some(Duration::from_millis(1500)))
        .retry(Some(
            RetryPolicy::new(3, SEC, 10 * SEC).past_next_tick(true),
        ));
    let updated = p
        .update_schedule("repo_42", &change, "alice")
        .await
        .unwrap();
    assert!(
        updated.version > created.version,
        "an update takes a new version"
    );
    assert_eq!(updated.time_zone.as_deref(), Some("Europe/Berlin"));
    assert!(updated.paused);
    assert_eq!(updated.jitter, Some(Duration::from_millis(1500)));
    let retry = updated.retry.unwrap();
    assert_eq!(
        (retry.max_attempts, retry.base, retry.cap),
        (3, SEC, 10 * SEC)
    );
    assert!(retry.past_next_tick);
    assert_eq!(
        updated.payload, created.payload,
        "what the change leaves alone stays"
    );
    assert_eq!(
        p.schedule("repo_42").await.unwrap().as_ref(),
        Some(&updated)
    );
    assert!(p.delete_schedule("repo_42", "bob").await.unwrap());
    let gone = p.schedule("repo_42").await.unwrap().unwrap();
    assert!(gone.deleted && gone.version > updated.version, "{gone:?}");
    assert!(
        !p.delete_schedule("repo_42", "bob").await.unwrap(),
        "deleted once"
    );
    assert_eq!(
        p.schedule("repo_42").await.unwrap().unwrap().version,
        gone.version
    );
    assert_eq!(p.schedules_version().await.unwrap(), gone.version);
}

pub async fn a_tombstone_is_read_in_order_and_a_create_over_it_reuses_the_row<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let a = p.create_schedule(&job("a"), "ops").await.unwrap();
    let b = p.create_schedule(&job("b"), "ops").await.unwrap();
    p.request_trigger("a", "ops").await.unwrap();
    assert!(p.delete_schedule("a", "ops").await.unwrap());
    let since = p.schedules_since(b.version).await.unwrap();
    assert_eq!(since.len(), 1, "only the delete is newer: {since:?}");
    assert!(since[0].deleted && since[0].name == "a");
    assert!(
        since[0].trigger.is_none(),
        "a deleted job's request goes with it"
    );
    let all = p.schedules_since(0).await.unwrap();
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["b", "a"], "tombstones included, in version order");
    let again = p.create_schedule(&job("a"), "ops").await.unwrap();
    assert!(!again.deleted && again.version > since[0].version && again.version > a.version);
    assert_eq!(p.schedules_since(since[0].version).await.unwrap(), [again]);
}

pub async fn creating_a_live_name_again_is_schedule_exists<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let first = p.create_schedule(&job("nightly"), "ops").await.unwrap();
    let e = p.create_schedule(&job("nightly"), "ops").await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleExists { name } if name == "nightly"),
        "{e}"
    );
    let e = p
        .create_schedule(
            &NewSchedule::overriding("nightly", ScheduleChange::new().paused(true)),
            "ops",
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::ScheduleExists { .. }), "{e}");
    assert_eq!(p.schedule("nightly").await.unwrap(), Some(first.clone()));
    assert_eq!(p.schedules_version().await.unwrap(), first.version);
}

pub async fn invalid_cron_time_zone_or_payload_is_refused_and_nothing_is_written<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let bad = [
        (
            NewSchedule::job("x", "sync", "{}", "every minute", None),
            "cron",
        ),
        (
            NewSchedule::job(
                "x",
                "sync",
                "{}",
                "0 * * * * *",
                Some("Mars/Olympus".into()),
            ),
            "time_zone",
        ),
        (
            NewSchedule::job("x", "sync", "{not json", "0 * * * * *", None),
            "payload",
        ),
        (
            NewSchedule::overriding("x", ScheduleChange::new().payload(Some("{}".into()))),
            "payload",
        ),
        (without_cron(), "cron"),
    ];
    for (schedule, field) in bad {
        let e = p.create_schedule(&schedule, "ops").await.unwrap_err();
        assert!(matches!(e, Error::InvalidSchedule { .. }), "{field}: {e}");
        assert!(e.to_string().contains(&format!("{field}:")), "{field}: {e}");
    }
    assert!(p.schedule("x").await.unwrap().is_none(), "nothing written");
    assert_eq!(p.schedules_version().await.unwrap(), 0, "no version taken");
    let kept = p.create_schedule(&job("x"), "ops").await.unwrap();
    let e = p
        .update_schedule(
            "x",
            &ScheduleChange::new().cron("0 0 0 31 2 *", None),
            "ops",
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("cron:"), "{e}");
    let mut no_cron = ScheduleChange::new();
    no_cron.cron = Some(None);
    let e = p.update_schedule("x", &no_cron, "ops").await.unwrap_err();
    assert!(e.to_string().contains("needs a cron"), "{e}");
    let e = p.create_schedule(&job(" padded"), "ops").await.unwrap_err();
    assert!(matches!(e, Error::InvalidLockName { .. }), "{e}");
    assert_eq!(
        p.schedule("x").await.unwrap(),
        Some(kept.clone()),
        "unchanged"
    );
    assert_eq!(p.schedules_version().await.unwrap(), kept.version);
}

/// A run-time job without a cron expression.
fn without_cron() -> NewSchedule {
    let mut s = NewSchedule::job("x", "sync", "{}", "0 * * * * *", None);
    s.fields.cron = None;
    s
}

pub async fn a_batch_create_writes_every_schedule_at_consecutive_versions<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let before = p.create_schedule(&job("old"), "ops").await.unwrap();
    p.create_schedule(&job("again"), "ops").await.unwrap();
    assert!(p.delete_schedule("again", "ops").await.unwrap());
    let since = p.schedules_version().await.unwrap();
    let mut batch: Vec<NewSchedule> = (0..5).map(|i| job(&format!("b{i}"))).collect();
    batch.push(job("again"));
    batch.push(NewSchedule::overriding(
        "code_job",
        ScheduleChange::new()
            .paused(true)
            .jitter(Some(Duration::from_millis(250)))
            .retry(Some(RetryPolicy::new(3, SEC, 10 * SEC))),
    ));
    let created = p.create_schedules(&batch, "bulk").await.unwrap();
    let names: Vec<&str> = created.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["b0", "b1", "b2", "b3", "b4", "again", "code_job"],
        "in the order given"
    );
    let versions: Vec<i64> = created.iter().map(|s| s.version).collect();
    let first = since + 1;
    assert_eq!(
        versions,
        (first..first + 7).collect::<Vec<_>>(),
        "consecutive versions after the last one handed out"
    );
    for s in &created {
        assert_eq!(
            p.schedule(&s.name).await.unwrap().as_ref(),
            Some(s),
            "stored as returned"
        );
        assert!(!s.deleted && s.updated_by == "bulk", "{s:?}");
    }
    assert_eq!(
        created[5].handler.as_deref(),
        Some("sync"),
        "a tombstone revived"
    );
    let o = &created[6];
    assert!(o.handler.is_none() && o.paused && o.jitter == Some(Duration::from_millis(250)));
    assert_eq!(o.retry.map(|r| r.max_attempts), Some(3));
    assert_eq!(
        p.schedules_since(since).await.unwrap(),
        created,
        "read in version order"
    );
    assert_eq!(p.schedules_version().await.unwrap(), first + 6);
    assert_eq!(p.schedule("old").await.unwrap(), Some(before), "left alone");
    assert!(p.create_schedules(&[], "bulk").await.unwrap().is_empty());
    assert_eq!(
        p.schedules_version().await.unwrap(),
        first + 6,
        "nothing to create"
    );

    // More than one statement's (SQLite: 1,560 rows) and one script's (Redis: 250) worth.
    let many: Vec<NewSchedule> = (0..1700).map(|i| job(&format!("m{i}"))).collect();
    let created = p.create_schedules(&many, "bulk").await.unwrap();
    assert_eq!(created.len(), 1700);
    assert!(created.windows(2).all(|w| w[0].version < w[1].version));
    let read = p.schedules_since(first + 6).await.unwrap();
    assert_eq!(read.len(), 1700, "every one stored");
    assert_eq!(read.last(), created.last());
    assert_eq!(
        p.schedule("m1234").await.unwrap().as_ref(),
        Some(&created[1234])
    );
}

pub async fn a_name_stored_or_given_twice_refuses_the_whole_batch<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let stored = p.create_schedule(&job("nightly"), "ops").await.unwrap();
    // The stored name last, behind more than one chunk of new ones.
    let mut batch: Vec<NewSchedule> = (0..300).map(|i| job(&format!("n{i}"))).collect();
    batch.push(job("nightly"));
    let e = p.create_schedules(&batch, "bulk").await.unwrap_err();
    assert!(
        matches!(&e, Error::ScheduleExists { name } if name == "nightly"),
        "{e}"
    );
    let twice = [job("a"), job("b"), job("a")];
    let e = p.create_schedules(&twice, "bulk").await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSchedule { name, .. } if name == "a"),
        "{e}"
    );
    assert!(e.to_string().contains("given twice"), "{e}");
    assert_eq!(
        p.schedules_version().await.unwrap(),
        stored.version,
        "nothing written"
    );
    assert_eq!(
        p.schedules_since(0).await.unwrap(),
        std::slice::from_ref(&stored)
    );
    for name in ["n0", "n299", "a", "b"] {
        assert!(
            p.schedule(name).await.unwrap().is_none(),
            "{name} not created"
        );
    }
}

pub async fn an_invalid_schedule_refuses_the_batch_naming_it<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let batch = [
        job("good"),
        NewSchedule::job("bad", "sync", "{}", "every minute", None),
        job("after"),
    ];
    let e = p.create_schedules(&batch, "bulk").await.unwrap_err();
    assert!(
        matches!(&e, Error::InvalidSchedule { name, .. } if name == "bad"),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("cron:") && text.contains("schedule 1 of 3"),
        "{text}"
    );
    let batch = [job("good"), without_cron()];
    let e = p.create_schedules(&batch, "bulk").await.unwrap_err();
    assert!(e.to_string().contains("needs a cron"), "{e}");
    let e = p
        .create_schedules(&[job("good"), job(" padded")], "bulk")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::InvalidLockName { .. }), "{e}");
    assert_eq!(p.schedules_version().await.unwrap(), 0, "nothing written");
    assert!(p.schedule("good").await.unwrap().is_none());
}

pub async fn an_update_of_a_name_without_a_schedule_creates_an_override<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let paused = ScheduleChange::new().paused(true);
    let o = p.update_schedule("report", &paused, "ops").await.unwrap();
    assert_eq!((o.handler.as_deref(), o.payload.as_deref()), (None, None));
    assert_eq!(
        (o.cron.as_deref(), o.paused, o.deleted),
        (None, true, false)
    );
    let moved = ScheduleChange::new().cron("0 0 3 * * *", Some("UTC".into()));
    let o2 = p.update_schedule("report", &moved, "ops").await.unwrap();
    assert!(o2.paused && o2.cron.as_deref() == Some("0 0 3 * * *") && o2.version > o.version);
    assert!(
        p.delete_schedule("report", "ops").await.unwrap(),
        "the override is cleared"
    );
    let o3 = p.update_schedule("report", &paused, "ops").await.unwrap();
    assert_eq!(
        o3.cron, None,
        "an override made over a tombstone starts from nothing"
    );
    assert!(!o3.deleted && o3.handler.is_none());
}

pub async fn schedules_version_is_the_highest_version_seen<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let p = db.provider();
    let mut highest = 0;
    for i in 0..5 {
        let s = p
            .create_schedule(&job(&format!("j{i}")), "ops")
            .await
            .unwrap();
        assert!(s.version > highest);
        highest = s.version;
        assert_eq!(p.schedules_version().await.unwrap(), highest);
    }
    let TriggerAnswer::Requested { id } = p.request_trigger("j0", "ops").await.unwrap() else {
        panic!("nothing was pending");
    };
    assert!(id > highest, "a request takes a version");
    let all = p.schedules_since(0).await.unwrap();
    let max = all.iter().map(|s| s.version).max().unwrap();
    assert_eq!(p.schedules_version().await.unwrap(), max);
    assert_eq!(max, id);
}

pub async fn concurrent_writers_get_distinct_versions_and_a_poller_misses_none<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    const TASKS: usize = 8;
    const EACH: usize = 20;
    let p = Arc::new(db.provider());
    let done = Arc::new(AtomicBool::new(false));
    let poller = {
        let (p, done) = (Arc::clone(&p), Arc::clone(&done));
        tokio::spawn(async move {
            let (mut seen, mut last) = (BTreeSet::new(), 0);
            loop {
                let finished = done.load(Ordering::SeqCst);
                for s in p.schedules_since(last).await.unwrap() {
                    assert!(s.version > last, "in version order");
                    last = s.version;
                    seen.insert((s.name, s.version));
                }
                if finished {
                    return seen;
                }
            }
        })
    };
    // Half the writers share the poller's provider, half have a pool of their own (another
    // instance).
    let mut providers = Vec::new();
    for t in 0..TASKS {
        providers.push(match t % 2 {
            0 => Arc::clone(&p),
            _ => Arc::new(db.provider_with(Opts::own_pool()).await),
        });
    }
    let writers: Vec<_> = providers
        .into_iter()
        .enumerate()
        .map(|(t, p)| {
            tokio::spawn(async move {
                let mut wrote = Vec::new();
                for i in 0..EACH {
                    // Every write goes to a name of its own, so every version stays in the
                    // table and a poller that skipped one can never catch up on it.
                    let name = format!("w{t}_{i}");
                    let change = ScheduleChange::new().paused(i % 2 == 0);
                    let s = p.update_schedule(&name, &change, "writer").await.unwrap();
                    wrote.push((s.name, s.version));
                }
                wrote
            })
        })
        .collect();
    let mut written = BTreeSet::new();
    for w in writers {
        written.extend(w.await.unwrap());
    }
    done.store(true, Ordering::SeqCst);
    let seen = poller.await.unwrap();
    let versions: BTreeSet<i64> = written.iter().map(|(_, v)| *v).collect();
    assert_eq!(
        versions.len(),
        TASKS * EACH,
        "every write has a version of its own"
    );
    assert_eq!(seen, written, "the poller saw every change, each once");
    assert_eq!(
        p.schedules_version().await.unwrap(),
        *versions.last().unwrap()
    );
}

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

/// A write, a read and a request right after the server ended every session of the provider's
/// pool run on a new connection: the write's transaction never started on a dead one, so it
/// runs again and lands once. SQLite has no session to end: the same calls run.
pub async fn schedule_calls_after_the_server_ended_the_sessions_succeed<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let empty = db.empty_database().await;
    let p = empty.connect().await;
    p.migrate().await.expect("migrate through connect(url)");
    let first = p.create_schedule(&job("kept"), "ops").await.unwrap();
    match empty.kill_sessions().await {
        Some(killed) => assert!(killed >= 1, "no session to end"),
        None => assert_eq!(D::BACKEND, shedlock::Backend::Sqlite),
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let paused = ScheduleChange::new().paused(true);
    let second = p.update_schedule("kept", &paused, "ops").await.unwrap();
    assert_eq!(second.version, first.version + 1, "written once");
    assert_eq!(p.schedules_version().await.unwrap(), second.version);
    assert!(matches!(
        p.request_trigger("kept", "ops").await.unwrap(),
        TriggerAnswer::Requested { .. }
    ));
    empty.teardown().await;
}

/// On a table `migrate()` never ran on, a schedule call fails naming the schedules table as
/// missing (SQL: `TableMissing` of `<table>_schedules`), never a bare database error.
pub async fn schedules_on_a_table_not_migrated_say_run_migrate<D: TestDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let table = crate::unique_name("nomigrate");
    let p = db.provider_for_table(&table);
    for e in [
        p.schedules_version().await.unwrap_err(),
        p.update_schedule("job", &ScheduleChange::new().paused(true), "ops")
            .await
            .unwrap_err(),
        p.request_trigger("job", "ops").await.unwrap_err(),
    ] {
        match &e {
            Error::TableMissing { table: missing, .. } => {
                assert_eq!(missing, &format!("{table}_schedules"));
                assert!(e.to_string().contains("migrate"), "{e}");
            }
            other => panic!("{other}"),
        }
    }
}
