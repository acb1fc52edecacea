use shedlock::scheduler_lock;

#[scheduler_lock(name = "job", lock_at_most_for = "P1M")]
async fn job() {}

fn main() {}
