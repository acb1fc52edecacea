// Methods keep their receiver; the name may use the other parameters.
use shedlock::{TaskResult, scheduler_lock};

struct Indexer {
    shards: Vec<String>,
}

impl Indexer {
    #[scheduler_lock(name = "reindex_{shard}", lock_at_most_for = "1h")]
    async fn reindex(&self, shard: usize) -> Option<String> {
        self.shards.get(shard).cloned()
    }

    #[scheduler_lock(name = "drain", lock_at_most_for = "1h")]
    async fn drain(mut self) -> Vec<String> {
        std::mem::take(&mut self.shards)
    }
}

async fn caller(indexer: Indexer) -> shedlock::Result<()> {
    let _: TaskResult<Option<String>> = indexer.reindex(3).await?;
    let _: TaskResult<Vec<String>> = indexer.drain().await?;
    Ok(())
}

pub(crate) fn main() {
    let _ = caller;
}
