//! The repositories' schedules, kept by the library in the store (`shedlock_schedules`, the
//! control plane): each registered repository N has the run-time job `repo_sync_N` of the
//! handler `repo_sync`, with the payload `{"repository_id": N}`, its cron, its time zone and
//! whether it is paused. Every instance that registered the handler ([`register`]) runs those
//! jobs, each tick once fleet-wide under the job's lock (named after it), and picks up a
//! schedule added, changed, paused or removed within its poll interval (at once on
//! PostgreSQL): there is no reload loop of repo_sync's own.
//!
//! `add` creates the schedule ([`create`]), `pause`/`resume` are the scheduler's, `sync-now`
//! is a "run now" request ([`SyncNow`]), `status` reads the schedules ([`schedule_of`]).
//! Schedules kept by earlier versions in repo_sync's own table are moved in once
//! ([`move_legacy`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shedlock::handoff::{HandOff, TickQueue};
use shedlock::history::{RunOutcome, RunQuery, RunRecord};
use shedlock::scheduler::{HandlerLock, RunHistory, ScheduleWatch};
use shedlock::schedules::{NewSchedule, ScheduleStore, StoredSchedule, TriggerAnswer};
use shedlock::{LockContext, Schedule, Scheduler};

use crate::db::{Db, lock_name};
use crate::job::{Outcome, Trigger, sync_under};
use crate::show::{say, shown, tell};
use crate::sync::Ctx;
use crate::{AnyError, Locks};

/// The handler every schedule of a repository names.
pub(crate) const HANDLER: &str = "repo_sync";
/// The schedule of a new registration, unless `--cron` and `--time-zone` say otherwise.
pub(crate) const DEFAULT_CRON: &str = "0 */15 * * * *";
pub(crate) const DEFAULT_TIME_ZONE: &str = "UTC";

/// What the handler is given: which repository to sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Payload {
    pub(crate) repository_id: i64,
}

/// The payload of repository `id`'s schedule (JSON text).
pub(crate) fn payload(id: i64) -> String {
    serde_json::to_string(&Payload { repository_id: id }).unwrap_or_default()
}

/// The live schedule of repository `id`, if the store has one.
pub(crate) async fn schedule_of(
    store: &dyn Locks,
    id: i64,
) -> shedlock::Result<Option<StoredSchedule>> {
    Ok(store
        .schedule(&lock_name(id))
        .await?
        .filter(|row| !row.deleted))
}

/// Creates the schedule of repository `id` (`repo_sync_<id>`, handler `repo_sync`), paused if
/// asked; the store refuses a cron or time zone it cannot run, naming it.
pub(crate) async fn create(
    store: &dyn Locks,
    id: i64,
    cron: &str,
    time_zone: &str,
    paused: bool,
) -> shedlock::Result<StoredSchedule> {
    let by = store.locked_by().to_owned();
    let new = NewSchedule::job(
        lock_name(id),
        HANDLER,
        payload(id),
        cron,
        Some(time_zone.to_owned()),
    );
    let row = store.create_schedule(&new, &by).await?;
    if !paused {
        return Ok(row);
    }
    let change = shedlock::schedules::ScheduleChange::new().paused(true);
    store.update_schedule(&row.name, &change, &by).await
}

/// A stored schedule read as the library reads it (`None` when it cannot be: no cron).
pub(crate) fn parsed(row: &StoredSchedule) -> Option<Result<Schedule, shedlock::Error>> {
    let cron = row.cron.as_deref()?;
    Some(Schedule::parse(
        cron,
        row.time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE),
    ))
}

