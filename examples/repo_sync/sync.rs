//! One repository sync, and the locked, recorded run around it.
//!
//! The pipeline: list the files at HEAD (or only those changed since the last synced commit),
//! extract text (skipping binary and oversized files), chunk, embed, then replace the chunks of
//! every touched path in the vector store under the lock's fencing token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shedlock::{LockConfiguration, LockContext, TaskResult, run_locked};

use crate::chunk::{ChunkConfig, chunk};
use crate::db::{Db, Point, Session, StoreError, VectorStore, point_id};
use crate::embed::Embedder;
use crate::extract::{Extracted, extract};
use crate::git::Blob;
use crate::refresh::{Decision, Policy, decide};
use crate::source::Source;

/// How long a sync may hold its repository's lock (keep-alive renews it while a long sync
/// runs), and how long it keeps it at least: zero, because each scheduled run claims its tick,
/// so a fast sync cannot run twice for one tick however soon it releases, and a `sync-now` right
/// after a sync is not turned away.
pub(crate) const LOCK_AT_MOST_FOR: Duration = Duration::from_secs(30 * 60);
pub(crate) const LOCK_AT_LEAST_FOR: Duration = Duration::ZERO;

/// Everything a sync needs.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub(crate) db: Db,
    pub(crate) store: Arc<dyn VectorStore>,
    pub(crate) embedder: Arc<dyn Embedder>,
    pub(crate) chunking: ChunkConfig,
    pub(crate) max_file_bytes: u64,
    pub(crate) policy: Policy,
    pub(crate) locked_by: String,
    pub(crate) progress: bool,
    /// Sent as `PRIVATE-TOKEN` to GitLab sources (from `GITLAB_TOKEN`).
    pub(crate) gitlab_token: Option<String>,
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) commit: String,
    pub(crate) full: bool,
    /// Files read and chunked.
    pub(crate) files: usize,
    /// Files skipped (binary, too large, not UTF-8).
    pub(crate) skipped_files: usize,
    /// Paths whose chunks were removed (deleted files).
    pub(crate) deleted_paths: usize,
    pub(crate) chunks_written: u64,
    pub(crate) elapsed_ms: u128,
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error("embedding failed: {0}")]
    Embed(#[from] crate::embed::EmbedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// How a run was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    /// By the scheduler for this tick (ms): adaptive refresh and the breaker apply.
    Tick { tick_ms: i64, interval_ms: i64 },
    /// By hand (`sync-now`, the first run): always syncs, resets the breaker.
    Manual,
}

/// The outcome of a locked run, once the lock was taken.
#[derive(Debug)]
pub(crate) enum Outcome {
    Synced(Summary),
    NotSynced(String),
}

/// Runs the sync of repository `id` under its lock (`repo_sync_<id>`), recording it in
/// `schedule_execution_logs`. Inside a scheduled run the lock claims the tick.
pub(crate) async fn run(
    ctx: &Ctx,
    id: i64,
    trigger: Trigger,
) -> shedlock::Result<TaskResult<Result<Outcome, String>>> {
    let config = LockConfiguration::new(
        format!("repo_sync_{id}"),
        LOCK_AT_MOST_FOR,
        LOCK_AT_LEAST_FOR,
    )?;
    run_locked(config, locked_body(ctx, id, trigger)).await
}

async fn locked_body(ctx: &Ctx, id: i64, trigger: Trigger) -> Result<Outcome, String> {
    let lock = LockContext::current().ok_or("not under a lock")?;
    let token = lock.fencing_token();
    let tick = lock.tick().map(|t| t.timestamp_millis());
    let db = &ctx.db;
    let session = db
        .session(id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("repository {id} is not registered"))?;
    match trigger {
        Trigger::Tick {
            tick_ms,
            interval_ms,
        } => {
            let decision = decide(&session, tick_ms, interval_ms, &ctx.policy);
            if decision != Decision::Sync {
                let reason = decision.reason();
                db.log_skipped(id, tick, &ctx.locked_by, token, &reason)
                    .await
                    .map_err(|e| e.to_string())?;
                return Ok(Outcome::NotSynced(reason));
            }
        }
        Trigger::Manual => db.reset_failures(id).await.map_err(|e| e.to_string())?,
    }
    let log = db
        .log_start(id, tick, &ctx.locked_by, token)
        .await
        .map_err(|e| e.to_string())?;
    match sync_repository(ctx, &session, token).await {
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
            db.record_failure(id).await.map_err(|e| e.to_string())?;
            db.log_end(log, "failed", 0, 0, Some(message.clone()))
                .await
                .map_err(|e| e.to_string())?;
            Err(message)
        }
    }
}

