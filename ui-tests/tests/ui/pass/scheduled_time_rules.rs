// Calendars, what becomes of an excluded tick, a start, an end and a most number of runs: each
// checked at compile time and given to the job as its time rules, the instants read at compile
// time (an offset other than UTC is the same instant in UTC).
use shedlock::schedules::{MAX_RUNS, OnExcluded, TimeRules};
use shedlock::{scheduled, scheduler_lock};

#[scheduled(
    cron = "0 0 9 * * MON-FRI",
    time_zone = "Asia/Seoul",
    exclude = ["kr-holidays", "company.offsite_2026"],
    on_excluded = "next",
    start = "2026-12-01T09:00:00+09:00",
    end = "2027-06-30T23:59:59.5Z",
    max_runs = 10_000,
)]
#[scheduler_lock(name = "payroll", lock_at_most_for = "30m")]
async fn payroll() {}

#[scheduled(cron = "0 0 * * *", exclude = "us-holidays")]
#[scheduler_lock(name = "report", lock_at_most_for = "30m")]
async fn report() {}

pub(crate) fn main() {
    let job = payroll::job();
    let start = "2026-12-01T00:00:00Z".parse().unwrap();
    let end = "2027-06-30T23:59:59.500Z".parse().unwrap();
    let expected = TimeRules::new()
        .exclude("kr-holidays")
        .exclude("company.offsite_2026")
        .on_excluded(OnExcluded::Next)
        .start(start)
        .end(end)
        .max_runs(MAX_RUNS);
    assert_eq!(job.code_time_rules(), Some(&expected));
    assert!(expected.check("payroll").is_ok());

    let expected = TimeRules::new().exclude("us-holidays");
    assert_eq!(report::job().code_time_rules(), Some(&expected));
}
