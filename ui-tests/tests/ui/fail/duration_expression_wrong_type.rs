// A duration expression must be a `std::time::Duration`; the type error points at it.
use std::time::Duration;

use shedlock::scheduler_lock;

const TIMEOUT_SECS: u64 = 1800;

struct Settings {
    lock_at_most_for: Duration,
    retries: u32,
}

#[scheduler_lock(name = "a", lock_at_most_for = TIMEOUT_SECS)]
async fn a() {}

#[scheduler_lock(name = "b", lock_at_most_for = "30m", lock_at_least_for = ctx.retries)]
async fn b(ctx: &Settings) {}

// A reference to a `Duration` is not one: dereference it.
#[scheduler_lock(name = "c", lock_at_most_for = &ctx.lock_at_most_for)]
async fn c(ctx: &Settings) {}

fn main() {}