/// The pipeline, without locking or history: what a sync of `session` under `token` writes.
pub(crate) async fn sync_repository(
    ctx: &Ctx,
    session: &Session,
    token: i64,
) -> Result<Summary, SyncError> {
    let started = Instant::now();
    let source = Source::open(&session.source, ctx.gitlab_token.clone()).await?;
    let head = source.head().await?;
    let mut summary = Summary {
        commit: head.clone(),
        ..Summary::default()
    };
    // Claim the repository for this token before any work: a stale holder stops here.
    ctx.store.fence(session.id, token).await?;
    if session.last_synced_commit.as_deref() == Some(head.as_str()) {
        summary.elapsed_ms = started.elapsed().as_millis();
        return Ok(summary); // nothing changed since the last sync: nothing to write
    }
    // Incremental when the last synced commit is known to the source; else everything (a
    // first sync, or a history rewritten by a force-push).
    let incremental = match session.last_synced_commit.as_deref() {
        Some(from) => match source.changes(from, &head).await {
            Ok(changes) => Some(changes),
            Err(e) if e.needs_full_listing() => None,
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    let (upserted, deleted) = match incremental {
        Some(changes) => (changes.upserted, changes.deleted),
        None => {
            summary.full = true;
            let files = source.list_files(&head).await?;
            let known: Vec<String> = ctx
                .store
                .points(session.id)
                .await?
                .into_iter()
                .map(|(_, path, _)| path)
                .collect();
            let gone: Vec<String> = known.into_iter().filter(|p| !files.contains(p)).collect();
            (files, dedup(gone))
        }
    };
    summary.deleted_paths = deleted.len();
    if !deleted.is_empty() {
        ctx.store
            .replace_paths(session.id, &deleted, &[], token)
            .await?;
    }

    let total = upserted.len();
    let mut last_report = Instant::now();
    let mut reader = source.reader(&head).await?;
    // Batches of files: memory stays flat, progress can be shown, and the fence is re-checked
    // before each write.
    for (batch_no, batch) in upserted.chunks(64).enumerate() {
        let max = ctx.max_file_bytes;
        let (returned, read) = reader.read_many(batch.to_vec(), max).await;
        reader = returned;
        let mut texts = Vec::new();
        let mut pending: Vec<(String, usize, usize, usize)> = Vec::new(); // path, index, start, end
        for (path, blob) in read {
            let text = match blob? {
                Blob::Data(bytes) => match extract(&bytes, max) {
                    Extracted::Text(text) => text,
                    _ => {
                        summary.skipped_files += 1;
                        continue;
                    }
                },
                Blob::TooLarge { .. } => {
                    summary.skipped_files += 1;
                    continue;
                }
            };
            summary.files += 1;
            for c in chunk(&text, &ctx.chunking) {
                pending.push((path.clone(), c.index, c.start_line, c.end_line));
                texts.push(c.text);
            }
        }
        let embeddings = if texts.is_empty() {
            Vec::new()
        } else {
            ctx.embedder.embed(&texts).await?
        };
        let points: Vec<Point> = pending
            .into_iter()
            .zip(texts)
            .zip(embeddings)
            .map(|(((path, index, start, end), text), embedding)| Point {
                point_id: point_id(session.id, &path, index),
                collection: session.collection.clone(),
                repository_id: session.id,
                chunk_index: index as i64,
                start_line: start as i64,
                end_line: end as i64,
                path,
                text,
                embedding,
                embedder: ctx.embedder.name().to_owned(),
                commit: head.clone(),
            })
            .collect();
        summary.chunks_written += ctx
            .store
            .replace_paths(session.id, batch, &points, token)
            .await?;
        let done = (batch_no * 64 + batch.len()).min(total);
        if ctx.progress
            && total > 64
            && (last_report.elapsed() > Duration::from_secs(2) || done == total)
        {
            eprintln!("  {}: {done}/{total} files", session.display_name);
            last_report = Instant::now();
        }
    }
    summary.elapsed_ms = started.elapsed().as_millis();
    Ok(summary)
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}