/// Moves the schedules an earlier version kept in `schedule_sessions` into the store, once:
/// a repository with no schedule there gets one with its cron and time zone (paused where it
/// was), and each move is said. One the store refuses is named with how to set another, and
/// kept until then; a repository that has one in the store already keeps that.
pub(crate) async fn move_legacy(db: &Db, store: &dyn Locks) -> Result<(), AnyError> {
    for old in db.legacy_schedules().await? {
        let id = old.repository_id;
        let Some(session) = db.session(id).await? else {
            db.forget_legacy_schedule(id).await?;
            continue;
        };
        if schedule_of(store, id).await?.is_some() {
            db.forget_legacy_schedule(id).await?;
            continue;
        }
        match create(store, id, &old.cron, &old.time_zone, old.paused).await {
            Ok(_) | Err(shedlock::Error::ScheduleExists { .. }) => {
                db.forget_legacy_schedule(id).await?;
                say!(
                    "moved the schedule of #{id} {} into the store: \"{}\" in {}{}",
                    shown(&session.display_name),
                    shown(&old.cron),
                    shown(&old.time_zone),
                    if old.paused { ", paused" } else { "" }
                );
            }
            Err(error @ shedlock::Error::InvalidSchedule { .. }) => tell!(
                "repo_sync: #{id} {}: its schedule \"{}\" in {} (kept by an earlier version) \
                 cannot be moved into the store, so it is not scheduled: {}; set one with \
                 `add {} --cron ... --time-zone ...`",
                shown(&session.display_name),
                shown(&old.cron),
                shown(&old.time_zone),
                shown(&error.to_string()),
                shown(&session.source)
            ),
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// Outcomes of runs by hand made in this process, by repository, for `sync-now` to print.
#[derive(Debug, Clone, Default)]
pub(crate) struct RanHere(Arc<Mutex<HashMap<i64, Result<Outcome, String>>>>);

impl RanHere {
    fn put(&self, id: i64, outcome: Result<Outcome, String>) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, outcome);
    }

    fn take(&self, id: i64) -> Option<Result<Outcome, String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&id)
    }
}

/// What the handler does with a run in this process.
#[derive(Clone)]
pub(crate) enum Mode {
    /// Syncs, and prints a line per run (`run --role all`).
    Sync,
    /// Syncs, and keeps the outcomes of runs by hand for `sync-now` (the command's own
    /// scheduler).
    Collect(RanHere),
    /// Hands each run to the queue, for `run --role worker` processes (`run --role scheduler`):
    /// a tick as the tick, a run by hand as [`crate::db::run_now_job`]'s job name.
    #[cfg_attr(not(feature = "workers"), allow(dead_code, reason = "worker mode's"))]
    HandOff(Arc<dyn TickQueue>),
}

/// Registers the handler `repo_sync` on `scheduler` (built with `.schedules(…)`): each run
/// syncs its payload's repository under the run's lock (`job::sync_under`), or hands it off.
pub(crate) fn register(
    scheduler: &Scheduler,
    ctx: Arc<Ctx>,
    store: Arc<dyn Locks>,
    mode: Mode,
    lock: HandlerLock,
) -> shedlock::Result<()> {
    scheduler.handler_with_lock(HANDLER, lock, move |p: Payload, lock: LockContext| {
        let (ctx, store, mode) = (Arc::clone(&ctx), Arc::clone(&store), mode.clone());
        async move {
            let id = p.repository_id;
            if let Mode::HandOff(queue) = &mode {
                return hand_off(queue.as_ref(), id, &lock).await;
            }
            let trigger = match lock.tick() {
                Some(tick) => Trigger::Tick {
                    tick_ms: tick.timestamp_millis(),
                    interval_ms: interval_of(store.as_ref(), id, tick).await,
                },
                None => Trigger::Manual,
            };
            let tick = lock.tick();
            let outcome = sync_under(&ctx, id, trigger, lock).await;
            match (&mode, tick) {
                (Mode::Collect(ran), None) => ran.put(id, outcome.clone()),
                (_, Some(tick)) => {
                    if let Ok(Outcome::Synced(s)) = &outcome {
                        say!(
                            "#{id} tick {tick}: {} files, {} chunks",
                            s.files,
                            s.chunks_written
                        );
                    }
                }
                (_, None) => match &outcome {
                    Ok(Outcome::Synced(s)) => {
                        say!("#{id} synced now, as asked:");
                        crate::commands::print_summary(s);
                    }
                    Ok(Outcome::NotSynced(reason)) => {
                        say!("#{id}: not synced: {}", shown(reason));
                    }
                    Err(error) => say!("#{id}: sync failed: {}", shown(error)),
                },
            }
            outcome.map(drop)
        }
    })
}

/// The gap between a repository's ticks around `tick`, by its stored schedule (a minute when
/// it cannot be read).
async fn interval_of(store: &dyn Locks, id: i64, tick: chrono::DateTime<chrono::Utc>) -> i64 {
    match schedule_of(store, id).await {
        Ok(Some(row)) => match parsed(&row) {
            Some(Ok(schedule)) => crate::interval_ms(&schedule, tick),
            _ => 60_000,
        },
        _ => 60_000,
    }
}

