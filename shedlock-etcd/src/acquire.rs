//! The claim: one transaction for one lock or for up to `max_txn_ops - 8` locks due at one
//! instant, one nested transaction per lock, after one lease grant per distinct
//! `lock_at_most_for`.
//!
//! The nested transaction of lock `n` with tick `t`:
//!
//! ```text
//! if held(n).create_revision == 0            (no holder: the lease ended or was released)
//!    [or, with the application's clock, held(n).value < now]
//! then
//!   if tick(n).value < t  then WRITE
//!   else if tick(n).create_revision == 0 then WRITE     (no tick claimed yet)
//! WRITE = put record(n) {by, at, until}; put held(n) until (on the lease); put tick(n) t
//! ```
//!
//! Without a tick, WRITE follows the first test directly and the tick key is left as it is.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use futures_util::future::{BoxFuture, try_join_all};
use shedlock::lease::{Acquired, Lease};
use shedlock::{LockConfiguration, LockGuard, Result};
use tokio::time::Instant;

use crate::{Granted, Inner, Kind, lease_seconds, micros, micros_of, pad, read, too_many_ops};

/// Locks read back in one transaction after a claim that got no answer (under the cluster's
/// 128 operations a transaction).
const READ_BACK: usize = 100;

/// What is sent for one lock of a batch.
struct Claim<'a> {
    config: &'a LockConfiguration,
    lease: Granted,
}

impl Inner {
    pub(crate) async fn acquire_many(
        self: &Arc<Self>,
        configs: &[LockConfiguration],
    ) -> Result<Vec<Result<Option<LockGuard>>>> {
        let sent_at = Instant::now();
        // Read before the leases are granted: the cluster's lease never ends before
        // `at + lock_at_most_for`.
        let now = self.now();
        let now_us = micros_of(now);
        let tolerance_us = micros(self.settings.tick_tolerance);
        // What each config becomes: sent (index into `claims`), or decided here (a name given
        // twice, a tick too far ahead of this clock).
        let mut plan: Vec<std::result::Result<usize, Acquired>> = Vec::with_capacity(configs.len());
        let mut names = HashSet::new();
        let mut sent: Vec<&LockConfiguration> = Vec::new();
        for config in configs {
            let ahead_us = config.tick().map(|t| micros_of(t) - now_us);
            // A tick too far ahead of this clock is refused without a write (`into_guard`
            // makes it the error); a name already in the batch is not taken twice.
            if ahead_us.is_some_and(|ahead| ahead > tolerance_us) || !names.insert(config.name()) {
                plan.push(Err(Acquired::NotTaken { ahead_us }));
            } else {
                plan.push(Ok(sent.len()));
                sent.push(config);
            }
        }
        let mut taken = vec![None; sent.len()];
        if !sent.is_empty() {
            // One lease per distinct number of seconds, granted together.
            let wanted: Vec<i64> = sent
                .iter()
                .map(|c| lease_seconds(c.lock_at_most_for()))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            let granted = try_join_all(
                wanted
                    .iter()
                    .map(|&s| self.grant(std::time::Duration::from_secs(s.unsigned_abs()))),
            )
            .await?;
            let leases: BTreeMap<i64, Granted> = wanted.into_iter().zip(granted).collect();
            let claims: Vec<Claim<'_>> = sent
                .iter()
                .map(|config| Claim {
                    config,
                    lease: leases[&lease_seconds(config.lock_at_most_for())],
                })
                .collect();
            let answers = try_join_all(
                claims
                    .chunks(self.batch())
                    .map(|chunk| self.claim(chunk, now_us)),
            )
            .await;
            let answers = match answers {
                Ok(answers) => answers,
                Err(error) => {
                    for lease in leases.values() {
                        self.revoke_later(lease.id);
                    }
                    return Err(error);
                }
            };
            let mut used = HashSet::new();
            for (slot, (claim, token)) in taken
                .iter_mut()
                .zip(claims.iter().zip(answers.into_iter().flatten()))
            {
                if let Some(token) = token {
                    used.insert(claim.lease.id);
                    *slot = Some(token);
                }
            }
            for lease in leases.values().filter(|l| !used.contains(&l.id)) {
                self.revoke_later(lease.id);
            }
        }
        let lease = || Arc::clone(self) as Arc<dyn Lease>;
        let tolerance = self.settings.tick_tolerance;
        Ok(configs
            .iter()
            .zip(plan)
            .map(|(config, plan)| {
                let acquired = match plan {
                    Ok(i) => match taken[i] {
                        Some(token) => Acquired::Token(token),
                        None => Acquired::NotTaken {
                            ahead_us: config.tick().map(|t| micros_of(t) - now_us),
                        },
                    },
                    Err(decided) => decided,
                };
                acquired.into_guard(config, lease, sent_at, tolerance)
            })
            .collect())
    }

