//! A job's overlap policy: what a tick does when it finds the job still running, and how many
//! runs of the job may go at once, across the fleet. The type, its names and its checks; how
//! the store keeps it is `overlap/rows.rs`, and the tick's path `overlap/mod.rs`.
//!
//! This file is `shedlock/src/scheduler/overlap/policy.rs`; `shedlock-macros/src/overlap.rs`
//! is a link to it, so `#[scheduled(overlap = …)]` is checked at compile time by the same
//! rules. It names no type of either crate.
// Each crate uses what it needs of these.
#![allow(dead_code, unreachable_pub)]

use std::fmt;
use std::str::FromStr;

/// The most runs of one job at once ([`Overlap::AllowAll`]'s `max_running`) and the most
/// waiting ticks ([`Overlap::BufferAll`]'s `limit`): each is a row of the lock table.
pub const MAX_OVERLAP_ROWS: u32 = 100;

/// What a tick does when it finds its job still running, fleet-wide (see
/// `Job::overlap`).
///
/// | policy | a tick that comes while a run goes | Kubernetes | Temporal |
/// |---|---|---|---|
/// | `Skip` (the default) | skipped, counted (`skipped-overlap`, `skipped-held` on the others) | `Forbid` | `Skip` |
/// | `BufferOne` | waits (`buffered`), starts when the run ends; more meanwhile are skipped | – | `BufferOne` |
/// | `BufferAll { limit }` | waits in tick order, up to `limit`; past it skipped | – | `BufferAll` |
/// | `CancelOther` | the run is cancelled (`cancelled-by-next`), the tick starts when it ended | `Replace` | `CancelOther` |
/// | `AllowAll { max_running, when_full }` | runs beside it, up to `max_running` at once | `Allow` | `AllowAll` |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// A tick that finds the job running is skipped and counted: the behaviour of every
    /// earlier version, and the default. It costs nothing beyond the tick's claim.
    #[default]
    Skip,
    /// At most one tick waits; it starts as soon as the running run ends, on whichever
    /// instance claims it. Further ticks meanwhile are skipped and counted.
    BufferOne,
    /// Every tick runs, in tick order, one after another, with up to `limit` waiting (1 to
    /// [`MAX_OVERLAP_ROWS`]); a tick past it is skipped and counted.
    BufferAll {
        /// How many ticks may wait at once.
        limit: u32,
    },
    /// A new tick cancels the running run through the lost-lock path (its
    /// `LockContext::is_lost` turns true and, unless keep-alive
    /// notifies only, its future is dropped), then starts once that run has ended or its
    /// lease has run out. One tick waits at most; more meanwhile are skipped and counted.
    CancelOther,
    /// Up to `max_running` runs of the job at once across the fleet (1 to
    /// [`MAX_OVERLAP_ROWS`]), each tick still run once; a tick that would be one more follows
    /// `when_full`.
    AllowAll {
        /// How many runs may go at once, fleet-wide.
        max_running: u32,
        /// What a tick that finds `max_running` runs going does.
        when_full: WhenFull,
    },
}

/// What a tick of an [`Overlap::AllowAll`] job does when `max_running` runs are going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenFull {
    /// Skipped and counted.
    #[default]
    Skip,
    /// Waits (one at most) for a run to end.
    BufferOne,
}

