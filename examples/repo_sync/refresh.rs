//! Whether a scheduled tick should sync: adaptive refresh and the circuit breaker.
//!
//! **Adaptive refresh.** A repository viewed recently (a search hit it) refreshes on its cron.
//! As the time since its last view grows, its effective interval doubles every idle week:
//!
//! ```text
//! effective interval = cron interval × 2^⌊days since last view / 7⌋
//! ```
//!
//! and after 30 idle days it is not refreshed at all until viewed again (or synced by hand).
//! A repository never viewed counts from when it was registered. While the multiplier is 1,
//! every tick syncs. Above it, a tick syncs when at least `effective interval − cron interval / 2`
//! has passed since the last sync (the half interval absorbs the time between a tick and the
//! sync it started).
//!
//! **Circuit breaker.** Closed while a repository's syncs succeed. After 5 consecutive
//! failures it opens: scheduled ticks skip the repository for a cool-down (1 hour) counted from
//! the last failure. Then it is half-open: the next scheduled tick that would sync is let
//! through as a probe. A success (of the probe, of any run) closes the breaker; a failure
//! re-opens it with the cool-down doubled (2 h, 4 h, … at most 24 h):
//!
//! ```text
//! cool-down = min(1 h × 2^(consecutive failures − 5), 24 h)
//! ```
//!
//! `sync-now` runs whatever the breaker's state and counts like any run: its success closes
//! the breaker, its failure adds to the streak.

use crate::db::Session;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;
const HOUR_MS: i64 = 60 * 60 * 1000;

/// The thresholds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Idle time after which the interval doubles again.
    pub(crate) doubling_ms: i64,
    /// Idle time after which scheduled refresh stops.
    pub(crate) idle_threshold_ms: i64,
    /// Consecutive failures that open the circuit.
    pub(crate) max_failures: i64,
    /// The first cool-down of an open breaker; each failed probe doubles it.
    pub(crate) cool_down_ms: i64,
    /// The longest cool-down.
    pub(crate) max_cool_down_ms: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            doubling_ms: 7 * DAY_MS,
            idle_threshold_ms: 30 * DAY_MS,
            max_failures: 5,
            cool_down_ms: HOUR_MS,
            max_cool_down_ms: 24 * HOUR_MS,
        }
    }
}

impl Policy {
    /// The cool-down after the `failures`-th consecutive failure (`failures ≥ max_failures`).
    pub(crate) fn cool_down(&self, failures: i64) -> i64 {
        let doublings = (failures - self.max_failures).clamp(0, 30);
        self.cool_down_ms
            .saturating_mul(1_i64 << doublings)
            .min(self.max_cool_down_ms)
    }
}

/// The circuit breaker of a repository at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Breaker {
    /// Fewer than `max_failures` consecutive failures (possibly none).
    Closed { failures: i64 },
    /// Scheduled ticks are skipped until `until_ms`.
    Open {
        failures: i64,
        until_ms: i64,
        cool_down_ms: i64,
    },
    /// The cool-down has passed: the next scheduled sync is a probe.
    HalfOpen { failures: i64 },
}

impl Breaker {
    /// The breaker of `session` at `at_ms`.
    pub(crate) fn at(session: &Session, at_ms: i64, policy: &Policy) -> Breaker {
        let failures = session.consecutive_failures;
        if failures < policy.max_failures {
            return Breaker::Closed { failures };
        }
        let cool_down_ms = policy.cool_down(failures);
        // A streak recorded before `last_failure_at` existed counts as cooled down.
        let until_ms = session.last_failure_at.unwrap_or(0) + cool_down_ms;
        if at_ms < until_ms {
            Breaker::Open {
                failures,
                until_ms,
                cool_down_ms,
            }
        } else {
            Breaker::HalfOpen { failures }
        }
    }
}

impl std::fmt::Display for Breaker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Breaker::Closed { failures: 0 } => f.write_str("breaker closed"),
            Breaker::Closed { failures } => {
                write!(f, "breaker closed ({failures} consecutive failures)")
            }
            Breaker::Open {
                failures,
                until_ms,
                cool_down_ms,
            } => write!(
                f,
                "breaker open after {failures} consecutive failures until {} (cool-down {}); sync-now retries at once",
                rfc3339(until_ms),
                humantime::format_duration(std::time::Duration::from_millis(
                    u64::try_from(cool_down_ms).unwrap_or_default()
                ))
            ),
            Breaker::HalfOpen { failures } => write!(
                f,
                "breaker half-open after {failures} consecutive failures: the next scheduled tick probes"
            ),
        }
    }
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(String::new, |t| t.to_rfc3339())
}

/// What a scheduled tick does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Sync,
    /// The breaker is half-open: this tick syncs once to test the repository.
    Probe {
        failures: i64,
    },
    /// Adaptive refresh: the next sync is due at `next_at_ms`.
    NotDue {
        next_at_ms: i64,
        multiplier: i64,
    },
    /// Idle past the threshold.
    Idle {
        idle_days: i64,
    },
    /// The breaker is open: too many consecutive failures, cooling down until `until_ms`.
    CircuitOpen {
        failures: i64,
        until_ms: i64,
    },
}

