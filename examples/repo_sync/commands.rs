//! The operator's commands besides `run` and `add`: the first run, `sync-now`, `search` and
//! `status`, and how a sync's summary is printed.

use std::collections::HashMap;
use std::sync::Arc;

use shedlock::Schedule;
use shedlock::history::RunOutcome;
use shedlock::schedules::ScheduleChange;

use crate::db::{Session, lock_name, now_ms};
use crate::job::Outcome;
use crate::refresh::{self, Breaker};
use crate::schedules::{DEFAULT_CRON, DEFAULT_TIME_ZONE, Ended, SyncNow, parsed, schedule_of};
use crate::show::{say, shown};
use crate::sync::{Ctx, Summary};
use crate::{AnyError, Locks, display_name, interval_ms, source};

/// `add`: registers a local git repository or a GitLab project URL (checked by reading its
/// head) and creates its schedule in the store (`schedules.rs`). One already registered gets
/// the options given (`--cron`, `--time-zone`, `--name`), the others keeping their stored
/// values; what changed is printed, or that nothing did.
pub(crate) async fn add(
    ctx: &Ctx,
    store: &dyn Locks,
    path: &str,
    cron: Option<String>,
    time_zone: Option<String>,
    name: Option<String>,
) -> Result<(), AnyError> {
    // The schedule given is checked before anything else is read.
    if let (Some(cron), Some(time_zone)) = (&cron, &time_zone) {
        checked_schedule(cron, time_zone)?;
    }
    let (source, default_name) = if source::is_remote(path) {
        #[cfg(not(feature = "http"))]
        return Err(crate::features::not_built(crate::features::Feature::Http).into());
        #[cfg(feature = "http")]
        {
            let project = crate::gitlab::GitLabProject::parse(path, ctx.gitlab_token.clone())?;
            project.head().await?;
            (project.url().to_owned(), project.name().to_owned())
        }
    } else {
        let repo = crate::git::Repo::open(std::path::Path::new(path))?;
        let source = std::fs::canonicalize(repo.path())?.display().to_string();
        let name = display_name(&source);
        (source, name)
    };
    let Some(existing) = ctx.db.session_by_source(&source).await? else {
        let cron = cron.as_deref().unwrap_or(DEFAULT_CRON);
        let time_zone = time_zone.as_deref().unwrap_or(DEFAULT_TIME_ZONE);
        checked_schedule(cron, time_zone)?;
        let name = name.unwrap_or(default_name);
        let session = ctx.db.add_session(&name, &source).await?;
        if let Err(error) =
            crate::schedules::create(store, session.id, cron, time_zone, false).await
        {
            ctx.db.remove_session(session.id).await?;
            return Err(error.into());
        }
        say!(
            "registered #{} {} ({}) on \"{}\" in {}",
            session.id,
            shown(&session.display_name),
            shown(&session.source),
            shown(cron),
            shown(time_zone)
        );
        return Ok(());
    };
    let id = existing.id;
    let stored = schedule_of(store, id).await?;
    let legacy = ctx.db.legacy_schedule(id).await?;
    let (old_cron, old_time_zone) = match (&stored, &legacy) {
        (Some(row), _) => (
            row.cron.clone().unwrap_or_default(),
            row.time_zone
                .clone()
                .unwrap_or_else(|| DEFAULT_TIME_ZONE.into()),
        ),
        (None, Some(old)) => (old.cron.clone(), old.time_zone.clone()),
        (None, None) => (String::new(), String::new()),
    };
    let given = |value: Option<String>, old: &str, default: &str| {
        value.unwrap_or_else(|| {
            if old.is_empty() {
                default.into()
            } else {
                old.into()
            }
        })
    };
    let cron = given(cron, &old_cron, DEFAULT_CRON);
    let time_zone = given(time_zone, &old_time_zone, DEFAULT_TIME_ZONE);
    let name = name.unwrap_or_else(|| existing.display_name.clone());
    checked_schedule(&cron, &time_zone)?;
    let mut changes: Vec<String> = [
        ("schedule", &old_cron, &cron, true),
        ("time zone", &old_time_zone, &time_zone, false),
        ("name", &existing.display_name, &name, false),
    ]
    .into_iter()
    .filter(|(_, before, after, _)| stored.is_some() && before != after)
    .map(|(what, before, after, quoted)| {
        let (before, after) = (shown(before), shown(after));
        if quoted {
            format!("{what} \"{before}\" → \"{after}\"")
        } else {
            format!("{what} {before} → {after}")
        }
    })
    .collect();
    if stored.is_none() {
        // Registered without a schedule in the store (one an earlier version kept that the
        // store refused, or none): it gets one now.
        let paused = legacy.as_ref().is_some_and(|old| old.paused);
        crate::schedules::create(store, id, &cron, &time_zone, paused).await?;
        ctx.db.forget_legacy_schedule(id).await?;
        changes.push(format!(
            "schedule set: \"{}\" in {}{}",
            shown(&cron),
            shown(&time_zone),
            if paused { ", paused" } else { "" }
        ));
        if name != existing.display_name {
            changes.push(format!(
                "name {} → {}",
                shown(&existing.display_name),
                shown(&name)
            ));
        }
    } else if cron != old_cron || time_zone != old_time_zone {
        let change = ScheduleChange::new().cron(cron.clone(), Some(time_zone.clone()));
        store
            .update_schedule(&lock_name(id), &change, store.locked_by())
            .await?;
    }
    if changes.is_empty() {
        say!(
            "#{id} {} ({}) is already registered, on \"{}\" in {}: nothing changed (give \
             --cron, --time-zone or --name to change them)",
            shown(&existing.display_name),
            shown(&existing.source),
            shown(&cron),
            shown(&time_zone)
        );
        return Ok(());
    }
    if name != existing.display_name {
        ctx.db.rename_session(id, &name).await?;
    }
    say!(
        "#{id} {} was already registered; changed {} (running schedulers apply it within their \
         poll interval)",
        shown(&existing.source),
        changes.join(", ")
    );
    Ok(())
}

