//! Schedules kept in the store ([`ScheduleStore`]): versions strictly increasing and seen in
//! order, tombstones, refusals that write nothing, overrides, concurrent writers read by a
//! poller that misses nothing, and the "run now" requests with their leases. Run by
//! [`schedule_suite!`](macro@crate::schedule_suite) on every store that keeps schedules.
//!
//! `versions.rs` holds the single writes and their versions, `batch.rs` the batch create,
//! `triggers.rs` the "run now" requests, `fleet.rs` the fleet's registered jobs, `failures.rs`
//! the calls on lost sessions or a table not migrated, `limits.rs` the names, payloads and numbers a store refuses to make; this file the jobs
//! they write.

mod batch;
mod failures;
mod fleet;
mod limits;
mod triggers;
mod versions;

pub use batch::*;
pub use failures::*;
pub use fleet::*;
pub use limits::*;
pub use triggers::*;
pub use versions::*;

use shedlock::schedules::NewSchedule;

/// A run-time job `name` for handler `sync`, every minute.
fn job(name: &str) -> NewSchedule {
    NewSchedule::job(
        name,
        "sync",
        r#"{"repository_id": 42}"#,
        "0 * * * * *",
        None,
    )
}

/// A run-time job without a cron expression.
fn without_cron() -> NewSchedule {
    let mut s = NewSchedule::job("x", "sync", "{}", "0 * * * * *", None);
    s.fields.cron = None;
    s
}
