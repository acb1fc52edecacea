use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "0 0 * * *", start = "2026-12-01")]
#[scheduler_lock(name = "job", lock_at_most_for = "30m")]
async fn job() {}

fn main() {}
