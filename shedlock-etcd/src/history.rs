//! [`RunStore`] for [`EtcdLockProvider`]: the run history in keys beside the locks, so a
//! scheduler on etcd keeps its history, its ledger of due ticks and its alerts as the other
//! stores do.
//!
//! # Keys (`<p>` is the key prefix, as for the locks)
//!
//! A row's key carries `9223372036854775807 − id` in 20 digits (its *slot*), so the newest row
//! comes first in etcd's key order: a page of the newest rows is a range read in ascending
//! order with a limit, which etcd stops after the limit (a read in descending order makes etcd
//! read the whole range before it sorts).
//!
//! - `<p>/run/<slot>`: the row as it was added, JSON `{"job", "name", "at", "out", "by"}` and
//!   when set `"tick"`, `"fin"`, `"token"`, `"err"`, `"att"`, `"req"` (times in microseconds
//!   since 1970, this process's clock: etcd has none).
//! - `<p>/end/<slot>`: the end of a row added `running`, JSON `{"fin", "out", "err"}`, written
//!   by [`finish_run`](RunStore::finish_run) (whatever it held) or by the abandoned-run sweep
//!   (only while there is none). A row reads as its `run` key overlaid by its `end` key.
//! - `<p>/runs/name/<name>/<slot>` and `<p>/runs/job/<job>/<slot>`: empty, the index of a lock
//!   name's and of a job's rows (`%` and `/` in a name written `%25` and `%2F`), so a page of
//!   one name, and a job's last run, read only its rows.
//! - `<p>/runs/running/<slot>`: empty, while the row is `running` (the abandoned-run sweep's
//!   list).
//! - `<p>/runs/alerts/<slot>`: empty, for each alert row, so the sweeps' read of the open alerts
//!   (rows by an alert's outcome) reads only them.
//! - `<p>/runs/seq`: written once per group of rows; its revision makes their ids.
//!
//! # Ids
//!
//! A group of up to 1,000 rows takes its ids from one write of `<p>/runs/seq`: the store's
//! revision `r` of that write (unique, and growing with every write anywhere in the store) makes
//! the ids `r × 1000 + i`. The rows are then written with those ids, several rows per
//! transaction (within `--max-txn-ops`), the transactions sent together; a transaction whose
//! answer was lost is sent again (it writes the same keys with the same values).
//!
//! Ids follow the order in which groups were given ids, fleet-wide; `at` is the writer's
//! clock, so a read with a start bound goes on for [`CLOCK_SLACK`] past the first row older
//! than the bound (clocks of a fleet a minute apart are out of its reach).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use futures_util::future::{BoxFuture, join_all, try_join_all};
use serde_json::{Map, Value, json};
use shedlock::history::{
    NewRun, RecordedTicks, RunEnd, RunOutcome, RunQuery, RunRecord, storable_error,
};
use shedlock::{Error, Result, RunStore};

use crate::read::prefix_end;
use crate::{BACKEND, EtcdLockProvider, Inner, micros_of, pad};

/// How many ids one write of the counter makes (and so the most rows of one group).
const IDS_PER_REVISION: i64 = 1_000;

/// How many rows one page of a read holds at most.
const PAGE: i64 = 500;

/// How far past the first row older than a read's start bound a walk goes on: the writers'
/// clocks may be this far apart.
pub(crate) const CLOCK_SLACK: TimeDelta = TimeDelta::seconds(60);

/// The keys of the history.
#[derive(Debug, Clone, Copy)]
enum Part {
    Run,
    End,
}

impl Inner {
    fn row_key(&self, part: Part, id: i64) -> String {
        let word = match part {
            Part::Run => "run",
            Part::End => "end",
        };
        format!("{}/{word}/{}", self.prefix, slot(id))
    }

    fn part_prefix(&self, part: Part) -> String {
        match part {
            Part::Run => format!("{}/run/", self.prefix),
            Part::End => format!("{}/end/", self.prefix),
        }
    }

    /// `<p>/runs/<index>/<name>/`: the start of the keys of one name's (job's) index.
    fn index_prefix(&self, index: Index, name: &str) -> String {
        let word = match index {
            Index::Name => "name",
            Index::Job => "job",
            Index::Alerts => return format!("{}/runs/alerts/", self.prefix),
        };
        format!("{}/runs/{word}/{}/", self.prefix, escape(name))
    }

    fn running_prefix(&self) -> String {
        format!("{}/runs/running/", self.prefix)
    }

    /// The operations per transaction of the history's writes.
    fn ops_per_txn(&self) -> usize {
        self.batch().max(4)
    }

