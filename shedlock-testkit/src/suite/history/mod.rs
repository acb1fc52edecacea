//! Run history: rows round-trip, filter and prune; runs left `running` are closed as abandoned
//! with the reason, and a finish after such a sweep keeps the real outcome.
//!
//! `rows.rs` holds the round trips and pruning, `abandoned.rs` the sweep of abandoned runs,
//! `pages.rs` the filters, paging and last runs. Every case but the pruning one (which ages
//! rows by SQL) runs on each store that keeps a history: the SQL ones and Redis.

mod abandoned;
mod pages;
mod rows;

pub use abandoned::*;
pub use pages::*;
pub use rows::*;

/// How a case about the run history ends on a store that keeps none (the in-memory provider,
/// etcd): said on the test's output, not hidden.
fn no_history<D: crate::db::TestDb>(case: &str) {
    eprintln!(
        "left out: {case} on {}, which keeps no run history",
        D::BACKEND
    );
}
