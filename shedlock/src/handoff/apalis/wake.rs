//! How an idle worker learns that a hand-off is waiting: [`Wake`], the poll strategy of the
//! worker backends [`sqlite_worker`](super::sqlite_worker),
//! [`postgres_worker`](super::postgres_worker) and [`redis_worker`](super::redis_worker).
//!
//! An apalis storage on its own looks for new tasks only when something wakes its worker: a
//! task it ran ending, or its heartbeat (every 5 s with [`DEFAULT_HEARTBEAT`]), so a hand-off
//! could wait a whole heartbeat, and two workers started together looked in step, the one a
//! little ahead taking nearly every tick. [`Wake`] wakes the worker:
//!
//! - at once when the queue says a task was added: PostgreSQL's `NOTIFY` on apalis's channel
//!   (its trigger on `apalis.jobs` sends one per row inserted), Redis's `PUBLISH` on the queue's
//!   `available` channel (its push script sends one per task); a task of its own per worker
//!   keeps that `LISTEN`/`SUBSCRIBE` connection, and when it is lost, connects and listens
//!   again (after 250 ms, doubling to 10 s while it fails) and wakes the worker once it
//!   listens again, for what was added in between;
//! - every [`PollInterval`] (each wait drawn between 0.75 and 1.25 times it, so that two
//!   workers do not look in step): on SQLite, which has no notification between processes, the
//!   only way; on PostgreSQL and Redis the fallback, so a notification lost (the connection
//!   down, the server restarted) only delays a hand-off by up to the interval.
//!
//! A worker that took a hand-off since the previous notification lets the others go first on
//! the next one: it looks [`YIELD_TO_OTHERS`] later, so with two idle workers and one hand-off a
//! tick, they take turns rather than the quicker one taking every tick.
//!
//! A worker woken by a notification looks again [`FOLLOW_UPS`] later (100 ms, then 1 s), unless
//! it took a hand-off meanwhile: apalis's storage starts a look only when none is under way, so
//! a notification that arrives while a look that began before the hand-off was written is still
//! running is spent on that look, which cannot see it. Without the follow-ups, that hand-off
//! waited for the poll interval (a worker in a test with a poll of a minute missed one in about
//! 1 run of 24 when eight ran at once).
//!
//! [`DEFAULT_HEARTBEAT`]: super::DEFAULT_HEARTBEAT

use std::fmt;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use apalis_core::backend::ext::poll_strategy::{PollSnapshot, PollStrategy};
use tokio::sync::mpsc;
use tokio::time::Sleep;

use crate::{Error, Result};

/// How often an idle worker looks for a hand-off by itself (see [`Wake`]): on SQLite how long a
/// hand-off may wait (half of it on average), on PostgreSQL and Redis how long a lost
/// notification may delay one. Between [`PollInterval::MIN`] and [`PollInterval::MAX`];
/// [`PollInterval::DEFAULT`] is 500 ms.
///
/// ```
/// use shedlock::handoff::apalis::PollInterval;
/// let poll: PollInterval = "250ms".parse()?;
/// assert_eq!(poll.get(), std::time::Duration::from_millis(250));
/// assert!("0s".parse::<PollInterval>().is_err());
/// # Ok::<(), shedlock::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PollInterval(Duration);

impl PollInterval {
    /// 500 ms: a hand-off on SQLite starts about 250 ms after its tick on average; each idle
    /// worker runs two fetch queries a second.
    pub const DEFAULT: PollInterval = PollInterval(Duration::from_millis(500));
    /// The shortest interval accepted (10 ms): shorter is a busy loop against the database.
    pub const MIN: Duration = Duration::from_millis(10);
    /// The longest interval accepted (10 minutes).
    pub const MAX: Duration = Duration::from_secs(600);

