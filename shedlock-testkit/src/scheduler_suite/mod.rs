//! The scheduler and keep-alive tests, written once, in a file per topic, and run on every
//! backend by [`scheduler_suite!`](macro@crate::scheduler_suite).
//!
//! A case takes `&Arc<D>`: it hands the database to jobs and tasks that outlive a borrow.

use std::time::Duration;

mod batch;
mod claims;
mod clock;
mod fleet;
mod keep_alive;
mod leader;
mod overlap;
mod runs;

pub use batch::*;
pub use claims::*;
pub use clock::*;
pub use fleet::*;
pub use keep_alive::*;
pub use leader::*;
pub use overlap::*;
use runs::recording_job;
pub use runs::*;

const MS: Duration = Duration::from_millis(1);

/// Polls `pred` every 100 ms until it holds or `within` passes; whether it held.
pub async fn eventually(within: Duration, mut pred: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if pred().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(100 * MS).await;
    }
}
