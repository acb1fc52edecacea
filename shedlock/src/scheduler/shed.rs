//! Past capacity (ADR 0013): which ticks are on time, how many claims of a tick's jobs a
//! scheduler has in flight, a tick's deadline, and the shedding of claims that waited past
//! it; and [`NextTicks`], the schedule evaluations the timer and the deadline share.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::capacity::Slot;
use super::job::{MisfirePolicy, bump};
use super::registry::JobState;
use super::state::Inner;
use crate::config::LockConfiguration;
use crate::cron::Schedule;
use crate::history::RunOutcome;
use crate::observe::RunInfo;

/// Whether the ticks fired are due now or missed ones caught up: only an on-time tick's claim
/// is shed when it waited past its deadline (see [`CLAIMS_IN_FLIGHT`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    /// Fired by the timer at its tick.
    OnTime,
    /// A missed tick, run late on purpose (the misfire policy, a backlog, a slot freed).
    Missed,
    /// The other instances' jobs of an on-time tick, helped with: past the deadline they are
    /// dropped without being counted here (their owners count them).
    Help,
}

/// Claims of many ticks at once ([`LockProvider::lock_many`](crate::LockProvider::lock_many))
/// one scheduler has in flight. A claim past them waits; if it waited (or was fired late, see
/// [`SOONEST_DEADLINE`]), the jobs of an on-time tick whose deadline passed meanwhile are shed:
/// not run here, counted in [`JobStats::misfires_skipped`](crate::scheduler::JobStats::misfires_skipped)
/// and the [`metric_names::SHED`](crate::metric_names::SHED) counter. A tick's deadline is
/// half-way to the job's next tick (500 ms for a job due every second). So an instance past its
/// capacity runs what it can on time and drops the rest, instead of queueing claims that make
/// every later tick later still.
pub(super) const CLAIMS_IN_FLIGHT: usize = 2;

/// How long after its tick a claim is checked against its jobs' deadlines even when it did
/// not wait for [`CLAIMS_IN_FLIGHT`]: a timer that fires late (its runtime, or the machine,
/// past its CPU) sheds the ticks whose deadline passed as a queued claim does. Cron ticks are
/// whole seconds apart, so no deadline comes sooner than this; before it nothing is checked.
pub(super) const SOONEST_DEADLINE: chrono::TimeDelta = chrono::TimeDelta::milliseconds(500);

/// A job of a claim: its state, its slot of the run limit, and the configuration to send.
pub(super) type ToClaim = (Arc<JobState>, Option<Slot>, LockConfiguration);

/// The deadline of `tick` for `jobs`: half-way to the earliest of their next ticks (the tick
/// itself when one has none).
pub(super) fn deadline_of(tick: DateTime<Utc>, jobs: &[Arc<JobState>]) -> DateTime<Utc> {
    let mut next_ticks = NextTicks::default();
    jobs.iter()
        .map(|job| {
            next_ticks
                .after(job.job.schedule(), tick)
                .map_or(tick, |next| tick + (next - tick) / 2)
        })
        .min()
        .unwrap_or(tick)
}

/// Of the jobs of an on-time `tick` whose claim waited for [`CLAIMS_IN_FLIGHT`] (or was
/// fired more than [`SOONEST_DEADLINE`] after it), those still
/// within their deadline (half-way to their next tick), and those under
/// [`MisfirePolicy::All`] (every tick of theirs runs, late if need be). The others are shed:
/// counted as missed, their slots of the run limit freed, one line logged for them all.
pub(super) fn shed_late(
    inner: &Inner,
    tick: DateTime<Utc>,
    jobs: Vec<ToClaim>,
    due: Due,
) -> Vec<ToClaim> {
    let now = inner.clock.now();
    let mut next_ticks = NextTicks::default();
    let (mut kept, mut shed) = (Vec::with_capacity(jobs.len()), 0usize);
    for job in jobs {
        let state = &job.0;
        let late = next_ticks
            .after(state.job.schedule(), tick)
            .is_none_or(|next| now > tick + (next - tick) / 2);
        if late && inner.misfire.policy(state) != MisfirePolicy::All {
            shed += 1;
            if due == Due::Help {
                continue; // the owner's to count
            }
            bump(&state.counters.misfires_skipped);
            metrics::counter!(crate::metric_names::SHED, "job" => state.job.name().to_owned())
                .increment(1);
            report_shed(inner, state, tick, now);
        } else {
            kept.push(job);
        }
    }
    if shed > 0 && due == Due::Help {
        tracing::debug!(%tick, jobs = shed, "fleet: past the deadline, not helping with the others' jobs");
    } else if shed > 0 {
        let late = (now - tick).to_std().unwrap_or_default();
        tracing::warn!(%tick, jobs = shed, late = %humantime::format_duration(round_ms(late)),
            "past capacity: these jobs' deadline (half-way to their next tick) passed before their claim could be sent (it waited for earlier claims, or the timer fired late); not run here, counted as missed");
    }
    kept
}

/// Tells the listeners and the history (with skips on) that `state`'s `tick` was shed.
fn report_shed(inner: &Inner, state: &JobState, tick: DateTime<Utc>, now: DateTime<Utc>) {
    let info = RunInfo {
        lock: state.lock().map(|lock| lock.name().to_owned()),
        ..RunInfo::fired(state.job.name(), tick, now)
    };
    inner.report_skip(info, RunOutcome::SkippedShed);
}

/// `d` to whole milliseconds, for a log line.
fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// Next ticks computed once per schedule and instant: the jobs planned together mostly share
/// a few schedules (1,000 jobs on one expression are one evaluation, not 1,000 of ~20 µs that
/// would hold the runtime's thread for 20 ms after each tick).
#[derive(Default)]
pub(super) struct NextTicks(HashMap<ScheduleAt, Option<DateTime<Utc>>>);

/// A schedule (its expression and time zone) and the instant its next tick is asked after.
type ScheduleAt = (Arc<str>, Tz, DateTime<Utc>);

impl NextTicks {
    pub(super) fn after(
        &mut self,
        schedule: &Schedule,
        instant: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        if schedule.time_rules().is_some() {
            return schedule.next_due_after(instant);
        }
        *self
            .0
            .entry((schedule.shared_expression(), schedule.time_zone(), instant))
            .or_insert_with(|| schedule.next_after(instant))
    }
}
