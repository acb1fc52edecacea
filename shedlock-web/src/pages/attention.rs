//! What needs an operator now: every promise broken (the library's `Operator::check`, what
//! `shedlock check` prints: missed ticks, a job nobody carries, a deadline broken, the ledger
//! not swept), and each job's record over the last 24 hours and 7 days from the ledger: its
//! share of due ticks that ran and succeeded, its missed ticks, and how late its runs started
//! (median and worst). The same as JSON under `/api/v1/attention`.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, TimeDelta, Utc};
use maud::html;
use serde_json::{Value, json};
use shedlock::history::{RunOutcome, RunQuery, RunRecord};
use shedlock::operator::Problem;

use super::{PageResult, job_href, layout};
use crate::identity::Visitor;
use crate::{App, Base, Shared};

/// The most ledger records the page reads (the newest): a busy fleet's 7 days are summed over
/// them, and the page says so.
pub(crate) const RECORDS_READ: u32 = 50_000;

/// One job's record over a span.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Record {
    /// Due ticks the ledger holds (runs, skips, missed).
    pub(crate) due: u64,
    /// Runs that succeeded.
    pub(crate) succeeded: u64,
    /// Runs that ended otherwise (failed, panicked, cancelled, abandoned).
    pub(crate) failed: u64,
    /// Ticks no instance claimed.
    pub(crate) missed: u64,
    /// How late each run started after its tick, in milliseconds, sorted.
    pub(crate) lateness_ms: Vec<i64>,
}

impl Record {
    /// The share of its due ticks that ran and succeeded, when it had any.
    pub(crate) fn success_ratio(&self) -> Option<f64> {
        (self.due > 0).then(|| self.succeeded as f64 / self.due as f64)
    }

    fn lateness(&self, at: f64) -> Option<Duration> {
        if self.lateness_ms.is_empty() {
            return None;
        }
        let i = ((self.lateness_ms.len() - 1) as f64 * at).round() as usize;
        Some(Duration::from_millis(self.lateness_ms[i].max(0) as u64))
    }
}

/// Each job's record since `since`, from `rows` (the ledger's, newest first).
pub(crate) fn records(rows: &[RunRecord], since: DateTime<Utc>) -> BTreeMap<String, Record> {
    let mut by_job: BTreeMap<String, Record> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| r.started_at >= since && r.tick.is_some())
    {
        let record = by_job.entry(row.job.clone()).or_default();
        record.due += 1;
        match row.outcome {
            RunOutcome::Executed => record.succeeded += 1,
            RunOutcome::Missed => record.missed += 1,
            outcome if outcome.ran() && outcome != RunOutcome::Running => record.failed += 1,
            _ => {}
        }
        if row.outcome.ran()
            && let Some(tick) = row.tick
        {
            record
                .lateness_ms
                .push((row.started_at - tick).num_milliseconds());
        }
    }
    for record in by_job.values_mut() {
        record.lateness_ms.sort_unstable();
    }
    by_job
}

/// The problems, the records over 24 h and 7 d, and how many rows they were read from.
async fn gather(
    app: &App,
) -> Result<(Vec<Problem>, BTreeMap<String, (Record, Record)>, usize), shedlock::Error> {
    let desk = crate::actions::desk(app);
    let problems = desk.check(None).await?;
    let Some(runs) = app.source.runs.as_deref() else {
        return Ok((problems, BTreeMap::new(), 0));
    };
    let now = app.source.store.now().await?;
    let week = now - TimeDelta::days(7);
    let rows = runs
        .runs(&RunQuery::latest(RECORDS_READ).since(week).runs_only())
        .await?;
    let day = records(&rows, now - TimeDelta::days(1));
    let seven = records(&rows, week);
    let mut both = BTreeMap::new();
    for (job, record) in seven {
        let last_day = day.get(&job).cloned().unwrap_or_default();
        both.insert(job, (last_day, record));
    }
    Ok((problems, both, rows.len()))
}

fn ratio(record: &Record) -> String {
    record
        .success_ratio()
        .map_or_else(|| "-".to_owned(), |r| format!("{:.1} %", r * 100.0))
}

