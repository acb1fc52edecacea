//! The commands that change a schedule: `pause`, `resume`, `trigger`, `reschedule`, `reset`,
//! `create`, `delete`. Each writes through [`ScheduleStore`](shedlock::schedules::ScheduleStore)
//! as `cli:<user>@<host>` and prints what it did (`--json`: one object).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::schedules::{
    NewSchedule, RetryPolicy, ScheduleChange, StoredSchedule, TriggerAnswer,
};
use shedlock::{RunStore, Schedule};

use super::{
    FLEET_SCHEDULE, cron_text, find, jitter_json, jitter_text, kind, known_zone, next_ticks,
    no_such_schedule, operator, retry_json, retry_text, schedule_json, trigger_json, zone_text,
};
use crate::args::{
    CreateArgs, DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_CAP, NameArgs, PauseArgs, RescheduleArgs,
    ResumeArgs, Setting, TuningArgs,
};
use crate::db::Steered;
use crate::failure::Failure;
use crate::output::{human, json_time, pretty, print, time};

/// How many ticks `reschedule` and `create` show.
const SHOWN_TICKS: usize = 3;

fn print_json(value: &Value) {
    print(&format!("{}\n", pretty(value)));
}

/// The job's name, or the fleet's schedule with `--fleet`.
fn target(name: Option<&str>, fleet: bool) -> &str {
    if fleet {
        FLEET_SCHEDULE
    } else {
        name.unwrap_or(FLEET_SCHEDULE)
    }
}

/// `pause NAME [--cancel-running [--lock LOCK]]`, `pause --fleet`.
pub(crate) async fn pause(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &PauseArgs,
) -> Result<(), Failure> {
    let name = target(args.name.as_deref(), args.fleet);
    let before = if args.fleet {
        store.schedule(name).await?.filter(|s| !s.deleted)
    } else {
        match find(store, runs, name).await {
            Ok(found) => found,
            // A job known to the store only by the lock given (its lock named otherwise, no
            // run history): that lock's presence is what makes the name known.
            Err(failure) => match args.lock.as_deref() {
                Some(lock) if store.lock_state(lock).await?.is_some() => None,
                _ => return Err(failure),
            },
        }
    };
    let was_paused = before.as_ref().is_some_and(|s| s.paused);
    let by = operator();
    let stored = store
        .update_schedule(name, &ScheduleChange::new().paused(true), &by)
        .await?;
    let cancel = if args.cancel_running {
        let (lock, found_by) = job_lock(runs, name, before.as_ref(), args.lock.as_deref()).await?;
        Some(cancel_running(store, lock, found_by).await?)
    } else {
        None
    };
    let now = store.now().await?;
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "paused",
            "fleet": args.fleet,
            "was_paused": was_paused,
            "cancel_running": cancel.as_ref().map(Cancel::json),
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    let mut text = if args.fleet {
        format!(
            "paused the whole fleet ({FLEET_SCHEDULE}, version {}, by {by}): no job fires until `shedlock resume --fleet`{}\n",
            stored.version,
            if was_paused {
                " (it was paused already)"
            } else {
                ""
            }
        )
    } else {
        format!(
            "paused {name:?} (version {}, by {by}){}: it fires nowhere until `shedlock resume {name}`\n",
            stored.version,
            if was_paused {
                "; it was paused already"
            } else {
                ""
            }
        )
    };
    match &cancel {
        Some(cancel) => text.push_str(&cancel.text()),
        None if !args.fleet => text.push_str(
            "a run going on (if any) goes on to its end; `pause --cancel-running` also cancels it\n",
        ),
        None => {}
    }
    print(&text);
    Ok(())
}

/// How many of the job's newest history rows are read for its lock's name.
const LOCK_RUNS: u32 = 20;

/// How `--cancel-running` found the job's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FoundBy {
    /// `--lock`.
    Option,
    /// A run-time job's lock is its name.
    RunTime,
    /// The lock the job's runs took, as its run history records them.
    History,
    /// No better knowledge: the lock of the job's name.
    JobName,
}

impl FoundBy {
    fn json(self) -> &'static str {
        match self {
            FoundBy::Option => "option",
            FoundBy::RunTime => "run_time_job",
            FoundBy::History => "run_history",
            FoundBy::JobName => "job_name",
        }
    }

    fn text(self) -> &'static str {
        match self {
            FoundBy::Option => "given with --lock",
            FoundBy::RunTime => "a run-time job's lock is its name",
            FoundBy::History => "the lock the job's runs took, by the run history",
            FoundBy::JobName => "the lock named like the job",
        }
    }
}

