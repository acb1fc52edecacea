//! How worker mode's workers learn of a hand-off (issue 35, point 3), with apalis workers in
//! this process on the real queues, built by `shedlock::handoff::apalis`'s `*_worker`:
//!
//! - PostgreSQL and Redis: a worker whose own poll and heartbeat are a minute apart still
//!   starts a hand-off within 15 s (the notification woke it), also after its `LISTEN` or
//!   `SUBSCRIBE` connection was killed (it listens again);
//! - SQLite: a worker with a heartbeat of a minute starts one within 15 s (its poll interval,
//!   100 ms here, drives it);
//! - two workers share the hand-offs: neither takes more than 70 % (counts, not times).
//!
//! Nothing here asserts a time: each wait is for an event, with a generous deadline.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use apalis::prelude::*;
use chrono::{TimeZone, Utc};
use shedlock::Backend;
use shedlock::handoff::apalis::{
    PollInterval, PostgresTickQueue, RedisTickQueue, SqliteTickQueue, postgres_worker,
    postgres_worker_config, prepare_postgres_queue, prepare_sqlite_queue, redis_worker,
    redis_worker_config, sqlite_queue_pool, sqlite_worker, sqlite_worker_config,
};
use shedlock::handoff::{HandOff, TickQueue};
use shedlock_suite::{host_port, postgres_url, redis_url, skipped, unique_name};
use tokio::sync::{mpsc, oneshot};

/// A minute: the poll and heartbeat of a worker that must be woken by the notification.
const LONG: Duration = Duration::from_secs(60);
/// How long a test waits for an event that should come at once.
const DEADLINE: Duration = Duration::from_secs(15);

/// What a worker's body reports.
#[derive(Debug)]
enum Event {
    Started { worker: String, key: String },
    Finished { worker: String, key: String },
}

struct Body {
    worker: String,
    work: Duration,
    events: mpsc::UnboundedSender<Event>,
}

async fn body(hand_off: HandOff, body: Data<Arc<Body>>) -> Result<(), BoxDynError> {
    let key = hand_off.key();
    let _ = body.events.send(Event::Started {
        worker: body.worker.clone(),
        key: key.clone(),
    });
    tokio::time::sleep(body.work).await;
    let _ = body.events.send(Event::Finished {
        worker: body.worker.clone(),
        key,
    });
    Ok(())
}

/// A queue of one backend, with a unique name.
struct Queue {
    backend: Backend,
    name: String,
    enqueue: Box<dyn TickQueue>,
    /// The SQLite file's directory.
    dir: tempfile::TempDir,
    pg: Option<sqlx::PgPool>,
    sqlite: Option<sqlx::SqlitePool>,
}

