use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "0 0 * * *", exclude = "kr-holidays", on_excluded = "later")]
#[scheduler_lock(name = "job", lock_at_most_for = "30m")]
async fn job() {}

fn main() {}
