//! The vector store: chunks with their embeddings, written under the lock's fencing token.
//!
//! **Fencing.** Each repository has a fence row (`repository_fence`) holding the newest token
//! that has written to it. Every write runs in one transaction whose first statement raises the
//! fence to the writer's token, or changes nothing when the fence is already higher; then the
//! transaction is rolled back and the write refused ([`StoreError::Fenced`]). Raising the fence
//! takes the row's write lock (SQLite: the database's), so writers of one repository are
//! serialised until commit: a holder that lost its lock cannot slip a delete or an insert in
//! after a newer holder's check.
//!
//! **Staging.** A sync does not touch the live chunks while it runs. Each batch is staged
//! (`chunks_staged`, with the paths it replaces in `staged_paths`) under the token, and
//! [`publish`](VectorStore::publish) swaps them in at the end, in one transaction. A sync that
//! fails, is cancelled or whose process dies leaves the index exactly as it was; its staged
//! rows are dropped by [`discard`](VectorStore::discard) or by the next publish of the
//! repository.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use sqlx::Row;

use crate::db::{Db, V};
use crate::embed::{from_bytes, to_bytes};

/// One chunk with its embedding, addressed by a deterministic point id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    pub(crate) point_id: String,
    pub(crate) collection: String,
    pub(crate) repository_id: i64,
    pub(crate) path: String,
    pub(crate) chunk_index: i64,
    pub(crate) start_line: i64,
    pub(crate) end_line: i64,
    pub(crate) text: String,
    pub(crate) embedding: Vec<f32>,
    pub(crate) embedder: String,
    pub(crate) commit: String,
}

/// `(point id, path, chunk index)` of a stored chunk.
pub(crate) type PointRef = (String, String, i64);

/// A search hit.
#[derive(Debug, Clone)]
pub(crate) struct Hit {
    pub(crate) repository_id: i64,
    pub(crate) path: String,
    pub(crate) start_line: i64,
    pub(crate) end_line: i64,
    pub(crate) score: f32,
    pub(crate) text: String,
}

/// What a publish changed in the live index.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Published {
    /// Paths whose chunks were replaced or removed.
    pub(crate) paths: u64,
    /// Chunks written.
    pub(crate) chunks: u64,
}

/// The point id of a chunk: the same repository, path and index always give the same id, so
/// a re-run overwrites instead of duplicating.
pub(crate) fn point_id(repository_id: i64, path: &str, chunk_index: usize) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{repository_id}\u{0}{path}\u{0}{chunk_index}").as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// Why a write was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// A newer holder of the repository's lock has written: this token is stale.
    #[error(
        "write refused: fencing token {token} is older than {current}, the token of the newest writer to repository {repository_id}"
    )]
    Fenced {
        repository_id: i64,
        token: i64,
        current: i64,
    },
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Where a write is about to happen; a [`WriteHook`] runs there (tests pause a stale holder
/// at these points).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WritePoint {
    /// Before staging batch `n` (0-based).
    Stage(usize),
    /// Before publishing the staged batches.
    Publish,
}

/// Called before each write transaction of a sync, after the checks that preceded it.
pub(crate) type WriteHook = Arc<dyn Fn(WritePoint) -> BoxFuture<'static, ()> + Send + Sync>;

/// Where chunks live. [`SqlVectorStore`] keeps them in the application database; another store
/// (Qdrant, pgvector) implements the same calls, with the same fencing.
pub(crate) trait VectorStore: Send + Sync + std::fmt::Debug {
    /// Claims the repository for writes by `token`: refused when a newer token has written.
    fn fence<'a>(&'a self, repository_id: i64, token: i64)
    -> BoxFuture<'a, Result<(), StoreError>>;
    /// Stages `points` as the new content of `paths` (a path without points is deleted at
    /// publish). One transaction, fenced; nothing live changes.
    fn stage<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
        paths: &'a [String],
        points: &'a [Point],
    ) -> BoxFuture<'a, Result<u64, StoreError>>;
    /// Replaces the live chunks of every staged path with the staged points of `token`. One
    /// transaction, fenced: all of it or, when refused, none.
    fn publish<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
    ) -> BoxFuture<'a, Result<Published, StoreError>>;
    /// Drops what `token` (and any older token) staged for the repository.
    fn discard<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    /// The `k` chunks most similar to `query` among those embedded by `embedder` (vectors of
    /// different embedders mean nothing to each other, even at the same dimension).
    fn search<'a>(
        &'a self,
        query: &'a [f32],
        embedder: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>>;
    /// How many live chunks each embedder wrote: `(embedder, chunks)`.
    fn embedders<'a>(&'a self) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>>;
    /// Every live point of a repository with its path.
    fn points<'a>(&'a self, repository_id: i64)
    -> BoxFuture<'a, Result<Vec<PointRef>, StoreError>>;
    /// How many points are staged for the repository (tests, status).
    fn staged<'a>(&'a self, repository_id: i64) -> BoxFuture<'a, Result<i64, StoreError>>;
}

