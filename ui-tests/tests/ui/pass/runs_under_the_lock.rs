// End to end on a temporary SQLite file: a call runs under its lock (rendered from the
// template), and a second call for the same lock while the first holds it is skipped.
use shedlock::{SqliteLockProvider, TaskResult, scheduler_lock, with_provider};

#[scheduler_lock(name = "ui_{id}", lock_at_most_for = "1m")]
async fn inner(id: u32) -> u32 {
    id * 2
}

#[scheduler_lock(name = "ui_{id}", lock_at_most_for = "1m")]
async fn outer(id: u32) -> shedlock::Result<(TaskResult<u32>, TaskResult<u32>)> {
    Ok((inner(id).await?, inner(id + 1).await?))
}

#[tokio::main(flavor = "current_thread")]
pub(crate) async fn main() -> shedlock::Result<()> {
    let dir = std::env::temp_dir().join(format!("shedlock-ui-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("locks.db");
    let provider = SqliteLockProvider::connect(path.to_str().unwrap()).await?;
    provider.migrate().await?;

    let outcome = with_provider(provider, outer(1)).await?;
    match outcome {
        TaskResult::Executed(Ok((same, other))) => {
            assert!(
                matches!(same, TaskResult::Skipped),
                "ui_1 is held by `outer`"
            );
            assert!(matches!(other, TaskResult::Executed(4)), "ui_2 is free");
        }
        _ => panic!("`outer` should have run"),
    }
    std::fs::remove_dir_all(&dir).ok();
    Ok(())
}