    /// `interval`, if it is between [`PollInterval::MIN`] and [`PollInterval::MAX`];
    /// otherwise [`Error::InvalidWorkerSetting`] saying which bound it crosses.
    pub fn new(interval: Duration) -> Result<Self> {
        let shown = humantime::format_duration(interval);
        if interval < Self::MIN {
            return Err(Error::InvalidWorkerSetting {
                setting: "poll_interval",
                reason: format!(
                    "{shown} is shorter than {} (a worker would query the queue in a busy loop); \
                     on PostgreSQL and Redis a notification wakes the worker, this is only the fallback",
                    humantime::format_duration(Self::MIN)
                ),
            });
        }
        if interval > Self::MAX {
            return Err(Error::InvalidWorkerSetting {
                setting: "poll_interval",
                reason: format!(
                    "{shown} is longer than {} (on SQLite a hand-off would wait that long)",
                    humantime::format_duration(Self::MAX)
                ),
            });
        }
        Ok(Self(interval))
    }

    /// The interval.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl Default for PollInterval {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Display for PollInterval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl FromStr for PollInterval {
    type Err = Error;

    /// A duration as `humantime` reads it (`500ms`, `2s`), then [`PollInterval::new`].
    fn from_str(text: &str) -> Result<Self> {
        let interval =
            humantime::parse_duration(text.trim()).map_err(|e| Error::InvalidWorkerSetting {
                setting: "poll_interval",
                reason: format!("{text:?} is not a duration such as 500ms or 2s: {e}"),
            })?;
        Self::new(interval)
    }
}

/// How much later a worker that took a hand-off since the previous notification looks on the
/// next one: 5 ms, a head start for the others (when they are busy, the hand-off starts 5 ms
/// later). Without it, Redis, which delivers a message to its subscribers in the order they
/// subscribed, gave one of two workers 67 % of 60 one-hand-off ticks; with it, 50 %.
pub const YIELD_TO_OTHERS: Duration = Duration::from_millis(5);

/// When a worker woken by a notification looks again, after the notification, unless it took a
/// hand-off meanwhile (see [the module](self)): each a look that surely begins after the
/// hand-off was written, when the look the notification woke may have begun before.
pub const FOLLOW_UPS: [Duration; 2] = [Duration::from_millis(100), Duration::from_secs(1)];

/// The first pause before listening again after the `LISTEN`/`SUBSCRIBE` connection failed,
/// and the longest (doubling in between).
const RELISTEN_FIRST: Duration = Duration::from_millis(250);
const RELISTEN_MAX: Duration = Duration::from_secs(10);

/// A poll strategy (apalis's [`PollStrategy`]) that wakes a worker when its queue notifies a
/// new task, and every [`PollInterval`] (see [the module](self)).
pub struct Wake {
    poll: PollInterval,
    timer: Option<Pin<Box<Sleep>>>,
    /// A notification for this worker's queue, from its listening task; `None`: SQLite, or the
    /// task ended.
    notified: Option<mpsc::Receiver<()>>,
    /// What the worker listens to (`None`: it only polls).
    listens: Option<&'static str>,
    /// Set when the worker took a hand-off; the listening task reads and clears it.
    took: Arc<AtomicBool>,
    /// Tasks the worker had taken at the previous poll.
    taken: u64,
    /// The next follow-up look after a notification, and which of [`FOLLOW_UPS`] it is.
    follow_up: Option<(Pin<Box<Sleep>>, usize)>,
}

impl fmt::Debug for Wake {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wake")
            .field("poll_interval", &self.poll)
            .field("listens", &self.listens)
            .finish_non_exhaustive()
    }
}

impl Wake {
    /// A strategy that only polls, every `poll` (SQLite).
    pub fn polling(poll: PollInterval) -> Self {
        Self {
            poll,
            timer: None,
            notified: None,
            listens: None,
            took: Arc::new(AtomicBool::new(false)),
            taken: 0,
            follow_up: None,
        }
    }

    /// The poll interval.
    pub fn poll_interval(&self) -> Duration {
        self.poll.get()
    }

