use shedlock::scheduler_lock;

#[scheduler_lock(name = "job", lock_at_most_for = "0s")]
async fn job() {}

fn main() {}
