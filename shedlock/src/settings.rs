//! Provider settings shared by every backend: table name, `locked_by`, clock, keep-alive, and
//! the builder that sets them ([`ProviderBuilder`]); and the limits every setting and every
//! [`LockConfiguration`](crate::LockConfiguration) is held to ([`MAX_NAME_BYTES`],
//! [`MAX_LOCK_DURATION`], [`DURATION_RESOLUTION`], [`MAX_TABLE_NAME_BYTES`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::future::BoxFuture;

use crate::config::round_up_to_millis;
// A lock configuration's limits, public here beside the settings' own.
pub use crate::config::{DURATION_RESOLUTION, MAX_LOCK_DURATION, MAX_NAME_BYTES, is_hidden_char};
// Which backend a database URL names: the one rule of every front end.
use crate::error::{Error, Result};
use crate::schedules::ScheduleLimits;
pub use crate::sql::url::backend_of_url;

/// The default lock table name.
pub const DEFAULT_TABLE_NAME: &str = "shedlock";

/// How far ahead of the database clock a claimed tick may be by default: 1 second.
///
/// The scheduler fires each tick when the database's clock reaches it (it measures its offset to
/// that clock), so its ticks arrive a few milliseconds late, never early. A tick further ahead
/// than the tolerance comes from a clock that runs ahead; the acquire refuses it
/// ([`Error::TickInFuture`]) instead of claiming it, so one fast clock cannot claim future ticks
/// and block every other instance until then. Set another with
/// [`ProviderBuilder::tick_tolerance`].
pub const DEFAULT_TICK_TOLERANCE: Duration = Duration::from_secs(1);

/// The longest table name accepted, in bytes (leaves room for the `_<table>_migrations` history
/// table within PostgreSQL's 63-byte identifier limit).
pub const MAX_TABLE_NAME_BYTES: usize = 48;

/// Environment variables read, in order, for the default `locked_by`.
pub const LOCKED_BY_ENV: [&str; 2] = ["SHEDLOCK_LOCKED_BY", "POD_NAME"];

const MAX_LOCKED_BY_CHARS: usize = 255;

/// Which clock decides when a lock expires.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum ClockMode {
    /// The database server's clock (`clock_timestamp()`, `UTC_TIMESTAMP(6)`,
    /// `unixepoch('subsec')`): instances' own clocks may drift without effect. The default.
    #[default]
    Database,
    /// Each instance's own clock, this one, passed as a parameter. Only safe when every
    /// instance's clock agrees to well within `lock_at_least_for`; an instance whose clock runs
    /// ahead takes locks that others still hold. Opt in only when the database clock cannot be
    /// used.
    Application(AppClock),
}

impl ClockMode {
    /// [`Application`](Self::Application) with the system clock.
    pub fn application() -> Self {
        Self::Application(AppClock::system())
    }
}

/// An instance's own clock, for [`ClockMode::Application`].
#[derive(Clone)]
pub struct AppClock(Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>);

impl AppClock {
    /// The system clock, [`Utc::now`].
    pub fn system() -> Self {
        Self(Arc::new(Utc::now))
    }

    /// Any clock.
    pub fn custom(now: impl Fn() -> DateTime<Utc> + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    /// The current time by this clock.
    pub fn now(&self) -> DateTime<Utc> {
        (self.0)()
    }
}

impl fmt::Debug for AppClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AppClock").field(&self.now()).finish()
    }
}

impl Default for AppClock {
    fn default() -> Self {
        Self::system()
    }
}

/// What happens to a job whose lock could not be kept alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnLockLost {
    /// Stop the job: its future is dropped and the call returns [`Error::LockLost`]. The default.
    #[default]
    Cancel,
    /// Let the job run on; it learns of the loss through
    /// [`LockContext::is_lost`](crate::LockContext::is_lost).
    Notify,
}

