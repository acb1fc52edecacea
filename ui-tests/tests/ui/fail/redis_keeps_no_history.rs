// Redis keeps no run history: giving a RedisLockProvider to the scheduler's history option is a
// compile error (RedisLockProvider implements no RunStore), not an error at run time.
use std::time::Duration;

use shedlock::{Scheduler, scheduler::RunHistory};
use shedlock_redis::{RedisLockProvider};

async fn build() -> shedlock::Result<()> {
    let provider = RedisLockProvider::connect("redis://127.0.0.1:6379").await?;
    let _scheduler = Scheduler::builder(provider)
        .history(RunHistory::keep_for(Duration::from_secs(3600)))
        .build();
    Ok(())
}

fn main() {
    drop(build());
}
