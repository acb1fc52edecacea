use shedlock::scheduler_lock;

#[scheduler_lock(name = "report\u{202e}txt.exe", lock_at_most_for = "30m")]
async fn job() {}

fn main() {}
