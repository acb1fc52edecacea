// Generics, `where` clauses, lifetimes and attributes are kept.
use std::fmt::Display;

use shedlock::{TaskResult, scheduler_lock};

#[scheduler_lock(name = "render_{id}", lock_at_most_for = "1m")]
#[must_use]
pub(crate) async fn render<'a, T, const N: usize>(id: T, parts: &'a [&'a str; N]) -> String
where
    T: Display + Send,
{
    format!("{id}:{}", parts.join(","))
}

#[scheduler_lock(name = "show", lock_at_most_for = "1m")]
async fn show() -> impl Display {
    7
}

async fn caller() -> shedlock::Result<()> {
    let parts = ["a", "b"];
    let _: TaskResult<String> = render(5u8, &parts).await?;
    if let TaskResult::Executed(shown) = show().await? {
        let _ = shown.to_string();
    }
    Ok(())
}

pub(crate) fn main() {
    let _ = caller;
}
