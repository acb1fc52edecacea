//! A job's promises ([`Deadlines`]): a successful run at least every so often, no run longer
//! than so long, no start later than so long after its tick, no more failures in a row than
//! so many, no pause longer than so long. The ledger's sweep checks them fleet-wide and raises
//! an [`Alert`](crate::scheduler::Alert) once for each one broken.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a job promises, checked fleet-wide by the ledger's sweep (each broken promise raises
/// one alert, and its recovery one more). Set in code ([`Job::deadlines`](crate::Job::deadlines)
/// and the methods beside it), in the macro (`#[scheduled(expect_success_within = "1h",
/// max_runtime = "10m", late_after = "30s")]`), each field `None` when not promised.
///
/// ```
/// use std::time::Duration;
/// use shedlock::schedules::Deadlines;
///
/// let deadlines = Deadlines::default()
///     .expect_success_within(Duration::from_secs(3600))
///     .failures_in_a_row(3);
/// assert_eq!(deadlines.failures, Some(3));
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Deadlines {
    /// A successful run at least this often (a healthcheck's period): the job's newest
    /// `executed` row is never older than this.
    #[serde(
        rename = "s",
        default,
        with = "millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub expect_success_within: Option<Duration>,
    /// No run longer than this: a run still going past it raises an alert (it is reported,
    /// not cancelled: its lock's `lock_at_most_for` bounds how long it can hold the job).
    #[serde(
        rename = "r",
        default,
        with = "millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_runtime: Option<Duration>,
    /// No start later than this after its tick.
    #[serde(
        rename = "l",
        default,
        with = "millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub late_after: Option<Duration>,
    /// No more than this many failed runs in a row (a failure, a panic, a lost lock).
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<u32>,
    /// No pause (of the job, or of the whole fleet) longer than this.
    #[serde(
        rename = "p",
        default,
        with = "millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub paused_longer_than: Option<Duration>,
}

impl Deadlines {
    /// A successful run at least every `period`.
    #[must_use]
    pub fn expect_success_within(mut self, period: Duration) -> Self {
        self.expect_success_within = Some(period);
        self
    }

    /// No run longer than `limit` (reported, not cancelled).
    #[must_use]
    pub fn max_runtime(mut self, limit: Duration) -> Self {
        self.max_runtime = Some(limit);
        self
    }

    /// No start later than `after` past its tick.
    #[must_use]
    pub fn late_after(mut self, after: Duration) -> Self {
        self.late_after = Some(after);
        self
    }

    /// An alert after `count` failed runs in a row (at least 1).
    #[must_use]
    pub fn failures_in_a_row(mut self, count: u32) -> Self {
        self.failures = Some(count.max(1));
        self
    }

    /// An alert when the job (or the fleet) stays paused longer than `limit`.
    #[must_use]
    pub fn paused_longer_than(mut self, limit: Duration) -> Self {
        self.paused_longer_than = Some(limit);
        self
    }

    /// Whether nothing is promised.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Refuses a zero duration, naming the promise and the job.
    pub fn check(&self, job: &str) -> Result<()> {
        let durations = [
            ("expect_success_within", self.expect_success_within),
            ("max_runtime", self.max_runtime),
            ("late_after", self.late_after),
            ("paused_longer_than", self.paused_longer_than),
        ];
        for (what, value) in durations {
            if value.is_some_and(|d| d.is_zero()) {
                return Err(Error::InvalidSchedule {
                    name: job.to_owned(),
                    reason: format!("its {what} is zero: give a duration above zero, or none"),
                });
            }
        }
        if self.failures == Some(0) {
            return Err(Error::InvalidSchedule {
                name: job.to_owned(),
                reason: "its failures in a row is 0: give 1 or more, or none".to_owned(),
            });
        }
        Ok(())
    }
}

/// An optional duration as whole milliseconds.
mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_trip_as_json_and_zeros_are_refused() {
        let deadlines = Deadlines::default()
            .expect_success_within(Duration::from_secs(60))
            .max_runtime(Duration::from_millis(1500))
            .failures_in_a_row(3);
        let json = serde_json::to_string(&deadlines).unwrap();
        assert_eq!(json, r#"{"s":60000,"r":1500,"f":3}"#);
        assert_eq!(serde_json::from_str::<Deadlines>(&json).unwrap(), deadlines);
        assert!(Deadlines::default().is_empty());
        let zero = Deadlines::default().late_after(Duration::ZERO);
        let err = zero.check("sync").unwrap_err().to_string();
        assert!(
            err.contains("late_after is zero") && err.contains("sync"),
            "{err}"
        );
    }
}