/// The lock of job `name`: `--lock`; a run-time job's own name; else the lock its newest
/// runs took (a run going on first), read from the run history; else its name.
async fn job_lock(
    runs: Option<&dyn RunStore>,
    name: &str,
    schedule: Option<&StoredSchedule>,
    given: Option<&str>,
) -> Result<(String, FoundBy), Failure> {
    if let Some(lock) = given {
        return Ok((lock.to_owned(), FoundBy::Option));
    }
    if schedule.is_some_and(|s| s.handler.is_some()) {
        return Ok((name.to_owned(), FoundBy::RunTime));
    }
    if let Some(runs) = runs {
        let rows = runs.runs(&RunQuery::latest(LOCK_RUNS).name(name)).await?;
        let of_job: Vec<_> = rows.into_iter().filter(|r| r.job == name).collect();
        let pick = of_job
            .iter()
            .find(|r| r.outcome == RunOutcome::Running)
            .or_else(|| of_job.first());
        if let Some(run) = pick {
            return Ok((run.name.clone(), FoundBy::History));
        }
    }
    Ok((name.to_owned(), FoundBy::JobName))
}

/// What `pause --cancel-running` did to the job's lock.
struct Cancel {
    /// The lock's name.
    lock: String,
    /// How it was found.
    found_by: FoundBy,
    /// What was done.
    did: Did,
}

enum Did {
    /// No lock of that name.
    NoLock,
    /// The lock was free: no run going on.
    Free { token: i64 },
    /// The lock held by `holder` with `token` was released (or had changed hands meanwhile).
    Released {
        holder: String,
        token: i64,
        until: DateTime<Utc>,
        released: bool,
    },
}

impl Cancel {
    fn json(&self) -> Value {
        let mut value = match &self.did {
            Did::NoLock => json!({ "lock": false, "held": false, "released": false }),
            Did::Free { token } => {
                json!({ "lock": true, "held": false, "released": false, "fencing_token": token })
            }
            Did::Released {
                holder,
                token,
                until,
                released,
            } => json!({
                "lock": true,
                "held": true,
                "released": released,
                "holder": holder,
                "fencing_token": token,
                "locked_until": json_time(*until),
            }),
        };
        value["lock_name"] = json!(self.lock);
        value["lock_found_by"] = json!(self.found_by.json());
        value
    }

    fn text(&self) -> String {
        let lock = &self.lock;
        let how = self.found_by.text();
        match &self.did {
            Did::NoLock if self.found_by == FoundBy::JobName => format!(
                "--cancel-running: no lock named {lock:?} and no run of the job in a run history: \
                 no run to cancel (if the job's lock is named otherwise, give it with --lock LOCK)\n"
            ),
            Did::NoLock => {
                format!("--cancel-running: no lock named {lock:?} ({how}): no run to cancel\n")
            }
            Did::Free { token } => format!(
                "--cancel-running: the lock {lock:?} ({how}) is free (token {token}): no run going on\n"
            ),
            Did::Released {
                holder,
                token,
                released: true,
                ..
            } => format!(
                "--cancel-running: released the lock {lock:?} ({how}) held by {holder} (token \
                 {token}): the run stops at its next keep-alive renewal (lost lock); without \
                 keep-alive it runs on unguarded, its fencing token {token} stale\n"
            ),
            Did::Released {
                holder,
                token,
                released: false,
                ..
            } => format!(
                "--cancel-running: the lock {lock:?} ({how}) held by {holder} (token {token}) \
                 changed hands or expired before it was released: nothing released (the job is \
                 paused, so no new run starts)\n"
            ),
        }
    }
}

/// Releases `lock` from its current holder, by the token read.
async fn cancel_running(
    store: &dyn Steered,
    lock: String,
    found_by: FoundBy,
) -> Result<Cancel, Failure> {
    let did = match store.lock_state(&lock).await? {
        None => Did::NoLock,
        Some(state) if !state.is_held() => Did::Free {
            token: state.fencing_token,
        },
        Some(state) => {
            let released = store.force_release(&lock, state.fencing_token).await?;
            Did::Released {
                holder: state.locked_by,
                token: state.fencing_token,
                until: state.locked_until,
                released,
            }
        }
    };
    Ok(Cancel {
        lock,
        found_by,
        did,
    })
}

