//! How an etcd lock is extended and released: the provider's [`Lease`].
//!
//! - `extend`: a new lease of `at_most` (whole seconds), then one transaction that puts the
//!   `held` key on it where the record still carries the token and the `held` key is the
//!   token's (the cluster has not ended the lock).
//! - `unlock`: one read of the lock's keys (for `locked_at` and `locked_until`), then one
//!   transaction: the `held` key deleted, or, while `lock_at_least_for` (or the newest lease's
//!   own "at least") still holds, put again on a new lease of the time that remains (granted
//!   first). The unlocks of a group ([`Releases`]) go the same way together: one read, one
//!   grant per distinct time to keep, one transaction per batch of locks.

use std::time::Duration;

use std::collections::{BTreeMap, BTreeSet};

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use futures_util::future::{BoxFuture, try_join_all};
use shedlock::Result;
use shedlock::lease::{Lease, Releases, Unlock};

use crate::read::{Record, parse_micros};
use crate::{Granted, Inner, Kind, lease_seconds, micros, micros_of, pad};

impl Inner {
    /// The compares that hold while `name` is held by `token`: the record carries it, the
    /// `held` key is its own, and by the application's clock (where it decides) not past.
    fn held_by(&self, name: &str, token: i64, now_us: i64) -> Vec<Compare> {
        let held = self.key(Kind::Held, name);
        let mut when = vec![
            Compare::mod_revision(self.key(Kind::Record, name), CompareOp::Equal, token),
            Compare::create_revision(held.clone(), CompareOp::Equal, token),
        ];
        if self.app_clock() {
            when.push(Compare::value(held, CompareOp::Greater, pad(now_us)));
        }
        when
    }

    async fn extend_lock(&self, name: &str, token: i64, at_most: Duration) -> Result<bool> {
        let now_us = micros_of(self.now());
        let lease = self.grant(at_most).await?;
        let until = self.until(now_us, at_most);
        let txn = Txn::new()
            .when(self.held_by(name, token, now_us))
            .and_then([TxnOp::put(
                self.key(Kind::Held, name),
                pad(until),
                Some(PutOptions::new().with_lease(lease.id)),
            )]);
        let answer = self.txn(txn, || format!("extend lock {name:?}")).await;
        let extended = matches!(&answer, Ok(a) if a.succeeded());
        if !extended {
            // Nothing was put on it.
            self.revoke_later(lease.id);
        }
        Ok(answer?.succeeded())
    }

    async fn unlock_lock(
        &self,
        name: &str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> Result<bool> {
        let unlock = Unlock::new(name, token, at_least, slack);
        let released = self.unlock_group(std::slice::from_ref(&unlock)).await?;
        Ok(released == 1 || self.still_carries(name, token).await?)
    }

    /// Every unlock of `unlocks` (names distinct): one read of their keys (for `locked_at`
    /// and `locked_until`), one lease grant per distinct time still to keep, one transaction
    /// that deletes each `held` key or puts it again on its new lease, a nested transaction per
    /// lock guarded by its token. How many it released (the ones the cluster had ended
    /// already count, as the SQL providers count a row that still carried the token).
    async fn unlock_group(&self, unlocks: &[Unlock]) -> Result<u64> {
        let names: Vec<String> = unlocks.iter().map(|u| u.name.clone()).collect();
        let keys = self.read_keys(&names).await?;
        let now_us = micros_of(self.now());
        let mut already = 0;
        // (unlock, time to keep it until, or none to delete it)
        let mut todo: Vec<(&Unlock, Option<i64>)> = Vec::new();
        for (u, keys) in unlocks.iter().zip(keys) {
            let Some(record_kv) = keys.record else {
                continue;
            };
            if record_kv.mod_revision() != u.token {
                continue;
            }
            let held = match keys.held {
                Some(held) if held.create_revision() == u.token => held,
                _ => {
                    already += 1;
                    continue;
                }
            };
            let at = Record::parse(record_kv.value())
                .map(|r| r.at)
                .unwrap_or(now_us);
            let until = parse_micros(held.value()).unwrap_or(now_us);
            let keep =
                (at.saturating_add(micros(u.at_least))).max(until.saturating_sub(micros(u.slack)));
            todo.push((u, (keep > now_us).then_some(keep)));
        }
        if todo.is_empty() {
            return Ok(already);
        }
        let wanted: BTreeSet<i64> = todo
            .iter()
            .filter_map(|(_, keep)| keep.map(|k| lease_seconds(remaining(k, now_us))))
            .collect();
        let granted = try_join_all(
            wanted
                .iter()
                .map(|&s| self.grant(Duration::from_secs(s.unsigned_abs()))),
        )
        .await?;
        let leases: BTreeMap<i64, Granted> = wanted.into_iter().zip(granted).collect();
        let ops: Vec<TxnOp> = todo
            .iter()
            .map(|(u, keep)| {
                let held_key = self.key(Kind::Held, &u.name);
                let op = match keep {
                    None => TxnOp::delete(held_key.clone(), None),
                    Some(keep) => {
                        let lease = leases[&lease_seconds(remaining(*keep, now_us))];
                        let until = *keep;
                        TxnOp::put(
                            held_key.clone(),
                            pad(until),
                            Some(PutOptions::new().with_lease(lease.id)),
                        )
                    }
                };
                TxnOp::txn(
                    Txn::new()
                        .when([
                            Compare::mod_revision(
                                self.key(Kind::Record, &u.name),
                                CompareOp::Equal,
                                u.token,
                            ),
                            Compare::create_revision(held_key, CompareOp::Equal, u.token),
                        ])
                        .and_then([op]),
                )
            })
            .collect();
        let mut released = already;
        for chunk in ops.chunks(self.batch()) {
            let answer = self
                .txn(Txn::new().and_then(chunk.to_vec()), || match unlocks {
                    [one] => format!("unlock lock {:?}", one.name),
                    many => format!("release {} locks in one transaction", many.len()),
                })
                .await?;
            released += answer
                .op_responses()
                .iter()
                .filter(|r| matches!(r, TxnOpResponse::Txn(t) if t.succeeded()))
                .count() as u64;
        }
        Ok(released)
    }

    /// Whether the record of `name` still carries `token` (a transaction that lost a race with
    /// the cluster ending the lock still released it).
    async fn still_carries(&self, name: &str, token: i64) -> Result<bool> {
        let txn = Txn::new().when([Compare::mod_revision(
            self.key(Kind::Record, name),
            CompareOp::Equal,
            token,
        )]);
        let answer = self
            .txn(txn, || format!("check the token of lock {name:?}"))
            .await?;
        Ok(answer.succeeded())
    }
}

impl Lease for Inner {
    fn extend<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_most: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.extend_lock(name, token, at_most))
    }

    fn unlock<'a>(
        &'a self,
        name: &'a str,
        token: i64,
        at_least: Duration,
        slack: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.unlock_lock(name, token, at_least, slack))
    }

    fn unlock_many<'a>(&'a self, unlocks: &'a [Unlock]) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.unlock_group(unlocks))
    }

    fn releases(&self) -> Option<&Releases> {
        Some(&self.releases)
    }
}

/// The time from `now_us` to `keep` (later).
fn remaining(keep: i64, now_us: i64) -> Duration {
    Duration::from_micros(keep.saturating_sub(now_us).unsigned_abs())
}
