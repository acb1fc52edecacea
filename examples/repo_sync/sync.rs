//! The sync pipeline of one repository: list the files at HEAD (or only those changed since
//! the last synced commit), extract text (skipping binary, oversized and unstorable files),
//! chunk, embed, stage the chunks batch by batch under the lock's fencing token, and publish
//! them at the end in one transaction. The lock, the history and the breaker around it are in
//! `job.rs`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::chunk::{ChunkConfig, chunk};
use crate::db::{Db, Session};
use crate::embed::{Embedder, unusable};
use crate::extract::{Extracted, extract};
use crate::git::Blob;
use crate::refresh::Policy;
use crate::show::tell;
use crate::source::Source;
use crate::store::{Point, StoreError, VectorStore, WriteHook, WritePoint, point_id};

/// Everything a sync needs.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) db: Db,
    pub(crate) store: Arc<dyn VectorStore>,
    pub(crate) embedder: Arc<dyn Embedder>,
    pub(crate) chunking: ChunkConfig,
    pub(crate) max_file_bytes: u64,
    pub(crate) policy: Policy,
    /// How long a sync may hold its repository's lock if its instance dies (keep-alive renews
    /// it while a long sync runs), and how long it keeps it at least (see `job.rs`).
    pub(crate) lock_at_most_for: Duration,
    pub(crate) lock_at_least_for: Duration,
    pub(crate) locked_by: String,
    pub(crate) progress: bool,
    /// Sent as `PRIVATE-TOKEN` to GitLab sources (from `GITLAB_TOKEN`).
    pub(crate) gitlab_token: Option<String>,
    /// Runs before each write transaction (tests pause a stale holder there).
    pub(crate) write_hook: Option<WriteHook>,
    /// Records of cancelled syncs still being written (see [`Pending`]).
    pub(crate) pending: Pending,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("db", &self.db)
            .field("store", &self.store)
            .field("embedder", &self.embedder)
            .field("chunking", &self.chunking)
            .field("lock_at_most_for", &self.lock_at_most_for)
            .field("locked_by", &self.locked_by)
            .field("write_hook", &self.write_hook.is_some())
            .finish_non_exhaustive()
    }
}

/// Background writes started when a sync was cancelled (its history row, its staged chunks):
/// a cancelled future cannot await them, so they run as tasks, and whoever stops the process
/// waits for them with [`wait`](Self::wait).
#[derive(Debug, Clone, Default)]
pub(crate) struct Pending(Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>);

impl Pending {
    pub(crate) fn push(&self, task: tokio::task::JoinHandle<()>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(task);
    }

    /// Waits for every pending write (each is a few statements).
    pub(crate) async fn wait(&self) {
        loop {
            let tasks: Vec<_> = self
                .0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain(..)
                .collect();
            if tasks.is_empty() {
                return;
            }
            for task in tasks {
                let _ = task.await;
            }
        }
    }
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) commit: String,
    pub(crate) full: bool,
    /// Files read and chunked.
    pub(crate) files: usize,
    /// Files skipped as binary (a NUL byte in the first 8000 bytes, as git decides).
    pub(crate) binary_files: usize,
    /// Files over the size limit.
    pub(crate) large_files: usize,
    /// Files that are not valid UTF-8.
    pub(crate) not_utf8_files: usize,
    /// Text files with a NUL byte further in: a database's text column cannot store it
    /// (PostgreSQL refuses it), so they are skipped like binary files.
    pub(crate) unstorable_files: usize,
    /// Paths whose chunks were removed (deleted files).
    pub(crate) deleted_paths: usize,
    pub(crate) chunks_written: u64,
    pub(crate) elapsed_ms: u128,
}

