// `?` and `return` in the body infer against the declared return type.
use shedlock::{TaskResult, scheduler_lock};

fn parse(text: &str) -> Result<usize, String> {
    text.parse()
        .map_err(|e: std::num::ParseIntError| e.to_string())
}

#[scheduler_lock(name = "count_{text}", lock_at_most_for = "30m")]
async fn count(text: String) -> Result<usize, String> {
    if text.is_empty() {
        return Err("empty".to_owned());
    }
    let n = parse(&text)?;
    Ok(n * 2)
}

async fn caller() -> shedlock::Result<()> {
    let _: TaskResult<Result<usize, String>> = count("21".to_owned()).await?;
    Ok(())
}

pub(crate) fn main() {
    let _ = caller;
}
