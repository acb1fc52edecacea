use shedlock::scheduler_lock;

#[scheduler_lock(name = "repo_sync_{repository_id", lock_at_most_for = "30m")]
async fn sync(repository_id: u64) {
    let _ = repository_id;
}

fn main() {}