/// The vector store in the application database: a `chunks` table, brute-force cosine search
/// (fine for thousands of chunks; use a vector index for millions).
#[derive(Debug, Clone)]
pub(crate) struct SqlVectorStore {
    db: Db,
}

/// Raises the fence to the token, or changes nothing when it is higher: 1 row or 0.
const RAISE_FENCE: &str =
    "INSERT INTO repository_fence (repository_id, fencing_token) VALUES ($1, $2)
     ON CONFLICT (repository_id) DO UPDATE SET fencing_token = excluded.fencing_token
     WHERE repository_fence.fencing_token <= excluded.fencing_token";

const POINT_COLUMNS: &str = "point_id, collection, repository_id, path, chunk_index, start_line, end_line, text, \
                             embedding, embedder, commit_sha, fencing_token";

impl SqlVectorStore {
    pub(crate) fn new(db: Db) -> Self {
        Self { db }
    }

    /// The first statement of every write transaction: raise the fence or refuse.
    async fn raise_fence(
        &self,
        conn: &mut sqlx::AnyConnection,
        repository_id: i64,
        token: i64,
    ) -> Result<(), StoreError> {
        let raised = self
            .db
            .query(RAISE_FENCE, vec![V::I(repository_id), V::I(token)])
            .execute(&mut *conn)
            .await?
            .rows_affected();
        if raised == 1 {
            return Ok(());
        }
        let current = self
            .db
            .query(
                "SELECT fencing_token FROM repository_fence WHERE repository_id = $1",
                vec![V::I(repository_id)],
            )
            .fetch_optional(&mut *conn)
            .await?
            .map(|r| r.get::<i64, _>(0))
            .unwrap_or_default();
        Err(StoreError::Fenced {
            repository_id,
            token,
            current,
        })
    }
}