impl Overlap {
    /// The policy's name as the macro, the history and the command line write it:
    /// `skip`, `buffer_one`, `buffer_all`, `cancel_other`, `allow_all`.
    pub fn name(&self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::BufferOne => "buffer_one",
            Overlap::BufferAll { .. } => "buffer_all",
            Overlap::CancelOther => "cancel_other",
            Overlap::AllowAll { .. } => "allow_all",
        }
    }

    /// How many runs may hold the job at once (1 but for [`Overlap::AllowAll`]).
    pub fn max_running(&self) -> u32 {
        match self {
            Overlap::AllowAll { max_running, .. } => *max_running,
            _ => 1,
        }
    }

    /// How many ticks may wait at once (0 for `Skip` and `AllowAll` with `when_full = skip`).
    pub fn buffer_limit(&self) -> u32 {
        match self {
            Overlap::Skip
            | Overlap::AllowAll {
                when_full: WhenFull::Skip,
                ..
            } => 0,
            Overlap::BufferAll { limit } => *limit,
            _ => 1,
        }
    }

    /// The rows of the lock table that hold the runs going under this policy for the job whose
    /// lock is `lock`: `lock:run1` … `lock:runN` (none for `Skip`, whose run holds `lock`).
    pub fn run_rows(&self, lock: &str) -> Vec<String> {
        if !self.in_store() {
            return Vec::new();
        }
        (1..=self.max_running())
            .map(|k| format!("{lock}:run{k}"))
            .collect()
    }

    /// The rows of the lock table that hold the ticks waiting under this policy for the job
    /// whose lock is `lock`: `lock:wait1` … `lock:waitK` (none for a policy that buffers none).
    pub fn wait_rows(&self, lock: &str) -> Vec<String> {
        (1..=self.buffer_limit())
            .map(|k| format!("{lock}:wait{k}"))
            .collect()
    }

    /// The row of the lock table where a new tick asks the running run to stop, for the job
    /// whose lock is `lock`: `lock:cancel` under `CancelOther`, else none.
    pub fn cancel_row(&self, lock: &str) -> Option<String> {
        (*self == Overlap::CancelOther).then(|| format!("{lock}:cancel"))
    }

    /// Whether the policy is kept in the store beside the job's lock (every policy but
    /// `Skip`, which is the tick's claim alone).
    pub(crate) fn in_store(&self) -> bool {
        *self != Overlap::Skip
    }

    /// The policy a job whose code says `self` fires under when the store says `stored` (an
    /// operator's override): `stored`, but for an override to `skip` of a policy kept in the
    /// store, which fires as `allow_all:1` (one run at once, a tick that finds it running
    /// skipped): the same rule kept with run places, so a run the code's policy started
    /// still counts as running.
    pub fn overridden_by(self, stored: Overlap) -> Overlap {
        if stored == Overlap::Skip && self.in_store() {
            Overlap::AllowAll {
                max_running: 1,
                when_full: WhenFull::Skip,
            }
        } else {
            stored
        }
    }

    /// Why this policy cannot hold, or `None`: a bound of zero or above
    /// [`MAX_OVERLAP_ROWS`].
    pub fn check(&self) -> Result<(), String> {
        let bound = |what: &str, n: u32| {
            if (1..=MAX_OVERLAP_ROWS).contains(&n) {
                Ok(())
            } else {
                Err(format!(
                    "{what} is {n}: it must be 1 to {MAX_OVERLAP_ROWS} (each is a row of the lock table)"
                ))
            }
        };
        match self {
            Overlap::BufferAll { limit } => bound("buffer_limit", *limit),
            Overlap::AllowAll { max_running, .. } => bound("max_running", *max_running),
            _ => Ok(()),
        }
    }

    /// The policy named `name` (`skip`, `buffer_one`, `buffer_all`, `cancel_other`,
    /// `allow_all`; a `-` for `_` is taken too) with its bounds: `buffer_limit` for
    /// `buffer_all` (required), `max_running` for `allow_all` (required) and `when_full`
    /// (`skip` by default). A bound given to a policy without it is an error, as is a missing
    /// one.
    pub fn from_parts(
        name: &str,
        buffer_limit: Option<u32>,
        max_running: Option<u32>,
        when_full: Option<WhenFull>,
    ) -> Result<Self, String> {
        let policy = match name.replace('-', "_").as_str() {
            "skip" => Overlap::Skip,
            "buffer_one" => Overlap::BufferOne,
            "buffer_all" => Overlap::BufferAll {
                limit: buffer_limit.ok_or_else(|| {
                    "buffer_all needs a bound: give buffer_limit (1 to 100 waiting ticks)"
                        .to_owned()
                })?,
            },
            "cancel_other" => Overlap::CancelOther,
            "allow_all" => Overlap::AllowAll {
                max_running: max_running.ok_or_else(|| {
                    "allow_all needs a bound: give max_running (1 to 100 runs at once)".to_owned()
                })?,
                when_full: when_full.unwrap_or_default(),
            },
            other => {
                return Err(format!(
                    "unknown overlap policy {other:?}: expected skip, buffer_one, buffer_all, cancel_other or allow_all"
                ));
            }
        };
        let stray = [
            ("buffer_limit", buffer_limit.is_some(), "buffer_all"),
            ("max_running", max_running.is_some(), "allow_all"),
            ("when_full", when_full.is_some(), "allow_all"),
        ];
        for (key, given, owner) in stray {
            if given && policy.name() != owner {
                return Err(format!(
                    "{key} is for overlap = \"{owner}\", not \"{}\"",
                    policy.name()
                ));
            }
        }
        policy.check()?;
        Ok(policy)
    }
}