/// `resume NAME`, `resume --fleet`.
pub(crate) async fn resume(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &ResumeArgs,
) -> Result<(), Failure> {
    let name = target(args.name.as_deref(), args.fleet);
    let before = if args.fleet {
        store.schedule(name).await?.filter(|s| !s.deleted)
    } else {
        find(store, runs, name).await?
    };
    let was_paused = before.as_ref().is_some_and(|s| s.paused);
    let what = if args.fleet {
        "the whole fleet".to_owned()
    } else {
        format!("{name:?}")
    };
    if before.is_none() {
        // Nothing stored: nothing is paused, and no empty override is written.
        if args.json {
            print_json(&json!({
                "name": name,
                "result": "not_paused",
                "fleet": args.fleet,
                "was_paused": false,
                "schedule": null,
            }));
        } else {
            print(&format!("{what} is not paused; nothing to do\n"));
        }
        return Ok(());
    }
    let by = operator();
    let stored = store
        .update_schedule(name, &ScheduleChange::new().paused(false), &by)
        .await?;
    let now = store.now().await?;
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "resumed",
            "fleet": args.fleet,
            "was_paused": was_paused,
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    print(&format!(
        "resumed {what} (version {}, by {by}){}\n",
        stored.version,
        if was_paused {
            ""
        } else {
            "; it was not paused"
        }
    ));
    Ok(())
}

/// `trigger NAME`: exit 0 when requested, 4 when a request is already pending.
pub(crate) async fn trigger(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &NameArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    if name == FLEET_SCHEDULE {
        return Err(Failure::Usage(format!(
            "{FLEET_SCHEDULE} is the fleet's pause, not a job: there is nothing to run"
        )));
    }
    find(store, runs, name).await?;
    let by = operator();
    match store.request_trigger(name, &by).await? {
        TriggerAnswer::Requested { id } => {
            if args.json {
                print_json(
                    &json!({ "name": name, "result": "requested", "id": id, "requested_by": by }),
                );
            } else {
                print(&format!(
                    "requested a run of {name:?} now (request {id}, by {by}): one instance runs it under its lock\n"
                ));
            }
            Ok(())
        }
        TriggerAnswer::AlreadyPending(pending) => {
            if args.json {
                print_json(&json!({
                    "name": name,
                    "result": "already_pending",
                    "trigger": trigger_json(&pending),
                }));
            }
            let state = match (&pending.claimed_by, pending.started) {
                (Some(on), true) => format!(", its run going on on {on}"),
                (Some(on), false) => format!(", claimed by {on}"),
                (None, _) => String::new(),
            };
            Err(Failure::NotDone(format!(
                "already pending (asked by {} at {}{state}): a run of {name:?} was not requested again",
                pending.requested_by,
                time(pending.requested_at)
            )))
        }
        // A newer answer of the store: nothing is known to have been added.
        other => Err(Failure::NotDone(format!("{other}"))),
    }
}

/// `--jitter`, `--retry …` and `--no-retry` as a change of the stored schedule. `create` is
/// true for `create`, where there is no code's value to go back to.
fn tuning_change(
    args: &TuningArgs,
    change: &mut ScheduleChange,
    create: bool,
) -> Result<(), Failure> {
    let no_default = |flag: &str| {
        Failure::Usage(format!(
            "{flag} default: a job created at run time has no code to take a default from; \
             leave {flag} out instead"
        ))
    };
    match args.jitter {
        Some(Setting::Set(jitter)) => change.jitter = Some(Some(jitter)),
        Some(Setting::Default) if create => return Err(no_default("--jitter")),
        Some(Setting::Default) => change.jitter = Some(None),
        None => {}
    }
    if args.no_retry {
        change.retry = Some(Some(RetryPolicy::new(1, Duration::ZERO, Duration::ZERO)));
    }
    match args.retry {
        Some(Setting::Set(attempts)) => {
            let base = args.retry_backoff.unwrap_or(DEFAULT_RETRY_BACKOFF);
            let cap = args.retry_cap.unwrap_or(DEFAULT_RETRY_CAP.max(base));
            if cap < base {
                return Err(Failure::Usage(format!(
                    "--retry-cap {} is shorter than --retry-backoff {}: the cap bounds every \
                     retry's delay, so it must be at least the backoff",
                    human(cap, true),
                    human(base, true)
                )));
            }
            let policy =
                RetryPolicy::new(attempts, base, cap).past_next_tick(args.retry_past_next_tick);
            change.retry = Some(Some(policy));
        }
        Some(Setting::Default) if create => return Err(no_default("--retry")),
        Some(Setting::Default) => {
            if args.retry_backoff.is_some() || args.retry_cap.is_some() || args.retry_past_next_tick
            {
                return Err(Failure::Usage(
                    "--retry default goes back to the code's retry policy: it takes no \
                     --retry-backoff, --retry-cap or --retry-past-next-tick"
                        .into(),
                ));
            }
            change.retry = Some(None);
        }
        None => {}
    }
    Ok(())
}