/// Keep-alive: while a job runs under a lock, the lock is extended every `interval` to
/// `now + lease`, so a long job keeps its lock and a crashed holder releases it after one lease.
///
/// On by default, with `lease = lock_at_most_for` and `interval = lease / 3`. When an extension
/// is refused (someone else holds the lock now) or the lease runs out without a successful
/// extension (the database is unreachable), the lock is lost: the job is told through
/// [`LockContext`](crate::LockContext) and, by default, cancelled.
///
/// With keep-alive on, `lock_at_most_for` bounds each lease, not the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepAlive {
    enabled: bool,
    lease: Option<Duration>,
    interval: Option<Duration>,
    on_lost: OnLockLost,
}

impl Default for KeepAlive {
    fn default() -> Self {
        Self {
            enabled: true,
            lease: None,
            interval: None,
            on_lost: OnLockLost::Cancel,
        }
    }
}

impl KeepAlive {
    /// No keep-alive: the lock expires at `lock_at_most_for` however long the job runs.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            ..Self::default()
        }
    }

    /// Hold locks on a lease of `lease` (shorter than `lock_at_most_for`), renewed every
    /// `lease / 3`: a holder that dies releases its lock after at most `lease`.
    ///
    /// The lease is rounded up to whole milliseconds, like every lock duration
    /// ([`DURATION_RESOLUTION`]).
    pub fn lease(lease: Duration) -> Result<Self> {
        if lease.is_zero() {
            return Err(Error::InvalidKeepAlive(
                "the lease must be greater than zero".into(),
            ));
        }
        if lease > crate::config::MAX_LOCK_DURATION {
            return Err(Error::InvalidKeepAlive(format!(
                "the lease ({}) is longer than the limit of 1000 years",
                humantime::format_duration(lease)
            )));
        }
        Ok(Self {
            lease: Some(round_up_to_millis(lease)),
            ..Self::default()
        })
    }

    /// Renew every `interval` instead of every third of the lease. It must be shorter than the
    /// lease; where it is not (a lease taken from a short `lock_at_most_for`), a third of the
    /// lease is used instead.
    pub fn interval(mut self, interval: Duration) -> Result<Self> {
        if interval.is_zero() {
            return Err(Error::InvalidKeepAlive(
                "the interval must be greater than zero".into(),
            ));
        }
        if let Some(lease) = self.lease.filter(|lease| interval >= *lease) {
            return Err(Error::InvalidKeepAlive(format!(
                "interval ({}) must be shorter than the lease ({}), or the lock lapses between renewals",
                humantime::format_duration(interval),
                humantime::format_duration(lease)
            )));
        }
        self.interval = Some(interval);
        Ok(self)
    }

    /// What to do with a job whose lock was lost (default: cancel it).
    pub fn on_lost(mut self, on_lost: OnLockLost) -> Self {
        self.on_lost = on_lost;
        self
    }

    /// Whether keep-alive is on.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// What happens when the lock is lost.
    pub fn on_lock_lost(&self) -> OnLockLost {
        self.on_lost
    }

    /// The lease for a lock held at most `lock_at_most_for` and at least `lock_at_least_for`:
    /// the configured lease, kept between the two.
    ///
    /// Never panics: with durations that contradict each other (`lock_at_least_for` longer than
    /// `lock_at_most_for`, which a [`LockConfiguration`](crate::LockConfiguration) cannot hold),
    /// `lock_at_most_for` wins; the result is at least 1 ms and a whole number of milliseconds.
    pub fn lease_for(&self, lock_at_most_for: Duration, lock_at_least_for: Duration) -> Duration {
        let at_most = round_up_to_millis(lock_at_most_for).max(Duration::from_millis(1));
        let at_least = round_up_to_millis(lock_at_least_for).min(at_most);
        round_up_to_millis(self.lease.unwrap_or(at_most))
            .clamp(at_least.max(Duration::from_millis(1)), at_most)
    }

    /// How often a lock on `lease` is renewed.
    pub fn interval_for(&self, lease: Duration) -> Duration {
        self.interval
            .filter(|interval| *interval < lease)
            .unwrap_or(lease / 3)
            .max(Duration::from_millis(1))
    }
}