impl Decision {
    /// What a tick does and why, for the run history (skipped ticks) and `status` (the next
    /// tick).
    pub(crate) fn reason(&self) -> String {
        match self {
            // `status` prints it beside the next tick: that tick syncs when it comes (not "now").
            Decision::Sync => "that tick syncs".into(),
            Decision::Probe { failures } => format!(
                "that tick syncs as the probe: breaker half-open after {failures} consecutive failures"
            ),
            Decision::NotDue {
                next_at_ms,
                multiplier,
            } => format!(
                "adaptive refresh: interval ×{multiplier}, next sync due at {}",
                chrono::DateTime::from_timestamp_millis(*next_at_ms)
                    .map_or_else(String::new, |t| t.to_rfc3339())
            ),
            Decision::Idle { idle_days } => format!(
                "idle for {idle_days} days: auto-refresh paused until the repository is viewed"
            ),
            Decision::CircuitOpen { failures, until_ms } => format!(
                "circuit open after {failures} consecutive failures: the next scheduled attempt after {}, or run sync-now to retry now",
                rfc3339(*until_ms)
            ),
        }
    }
}

/// The effective interval multiplier after `idle_ms` without a view.
pub(crate) fn multiplier(idle_ms: i64, policy: &Policy) -> i64 {
    let doublings = (idle_ms.max(0) / policy.doubling_ms).min(30);
    1_i64 << doublings
}

/// Decides a scheduled tick at `tick_ms`, for a cron whose ticks are `interval_ms` apart.
pub(crate) fn decide(
    session: &Session,
    tick_ms: i64,
    interval_ms: i64,
    policy: &Policy,
) -> Decision {
    let breaker = Breaker::at(session, tick_ms, policy);
    if let Breaker::Open {
        failures, until_ms, ..
    } = breaker
    {
        return Decision::CircuitOpen { failures, until_ms };
    }
    match adaptive(session, tick_ms, interval_ms, policy) {
        Decision::Sync => match breaker {
            Breaker::HalfOpen { failures } => Decision::Probe { failures },
            _ => Decision::Sync,
        },
        other => other,
    }
}

