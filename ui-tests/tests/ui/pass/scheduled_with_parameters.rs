// `#[scheduled]` above `#[scheduler_lock]`: `repo_sync::job(42)` is a `shedlock::Job` named
// after its lock filled in (`repo_sync_42`), and the function stays callable by hand.
use shedlock::{Job, TaskResult, scheduled, scheduler_lock};

#[scheduled(cron = "0 */15 * * * *", time_zone = "Europe/Berlin")]
#[scheduler_lock(name = "repo_sync_{repository_id}", lock_at_most_for = "30m")]
pub async fn repo_sync(repository_id: u64, label: String) -> Result<usize, String> {
    Ok(repository_id as usize + label.len())
}

async fn by_hand() -> shedlock::Result<TaskResult<Result<usize, String>>> {
    repo_sync(7, "hand".to_owned()).await
}

pub(crate) fn main() {
    let job: Job = repo_sync::job(42, "main".to_owned());
    assert_eq!(job.name(), "repo_sync_42");
    let renamed = repo_sync::job(7, "other".to_owned()).named("sync_seven");
    assert_eq!(renamed.name(), "sync_seven");
    let _ = by_hand;
}
