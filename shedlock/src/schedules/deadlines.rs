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
    /// No run longer than this: a run still going past it raises an alert; with
    /// [`on_overrun`](Self::on_overrun) `cancel` it is also cancelled.
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
    /// What becomes of a run past `max_runtime`: reported (the default), or cancelled as a
    /// shutdown cancels it (at its next await inside its lock) and recorded as failed.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub on_overrun: Option<OnOverrun>,
}

/// What becomes of a run past its job's `max_runtime` ([`Deadlines::on_overrun`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnOverrun {
    /// An `overrun` alert; the run goes on (its lock's `lock_at_most_for` bounds it).
    #[default]
    Report,
    /// An `overrun` alert, and the run is cancelled as a shutdown cancels it (at its next
    /// await inside its lock), its lock released, its history row `failed`.
    Cancel,
}

impl std::fmt::Display for OnOverrun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Report => "report",
            Self::Cancel => "cancel",
        })
    }
}

impl std::str::FromStr for OnOverrun {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "report" => Ok(Self::Report),
            "cancel" => Ok(Self::Cancel),
            other => Err(format!(
                "on_overrun {other:?} is not one of \"report\", \"cancel\""
            )),
        }
    }
}

/// The promises, by the names the macro, the CLI (`--expect-success-within`, …) and the API
/// give them.
pub const DEADLINE_NAMES: [&str; 6] = [
    "expect_success_within",
    "max_runtime",
    "late_after",
    "failures_in_a_row",
    "paused_longer_than",
    "on_overrun",
];

/// The most bytes of a stored override of a job's deadlines (its JSON).
const MAX_OVERRIDE_BYTES: usize = 1024;

impl Deadlines {
    /// A successful run at least every `period`.
    #[must_use]
    pub fn expect_success_within(mut self, period: Duration) -> Self {
        self.expect_success_within = Some(period);
        self
    }

    /// No run longer than `limit` (reported; cancelled too with [`cancel_overrun`](Self::cancel_overrun)).
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

    /// Cancel a run past `max_runtime` (not only report it).
    #[must_use]
    pub fn cancel_overrun(mut self) -> Self {
        self.on_overrun = Some(OnOverrun::Cancel);
        self
    }

    /// Whether nothing is promised.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Whether a run past `max_runtime` is cancelled: the limit, when it is.
    pub fn cancels_after(&self) -> Option<Duration> {
        self.max_runtime
            .filter(|_| self.on_overrun == Some(OnOverrun::Cancel))
    }

    /// The code's promises (`code`) as an operator's override kept in the store
    /// (`overriding`) changes them: each field the override sets replaces the code's, a zero
    /// there (or a count of 0) turns the code's off; the others stay the code's. `None` when
    /// nothing is promised after it.
    pub fn overridden(code: Option<&Self>, overriding: Option<&Self>) -> Option<Self> {
        let mut out = code.copied().unwrap_or_default();
        if let Some(o) = overriding {
            let pick = |code: Option<Duration>, over: Option<Duration>| match over {
                Some(d) if d.is_zero() => None,
                Some(d) => Some(d),
                None => code,
            };
            out.expect_success_within = pick(out.expect_success_within, o.expect_success_within);
            out.max_runtime = pick(out.max_runtime, o.max_runtime);
            out.late_after = pick(out.late_after, o.late_after);
            out.paused_longer_than = pick(out.paused_longer_than, o.paused_longer_than);
            out.failures = match o.failures {
                Some(0) => None,
                Some(n) => Some(n),
                None => out.failures,
            };
            out.on_overrun = o.on_overrun.or(out.on_overrun);
        }
        (!out.is_empty()).then_some(out)
    }

    /// An override as the store keeps it (the schedules' `deadlines`), read back; a value
    /// this version cannot read is refused, naming the job.
    pub fn from_override_json(job: &str, text: &str) -> Result<Self> {
        if text.len() > MAX_OVERRIDE_BYTES {
            return Err(Error::InvalidSchedule {
                name: job.to_owned(),
                reason: format!(
                    "deadlines: {} bytes, more than the {MAX_OVERRIDE_BYTES} an override takes",
                    text.len()
                ),
            });
        }
        serde_json::from_str(text).map_err(|e| Error::InvalidSchedule {
            name: job.to_owned(),
            reason: format!("deadlines: {e}"),
        })
    }

