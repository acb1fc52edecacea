//! Issue 50: the ledger of due ticks and its alerts, in one test binary (one link instead of
//! three): `fleet_down.rs` (a fleet killed, down and started again, a deploy that drops a job),
//! `alerts.rs` (each deadline raised once fleet-wide, recovered, dead-lettered),
//! `alert_kills.rs` (an alert delivered through a `kill -9` of its sender), `overrides.rs` (a
//! job's promises set by an operator in the store, applied fleet-wide), `deploys.rs` (two
//! instances carrying different jobs: every tick of the job only one carries runs). On every
//! store.
#![allow(missing_docs)]

mod alert_kills;
mod alerts;
mod deploys;
mod fleet_down;
mod overrides;

use std::time::Duration;

use shedlock::{Job, LockConfiguration, LockContext, Schedule};

/// Job `name` on `cron` (UTC) under a lock of its name (held at most 60 s): its body waits
/// `body`, then fails (`fails`) or succeeds. The jobs whose deadlines `alerts.rs` and
/// `overrides.rs` break.
fn locked(name: &str, cron: &str, body: Duration, fails: bool) -> Job {
    let lock = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
    Job::locked(
        name,
        Schedule::parse(cron, "UTC").unwrap(),
        lock,
        move |_: LockContext| async move {
            tokio::time::sleep(body).await;
            if fails {
                Err::<(), String>("the upstream said no".to_owned())
            } else {
                Ok(())
            }
        },
    )
}
