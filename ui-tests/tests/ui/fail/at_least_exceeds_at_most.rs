use shedlock::scheduler_lock;

#[scheduler_lock(name = "job", lock_at_most_for = "PT30M", lock_at_least_for = "1h")]
async fn job() {}

fn main() {}
