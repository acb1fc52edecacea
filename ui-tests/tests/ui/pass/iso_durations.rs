// ISO-8601 durations, as Java's `Duration.parse` writes them.
use shedlock::scheduler_lock;

#[scheduler_lock(name = "a", lock_at_most_for = "PT30M", lock_at_least_for = "PT0.5S")]
async fn a() {}

#[scheduler_lock(name = "b", lock_at_most_for = "P1DT2H", lock_at_least_for = "PT1H30M")]
async fn b() {}

#[scheduler_lock(name = "c", lock_at_most_for = "P365000D", lock_at_least_for = "pt10s")]
async fn c() {}

pub(crate) fn main() {
    let _ = (a, b, c);
}
