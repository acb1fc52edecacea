// A 5-field cron expression (minute precision) and the default time zone, UTC.
use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "30 2 * * MON-FRI")]
#[scheduler_lock(name = "cleanup", lock_at_most_for = "PT10M", lock_at_least_for = "1m")]
async fn cleanup() {}

pub(crate) fn main() {
    let job = cleanup::job();
    assert_eq!(job.name(), "cleanup");
    let from = "2026-01-02T00:00:00Z".parse().unwrap();
    let next = job.schedule().next_after(from).unwrap();
    assert_eq!(next.to_rfc3339(), "2026-01-02T02:30:00+00:00");
}