    /// The override as the store keeps it (JSON; durations in milliseconds, a zero turning
    /// the code's off).
    pub fn to_override_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// This override with one promise set as an operator writes it: `name` one of
    /// [`DEADLINE_NAMES`], `value` a duration (`"2h"`, `"90s"`), a count for
    /// `failures_in_a_row`, `report` or `cancel` for `on_overrun`, `off` (the code's promise
    /// turned off) or `default` (the code's again). A bad name or value is refused, naming it.
    pub fn edit(mut self, job: &str, name: &str, value: &str) -> Result<Self> {
        let refuse = |reason: String| Error::InvalidSchedule {
            name: job.to_owned(),
            reason,
        };
        let value = value.trim();
        let duration = |value: &str| -> Result<Option<Duration>> {
            match value {
                "default" => Ok(None),
                "off" => Ok(Some(Duration::ZERO)),
                text => match humantime::parse_duration(text) {
                    Ok(d) if d.is_zero() => Err(refuse(format!(
                        "{name} is zero: give a duration above zero, \"off\" or \"default\""
                    ))),
                    Ok(d) if d > crate::config::MAX_LOCK_DURATION => Err(refuse(format!(
                        "{name} {text:?} is longer than {}",
                        humantime::format_duration(crate::config::MAX_LOCK_DURATION)
                    ))),
                    Ok(d) => Ok(Some(d)),
                    Err(e) => Err(refuse(format!(
                        "{name} {text:?} is not a duration (\"2h\", \"90s\"), \"off\" or \"default\": {e}"
                    ))),
                },
            }
        };
        match name {
            "expect_success_within" => self.expect_success_within = duration(value)?,
            "max_runtime" => self.max_runtime = duration(value)?,
            "late_after" => self.late_after = duration(value)?,
            "paused_longer_than" => self.paused_longer_than = duration(value)?,
            "failures_in_a_row" => {
                self.failures = match value {
                    "default" => None,
                    "off" => Some(0),
                    text => match text.parse::<u32>() {
                        Ok(0) | Err(_) => {
                            return Err(refuse(format!(
                                "failures_in_a_row {text:?} is not a count of 1 or more, \"off\" or \"default\""
                            )));
                        }
                        Ok(n) => Some(n),
                    },
                }
            }
            "on_overrun" => {
                self.on_overrun = match value {
                    "default" => None,
                    text => Some(text.parse::<OnOverrun>().map_err(refuse)?),
                }
            }
            other => {
                return Err(refuse(format!(
                    "{other:?} is not a deadline: one of {}",
                    DEADLINE_NAMES.join(", ")
                )));
            }
        }
        Ok(self)
    }

    /// The promises set, one `name value` each (`expect_success_within 1h`, `late_after off`),
    /// as an override writes them; empty when none is.
    pub fn describe(&self) -> Vec<String> {
        let text = |d: Duration| {
            if d.is_zero() {
                "off".to_owned()
            } else {
                humantime::format_duration(d).to_string()
            }
        };
        let mut out = Vec::new();
        let durations = [
            ("expect_success_within", self.expect_success_within),
            ("max_runtime", self.max_runtime),
            ("late_after", self.late_after),
        ];
        for (name, value) in durations {
            if let Some(d) = value {
                out.push(format!("{name} {}", text(d)));
            }
        }
        if let Some(n) = self.failures {
            let n = if n == 0 {
                "off".to_owned()
            } else {
                n.to_string()
            };
            out.push(format!("failures_in_a_row {n}"));
        }
        if let Some(d) = self.paused_longer_than {
            out.push(format!("paused_longer_than {}", text(d)));
        }
        if let Some(o) = self.on_overrun {
            out.push(format!("on_overrun {o}"));
        }
        out
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
        if self.on_overrun == Some(OnOverrun::Cancel) && self.max_runtime.is_none() {
            return Err(Error::InvalidSchedule {
                name: job.to_owned(),
                reason:
                    "its on_overrun is cancel, but it sets no max_runtime to cancel a run after"
                        .to_owned(),
            });
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

    #[test]
    fn an_override_replaces_turns_off_or_keeps_each_promise() {
        let code = Deadlines::default()
            .expect_success_within(Duration::from_secs(3600))
            .late_after(Duration::from_secs(30))
            .failures_in_a_row(3);
        let over = Deadlines::default()
            .edit("sync", "expect_success_within", "2h")
            .unwrap()
            .edit("sync", "late_after", "off")
            .unwrap()
            .edit("sync", "max_runtime", "10m")
            .unwrap()
            .edit("sync", "on_overrun", "cancel")
            .unwrap();
        let json = over.to_override_json();
        assert_eq!(json, r#"{"s":7200000,"r":600000,"l":0,"o":"cancel"}"#);
        let read = Deadlines::from_override_json("sync", &json).unwrap();
        assert_eq!(read, over);
        let got = Deadlines::overridden(Some(&code), Some(&read)).unwrap();
        assert_eq!(got.expect_success_within, Some(Duration::from_secs(7200)));
        assert_eq!(got.late_after, None, "off turns the code's off");
        assert_eq!(got.failures, Some(3), "the code's stays");
        assert_eq!(got.cancels_after(), Some(Duration::from_secs(600)));
        // Back to the code's, field by field.
        let back = read
            .edit("sync", "late_after", "default")
            .unwrap()
            .edit("sync", "on_overrun", "default")
            .unwrap();
        let got = Deadlines::overridden(Some(&code), Some(&back)).unwrap();
        assert_eq!(got.late_after, Some(Duration::from_secs(30)));
        assert_eq!(got.cancels_after(), None);
        assert_eq!(
            back.describe(),
            ["expect_success_within 2h", "max_runtime 10m"]
        );
        // Everything off: nothing promised.
        let off = Deadlines::default()
            .edit("sync", "expect_success_within", "off")
            .and_then(|d| d.edit("sync", "late_after", "off"))
            .and_then(|d| d.edit("sync", "failures_in_a_row", "off"))
            .unwrap();
        assert_eq!(Deadlines::overridden(Some(&code), Some(&off)), None);
    }

    #[test]
    fn a_bad_edit_names_the_promise_and_the_value() {
        let cases = [
            (
                "late_after",
                "soon",
                "late_after \"soon\" is not a duration",
            ),
            ("late_after", "0s", "late_after is zero"),
            ("failures_in_a_row", "0", "not a count of 1 or more"),
            ("on_overrun", "kill", "not one of \"report\", \"cancel\""),
            ("deadline", "1h", "\"deadline\" is not a deadline"),
        ];
        for (name, value, expected) in cases {
            let err = Deadlines::default()
                .edit("sync", name, value)
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected) && err.contains("sync"), "{err}");
        }
        let err = Deadlines::from_override_json("sync", "{\"s\": \"soon\"}")
            .unwrap_err()
            .to_string();
        assert!(err.contains("deadlines:"), "{err}");
    }
}