impl Queue {
    async fn new(backend: Backend) -> Option<Queue> {
        if skipped(backend) {
            return None;
        }
        let name = unique_name("wake");
        let dir = tempfile::tempdir().unwrap();
        let (enqueue, pg, sqlite): (Box<dyn TickQueue>, _, _) = match backend {
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
                let queue = PostgresTickQueue::new(pool.clone(), &name).await.unwrap();
                (Box::new(queue), Some(pool), None)
            }
            Backend::Redis => (
                Box::new(RedisTickQueue::connect(&redis_url(), &name).await.unwrap()),
                None,
                None,
            ),
            _ => {
                let pool = sqlite_queue_pool(dir.path().join("queue.db"))
                    .await
                    .unwrap();
                let queue = SqliteTickQueue::new(pool.clone(), &name).await.unwrap();
                (Box::new(queue), None, Some(pool))
            }
        };
        Some(Queue {
            backend,
            name,
            enqueue,
            dir,
            pg,
            sqlite,
        })
    }

    /// Enqueues the hand-off of tick `n` (seconds after an arbitrary instant); its key.
    async fn hand_off(&self, n: i64) -> String {
        let hand_off = HandOff {
            job: "job".to_owned(),
            tick: Utc.timestamp_opt(1_800_000_000 + n, 0).unwrap(),
            lock: "job".to_owned(),
            fencing_token: n,
        };
        self.enqueue.enqueue(&hand_off).await.unwrap();
        hand_off.key()
    }

    /// Starts a worker named `name` (unique within the queue) over the queue: heartbeat
    /// `heartbeat`, looking every `poll`, working `work` per hand-off.
    async fn worker(
        &self,
        name: &str,
        heartbeat: Duration,
        poll: Duration,
        work: Duration,
        events: mpsc::UnboundedSender<Event>,
    ) -> Worker {
        let poll = PollInterval::new(poll).unwrap();
        let state = Arc::new(Body {
            worker: name.to_owned(),
            work,
            events,
        });
        let worker_name = format!("{}-{name}", self.name);
        let (stop, stopped) = oneshot::channel::<()>();
        let until = async move {
            let _ = stopped.await;
            Ok::<(), std::io::Error>(())
        };
        macro_rules! spawn {
            ($backend:expr) => {{
                let backend = $backend;
                tokio::spawn(async move {
                    WorkerBuilder::new(worker_name)
                        .backend(backend)
                        .data(state)
                        .concurrency(1)
                        .build(body)
                        .run_until(until)
                        .await
                        .map_err(|e| e.to_string())
                })
            }};
        }
        let task = match self.backend {
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
                prepare_postgres_queue(&pool, &self.name).await.unwrap();
                let config = postgres_worker_config(&self.name, heartbeat);
                spawn!(postgres_worker(&pool, config, poll).unwrap())
            }
            Backend::Redis => {
                let config = redis_worker_config(&self.name, heartbeat);
                spawn!(redis_worker(&redis_url(), config, poll).await.unwrap())
            }
            _ => {
                let pool = self.sqlite.clone().unwrap();
                prepare_sqlite_queue(&pool, &self.name).await.unwrap();
                let config = sqlite_worker_config(&self.name, heartbeat);
                spawn!(sqlite_worker(&pool, config, poll))
            }
        };
        Worker { stop, task }
    }

    /// The process ids of the worker's `LISTEN` connections (PostgreSQL), or the number of
    /// subscribers of the queue's channel (Redis), as one list of numbers.
    async fn listeners(&self) -> Vec<i64> {
        match self.backend {
            Backend::Postgres => {
                let pool = self.pg.as_ref().unwrap();
                sqlx::query_scalar(
                    "SELECT pid::BIGINT FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
                )
                .bind(format!("shedlock listen {}", self.name))
                .fetch_all(pool)
                .await
                .unwrap()
            }
            Backend::Redis => {
                let address = host_port(&redis_url(), 6379);
                let reply = shedlock_suite::redis_server::command(
                    &address,
                    &["PUBSUB", "NUMSUB", &self.channel()],
                )
                .unwrap();
                let count = match reply.items().get(1) {
                    Some(shedlock_suite::redis_server::Reply::Int(n)) => *n,
                    _ => 0,
                };
                (0..count).collect()
            }
            _ => Vec::new(),
        }
    }

    /// The Redis channel a hand-off is announced on (apalis-redis's).
    fn channel(&self) -> String {
        format!("tasks:{}:active:available", self.name)
    }

    /// Waits until `pred` holds for [`Queue::listeners`]; whether it did within the deadline.
    async fn wait_listeners(&self, pred: impl Fn(&[i64]) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            if pred(&self.listeners().await) {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Cuts the workers' listening connections: `pg_terminate_backend` on PostgreSQL,
    /// `CLIENT KILL TYPE pubsub` on Redis (every subscriber of the server: the others listen
    /// again too).
    async fn cut_listeners(&self) {
        match self.backend {
            Backend::Postgres => {
                for pid in self.listeners().await {
                    sqlx::query("SELECT pg_terminate_backend($1::INT)")
                        .bind(pid)
                        .execute(self.pg.as_ref().unwrap())
                        .await
                        .unwrap();
                }
            }
            Backend::Redis => {
                let address = host_port(&redis_url(), 6379);
                shedlock_suite::redis_server::command(
                    &address,
                    &["CLIENT", "KILL", "TYPE", "pubsub"],
                )
                .unwrap();
            }
            _ => {}
        }
    }

    async fn cleanup(self) {
        match self.backend {
            Backend::Postgres => {
                let pool = self.pg.as_ref().unwrap();
                for sql in [
                    "DELETE FROM apalis.jobs WHERE job_type = $1",
                    "DELETE FROM apalis.workers WHERE worker_type = $1",
                ] {
                    let _ = sqlx::query(sql).bind(&self.name).execute(pool).await;
                }
            }
            Backend::Redis => shedlock_suite::redis_server::delete_keys(
                &host_port(&redis_url(), 6379),
                &format!("{}*", self.name),
            ),
            _ => {}
        }
        drop(self.dir);
    }
}

/// A worker running in this process.
struct Worker {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Worker {
    /// Stops it (a run in progress finishes) and checks it ended without an error.
    async fn stop(self) {
        let _ = self.stop.send(());
        let ended = tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .expect("the worker stops within 60 s")
            .expect("the worker's task did not panic");
        assert!(ended.is_ok(), "the worker ended with an error: {ended:?}");
    }
}

/// Waits (up to the deadline) for the start of the hand-off `key`; the worker that started it.
async fn started(events: &mut mpsc::UnboundedReceiver<Event>, key: &str) -> Option<String> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(Event::Started { worker, key: k })) if k == key => return Some(worker),
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => return None,
        }
    }
}

