use shedlock::scheduler_lock;

#[scheduler_lock(name = "repo_sync_{repo_id}", lock_at_most_for = "30m")]
async fn sync(repository_id: u64, force: bool) {
    let _ = (repository_id, force);
}

fn main() {}
