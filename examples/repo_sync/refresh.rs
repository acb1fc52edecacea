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
//! **Circuit breaker.** After 5 consecutive failures the scheduled refresh stops for that
//! repository; `sync-now` runs anyway and a success closes the breaker.

use crate::db::Session;

const DAY_MS: i64 = 24 * 60 * 60 * 1000;

/// The thresholds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Idle time after which the interval doubles again.
    pub(crate) doubling_ms: i64,
    /// Idle time after which scheduled refresh stops.
    pub(crate) idle_threshold_ms: i64,
    /// Consecutive failures that open the circuit.
    pub(crate) max_failures: i64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            doubling_ms: 7 * DAY_MS,
            idle_threshold_ms: 30 * DAY_MS,
            max_failures: 5,
        }
    }
}

/// What a scheduled tick does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Sync,
    /// Adaptive refresh: the next sync is due at `next_at_ms`.
    NotDue {
        next_at_ms: i64,
        multiplier: i64,
    },
    /// Idle past the threshold.
    Idle {
        idle_days: i64,
    },
    /// Too many consecutive failures.
    CircuitOpen {
        failures: i64,
    },
}

impl Decision {
    /// Why a tick was skipped, for the run history and `status`.
    pub(crate) fn reason(&self) -> String {
        match self {
            Decision::Sync => "due".into(),
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
            Decision::CircuitOpen { failures } => {
                format!("circuit open after {failures} consecutive failures: run sync-now to retry")
            }
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
    if session.consecutive_failures >= policy.max_failures {
        return Decision::CircuitOpen {
            failures: session.consecutive_failures,
        };
    }
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
            cron: "0 0 * * * *".into(),
            time_zone: "UTC".into(),
            is_active: true,
            collection: "code".into(),
            last_sync_at: last_sync,
            last_synced_commit: None,
            consecutive_failures: failures,
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
    fn five_failures_open_the_circuit() {
        let p = Policy::default();
        let t = 100 * DAY_MS;
        assert_eq!(
            decide(&session(0, Some(t), None, 4), t, HOUR, &p),
            Decision::Sync
        );
        assert_eq!(
            decide(&session(0, Some(t), None, 5), t, HOUR, &p),
            Decision::CircuitOpen { failures: 5 }
        );
        assert!(
            Decision::CircuitOpen { failures: 5 }
                .reason()
                .contains("sync-now")
        );
    }
}
