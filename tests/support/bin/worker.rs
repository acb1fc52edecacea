//! Worker mode in the harness: the queue a `--role scheduler` process hands its claimed ticks
//! to (counting what it enqueued, and with `--die-after-claim` exiting between a claim and its
//! enqueue), and the `--role worker` process that runs them, writing each run to
//! `<table>_work` (job, tick, instance, fencing token, attempt, started, finished).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use apalis::prelude::*;
use futures_util::future::BoxFuture;
use shedlock::LockContext;
use shedlock::handoff::apalis::{
    PostgresTickQueue, RedisTickQueue, SqliteTickQueue, postgres_worker, postgres_worker_config,
    prepare_postgres_queue, prepare_sqlite_queue, redis_worker, redis_worker_config,
    sqlite_queue_pool, sqlite_worker, sqlite_worker_config,
};
use shedlock::handoff::{Enqueued, HandOff, TickQueue};

use super::{Args, Bind, Results};

type BoxError = Box<dyn std::error::Error>;

/// Where `--queue` points.
enum QueueArg {
    Sqlite(String),
    Postgres,
    Redis(String),
}

impl QueueArg {
    fn parse(args: &Args) -> Result<Self, BoxError> {
        let spec = args.queue.as_deref().ok_or("worker mode needs --queue")?;
        Ok(match spec.split_once(':') {
            Some(("sqlite", path)) => QueueArg::Sqlite(path.to_owned()),
            Some(("redis", url)) => QueueArg::Redis(url.to_owned()),
            None if spec == "postgres" => QueueArg::Postgres,
            _ => {
                return Err(
                    format!("--queue {spec:?}: sqlite:<file>, postgres or redis:<url>").into(),
                );
            }
        })
    }
}

/// The queue's name.
fn queue_name(args: &Args) -> String {
    format!("{}_q", args.table)
}

async fn sqlite_pool(path: &str) -> Result<sqlx::SqlitePool, BoxError> {
    Ok(sqlite_queue_pool(path).await?)
}

/// The scheduler's queue: counts hand-offs enqueued and already queued.
#[derive(Debug)]
pub(crate) struct CountingQueue {
    inner: Box<dyn TickQueue>,
    new: AtomicU64,
    already: AtomicU64,
    claims: AtomicUsize,
    /// Enqueues under way (the dying claim lets them finish first, so what it enqueued before
    /// is known: exactly the claims before it).
    in_flight: AtomicUsize,
    die_at: Option<usize>,
}

impl CountingQueue {
    /// (enqueued, already queued).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.new.load(Ordering::SeqCst),
            self.already.load(Ordering::SeqCst),
        )
    }
}

