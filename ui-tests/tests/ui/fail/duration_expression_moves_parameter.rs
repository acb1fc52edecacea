// A duration expression runs before the body, in the same scope: moving a parameter there
// takes it from the body. Borrow it instead (`lock_at_most_for(&settings)`).
use std::time::Duration;

use shedlock::scheduler_lock;

struct Settings {
    lock_at_most_for: Duration,
    label: String,
}

fn lock_at_most_for(settings: Settings) -> Duration {
    settings.lock_at_most_for
}

#[scheduler_lock(name = "a", lock_at_most_for = lock_at_most_for(settings))]
async fn a(settings: Settings) -> String {
    settings.label
}

fn main() {}