fn late(record: &Record) -> String {
    match (record.lateness(0.5), record.lateness(1.0)) {
        (Some(median), Some(worst)) => format!(
            "{} / {}",
            humantime::format_duration(Duration::from_millis(median.as_millis() as u64)),
            humantime::format_duration(Duration::from_millis(worst.as_millis() as u64))
        ),
        _ => "-".to_owned(),
    }
}

/// The page.
pub(crate) async fn attention(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
) -> PageResult {
    let base = base.0.as_str();
    if !app.source.has_history() {
        let body = html! { h1 { "Attention" } p.muted #no-history { "This store (" (app.source.backend().to_string()) ") keeps no run history, so no ledger and no alerts: PostgreSQL, MySQL/MariaDB, SQLite and Redis keep one." } };
        return Ok(Html(
            layout(&app, base, Some(&visitor), "Attention", "attention", body).into_string(),
        ));
    }
    let (problems, records, read) = gather(&app).await?;
    let body = html! {
        h1 { "Attention" }
        p.muted { "Every promise broken now (what " code { "shedlock check" } " prints), then each job's record in the ledger: the share of its due ticks that ran and succeeded, its missed ticks, and how late its runs started." }
        @if problems.is_empty() {
            p #all-well { "No promise broken." }
        } @else {
            table #problems {
                thead { tr { th { "job" } th { "what" } th { "detail" } th { "since" } } }
                tbody { @for problem in &problems {
                    tr data-kind=(problem.kind) {
                        td { @if problem.job.is_empty() { "(fleet)" } @else { a href=(job_href(base, &problem.job)) { (problem.job) } } }
                        td.kind { (problem.kind) }
                        td { (problem.detail) }
                        td { (problem.since.map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string()).unwrap_or_default()) }
                    }
                } }
            }
        }
        h2 { "Record" }
        @if read as u32 >= RECORDS_READ {
            p.muted { "Summed over the newest " (RECORDS_READ) " records of the last 7 days." }
        }
        table #records {
            thead {
                tr { th rowspan="2" { "job" } th colspan="3" { "last 24 hours" } th colspan="3" { "last 7 days" } }
                tr { th { "succeeded" } th { "missed" } th { "start lateness, median / worst" } th { "succeeded" } th { "missed" } th { "start lateness, median / worst" } }
            }
            tbody { @for (job, (day, week)) in &records {
                tr data-job=(job) {
                    td { a href=(job_href(base, job)) { (job) } }
                    td.ratio { (ratio(day)) } td { (day.missed) } td { (late(day)) }
                    td.ratio { (ratio(week)) } td { (week.missed) } td { (late(week)) }
                }
            } }
        }
    };
    Ok(Html(
        layout(&app, base, Some(&visitor), "Attention", "attention", body).into_string(),
    ))
}

fn record_json(record: &Record) -> Value {
    json!({
        "due": record.due,
        "succeeded": record.succeeded,
        "failed": record.failed,
        "missed": record.missed,
        "success_ratio": record.success_ratio(),
        "lateness_median_ms": record.lateness(0.5).map(|d| d.as_millis() as u64),
        "lateness_worst_ms": record.lateness(1.0).map(|d| d.as_millis() as u64),
    })
}

/// `GET /api/v1/attention`: `{"problems": [...], "jobs": {name: {"day": ..., "week": ...}},
/// "records_read": N}`.
pub(crate) async fn attention_api(State(app): Shared) -> Response {
    if !app.source.has_history() {
        return crate::api::failure(
            StatusCode::BAD_REQUEST,
            format!(
                "this store ({}) keeps no run history, so no ledger",
                app.source.backend()
            ),
        );
    }
    let (problems, records, read) = match gather(&app).await {
        Ok(found) => found,
        Err(error) => return crate::api::unavailable(error),
    };
    let problems: Vec<Value> = problems.iter().map(crate::json::problem).collect();
    let jobs: serde_json::Map<String, Value> = records
        .iter()
        .map(|(job, (day, week))| {
            (
                job.clone(),
                json!({"day": record_json(day), "week": record_json(week)}),
            )
        })
        .collect();
    Json(json!({
        "problems": problems,
        "jobs": jobs,
        "records_read": read,
    }))
    .into_response()
}
