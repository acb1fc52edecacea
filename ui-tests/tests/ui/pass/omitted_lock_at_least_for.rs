// `lock_at_least_for` defaults to zero; keys may come in any order.
use shedlock::scheduler_lock;

#[scheduler_lock(lock_at_most_for = "10s", name = "quick")]
async fn quick() {}

pub(crate) fn main() {
    let _ = quick;
}
