//! The operator's commands besides `run` and `add`: the first run, `sync-now`, `search` and
//! `status`, and how a sync's summary is printed.

use std::collections::HashMap;
use std::sync::Arc;

use shedlock::{LockProvider, Schedule, TaskResult, with_provider};

use crate::db::{lock_name, now_ms};
use crate::job::{Outcome, Trigger, sync_locked};
use crate::refresh::{self, Breaker};
use crate::show::shown;
use crate::sync::{Ctx, Summary};
use crate::{AnyError, display_name, interval_ms, source};

/// With no command: register the repository we are in (if it is not registered yet), sync
/// every active repository once, summarize. A registered local repository that no longer
/// exists is reported and left out; the others still sync.
pub(crate) async fn first_run(ctx: &Ctx, provider: Arc<dyn LockProvider>) -> Result<(), AnyError> {
    let here = std::process::Command::new("git")
        .args(["rev-parse", "--show-toplevel"])
        .output()?;
    if !here.status.success() {
        return Err("not inside a git repository: register one with `add <path>`".into());
    }
    let here = String::from_utf8_lossy(&here.stdout).trim().to_owned();
    let here = std::fs::canonicalize(&here)?.display().to_string();
    if ctx.db.find_session(&here).await?.is_none() {
        let session = ctx
            .db
            .add_session(&display_name(&here), &here, "0 */15 * * * *", "UTC")
            .await?;
        println!(
            "registered #{} {} ({}), every 15 minutes",
            session.id,
            shown(&session.display_name),
            shown(&session.source)
        );
    }
    let mut failed = Vec::new();
    for s in ctx.db.sessions().await?.into_iter().filter(|s| s.is_active) {
        if !source::is_remote(&s.source) && !std::path::Path::new(&s.source).exists() {
            println!(
                "#{} {}: {} no longer exists: not synced (unregister it with `remove {}`)",
                s.id,
                shown(&s.display_name),
                shown(&s.source),
                s.id
            );
            continue;
        }
        if let Err(error) = sync_now(ctx, Arc::clone(&provider), s.id, &s.display_name).await {
            println!("  {}", shown(&error.to_string()));
            failed.push(s.display_name);
        }
    }
    println!("\nsearch it:  cargo run --example repo_sync -- search \"fencing token\"");
    println!(
        "keep it synced on schedule (start several, each tick runs once):  cargo run --example repo_sync -- run"
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("the sync of {} failed", failed.join(", ")).into())
    }
}

/// A sync by hand, through the same lock as the scheduled runs.
pub(crate) async fn sync_now(
    ctx: &Ctx,
    provider: Arc<dyn LockProvider>,
    id: i64,
    name: &str,
) -> Result<Option<Summary>, AnyError> {
    println!("syncing #{id} {} ...", shown(name));
    match with_provider(Arc::clone(&provider), sync_locked(ctx, id, Trigger::Manual)).await? {
        TaskResult::Executed(Ok(Outcome::Synced(s))) => {
            print_summary(&s);
            Ok(Some(s))
        }
        TaskResult::Executed(Ok(Outcome::NotSynced(reason))) => {
            println!("  not synced: {}", shown(&reason));
            Ok(None)
        }
        TaskResult::Executed(Err(error)) => {
            Err(format!("sync of #{id} {name} failed: {error}").into())
        }
        TaskResult::Skipped => {
            let holder = ctx
                .db
                .locks()
                .await?
                .into_iter()
                .find(|(n, ..)| *n == lock_name(id));
            match holder {
                Some((_, by, until, token)) => println!(
                    "  held by {} (fencing token {token}) until {}: not synced now",
                    shown(&by),
                    chrono::DateTime::from_timestamp_millis(until)
                        .map_or_else(String::new, |t| t.to_rfc3339())
                ),
                None => println!("  held elsewhere: not synced now"),
            }
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
    println!(
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
            println!("nothing indexed yet: run `cargo run --example repo_sync` first");
        } else {
            let others: Vec<String> = others
                .iter()
                .map(|(name, n)| format!("{n} chunks by {}", shown(name)))
                .collect();
            println!(
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
        println!(
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
        println!(
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

pub(crate) async fn status(ctx: &Ctx) -> Result<(), AnyError> {
    let now = now_ms();
    let fmt = |ms: Option<i64>| {
        ms.and_then(chrono::DateTime::from_timestamp_millis)
            .map_or("-".into(), |t| t.format("%F %T UTC").to_string())
    };
    for s in ctx.db.sessions().await? {
        let schedule = Schedule::parse(&s.cron, &s.time_zone)?;
        let next = schedule
            .next_after(chrono::Utc::now())
            .map(|t| t.timestamp_millis());
        let interval = interval_ms(&schedule, chrono::Utc::now());
        let decision = refresh::decide(&s, next.unwrap_or(now), interval, &ctx.policy);
        println!(
            "#{} {}  {}  \"{}\" {}  {}",
            s.id,
            shown(&s.display_name),
            if s.is_active { "active" } else { "paused" },
            shown(&s.cron),
            shown(&s.time_zone),
            shown(&s.source)
        );
        println!(
            "    next tick {}  ({})  last sync {} at {}  last viewed {}",
            fmt(next),
            decision.reason(),
            fmt(s.last_sync_at),
            s.last_synced_commit
                .as_deref()
                .map_or_else(|| "-".into(), |c| shown(&short(c)).into_owned()),
            fmt(s.last_viewed_at)
        );
        println!("    {}", Breaker::at(&s, now, &ctx.policy));
        let staged = ctx.store.staged(s.id).await?;
        if staged > 0 {
            println!(
                "    {staged} chunks staged by an unfinished sync (not searchable; the next sync drops them)"
            );
        }
        for log in ctx.db.logs(Some(s.id), 5).await? {
            println!(
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
    println!("locks:");
    for (name, by, until, token) in ctx.db.locks().await? {
        let by = shown(&by);
        let state = if until > now {
            format!("held by {by} for {} ms more", until - now)
        } else {
            format!("free (last {by})")
        };
        println!("    {}  {state}  fencing token {token}", shown(&name));
    }
    Ok(())
}

/// The first 12 characters of a commit id (whole characters, whatever the row holds).
fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}