/// The `locked_by` value used when none is set: `$SHEDLOCK_LOCKED_BY` verbatim if set, else
/// `$POD_NAME:<pid>` if set, else `<host name>:<pid>`; at most 255 characters.
pub fn default_locked_by() -> String {
    default_locked_by_from(|key| std::env::var(key).ok())
}

fn default_locked_by_from(env: impl Fn(&str) -> Option<String>) -> String {
    let pid = std::process::id();
    let non_empty = |key: &str| env(key).filter(|v| !v.trim().is_empty());
    let value = if let Some(v) = non_empty(LOCKED_BY_ENV[0]) {
        v
    } else if let Some(pod) = non_empty(LOCKED_BY_ENV[1]) {
        format!("{pod}:{pid}")
    } else {
        format!("{}:{pid}", gethostname::gethostname().to_string_lossy())
    };
    value.chars().take(MAX_LOCKED_BY_CHARS).collect()
}

fn validate_locked_by(value: String) -> Result<String> {
    let refuse = |reason| {
        Err(Error::InvalidLockedBy {
            value: value.clone(),
            reason,
        })
    };
    if value.trim().is_empty() {
        return refuse("it is empty");
    }
    if value.chars().count() > MAX_LOCKED_BY_CHARS {
        return refuse("it is longer than 255 characters");
    }
    if value.contains('\0') {
        return refuse("it contains a NUL character");
    }
    Ok(value)
}

fn validate_tick_tolerance(tolerance: Duration) -> Result<Duration> {
    if tolerance > crate::config::MAX_LOCK_DURATION {
        return Err(Error::InvalidTickTolerance(format!(
            "{} is longer than the limit of 1000 years",
            humantime::format_duration(tolerance)
        )));
    }
    Ok(round_up_to_millis(tolerance))
}

/// The settings every provider shares, whatever its store, as [`ProviderBuilder`] validated
/// them. A provider written outside this crate gets them from
/// [`ProviderBuilder::into_parts`] (or in [`Connect::connect`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProviderSettings {
    /// Where the locks live, as given to [`ProviderBuilder::table_name`] (default
    /// [`DEFAULT_TABLE_NAME`]): the lock table of an SQL database, the key prefix of Redis.
    /// Each backend checks it for its store and refuses it as [`Error::InvalidTableName`].
    pub table: String,
    /// Who takes the locks (checked: not empty, at most 255 characters, no NUL).
    pub locked_by: String,
    /// Which clock decides expiry.
    pub clock_mode: ClockMode,
    /// Keep-alive for the locks of `run_locked` and the scheduler.
    pub keep_alive: KeepAlive,
    /// How far ahead of the store's clock a claimed tick may be (rounded up to whole
    /// milliseconds, at most 1000 years).
    pub tick_tolerance: Duration,
    /// The bounds of the run-time jobs the store keeps (its [`ScheduleStore`], where it has
    /// one): a payload's size and how many.
    ///
    /// [`ScheduleStore`]: crate::schedules::ScheduleStore
    pub schedule_limits: ScheduleLimits,
}

impl ProviderSettings {
    /// The application's time in [`ClockMode::Application`], to send with a statement; `None`
    /// when the store's clock decides.
    pub fn app_now(&self) -> Option<DateTime<Utc>> {
        match &self.clock_mode {
            ClockMode::Database => None,
            ClockMode::Application(clock) => Some(clock.now()),
        }
    }
}

impl Default for ProviderSettings {
    /// Table [`DEFAULT_TABLE_NAME`], [`default_locked_by`], the store's clock, keep-alive on,
    /// [`DEFAULT_TICK_TOLERANCE`].
    fn default() -> Self {
        Self {
            table: DEFAULT_TABLE_NAME.into(),
            locked_by: default_locked_by(),
            clock_mode: ClockMode::Database,
            keep_alive: KeepAlive::default(),
            tick_tolerance: DEFAULT_TICK_TOLERANCE,
            schedule_limits: ScheduleLimits::default(),
        }
    }
}

