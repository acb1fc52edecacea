// A bad duration under `#[scheduled]` is one error, on the duration: `job()` does not call the
// function whose signature the failed `#[scheduler_lock]` left as written (no E0271).
use shedlock::{scheduled, scheduler_lock};

#[scheduled(cron = "0 0 * * * *")]
#[scheduler_lock(name = "job_{id}", lock_at_most_for = "half an hour")]
async fn job(id: u32) -> Result<(), String> {
    let _ = id;
    Ok(())
}

fn main() {
    let _ = job::job(1);
}