impl SqlVectorStore {
    /// Drops what `token` and older tokens staged for the repository.
    async fn clear_staging(
        &self,
        conn: &mut sqlx::AnyConnection,
        repository_id: i64,
        token: i64,
    ) -> Result<(), StoreError> {
        for table in ["chunks_staged", "staged_paths"] {
            self.db
                .query(
                    &format!(
                        "DELETE FROM {table} WHERE repository_id = $1 AND fencing_token <= $2"
                    ),
                    vec![V::I(repository_id), V::I(token)],
                )
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }
}

impl VectorStore for SqlVectorStore {
    fn fence<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut tx = self.db.begin().await?;
            self.raise_fence(&mut tx, repository_id, token).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn stage<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
        paths: &'a [String],
        points: &'a [Point],
    ) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let db = &self.db;
            let mut tx = db.begin().await?;
            // Refused (and rolled back on drop) once a newer holder has written.
            self.raise_fence(&mut tx, repository_id, token).await?;
            for path in paths {
                db.query(
                    "INSERT INTO staged_paths (repository_id, fencing_token, path) VALUES ($1, $2, $3)
                     ON CONFLICT (repository_id, fencing_token, path) DO NOTHING",
                    vec![V::I(repository_id), V::I(token), V::S(path.clone())],
                )
                .execute(&mut *tx)
                .await?;
            }
            let mut staged = 0;
            for p in points {
                let sql = format!(
                    "INSERT INTO chunks_staged ({POINT_COLUMNS})
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
                     ON CONFLICT (point_id, fencing_token) DO UPDATE SET text = excluded.text,
                         embedding = excluded.embedding, start_line = excluded.start_line,
                         end_line = excluded.end_line, embedder = excluded.embedder,
                         commit_sha = excluded.commit_sha"
                );
                staged += db
                    .query(
                        &sql,
                        vec![
                            V::S(p.point_id.clone()),
                            V::S(p.collection.clone()),
                            V::I(p.repository_id),
                            V::S(p.path.clone()),
                            V::I(p.chunk_index),
                            V::I(p.start_line),
                            V::I(p.end_line),
                            V::S(p.text.clone()),
                            V::B(to_bytes(&p.embedding)),
                            V::S(p.embedder.clone()),
                            V::S(p.commit.clone()),
                            V::I(token),
                        ],
                    )
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            Ok(staged)
        })
    }

    fn publish<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
    ) -> BoxFuture<'a, Result<Published, StoreError>> {
        Box::pin(async move {
            let db = &self.db;
            let mut tx = db.begin().await?;
            self.raise_fence(&mut tx, repository_id, token).await?;
            let ids = || vec![V::I(repository_id), V::I(token)];
            let paths = db
                .query(
                    "SELECT COUNT(*) FROM staged_paths WHERE repository_id = $1 AND fencing_token = $2",
                    ids(),
                )
                .fetch_one(&mut *tx)
                .await?
                .get::<i64, _>(0);
            db.query(
                "DELETE FROM chunks WHERE repository_id = $1 AND path IN
                     (SELECT path FROM staged_paths WHERE repository_id = $1 AND fencing_token = $2)",
                ids(),
            )
            .execute(&mut *tx)
            .await?;
            let chunks = db
                .query(
                    &format!(
                        "INSERT INTO chunks ({POINT_COLUMNS}) SELECT {POINT_COLUMNS} FROM chunks_staged
                         WHERE repository_id = $1 AND fencing_token = $2"
                    ),
                    ids(),
                )
                .execute(&mut *tx)
                .await?
                .rows_affected();
            // This token's staging, and whatever older runs that died left behind.
            self.clear_staging(&mut tx, repository_id, token).await?;
            tx.commit().await?;
            Ok(Published {
                paths: u64::try_from(paths).unwrap_or_default(),
                chunks,
            })
        })
    }

    fn discard<'a>(
        &'a self,
        repository_id: i64,
        token: i64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut tx = self.db.begin().await?;
            self.clear_staging(&mut tx, repository_id, token).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    fn search<'a>(
        &'a self,
        query: &'a [f32],
        embedder: &'a str,
        k: usize,
    ) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .db
                .rows(
                    "SELECT repository_id, path, start_line, end_line, text, embedding FROM chunks WHERE embedder = $1",
                    vec![V::S(embedder.to_owned())],
                )
                .await?;
            let mut hits: Vec<Hit> = rows
                .iter()
                .map(|r| {
                    let embedding = from_bytes(&r.get::<Vec<u8>, _>(5));
                    Hit {
                        repository_id: r.get(0),
                        path: r.get(1),
                        start_line: r.get(2),
                        end_line: r.get(3),
                        text: r.get(4),
                        score: crate::embed::cosine(query, &embedding),
                    }
                })
                .collect();
            // A vector stored by an older version with a component that is not a finite number
            // scores NaN: it cannot be ranked, so it is left out (the row stays; `sync-now
            // --full` re-embeds it).
            hits.retain(|h| h.score.is_finite());
            hits.sort_by(|a, b| b.score.total_cmp(&a.score));
            hits.truncate(k);
            Ok(hits)
        })
    }

    fn points<'a>(
        &'a self,
        repository_id: i64,
    ) -> BoxFuture<'a, Result<Vec<PointRef>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .db
                .rows(
                    "SELECT point_id, path, chunk_index FROM chunks WHERE repository_id = $1 ORDER BY path, chunk_index",
                    vec![V::I(repository_id)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect())
        })
    }

    fn embedders<'a>(&'a self) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .db
                .rows(
                    "SELECT embedder, COUNT(*) FROM chunks GROUP BY embedder ORDER BY embedder",
                    vec![],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn staged<'a>(&'a self, repository_id: i64) -> BoxFuture<'a, Result<i64, StoreError>> {
        Box::pin(async move {
            let rows = self
                .db
                .rows(
                    "SELECT COUNT(*) FROM chunks_staged WHERE repository_id = $1",
                    vec![V::I(repository_id)],
                )
                .await?;
            Ok(rows.first().map(|r| r.get::<i64, _>(0)).unwrap_or_default())
        })
    }
}
