//! The run history, filtered and paged by key.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Html;
use chrono::{DateTime, Utc};
use maud::html;
use serde::Deserialize;
use shedlock::history::{RunOutcome, RunQuery};

use super::{PageResult, RUNS_PER_PAGE, enc, layout, runs_table};
use crate::identity::Visitor;
use crate::model::history_page;
use crate::{Base, Shared};

/// The history page's filters and cursor.
#[derive(Deserialize, Default, Clone)]
pub(crate) struct HistoryQuery {
    /// Lock or job name.
    #[serde(default)]
    pub(crate) job: String,
    /// An outcome (`executed`, `failed`, ...), or empty.
    #[serde(default)]
    pub(crate) outcome: String,
    /// The instance (`locked_by`).
    #[serde(default)]
    pub(crate) instance: String,
    /// Started at or after (RFC 3339, or `YYYY-MM-DDTHH:MM` in UTC).
    #[serde(default)]
    pub(crate) since: String,
    /// Started before.
    #[serde(default)]
    pub(crate) until: String,
    /// The cursor: only rows older than this id.
    pub(crate) before: Option<i64>,
    /// Rows per page (the API; the page shows 50).
    pub(crate) limit: Option<u32>,
}

/// A time from a filter: RFC 3339, or what `<input type="datetime-local">` sends, in UTC.
pub(crate) fn parse_time(text: &str, field: &str) -> Result<Option<DateTime<Utc>>, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(Some(at.with_timezone(&Utc)));
    }
    for format in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(at) = chrono::NaiveDateTime::parse_from_str(text, format) {
            return Ok(Some(at.and_utc()));
        }
    }
    Err(format!(
        "`{field}` is not a time: {text:?} (write RFC 3339, such as 2026-11-28T12:00:00Z, or 2026-11-28T12:00 in UTC)"
    ))
}

impl HistoryQuery {
    /// The store's query, or what is wrong with a filter.
    pub(crate) fn to_query(&self, default_limit: u32) -> Result<RunQuery, String> {
        let mut query = RunQuery::latest(self.limit.unwrap_or(default_limit).clamp(1, 1_000));
        if !self.job.trim().is_empty() {
            query = query.name(self.job.trim());
        }
        if !self.outcome.is_empty() {
            let outcome: RunOutcome = self
                .outcome
                .parse()
                .map_err(|e: shedlock::history::UnknownOutcome| e.to_string())?;
            query = query.outcome(outcome);
        }
        if !self.instance.trim().is_empty() {
            query = query.instance(self.instance.trim());
        }
        if let Some(since) = parse_time(&self.since, "since")? {
            query = query.since(since);
        }
        if let Some(until) = parse_time(&self.until, "until")? {
            query = query.until(until);
        }
        query.before = self.before;
        Ok(query)
    }
}

/// The run history, filtered and paged by key.
pub(crate) async fn history(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<HistoryQuery>,
) -> PageResult {
    let base = base.0.as_str();
    if !app.source.has_history() {
        let body = html! { h1 { "History" } p.muted #no-history { "This store (" (app.source.backend().to_string()) ") keeps no run history. PostgreSQL, MySQL/MariaDB, SQLite and Redis keep one." } };
        return Ok(Html(
            layout(&app, base, Some(&visitor), "History", "history", body).into_string(),
        ));
    }
    let (runs, next, problem) = match query.to_query(RUNS_PER_PAGE) {
        Ok(q) => {
            let (runs, next) = history_page(&app, &q).await?;
            (runs, next, None)
        }
        Err(problem) => (Vec::new(), None, Some(problem)),
    };
    let next_link = next.map(|id| {
        format!(
            "{base}/history?job={}&outcome={}&instance={}&since={}&until={}&before={id}",
            enc(&query.job),
            enc(&query.outcome),
            enc(&query.instance),
            enc(&query.since),
            enc(&query.until)
        )
    });
    let body = html! {
        h1 { "History" }
        form.filters #history-filters method="get" action={(base) "/history"} {
            input name="job" value=(query.job) placeholder="job";
            select name="outcome" { option value="" { "any outcome" }
                @for outcome in RunOutcome::ALL { option value=(outcome.as_str()) selected[query.outcome == outcome.as_str()] { (outcome.as_str()) } } }
            input name="instance" value=(query.instance) placeholder="instance";
            label { "since " input type="datetime-local" name="since" value=(query.since); }
            label { "until " input type="datetime-local" name="until" value=(query.until); }
            button type="submit" { "Filter" }
        }
        @if let Some(problem) = problem { p.flash.error { (problem) } }
        (runs_table(base, &runs, true))
        nav.pager {
            @if query.before.is_some() { a href={(base) "/history?job=" (enc(&query.job)) "&outcome=" (enc(&query.outcome)) "&instance=" (enc(&query.instance)) "&since=" (enc(&query.since)) "&until=" (enc(&query.until))} { "← newest" } }
            @if let Some(link) = next_link { a #older href=(link) { "older →" } }
        }
    };
    Ok(Html(
        layout(&app, base, Some(&visitor), "History", "history", body).into_string(),
    ))
}
