use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "0 0 * * *")]
#[scheduler_lock(name = "job", lock_at_most_for = "30m")]
async fn job((a, b): (u8, u8)) {
    let _ = (a, b);
}

fn main() {}