    /// One id per row of `runs` (at most [`IDS_PER_REVISION`]): the revision of a write of the
    /// counter, times 1,000, plus the row's place.
    async fn ids(&self, count: usize) -> Result<Vec<i64>> {
        let txn = Txn::new().and_then([TxnOp::put(
            format!("{}/runs/seq", self.prefix),
            count.to_string(),
            None,
        )]);
        let answer = self
            .txn(txn, || "take ids for run history rows".to_owned())
            .await?;
        let revision = answer
            .header()
            .map(|h| h.revision())
            .ok_or_else(|| self.unexpected("take ids for run history rows", "no header".into()))?;
        let base = revision.checked_mul(IDS_PER_REVISION).ok_or_else(|| {
            self.unexpected(
                "take ids for run history rows",
                format!("revision {revision} is past what an id holds"),
            )
        })?;
        Ok((0..count as i64).map(|i| base + i).collect())
    }

    /// Adds `runs` (at most [`IDS_PER_REVISION`]), answering their ids.
    async fn record_group(&self, runs: &[NewRun]) -> Result<Vec<i64>> {
        let ids = self.ids(runs.len()).await?;
        let at = micros_of(self.now());
        let mut writes: Vec<Vec<TxnOp>> = Vec::new();
        let mut ops = Vec::new();
        for (run, id) in runs.iter().zip(&ids) {
            let running = run.outcome == RunOutcome::Running;
            let mut row = Map::new();
            row.insert("job".into(), json!(run.job));
            row.insert("name".into(), json!(run.name));
            row.insert("at".into(), json!(at));
            row.insert("out".into(), json!(run.outcome.as_str()));
            row.insert("by".into(), json!(self.settings.locked_by));
            if let Some(tick) = run.tick {
                row.insert("tick".into(), json!(micros_of(tick)));
            }
            if !running {
                row.insert("fin".into(), json!(at));
            }
            if let Some(token) = run.fencing_token {
                row.insert("token".into(), json!(token));
            }
            if let Some(error) = &run.error {
                row.insert("err".into(), json!(storable_error(error)));
            }
            if let Some(attempt) = run.attempt {
                row.insert("att".into(), json!(attempt));
            }
            if let Some(by) = &run.requested_by {
                row.insert("req".into(), json!(by));
            }
            let mut row_ops = vec![
                TxnOp::put(
                    self.row_key(Part::Run, *id),
                    Value::Object(row).to_string(),
                    None,
                ),
                TxnOp::put(
                    format!("{}{}", self.index_prefix(Index::Name, &run.name), slot(*id)),
                    "",
                    None,
                ),
                TxnOp::put(
                    format!("{}{}", self.index_prefix(Index::Job, &run.job), slot(*id)),
                    "",
                    None,
                ),
            ];
            if running {
                row_ops.push(TxnOp::put(
                    format!("{}{}", self.running_prefix(), slot(*id)),
                    "",
                    None,
                ));
            }
            if run.outcome.is_alert() {
                row_ops.push(TxnOp::put(
                    format!("{}{}", self.index_prefix(Index::Alerts, ""), slot(*id)),
                    "",
                    None,
                ));
            }
            if ops.len() + row_ops.len() > self.ops_per_txn() {
                writes.push(std::mem::take(&mut ops));
            }
            ops.extend(row_ops);
        }
        writes.push(ops);
        let operation = || format!("record {} run history rows", runs.len());
        try_join_all(
            writes
                .into_iter()
                .map(|ops| self.write_again(ops, operation)),
        )
        .await?;
        Ok(ids)
    }