/// Waits (up to the deadline) until the hand-offs `keys` have all finished; who ran each.
async fn finished(
    events: &mut mpsc::UnboundedReceiver<Event>,
    keys: &[String],
) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut done = Vec::new();
    while done.len() < keys.len() {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Some(Event::Finished { worker, key })) if keys.contains(&key) => {
                done.push((worker, key));
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    done
}

/// One worker whose poll and heartbeat are a minute apart takes a hand-off within 15 s: the
/// queue's notification woke it (without it, the next look would be 45 s away at the
/// earliest). Then its listening connection is cut, and it takes the next within 15 s again,
/// once it listens again.
async fn notification_wakes_an_idle_worker(backend: Backend) {
    let Some(queue) = Queue::new(backend).await else {
        return;
    };
    let (tx, mut events) = mpsc::unbounded_channel();
    let worker = queue
        .worker("w", LONG, LONG, Duration::from_millis(10), tx)
        .await;
    assert!(
        queue.wait_listeners(|l| l.len() == 1).await,
        "{backend}: the worker listens within 15 s"
    );
    // The first hand-off may be taken by the look the worker takes when it starts listening.
    let first = queue.hand_off(1).await;
    assert!(
        started(&mut events, &first).await.is_some(),
        "{backend}: the first hand-off runs"
    );
    assert_eq!(finished(&mut events, &[first]).await.len(), 1);
    // Idle now, with no look for at least 45 s: only a notification starts the next in 15 s.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = queue.hand_off(2).await;
    assert!(
        started(&mut events, &second).await.is_some(),
        "{backend}: a hand-off enqueued while the worker idles starts within 15 s, though its poll and heartbeat are 60 s: the notification wakes it"
    );
    assert_eq!(finished(&mut events, &[second]).await.len(), 1);

    // The listening connection cut: the worker listens again, and is woken again.
    let before = queue.listeners().await;
    queue.cut_listeners().await;
    assert!(
        queue
            .wait_listeners(|now| now.len() == 1 && (backend == Backend::Redis || now != before))
            .await,
        "{backend}: the worker listens again within 15 s of its connection being cut"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let third = queue.hand_off(3).await;
    assert!(
        started(&mut events, &third).await.is_some(),
        "{backend}: after its listening connection was cut, the worker is woken by the next hand-off within 15 s"
    );
    worker.stop().await;
    queue.cleanup().await;
}

/// SQLite cannot notify another process: the worker's poll interval (100 ms here) is what has
/// it take a hand-off while its heartbeat is a minute away.
async fn the_poll_interval_drives_an_sqlite_worker(backend: Backend) {
    let Some(queue) = Queue::new(backend).await else {
        return;
    };
    let (tx, mut events) = mpsc::unbounded_channel();
    let worker = queue
        .worker(
            "w",
            LONG,
            Duration::from_millis(100),
            Duration::from_millis(10),
            tx,
        )
        .await;
    for n in 1..=3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let key = queue.hand_off(n).await;
        assert!(
            started(&mut events, &key).await.is_some(),
            "hand-off {n} starts within 15 s with a heartbeat of 60 s: the 100 ms poll finds it"
        );
    }
    worker.stop().await;
    queue.cleanup().await;
}

/// Asserts that each of the two workers ran at least one of `runs` and neither more than 70 %.
fn assert_shared(backend: Backend, what: &str, runs: &[(String, String)]) {
    let a = runs.iter().filter(|(w, _)| w == "a").count();
    let b = runs.len() - a;
    eprintln!("{backend}, {what}: worker a ran {a}, worker b {b}");
    assert!(
        a >= 1 && b >= 1,
        "{backend}, {what}: both workers ran hand-offs (a {a}, b {b})"
    );
    let most = a.max(b) as f64 / runs.len() as f64;
    assert!(
        most <= 0.7,
        "{backend}, {what}: neither worker takes more than 70 % (a {a}, b {b})"
    );
}

/// Two workers, 8 ticks of 3 hand-offs each (300 ms of work, a 100 ms poll): each worker runs
/// some, neither more than 70 %.
async fn two_workers_share_the_ticks(backend: Backend) {
    let Some(queue) = Queue::new(backend).await else {
        return;
    };
    let (tx, mut events) = mpsc::unbounded_channel();
    let poll = Duration::from_millis(100);
    let work = Duration::from_millis(300);
    let a = queue
        .worker("a", Duration::from_secs(1), poll, work, tx.clone())
        .await;
    let b = queue
        .worker("b", Duration::from_secs(1), poll, work, tx)
        .await;
    let mut runs = Vec::new();
    for tick in 0..8 {
        let mut keys = Vec::new();
        for job in 0..3 {
            keys.push(queue.hand_off(tick * 10 + job).await);
        }
        let done = finished(&mut events, &keys).await;
        assert_eq!(
            done.len(),
            3,
            "{backend}: tick {tick}'s 3 hand-offs ran within 15 s"
        );
        runs.extend(done);
    }
    a.stop().await;
    b.stop().await;
    assert_shared(backend, "8 ticks of 3 hand-offs", &runs);
    queue.cleanup().await;
}