    /// What wakes the worker besides the poll: `Some("PostgreSQL LISTEN")`,
    /// `Some("Redis SUBSCRIBE")`, or `None`.
    pub fn listens(&self) -> Option<&'static str> {
        self.listens
    }

    /// A strategy woken by `listen` (a future that sends on the channel it is given, once per
    /// notification, and runs until the channel closes) and by the poll. Needs a tokio runtime.
    fn listening<F, Fut>(poll: PollInterval, what: &'static str, listen: F) -> Result<Self>
    where
        F: FnOnce(Notifier) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::HandOff {
            job: String::new(),
            reason: format!(
                "a worker woken by {what} starts its listening task on a tokio runtime: build it inside one"
            ),
        })?;
        // One pending notification is enough: the worker fetches everything waiting anyway.
        let (tx, rx) = mpsc::channel(1);
        let took = Arc::new(AtomicBool::new(false));
        let notifier = Notifier {
            tx: tx.clone(),
            took: Arc::clone(&took),
        };
        let listen = listen(notifier);
        runtime.spawn(async move {
            // Ends with the worker: its strategy, the receiver, dropped.
            tokio::select! {
                () = tx.closed() => {}
                () = listen => {}
            }
        });
        Ok(Self {
            poll,
            timer: None,
            notified: Some(rx),
            listens: Some(what),
            took,
            taken: 0,
            follow_up: None,
        })
    }

    /// The next wait: the interval times a factor drawn between 0.75 and 1.25.
    fn next_wait(&self) -> Duration {
        self.poll.get().mul_f64(0.75 + 0.5 * random_unit())
    }
}

impl PollStrategy for Wake {
    fn poll_drive(&mut self, cx: &mut Context<'_>, _: &PollSnapshot) -> Poll<Option<()>> {
        // Every source is polled until it is pending, so each has the waker registered.
        let mut ready = false;
        if let Some(notified) = &mut self.notified {
            loop {
                match notified.poll_recv(cx) {
                    Poll::Ready(Some(())) => {
                        ready = true;
                        let first = FOLLOW_UPS[0];
                        self.follow_up = Some((Box::pin(tokio::time::sleep(first)), 0));
                    }
                    Poll::Ready(None) => {
                        self.notified = None;
                        break;
                    }
                    Poll::Pending => break,
                }
            }
        }
        while let Some((timer, index)) = &mut self.follow_up {
            if timer.as_mut().poll(cx).is_pending() {
                break;
            }
            ready = true;
            let next = *index + 1;
            self.follow_up = FOLLOW_UPS.get(next).map(|wait| {
                (
                    Box::pin(tokio::time::sleep(*wait - FOLLOW_UPS[next - 1])),
                    next,
                )
            });
        }
        loop {
            if self.timer.is_none() {
                self.timer = Some(Box::pin(tokio::time::sleep(self.next_wait())));
            }
            let Some(timer) = &mut self.timer else {
                break;
            };
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    ready = true;
                    self.timer = None;
                }
                Poll::Pending => break,
            }
        }
        if ready {
            Poll::Ready(Some(()))
        } else {
            Poll::Pending
        }
    }

    fn on_poll(&mut self, snapshot: &PollSnapshot) {
        if snapshot.total_ready > self.taken {
            self.taken = snapshot.total_ready;
            self.took.store(true, Ordering::Release);
            // It took one: it looks again when that run ends, no follow-up needed.
            self.follow_up = None;
        }
    }
}

/// The listening task's side of [`Wake`].
struct Notifier {
    tx: mpsc::Sender<()>,
    took: Arc<AtomicBool>,
}

impl Notifier {
    /// A task was added: wake the worker (after [`YIELD_TO_OTHERS`] when it took the previous
    /// hand-off).
    async fn added(&self) {
        if self.took.swap(false, Ordering::AcqRel) {
            tokio::time::sleep(YIELD_TO_OTHERS).await;
        }
        self.wake();
    }

