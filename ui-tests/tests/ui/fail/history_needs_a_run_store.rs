// A provider that keeps no run history cannot be given the scheduler's history option: the
// mistake is found when compiling, not by an "unsupported" error in production.
use std::time::Duration;

use futures_util::future::BoxFuture;
use shedlock::{Backend, LockConfiguration, LockGuard, LockProvider, Result, Scheduler};
use shedlock::scheduler::RunHistory;
use shedlock::settings::KeepAlive;

#[derive(Debug)]
struct LocksOnly;

impl LockProvider for LocksOnly {
    fn lock<'a>(&'a self, _: &'a LockConfiguration) -> BoxFuture<'a, Result<Option<LockGuard>>> {
        Box::pin(async { Ok(None) })
    }
    fn is_held<'a>(&'a self, _: &'a str, _: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async { Ok(false) })
    }
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }
    fn table_name(&self) -> &str {
        "locks"
    }
    fn locked_by(&self) -> &str {
        "me"
    }
    fn keep_alive(&self) -> KeepAlive {
        KeepAlive::default()
    }
}

fn main() {
    let _scheduler = Scheduler::builder(LocksOnly)
        .history(RunHistory::keep_for(Duration::from_secs(3600)))
        .build();
}