/// Two idle workers woken by the same notification, one hand-off a tick, 20 ticks: the one
/// that took the last lets the other go first, so neither takes more than 70 % (before, one
/// took 80 % on PostgreSQL).
async fn two_woken_workers_take_turns(backend: Backend) {
    let Some(queue) = Queue::new(backend).await else {
        return;
    };
    let (tx, mut events) = mpsc::unbounded_channel();
    let work = Duration::from_millis(20);
    let a = queue.worker("a", LONG, LONG, work, tx.clone()).await;
    let b = queue.worker("b", LONG, LONG, work, tx).await;
    assert!(
        queue.wait_listeners(|l| l.len() == 2).await,
        "{backend}: both workers listen within 15 s"
    );
    let mut runs = Vec::new();
    for tick in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let key = queue.hand_off(tick).await;
        let done = finished(&mut events, std::slice::from_ref(&key)).await;
        assert_eq!(
            done.len(),
            1,
            "{backend}: tick {tick}'s hand-off ran within 15 s"
        );
        runs.extend(done);
    }
    a.stop().await;
    b.stop().await;
    assert_shared(backend, "20 ticks of 1 hand-off", &runs);
    queue.cleanup().await;
}

/// The environment variable that makes [`one_process_opening_the_queue`] open a queue (the
/// file it names); without it, that test does nothing.
const OPEN_QUEUE: &str = "SHEDLOCK_TEST_OPEN_QUEUE";
/// When it opens it, in ms since the epoch.
const OPEN_AT: &str = "SHEDLOCK_TEST_OPEN_AT";

/// Many processes opening a new queue file at the same moment all get a pool and a prepared
/// queue: the one that loses the race to switch the file to WAL is told `database is locked`
/// at once (no busy wait applies there), and `sqlite_queue_pool` tries again. (It failed a
/// worker of `faults`' `workers_started_together_all_come_up` in CI, where the harness opened
/// its pool with a plain `connect_with`.) The race is between processes (SQLite's file locks
/// are per process; tasks of one process do not meet it): 6 copies of this test binary, each
/// running [`one_process_opening_the_queue`], 20 new files in a row. Without the retry, about
/// one round in four fails.
#[test]
fn queue_pools_opened_together_on_a_new_file_all_open() {
    let binary = std::env::current_exe().unwrap();
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.db");
        // They all open at one moment, well after the last has started.
        let at = Utc::now().timestamp_millis() + 500;
        let children: Vec<_> = (0..6)
            .map(|_| {
                std::process::Command::new(&binary)
                    .args(["--exact", "one_process_opening_the_queue", "--nocapture"])
                    .env(OPEN_QUEUE, &path)
                    .env(OPEN_AT, at.to_string())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let failed: Vec<String> = children
            .into_iter()
            .map(|child| child.wait_with_output().unwrap())
            .filter(|out| !out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stderr).into_owned())
            .collect();
        assert!(failed.is_empty(), "round {round}: {failed:?}");
    }
}

/// One process of [`queue_pools_opened_together_on_a_new_file_all_open`]: opens the queue file
/// [`OPEN_QUEUE`] names at the moment [`OPEN_AT`] says, and prepares a queue in it, panicking
/// on an error.
#[tokio::test]
async fn one_process_opening_the_queue() {
    let Some(path) = std::env::var_os(OPEN_QUEUE) else {
        return;
    };
    let at: i64 = std::env::var(OPEN_AT).unwrap().parse().unwrap();
    let wait = at - Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(wait.max(0) as u64)).await;
    let pool = sqlite_queue_pool(&path)
        .await
        .unwrap_or_else(|e| panic!("opening the queue: {e}"));
    prepare_sqlite_queue(&pool, "together")
        .await
        .unwrap_or_else(|e| panic!("preparing the queue: {e}"));
    pool.close().await;
}

mod postgres {
    shedlock_suite::backend_tests!(in postgres: by backend super => [
        notification_wakes_an_idle_worker,
        two_workers_share_the_ticks,
        two_woken_workers_take_turns,
    ]);
}

mod redis {
    shedlock_suite::backend_tests!(in redis: by backend super => [
        notification_wakes_an_idle_worker,
        two_workers_share_the_ticks,
        two_woken_workers_take_turns,
    ]);
}

mod sqlite {
    shedlock_suite::backend_tests!(in sqlite: by backend super => [
        the_poll_interval_drives_an_sqlite_worker,
        two_workers_share_the_ticks,
    ]);
}