/// A schedule `add` registers: one the library accepts (which refuses one that never fires,
/// `0 0 0 31 2 *`), its error passed through as it is.
fn checked_schedule(cron: &str, time_zone: &str) -> Result<Schedule, AnyError> {
    Ok(Schedule::parse(cron, time_zone)?)
}

/// With no command: register the repository we are in (if it is not registered yet), sync
/// every repository whose schedule is not paused once (a "run now" request each, see
/// [`sync_now`]), summarize. A registered local repository that no longer exists is reported
/// and left out; the others still sync.
pub(crate) async fn first_run(ctx: Arc<Ctx>, store: Arc<dyn Locks>) -> Result<(), AnyError> {
    let here = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()?;
    if !here.status.success() {
        return Err("not inside a git repository: register one with `add <path>`".into());
    }
    let here = String::from_utf8_lossy(&here.stdout).trim().to_owned();
    let here = std::fs::canonicalize(&here)?.display().to_string();
    if ctx.db.find_session(&here).await?.is_none() {
        let session = ctx.db.add_session(&display_name(&here), &here).await?;
        if schedule_of(store.as_ref(), session.id).await?.is_none() {
            crate::schedules::create(
                store.as_ref(),
                session.id,
                DEFAULT_CRON,
                DEFAULT_TIME_ZONE,
                false,
            )
            .await?;
        }
        say!(
            "registered #{} {} ({}), every 15 minutes",
            session.id,
            shown(&session.display_name),
            shown(&session.source)
        );
    }
    let mut due = Vec::new();
    for s in ctx.db.sessions().await? {
        match schedule_of(store.as_ref(), s.id).await? {
            Some(row) if !row.paused => {}
            Some(_) => continue,
            None => {
                say!(
                    "#{} {}: not scheduled: not synced (give it a schedule with `add {} --cron ...`)",
                    s.id,
                    shown(&s.display_name),
                    shown(&s.source)
                );
                continue;
            }
        }
        if !source::is_remote(&s.source) && !std::path::Path::new(&s.source).exists() {
            say!(
                "#{} {}: {} no longer exists: not synced (unregister it with `remove {}`)",
                s.id,
                shown(&s.display_name),
                shown(&s.source),
                s.id
            );
            continue;
        }
        due.push(s);
    }
    let ids: Vec<i64> = due.iter().map(|s| s.id).collect();
    let runs = SyncNow::start(Arc::clone(&ctx), store, &ids).await?;
    let mut failed = Vec::new();
    for s in &due {
        if let Err(error) = sync_now(&ctx, &runs, s).await {
            say!("  {}", shown(&error.to_string()));
            failed.push(s.display_name.clone());
        }
    }
    runs.stop().await?;
    let command = crate::features::this_build();
    say!("\nsearch it:  {command} -- search \"fencing token\"");
    say!("keep it synced on schedule (start several, each tick runs once):  {command} -- run");
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("the sync of {} failed", failed.join(", ")).into())
    }
}