/// Adaptive refresh alone.
fn adaptive(session: &Session, tick_ms: i64, interval_ms: i64, policy: &Policy) -> Decision {
    let idle_ms = tick_ms - session.last_viewed_at.unwrap_or(session.created_at);
    if idle_ms > policy.idle_threshold_ms {
        return Decision::Idle {
            idle_days: idle_ms / DAY_MS,
        };
    }
    let multiplier = multiplier(idle_ms, policy);
    if multiplier == 1 {
        // Fresh: the cron alone decides (a late catch-up run must not make the next tick look early).
        return Decision::Sync;
    }
    match session.last_sync_at {
        Some(last) if tick_ms < last + interval_ms * multiplier - interval_ms / 2 => {
            Decision::NotDue {
                next_at_ms: last + interval_ms * multiplier,
                multiplier,
            }
        }
        _ => Decision::Sync,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: i64 = 60 * 60 * 1000;

    fn session(
        created: i64,
        viewed: Option<i64>,
        last_sync: Option<i64>,
        failures: i64,
    ) -> Session {
        Session {
            id: 1,
            display_name: "r".into(),
            source: "/r".into(),
            collection: "code".into(),
            last_sync_at: last_sync,
            last_synced_commit: None,
            consecutive_failures: failures,
            last_failure_at: None,
            last_viewed_at: viewed,
            created_at: created,
        }
    }

    #[test]
    fn recently_viewed_repositories_refresh_on_every_tick() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        // Viewed an hour ago, synced at the previous hourly tick (a few ms after it).
        let s = session(0, Some(t - HOUR), Some(t - HOUR + 15), 0);
        assert_eq!(decide(&s, t, HOUR, &p), Decision::Sync);
        // What `status` prints beside the next tick: what that tick will do, not "due" (which
        // read as "due now" minutes early).
        assert_eq!(Decision::Sync.reason(), "that tick syncs");
        assert!(!Decision::Probe { failures: 5 }.reason().contains("due"));
        // Never synced: sync.
        assert_eq!(
            decide(&session(t - DAY_MS, None, None, 0), t, HOUR, &p),
            Decision::Sync
        );
    }

    #[test]
    fn the_interval_doubles_every_idle_week() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        assert_eq!(multiplier(6 * DAY_MS, &p), 1);
        assert_eq!(multiplier(7 * DAY_MS, &p), 2);
        assert_eq!(multiplier(15 * DAY_MS, &p), 4);
        assert_eq!(multiplier(29 * DAY_MS, &p), 16);
        // Viewed 8 days ago (×2): a sync one hour ago is not enough, two hours is.
        let s = session(0, Some(t - 8 * DAY_MS), Some(t - HOUR), 0);
        assert_eq!(
            decide(&s, t, HOUR, &p),
            Decision::NotDue {
                next_at_ms: t + HOUR,
                multiplier: 2
            }
        );
        let s = session(0, Some(t - 8 * DAY_MS), Some(t - 2 * HOUR), 0);
        assert_eq!(decide(&s, t, HOUR, &p), Decision::Sync);
        // Viewed 15 days ago (×4): three hours is not enough, four is.
        let s = session(0, Some(t - 15 * DAY_MS), Some(t - 3 * HOUR), 0);
        assert!(matches!(
            decide(&s, t, HOUR, &p),
            Decision::NotDue { multiplier: 4, .. }
        ));
        let s = session(0, Some(t - 15 * DAY_MS), Some(t - 4 * HOUR), 0);
        assert_eq!(decide(&s, t, HOUR, &p), Decision::Sync);
    }

    #[test]
    fn idle_past_the_threshold_pauses_and_a_view_resumes() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        let s = session(0, Some(t - 31 * DAY_MS), Some(t - 10 * DAY_MS), 0);
        assert_eq!(decide(&s, t, HOUR, &p), Decision::Idle { idle_days: 31 });
        let viewed = session(0, Some(t - HOUR), Some(t - 10 * DAY_MS), 0);
        assert_eq!(decide(&viewed, t, HOUR, &p), Decision::Sync);
        // Never viewed: counts from registration.
        assert!(matches!(
            decide(&session(t - 40 * DAY_MS, None, None, 0), t, HOUR, &p),
            Decision::Idle { .. }
        ));
    }

    #[test]
    fn five_failures_open_the_circuit_for_a_cool_down() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        let mut s = session(0, Some(t), None, 4);
        s.last_failure_at = Some(t - 60_000);
        assert_eq!(decide(&s, t, HOUR, &p), Decision::Sync);
        assert_eq!(Breaker::at(&s, t, &p), Breaker::Closed { failures: 4 });
        s.consecutive_failures = 5;
        assert_eq!(
            decide(&s, t, HOUR, &p),
            Decision::CircuitOpen {
                failures: 5,
                until_ms: t - 60_000 + HOUR
            }
        );
        let reason = decide(&s, t, HOUR, &p).reason();
        assert!(
            reason.contains("sync-now") && reason.contains("next scheduled attempt"),
            "{reason}"
        );
        assert!(Breaker::at(&s, t, &p).to_string().contains("breaker open"));
    }

    #[test]
    fn after_the_cool_down_one_tick_probes_and_a_failed_probe_doubles_it() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        let failed_at = t - HOUR; // the fifth failure, one cool-down ago
        let mut s = session(0, Some(t), None, 5);
        s.last_failure_at = Some(failed_at);
        // Half-open: this tick is let through as a probe.
        assert_eq!(Breaker::at(&s, t, &p), Breaker::HalfOpen { failures: 5 });
        assert_eq!(decide(&s, t, HOUR, &p), Decision::Probe { failures: 5 });
        assert!(Breaker::at(&s, t, &p).to_string().contains("half-open"));
        // The probe fails (the sixth failure, now): open again for twice as long.
        s.consecutive_failures = 6;
        s.last_failure_at = Some(t);
        assert_eq!(
            decide(&s, t + HOUR, HOUR, &p),
            Decision::CircuitOpen {
                failures: 6,
                until_ms: t + 2 * HOUR
            }
        );
        assert_eq!(
            decide(&s, t + 2 * HOUR, HOUR, &p),
            Decision::Probe { failures: 6 }
        );
        // The cool-down stops growing at the maximum.
        assert_eq!(p.cool_down(5), HOUR);
        assert_eq!(p.cool_down(7), 4 * HOUR);
        assert_eq!(p.cool_down(12), 24 * HOUR);
        assert_eq!(p.cool_down(1000), 24 * HOUR);
    }

    #[test]
    fn a_success_closes_the_breaker() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        let mut s = session(0, Some(t), Some(t), 7);
        s.last_failure_at = Some(t - 60_000);
        assert!(matches!(
            decide(&s, t, HOUR, &p),
            Decision::CircuitOpen { .. }
        ));
        // What `record_success` stores.
        s.consecutive_failures = 0;
        s.last_failure_at = None;
        assert_eq!(Breaker::at(&s, t, &p), Breaker::Closed { failures: 0 });
        assert_eq!(decide(&s, t, HOUR, &p), Decision::Sync);
    }

    #[test]
    fn an_idle_repository_is_not_probed() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        let mut s = session(0, Some(t - 31 * DAY_MS), None, 5);
        s.last_failure_at = Some(t - 2 * HOUR);
        assert!(matches!(decide(&s, t, HOUR, &p), Decision::Idle { .. }));
    }
}
