//! `pause_after_failures = N`: a job whose last N runs, on any instance of the fleet, failed
//! (an error or a panic) pauses itself, the last error as the pause's note, as an operator's
//! pause would (`shedlock jobs` and the dashboard show it paused, with the note; `shedlock
//! resume` resumes it). Read from the run history after each failed run, which the whole
//! fleet writes; so the job needs the history and the schedule store, which
//! [`Scheduler::add`](crate::Scheduler::add) checks.

use chrono::Utc;

use super::attempt::tuning;
use super::registry::JobState;
use super::state::Inner;
use crate::history::{RunOutcome, RunQuery};
use crate::schedules::ScheduleChange;

/// Who the store says paused a job that kept failing.
pub(crate) const PAUSED_BY: &str = "shedlock: pause_after_failures";

/// The longest part of the last error a pause's note keeps.
const NOTE_ERROR_CHARS: usize = 300;

/// After a run of `job` that ended as `outcome` (with `error`): when it failed and the job's
/// last `pause_after_failures` runs fleet-wide all failed, pauses the job.
pub(super) async fn after_run(
    inner: &Inner,
    job: &JobState,
    outcome: RunOutcome,
    error: Option<&str>,
) {
    let Some(limit) = job.job.pause_after_failures_limit() else {
        return;
    };
    if !failed(outcome) {
        return;
    }
    let (Some(control), Some((history, _))) = (&inner.control, &inner.observer.history) else {
        return;
    };
    let name = job.job.name();
    if tuning(inner, job).paused {
        return;
    }
    // Skips and operators' rows are not runs; a run still going is not an end.
    let query = RunQuery::latest(limit.saturating_mul(4).saturating_add(16))
        .name(name)
        .runs_only();
    let rows = match history.runs(&query).await {
        Ok(rows) => rows,
        Err(error) => {
            tracing::warn!(job = name, %error, "could not read the job's last runs: pause_after_failures not checked");
            return;
        }
    };
    let ends: Vec<RunOutcome> = rows
        .iter()
        .filter(|row| row.job == name && row.outcome.ran() && row.outcome != RunOutcome::Running)
        .map(|row| row.outcome)
        .take(limit as usize)
        .collect();
    if ends.len() < limit as usize || !ends.iter().all(|outcome| failed(*outcome)) {
        return;
    }
    let last: String = error
        .unwrap_or("no error text")
        .chars()
        .filter(|c| !c.is_control() && !crate::settings::is_hidden_char(*c))
        .take(NOTE_ERROR_CHARS)
        .collect();
    let note = format!(
        "paused after {limit} failed runs in a row (the last at {}): {last}",
        Utc::now().format("%Y-%m-%d %H:%M:%S UTC")
    );
    let change = ScheduleChange::new().paused(true).note(Some(note));
    match control
        .store
        .update_schedule(name, &change, PAUSED_BY)
        .await
    {
        Ok(_) => tracing::warn!(
            job = name,
            failures = limit,
            "the job failed {limit} runs in a row: paused (pause_after_failures); `shedlock resume {name}` resumes it"
        ),
        Err(error) => {
            tracing::error!(job = name, %error, "the job failed {limit} runs in a row and could not be paused")
        }
    }
}

/// Whether a run that ended so failed: an error or a panic.
fn failed(outcome: RunOutcome) -> bool {
    matches!(outcome, RunOutcome::Failed | RunOutcome::Panicked)
}