/// A sync by hand: a "run now" request of the repository's schedule, run once by whichever
/// instance claims it first (a `run` process, or `runs`, this command's own scheduler), under
/// the same lock as the scheduled runs. Prints its summary, or where it ran and how it ended.
pub(crate) async fn sync_now(
    ctx: &Ctx,
    runs: &SyncNow,
    s: &Session,
) -> Result<Option<Summary>, AnyError> {
    let (id, name) = (s.id, &s.display_name);
    say!("syncing #{id} {} ...", shown(name));
    match runs.run(id).await? {
        Ended::Here(Ok(Outcome::Synced(s))) => {
            print_summary(&s);
            Ok(Some(s))
        }
        Ended::Here(Ok(Outcome::NotSynced(reason))) => {
            say!("  not synced: {}", shown(&reason));
            Ok(None)
        }
        Ended::Here(Err(error)) => Err(format!("sync of #{id} {name} failed: {error}").into()),
        Ended::Elsewhere(run) => {
            let by = shown(&run.locked_by).into_owned();
            match run.outcome {
                RunOutcome::Executed => {
                    let since = run.started_at.timestamp_millis() - 1000;
                    let log = ctx.db.logs(Some(id), 1).await?.into_iter().next();
                    match log.filter(|l| l.started_at >= since) {
                        Some(l) => say!(
                            "  run by {}{}: {}, {} files, {} chunks in {} ms",
                            shown(l.locked_by.as_deref().unwrap_or_default()),
                            if l.locked_by.as_deref() == Some(run.locked_by.as_str()) {
                                String::new()
                            } else {
                                format!(" (handed to it by {by})")
                            },
                            shown(&l.status),
                            l.files_processed,
                            l.chunks_written,
                            l.duration_ms.unwrap_or_default()
                        ),
                        None => say!(
                            "  handed to the workers by {by} (`run --role scheduler`): see `status` for its sync"
                        ),
                    }
                    Ok(None)
                }
                RunOutcome::Failed => Err(format!(
                    "sync of #{id} {name} failed on {by}: {}",
                    run.error.unwrap_or_default()
                )
                .into()),
                other => {
                    say!(
                        "  {other} on {by}{}",
                        run.error
                            .map(|e| format!(": {}", shown(&e)))
                            .unwrap_or_default()
                    );
                    Ok(None)
                }
            }
        }
        Ended::Held => {
            let holder = ctx
                .db
                .locks()
                .await?
                .into_iter()
                .find(|(n, ..)| *n == lock_name(id));
            match holder {
                Some((_, by, until, token)) => say!(
                    "  held by {} (fencing token {token}) until {}: not synced now; the request \
                     stays pending, and a `run` instance runs it once the lock is free",
                    shown(&by),
                    chrono::DateTime::from_timestamp_millis(until)
                        .map_or_else(String::new, |t| t.to_rfc3339())
                ),
                None => say!("  held elsewhere: not synced now; the request stays pending"),
            }
            Ok(None)
        }
        Ended::Unknown => {
            say!("  run by an instance that keeps no run history: see `status`");
            Ok(None)
        }
    }
}

pub(crate) fn print_summary(s: &Summary) {
    let kind = if s.full { "full" } else { "incremental" };
    let reasons: Vec<String> = [
        (s.binary_files, "binary"),
        (s.large_files, "too large"),
        (s.not_utf8_files, "not UTF-8"),
        (
            s.unstorable_files,
            "with a NUL byte no database text column stores",
        ),
    ]
    .iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, why)| format!("{n} {why}"))
    .collect();
    let reasons = if reasons.is_empty() {
        String::new()
    } else {
        format!(" ({})", reasons.join(", "))
    };
    say!(
        "  {kind} sync at {}: {} files indexed, {} skipped{reasons}, {} deleted, {} chunks written in {:.1} s",
        shown(&short(&s.commit)),
        s.files,
        s.skipped_files(),
        s.deleted_paths,
        s.chunks_written,
        s.elapsed_ms as f64 / 1000.0
    );
}

pub(crate) async fn search(ctx: &Ctx, query: &str, k: usize) -> Result<(), AnyError> {
    let embedding = ctx
        .embedder
        .embed(&[query.to_owned()])
        .await?
        .pop()
        .unwrap_or_default();
    let embedder = ctx.embedder.name();
    let hits = ctx.store.search(&embedding, embedder, k).await?;
    if hits.is_empty() {
        let others = ctx.store.embedders().await?;
        if others.is_empty() {
            say!(
                "nothing indexed yet: run `{}` first",
                crate::features::this_build()
            );
        } else {
            let others: Vec<String> = others
                .iter()
                .map(|(name, n)| format!("{n} chunks by {}", shown(name)))
                .collect();
            say!(
                "nothing indexed with the embedder {}; the index holds {}: search with that embedder, or re-index with `sync-now --full` and this one",
                shown(embedder),
                others.join(", ")
            );
        }
    }
    let names: HashMap<i64, String> = ctx
        .db
        .sessions()
        .await?
        .into_iter()
        .map(|s| (s.id, s.display_name))
        .collect();
    for (i, hit) in hits.iter().enumerate() {
        let repo = names.get(&hit.repository_id).cloned().unwrap_or_default();
        say!(
            "{:>2}. {:.3}  {}/{}:{}-{}",
            i + 1,
            hit.score,
            shown(&repo),
            shown(&hit.path),
            hit.start_line,
            hit.end_line
        );
        let first = hit
            .text
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .trim();
        say!(
            "      {}",
            shown(&first.chars().take(100).collect::<String>())
        );
    }
    let mut viewed: Vec<i64> = hits.iter().map(|h| h.repository_id).collect();
    viewed.sort_unstable();
    viewed.dedup();
    ctx.db.mark_viewed(&viewed).await?;
    Ok(())
}

