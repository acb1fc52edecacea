//! Every lock, and the confirmation before releasing one.

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Html;
use maud::{Markup, html};
use serde::Deserialize;
use shedlock::history::LockState;

use super::{
    FlashQuery, PageError, PageResult, flash, layout, relative, release_href, shown, when,
};
use crate::identity::Visitor;
use crate::model::{Snapshot, releasable};
use crate::{App, Base, Shared};

/// Every lock, held or free.
pub(crate) async fn locks(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<FlashQuery>,
) -> PageResult {
    let base = base.0.as_str();
    let snapshot = Snapshot::locks_only(&app).await?;
    let read_only = app.options.read_only;
    let body = html! {
        h1 { "Locks" }
        (flash(&app, query.flash.as_deref()))
        @let (jobs, own): (Vec<&LockState>, Vec<&LockState>) = snapshot.locks.iter().partition(|l| releasable(&l.name));
        @if jobs.is_empty() { p.muted { "No lock rows of jobs." } } @else {
            (locks_table("locks", &jobs, base, &snapshot, !read_only))
        }
        @if !own.is_empty() {
            h2 { "The fleet's own locks" }
            p.muted { "Seats (shedlock.fleet/<fleet>/<n>, one per running instance) and share markers (a tick's share claimed): the schedulers take and renew them themselves." }
            (locks_table("fleet-locks", &own, base, &snapshot, false))
        }
        @if !snapshot.unreadable.is_empty() {
            h2 { "Rows that cannot be read" }
            table #unreadable { thead { tr { th { "name" } th { "what is wrong" } } }
                tbody { @for row in &snapshot.unreadable { tr { td { (shown(&row.name)) } td { (shown(&row.problem)) } } } } }
        }
    };
    Ok(Html(
        layout(&app, base, Some(&visitor), "Locks", "locks", body).into_string(),
    ))
}

/// A table of lock rows, with a release link on the held ones when `release`.
fn locks_table(
    id: &str,
    locks: &[&LockState],
    base: &str,
    snapshot: &Snapshot,
    release: bool,
) -> Markup {
    html! {
        table id=(id) {
            thead { tr { th { "name" } th { "state" } th { "holder" } th { "token" } th { "taken" } th { "until" } th { "last tick" } @if release { th {} } } }
            tbody { @for lock in locks {
                tr data-lock=(shown(&lock.name)) {
                    td { (shown(&lock.name)) }
                    td { @if lock.is_held() { span.held { "held" } } @else { span.muted { "free" } } }
                    td { (shown(&lock.locked_by)) }
                    td { (lock.fencing_token) }
                    td { (when(lock.locked_at)) }
                    td { (when(lock.locked_until)) @if lock.is_held() { " (" (relative(lock.locked_until, snapshot.now)) ")" } }
                    td { @match lock.last_tick { Some(t) => (when(t)), None => "–" } }
                    @if release { td { @if lock.is_held() && releasable(&lock.name) {
                        a.button.release href=(release_href(base, &lock.name, false)) { "Release…" } } } }
                }
            } }
        }
    }
}

/// The confirmation before releasing a lock: who holds it, under which token.
pub(crate) async fn confirm_release(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Path(name): Path<String>,
) -> PageResult {
    confirm_page(&app, &base.0, &visitor, &name).await
}

/// The lock of `/lock/release?name=NAME` (a name a path cannot carry: `.`, `..`).
#[derive(Deserialize)]
pub(crate) struct NameQuery {
    pub(crate) name: Option<String>,
}

/// The confirmation at `/lock/release?name=NAME`.
pub(crate) async fn confirm_release_by_query(
    State(app): Shared,
    Extension(base): Extension<Base>,
    Extension(visitor): Extension<Visitor>,
    Query(query): Query<NameQuery>,
) -> PageResult {
    let Some(name) = query.name else {
        return Err(PageError(
            StatusCode::BAD_REQUEST,
            "no lock named: give its name as /lock/release?name=NAME".into(),
        ));
    };
    confirm_page(&app, &base.0, &visitor, &name).await
}

async fn confirm_page(app: &App, base: &str, visitor: &Visitor, name: &str) -> PageResult {
    if !releasable(name) {
        return Err(PageError(
            StatusCode::FORBIDDEN,
            crate::actions::own_lock(name),
        ));
    }
    let lock = app.source.store.lock_state(name).await?;
    let now = app.source.store.now().await?;
    let body = html! {
        h1 { "Release lock " code { (shown(name)) } "?" }
        @match lock.filter(LockState::is_held) {
            None => p.flash #not-held { "Lock " code { (shown(name)) } " is not held now: there is nothing to release." },
            Some(lock) => {
                p { "Held by " strong #holder { (shown(&lock.locked_by)) } " under fencing token " strong #token { (lock.fencing_token) }
                    ", taken " (relative(lock.locked_at, now)) ", until " (when(lock.locked_until)) "." }
                p.muted { "Releasing ends this holder's lock now, only if it still holds token " (lock.fencing_token)
                    " (a newer holder is never released). A run still going under it keeps running until its next keep-alive renewal is refused." }
                form method="post" action=(release_href(base, name, true)) {
                    input type="hidden" name="csrf" value=(visitor.csrf);
                    input type="hidden" name="token" value=(lock.fencing_token);
                    button.action.danger #confirm-release type="submit" { "Release it" }
                    " " a href={(base) "/locks"} { "Cancel" }
                }
            }
        }
    };
    Ok(Html(
        layout(app, base, Some(visitor), "Release", "locks", body).into_string(),
    ))
}