    /// Wakes the worker now (it listens again: what was added meanwhile).
    fn wake(&self) {
        // Full: a wake-up is already pending, which is all that is needed.
        let _ = self.tx.try_send(());
    }
}

/// Pauses before listening again: `pause`, doubled for the next time up to [`RELISTEN_MAX`].
async fn pause_before_relisten(pause: &mut Duration) {
    tokio::time::sleep(*pause).await;
    *pause = (*pause * 2).min(RELISTEN_MAX);
}

/// A number drawn uniformly in [0, 1) (from the standard library's randomly keyed hasher; no
/// need for more here).
fn random_unit() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(feature = "apalis-postgres")]
pub(super) use self::postgres::listening_postgres;

#[cfg(feature = "apalis-postgres")]
mod postgres {
    use super::*;
    use sqlx::PgPool;
    use sqlx::postgres::{PgListener, PgPoolOptions};

    /// The channel apalis-postgres's trigger on `apalis.jobs` notifies (`apalis.notify_new_jobs`:
    /// a JSON `{"job_type", "id", "run_at"}` per row inserted whose `run_at` has come).
    const CHANNEL: &str = "apalis::job::insert";

    /// The part of the notification read: the queue.
    #[derive(serde::Deserialize)]
    struct Inserted {
        job_type: String,
    }

    /// [`Wake`] for a PostgreSQL queue: `LISTEN` on a connection of its own (opened with the
    /// options of `pool`, named `shedlock listen <queue>` in `pg_stat_activity`).
    pub(crate) fn listening_postgres(
        pool: &PgPool,
        queue: &str,
        poll: PollInterval,
    ) -> Result<Wake> {
        let options = (*pool.connect_options())
            .clone()
            .application_name(&format!("shedlock listen {queue}"));
        // The listener holds its connection for good: no lifetime, no idle timeout.
        let listen_pool = PgPoolOptions::new()
            .max_connections(1)
            .min_connections(0)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(Duration::from_secs(10))
            .connect_lazy_with(options);
        let queue = queue.to_owned();
        Wake::listening(poll, "PostgreSQL LISTEN", move |notifier| {
            listen(listen_pool, queue, poll, notifier)
        })
    }

    /// `LISTEN`s until the worker is dropped, again after every failure, and wakes the worker
    /// each time it listens again (for what was added in between).
    ///
    /// A lost connection is listened on again here, with a connection of its own, not by
    /// sqlx's `PgListener` (whose `try_recv` returns `None` on a lost connection and listens
    /// again only inside its next call): a wake-up given at the `None` would come before the
    /// new `LISTEN`, and a hand-off added between the two would wait for the poll.
    async fn listen(pool: PgPool, queue: String, poll: PollInterval, notifier: Notifier) {
        let mut pause = RELISTEN_FIRST;
        loop {
            let failure = match listener(&pool).await {
                Ok(mut listener) => {
                    pause = RELISTEN_FIRST;
                    tracing::debug!(queue, "the worker listens for new hand-offs");
                    notifier.wake();
                    loop {
                        match listener.try_recv().await {
                            Ok(Some(notification)) => {
                                let ours = serde_json::from_str::<Inserted>(notification.payload())
                                    .is_ok_and(|n| n.job_type == queue);
                                if ours {
                                    notifier.added().await;
                                }
                            }
                            Ok(None) => break "the connection was lost".to_owned(),
                            Err(error) => break error.to_string(),
                        }
                    }
                }
                Err(error) => error.to_string(),
            };
            tracing::warn!(queue, error = %failure, poll_interval = %poll, retry_in = ?pause,
                "the worker cannot LISTEN for new hand-offs: it polls every poll_interval until it listens again");
            pause_before_relisten(&mut pause).await;
        }
    }

