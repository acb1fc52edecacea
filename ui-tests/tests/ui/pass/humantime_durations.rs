// humantime durations.
use shedlock::scheduler_lock;

#[scheduler_lock(name = "a", lock_at_most_for = "1h 30m", lock_at_least_for = "500ms")]
async fn a() {}

#[scheduler_lock(name = "b", lock_at_most_for = "2days", lock_at_least_for = "1h30m")]
async fn b() {}

pub(crate) fn main() {
    let _ = (a, b);
}
