//! When a schedule write runs again: what it may retry, how often, and the pause before.

use super::super::exec::{connection_lost, lost_a_race};

/// How many times a write runs when its connection was lost or it lost a race.
pub(super) const WRITE_TRIES: u32 = 10;

/// The pause before a write runs again: a random time up to 2^`tries` ms (at most 256 ms), so
/// writers that deadlocked together do not meet again. MySQL's first writers of a new table can
/// each lock the gap where the counter row would be, then insert it, and deadlock: without a
/// pause, one of eight writers lost five times in a row (a CI run).
pub(super) async fn pause_before_again(tries: u32) {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(tries);
    let cap_ms = 1u64 << tries.min(8);
    let ms = hasher.finish() % (cap_ms + 1);
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// Whether a write that failed with `e` had no effect and may run again: its connection was
/// gone, it lost a race (a deadlock, a serialization failure), or two first writers both
/// created the counter row.
pub(super) fn again(e: &sqlx::Error, lost: fn(&dyn sqlx::error::DatabaseError) -> bool) -> bool {
    connection_lost(e, lost)
        || lost_a_race(e)
        || matches!(e, sqlx::Error::Database(db) if db.kind() == sqlx::error::ErrorKind::UniqueViolation)
}