/// `status`: each repository with its schedule as the store keeps it (cron, time zone,
/// paused, next tick, a pending "run now"), its breaker, staged chunks and last runs; then the
/// locks.
pub(crate) async fn status(ctx: &Ctx, store: &dyn Locks) -> Result<(), AnyError> {
    let now = now_ms();
    let fmt = |ms: Option<i64>| {
        ms.and_then(chrono::DateTime::from_timestamp_millis)
            .map_or("-".into(), |t| t.format("%F %T UTC").to_string())
    };
    for s in ctx.db.sessions().await? {
        let row = schedule_of(store, s.id).await?;
        let (state, cron, zone) = match &row {
            Some(row) => (
                if row.paused { "paused" } else { "active" },
                row.cron.clone().unwrap_or_default(),
                row.time_zone
                    .clone()
                    .unwrap_or_else(|| DEFAULT_TIME_ZONE.into()),
            ),
            None => ("not scheduled", String::new(), String::new()),
        };
        say!(
            "#{} {}  {state}  \"{}\" {}  {}",
            s.id,
            shown(&s.display_name),
            shown(&cron),
            shown(&zone),
            shown(&s.source)
        );
        let last_sync = format!(
            "last sync {} at {}  last viewed {}",
            fmt(s.last_sync_at),
            s.last_synced_commit
                .as_deref()
                .map_or_else(|| "-".into(), |c| shown(&short(c)).into_owned()),
            fmt(s.last_viewed_at)
        );
        // A schedule the library cannot run here is named on its row; the other rows are
        // shown all the same.
        match row.as_ref().and_then(parsed) {
            Some(Ok(schedule)) => {
                let next = schedule
                    .next_after(chrono::Utc::now())
                    .map(|t| t.timestamp_millis());
                let interval = interval_ms(&schedule, chrono::Utc::now());
                let decision = refresh::decide(&s, next.unwrap_or(now), interval, &ctx.policy);
                if row.as_ref().is_some_and(|r| r.paused) {
                    say!("    next tick -  (paused: `resume {}`)  {last_sync}", s.id);
                } else {
                    say!(
                        "    next tick {}  ({})  {last_sync}",
                        fmt(next),
                        decision.reason()
                    );
                }
            }
            Some(Err(error)) => say!(
                "    not scheduled: {} (change it with `add {} --cron ... --time-zone ...`)  {last_sync}",
                shown(&error.to_string()),
                shown(&s.source)
            ),
            None => say!(
                "    not scheduled: no schedule in the store (give it one with `add {} --cron ...`)  {last_sync}",
                shown(&s.source)
            ),
        }
        if let Some(t) = row.as_ref().and_then(|r| r.trigger.as_ref()) {
            let state = match (&t.claimed_by, t.started) {
                (Some(by), true) => format!("running on {}", shown(by)),
                (Some(by), false) => format!("claimed by {}", shown(by)),
                (None, _) => "waiting for an instance".to_owned(),
            };
            say!(
                "    run now asked by {} at {}: {state}",
                shown(&t.requested_by),
                t.requested_at.format("%F %T UTC")
            );
        }
        say!("    {}", Breaker::at(&s, now, &ctx.policy));
        let staged = ctx.store.staged(s.id).await?;
        if staged > 0 {
            say!(
                "    {staged} chunks staged by an unfinished sync (not searchable; the next sync drops them)"
            );
        }
        for log in ctx.db.logs(Some(s.id), 5).await? {
            say!(
                "    {}  {:<9} tick {}  {} files, {} chunks, {} ms  {}{}",
                fmt(Some(log.started_at)),
                shown(&log.status),
                fmt(log.tick),
                log.files_processed,
                log.chunks_written,
                log.duration_ms.unwrap_or_default(),
                shown(&log.locked_by.unwrap_or_default()),
                log.error_message
                    .map(|e| format!("  ({})", shown(&e)))
                    .unwrap_or_default()
            );
        }
    }
    say!("locks:");
    for (name, by, until, token) in ctx.db.locks().await? {
        let by = shown(&by);
        let state = if until > now {
            format!("held by {by} for {} ms more", until - now)
        } else {
            format!("free (last {by})")
        };
        say!("    {}  {state}  fencing token {token}", shown(&name));
    }
    Ok(())
}

/// The first 12 characters of a commit id (whole characters, whatever the row holds).
fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}
