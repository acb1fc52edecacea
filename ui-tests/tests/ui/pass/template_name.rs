// `{param}` in the name; `{{`/`}}` are literal braces; raw identifiers work.
use shedlock::{TaskResult, scheduler_lock};

#[scheduler_lock(
    name = "repo_sync_{repository_id}_{{{r#type}}}",
    lock_at_most_for = "30m"
)]
pub async fn repo_sync(repository_id: u64, r#type: String) -> usize {
    r#type.len() + repository_id as usize
}

async fn caller() -> shedlock::Result<Option<usize>> {
    Ok(match repo_sync(42, "full".to_owned()).await? {
        TaskResult::Executed(n) => Some(n),
        TaskResult::Skipped => None,
    })
}

pub(crate) fn main() {
    let _ = caller;
}