/// `run --role scheduler`: the run's tick (claimed by the run's lock) goes to the queue as a
/// [`HandOff`] with the claim's fencing token; a run by hand goes as one of
/// [`run_now_job`](crate::db::run_now_job), at the time it ran.
async fn hand_off(queue: &dyn TickQueue, id: i64, lock: &LockContext) -> Result<(), String> {
    let (job, tick) = match lock.tick() {
        Some(tick) => (lock_name(id), tick),
        None => (crate::db::run_now_job(id), chrono::Utc::now()),
    };
    let hand_off = HandOff {
        job,
        tick,
        lock: lock_name(id),
        fencing_token: lock.fencing_token(),
    };
    queue
        .enqueue(&hand_off)
        .await
        .map(drop)
        .map_err(|e| format!("could not hand the run to the queue: {e}"))
}

/// Whether a history row is of a run by hand: its `requested_by`, or (the scheduler's
/// history does not write that column yet) a tick that is the run's start, to the millisecond
/// (a cron tick is a whole second; retries, which also have milliseconds, are not set here).
fn by_hand(run: &RunRecord) -> bool {
    run.requested_by.is_some()
        || (run.attempt.is_none()
            && run
                .tick
                .is_some_and(|tick| tick.timestamp_subsec_nanos() != 0))
}

/// How long the command's own scheduler's history keeps rows: it prunes nothing that `run
/// --keep-history` keeps.
const ONE_SHOT_KEEP: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// `sync-now` and the first run: "run now" requests, run by whichever instance with the
/// handler claims them first: a `run` process, or the command's own scheduler (started here,
/// with only the requested repositories' jobs kept, so it fires no other repository's ticks).
pub(crate) struct SyncNow {
    scheduler: Scheduler,
    store: Arc<dyn Locks>,
    ran: RanHere,
    /// The requests that found the lock held: asked again once this scheduler stopped (its
    /// own request again may have been cut short by the stop).
    held: Mutex<Vec<String>>,
    /// The requests made before this scheduler started, by job name, each with the newest
    /// history row id then: a request already pending (one that found the lock held) is
    /// answered "already asked for" and runs once, rather than being run by this scheduler
    /// as it starts and then asked for again.
    asked: Mutex<HashMap<String, (TriggerAnswer, i64)>>,
}

/// How a request ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Run here: its outcome.
    Here(Result<Outcome, String>),
    /// Run by another instance: its history row.
    Elsewhere(RunRecord),
    /// The lock was held: the request stays pending for when it is free.
    Held,
    /// Ended on an instance that keeps no run history: nothing more is known here.
    Unknown,
}

