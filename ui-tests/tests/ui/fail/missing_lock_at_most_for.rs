use shedlock::scheduler_lock;

#[scheduler_lock(name = "job")]
async fn job() {}

fn main() {}
