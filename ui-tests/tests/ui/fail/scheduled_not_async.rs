use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "0 0 * * *")]
#[scheduler_lock(name = "job", lock_at_most_for = "30m")]
fn job() {}

fn main() {}
