//! The scheduler and skewed clocks: an instance fires by the database's clock, and a tick the
//! database refuses as too far ahead is reported as clock skew.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::scheduler::RunHistory;
use shedlock::{
    Job, LockConfiguration, LockContext, LockProvider, RunStore, Schedule, Scheduler, run_locked,
};

use super::eventually;
use crate::db::{Opts, TestDb};

/// Schedulers whose own clocks are 5 minutes ahead and 5 minutes behind measure their offset to
/// the database and fire every tick when the database's clock reaches it: on time, nothing
/// refused, nothing claimed early.
pub async fn a_skewed_instance_fires_by_the_database_clock<D: TestDb>(db: &Arc<D>) {
    type Seen = Arc<std::sync::Mutex<Vec<(DateTime<Utc>, DateTime<Utc>)>>>;
    for minutes in [5, -5] {
        let provider = db.provider_with(Opts::own_pool()).await;
        let scheduler = Scheduler::builder(provider)
            .clock(crate::db::skewed_clock(minutes))
            .misfire_grace(Duration::ZERO)
            .build();
        let seen: Seen = Arc::default();
        let name = format!("skewed_{}", if minutes > 0 { "ahead" } else { "behind" });
        let (job_seen, job_name) = (Arc::clone(&seen), name.clone());
        scheduler
            .add(Job::new(
                name.clone(),
                Schedule::parse("* * * * * *", "UTC").unwrap(),
                move || {
                    let (seen, name) = (Arc::clone(&job_seen), job_name.clone());
                    async move {
                        let cfg =
                            LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO)?;
                        run_locked(cfg, async move {
                            let tick = LockContext::current().unwrap().tick().unwrap();
                            let now = shedlock::context::current_provider()
                                .unwrap()
                                .now()
                                .await
                                .unwrap();
                            seen.lock().unwrap().push((tick, now));
                        })
                        .await
                    }
                },
            ))
            .unwrap();
        scheduler.start();
        let enough = eventually(Duration::from_secs(30), async || {
            seen.lock().unwrap().len() >= 3
        })
        .await;
        scheduler.shutdown().await;
        let stats = scheduler.stats(&name).unwrap();
        let seen = seen.lock().unwrap().clone();
        assert!(enough, "{minutes} min: {seen:?} {stats:?}");
        assert_eq!(stats.clock_skew, 0, "{stats:?}");
        for (tick, now) in &seen {
            let late = *now - *tick;
            assert!(
                late >= chrono::Duration::milliseconds(-5) && late < chrono::Duration::seconds(5),
                "{minutes} min: tick {tick} ran at database time {now}"
            );
        }
        let offset = scheduler.clock_offset().expect("measured");
        let expected = chrono::Duration::minutes(-minutes);
        assert!(
            (offset - expected).abs() < chrono::Duration::seconds(2),
            "offset {offset} for a clock {minutes} min off"
        );
    }
}

/// A tick the database refuses as further ahead than the tolerance is reported as clock skew,
/// not as held; the run history (where the backend keeps one) has the measured offset.
pub async fn a_refused_future_tick_is_reported_as_clock_skew<D: TestDb>(db: &Arc<D>) {
    let provider = db.provider_with(Opts::own_pool()).await;
    let scheduler = D::with_history(
        Scheduler::builder(provider).misfire_grace(Duration::ZERO),
        RunHistory::keep_for(Duration::from_secs(86_400)),
    )
    .build();
    scheduler
        .add(Job::new(
            "ahead",
            Schedule::parse("* * * * * *", "UTC").unwrap(),
            || async {
                // A job that computes its own tick with a clock an hour ahead.
                let tick = Utc::now() + chrono::Duration::hours(1);
                let cfg = LockConfiguration::new("ahead", Duration::from_secs(30), Duration::ZERO)?
                    .for_tick(tick);
                run_locked(cfg, async {}).await
            },
        ))
        .unwrap();
    scheduler.start();
    let refused = eventually(Duration::from_secs(30), async || {
        scheduler.stats("ahead").unwrap().clock_skew >= 1
    })
    .await;
    scheduler.shutdown().await;
    let stats = scheduler.stats("ahead").unwrap();
    assert!(refused, "{stats:?}");
    assert_eq!((stats.executed, stats.skipped_held), (0, 0), "{stats:?}");
    assert_eq!(db.row("ahead").await, None, "nothing was claimed");
    let Some(history) = D::run_store(&db.provider()) else {
        return;
    };
    let history = history
        .runs(&RunQuery::latest(10).outcome(RunOutcome::SkippedClockSkew))
        .await
        .unwrap();
    let error = history[0].error.as_deref().unwrap_or_default();
    assert!(
        error.contains("clock skew") && error.contains("this instance's clock is"),
        "{error}"
    );
}

/// The cases of this file, for [`scheduler_suite!`](macro@crate::scheduler_suite): `every` store's,
/// then the `sql` ones (bounded by [`SqlTestDb`](crate::SqlTestDb)). A case is one `pub async fn`
/// above and one line here (checked by the kit's `every_case_is_listed_once` test).
#[doc(hidden)]
#[macro_export]
macro_rules! __kit_scheduler_suite_clock {
    (every $db:ty) => {
        $crate::cases!(in $db: $crate::scheduler_suite => [
            a_skewed_instance_fires_by_the_database_clock,
            a_refused_future_tick_is_reported_as_clock_skew,
        ]);
    };
    (sql $db:ty) => {};
}
