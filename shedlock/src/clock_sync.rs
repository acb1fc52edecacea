//! The scheduler's view of the database clock: its offset from this instance's clock, measured
//! at start and then periodically, so that ticks fire when the **database's** clock reaches
//! them. An instance whose own clock runs minutes ahead or behind then fires on time, and never
//! asks for a tick the database would refuse as lying in its future.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Result;
use crate::provider::LockProvider;
use crate::settings::AppClock;

/// How many round trips one measurement takes; the one with the shortest round trip wins (its
/// midpoint is the closest to when the database read its clock).
const SAMPLES: usize = 3;

/// How long the scheduler's timer waits at start for the first measurement before firing by this
/// instance's own clock (the database may be down; measuring goes on in the background).
pub(crate) const FIRST_MEASUREMENT_WAIT: Duration = Duration::from_secs(5);

/// An offset change smaller than this is logged at debug level only.
const NOTEWORTHY_CHANGE: chrono::TimeDelta = chrono::TimeDelta::milliseconds(100);

/// An offset larger than this is logged as a warning.
const LARGE_OFFSET: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// This instance's clock corrected by the measured offset to the database's.
#[derive(Debug)]
pub(crate) struct DbClock {
    local: AppClock,
    state: Mutex<Option<Measured>>,
    /// Bumped on every new measurement, so the sleeping timer recomputes its wait.
    changed: watch::Sender<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Measured {
    /// Database clock minus this instance's clock.
    offset: chrono::TimeDelta,
    at: Instant,
}

impl DbClock {
    pub(crate) fn new(local: AppClock) -> Self {
        Self {
            local,
            state: Mutex::new(None),
            changed: watch::Sender::new(0),
        }
    }

    /// The database's time now, as estimated from this instance's clock and the last measured
    /// offset (this instance's clock until the first measurement).
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.local.now() + self.offset().unwrap_or_default()
    }

    /// The last measured offset (database minus this instance), if any.
    pub(crate) fn offset(&self) -> Option<chrono::TimeDelta> {
        self.measured().map(|m| m.offset)
    }

    fn measured(&self) -> Option<Measured> {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver that sees a change on every new measurement.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits until the first measurement (or [`FIRST_MEASUREMENT_WAIT`]).
    pub(crate) async fn first_measurement(&self) {
        let mut changed = self.subscribe();
        let _ = tokio::time::timeout(
            FIRST_MEASUREMENT_WAIT,
            changed.wait_for(|generation| *generation > 0),
        )
        .await;
    }

    /// Describes the offset for a log line or a history row.
    pub(crate) fn describe(&self) -> String {
        match self.measured() {
            Some(m) => format!(
                "this instance's clock is {} the database's (measured {} ago)",
                describe_offset(m.offset),
                humantime::format_duration(Duration::from_secs(m.at.elapsed().as_secs()))
            ),
            None => "the offset to the database's clock is not measured yet".to_owned(),
        }
    }

    /// Measures the offset once and records it.
    pub(crate) async fn measure(&self, provider: &dyn LockProvider) -> Result<chrono::TimeDelta> {
        let mut best: Option<(Duration, chrono::TimeDelta)> = None;
        for _ in 0..SAMPLES {
            let (local, sent) = (self.local.now(), Instant::now());
            let database = provider.now().await?;
            let round_trip = sent.elapsed();
            let midpoint = local + chrono::TimeDelta::from_std(round_trip / 2).unwrap_or_default();
            let offset = database - midpoint;
            if best.is_none_or(|(shortest, _)| round_trip < shortest) {
                best = Some((round_trip, offset));
            }
        }
        let (round_trip, offset) = best.unwrap_or_default();
        let previous = self.offset();
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(Measured {
            offset,
            at: Instant::now(),
        });
        self.changed.send_modify(|generation| *generation += 1);
        metrics::gauge!(crate::metric_names::CLOCK_OFFSET).set(seconds(offset));
        let change = previous.map(|p| (offset - p).abs());
        if offset.abs() >= LARGE_OFFSET && change.is_none_or(|c| c >= NOTEWORTHY_CHANGE) {
            tracing::warn!(offset_ms = offset.num_milliseconds(), round_trip = ?round_trip,
                "this instance's clock is {} the database's: ticks fire by the database's clock",
                describe_offset(offset));
        } else if change.is_none_or(|c| c >= NOTEWORTHY_CHANGE) {
            tracing::info!(offset_ms = offset.num_milliseconds(), round_trip = ?round_trip,
                "clock offset to the database measured: this instance's clock is {}",
                describe_offset(offset));
        } else {
            tracing::debug!(offset_ms = offset.num_milliseconds(), round_trip = ?round_trip, "clock offset to the database measured");
        }
        Ok(offset)
    }
}

/// "5m ahead of", "120ms behind", "in step with".
fn describe_offset(offset: chrono::TimeDelta) -> String {
    // The offset is database minus local: negative means this instance runs ahead.
    let magnitude = humantime::format_duration(Duration::from_millis(
        offset.num_milliseconds().unsigned_abs(),
    ));
    match offset.num_milliseconds() {
        0 => "in step with".to_owned(),
        ms if ms < 0 => format!("{magnitude} ahead of"),
        _ => format!("{magnitude} behind"),
    }
}

#[allow(clippy::cast_precision_loss)] // offsets in seconds fit an f64
fn seconds(offset: chrono::TimeDelta) -> f64 {
    offset.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// Measures at once, then every `every`, until `stop` turns true. A failed measurement is
/// logged and retried after at most 5 s.
pub(crate) async fn clock_loop(
    clock: &DbClock,
    provider: &dyn LockProvider,
    every: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let wait = match clock.measure(provider).await {
            Ok(_) => every,
            Err(error) => {
                tracing::warn!(%error, "could not read the database's clock; ticks fire by this instance's clock until it can");
                every.min(Duration::from_secs(5))
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_read_as_ahead_or_behind() {
        assert_eq!(
            describe_offset(chrono::TimeDelta::minutes(-5)),
            "5m ahead of"
        );
        assert_eq!(
            describe_offset(chrono::TimeDelta::milliseconds(120)),
            "120ms behind"
        );
        assert_eq!(describe_offset(chrono::TimeDelta::zero()), "in step with");
    }
}
