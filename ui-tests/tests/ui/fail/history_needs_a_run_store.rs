// A provider that keeps no run history cannot be given the scheduler's history option: the
// mistake is found when compiling, not by an "unsupported" error in production.
use std::time::Duration;

use futures_util::future::BoxFuture;
use shedlock::{LockConfiguration, LockGuard, LockProvider, Result, Scheduler};
use shedlock::scheduler::RunHistory;
use shedlock::settings::ProviderSettings;

#[derive(Debug)]
struct LocksOnly(ProviderSettings);

impl LockProvider for LocksOnly {
    fn lock_many<'a>(
        &'a self,
        configs: &'a [LockConfiguration],
    ) -> BoxFuture<'a, Result<Vec<Result<Option<LockGuard>>>>> {
        Box::pin(async move { Ok(configs.iter().map(|_| Ok(None)).collect()) })
    }
    fn is_held<'a>(&'a self, _: &'a str, _: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async { Ok(false) })
    }
    fn settings(&self) -> &ProviderSettings {
        &self.0
    }
}

fn main() {
    let _scheduler = Scheduler::builder(LocksOnly(ProviderSettings::default()))
        .history(RunHistory::keep_for(Duration::from_secs(3600)))
        .build();
}
