//! `shedlock history`: the run history, newest first, optionally after the abandoned-run sweep.

use std::fmt::Write as _;
use std::io::Write as _;

use serde_json::Value;
use shedlock::history::{RunOutcome, RunQuery, RunRecord};

use crate::db::Operated;

use crate::args::HistoryArgs;
use crate::failure::{Failure, one_line};
use crate::output::{human, pretty, print, render_table, time, truncate};
use shedlock_web::json::{holders, run as run_json};

pub(crate) async fn history(provider: &dyn Operated, args: &HistoryArgs) -> Result<(), Failure> {
    if args.close_abandoned {
        let closed = provider.close_abandoned_runs().await?;
        let runs = if closed == 1 { "run" } else { "runs" };
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(
            stderr,
            "shedlock: closed {closed} {runs} left running whose lock is no longer held by its fencing token, as abandoned"
        );
    }
    let mut query = RunQuery::latest(args.limit);
    query.name.clone_from(&args.name);
    query.outcome = args.outcome;
    query.runs_only = args.ledger;
    let runs = provider.runs(&query).await?;
    if args.json {
        let holders = holders(&runs);
        let array: Vec<Value> = runs
            .iter()
            .zip(holders)
            .map(|(run, holder)| run_json(run, holder))
            .collect();
        print(&format!("{}\n", pretty(&Value::Array(array))));
        return Ok(());
    }
    if runs.is_empty() {
        let mut filter = String::new();
        if let Some(name) = &args.name {
            let _ = write!(filter, " for {name:?}");
        }
        if let Some(outcome) = args.outcome {
            let _ = write!(filter, " with outcome {outcome}");
        }
        let place = match provider.backend() {
            shedlock::Backend::Redis => format!("under key prefix {}", provider.table_name()),
            _ => format!("in table {}_runs", provider.table_name()),
        };
        print(&format!(
            "no runs{filter} {place} ({})\n",
            provider.backend()
        ));
        return Ok(());
    }
    let holders = holders(&runs);
    let mut rows = Vec::with_capacity(runs.len());
    for (run, holder) in runs.iter().zip(&holders) {
        let duration = match run.duration() {
            Some(duration) => human(duration, true),
            // Closed by a sweep: when the run ended was never recorded.
            None if run.outcome == RunOutcome::Abandoned => "unknown".to_owned(),
            None if still_running(provider, run).await => "running".to_owned(),
            None => "unfinished".to_owned(),
        };
        let mut row = vec![
            run.id.to_string(),
            run.job.clone(),
            run.name.clone(),
            run.tick.map_or_else(|| "-".to_owned(), time),
            time(run.started_at),
            duration,
            run.outcome.to_string(),
            run.locked_by.clone(),
            holder.clone().unwrap_or_else(|| "-".to_owned()),
            run.fencing_token
                .map_or_else(|| "-".to_owned(), |t| t.to_string()),
            // The reason a run was abandoned is shown whole: it is what the operator came for.
            match (run.outcome, run.error.as_deref()) {
                (_, None) => "-".to_owned(),
                (RunOutcome::Abandoned, Some(reason)) => one_line(reason),
                (_, Some(error)) => truncate(error),
            },
        ];
        if args.ledger {
            // How late the start was after its tick (a missed tick: when the ledger wrote it).
            let late = run
                .tick
                .and_then(|tick| (run.started_at - tick).to_std().ok())
                .map_or_else(|| "-".to_owned(), |late| human(late, true));
            row.insert(5, late);
        }
        rows.push(row);
    }
    let mut headers = vec![
        "ID",
        "JOB",
        "LOCK",
        "TICK",
        "STARTED_AT",
        "DURATION",
        "OUTCOME",
        "INSTANCE",
        "HOLDER",
        "TOKEN",
        "ERROR",
    ];
    if args.ledger {
        headers.insert(5, "LATE");
    }
    print(&render_table(&headers, &rows));
    Ok(())
}

/// An unfinished run is running while its lock is still held with its token; otherwise its
/// instance died or lost the lock, and the row stays unfinished until a sweep closes it as
/// abandoned.
async fn still_running(provider: &dyn Operated, run: &RunRecord) -> bool {
    let Some(token) = run.fencing_token else {
        return run.outcome == RunOutcome::Running;
    };
    matches!(
        provider.lock_state(&run.name).await,
        Ok(Some(state)) if state.fencing_token == token && state.is_held()
    )
}
