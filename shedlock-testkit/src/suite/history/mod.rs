//! Run history: rows round-trip, filter and prune; runs left `running` are closed as abandoned
//! with the reason, and a finish after such a sweep keeps the real outcome.
//!
//! `rows.rs` holds the round trips and pruning, `abandoned.rs` the sweep of abandoned runs,
//! `pages.rs` the filters, paging and last runs.

mod abandoned;
mod pages;
mod rows;

pub use abandoned::*;
pub use pages::*;
pub use rows::*;