    /// Sends a transaction of blind writes, again while its answer was lost (applying it twice
    /// writes the same keys with the same values).
    async fn write_again(&self, ops: Vec<TxnOp>, operation: impl Fn() -> String) -> Result<()> {
        let txn = Txn::new().and_then(ops);
        self.resend(true, || {
            let (mut kv, txn) = (self.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        })
        .await
        .map_err(|e| self.fail(operation(), e))?;
        Ok(())
    }

    /// Writes the ends of rows: each an `end` key, whatever it held, and the row's `running`
    /// key deleted.
    async fn finish_group(&self, ends: &[RunEnd]) -> Result<()> {
        if ends.is_empty() {
            return Ok(());
        }
        let fin = micros_of(self.now());
        let mut writes: Vec<Vec<TxnOp>> = Vec::new();
        let mut ops = Vec::new();
        for end in ends {
            let value = json!({
                "fin": fin,
                "out": end.outcome.as_str(),
                "err": end.error.as_deref().map(storable_error),
            });
            if ops.len() + 2 > self.ops_per_txn() {
                writes.push(std::mem::take(&mut ops));
            }
            ops.push(TxnOp::put(
                self.row_key(Part::End, end.id),
                value.to_string(),
                None,
            ));
            ops.push(TxnOp::delete(
                format!("{}{}", self.running_prefix(), slot(end.id)),
                None,
            ));
        }
        writes.push(ops);
        let operation = || format!("finish {} run history rows", ends.len());
        try_join_all(
            writes
                .into_iter()
                .map(|ops| self.write_again(ops, operation)),
        )
        .await?;
        Ok(())
    }

    /// Up to `limit` keys (with their values unless `keys_only`) from `from` on, up to `end`,
    /// in key order.
    async fn range(
        &self,
        from: Vec<u8>,
        end: Vec<u8>,
        limit: i64,
        keys_only: bool,
        operation: &str,
    ) -> Result<Vec<KeyValue>> {
        let mut options = GetOptions::new().with_range(end).with_limit(limit);
        if keys_only {
            options = options.with_keys_only();
        }
        let answer = self
            .txn(
                Txn::new().and_then([TxnOp::get(from, Some(options))]),
                || operation.to_owned(),
            )
            .await?;
        match answer.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(mut get)) => Ok(get.take_kvs()),
            _ => Err(self.unexpected(operation, "no range answer".into())),
        }
    }

    /// The `end` keys of the rows with ids in `[low, high]`, by id.
    async fn ends(&self, low: i64, high: i64) -> Result<HashMap<i64, KeyValue>> {
        let prefix = self.part_prefix(Part::End);
        let from = self.row_key(Part::End, high).into_bytes();
        let end = [self.row_key(Part::End, low).as_bytes(), b"\0"].concat();
        let mut found = HashMap::new();
        let mut next = from;
        loop {
            let kvs = self
                .range(next, end.clone(), PAGE, false, "read the run history")
                .await?;
            let full = kvs.len() as i64 == PAGE;
            let after = kvs.last().map(|last| [last.key(), b"\0"].concat());
            for kv in kvs {
                if let Some(id) = id_of(&kv.key()[prefix.len()..]) {
                    found.insert(id, kv);
                }
            }
            match after {
                Some(after) if full => next = after,
                _ => return Ok(found),
            }
        }
    }

    /// The rows `kvs` (their `run` keys) overlaid by their `end` keys, in the order given.
    async fn rows(&self, kvs: Vec<KeyValue>) -> Result<Vec<RunRecord>> {
        let prefix = self.part_prefix(Part::Run).len();
        let ids: Vec<Option<i64>> = kvs.iter().map(|kv| id_of(&kv.key()[prefix..])).collect();
        let (Some(low), Some(high)) = (
            ids.iter().flatten().min().copied(),
            ids.iter().flatten().max().copied(),
        ) else {
            return Ok(Vec::new());
        };
        let mut ends = self.ends(low, high).await?;
        let mut rows = Vec::with_capacity(kvs.len());
        for (kv, id) in kvs.iter().zip(ids) {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let Some(id) = id else {
                return Err(self.unreadable_run(&key, "the key's id is no number"));
            };
            rows.push(self.decode(id, kv, ends.remove(&id).as_ref())?);
        }
        Ok(rows)
    }

    /// Row `id` from its `run` key and its `end` key.
    fn decode(&self, id: i64, run: &KeyValue, end: Option<&KeyValue>) -> Result<RunRecord> {
        let key = String::from_utf8_lossy(run.key()).into_owned();
        let row: Map<String, Value> = serde_json::from_slice(run.value())
            .map_err(|e| self.unreadable_run(&key, &format!("the row is no JSON object: {e}")))?;
        let text = |field: &str| row.get(field).and_then(Value::as_str).map(str::to_owned);
        let int = |field: &str| row.get(field).and_then(Value::as_i64);
        let time = |field: &str| -> Result<Option<DateTime<Utc>>> {
            match row.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_i64()
                    .and_then(DateTime::from_timestamp_micros)
                    .map(Some)
                    .ok_or_else(|| {
                        self.unreadable_run(&key, &format!("{field:?} is {v}, no time"))
                    }),
            }
        };
        let needed = |field: &str| {
            text(field).ok_or_else(|| self.unreadable_run(&key, &format!("no text {field:?}")))
        };
        let outcome = |text: &str| {
            text.parse::<RunOutcome>()
                .map_err(|_| self.unreadable_run(&key, &format!("the outcome {text:?} is unknown")))
        };
        let started_at = time("at")?.ok_or_else(|| self.unreadable_run(&key, "no \"at\""))?;
        let mut record = RunRecord::new(
            id,
            needed("job")?,
            needed("name")?,
            started_at,
            outcome(&needed("out")?)?,
            needed("by")?,
        );
        record.tick = time("tick")?;
        record.finished_at = time("fin")?;
        record.fencing_token = int("token");
        record.error = text("err");
        record.attempt = int("att").and_then(|a| u32::try_from(a).ok());
        record.requested_by = text("req");
        if let Some(end) = end {
            let end_key = String::from_utf8_lossy(end.key()).into_owned();
            let bad = |problem: &str| self.unreadable_run(&end_key, problem);
            let end: Map<String, Value> = serde_json::from_slice(end.value())
                .map_err(|e| bad(&format!("the end is no JSON object: {e}")))?;
            let out = end
                .get("out")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("no text \"out\""))?;
            record.outcome = out
                .parse()
                .map_err(|_| bad(&format!("the outcome {out:?} is unknown")))?;
            record.finished_at = end
                .get("fin")
                .and_then(Value::as_i64)
                .and_then(DateTime::from_timestamp_micros);
            record.error = end.get("err").and_then(Value::as_str).map(str::to_owned);
        }
        Ok(record)
    }

    fn unreadable_run(&self, key: &str, problem: &str) -> Error {
        Error::UnreadableRow {
            backend: BACKEND,
            location: format!("{key} on etcd at {}", self.address),
            name: key.to_owned(),
            problem: problem.to_owned(),
        }
    }

    /// The rows with ids below `before` (all when `None`), newest first, a page of up to
    /// `limit` from the whole history.
    async fn page_all(&self, before: Option<i64>, limit: i64) -> Result<Vec<RunRecord>> {
        let prefix = self.part_prefix(Part::Run);
        let from = match before {
            Some(id) => [self.row_key(Part::Run, id).as_bytes(), b"\0"].concat(),
            None => prefix.clone().into_bytes(),
        };
        let kvs = self
            .range(
                from,
                prefix_end(prefix.as_bytes()),
                limit,
                false,
                "read the run history",
            )
            .await?;
        self.rows(kvs).await
    }

    /// The rows of one name's (job's) index with ids below `before`, newest first, a page of
    /// up to `limit`.
    async fn page_index(
        &self,
        index: Index,
        name: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<(Vec<RunRecord>, bool)> {
        let prefix = self.index_prefix(index, name);
        let from = match before {
            Some(id) => format!("{prefix}{}\0", slot(id)).into_bytes(),
            None => prefix.clone().into_bytes(),
        };
        let keys = self
            .range(
                from,
                prefix_end(prefix.as_bytes()),
                limit,
                true,
                "read the run history",
            )
            .await?;
        let full = keys.len() as i64 == limit;
        let ids: Vec<i64> = keys
            .iter()
            .filter_map(|kv| id_of(&kv.key()[prefix.len()..]))
            .collect();
        Ok((self.rows_by_id(&ids).await?, full))
    }

    /// The rows `ids` that exist, in the order given: each row's `run` and `end` keys read
    /// together, a transaction per batch of ids, sent together.
    async fn rows_by_id(&self, ids: &[i64]) -> Result<Vec<RunRecord>> {
        let per = (self.ops_per_txn() / 2).max(1);
        let pages = try_join_all(ids.chunks(per).map(|chunk| async move {
            let ops: Vec<TxnOp> = chunk
                .iter()
                .flat_map(|id| {
                    [
                        TxnOp::get(self.row_key(Part::Run, *id), None),
                        TxnOp::get(self.row_key(Part::End, *id), None),
                    ]
                })
                .collect();
            let answer = self
                .txn(Txn::new().and_then(ops), || {
                    "read the run history".to_owned()
                })
                .await?;
            let mut got = answer.op_responses().into_iter().map(|r| match r {
                TxnOpResponse::Get(mut get) => get.take_kvs().into_iter().next(),
                _ => None,
            });
            let mut rows = Vec::with_capacity(chunk.len());
            for id in chunk {
                let (run, end) = (got.next().flatten(), got.next().flatten());
                if let Some(run) = run {
                    rows.push(self.decode(*id, &run, end.as_ref())?);
                }
            }
            Ok::<_, Error>(rows)
        }))
        .await?;
        Ok(pages.into_iter().flatten().collect())
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<RunRecord>> {
        let limit = query.limit as usize;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let Some(name) = &query.name else {
            // Alert rows (the sweeps' read of the open alerts) through their own index.
            let alerts = query.outcome.is_some_and(RunOutcome::is_alert);
            return self
                .walk(alerts.then_some((Index::Alerts, "")), query)
                .await;
        };
        // The rows of the lock name and those of the job name, merged newest first.
        let (by_name, by_job) = futures_util::future::try_join(
            self.walk(Some((Index::Name, name)), query),
            self.walk(Some((Index::Job, name)), query),
        )
        .await?;
        let merged: BTreeMap<i64, RunRecord> = by_name
            .into_iter()
            .chain(by_job)
            .map(|row| (row.id, row))
            .collect();
        Ok(merged.into_values().rev().take(limit).collect())
    }

    /// The rows `query` asks for, newest first, from the whole history or one index.
    async fn walk(&self, index: Option<(Index, &str)>, query: &RunQuery) -> Result<Vec<RunRecord>> {
        let limit = query.limit as usize;
        let mut found = Vec::new();
        let mut before = query.before;
        let stop = query.since.map(|since| since - CLOCK_SLACK);
        loop {
            let (page, full) = match index {
                None => {
                    let page = self.page_all(before, PAGE).await?;
                    let full = page.len() as i64 == PAGE;
                    (page, full)
                }
                Some((index, name)) => {
                    let per = (self.ops_per_txn() / 2).max(1) as i64;
                    self.page_index(index, name, before, per).await?
                }
            };
            for row in page {
                before = Some(row.id);
                if stop.is_some_and(|stop| row.started_at < stop) {
                    return Ok(found);
                }
                if matches(&row, query) {
                    found.push(row);
                    if found.len() >= limit {
                        return Ok(found);
                    }
                }
            }
            if !full {
                return Ok(found);
            }
        }
    }

    async fn latest_runs(&self, names: &[String]) -> Result<Vec<RunRecord>> {
        let mut names: Vec<&String> = names.iter().collect();
        names.sort();
        names.dedup();
        let latest = try_join_all(names.chunks(self.ops_per_txn()).map(|chunk| async move {
            // The newest index entry of each name, in one transaction; then those rows, read
            // together. Most are the run sought; a name whose newest row is not walks on.
            let ops: Vec<TxnOp> = chunk
                .iter()
                .map(|name| {
                    let prefix = self.index_prefix(Index::Name, name);
                    let options = GetOptions::new()
                        .with_range(prefix_end(prefix.as_bytes()))
                        .with_limit(1)
                        .with_keys_only();
                    TxnOp::get(prefix, Some(options))
                })
                .collect();
            let answer = self
                .txn(Txn::new().and_then(ops), || {
                    "read the last runs of the locks".to_owned()
                })
                .await?;
            let mut newest: Vec<(&String, i64)> = Vec::new();
            for (name, response) in chunk.iter().zip(answer.op_responses()) {
                let TxnOpResponse::Get(mut get) = response else {
                    continue;
                };
                let prefix = self.index_prefix(Index::Name, name).len();
                if let Some(id) = get
                    .take_kvs()
                    .first()
                    .and_then(|kv| id_of(&kv.key()[prefix..]))
                {
                    newest.push((name, id));
                }
            }
            let ids: Vec<i64> = newest.iter().map(|(_, id)| *id).collect();
            let mut rows: HashMap<i64, RunRecord> = self
                .rows_by_id(&ids)
                .await?
                .into_iter()
                .map(|row| (row.id, row))
                .collect();
            let mut latest = Vec::new();
            for (name, id) in newest {
                match rows.remove(&id) {
                    Some(row) if is_last_run(&row, name) => latest.push(row),
                    _ => latest.extend(self.latest_of(name, Some(id)).await?),
                }
            }
            Ok::<_, Error>(latest)
        }))
        .await?;
        Ok(latest.into_iter().flatten().collect())
    }

    /// The newest row of lock `name` below id `before` that is a run (no operator row, no
    /// alert, no tick held by another instance), walking its index a page at a time.
    async fn latest_of(&self, name: &str, mut before: Option<i64>) -> Result<Option<RunRecord>> {
        let per = (self.ops_per_txn() / 2).max(1) as i64;
        loop {
            let (rows, full) = self.page_index(Index::Name, name, before, per).await?;
            for row in rows {
                before = Some(row.id);
                if is_last_run(&row, name) {
                    return Ok(Some(row));
                }
            }
            if !full {
                return Ok(None);
            }
        }
    }

    async fn recorded_ticks(
        &self,
        since: DateTime<Utc>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<RecordedTicks> {
        let prefix = self.part_prefix(Part::Run);
        let end = prefix_end(prefix.as_bytes());
        let mut next = prefix.clone().into_bytes();
        let mut recorded = Vec::new();
        // `since` already lies the clocks' tolerance before the window (the ledger passes its
        // start less a minute): a row of the window started after it, so the walk stops at the
        // first row older than `since` (a row written earlier, by the store's revision, that
        // started later would need a writer's clock a minute ahead of another's).
        let stop = micros_of(since);
        let (since, from, to) = (micros_of(since), micros_of(from), micros_of(to));
        loop {
            let kvs = self
                .range(
                    next,
                    end.clone(),
                    PAGE,
                    false,
                    "read the ledger's recorded ticks",
                )
                .await?;
            let full = kvs.len() as i64 == PAGE;
            for kv in &kvs {
                let Ok(row) = serde_json::from_slice::<Map<String, Value>>(kv.value()) else {
                    continue;
                };
                let at = row.get("at").and_then(Value::as_i64).unwrap_or(i64::MIN);
                if at < stop {
                    return Ok(recorded);
                }
                let out = row.get("out").and_then(Value::as_str).unwrap_or("");
                let skipped = out
                    .parse::<RunOutcome>()
                    .map_or(true, |o| o.is_alert() || o == RunOutcome::Operator);
                let (Some(job), Some(tick)) = (
                    row.get("job").and_then(Value::as_str),
                    row.get("tick").and_then(Value::as_i64),
                ) else {
                    continue;
                };
                if at >= since
                    && tick > from
                    && tick <= to
                    && !skipped
                    && let Some(tick) = DateTime::from_timestamp_micros(tick)
                {
                    recorded.push((job.to_owned(), tick));
                }
            }
            match kvs.last() {
                Some(last) if full => next = [last.key(), b"\0"].concat(),
                _ => return Ok(recorded),
            }
        }
    }

    async fn prune_runs(&self, jobs: &[String], older_than: Duration) -> Result<u64> {
        let jobs: HashSet<&str> = jobs.iter().map(String::as_str).collect();
        // A retention longer than a time can go back keeps every row.
        let cutoff = TimeDelta::from_std(older_than)
            .ok()
            .and_then(|back| self.now().checked_sub_signed(back))
            .unwrap_or(DateTime::<Utc>::MIN_UTC);
        let prefix = self.part_prefix(Part::Run);
        let end = prefix_end(prefix.as_bytes());
        let mut next = prefix.clone().into_bytes();
        let mut deleted = 0;
        loop {
            let kvs = self
                .range(next, end.clone(), PAGE, false, "prune the run history")
                .await?;
            let full = kvs.len() as i64 == PAGE;
            let mut ops = Vec::new();
            for kv in &kvs {
                let Some(id) = id_of(&kv.key()[prefix.len()..]) else {
                    continue;
                };
                let Ok(row) = serde_json::from_slice::<Map<String, Value>>(kv.value()) else {
                    continue;
                };
                let field = |f: &str| row.get(f).and_then(Value::as_str).unwrap_or("");
                let at = row.get("at").and_then(Value::as_i64).unwrap_or(i64::MAX);
                if at >= micros_of(cutoff) || !jobs.contains(field("job")) {
                    continue;
                }
                ops.push(vec![
                    TxnOp::delete(kv.key(), None),
                    TxnOp::delete(self.row_key(Part::End, id), None),
                    TxnOp::delete(
                        format!(
                            "{}{}",
                            self.index_prefix(Index::Name, field("name")),
                            slot(id)
                        ),
                        None,
                    ),
                    TxnOp::delete(
                        format!(
                            "{}{}",
                            self.index_prefix(Index::Job, field("job")),
                            slot(id)
                        ),
                        None,
                    ),
                    TxnOp::delete(format!("{}{}", self.running_prefix(), slot(id)), None),
                    TxnOp::delete(
                        format!("{}{}", self.index_prefix(Index::Alerts, ""), slot(id)),
                        None,
                    ),
                ]);
            }
            let per = (self.ops_per_txn() / 6).max(1);
            let count = ops.len() as u64;
            let mut groups: Vec<Vec<TxnOp>> = Vec::new();
            for (i, row) in ops.into_iter().enumerate() {
                if i % per == 0 {
                    groups.push(Vec::new());
                }
                if let Some(group) = groups.last_mut() {
                    group.extend(row);
                }
            }
            try_join_all(
                groups
                    .into_iter()
                    .map(|ops| self.write_again(ops, || "prune the run history".to_owned())),
            )
            .await?;
            deleted += count;
            match kvs.last() {
                Some(last) if full => next = [last.key(), b"\0"].concat(),
                _ => return Ok(deleted),
            }
        }
    }

    async fn close_abandoned_runs(&self) -> Result<u64> {
        let prefix = self.running_prefix();
        let end = prefix_end(prefix.as_bytes());
        let mut next = prefix.clone().into_bytes();
        let mut ids = Vec::new();
        loop {
            let kvs = self
                .range(next, end.clone(), PAGE, true, "find abandoned runs")
                .await?;
            let full = kvs.len() as i64 == PAGE;
            ids.extend(kvs.iter().filter_map(|kv| id_of(&kv.key()[prefix.len()..])));
            match kvs.last() {
                Some(last) if full => next = [last.key(), b"\0"].concat(),
                _ => break,
            }
        }
        if ids.is_empty() {
            return Ok(0);
        }
        let rows = self.rows_by_id(&ids).await?;
        let present: HashSet<i64> = rows.iter().map(|r| r.id).collect();
        // A `running` key whose row is gone (pruned) or ended.
        let stale: Vec<i64> = ids
            .iter()
            .copied()
            .filter(|id| !present.contains(id))
            .chain(
                rows.iter()
                    .filter(|r| r.outcome != RunOutcome::Running)
                    .map(|r| r.id),
            )
            .collect();
        let running: Vec<&RunRecord> = rows
            .iter()
            .filter(|r| r.outcome == RunOutcome::Running && r.fencing_token.is_some())
            .collect();
        let names: Vec<String> = running.iter().map(|r| r.name.clone()).collect();
        let (states, _) = self.named(&names).await?;
        let states: HashMap<&str, &shedlock::history::LockState> =
            states.iter().map(|s| (s.name.as_str(), s)).collect();
        let now = micros_of(self.now());
        let mut closes = Vec::new();
        for row in running {
            let mine = row.fencing_token.unwrap_or_default();
            let when = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
            let name = &row.name;
            let reason = match states.get(name.as_str()) {
                None => format!(
                    "abandoned: lock \"{name}\" has no keys (they were deleted) while this run \
                     was still recorded as running"
                ),
                Some(state) if state.fencing_token != mine => format!(
                    "abandoned: lock \"{name}\" was taken by fencing token {} at {} (a later run \
                     or another holder) while this run was still recorded as running (its \
                     process died or stopped, or its end could not be written)",
                    state.fencing_token,
                    when(state.locked_at)
                ),
                Some(state) if !state.is_held() => format!(
                    "abandoned: lock \"{name}\" expired at {} while this run was still recorded \
                     as running (its process died or stopped, or its end could not be written)",
                    when(state.locked_until)
                ),
                Some(_) => continue,
            };
            closes.push((row.id, reason));
        }
        let closed = join_all(closes.iter().map(|(id, reason)| async move {
            let end = self.row_key(Part::End, *id);
            let value = json!({ "fin": now, "out": RunOutcome::Abandoned.as_str(), "err": reason });
            let txn = Txn::new()
                .when([Compare::create_revision(end.clone(), CompareOp::Equal, 0)])
                .and_then([
                    TxnOp::put(end, value.to_string(), None::<PutOptions>),
                    TxnOp::delete(format!("{}{}", self.running_prefix(), slot(*id)), None),
                ]);
            self.txn(txn, || format!("close abandoned run {id}"))
                .await
                .map(|answer| answer.succeeded())
        }))
        .await;
        if !stale.is_empty() {
            let per = self.ops_per_txn();
            let groups: Vec<Vec<TxnOp>> = stale
                .chunks(per)
                .map(|ids| {
                    ids.iter()
                        .map(|id| TxnOp::delete(format!("{prefix}{}", slot(*id)), None))
                        .collect()
                })
                .collect();
            try_join_all(
                groups
                    .into_iter()
                    .map(|ops| self.write_again(ops, || "forget ended runs".to_owned())),
            )
            .await?;
        }
        let mut count = 0;
        for result in closed {
            count += u64::from(result?);
        }
        Ok(count)
    }
}

/// Whether `row` can be lock `name`'s last run: a row of that lock name, neither an operator
/// row nor an alert nor a tick held by another instance.
fn is_last_run(row: &RunRecord, name: &str) -> bool {
    row.name == name
        && !row.outcome.is_alert()
        && !matches!(row.outcome, RunOutcome::Operator | RunOutcome::SkippedHeld)
}

/// Whether `row` is one `query` asks for (its name and `before` are the walk's).
fn matches(row: &RunRecord, query: &RunQuery) -> bool {
    query.outcome.is_none_or(|o| row.outcome == o)
        && query.instance.as_ref().is_none_or(|i| row.locked_by == *i)
        && query.since.is_none_or(|since| row.started_at >= since)
        && query.until.is_none_or(|until| row.started_at < until)
        && query
            .name
            .as_ref()
            .is_none_or(|name| row.name == *name || row.job == *name)
        && !(query.runs_only && (row.outcome.is_alert() || row.outcome == RunOutcome::Operator))
}

/// The indexes of the rows.
#[derive(Debug, Clone, Copy)]
enum Index {
    /// A lock name's rows.
    Name,
    /// A job's rows.
    Job,
    /// Every alert row (its name is the alert's kind).
    Alerts,
}

/// The key part of row `id`: `i64::MAX − id` in 20 digits, so newer rows come first.
fn slot(id: i64) -> String {
    pad(i64::MAX - id.max(0))
}

/// The id in a key's slot.
fn id_of(slot: &[u8]) -> Option<i64> {
    let value = crate::read::parse_micros(slot)?;
    Some(i64::MAX - value)
}

/// A name as an index key holds it: `%` and `/` written `%25` and `%2F`, so one name's keys
/// are never the start of another's.
fn escape(name: &str) -> String {
    name.replace('%', "%25").replace('/', "%2F")
}

impl RunStore for EtcdLockProvider {
    /// Takes an id from the counter (one write) and writes the row: two round trips.
    fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, Result<i64>> {
        Box::pin(async move {
            let ids = self.inner.record_group(std::slice::from_ref(run)).await?;
            ids.into_iter()
                .next()
                .ok_or_else(|| self.inner.unexpected("record a run", "no id".into()))
        })
    }

    fn finish_run<'a>(
        &'a self,
        id: i64,
        outcome: RunOutcome,
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let end = RunEnd::new(id, outcome, error.map(str::to_owned));
            self.inner.finish_group(std::slice::from_ref(&end)).await
        })
    }

    /// One id per group of 1,000 rows (one write of the counter), then the rows, several per
    /// transaction within `--max-txn-ops`, the transactions sent together. A group that fails
    /// fails each of its rows.
    fn record_runs<'a>(&'a self, runs: &'a [NewRun]) -> BoxFuture<'a, Vec<Result<i64>>> {
        Box::pin(async move {
            let groups = join_all(
                runs.chunks(IDS_PER_REVISION as usize)
                    .map(|group| self.inner.record_group(group)),
            )
            .await;
            let mut answers = Vec::with_capacity(runs.len());
            for (group, result) in runs.chunks(IDS_PER_REVISION as usize).zip(groups) {
                match result {
                    Ok(ids) => answers.extend(ids.into_iter().map(Ok)),
                    Err(error) => {
                        let text = error.to_string();
                        answers.push(Err(error));
                        answers.extend((1..group.len()).map(|_| {
                            Err(self
                                .inner
                                .unexpected("record run history rows", text.clone()))
                        }));
                    }
                }
            }
            answers
        })
    }

    /// Every end in transactions within `--max-txn-ops`, sent together.
    fn finish_runs<'a>(&'a self, ends: &'a [RunEnd]) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(async move {
            match self.inner.finish_group(ends).await {
                Ok(()) => ends.iter().map(|_| Ok(())).collect(),
                Err(error) => {
                    let text = error.to_string();
                    let mut answers = vec![Err(error)];
                    answers.extend((1..ends.len()).map(|_| {
                        Err(self
                            .inner
                            .unexpected("finish run history rows", text.clone()))
                    }));
                    answers
                }
            }
        })
    }

    /// Walks every row (a page of 500 at a time, newest first) and deletes the rows of `jobs`
    /// older than `older_than` with their `end`, index and `running` keys.
    fn prune_runs<'a>(
        &'a self,
        jobs: &'a [String],
        older_than: Duration,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.inner.prune_runs(jobs, older_than))
    }

    /// Without a name, pages of the whole history; with one, pages of its two indexes (lock
    /// name and job name), merged.
    fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(self.inner.runs(query))
    }

    /// The newest index entry of each name (one range read per name, a transaction per batch
    /// of names), then those rows together; a name whose newest row is no run walks on through
    /// its index.
    fn latest_runs<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(async move {
            let mut latest = self.inner.latest_runs(names).await?;
            latest.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(latest)
        })
    }

    /// The `running` keys, their rows and their locks' keys read, and each row whose lock its
    /// token no longer holds closed in a transaction that writes its end only while it has
    /// none.
    fn close_abandoned_runs(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.inner.close_abandoned_runs())
    }

    /// Pages of the whole history, newest first, reading only until the first row that
    /// started before `since`.
    fn recorded_ticks<'a>(
        &'a self,
        since: DateTime<Utc>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<RecordedTicks>> {
        Box::pin(self.inner.recorded_ticks(since, from, to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_rows_come_first_in_key_order() {
        let ids = [1_i64, 999, 1_000, 5_000_123, i64::MAX / 2];
        for pair in ids.windows(2) {
            assert!(slot(pair[1]) < slot(pair[0]), "{pair:?}");
        }
        for id in ids {
            assert_eq!(id_of(slot(id).as_bytes()), Some(id));
        }
        assert_eq!(escape("a/b%c"), "a%2Fb%25c");
        assert!(!escape("a").starts_with(&escape("a/b")));
    }
}
