//! `create` and `delete`: the jobs made and removed at run time.

use serde_json::{Value, json};
use shedlock::RunStore;
use shedlock::schedules::{NewSchedule, StoredSchedule};

use super::{SHOWN_TICKS, print_json, tuning_change};
use crate::args::{CreateArgs, NameArgs};
use crate::db::Steered;
use crate::failure::Failure;
use crate::jobs::{
    FLEET_SCHEDULE, actor, desk, failure, find, jitter_text, kind, next_ticks, report, retry_text,
    schedule_json,
};
use crate::output::{json_time, print, time};

/// `create NAME --handler H --cron EXPR [--time-zone TZ] [--payload JSON]`.
pub(crate) async fn create(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CreateArgs,
) -> Result<(), Failure> {
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
    let mut new = NewSchedule::job(
        name,
        args.handler.clone(),
        payload,
        args.cron.clone(),
        args.time_zone.clone(),
    );
    tuning_change(&args.tuning, &mut new.fields, true)?;
    let actor = actor();
    let by = actor.who.as_str();
    let created = desk(store, runs)
        .create(&new, &actor, args.note.as_deref())
        .await
        .map_err(failure)?;
    report(&created, runs);
    let stored = created.value;
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
    if let Some(overlap) = &stored.overlap {
        text.push_str(&format!("  overlap {overlap}\n"));
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
    let job = find(store, runs, name).await?;
    let actor = actor();
    let by = actor.who.as_str();
    let done = desk(store, runs)
        .delete(&job, &actor, args.note.as_deref())
        .await
        .map_err(failure)?;
    report(&done, runs);
    // The layer refused a job without a schedule above.
    let Some(before) = job.schedule else {
        return Ok(());
    };
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
    print(&deleted_text(name, &before, by));
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