impl fmt::Display for Overlap {
    /// The policy as the command line takes it back: `buffer_all:5`, `allow_all:3`,
    /// `allow_all:3:buffer_one`, or the bare name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overlap::BufferAll { limit } => write!(f, "buffer_all:{limit}"),
            Overlap::AllowAll {
                max_running,
                when_full: WhenFull::Skip,
            } => write!(f, "allow_all:{max_running}"),
            Overlap::AllowAll {
                max_running,
                when_full: WhenFull::BufferOne,
            } => write!(f, "allow_all:{max_running}:buffer_one"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Overlap {
    type Err = String;

    /// What [`Display`](fmt::Display) writes: `skip`, `buffer_one`, `buffer_all:5`,
    /// `cancel_other`, `allow_all:3` or `allow_all:3:buffer_one` (`-` for `_` taken too).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parts = text.trim().split(':');
        let name = parts.next().unwrap_or_default();
        let number = |part: Option<&str>, what: &str| -> Result<Option<u32>, String> {
            part.map(|n| {
                n.parse::<u32>().map_err(|_| {
                    format!("{what} {n:?} in overlap policy {text:?} is not a whole number")
                })
            })
            .transpose()
        };
        let policy = match name.replace('-', "_").as_str() {
            "buffer_all" => {
                Overlap::from_parts(name, number(parts.next(), "buffer_limit")?, None, None)
            }
            "allow_all" => {
                let max = number(parts.next(), "max_running")?;
                let when_full = parts.next().map(str::parse::<WhenFull>).transpose()?;
                Overlap::from_parts(name, None, max, when_full)
            }
            _ => Overlap::from_parts(name, None, None, None),
        }?;
        if let Some(extra) = parts.next() {
            return Err(format!("unexpected {extra:?} in overlap policy {text:?}"));
        }
        Ok(policy)
    }
}

impl FromStr for WhenFull {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.replace('-', "_").as_str() {
            "skip" => Ok(WhenFull::Skip),
            "buffer_one" => Ok(WhenFull::BufferOne),
            other => Err(format!(
                "unknown when_full {other:?}: expected skip or buffer_one"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_policy_reads_back_what_it_writes() {
        let policies = [
            Overlap::Skip,
            Overlap::BufferOne,
            Overlap::BufferAll { limit: 5 },
            Overlap::CancelOther,
            Overlap::AllowAll {
                max_running: 3,
                when_full: WhenFull::Skip,
            },
            Overlap::AllowAll {
                max_running: 3,
                when_full: WhenFull::BufferOne,
            },
        ];
        for policy in policies {
            assert_eq!(policy.to_string().parse::<Overlap>(), Ok(policy));
        }
        assert_eq!("buffer-one".parse::<Overlap>(), Ok(Overlap::BufferOne));
    }

    #[test]
    fn a_bad_policy_is_refused_with_its_reason() {
        let refused = |text: &str| text.parse::<Overlap>().unwrap_err();
        assert!(
            refused("buffer_all").contains("needs a bound"),
            "{}",
            refused("buffer_all")
        );
        assert!(refused("buffer_all:0").contains("1 to 100"));
        assert!(refused("allow_all:101").contains("1 to 100"));
        assert!(refused("allow_all:x").contains("not a whole number"));
        assert!(refused("allow_all:2:wait").contains("when_full"));
        assert!(refused("sometimes").contains("unknown overlap policy"));
        assert!(refused("skip:3").contains("unexpected"));
        let stray = Overlap::from_parts("skip", None, Some(3), None).unwrap_err();
        assert!(
            stray.contains("max_running is for overlap = \"allow_all\""),
            "{stray}"
        );
    }
}
