//! `pause` (with `--cancel-running`, which releases the job's lock) and `resume`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shedlock::RunStore;
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::schedules::{ScheduleChange, StoredSchedule};

use super::{print_json, target};
use crate::args::{PauseArgs, ResumeArgs};
use crate::db::Steered;
use crate::failure::Failure;
use crate::jobs::{FLEET_SCHEDULE, find, operator, schedule_json};
use crate::output::{json_time, print};

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
