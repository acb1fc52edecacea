// `job` has the function's visibility, and works for a function declared in a function body.
mod jobs {
    use shedlock::{scheduled, scheduler_lock};

    #[scheduled(cron = "0 0 * * *")]
    #[scheduler_lock(name = "public", lock_at_most_for = "1m")]
    pub async fn public() {}

    #[scheduled(cron = "0 0 * * *")]
    #[scheduler_lock(name = "crate_wide", lock_at_most_for = "1m")]
    pub(crate) async fn crate_wide() {}

    #[scheduled(cron = "0 0 * * *")]
    #[scheduler_lock(name = "private", lock_at_most_for = "1m")]
    async fn private() {}

    pub fn all() -> Vec<shedlock::Job> {
        vec![public::job(), crate_wide::job(), private::job()]
    }
}

use jobs::public;

pub(crate) fn main() {
    #[derive(Clone)]
    struct Local(u8);

    #[shedlock::scheduled(cron = "*/5 * * * * *")]
    #[shedlock::scheduler_lock(name = "local_{n}", lock_at_most_for = "1m")]
    async fn local(n: u8, _local: Local) {}

    let jobs = [
        public::job(),
        jobs::crate_wide::job(),
        local::job(1, Local(2)),
    ];
    assert_eq!(jobs.len() + jobs::all().len(), 6);
    let _ = local(3, Local(4));
}