impl SyncNow {
    /// The command's scheduler, with the jobs of the repositories `ids` only.
    pub(crate) async fn start(
        ctx: Arc<Ctx>,
        store: Arc<dyn Locks>,
        ids: &[i64],
    ) -> Result<Self, AnyError> {
        let scheduler = Scheduler::builder(Arc::clone(&store))
            .misfire_grace(Duration::ZERO)
            .history(RunHistory::keep_for(ONE_SHOT_KEEP))
            .shutdown_timeout(ctx.lock_at_most_for)
            .schedules(ScheduleWatch::new().poll_every(Duration::from_millis(100))?)
            .build();
        let ran = RanHere::default();
        let lock = HandlerLock {
            lock_at_most_for: ctx.lock_at_most_for,
            lock_at_least_for: ctx.lock_at_least_for,
        };
        register(
            &scheduler,
            ctx,
            Arc::clone(&store),
            Mode::Collect(ran.clone()),
            lock,
        )?;
        let mut asked = HashMap::new();
        for id in ids {
            let name = lock_name(*id);
            let query = RunQuery::latest(20).name(name.clone());
            let baseline = store.runs(&query).await?.first().map_or(0, |r| r.id);
            asked.insert(name.clone(), (scheduler.trigger(&name).await?, baseline));
        }
        scheduler.start();
        scheduler.ready().await?;
        // The store's schedules read (each repository's job added).
        let version = store.schedules_version().await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while scheduler.schedules_applied().unwrap_or_default() < version {
            if tokio::time::Instant::now() > deadline {
                scheduler.shutdown().await;
                return Err("the schedules in the store could not be read within 30 s (see the log: RUST_LOG=shedlock=warn)".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        scheduler.ready().await?;
        let keep: Vec<String> = ids.iter().map(|id| lock_name(*id)).collect();
        for name in scheduler.job_names() {
            if !keep.contains(&name) {
                scheduler.remove(&name);
            }
        }
        Ok(Self {
            scheduler,
            store,
            ran,
            held: Mutex::default(),
            asked: Mutex::new(asked),
        })
    }

    /// Asks for one run of repository `id` now and waits until it ended, wherever it ran.
    pub(crate) async fn run(&self, id: i64) -> Result<Ended, AnyError> {
        let name = lock_name(id);
        let me = self.store.locked_by().to_owned();
        let query = RunQuery::latest(20).name(name.clone());
        let asked = self
            .asked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&name);
        let (answer, baseline) = match asked {
            Some(asked) => asked,
            None => {
                let baseline = self.store.runs(&query).await?.first().map_or(0, |r| r.id);
                (self.scheduler.trigger(&name).await?, baseline)
            }
        };
        let request = match answer {
            TriggerAnswer::Requested { id } => id,
            TriggerAnswer::AlreadyPending(pending) => {
                say!(
                    "  a run of #{id} was already asked for by {}: waiting for it",
                    shown(&pending.requested_by)
                );
                pending.id
            }
            other => return Err(format!("run now of {name}: {other}").into()),
        };
        let mut ended_at: Option<tokio::time::Instant> = None;
        loop {
            if let Some(outcome) = self.ran.take(id) {
                return Ok(Ended::Here(outcome));
            }
            let row = self.store.schedule(&name).await?;
            match row.as_ref().and_then(|r| r.trigger.as_ref()) {
                Some(t) if t.id == request => {
                    // Still pending: its run may have found the lock held, and the scheduler
                    // that claimed it tries again every poll, the request kept.
                    let held = self.store.runs(&query).await?.into_iter().any(|r| {
                        r.id > baseline && by_hand(&r) && r.outcome == RunOutcome::SkippedHeld
                    });
                    if held {
                        return Ok(self.held(name));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                // Asked again for the same asker: its run found the lock held, and the
                // scheduler that claimed it waits for the lock to be free.
                Some(t) if t.requested_by == me => return Ok(self.held(name)),
                _ => {}
            }
            if let Some(outcome) = self.ran.take(id) {
                return Ok(Ended::Here(outcome));
            }
            let run = self
                .store
                .runs(&query)
                .await?
                .into_iter()
                .find(|r| r.id > baseline && by_hand(r) && r.outcome != RunOutcome::Running);
            match run {
                Some(run) if run.outcome == RunOutcome::SkippedHeld => {
                    return Ok(self.held(name));
                }
                Some(run) => return Ok(Ended::Elsewhere(run)),
                None if ended_at
                    .get_or_insert_with(tokio::time::Instant::now)
                    .elapsed()
                    > Duration::from_secs(10) =>
                {
                    return Ok(Ended::Unknown);
                }
                None => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Notes that request of `name` found the lock held.
    fn held(&self, name: String) -> Ended {
        self.held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name);
        Ended::Held
    }

    /// Stops the command's scheduler (a run it started finishes first), then asks again for
    /// each run that found the lock held, so the request stays pending for a `run` instance
    /// (or the next `sync-now`) when this scheduler's own asking again was cut short.
    pub(crate) async fn stop(self) -> Result<(), AnyError> {
        self.scheduler.shutdown().await;
        let me = self.store.locked_by().to_owned();
        let held = std::mem::take(&mut *self.held.lock().unwrap_or_else(|e| e.into_inner()));
        for name in held {
            self.store.request_trigger(&name, &me).await?;
        }
        Ok(())
    }
}

/// Refuses a repository that has no schedule in the store, saying how to give it one.
pub(crate) async fn scheduled(store: &dyn Locks, s: &crate::db::Session) -> Result<(), AnyError> {
    if schedule_of(store, s.id).await?.is_none() {
        return Err(format!(
            "#{} {} has no schedule in the store: give it one with `add {} --cron ...`",
            s.id,
            shown(&s.display_name),
            shown(&s.source)
        )
        .into());
    }
    Ok(())
}

/// `pause` and `resume`: the scheduler's, on the repository's schedule (every instance
/// applies it within its poll interval).
pub(crate) async fn set_paused(
    db: &Db,
    provider: Arc<dyn Locks>,
    repo: &str,
    paused: bool,
) -> Result<(), AnyError> {
    let s = crate::find(db, repo).await?;
    scheduled(provider.as_ref(), &s).await?;
    // Not started: only its methods that change the store are used.
    let scheduler = Scheduler::builder(provider)
        .schedules(ScheduleWatch::default())
        .build();
    let name = lock_name(s.id);
    if paused {
        scheduler.pause(&name).await?;
        say!("paused #{} {}", s.id, shown(&s.display_name));
    } else {
        scheduler.resume(&name).await?;
        say!("resumed #{} {}", s.id, shown(&s.display_name));
    }
    Ok(())
}