impl Summary {
    /// Every file not indexed, for whatever reason.
    pub(crate) fn skipped_files(&self) -> usize {
        self.binary_files + self.large_files + self.not_utf8_files + self.unstorable_files
    }
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SyncError {
    #[error(transparent)]
    Source(#[from] crate::source::SourceError),
    #[error("embedding failed: {0}")]
    Embed(#[from] crate::embed::EmbedError),
    /// The embedder's vector of one chunk cannot be stored: nothing of the sync is.
    #[error("embedding {path}:{start_line}-{end_line} failed: {reason}")]
    Chunk {
        path: String,
        start_line: usize,
        end_line: usize,
        reason: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
}

/// How many files are read, embedded and staged together.
const BATCH_FILES: usize = 64;

/// The pipeline, without locking or history: what a sync of `session` under `token` stages
/// and publishes. On an error nothing is published (the caller discards the staging).
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
    // Claim the repository for this token before any work: a stale holder stops here. (Each
    // write below checks again, inside its transaction.)
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
    let mut stage_no = 0;
    if !deleted.is_empty() {
        write_point(ctx, WritePoint::Stage(stage_no)).await;
        ctx.store.stage(session.id, token, &deleted, &[]).await?;
        stage_no += 1;
    }

    let total = upserted.len();
    let mut last_report = Instant::now();
    let mut reader = source.reader(&head).await?;
    // Batches of files: memory stays flat, progress can be shown, and a stale holder is
    // refused at its next batch.
    for (batch_no, batch) in upserted.chunks(BATCH_FILES).enumerate() {
        let max = ctx.max_file_bytes;
        let (returned, read) = reader.read_many(batch.to_vec(), max).await;
        reader = returned;
        let mut texts = Vec::new();
        let mut pending: Vec<(String, usize, usize, usize)> = Vec::new(); // path, index, start, end
        for (path, blob) in read {
            let text = match blob? {
                Blob::Data(bytes) => match extract(&bytes, max) {
                    Extracted::Text(text) => text,
                    Extracted::Binary => {
                        summary.binary_files += 1;
                        continue;
                    }
                    Extracted::TooLarge { .. } => {
                        summary.large_files += 1;
                        continue;
                    }
                    Extracted::NotUtf8 => {
                        summary.not_utf8_files += 1;
                        continue;
                    }
                    Extracted::Nul { .. } => {
                        summary.unstorable_files += 1;
                        continue;
                    }
                },
                Blob::TooLarge { .. } => {
                    summary.large_files += 1;
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
            let at = |i: usize, reason: String| {
                let (path, _, start_line, end_line) = pending[i].clone();
                SyncError::Chunk {
                    path,
                    start_line,
                    end_line,
                    reason,
                }
            };
            let embeddings = ctx
                .embedder
                .embed(&texts)
                .await
                .map_err(|e| match e.input() {
                    Some(i) if i < pending.len() => at(i, e.to_string()),
                    _ => SyncError::Embed(e),
                })?;
            // Whichever the embedder: a vector that is not all finite numbers is never stored.
            if let Some((i, reason)) = embeddings
                .iter()
                .enumerate()
                .find_map(|(i, v)| Some((i, unusable(v)?)))
            {
                return Err(at(
                    i,
                    format!("the embedder {} returned {reason}", ctx.embedder.name()),
                ));
            }
            embeddings
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
        // Every path of the batch is replaced: a file that became binary loses its chunks.
        write_point(ctx, WritePoint::Stage(stage_no)).await;
        ctx.store.stage(session.id, token, batch, &points).await?;
        stage_no += 1;
        let done = (batch_no * BATCH_FILES + batch.len()).min(total);
        if ctx.progress
            && total > BATCH_FILES
            && (last_report.elapsed() > Duration::from_secs(2) || done == total)
        {
            tell!(
                "  {}: {done}/{total} files",
                crate::show::shown(&session.display_name)
            );
            last_report = Instant::now();
        }
    }
    write_point(ctx, WritePoint::Publish).await;
    summary.chunks_written = ctx.store.publish(session.id, token).await?.chunks;
    summary.elapsed_ms = started.elapsed().as_millis();
    Ok(summary)
}

async fn write_point(ctx: &Ctx, point: WritePoint) {
    if let Some(hook) = &ctx.write_hook {
        hook(point).await;
    }
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v.dedup();
    v
}
