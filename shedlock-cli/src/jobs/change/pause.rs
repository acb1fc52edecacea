//! `pause` (with `--cancel-running`, which releases the job's lock) and `resume`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shedlock::RunStore;
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::operator::{Actor, Release};
use shedlock::schedules::StoredSchedule;

use super::{print_json, target};
use crate::args::{PauseArgs, ResumeArgs};
use crate::db::Steered;
use crate::failure::Failure;
use crate::jobs::{FLEET_SCHEDULE, actor, desk, failure, find, report, schedule_json};
use crate::output::{json_time, print};

/// `pause NAME [--note TEXT] [--cancel-running [--lock LOCK]]`, `pause --fleet`.
pub(crate) async fn pause(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &PauseArgs,
) -> Result<(), Failure> {
    let desk = desk(store, runs);
    let job = if args.fleet {
        desk.fleet().await?
    } else {
        let name = target(args.name.as_deref(), false);
        desk.find_by_lock(name, args.lock.as_deref())
            .await
            .map_err(failure)?
    };
    let name = job.name.as_str();
    let before = job.schedule.as_ref();
    let was_paused = before.is_some_and(|s| s.paused);
    let actor = actor();
    let by = actor.who.as_str();
    let note = args.note.as_deref();
    let paused = desk.pause(&job, &actor, note).await.map_err(failure)?;
    report(&paused, runs);
    let stored = paused.value;
    let cancel = if args.cancel_running {
        let (lock, found_by) = job_lock(runs, name, before, args.lock.as_deref()).await?;
        let why = match note {
            Some(note) => format!("to cancel the run of {name:?}; {note}"),
            None => format!("to cancel the run of {name:?}"),
        };
        let cancel = cancel_running(store, runs, lock, found_by, &actor, &why).await?;
        Some(cancel)
    } else {
        None
    };
    let now = store.now().await?;
    let warning = paused.unapplied.clone();
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "paused",
            "warning": warning,
            "fleet": args.fleet,
            "was_paused": was_paused,
            "cancel_running": cancel.as_ref().map(Cancel::json),
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    let mut text = if let Some(warning) = &warning {
        format!(
            "stored the pause of {name:?} (version {}, by {by}){}, but WARNING: {warning}\n",
            stored.version,
            if was_paused {
                "; it was paused already"
            } else {
                ""
            }
        )
    } else if args.fleet {
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
    if let Some(note) = &stored.note {
        text.push_str(&format!("note: {note}\n"));
    }
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
        // Runs only: an operator's row (a pause recorded) took no lock.
        let query = RunQuery::latest(LOCK_RUNS).name(name).runs_only();
        let rows = runs.runs(&query).await?;
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

/// Releases `lock` from its current holder, by the token read, through the layer (which
/// records it, with `why` as its note).
async fn cancel_running(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    lock: String,
    found_by: FoundBy,
    actor: &Actor,
    why: &str,
) -> Result<Cancel, Failure> {
    let did = match store.lock_state(&lock).await? {
        None => Did::NoLock,
        Some(state) if !state.is_held() => Did::Free {
            token: state.fencing_token,
        },
        Some(state) => {
            let outcome = desk(store, runs)
                .release(&lock, state.fencing_token, actor, Some(why))
                .await?;
            report(&outcome, runs);
            let released = matches!(outcome.value, Release::Released { .. });
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
    let desk = desk(store, runs);
    let job = if args.fleet {
        desk.fleet().await?
    } else {
        find(store, runs, target(args.name.as_deref(), false)).await?
    };
    let name = job.name.as_str();
    let was_paused = job.schedule.as_ref().is_some_and(|s| s.paused);
    let what = if args.fleet {
        "the whole fleet".to_owned()
    } else {
        format!("{name:?}")
    };
    let actor = actor();
    let resumed = desk
        .resume(&job, &actor, args.note.as_deref())
        .await
        .map_err(failure)?;
    report(&resumed, runs);
    let Some(stored) = resumed.value else {
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
    };
    let now = store.now().await?;
    let warning = resumed.unapplied.clone();
    if args.json {
        print_json(&json!({
            "name": name,
            "result": "resumed",
            "warning": warning,
            "fleet": args.fleet,
            "was_paused": was_paused,
            "schedule": schedule_json(&stored, now),
        }));
        return Ok(());
    }
    print(&format!(
        "resumed {what} (version {}, by {}){}\n",
        stored.version,
        actor.who,
        if was_paused {
            ""
        } else {
            "; it was not paused"
        }
    ));
    if let Some(warning) = warning {
        print(&format!("WARNING: {warning}\n"));
    }
    Ok(())
}
