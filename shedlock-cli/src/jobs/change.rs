//! The commands that change a schedule: `pause`, `resume`, `trigger`, `reschedule`, `reset`,
//! `create`, `delete`. Each writes through [`ScheduleStore`](shedlock::schedules::ScheduleStore)
//! as `cli:<user>@<host>` and prints what it did (`--json`: one object).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shedlock::schedules::{NewSchedule, ScheduleChange, StoredSchedule, TriggerAnswer};
use shedlock::{RunStore, Schedule};

use super::{
    FLEET_SCHEDULE, cron_text, find, kind, known_zone, next_ticks, no_such_schedule, operator,
    schedule_json, trigger_json, zone_text,
};
use crate::args::{CreateArgs, NameArgs, PauseArgs, RescheduleArgs, ResumeArgs};
use crate::db::Steered;
use crate::failure::Failure;
use crate::output::{json_time, pretty, print, time};

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

/// `pause NAME [--cancel-running]`, `pause --fleet`.
pub(crate) async fn pause(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &PauseArgs,
) -> Result<(), Failure> {
    let name = target(args.name.as_deref(), args.fleet);
    let before = if args.fleet {
        store.schedule(name).await?.filter(|s| !s.deleted)
    } else {
        find(store, runs, name).await?
    };
    let was_paused = before.as_ref().is_some_and(|s| s.paused);
    let by = operator();
    let stored = store
        .update_schedule(name, &ScheduleChange::new().paused(true), &by)
        .await?;
    let cancel = if args.cancel_running {
        Some(cancel_running(store, name).await?)
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
        Some(cancel) => text.push_str(&cancel.text(name)),
        None if !args.fleet => text.push_str(
            "a run going on (if any) goes on to its end; `pause --cancel-running` also cancels it\n",
        ),
        None => {}
    }
    print(&text);
    Ok(())
}

/// What `pause --cancel-running` did to the job's lock.
enum Cancel {
    /// No lock of the job's name.
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
        match self {
            Cancel::NoLock => json!({ "lock": false, "held": false, "released": false }),
            Cancel::Free { token } => {
                json!({ "lock": true, "held": false, "released": false, "fencing_token": token })
            }
            Cancel::Released {
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
        }
    }

    fn text(&self, name: &str) -> String {
        match self {
            Cancel::NoLock => {
                format!("--cancel-running: no lock named {name:?}: no run to cancel\n")
            }
            Cancel::Free { token } => format!(
                "--cancel-running: the lock {name:?} is free (token {token}): no run going on\n"
            ),
            Cancel::Released {
                holder,
                token,
                released: true,
                ..
            } => format!(
                "--cancel-running: released the lock {name:?} held by {holder} (token {token}): \
                 the run stops at its next keep-alive renewal (lost lock); without keep-alive it \
                 runs on unguarded, its fencing token {token} stale\n"
            ),
            Cancel::Released {
                holder,
                token,
                released: false,
                ..
            } => format!(
                "--cancel-running: the lock {name:?} held by {holder} (token {token}) changed \
                 hands or expired before it was released: nothing released (the job is paused, \
                 so no new run starts)\n"
            ),
        }
    }
}

/// Releases the lock of `name` from its current holder, by the token read.
async fn cancel_running(store: &dyn Steered, name: &str) -> Result<Cancel, Failure> {
    let Some(state) = store.lock_state(name).await? else {
        return Ok(Cancel::NoLock);
    };
    if !state.is_held() {
        return Ok(Cancel::Free {
            token: state.fencing_token,
        });
    }
    let released = store.force_release(name, state.fencing_token).await?;
    Ok(Cancel::Released {
        holder: state.locked_by,
        token: state.fencing_token,
        until: state.locked_until,
        released,
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

/// `reschedule NAME --cron EXPR [--time-zone TZ]`: checked with [`Schedule::parse`] before
/// anything is written.
pub(crate) async fn reschedule(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &RescheduleArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    if name == FLEET_SCHEDULE {
        return Err(Failure::Usage(format!(
            "{FLEET_SCHEDULE} is the fleet's pause, not a job: it has no cron"
        )));
    }
    let before = find(store, runs, name).await?;
    // The zone the new cron is read in: the one given, else the stored one (UTC for a run-time
    // job); an override without one keeps the code's, unknown here: its ticks are shown in UTC.
    let zone: Option<String> = args
        .time_zone
        .clone()
        .or_else(|| before.as_ref().and_then(known_zone).map(str::to_owned));
    let assumed_utc = zone.is_none();
    let zone_read = zone.clone().unwrap_or_else(|| "UTC".to_owned());
    // The macros' checks and hints; an error here writes nothing.
    Schedule::parse(&args.cron, &zone_read)?;
    let mut change = ScheduleChange::new();
    change.cron = Some(Some(args.cron.clone()));
    if let Some(zone) = &args.time_zone {
        change.time_zone = Some(Some(zone.clone()));
    }
    let by = operator();
    let stored = store.update_schedule(name, &change, &by).await?;
    let now = store.now().await?;
    let ticks = next_ticks(&args.cron, &zone_read, now, SHOWN_TICKS);
    let old_cron = before.as_ref().and_then(|s| s.cron.clone());
    let old_zone = before.as_ref().and_then(|s| s.time_zone.clone());
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "rescheduled",
            "old": { "cron": old_cron, "time_zone": old_zone },
            "new": { "cron": stored.cron, "time_zone": stored.time_zone },
            "next_ticks": ticks.iter().copied().map(json_time).collect::<Vec<_>>(),
            "next_ticks_time_zone": zone_read,
            "time_zone_assumed": assumed_utc,
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    let old_zone_text = before
        .as_ref()
        .map_or_else(|| "code default".to_owned(), zone_text);
    let mut text = format!(
        "rescheduled {name:?} (version {}, by {by}):\n  cron       {} → {}\n  time zone  {old_zone_text} → {}\n",
        stored.version,
        cron_text(old_cron.as_deref()),
        args.cron,
        zone_text(&stored),
    );
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
    let new = NewSchedule::job(
        name,
        args.handler.clone(),
        payload,
        args.cron.clone(),
        args.time_zone.clone(),
    );
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
         that registered the handler runs it\n  next ticks:\n",
        stored.version, args.handler, args.cron
    );
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
