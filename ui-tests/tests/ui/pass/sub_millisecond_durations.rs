// Durations are rounded up to whole milliseconds before they are compared, as at run time:
// 1500us and 2ms are both 2 ms, so lock_at_least_for does not exceed lock_at_most_for.
use shedlock::scheduler_lock;

#[scheduler_lock(name = "a", lock_at_most_for = "1500us", lock_at_least_for = "2ms")]
async fn a() {}

#[scheduler_lock(name = "b", lock_at_most_for = "1ns")]
async fn b() {}

pub(crate) fn main() {
    let _ = (a, b);
}