/// `reschedule NAME [--cron EXPR [--time-zone TZ]] [--jitter D] [--retry N … | --no-retry]`:
/// checked (the cron with [`Schedule::parse`]) before anything is written.
pub(crate) async fn reschedule(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &RescheduleArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    if name == FLEET_SCHEDULE {
        return Err(Failure::Usage(format!(
            "{FLEET_SCHEDULE} is the fleet's pause, not a job: it has no schedule to change"
        )));
    }
    if args.cron.is_none() && !args.tuning.any() {
        return Err(Failure::Usage(format!(
            "nothing to change: give --cron EXPR (with --time-zone TZ), --jitter DURATION, \
             --retry MAX_ATTEMPTS (with --retry-backoff, --retry-cap, --retry-past-next-tick) or \
             --no-retry (`shedlock reschedule {name} --help` says more)"
        )));
    }
    let mut change = ScheduleChange::new();
    tuning_change(&args.tuning, &mut change, false)?;
    let before = find(store, runs, name).await?;
    // The zone the new cron is read in: the one given, else the stored one (UTC for a run-time
    // job); an override without one keeps the code's, unknown here: its ticks are shown in UTC.
    let zone: Option<String> = args
        .time_zone
        .clone()
        .or_else(|| before.as_ref().and_then(known_zone).map(str::to_owned));
    let assumed_utc = zone.is_none();
    let zone_read = zone.clone().unwrap_or_else(|| "UTC".to_owned());
    if let Some(cron) = &args.cron {
        // The macros' checks and hints; an error here writes nothing.
        Schedule::parse(cron, &zone_read)?;
        change.cron = Some(Some(cron.clone()));
        if let Some(zone) = &args.time_zone {
            change.time_zone = Some(Some(zone.clone()));
        }
    }
    let by = operator();
    let stored = store.update_schedule(name, &change, &by).await?;
    let now = store.now().await?;
    let ticks = match &args.cron {
        Some(cron) => next_ticks(cron, &zone_read, now, SHOWN_TICKS),
        None => Vec::new(),
    };
    let old_cron = before.as_ref().and_then(|s| s.cron.clone());
    let old_zone = before.as_ref().and_then(|s| s.time_zone.clone());
    let old_jitter = before.as_ref().and_then(|s| s.jitter);
    let old_retry = before.as_ref().and_then(|s| s.retry);
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "rescheduled",
            "old": {
                "cron": old_cron,
                "time_zone": old_zone,
                "jitter_ms": jitter_json(old_jitter),
                "retry": retry_json(old_retry.as_ref()),
            },
            "new": {
                "cron": stored.cron,
                "time_zone": stored.time_zone,
                "jitter_ms": jitter_json(stored.jitter),
                "retry": retry_json(stored.retry.as_ref()),
            },
            "next_ticks": ticks.iter().copied().map(json_time).collect::<Vec<_>>(),
            "next_ticks_time_zone": args.cron.as_ref().map(|_| zone_read.clone()),
            "time_zone_assumed": args.cron.is_some() && assumed_utc,
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    let old_zone_text = before
        .as_ref()
        .map_or_else(|| "code default".to_owned(), zone_text);
    let mut text = format!(
        "rescheduled {name:?} (version {}, by {by}):\n",
        stored.version
    );
    if let Some(cron) = &args.cron {
        text.push_str(&format!(
            "  cron       {} → {cron}\n  time zone  {old_zone_text} → {}\n",
            cron_text(old_cron.as_deref()),
            zone_text(&stored),
        ));
    }
    if change.jitter.is_some() {
        text.push_str(&format!(
            "  jitter     {} → {}\n",
            jitter_text(old_jitter),
            jitter_text(stored.jitter)
        ));
    }
    if change.retry.is_some() {
        text.push_str(&format!(
            "  retry      {} → {}\n",
            retry_text(old_retry.as_ref()),
            retry_text(stored.retry.as_ref())
        ));
    }
    if args.cron.is_some() {
        if assumed_utc {
            text.push_str(
                "  next ticks in UTC (the job keeps its code's time zone; pass --time-zone to set one):\n",
            );
        } else {
            text.push_str(&format!("  next ticks ({zone_read}):\n"));
        }
        for tick in &ticks {
            text.push_str(&format!("    {}\n", time(*tick)));
        }
        if ticks.is_empty() {
            text.push_str("    none: it never fires again\n");
        }
    }
    print(&text);
    Ok(())
}