    /// One transaction for `claims` (two halves, each as one, when the cluster finds it too
    /// large): the token of each taken lock, `None` for the others.
    fn claim<'a>(
        &'a self,
        claims: &'a [Claim<'a>],
        now_us: i64,
    ) -> BoxFuture<'a, Result<Vec<Option<i64>>>> {
        Box::pin(async move {
            let ops: Vec<TxnOp> = claims
                .iter()
                .map(|claim| TxnOp::txn(self.claim_one(claim, now_us)))
                .collect();
            let answer = match self.txn_raw(Txn::new().and_then(ops)).await {
                Err(error) if too_many_ops(&error) && claims.len() > 1 => {
                    self.too_large(claims.len());
                    let (first, second) = claims.split_at(claims.len() / 2);
                    let mut tokens = self.claim(first, now_us).await?;
                    tokens.extend(self.claim(second, now_us).await?);
                    return Ok(tokens);
                }
                Err(error) if crate::send::unanswered(&error) => {
                    // It may have been applied: what it took is read back.
                    match self.read_back(claims).await {
                        Ok(tokens) => {
                            tracing::info!(%error, locks = claims.len(),
                                taken = tokens.iter().flatten().count(),
                                "etcd did not answer a claim: read back what it took");
                            return Ok(tokens);
                        }
                        Err(_) => {
                            return Err(self.fail(format!("claim {} locks", claims.len()), error));
                        }
                    }
                }
                Err(error) => {
                    let operation = match claims {
                        [one] => format!("acquire lock {:?}", one.config.name()),
                        many => format!("claim {} locks in one transaction", many.len()),
                    };
                    return Err(self.fail(operation, error));
                }
                Ok(answer) => answer,
            };
            self.read_claim(claims, answer)
        })
    }

    /// After a claim that got no answer (it timed out, or the leader changed under it: it may
    /// have been applied, by a leader elected since), which of `claims` it took. Its leases were granted for this
    /// call alone (each name once in it), so a lock whose `held` key is on its claim's lease
    /// was written by this claim, and that key's `mod_revision` is the claim's revision: its
    /// token. One read transaction per [`READ_BACK`] locks.
    async fn read_back(&self, claims: &[Claim<'_>]) -> Result<Vec<Option<i64>>> {
        let mut tokens = Vec::with_capacity(claims.len());
        for chunk in claims.chunks(READ_BACK) {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|claim| TxnOp::get(self.key(Kind::Held, claim.config.name()), None))
                .collect();
            let answer = self
                .txn(Txn::new().and_then(ops), || {
                    format!("read back a claim of {} locks", chunk.len())
                })
                .await?;
            for (claim, response) in chunk.iter().zip(answer.op_responses()) {
                let taken = match response {
                    TxnOpResponse::Get(got) => got
                        .kvs()
                        .first()
                        .filter(|kv| kv.lease() == claim.lease.id)
                        .map(|kv| kv.mod_revision()),
                    _ => None,
                };
                tokens.push(taken);
            }
        }
        if tokens.len() != claims.len() {
            return Err(self.unexpected(
                "read back a claim",
                format!("{} answers for {} locks", tokens.len(), claims.len()),
            ));
        }
        Ok(tokens)
    }

    /// The token of each lock of `claims` that `answer` took.
    fn read_claim(&self, claims: &[Claim<'_>], answer: TxnResponse) -> Result<Vec<Option<i64>>> {
        let operation = || format!("read the answer of a claim of {} locks", claims.len());
        let Some(token) = answer.header().map(|h| h.revision()) else {
            return Err(self.unexpected(&operation(), "no header".into()));
        };
        let responses = answer.op_responses();
        if responses.len() != claims.len() {
            return Err(self.unexpected(
                &operation(),
                format!("{} answers for {} locks", responses.len(), claims.len()),
            ));
        }
        Ok(responses
            .iter()
            .map(|response| wrote(response).then_some(token))
            .collect())
    }

    /// The nested transaction of one lock (see the module's documentation).
    fn claim_one(&self, claim: &Claim<'_>, now_us: i64) -> Txn {
        let name = claim.config.name();
        let until_us = self.until(now_us, claim.config.lock_at_most_for());
        let record = read::Record {
            by: self.settings.locked_by.clone(),
            at: now_us,
            until: until_us,
        };
        let held = self.key(Kind::Held, name);
        let tick_key = self.key(Kind::Tick, name);
        let mut write = vec![
            TxnOp::put(self.key(Kind::Record, name), record.to_json(), None),
            TxnOp::put(
                held.clone(),
                pad(until_us),
                Some(PutOptions::new().with_lease(claim.lease.id)),
            ),
        ];
        let take = match claim.config.tick() {
            None => write,
            Some(tick) => {
                let tick = pad(micros_of(tick));
                write.push(TxnOp::put(tick_key.clone(), tick.clone(), None));
                let first = Txn::new()
                    .when([Compare::create_revision(
                        tick_key.clone(),
                        CompareOp::Equal,
                        0,
                    )])
                    .and_then(write.clone());
                vec![TxnOp::txn(
                    Txn::new()
                        .when([Compare::value(tick_key, CompareOp::Less, tick)])
                        .and_then(write)
                        .or_else([TxnOp::txn(first)]),
                )]
            }
        };
        let free = Txn::new().when([Compare::create_revision(held.clone(), CompareOp::Equal, 0)]);
        if self.app_clock() {
            // Free as well where the application's clock has passed `locked_until`.
            let expired = Txn::new()
                .when([Compare::value(held, CompareOp::Less, pad(now_us))])
                .and_then(take.clone());
            free.and_then(take).or_else([TxnOp::txn(expired)])
        } else {
            free.and_then(take)
        }
    }
}

/// Whether a branch that writes ran: a put answered anywhere in the nested answers.
fn wrote(response: &TxnOpResponse) -> bool {
    match response {
        TxnOpResponse::Put(_) => true,
        TxnOpResponse::Txn(txn) => wrote_txn(txn),
        _ => false,
    }
}

fn wrote_txn(txn: &TxnResponse) -> bool {
    txn.op_responses().iter().any(wrote)
}
