//! How an etcd lock is extended and released: the provider's [`Lease`].
//!
//! - `extend`: a new lease of `at_most` (whole seconds), then one transaction that puts the
//!   `held` key on it where the record still carries the token and the `held` key is the
//!   token's (the cluster has not ended the lock).
//! - `unlock`: one read of the lock's keys (for `locked_at` and `locked_until`), then one
//!   transaction: the `held` key deleted, or, while `lock_at_least_for` (or the newest lease's
//!   own "at least") still holds, put again on a new lease of the time that remains.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use futures_util::future::BoxFuture;
use shedlock::Result;
use shedlock::lease::Lease;

use crate::read::{Record, parse_micros};
use crate::{Inner, Kind, micros, micros_of, pad};

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
        let until = now_us.saturating_add(micros(at_most));
        let txn = Txn::new()
            .when(self.held_by(name, token, now_us))
            .and_then([TxnOp::put(
                self.key(Kind::Held, name),
                pad(until),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let answer = self.txn(txn, || format!("extend lock {name:?}")).await;
        let extended = matches!(&answer, Ok(a) if a.succeeded());
        if !extended {
            // Nothing was put on it.
            self.revoke_later(lease);
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
        let names = [name.to_owned()];
        let keys = self.read_keys(&names).await?.pop().unwrap_or_default();
        let Some(record_kv) = keys.record else {
            return Ok(false);
        };
        if record_kv.mod_revision() != token {
            return Ok(false);
        }
        let held = match keys.held {
            Some(held) if held.create_revision() == token => held,
            // The cluster has ended it already: nothing more to release.
            _ => return Ok(true),
        };
        let now_us = micros_of(self.now());
        let at = Record::parse(record_kv.value())
            .map(|r| r.at)
            .unwrap_or(now_us);
        let until = parse_micros(held.value()).unwrap_or(now_us);
        let keep = (at.saturating_add(micros(at_least)))
            .max(until.saturating_sub(micros(slack)))
            .max(now_us);
        let held_key = self.key(Kind::Held, name);
        let guard = [
            Compare::mod_revision(self.key(Kind::Record, name), CompareOp::Equal, token),
            Compare::create_revision(held_key.clone(), CompareOp::Equal, token),
        ];
        let operation = || format!("unlock lock {name:?}");
        if keep <= now_us {
            let txn = Txn::new()
                .when(guard)
                .and_then([TxnOp::delete(held_key, None)]);
            let answer = self.txn(txn, operation).await?;
            return Ok(answer.succeeded() || self.still_carries(name, token).await?);
        }
        let remaining = Duration::from_micros((keep - now_us).unsigned_abs());
        let lease = self.grant(remaining).await?;
        let txn = Txn::new().when(guard).and_then([TxnOp::put(
            held_key,
            pad(keep),
            Some(PutOptions::new().with_lease(lease)),
        )]);
        let answer = self.txn(txn, operation).await?;
        if answer.succeeded() {
            return Ok(true);
        }
        self.revoke_later(lease);
        self.still_carries(name, token).await
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
}