    async fn listener(pool: &PgPool) -> std::result::Result<PgListener, sqlx::Error> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        Ok(listener)
    }
}

#[cfg(feature = "apalis-redis")]
pub(super) use self::redis::{listening_redis, redis_channel};

#[cfg(feature = "apalis-redis")]
mod redis {
    use super::*;
    use futures_util::StreamExt;

    /// The channel a Redis queue's new tasks are announced on: apalis-redis's
    /// (`tasks:<queue>:active:available`), which [`RedisTickQueue`] publishes to after each
    /// hand-off it enqueues (apalis-redis 1.0.0's own push does not: it files every task as
    /// scheduled).
    ///
    /// [`RedisTickQueue`]: super::super::RedisTickQueue
    pub(crate) fn redis_channel(config: &apalis_redis::Config) -> String {
        format!("tasks:{}:available", config.active_jobs_list())
    }

    /// [`Wake`] for a Redis queue: `SUBSCRIBE` to [`redis_channel`], on a connection of its own
    /// to `client`'s server.
    pub(crate) fn listening_redis(
        client: ::redis::Client,
        config: &apalis_redis::Config,
        poll: PollInterval,
    ) -> Result<Wake> {
        let channel = redis_channel(config);
        let queue = config.queue.to_string();
        Wake::listening(poll, "Redis SUBSCRIBE", move |notifier| {
            listen(client, channel, queue, poll, notifier)
        })
    }

    /// `SUBSCRIBE`s until the worker is dropped, again after every failure.
    async fn listen(
        client: ::redis::Client,
        channel: String,
        queue: String,
        poll: PollInterval,
        notifier: Notifier,
    ) {
        let mut pause = RELISTEN_FIRST;
        loop {
            let failure = match subscribed(&client, &channel).await {
                Ok(pubsub) => {
                    pause = RELISTEN_FIRST;
                    tracing::debug!(queue, "the worker listens for new hand-offs");
                    notifier.wake();
                    let mut messages = pubsub.into_on_message();
                    while messages.next().await.is_some() {
                        notifier.added().await;
                    }
                    "the connection was closed".to_owned()
                }
                Err(error) => error.to_string(),
            };
            tracing::warn!(queue, error = %failure, poll_interval = %poll, retry_in = ?pause,
                "the worker cannot SUBSCRIBE to new hand-offs: it polls every poll_interval until it listens again");
            pause_before_relisten(&mut pause).await;
        }
    }

