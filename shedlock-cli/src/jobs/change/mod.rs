//! The commands that change a schedule: `pause`, `resume`, `trigger`, `reschedule`, `reset`,
//! `create`, `delete`. Each writes through [`ScheduleStore`](shedlock::schedules::ScheduleStore)
//! as `cli:<user>@<host>` and prints what it did (`--json`: one object).
//!
//! `pause.rs` holds `pause` and `resume`, `reschedule.rs` `trigger`, `reschedule` and `reset`,
//! `create.rs` `create` and `delete`; this file what they share.

mod create;
mod pause;
mod reschedule;

pub(crate) use create::{create, delete};
pub(crate) use pause::{pause, resume};
pub(crate) use reschedule::{reschedule, reset, trigger};

use std::time::Duration;

use serde_json::Value;
use shedlock::schedules::{RetryPolicy, ScheduleChange};

use super::FLEET_SCHEDULE;
use crate::args::{DEFAULT_RETRY_BACKOFF, DEFAULT_RETRY_CAP, Setting, TuningArgs};
use crate::failure::Failure;
use crate::output::{human, pretty, print};

/// How many ticks `reschedule` and `create` show.
const SHOWN_TICKS: usize = 3;

fn print_json(value: &Value) {
    print(&format!("{}\n", pretty(value)));
}

/// The job's name, or the fleet's schedule with `--fleet`.
fn target(name: Option<&str>, fleet: bool) -> &str {
    if fleet {
        FLEET_SCHEDULE
    } else {
        name.unwrap_or(FLEET_SCHEDULE)
    }
}

/// `--jitter`, `--retry …` and `--no-retry` as a change of the stored schedule. `create` is
/// true for `create`, where there is no code's value to go back to.
fn tuning_change(
    args: &TuningArgs,
    change: &mut ScheduleChange,
    create: bool,
) -> Result<(), Failure> {
    let no_default = |flag: &str| {
        Failure::Usage(format!(
            "{flag} default: a job created at run time has no code to take a default from; \
             leave {flag} out instead"
        ))
    };
    match args.jitter {
        Some(Setting::Set(jitter)) => change.jitter = Some(Some(jitter)),
        Some(Setting::Default) if create => return Err(no_default("--jitter")),
        Some(Setting::Default) => change.jitter = Some(None),
        None => {}
    }
    if args.no_retry {
        change.retry = Some(Some(RetryPolicy::new(1, Duration::ZERO, Duration::ZERO)));
    }
    match args.retry {
        Some(Setting::Set(attempts)) => {
            let base = args.retry_backoff.unwrap_or(DEFAULT_RETRY_BACKOFF);
            let cap = args.retry_cap.unwrap_or(DEFAULT_RETRY_CAP.max(base));
            if cap < base {
                return Err(Failure::Usage(format!(
                    "--retry-cap {} is shorter than --retry-backoff {}: the cap bounds every \
                     retry's delay, so it must be at least the backoff",
                    human(cap, true),
                    human(base, true)
                )));
            }
            let policy =
                RetryPolicy::new(attempts, base, cap).past_next_tick(args.retry_past_next_tick);
            change.retry = Some(Some(policy));
        }
        Some(Setting::Default) if create => return Err(no_default("--retry")),
        Some(Setting::Default) => {
            if args.retry_backoff.is_some() || args.retry_cap.is_some() || args.retry_past_next_tick
            {
                return Err(Failure::Usage(
                    "--retry default goes back to the code's retry policy: it takes no \
                     --retry-backoff, --retry-cap or --retry-past-next-tick"
                        .into(),
                ));
            }
            change.retry = Some(None);
        }
        None => {}
    }
    match args.overlap {
        Some(Setting::Set(policy)) => change.overlap = Some(Some(policy.to_string())),
        Some(Setting::Default) if create => return Err(no_default("--overlap")),
        Some(Setting::Default) => change.overlap = Some(None),
        None => {}
    }
    Ok(())
}
