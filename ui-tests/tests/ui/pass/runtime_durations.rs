// `lock_at_most_for` and `lock_at_least_for` take any expression of type `Duration`, evaluated
// on each call in the function's scope before the body starts: a parameter's field (through a
// reference, or by value without taking the parameter from the body), a const, a function call
// (awaited too), a field of `self`, one beside a literal, one from a `macro_rules!` fragment,
// and one on a scheduled job.
use std::sync::Arc;
use std::time::Duration;

use shedlock::{TaskResult, scheduled, scheduler_lock};

pub struct Settings {
    pub lock_at_most_for: Duration,
    pub lock_at_least_for: Duration,
    pub label: String,
}

const LOCK_AT_MOST_FOR: Duration = Duration::from_secs(30 * 60);

mod settings {
    use std::time::Duration;

    pub fn lock_at_most_for() -> Duration {
        Duration::from_secs(10 * 60)
    }

    pub async fn load() -> super::Settings {
        super::Settings {
            lock_at_most_for: lock_at_most_for(),
            lock_at_least_for: Duration::ZERO,
            label: "loaded".to_owned(),
        }
    }
}

#[scheduler_lock(
    name = "repo_sync_{repository_id}",
    lock_at_most_for = ctx.lock_at_most_for,
    lock_at_least_for = ctx.lock_at_least_for
)]
async fn from_a_reference(repository_id: u64, ctx: &Settings) -> usize {
    ctx.label.len() + repository_id as usize
}

// Reading a `Copy` field of an owned parameter copies it: the body still owns `ctx`.
#[scheduler_lock(name = "owned", lock_at_most_for = ctx.lock_at_most_for)]
async fn from_an_owned_parameter(ctx: Settings) -> String {
    ctx.label
}

#[scheduler_lock(
    name = "const",
    lock_at_most_for = LOCK_AT_MOST_FOR,
    lock_at_least_for = Duration::from_secs(10)
)]
async fn from_a_const() {}

#[scheduler_lock(name = "call", lock_at_most_for = settings::lock_at_most_for())]
async fn from_a_call() {}

#[scheduler_lock(
    name = "awaited",
    lock_at_most_for = settings::load().await.lock_at_most_for
)]
async fn from_an_awaited_call() {}

// A literal beside an expression is checked alone at compile time; the two are compared on
// each call.
#[scheduler_lock(
    name = "literal_most",
    lock_at_most_for = "30m",
    lock_at_least_for = ctx.lock_at_least_for
)]
async fn literal_most(ctx: &Settings) {}

#[scheduler_lock(
    name = "literal_least",
    lock_at_most_for = ctx.lock_at_most_for,
    lock_at_least_for = "10s"
)]
async fn literal_least(ctx: &Settings) {}

macro_rules! locked {
    ($most:expr) => {
        #[scheduler_lock(name = "from_a_macro", lock_at_most_for = $most)]
        async fn from_a_macro() {}
    };
}
locked!(LOCK_AT_MOST_FOR);

struct Indexer {
    lock_at_most_for: Duration,
    shards: Vec<String>,
}

impl Indexer {
    #[scheduler_lock(name = "reindex_{shard}", lock_at_most_for = self.lock_at_most_for)]
    async fn reindex(&self, shard: usize) -> Option<String> {
        self.shards.get(shard).cloned()
    }

    #[scheduler_lock(name = "grow", lock_at_most_for = self.lock_at_most_for)]
    async fn grow(&mut self, shard: String) -> usize {
        self.shards.push(shard);
        self.shards.len()
    }

    // By value: the field is copied, the body still owns `self`.
    #[scheduler_lock(name = "drain", lock_at_most_for = self.lock_at_most_for)]
    async fn drain(mut self) -> Vec<String> {
        std::mem::take(&mut self.shards)
    }
}

// A scheduled job reads its durations from its (cloned) arguments on each run.
#[scheduled(cron = "0 */15 * * * *")]
#[scheduler_lock(
    name = "scheduled_{id}",
    lock_at_most_for = settings.lock_at_most_for,
    lock_at_least_for = settings.lock_at_least_for
)]
async fn scheduled_sync(id: u64, settings: Arc<Settings>) {
    let _ = (id, &settings.label);
}

async fn caller(ctx: Settings, mut indexer: Indexer) -> shedlock::Result<()> {
    let _: TaskResult<usize> = from_a_reference(42, &ctx).await?;
    let _: TaskResult<()> = from_a_const().await?;
    let _: TaskResult<()> = from_a_call().await?;
    let _: TaskResult<()> = from_an_awaited_call().await?;
    let _: TaskResult<()> = literal_most(&ctx).await?;
    let _: TaskResult<()> = literal_least(&ctx).await?;
    let _: TaskResult<()> = from_a_macro().await?;
    let _: TaskResult<Option<String>> = indexer.reindex(3).await?;
    let _: TaskResult<usize> = indexer.grow("new".to_owned()).await?;
    let _: TaskResult<Vec<String>> = indexer.drain().await?;
    let _: TaskResult<String> = from_an_owned_parameter(ctx).await?;
    let _: shedlock::Job = scheduled_sync::job(
        7,
        Arc::new(Settings {
            lock_at_most_for: LOCK_AT_MOST_FOR,
            lock_at_least_for: Duration::ZERO,
            label: String::new(),
        }),
    );
    Ok(())
}

pub(crate) fn main() {
    let _ = caller;
}