    async fn subscribed(
        client: &::redis::Client,
        channel: &str,
    ) -> ::redis::RedisResult<::redis::aio::PubSub> {
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok(pubsub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_interval_bounds() {
        assert_eq!(PollInterval::default().get(), Duration::from_millis(500));
        assert!(PollInterval::new(Duration::ZERO).is_err());
        assert!(PollInterval::new(Duration::from_millis(9)).is_err());
        assert!(PollInterval::new(PollInterval::MIN).is_ok());
        assert!(PollInterval::new(PollInterval::MAX).is_ok());
        assert!(PollInterval::new(PollInterval::MAX + Duration::from_millis(1)).is_err());
        let error = "0s".parse::<PollInterval>().unwrap_err().to_string();
        assert!(
            error.contains("poll_interval") && error.contains("shorter than 10ms"),
            "{error}"
        );
        let error = "1h".parse::<PollInterval>().unwrap_err().to_string();
        assert!(error.contains("longer than 10m"), "{error}");
        let error = "soon".parse::<PollInterval>().unwrap_err().to_string();
        assert!(error.contains("\"soon\" is not a duration"), "{error}");
        assert_eq!(
            "250ms".parse::<PollInterval>().unwrap().get(),
            Duration::from_millis(250)
        );
    }

    #[test]
    fn random_unit_is_in_range_and_varies() {
        let draws: Vec<f64> = (0..1000).map(|_| random_unit()).collect();
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
        let low = draws.iter().filter(|u| **u < 0.5).count();
        assert!((300..700).contains(&low), "{low} of 1000 below 0.5");
    }

    /// Whether `wake` is ready now (polled once, as apalis's `PollWith` does before each look).
    fn ready_now(wake: &mut Wake) -> bool {
        let snapshot = PollSnapshot::default();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        wake.poll_drive(&mut cx, &snapshot).is_ready()
    }

    /// A notification wakes the worker at once, then again 100 ms and 1 s later (a look that
    /// surely began after the hand-off was written), then only the poll: on tokio's paused
    /// clock, so no real time passes.
    #[tokio::test(start_paused = true)]
    async fn a_notification_is_followed_by_two_more_looks() {
        let mut wake = Wake::polling(PollInterval::new(Duration::from_secs(60)).unwrap());
        let (tx, rx) = mpsc::channel(1);
        wake.notified = Some(rx);
        assert!(!ready_now(&mut wake), "nothing yet");
        tx.try_send(()).unwrap();
        assert!(ready_now(&mut wake), "the notification wakes it");
        assert!(!ready_now(&mut wake), "once");
        tokio::time::advance(FOLLOW_UPS[0] - Duration::from_millis(1)).await;
        assert!(!ready_now(&mut wake), "not before the first follow-up");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(ready_now(&mut wake), "the first follow-up");
        assert!(!ready_now(&mut wake), "once");
        tokio::time::advance(FOLLOW_UPS[1] - FOLLOW_UPS[0] - Duration::from_millis(1)).await;
        assert!(!ready_now(&mut wake), "not before the second follow-up");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(ready_now(&mut wake), "the second follow-up");
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(
            !ready_now(&mut wake),
            "no third: the poll, 45 s at the earliest, is next"
        );
    }

    /// A worker that took a hand-off after the notification gets no follow-up look.
    #[tokio::test(start_paused = true)]
    async fn a_hand_off_taken_cancels_the_follow_ups() {
        let mut wake = Wake::polling(PollInterval::new(Duration::from_secs(60)).unwrap());
        let (tx, rx) = mpsc::channel(1);
        wake.notified = Some(rx);
        tx.try_send(()).unwrap();
        assert!(ready_now(&mut wake));
        wake.on_poll(&PollSnapshot {
            total_ready: 1,
            ..PollSnapshot::default()
        });
        tokio::time::advance(Duration::from_secs(40)).await;
        assert!(
            !ready_now(&mut wake),
            "no follow-up after a hand-off was taken"
        );
    }

    /// The poll fires after the configured interval (between 0.75 and 1.25 times it), not
    /// before: on tokio's paused clock, so no real time passes.
    #[tokio::test(start_paused = true)]
    async fn the_poll_interval_times_the_wake_ups() {
        let poll = PollInterval::new(Duration::from_secs(60)).unwrap();
        let mut wake = Wake::polling(poll);
        assert_eq!(wake.poll_interval(), Duration::from_secs(60));
        assert_eq!(wake.listens(), None);
        let snapshot = PollSnapshot::default();
        for _ in 0..20 {
            let started = tokio::time::Instant::now();
            // Pending, with a timer, until 45 s have passed.
            std::future::poll_fn(|cx| {
                assert!(wake.poll_drive(cx, &snapshot).is_pending());
                Poll::Ready(())
            })
            .await;
            tokio::time::advance(Duration::from_secs(44)).await;
            std::future::poll_fn(|cx| {
                assert!(
                    wake.poll_drive(cx, &snapshot).is_pending(),
                    "woken before 0.75 × 60 s"
                );
                Poll::Ready(())
            })
            .await;
            // Woken by 75 s.
            std::future::poll_fn(|cx| wake.poll_drive(cx, &snapshot)).await;
            let waited = started.elapsed();
            assert!(
                waited >= Duration::from_secs(45) && waited <= Duration::from_secs(75),
                "woken after {waited:?}"
            );
        }
    }
}
