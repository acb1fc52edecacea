//! Reading locks back: a lock's three keys read together in one nested transaction, up to
//! `max_txn_ops - 8` locks per transaction; the listing pages through the records.

use chrono::{DateTime, Utc};
use etcd_client::{GetOptions, KeyValue, Txn, TxnOp, TxnOpResponse};
use futures_util::future::{BoxFuture, try_join_all};
use shedlock::history::{LockRows, LockState, UnreadableRow};
use shedlock::{Error, Result};

use crate::{BACKEND, Inner, Kind, micros_of, too_many_ops};

/// The records listed per request.
const PAGE: i64 = 128;

/// What `<prefix>/record/<name>` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    /// Who took the lock.
    pub(crate) by: String,
    /// When, in microseconds since 1970.
    pub(crate) at: i64,
    /// `at + lock_at_most_for`, in microseconds since 1970.
    pub(crate) until: i64,
}

impl Record {
    pub(crate) fn to_json(&self) -> String {
        serde_json::json!({ "by": self.by, "at": self.at, "until": self.until }).to_string()
    }

    /// The record in `value`, or what is wrong with it.
    pub(crate) fn parse(value: &[u8]) -> std::result::Result<Self, String> {
        let json: serde_json::Value = serde_json::from_slice(value)
            .map_err(|e| format!("the record {:?} is no JSON: {e}", lossy(value)))?;
        let field = |name: &str| {
            json.get(name)
                .ok_or_else(|| format!("the record {:?} has no {name:?}", lossy(value)))
        };
        let int = |name: &str| {
            field(name)?
                .as_i64()
                .ok_or_else(|| format!("the record's {name:?} is no integer: {:?}", lossy(value)))
        };
        let by = field("by")?
            .as_str()
            .ok_or_else(|| format!("the record's \"by\" is no string: {:?}", lossy(value)))?
            .to_owned();
        Ok(Self {
            by,
            at: int("at")?,
            until: int("until")?,
        })
    }
}

fn lossy(value: &[u8]) -> String {
    String::from_utf8_lossy(value).into_owned()
}

/// Microseconds as the `held` and `tick` keys keep them (20 digits).
pub(crate) fn parse_micros(value: &[u8]) -> Option<i64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

fn time(us: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us)
}

/// A lock whose keys hold something this provider did not write.
#[derive(Debug)]
pub(crate) struct Bad {
    name: String,
    key: String,
    problem: String,
}

impl Bad {
    pub(crate) fn into_error(self) -> Error {
        Error::UnreadableRow {
            backend: BACKEND,
            location: self.key,
            name: self.name,
            problem: self.problem,
        }
    }

    pub(crate) fn into_unreadable(self) -> UnreadableRow {
        UnreadableRow::new(self.name, format!("{}: {}", self.key, self.problem))
    }
}

/// The three keys of one lock as read.
#[derive(Debug, Default)]
pub(crate) struct Keys {
    pub(crate) record: Option<KeyValue>,
    pub(crate) held: Option<KeyValue>,
    pub(crate) tick: Option<KeyValue>,
}

impl Inner {
    /// The nested transaction that reads the three keys of `name`.
    fn read_one(&self, name: &str) -> TxnOp {
        TxnOp::txn(Txn::new().and_then([
            TxnOp::get(self.key(Kind::Record, name), None),
            TxnOp::get(self.key(Kind::Held, name), None),
            TxnOp::get(self.key(Kind::Tick, name), None),
        ]))
    }

    /// The keys of each of `names`, a batch of names per transaction, sent together.
    pub(crate) async fn read_keys(&self, names: &[String]) -> Result<Vec<Keys>> {
        let pages = try_join_all(
            names
                .chunks(self.batch())
                .map(|chunk| self.read_page(chunk)),
        )
        .await?;
        Ok(pages.into_iter().flatten().collect())
    }

    /// The keys of `chunk` in one transaction (two, each as one, when the cluster finds it too
    /// large).
    fn read_page<'a>(&'a self, chunk: &'a [String]) -> BoxFuture<'a, Result<Vec<Keys>>> {
        Box::pin(async move {
            let ops: Vec<TxnOp> = chunk.iter().map(|name| self.read_one(name)).collect();
            let answer = match self.txn_raw(Txn::new().and_then(ops)).await {
                Err(error) if too_many_ops(&error) && chunk.len() > 1 => {
                    self.too_large(chunk.len());
                    let (first, second) = chunk.split_at(chunk.len() / 2);
                    let mut keys = self.read_page(first).await?;
                    keys.extend(self.read_page(second).await?);
                    return Ok(keys);
                }
                Err(error) => {
                    let operation = match chunk {
                        [one] => format!("read lock {one:?}"),
                        many => format!("read {} locks", many.len()),
                    };
                    return Err(self.fail(operation, error));
                }
                Ok(answer) => answer,
            };
            let mut keys = Vec::with_capacity(chunk.len());
            for response in answer.op_responses() {
                let TxnOpResponse::Txn(txn) = response else {
                    return Err(self.unexpected("read locks", "no nested answer".into()));
                };
                let mut got = txn.op_responses().into_iter().map(|r| match r {
                    TxnOpResponse::Get(mut get) => get.take_kvs().into_iter().next(),
                    _ => None,
                });
                keys.push(Keys {
                    record: got.next().flatten(),
                    held: got.next().flatten(),
                    tick: got.next().flatten(),
                });
            }
            if keys.len() != chunk.len() {
                return Err(self.unexpected("read locks", "a different number of answers".into()));
            }
            Ok(keys)
        })
    }

