use shedlock::{scheduled, scheduler_lock};

struct Repo;

impl Repo {
    #[scheduled(cron = "0 0 * * *")]
    #[scheduler_lock(name = "job", lock_at_most_for = "30m")]
    async fn job(&self) {}
}

fn main() {}
