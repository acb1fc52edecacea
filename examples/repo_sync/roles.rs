//! `run --role scheduler` and `run --role worker`: the scheduler's handler `repo_sync` runs
//! each repository's tick under the schedule's lock, which claims it, and hands it to a job
//! queue (apalis, through `shedlock::handoff`) instead of syncing (`schedules.rs`); a "run now"
//! request is handed off the same way, as the job `repo_sync_<id>/now`. Workers, started apart
//! and as many as wanted, take the hand-offs and sync under the repository's lock. `--role all` (the default) is one
//! process doing both, as before: see `main.rs`.

use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::*;
use shedlock::handoff::apalis::{
    DEFAULT_HEARTBEAT, PollInterval, PostgresTickQueue, SqliteTickQueue, postgres_worker,
    postgres_worker_config, prepare_postgres_queue, prepare_sqlite_queue, sqlite_queue_pool,
    sqlite_worker, sqlite_worker_config,
};
use shedlock::handoff::{HandOff, TickQueue};
use shedlock::{TaskResult, with_provider};

use crate::db::{Location, lock_name, run_now_job};
use crate::job::{Outcome, Trigger, sync_locked};
use crate::schedules::{Payload, parsed};
use crate::show::{say, shown};
use crate::sync::Ctx;
use crate::{AnyError, Locks};

/// The queue's name (apalis's `job_type`).
pub(crate) const QUEUE: &str = "repo_sync";

/// Where the hand-offs wait: beside the database.
#[derive(Debug, Clone)]
pub(crate) enum QueuePlace {
    /// An SQLite file of its own (apalis keeps its migrations in the file's
    /// `_sqlx_migrations`), `repo_sync_queue.db` next to the SQLite database.
    Sqlite(std::path::PathBuf),
    /// The PostgreSQL database itself (apalis's schema `apalis`).
    Postgres(shedlock::secret::SecretUrl),
}

impl QueuePlace {
    /// The queue beside the database at `location`.
    pub(crate) fn beside(location: &Location) -> Result<Self, AnyError> {
        Ok(match location {
            Location::Postgres(url) => QueuePlace::Postgres(url.clone()),
            Location::Sqlite(_) => {
                let db = location.sqlite_file()?.unwrap_or_default();
                QueuePlace::Sqlite(db.with_file_name("repo_sync_queue.db"))
            }
        })
    }

    async fn sqlite_pool(path: &std::path::Path) -> Result<sqlx::SqlitePool, AnyError> {
        Ok(sqlite_queue_pool(path).await?)
    }

    /// The queue a scheduler hands its claimed ticks to.
    pub(crate) async fn tick_queue(&self) -> Result<Arc<dyn TickQueue>, AnyError> {
        Ok(match self {
            QueuePlace::Sqlite(path) => {
                Arc::new(SqliteTickQueue::new(Self::sqlite_pool(path).await?, QUEUE).await?)
            }
            QueuePlace::Postgres(url) => {
                let pool = sqlx::PgPool::connect(url.expose()).await?;
                Arc::new(PostgresTickQueue::new(pool, QUEUE).await?)
            }
        })
    }
}

/// What every sync of a worker shares.
struct Worker {
    ctx: Arc<Ctx>,
    provider: Arc<dyn Locks>,
}

