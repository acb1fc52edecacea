use shedlock::scheduler_lock;

#[scheduler_lock(name = "job", lock_at_most_for = "half an hour")]
async fn job() {}

fn main() {}
