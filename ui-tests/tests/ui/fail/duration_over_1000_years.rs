use shedlock::scheduler_lock;

#[scheduler_lock(name = "job", lock_at_most_for = "365001d")]
async fn job() {}

fn main() {}
