use shedlock::scheduler_lock;

#[scheduler_lock(name = "..", lock_at_most_for = "30m")]
async fn job() {}

fn main() {}
