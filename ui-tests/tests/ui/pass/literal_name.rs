// A plain literal name; the function now returns `shedlock::Result<TaskResult<()>>`.
use shedlock::{TaskResult, scheduler_lock};

#[scheduler_lock(
    name = "nightly_report",
    lock_at_most_for = "30m",
    lock_at_least_for = "10s"
)]
async fn nightly_report() {}

/// Outer attributes stay outside, inner ones inside.
#[scheduler_lock(name = "attributes", lock_at_most_for = "1m")]
#[allow(clippy::needless_return)]
async fn attributes() -> u8 {
    #![allow(unused_variables)]
    let unused = 1;
    return 2;
}

async fn caller() -> shedlock::Result<()> {
    let outcome: TaskResult<()> = nightly_report().await?;
    let _ = outcome;
    let _: TaskResult<u8> = attributes().await?;
    Ok(())
}

pub(crate) fn main() {
    let _ = caller;
}