/// Builds a lock provider: the settings every backend shares are set here, once for all of
/// them; what only one backend has lives in `B`, the backend's part (an SQL pool, a Redis URL),
/// with its own methods on `ProviderBuilder<B>` ([`hold_connections`](Self::hold_connections)
/// for a pool). `build()` validates every setting.
///
/// ```no_run
/// # #[cfg(feature = "postgres")]
/// # async fn demo(pool: sqlx::PgPool) -> shedlock::Result<()> {
/// use shedlock::PostgresLockProvider;
///
/// let provider = PostgresLockProvider::builder(pool)
///     .table_name("scheduler_locks")
///     .locked_by("reports-worker-1")
///     .build()?;
/// # Ok(()) }
/// ```
///
/// A provider written outside this crate starts one with [`new`](Self::new) around its own
/// backend part and either implements [`Connect`] for that part (then `build().await` exists)
/// or calls [`into_parts`](Self::into_parts) itself.
#[derive(Debug)]
#[must_use = "call .build() to get the provider"]
pub struct ProviderBuilder<B> {
    pub(crate) backend: B,
    table: String,
    locked_by: Option<String>,
    clock_mode: ClockMode,
    keep_alive: KeepAlive,
    tick_tolerance: Duration,
    schedule_limits: ScheduleLimits,
}

impl<B> ProviderBuilder<B> {
    /// A builder with default settings around the backend's part.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            table: DEFAULT_TABLE_NAME.into(),
            locked_by: None,
            clock_mode: ClockMode::Database,
            keep_alive: KeepAlive::default(),
            tick_tolerance: DEFAULT_TICK_TOLERANCE,
            schedule_limits: ScheduleLimits::default(),
        }
    }

    /// The largest payload of a run-time job the provider's schedule store writes, in bytes
    /// (default [`DEFAULT_MAX_PAYLOAD_BYTES`](crate::schedules::DEFAULT_MAX_PAYLOAD_BYTES),
    /// 64 KiB). A longer one is refused as [`Error::InvalidSchedule`] naming the cap; what is
    /// stored already stays readable.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.schedule_limits.max_payload_bytes = bytes;
        self
    }

    /// The most live run-time schedules the provider's schedule store holds (default
    /// [`DEFAULT_MAX_RUN_TIME_SCHEDULES`](crate::schedules::DEFAULT_MAX_RUN_TIME_SCHEDULES),
    /// 100,000): a create past it is refused as [`Error::TooManySchedules`]. Overrides of
    /// code-defined jobs do not count. Set it on every instance that creates jobs.
    pub fn max_run_time_schedules(mut self, schedules: usize) -> Self {
        self.schedule_limits.max_run_time_schedules = schedules;
        self
    }

    /// How far ahead of the database clock a claimed tick may be (default
    /// [`DEFAULT_TICK_TOLERANCE`], 1 s; rounded up to whole milliseconds). An acquire for a tick
    /// further ahead is refused in the same statement, as [`Error::TickInFuture`], and claims
    /// nothing. A long tolerance gives back what it protects: an instance whose clock runs that
    /// far ahead claims ticks that early, and every other instance waits for them.
    pub fn tick_tolerance(mut self, tolerance: Duration) -> Self {
        self.tick_tolerance = tolerance;
        self
    }

    /// Where the locks live (default `shedlock`). For an SQL database the lock table: an SQL
    /// identifier, optionally `schema.table`. For Redis the key prefix: keys are
    /// `{<prefix>}:lock:<name>` (letters, digits, `_ - . : /`, at most 48 bytes). Anything
    /// else is refused by `build()` as [`Error::InvalidTableName`].
    pub fn table_name(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Who holds the lock, as shown in the `locked_by` column (default: [`default_locked_by`]).
    pub fn locked_by(mut self, locked_by: impl Into<String>) -> Self {
        self.locked_by = Some(locked_by.into());
        self
    }

    /// Which clock decides expiry (default [`ClockMode::Database`]).
    pub fn clock_mode(mut self, mode: ClockMode) -> Self {
        self.clock_mode = mode;
        self
    }

    /// Keep-alive settings (default: on, lease `lock_at_most_for`, renewed every third).
    pub fn keep_alive(mut self, keep_alive: KeepAlive) -> Self {
        self.keep_alive = keep_alive;
        self
    }

    /// The backend's part, for a provider's own setters (a provider written outside this crate
    /// adds them through a trait of its own).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// The backend's part and the shared settings, `locked_by` and the tick tolerance checked
    /// (the table name is the backend's to check).
    pub fn into_parts(self) -> Result<(B, ProviderSettings)> {
        let locked_by = validate_locked_by(self.locked_by.unwrap_or_else(default_locked_by))?;
        let tick_tolerance = validate_tick_tolerance(self.tick_tolerance)?;
        Ok((
            self.backend,
            ProviderSettings {
                table: self.table,
                locked_by,
                clock_mode: self.clock_mode,
                keep_alive: self.keep_alive,
                tick_tolerance,
                schedule_limits: self.schedule_limits,
            },
        ))
    }
}