/// One hand-off: the repository's sync under its lock (a plain lock: the tick was claimed by
/// the scheduler), with the tick's adaptive refresh and breaker. A sync that fails is recorded
/// as failed in the history and counts for the breaker; the queue does not run it again (the
/// next tick does). The queue runs a hand-off again only when its worker died mid-run.
async fn sync(hand_off: HandOff, worker: Data<Arc<Worker>>) -> Result<(), BoxDynError> {
    let (name, by_hand) = match hand_off.job.strip_suffix("/now") {
        Some(name) => (name, true),
        None => (hand_off.job.as_str(), false),
    };
    // The repository is the schedule's payload.
    let row = worker.provider.schedule(name).await?.filter(|r| !r.deleted);
    let Some(row) = row else {
        say!(
            "{}: no longer scheduled: hand-off of {} dropped",
            shown(name),
            hand_off.tick
        );
        return Ok(());
    };
    let Payload { repository_id: id } =
        serde_json::from_str(row.payload.as_deref().unwrap_or("null"))
            .map_err(|e| format!("{}: its payload is not a repository: {e}", shown(name)))?;
    if lock_name(id) != name || (by_hand && run_now_job(id) != hand_off.job) {
        return Err(format!("hand-off of an unknown job {:?}", hand_off.job).into());
    }
    if worker.ctx.db.session(id).await?.is_none() {
        say!(
            "#{id}: no longer registered: hand-off of {} dropped",
            hand_off.tick
        );
        return Ok(());
    }
    let trigger = if by_hand {
        Trigger::Manual
    } else {
        let schedule = parsed(&row).ok_or("a schedule without a cron")??;
        Trigger::Tick {
            tick_ms: hand_off.tick.timestamp_millis(),
            interval_ms: crate::interval_ms(&schedule, hand_off.tick),
        }
    };
    let outcome = with_provider(
        Arc::clone(&worker.provider),
        sync_locked(&worker.ctx, id, trigger),
    )
    .await?;
    match outcome {
        TaskResult::Executed(Ok(Outcome::Synced(s))) => say!(
            "#{id} tick {} (claim token {}): {} files, {} chunks",
            hand_off.tick,
            hand_off.fencing_token,
            s.files,
            s.chunks_written
        ),
        TaskResult::Executed(Ok(Outcome::NotSynced(reason))) => {
            say!(
                "#{id} tick {}: not synced: {}",
                hand_off.tick,
                shown(&reason)
            );
        }
        TaskResult::Executed(Err(error)) => {
            say!(
                "#{id} tick {}: sync failed: {}",
                hand_off.tick,
                shown(&error.to_string())
            );
        }
        TaskResult::Skipped => say!(
            "#{id} tick {}: another worker is syncing it; skipped",
            hand_off.tick
        ),
    }
    Ok(())
}

/// `run --role worker`: takes hand-offs from the queue and syncs, `concurrency` at a time,
/// until Ctrl-C (a sync in progress finishes; one not started goes back to the queue) or
/// `run_for`. Woken by the queue's notification on PostgreSQL, and looking every `poll` (on
/// SQLite the only way).
pub(crate) async fn run_worker(
    ctx: Ctx,
    provider: Arc<dyn Locks>,
    queue: QueuePlace,
    concurrency: usize,
    poll: PollInterval,
    run_for: Option<Duration>,
) -> Result<(), AnyError> {
    let name = format!("{}-{}", provider.locked_by(), std::process::id());
    let worker = Arc::new(Worker {
        ctx: Arc::new(ctx),
        provider,
    });
    let stop = async move {
        match run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        Ok::<(), std::io::Error>(())
    };
    say!(
        "repo_sync worker {} taking hand-offs from the queue (Ctrl-C to stop)",
        shown(&name)
    );
    let concurrency = concurrency.max(1);
    // One worker over the queue's storage, whichever backend it is (each is a type of its own).
    macro_rules! run {
        ($storage:expr) => {
            WorkerBuilder::new(name)
                .backend($storage)
                .data(Arc::clone(&worker))
                .concurrency(concurrency)
                .build(sync)
                .run_until(stop)
                .await?
        };
    }
    match queue {
        QueuePlace::Sqlite(path) => {
            let pool = QueuePlace::sqlite_pool(&path).await?;
            prepare_sqlite_queue(&pool, QUEUE).await?;
            let storage = sqlite_worker(
                &pool,
                sqlite_worker_config(QUEUE, DEFAULT_HEARTBEAT).batch_size(concurrency),
                poll,
            );
            run!(storage);
        }
        QueuePlace::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url.expose()).await?;
            prepare_postgres_queue(&pool, QUEUE).await?;
            let storage = postgres_worker(
                &pool,
                postgres_worker_config(QUEUE, DEFAULT_HEARTBEAT).batch_size(concurrency),
                poll,
            )?;
            run!(storage);
        }
    }
    worker.ctx.pending.wait().await;
    say!("worker stopped");
    Ok(())
}
