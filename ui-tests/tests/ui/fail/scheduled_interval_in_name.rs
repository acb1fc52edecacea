// The `Interval` parameter, which the scheduler fills for each run, cannot name the lock: a job
// keeps one name across its runs. Two `Interval` parameters are refused too.
use shedlock::scheduler::Interval;
use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "0 0 * * * *")]
#[scheduler_lock(name = "export_{covers}", lock_at_most_for = "1m")]
async fn export(covers: Interval) {
    let _ = covers;
}

#[scheduled(cron = "0 0 * * * *")]
#[scheduler_lock(name = "twice", lock_at_most_for = "1m")]
async fn twice(a: Interval, b: Interval) {
    let _ = (a, b);
}

fn main() {}