    /// The state of lock `name` from its keys, read at `now`: `None` without a record.
    pub(crate) fn state(
        &self,
        name: &str,
        keys: Keys,
        now: DateTime<Utc>,
    ) -> std::result::Result<Option<LockState>, Bad> {
        let bad = |kind: Kind, problem: String| Bad {
            name: name.to_owned(),
            key: self.key(kind, name),
            problem,
        };
        let Some(record_kv) = keys.record else {
            return Ok(None);
        };
        let record = Record::parse(record_kv.value()).map_err(|p| bad(Kind::Record, p))?;
        let token = record_kv.mod_revision();
        let now_us = micros_of(now);
        // Held while the `held` key of this token exists (by the application's clock, until
        // its time); else free since at most now.
        let until = match keys.held {
            Some(held) if held.create_revision() == token => {
                let until = parse_micros(held.value()).ok_or_else(|| {
                    bad(
                        Kind::Held,
                        format!("the time {:?} is no integer", lossy(held.value())),
                    )
                })?;
                // In database-clock mode the cluster holds it while the key exists, also
                // past `until` (etcd ends a lease a little after its TTL).
                if self.app_clock() {
                    until
                } else {
                    until.max(now_us + 1)
                }
            }
            _ => record.until.min(now_us),
        };
        let last_tick = match keys.tick {
            Some(tick) => Some(parse_micros(tick.value()).and_then(time).ok_or_else(|| {
                bad(
                    Kind::Tick,
                    format!("the tick {:?} is no time", lossy(tick.value())),
                )
            })?),
            None => None,
        };
        let (Some(locked_until), Some(locked_at)) = (time(until), time(record.at)) else {
            return Err(bad(Kind::Record, "a time out of range".into()));
        };
        Ok(Some(LockState::new(
            name.to_owned(),
            locked_until,
            locked_at,
            record.by,
            token,
            last_tick,
            now,
        )))
    }

    /// The states of `names` that exist, ordered by name, and those that cannot be read.
    pub(crate) async fn named(&self, names: &[String]) -> Result<(Vec<LockState>, Vec<Bad>)> {
        let keys = self.read_keys(names).await?;
        let now = self.now();
        let mut states = Vec::new();
        let mut bad = Vec::new();
        for (name, keys) in names.iter().zip(keys) {
            match self.state(name, keys, now) {
                Ok(Some(state)) => states.push(state),
                Ok(None) => {}
                Err(b) => bad.push(b),
            }
        }
        states.sort_by(|a, b| a.name.cmp(&b.name));
        states.dedup_by(|a, b| a.name == b.name);
        Ok((states, bad))
    }

    /// Every lock under the prefix: the records a page at a time (their names), each page's
    /// keys in one transaction.
    pub(crate) async fn lock_rows(&self) -> Result<LockRows> {
        let start = self.kind_prefix(Kind::Record);
        let end = prefix_end(start.as_bytes());
        let mut from = start.clone().into_bytes();
        let mut states = Vec::new();
        let mut unreadable = Vec::new();
        loop {
            let txn = Txn::new().and_then([TxnOp::get(
                from.clone(),
                Some(
                    GetOptions::new()
                        .with_range(end.clone())
                        .with_keys_only()
                        .with_limit(PAGE),
                ),
            )]);
            let answer = self
                .txn(txn, || format!("list the locks under {:?}", self.prefix))
                .await?;
            let kvs = match answer.op_responses().into_iter().next() {
                Some(TxnOpResponse::Get(mut get)) => get.take_kvs(),
                _ => return Err(self.unexpected("list the locks", "no range answer".into())),
            };
            let Some(last) = kvs.last() else { break };
            from = [last.key(), b"\0"].concat();
            let full = kvs.len() as i64 == PAGE;
            let mut names = Vec::new();
            for kv in &kvs {
                let name = &kv.key()[start.len()..];
                match std::str::from_utf8(name) {
                    Ok(name) => names.push(name.to_owned()),
                    Err(_) => unreadable.push(UnreadableRow::new(
                        lossy(name),
                        format!("{}: the name is no UTF-8", lossy(kv.key())),
                    )),
                }
            }
            let (found, bad) = self.named(&names).await?;
            states.extend(found);
            unreadable.extend(bad.into_iter().map(Bad::into_unreadable));
            if !full {
                break;
            }
        }
        Ok(LockRows::new(states, unreadable))
    }
}

/// The end of the range of keys that start with `prefix`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}
