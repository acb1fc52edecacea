use shedlock::{scheduled, scheduler_lock};

#[scheduler_lock(name = "job", lock_at_most_for = "30m")]
#[scheduled(cron = "0 0 * * *")]
async fn job() {}

fn main() {}
