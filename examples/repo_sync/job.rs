//! The job: one repository's sync under its lock (`repo_sync_<id>`), with its run history
//! (`schedule_execution_logs`) and circuit breaker. [`sync_under`] is the body of the
//! scheduler's handler `repo_sync` (`schedules.rs`), run under the lock the scheduler took for
//! the repository's schedule; [`sync_locked`] takes that lock itself (worker mode's syncs).
//! This is the part to copy: the pipeline it calls is `sync.rs`.

use shedlock::{LockContext, scheduler_lock};

use crate::refresh::{Decision, decide};
use crate::sync::{Ctx, Summary, sync_repository};

/// How a run was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// By the scheduler for this tick (ms): adaptive refresh and the breaker apply.
    Tick { tick_ms: i64, interval_ms: i64 },
    /// By hand (`sync-now`, the first run): always syncs; its outcome counts for the breaker.
    Manual,
}

/// The outcome of a locked run, once the lock was taken.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    Synced(Summary),
    NotSynced(String),
}

/// Syncs repository `repository_id` under its lock, `repo_sync_<id>`, taken here, recording
/// the run: what a worker does with a hand-off (`roles.rs`). The lock's durations come from the
/// configuration (`--lock-at-most-for`, `--lock-at-least-for`). Returns
/// `Ok(TaskResult::Skipped)` when another instance holds the lock, and
/// `Ok(TaskResult::Executed(result))` when this one ran it.
#[scheduler_lock(
    name = "repo_sync_{repository_id}",
    lock_at_most_for = ctx.lock_at_most_for,
    lock_at_least_for = ctx.lock_at_least_for
)]
pub(crate) async fn sync_locked(
    ctx: &Ctx,
    repository_id: i64,
    trigger: Trigger,
) -> Result<Outcome, String> {
    let lock = LockContext::current().ok_or("not under a lock")?;
    sync_under(ctx, repository_id, trigger, lock).await
}

/// Syncs repository `id` under `lock`, already held (the scheduler's, for the handler
/// `repo_sync`; or [`sync_locked`]'s), recording the run: a tick's run applies adaptive refresh
/// and the breaker, one by hand always syncs. Every write is fenced with the lock's token.
pub(crate) async fn sync_under(
    ctx: &Ctx,
    id: i64,
    trigger: Trigger,
    lock: LockContext,
) -> Result<Outcome, String> {
    let token = lock.fencing_token();
    // A worker's sync takes the plain lock (the scheduler claimed the tick): its tick is the
    // hand-off's.
    let tick = lock.tick().map(|t| t.timestamp_millis()).or(match trigger {
        Trigger::Tick { tick_ms, .. } => Some(tick_ms),
        Trigger::Manual => None,
    });
    let db = &ctx.db;
    let session = db
        .session(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("repository {id} is not registered"))?;
    if let Trigger::Tick {
        tick_ms,
        interval_ms,
    } = trigger
    {
        let decision = decide(&session, tick_ms, interval_ms, &ctx.policy);
        if !matches!(decision, Decision::Sync | Decision::Probe { .. }) {
            let reason = decision.reason();
            db.log_skipped(id, tick, &ctx.locked_by, token, &reason)
                .await
                .map_err(|e| e.to_string())?;
            return Ok(Outcome::NotSynced(reason));
        }
    }
    let log = db
        .log_start(id, tick, &ctx.locked_by, token)
        .await
        .map_err(|e| e.to_string())?;
    // Dropped unfinished (shutdown, lost lock, a caller that stopped waiting): the row says
    // `cancelled` and the staged chunks go; the index stays as it was.
    let mut unfinished = Unfinished {
        ctx,
        id,
        token,
        log,
        lock,
        armed: true,
    };
    let result = sync_repository(ctx, &session, token).await;
    unfinished.armed = false;
    match result {
        Ok(summary) => {
            db.record_success(id, &summary.commit)
                .await
                .map_err(|e| e.to_string())?;
            db.log_end(
                log,
                "completed",
                summary.files as i64,
                summary.chunks_written as i64,
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
            Ok(Outcome::Synced(summary))
        }
        Err(error) => {
            let message = error.to_string();
            // Nothing was published; drop what was staged.
            let _ = ctx.store.discard(id, token).await;
            db.record_failure(id).await.map_err(|e| e.to_string())?;
            db.log_end(log, "failed", 0, 0, Some(message.clone()))
                .await
                .map_err(|e| e.to_string())?;
            Err(message)
        }
    }
}

/// Records a sync whose future was dropped before it ended.
struct Unfinished<'a> {
    ctx: &'a Ctx,
    id: i64,
    token: i64,
    log: i64,
    lock: LockContext,
    armed: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime left to write with: the next start closes the row as abandoned
        };
        let reason = if self.lock.is_lost() {
            "cancelled: the lock was lost (taken over, or not renewed in time) before the sync finished"
        } else {
            "cancelled before the sync finished (shutdown, or the caller stopped waiting)"
        };
        let (db, store) = (self.ctx.db.clone(), self.ctx.store.clone());
        let (id, token, log) = (self.id, self.token, self.log);
        self.ctx.pending.push(runtime.spawn(async move {
            if let Err(e) = store.discard(id, token).await {
                tracing::warn!(
                    "repository {id}: cannot drop the staged chunks of token {token}: {e}"
                );
            }
            if let Err(e) = db
                .log_end(log, "cancelled", 0, 0, Some(reason.into()))
                .await
            {
                tracing::warn!("repository {id}: cannot record the cancelled run: {e}");
            }
        }));
    }
}
