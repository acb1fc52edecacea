//! The overview: counts, the fleet, what runs now.

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::Html;
use maud::html;
use shedlock::history::LockState;

use super::{FlashQuery, PageResult, action, flash, job_href, layout, relative, shown, when};
use crate::identity::Visitor;
use crate::model::Snapshot;
use crate::{Base, Shared};

/// The overview: counts, the fleet, what runs now.
pub(crate) async fn overview(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<FlashQuery>,
) -> PageResult {
    let base = base.0.as_str();
    let snapshot = Snapshot::read(&app).await?;
    let jobs = snapshot.jobs(&app.options.code_jobs);
    let running: Vec<&LockState> = snapshot.job_locks().filter(|l| l.is_held()).collect();
    let paused = jobs.iter().filter(|j| j.paused()).count();
    let failed = crate::api::failed_since(&app, snapshot.now - chrono::Duration::hours(24)).await?;
    let seats = snapshot.seats();
    let shares = snapshot.next_shares(&jobs, &seats);
    let by_instance = snapshot.running_by_instance();
    let body = html! {
        h1 { "Overview" }
        (flash(&app, query.flash.as_deref()))
        @if snapshot.fleet_paused() {
            p.flash.error #fleet-paused { "The whole fleet is paused: no job fires anywhere." }
        }
        section.cards {
            div.card { span.figure #count-jobs { (jobs.len()) } span { "jobs" } }
            div.card { span.figure #count-running { (running.len()) } span { "running now" } }
            div.card { span.figure #count-failed { @match failed { Some(n) => (n), None => "–" } }
                span { "failed in the last 24 h" } @if failed.is_none() { small { "(no history on this backend)" } } }
            div.card { span.figure #count-paused { (paused) } span { "paused" } }
        }
        @if !app.options.read_only {
            div.actions {
                @if snapshot.fleet_paused() {
                    (action(&visitor.csrf, &format!("{base}/act/fleet/resume"), "fleet-resume", "Resume the whole fleet"))
                } @else {
                    (action(&visitor.csrf, &format!("{base}/act/fleet/pause"), "fleet-pause", "Pause the whole fleet"))
                }
            }
        }
        h2 { "Instances" }
        @if seats.is_empty() {
            p.muted { "No instance holds a fleet seat now (a scheduler takes one when it starts with a fleet)." }
        } @else {
            table #instances {
                thead { tr { th { "instance" } th { "fleet" } th { "seat" } th { "running now" }
                    th { "share of the next tick" @match &shares { Some(s) => { " (" (when(s.tick)) ", " (s.due) " due)" }, None => { br; small.muted { "no job's cron is known here (a job defined in code: pass Options::code_jobs)" } } } }
                    th { "seat renewed" } } }
                tbody { @for (i, seat) in seats.iter().enumerate() {
                    tr { td { (shown(&seat.instance)) } td { (shown(&seat.fleet)) } td { (seat.seat) }
                         td { (by_instance.get(&seat.instance).copied().unwrap_or(0)) }
                         td.share { @match &shares { Some(s) => (s.owned[i]), None => "–" } }
                         td title=(when(seat.until)) { (relative(seat.renewed_at, snapshot.now)) } }
                } }
            }
            p.muted { "The jobs due at a tick are shared among the seats held (each instance fires its share at once, the others help after a delay); \"running now\" counts the job locks each instance holds, what its run limit (max_concurrent_runs) bounds. The limit itself is set in each instance's code and not kept in the store." }
        }
        h2 { "Running now" }
        @if running.is_empty() { p.muted { "Nothing runs now." } } @else {
            table #running {
                thead { tr { th { "job" } th { "instance" } th { "since" } th { "lock until" } th { "token" } } }
                tbody { @for lock in &running {
                    tr { td { a href=(job_href(base, &lock.name)) { (shown(&lock.name)) } } td { (shown(&lock.locked_by)) }
                         td { (relative(lock.locked_at, snapshot.now)) } td { (when(lock.locked_until)) } td { (lock.fencing_token) } }
                } }
            }
        }
    };
    Ok(Html(
        layout(&app, base, Some(&visitor), "Overview", "overview", body).into_string(),
    ))
}