/// How a backend's part of a [`ProviderBuilder`] becomes a provider, for providers whose
/// `build()` connects (Redis): with it, `ProviderBuilder<B>::build().await` exists.
pub trait Connect {
    /// The provider built.
    type Provider;

    /// Connects with the validated `settings`, checking what only this backend checks (its
    /// table name or key prefix, its own settings).
    fn connect(self, settings: ProviderSettings) -> BoxFuture<'static, Result<Self::Provider>>;
}

impl<B: Connect> ProviderBuilder<B> {
    /// Validates the settings and connects.
    pub async fn build(self) -> Result<B::Provider> {
        let (backend, settings) = self.into_parts()?;
        backend.connect(settings).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locked_by_prefers_explicit_env_then_pod_name_then_host() {
        let pid = std::process::id();
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            default_locked_by_from(env(&[
                ("SHEDLOCK_LOCKED_BY", "worker-7"),
                ("POD_NAME", "pod-a")
            ])),
            "worker-7"
        );
        assert_eq!(
            default_locked_by_from(env(&[("POD_NAME", "pod-a")])),
            format!("pod-a:{pid}")
        );
        let host = default_locked_by_from(env(&[("POD_NAME", "  ")]));
        assert!(host.ends_with(&format!(":{pid}")), "{host}");
        assert!(host.len() > format!(":{pid}").len(), "{host}");
    }

    #[test]
    fn bad_locked_by_and_keep_alive_are_refused() {
        assert!(validate_locked_by(" ".into()).is_err());
        assert!(validate_locked_by("x".repeat(256)).is_err());
        assert!(validate_locked_by("x".repeat(255)).is_ok());
        assert!(KeepAlive::lease(Duration::ZERO).is_err());
        let three = Duration::from_secs(3);
        assert!(KeepAlive::lease(three).unwrap().interval(three).is_err());
        assert!(KeepAlive::default().interval(Duration::ZERO).is_err());
        let ka = KeepAlive::lease(Duration::from_secs(30)).unwrap();
        let hour = Duration::from_secs(3600);
        assert_eq!(ka.lease_for(hour, Duration::ZERO), Duration::from_secs(30));
        assert_eq!(
            ka.interval_for(Duration::from_secs(30)),
            Duration::from_secs(10)
        );
        // The default lease is lock_at_most_for; a lease is never shorter than lock_at_least_for.
        assert_eq!(KeepAlive::default().lease_for(hour, Duration::ZERO), hour);
        assert_eq!(
            ka.lease_for(hour, Duration::from_secs(40)),
            Duration::from_secs(40)
        );
        assert_eq!(
            ka.lease_for(Duration::from_secs(20), Duration::ZERO),
            Duration::from_secs(20)
        );
    }
}