/// `reset NAME`: clears an override; a run-time job is refused (that is `delete`).
pub(crate) async fn reset(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &NameArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    let before = find(store, runs, name).await?;
    let Some(before) = before else {
        if args.json {
            print_json(&json!({ "name": name, "result": "no_override" }));
        } else {
            print(&format!(
                "{name:?} has no override in the store: the code's schedule applies already; nothing to do\n"
            ));
        }
        return Ok(());
    };
    if let Some(handler) = &before.handler {
        return Err(Failure::Usage(format!(
            "{name:?} is a job created at run time (handler {handler:?}), not an override of a \
             job in code: there is no code schedule to go back to; use `shedlock delete {name}` to \
             delete it"
        )));
    }
    let by = operator();
    let deleted = store.delete_schedule(name, &by).await?;
    let now = store.now().await?;
    if args.json {
        print_json(&json!({
            "name": name,
            "result": if deleted { "reset" } else { "no_override" },
            "cleared": schedule_json(&before, now),
        }));
        return Ok(());
    }
    print(&format!(
        "reset {name:?} (by {by}): cleared the override (cron {}, time zone {}, {}); the code's schedule applies again\n",
        cron_text(before.cron.as_deref()),
        zone_text(&before),
        if before.paused {
            "paused"
        } else {
            "not paused"
        },
    ));
    Ok(())
}

/// `create NAME --handler H --cron EXPR [--time-zone TZ] [--payload JSON]`.
pub(crate) async fn create(store: &dyn Steered, args: &CreateArgs) -> Result<(), Failure> {
    let name = args.name.as_str();
    if name == FLEET_SCHEDULE {
        return Err(Failure::Usage(format!(
            "{FLEET_SCHEDULE} is the fleet's pause, kept by `pause --fleet`: choose another name"
        )));
    }
    let payload = args.payload.clone().unwrap_or_else(|| "null".to_owned());
    if let Err(e) = serde_json::from_str::<Value>(&payload) {
        return Err(Failure::Usage(format!(
            "the payload of {name:?} is not JSON: {e} (quote it for the shell: --payload '{{\"id\": 42}}')"
        )));
    }
    let zone = args.time_zone.clone().unwrap_or_else(|| "UTC".to_owned());
    Schedule::parse(&args.cron, &zone)?;
    let mut new = NewSchedule::job(
        name,
        args.handler.clone(),
        payload,
        args.cron.clone(),
        args.time_zone.clone(),
    );
    tuning_change(&args.tuning, &mut new.fields, true)?;
    let by = operator();
    let stored = store.create_schedule(&new, &by).await?;
    let now = store.now().await?;
    let ticks = next_ticks(&args.cron, &zone, now, SHOWN_TICKS);
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "created",
            "next_ticks": ticks.iter().copied().map(json_time).collect::<Vec<_>>(),
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    let mut text = format!(
        "created {name:?} (version {}, by {by}): handler {:?}, cron {} in {zone}; every instance \
         that registered the handler runs it\n",
        stored.version, args.handler, args.cron
    );
    if stored.jitter.is_some() {
        text.push_str(&format!("  jitter  {}\n", jitter_text(stored.jitter)));
    }
    if stored.retry.is_some() {
        text.push_str(&format!(
            "  retry   {}\n",
            retry_text(stored.retry.as_ref())
        ));
    }
    text.push_str("  next ticks:\n");
    for tick in &ticks {
        text.push_str(&format!("    {}\n", time(*tick)));
    }
    print(&text);
    Ok(())
}

/// `delete NAME`: a run-time job, or an override (as `reset`).
pub(crate) async fn delete(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &NameArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    let Some(before) = find(store, runs, name).await? else {
        return Err(no_such_schedule(
            store,
            runs,
            name,
            "; it has a lock or runs but no schedule in the store: it is defined in code",
        )
        .await);
    };
    let by = operator();
    store.delete_schedule(name, &by).await?;
    let now = store.now().await?;
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "deleted",
            "kind": kind(&before),
            "deleted": schedule_json(&before, now),
        }));
        return Ok(());
    }
    print(&deleted_text(name, &before, &by));
    Ok(())
}

fn deleted_text(name: &str, before: &StoredSchedule, by: &str) -> String {
    match &before.handler {
        Some(handler) => format!(
            "deleted {name:?} (by {by}): the run-time job of handler {handler:?} fires nowhere from now on\n"
        ),
        None => format!(
            "deleted the override of {name:?} (by {by}): the code's schedule applies again\n"
        ),
    }
}
