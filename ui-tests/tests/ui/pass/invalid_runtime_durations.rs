// End to end on a temporary SQLite file: a duration given as an expression is validated on each
// call exactly as `LockConfiguration::new` validates it. An invalid one makes the call return
// the library's error, naming the lock and the problem, without running the body; a valid one
// (rounded up to whole milliseconds first) runs it under the lock.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shedlock::{Error, SqliteLockProvider, TaskResult, scheduler_lock, with_provider};

static RUNS: AtomicUsize = AtomicUsize::new(0);

#[scheduler_lock(
    name = "ui_runtime_{id}",
    lock_at_most_for = most,
    lock_at_least_for = least
)]
async fn job(id: u32, most: Duration, least: Duration) -> u32 {
    RUNS.fetch_add(1, Ordering::SeqCst);
    id * 2
}

// The literal is checked at compile time; whether `least` exceeds it, on each call.
#[scheduler_lock(name = "ui_mixed", lock_at_most_for = "1m", lock_at_least_for = least)]
async fn mixed(least: Duration) {
    RUNS.fetch_add(1, Ordering::SeqCst);
}

#[tokio::main(flavor = "current_thread")]
pub(crate) async fn main() -> shedlock::Result<()> {
    let dir = std::env::temp_dir().join(format!("shedlock-ui-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("locks.db");
    let provider = SqliteLockProvider::connect(path.to_str().unwrap()).await?;
    provider.migrate().await?;
    const MINUTE: Duration = Duration::from_secs(60);

    with_provider(provider, async {
        let err = job(1, Duration::ZERO, Duration::ZERO).await.unwrap_err();
        assert!(
            matches!(&err, Error::ZeroLockAtMostFor { name } if name == "ui_runtime_1"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "invalid lock configuration for \"ui_runtime_1\": `lock_at_most_for` must be \
             greater than zero (got 0s)"
        );

        let err = job(2, MINUTE, 2 * MINUTE).await.unwrap_err();
        assert!(
            matches!(&err, Error::LockAtLeastForExceedsAtMostFor { name, .. } if name == "ui_runtime_2"),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "invalid lock configuration for \"ui_runtime_2\": `lock_at_least_for` (2m) must \
             not exceed `lock_at_most_for` (1m)"
        );

        let err = mixed(MINUTE + Duration::from_millis(1)).await.unwrap_err();
        assert!(
            matches!(&err, Error::LockAtLeastForExceedsAtMostFor { name, .. } if name == "ui_mixed"),
            "{err:?}"
        );

        let err = job(3, shedlock::settings::MAX_LOCK_DURATION + MINUTE, Duration::ZERO)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::DurationTooLong { field: "lock_at_most_for", .. }),
            "{err:?}"
        );

        assert_eq!(RUNS.load(Ordering::SeqCst), 0, "no body ran");

        // Valid: 1m 1500us and 1m 2ms both round up to 1m 2ms; and `least` may equal the
        // literal.
        let most = MINUTE + Duration::from_micros(1500);
        let ran = job(4, most, MINUTE + Duration::from_millis(2)).await;
        assert!(matches!(ran, Ok(TaskResult::Executed(8))), "{ran:?}");
        let ran = mixed(MINUTE).await;
        assert!(matches!(ran, Ok(TaskResult::Executed(()))), "{ran:?}");
        assert_eq!(RUNS.load(Ordering::SeqCst), 2);
    })
    .await;
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
