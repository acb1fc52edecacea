// A `#[scheduled]` function may ask for the span its run covers: `job(…)` takes the other
// parameters only, and the function itself keeps every parameter for a call by hand.
use shedlock::scheduler::Interval;
use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "0 0 * * * *")]
#[scheduler_lock(name = "export_{region}", lock_at_most_for = "1m")]
async fn export(region: String, covers: Interval) -> Result<(), String> {
    let _ = (region, covers);
    Ok(())
}

#[scheduled(cron = "0 0 * * * *")]
#[scheduler_lock(name = "alone", lock_at_most_for = "1m")]
async fn alone(covers: Interval) {
    let _ = covers;
}

pub(crate) fn main() {
    let _: shedlock::Job = export::job("eu".to_owned());
    let _: shedlock::Job = alone::job();
    let _ = export("eu".to_owned(), Interval::new(None, chrono::Utc::now()));
}
