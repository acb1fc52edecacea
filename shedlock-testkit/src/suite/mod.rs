//! The provider suite: every test written once, generic over the backend, in a file per topic,
//! and run on every backend by [`provider_suite!`](macro@crate::provider_suite).
//!
//! Times are read from the database clock through [`TestDb::row`](crate::TestDb::row); sleeps are
//! generous so a busy machine cannot flip an outcome.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use shedlock::{LockAdmin, LockConfiguration, LockProvider};

mod acquire;
mod admin;
mod batch;
mod connect;
mod contention;
mod fencing;
mod history;
mod release;
mod schedules;
mod tables;
mod ticks;

pub use acquire::*;
pub use admin::*;
pub use batch::*;
pub use connect::*;
pub use contention::*;
pub use fencing::*;
pub use history::*;
pub use release::*;
pub use schedules::*;
pub use tables::*;
pub use ticks::*;

const MS: Duration = Duration::from_millis(1);
const SEC: Duration = Duration::from_secs(1);
const LONG: Duration = Duration::from_secs(60);

fn cfg(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

fn tick(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0).unwrap()
}

/// Whether `provider`'s store can hold a lock as briefly as `lease`
/// ([`LockProvider::shortest_lease`]): a case whose lock of `lease` must end (another instance
/// takes it over, an extend is refused) soon after that is left out, said on stderr, where the
/// store keeps every lock longer.
pub(crate) fn lease_fits<P: LockProvider>(provider: &P, lease: Duration, case: &str) -> bool {
    let shortest = provider.shortest_lease();
    let fits = shortest <= lease;
    if !fits {
        eprintln!(
            "left out: {case} needs a lock of {lease:?} to end; {} holds a lock at least {shortest:?}",
            provider.backend()
        );
    }
    fits
}

/// The statements `provider` sent since `before` ([`TestDb::statements_sent`] then), or `None`
/// where `D` counts none: the count `what` is left out, said on stderr.
pub(crate) fn sent_since<D: crate::TestDb>(
    provider: &D::Provider,
    before: Option<u64>,
    what: &str,
) -> Option<u64> {
    let sent = before
        .zip(D::statements_sent(provider))
        .map(|(b, now)| now - b);
    if sent.is_none() {
        eprintln!(
            "left out: {what}: the TestDb of {} counts no statements",
            D::BACKEND
        );
    }
    sent
}

/// `other` takes lock `c`, held until `held_until` by the database's clock: at once if that
/// clock has passed it already (a slow machine), else once it has (waiting up to 30 s). Asserts
/// that it never gets the lock earlier.
async fn taken_only_after<P: LockAdmin>(
    other: &P,
    c: &LockConfiguration,
    held_until: DateTime<Utc>,
) -> shedlock::LockGuard {
    if let Some(taken) = other.lock(c).await.unwrap() {
        let now = other.lock_state(c.name()).await.unwrap().unwrap();
        assert!(
            now.locked_at >= held_until,
            "taken at {} though held until {held_until}",
            now.locked_at
        );
        return taken;
    }
    assert!(
        wait_until_free(other, c.name()).await,
        "released by {held_until}"
    );
    other
        .lock(c)
        .await
        .unwrap()
        .expect("free once the database's clock passed it")
}

/// Polls (every 100 ms, for up to 30 s) until lock `name` is free by the database's clock.
async fn wait_until_free<P: LockAdmin>(p: &P, name: &str) -> bool {
    for _ in 0..300 {
        if !p
            .lock_state(name)
            .await
            .unwrap()
            .is_some_and(|s| s.is_held())
        {
            return true;
        }
        tokio::time::sleep(100 * MS).await;
    }
    false
}