impl TickQueue for CountingQueue {
    fn enqueue<'a>(&'a self, hand_off: &'a HandOff) -> BoxFuture<'a, shedlock::Result<Enqueued>> {
        Box::pin(async move {
            // Inside the claim's lock: a hand-off of the run's own tick (a recovery of an
            // earlier one is outside it).
            if LockContext::current().is_some() {
                let claims = self.claims.fetch_add(1, Ordering::SeqCst) + 1;
                if self.die_at == Some(claims) {
                    for _ in 0..100 {
                        if self.in_flight.load(Ordering::SeqCst) == 0 {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    eprintln!(
                        "shedlock-harness: exiting after the claim of {} tick_ms={} (token {}), before its enqueue",
                        hand_off.job,
                        hand_off.tick.timestamp_millis(),
                        hand_off.fencing_token
                    );
                    std::process::exit(3);
                }
            }
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            let enqueued = self.inner.enqueue(hand_off).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let enqueued = enqueued?;
            match enqueued {
                Enqueued::New => self.new.fetch_add(1, Ordering::SeqCst),
                Enqueued::AlreadyQueued => self.already.fetch_add(1, Ordering::SeqCst),
            };
            Ok(enqueued)
        })
    }
}

/// The queue `--queue` names, for `--role scheduler`.
pub(crate) async fn queue(args: &Args) -> Result<Arc<CountingQueue>, BoxError> {
    let name = queue_name(args);
    let inner: Box<dyn TickQueue> = match QueueArg::parse(args)? {
        QueueArg::Sqlite(path) => {
            Box::new(SqliteTickQueue::new(sqlite_pool(&path).await?, name).await?)
        }
        QueueArg::Postgres => {
            let pool = sqlx::PgPool::connect(&args.url).await?;
            Box::new(PostgresTickQueue::new(pool, name).await?)
        }
        QueueArg::Redis(url) => Box::new(RedisTickQueue::connect(&url, &name).await?),
    };
    Ok(Arc::new(CountingQueue {
        inner,
        new: AtomicU64::new(0),
        already: AtomicU64::new(0),
        claims: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        die_at: args.die_after_claim,
    }))
}

/// What every run of a worker shares.
struct WorkState {
    results: Results,
    table: String,
    instance: String,
    work: Duration,
}

/// Runs one hand-off: records its start, works in steps of 100 ms, records its end.
async fn handle(
    hand_off: HandOff,
    attempt: Attempt,
    state: Data<Arc<WorkState>>,
) -> Result<(), BoxDynError> {
    let t = &state.table;
    let now = state.results.now_ms();
    let tick_ms = hand_off.tick.timestamp_millis();
    let attempt = attempt.current() as i64;
    state
        .results
        .exec(
            format!(
                "INSERT INTO {t}_work (job, tick_ms, instance, token, attempt, started_ms) VALUES (?, ?, ?, ?, ?, {now})"
            ),
            vec![
                Bind::S(hand_off.job.clone()),
                Bind::I(tick_ms),
                Bind::S(state.instance.clone()),
                Bind::I(hand_off.fencing_token),
                Bind::I(attempt),
            ],
        )
        .await?;
    let started = tokio::time::Instant::now();
    while started.elapsed() < state.work {
        let left = state.work.saturating_sub(started.elapsed());
        tokio::time::sleep(left.min(Duration::from_millis(100))).await;
    }
    state
        .results
        .exec(
            format!(
                "UPDATE {t}_work SET finished_ms = {now} WHERE job = ? AND tick_ms = ? AND instance = ? AND attempt = ?"
            ),
            vec![
                Bind::S(hand_off.job),
                Bind::I(tick_ms),
                Bind::S(state.instance.clone()),
                Bind::I(attempt),
            ],
        )
        .await?;
    Ok(())
}

/// `--role worker`: runs the queue's hand-offs, one at a time, until SIGTERM (finishing the one
/// it runs) or `--run-for`.
pub(crate) async fn run(args: &Args, results: Results) -> Result<(), BoxError> {
    let state = Arc::new(WorkState {
        results,
        table: args.table.clone(),
        instance: args.instance.clone(),
        work: args.work,
    });
    let name = queue_name(args);
    // Unique per process: apalis refuses a worker name seen within a heartbeat.
    let worker_name = format!("{}-{}", args.instance, std::process::id());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let run_for = args.run_for;
    let stop = async move {
        match run_for {
            Some(d) => {
                tokio::select! {
                    _ = term.recv() => {}
                    () = tokio::time::sleep(d) => {}
                }
            }
            None => {
                term.recv().await;
            }
        }
        Ok::<(), std::io::Error>(())
    };
    // One worker over the queue's storage, whichever backend it is (each is a type of its own);
    // "ready" once its queue is prepared.
    let ready = || eprintln!("shedlock-harness: {} ready (worker)", args.instance);
    macro_rules! run {
        ($storage:expr) => {
            WorkerBuilder::new(worker_name)
                .backend($storage)
                .data(state)
                .concurrency(1)
                .build(handle)
                .run_until(stop)
                .await?
        };
    }
    match QueueArg::parse(args)? {
        QueueArg::Sqlite(path) => {
            let pool = sqlite_pool(&path).await?;
            prepare_sqlite_queue(&pool, &name).await?;
            let storage = sqlite_worker(
                &pool,
                sqlite_worker_config(&name, args.heartbeat),
                args.poll_interval,
            );
            ready();
            run!(storage);
        }
        QueueArg::Postgres => {
            let pool = sqlx::PgPool::connect(&args.url).await?;
            prepare_postgres_queue(&pool, &name).await?;
            let storage = postgres_worker(
                &pool,
                postgres_worker_config(&name, args.heartbeat),
                args.poll_interval,
            )?;
            ready();
            run!(storage);
        }
        QueueArg::Redis(url) => {
            let storage = redis_worker(
                &url,
                redis_worker_config(&name, args.heartbeat),
                args.poll_interval,
            )
            .await?;
            ready();
            run!(storage);
        }
    }
    eprintln!("shedlock-harness: {} stopped (worker)", args.instance);
    Ok(())
}
