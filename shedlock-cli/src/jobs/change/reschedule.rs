//! `trigger`, `reschedule` and `reset`: the commands that change when a job runs.

use serde_json::{Value, json};
use shedlock::RunStore;
use shedlock::schedules::{Deadlines, ScheduleChange, StoredSchedule, TimeRules, TriggerAnswer};

use super::{SHOWN_TICKS, print_json, tuning_change};
use crate::args::{NameArgs, RescheduleArgs};
use crate::db::Steered;
use crate::failure::Failure;
use crate::jobs::{
    FLEET_SCHEDULE, actor, cron_text, desk, failure, find, jitter_json, jitter_text, next_ticks,
    report, retry_json, retry_text, schedule_json, trigger_json, zone_text,
};
use crate::output::{json_time, print, time};

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
    let job = find(store, runs, name).await?;
    let actor = actor();
    let by = actor.who.as_str();
    let asked = desk(store, runs)
        .trigger(&job, &actor, args.note.as_deref())
        .await
        .map_err(failure)?;
    report(&asked, runs);
    match asked.value {
        TriggerAnswer::Requested { id } => {
            let warning = asked.unapplied.clone();
            if args.json {
                print_json(
                    &json!({ "name": name, "result": "requested", "id": id, "requested_by": by, "warning": warning }),
                );
            } else if let Some(warning) = warning {
                print(&format!(
                    "stored a request to run {name:?} now (request {id}, by {by}), but WARNING: {warning}; the request waits\n"
                ));
            } else {
                print(&format!(
                    "requested a run of {name:?} now (request {id}, by {by}): one instance that carries it runs it under its lock\n"
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

/// `reschedule NAME [--cron EXPR [--time-zone TZ]] [--jitter D] [--retry N … | --no-retry] [--overlap P]`:
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
    let edits = args.deadlines.edits();
    if args.cron.is_none() && !args.tuning.any() && !args.rules.any() && edits.is_empty() {
        return Err(Failure::Usage(format!(
            "nothing to change: give --cron EXPR (with --time-zone TZ), --jitter DURATION, \
             --retry MAX_ATTEMPTS (with --retry-backoff, --retry-cap, --retry-past-next-tick), \
             --no-retry, --overlap POLICY, time rules (--exclude CAL, --on-excluded, --start, \
             --end, --max-runs; --rules-default) or deadlines (--expect-success-within, \
             --max-runtime, --late-after, --failures-in-a-row, --paused-longer-than, \
             --on-overrun) (`shedlock reschedule {name} --help` says more)"
        )));
    }
    let mut change = ScheduleChange::new();
    tuning_change(&args.tuning, &mut change, false)?;
    let job = find(store, runs, name).await?;
    let old_deadlines = deadlines_of(job.schedule.as_ref());
    change = change
        .edit_deadlines(name, job.schedule.as_ref(), &edits)
        .map_err(failure)?;
    if args.rules.writes() {
        let rules = args.rules.rules();
        // Each calendar named must be in the store: the closest name when it is not (exit 3).
        for calendar in &rules.exclude {
            desk(store, runs)
                .calendar(calendar)
                .await
                .map_err(|error| match error {
                    shedlock::Error::NoSuchCalendar {
                        name: missing,
                        hint,
                    } => shedlock::Error::NoSuchCalendar {
                        name: missing,
                        hint: format!(
                            "{hint} (--exclude names a calendar of the store: \
                                 `shedlock calendar list`)"
                        ),
                    }
                    .into(),
                    other => failure(other),
                })?;
        }
        change = change.rules(Some(&rules));
    } else if args.rules.rules_default {
        change = change.rules(None);
    }
    // The zone the new cron is read in: the one given, else the stored one (UTC for a run-time
    // job); an override without one keeps the code's, unknown here: its ticks are shown in UTC.
    let zone: Option<String> = args
        .time_zone
        .clone()
        .or_else(|| job.known_zone().map(str::to_owned));
    let assumed_utc = zone.is_none();
    let zone_read = zone.clone().unwrap_or_else(|| "UTC".to_owned());
    if let Some(cron) = &args.cron {
        change.cron = Some(Some(cron.clone()));
        if let Some(zone) = &args.time_zone {
            change.time_zone = Some(Some(zone.clone()));
        }
    }
    let actor = actor();
    let by = actor.who.as_str();
    let done = desk(store, runs)
        .reschedule(&job, &change, &actor, args.note.as_deref())
        .await
        .map_err(failure)?;
    report(&done, runs);
    let stored = done.value;
    let before = job.schedule.as_ref();
    let now = store.now().await?;
    let ticks = match &args.cron {
        Some(cron) => next_ticks(cron, &zone_read, now, SHOWN_TICKS),
        None => Vec::new(),
    };
    let old_cron = before.and_then(|s| s.cron.clone());
    let old_zone = before.and_then(|s| s.time_zone.clone());
    let old_jitter = before.and_then(|s| s.jitter);
    let old_retry = before.and_then(|s| s.retry);
    let old_overlap = before.and_then(|s| s.overlap.clone());
    let rules_of = |schedule: Option<&shedlock::schedules::StoredSchedule>| {
        schedule
            .and_then(|s| s.rules.as_deref())
            .map(|text| TimeRules::from_json(name, text).unwrap_or_default())
    };
    let (old_rules, new_rules) = (rules_of(before), rules_of(Some(&stored)));
    let new_deadlines = deadlines_of(Some(&stored));
    let deadlines_json = |d: Option<&Deadlines>| d.map_or(Value::Null, |d| json!(d.describe()));
    let rules_json =
        |rules: Option<&TimeRules>| rules.map_or(Value::Null, shedlock_web::json::time_rules);
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "rescheduled",
            "old": {
                "cron": old_cron,
                "time_zone": old_zone,
                "jitter_ms": jitter_json(old_jitter),
                "retry": retry_json(old_retry.as_ref()),
                "overlap": old_overlap,
                "time_rules": rules_json(old_rules.as_ref()),
                "deadlines": deadlines_json(old_deadlines.as_ref()),
            },
            "new": {
                "cron": stored.cron,
                "time_zone": stored.time_zone,
                "jitter_ms": jitter_json(stored.jitter),
                "retry": retry_json(stored.retry.as_ref()),
                "overlap": stored.overlap,
                "time_rules": rules_json(new_rules.as_ref()),
                "deadlines": deadlines_json(new_deadlines.as_ref()),
            },
            "next_ticks": ticks.iter().copied().map(json_time).collect::<Vec<_>>(),
            "next_ticks_time_zone": args.cron.as_ref().map(|_| zone_read.clone()),
            "time_zone_assumed": args.cron.is_some() && assumed_utc,
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    let old_zone_text = before.map_or_else(|| "code default".to_owned(), zone_text);
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
    if change.overlap.is_some() {
        let text_of = |o: Option<&str>| o.map_or_else(|| "code default".to_owned(), str::to_owned);
        text.push_str(&format!(
            "  overlap    {} → {}\n",
            text_of(old_overlap.as_deref()),
            text_of(stored.overlap.as_deref())
        ));
    }
    if change.rules.is_some() {
        let text_of = |rules: Option<&TimeRules>| match rules {
            None => "the code's".to_owned(),
            Some(rules) => crate::calendar::rules_text(Some(rules)),
        };
        text.push_str(&format!(
            "  time rules {} → {}{}\n",
            text_of(old_rules.as_ref()),
            text_of(new_rules.as_ref()),
            if new_rules.is_some() {
                " (the store's: they replace the code's whole)"
            } else {
                ""
            }
        ));
        if new_rules.as_ref().is_some_and(|r| !r.exclude.is_empty()) {
            text.push_str(&format!(
                "  `shedlock jobs {name} --next 10` shows the ticks they leave out\n"
            ));
        }
    }
    if change.deadlines.is_some() {
        let text_of = |d: Option<&Deadlines>| {
            d.map(|d| d.describe().join(", "))
                .filter(|text| !text.is_empty())
                .unwrap_or_else(|| "the code's".to_owned())
        };
        text.push_str(&format!(
            "  deadlines  {} → {} (over the code's; `shedlock check {name}` follows them)\n",
            text_of(old_deadlines.as_ref()),
            text_of(new_deadlines.as_ref()),
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
    if let Some(warning) = &done.unapplied {
        text.push_str(&format!("WARNING: {warning}\n"));
    }
    print(&text);
    Ok(())
}

/// The override of `name`'s promises its stored row keeps, if any (one this version cannot
/// read counts as none: the next write replaces it).
fn deadlines_of(row: Option<&StoredSchedule>) -> Option<Deadlines> {
    row?.deadlines_override().ok().flatten()
}

/// `reset NAME`: clears an override; a run-time job is refused (that is `delete`).
pub(crate) async fn reset(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &NameArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    let job = find(store, runs, name).await?;
    let Some(before) = job.schedule.clone() else {
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
    let actor = actor();
    let by = actor.who.as_str();
    let done = desk(store, runs)
        .reset(&job, &actor, args.note.as_deref())
        .await
        .map_err(failure)?;
    report(&done, runs);
    let deleted = done.value;
    let now = store.now().await?;
    if args.json {
        print_json(&json!({
            "name": name,
            "result": if deleted { "reset" } else { "no_override" },
            "cleared": schedule_json(&before, now),
            "warning": done.unapplied,
        }));
        return Ok(());
    }
    let mut text = format!(
        "reset {name:?} (by {by}): cleared the override (cron {}, time zone {}, {}); the code's schedule applies again\n",
        cron_text(before.cron.as_deref()),
        zone_text(&before),
        if before.paused {
            "paused"
        } else {
            "not paused"
        },
    );
    if let Some(warning) = &done.unapplied {
        text.push_str(&format!("WARNING: {warning}\n"));
    }
    print(&text);
    Ok(())
}
