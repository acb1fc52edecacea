use shedlock::scheduler_lock;

#[scheduler_lock(lock_at_most_for = "30m")]
async fn job() {}

fn main() {}
