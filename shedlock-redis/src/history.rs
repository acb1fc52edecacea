//! [`RunStore`] for [`RedisLockProvider`]: the run history in keys beside the locks, so a
//! scheduler on Redis keeps its history, its ledger of due ticks and its alerts as the SQL
//! stores do. Each write is one Lua script ([`RECORD`], [`FINISH`], [`PRUNE`]); a read walks an
//! index a page at a time ([`PAGE`]); the ledger's read of a window ([`TICKS`]) reads only the
//! fields it compares.
//!
//! # Keys (`{P}` is the key prefix, as for the locks)
//!
//! - `{P}:run:<id>`: a hash per row: `job`, `name`, `at` (started, µs since 1970, the server's
//!   `TIME`), `out` (the outcome), `by` (`locked_by`), and when set `tick`, `fin` (finished),
//!   `token`, `err`, `att` (attempt), `req` (requested by).
//! - `{P}:runs:seq`: the counter the ids come from (`INCR`).
//! - `{P}:runs`: a sorted set of every row's id (scored by the id), newest last.
//! - `{P}:runs:name:<name>` and `{P}:runs:job:<job>`: the ids of a lock name's rows and of a
//!   job's rows, so a page of one name reads only its rows.
//! - `{P}:runs:running`: the ids of the rows still `running`, for the abandoned-run sweep.
//! - `{P}:runs:alerts`: the ids of the alert rows, so the sweeps' read of the open alerts (rows
//!   by an alert's outcome) reads only them.
//! - `{P}:runs:req:<request>`: the ids a `RECORD` script answered, kept 5 minutes, so the same
//!   script sent again after a broken connection answers them instead of writing the rows twice.
//!
//! The scripts touch row and index keys they do not declare in `KEYS` (they are made from the
//! rows): they carry the same hash tag, so they live in the same cluster slot, as the schedule
//! scripts' rows do.
//!
//! # Order
//!
//! Ids come from one counter and `at` from the server's clock in the same script, so a newer
//! id has a start no earlier than an older one's while the server's clock does not go back: a
//! read with a start bound stops at the first row a minute older than the bound.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::future::BoxFuture;
use redis::{Script, Value};
use shedlock::history::{
    NewRun, RecordedTicks, RunEnd, RunOutcome, RunQuery, RunRecord, storable_error,
};
use shedlock::{Backend, Error, Result, RunStore};

use crate::read::{parse_time, parse_token};
use crate::{Inner, RedisLockProvider, micros};

/// How many index entries one `page` script reads at most (each one `HMGET`): about a
/// millisecond of the server's time.
pub(crate) const PAGE: usize = 500;

/// How many rows one `RECORD` or `FINISH` script writes.
const WRITE_CHUNK: usize = 500;

/// How many rows one `PRUNE` script deletes at most.
const PRUNE_CHUNK: u64 = 2_000;

/// How far before a read's start bound its walk goes on, for a server clock set back a little.
const CLOCK_SLACK_US: i64 = 60_000_000;

/// Adds rows. `KEYS`: the counter, every row's index, the running set, the request's key.
/// `ARGV`: the prefix's tag, `locked_by`, a JSON array of rows
/// `[job, name, tick µs (text) or null, 1 if running else 0, outcome, token (text) or null,
/// error or null, attempt or null, requested_by or null, 1 if an alert else 0]`. Answers the
/// ids (text), in order.
const RECORD: &str = concat!(
    crate::scripts::prelude!(),
    "
local done = redis.call('GET', KEYS[4])
if done then return cjson.decode(done) end
local server = clock('')
local now = num(server)
local tag, by = ARGV[1], ARGV[2]
local ids = {}
for i, r in ipairs(cjson.decode(ARGV[3])) do
  local id = num(redis.call('INCR', KEYS[1]))
  local key = tag .. 'run:' .. id
  check(key)
  local f = {'job', r[1], 'name', r[2], 'at', now, 'out', r[5], 'by', by}
  local function add(field, value)
    if value ~= cjson.null then f[#f + 1] = field; f[#f + 1] = tostring(value) end
  end
  add('tick', r[3])
  if r[4] ~= 1 then add('fin', now) end
  add('token', r[6]); add('err', r[7]); add('att', r[8]); add('req', r[9])
  redis.call('HSET', key, unpack(f))
  redis.call('ZADD', KEYS[2], id, id)
  redis.call('ZADD', tag .. 'runs:name:' .. r[2], id, id)
  redis.call('ZADD', tag .. 'runs:job:' .. r[1], id, id)
  if r[4] == 1 then redis.call('SADD', KEYS[3], id) end
  if r[10] == 1 then redis.call('ZADD', tag .. 'runs:alerts', id, id) end
  ids[i] = id
end
redis.call('SET', KEYS[4], cjson.encode(ids), 'EX', 300)
return ids
"
);

/// Finishes rows whatever they hold (a row closed as abandoned meanwhile gets its real end).
/// `KEYS`: the running set. `ARGV`: the tag, a JSON array of `[id, outcome, error or null]`.
/// A row that does not exist is left alone.
const FINISH: &str = concat!(
    crate::scripts::prelude!(),
    "
local now = num(clock(''))
for _, e in ipairs(cjson.decode(ARGV[2])) do
  local id = num(e[1])
  local key = ARGV[1] .. 'run:' .. id
  if check(key) then
    redis.call('HSET', key, 'fin', now, 'out', e[2])
    if e[3] ~= cjson.null then redis.call('HSET', key, 'err', e[3]) else redis.call('HDEL', key, 'err') end
  end
  redis.call('SREM', KEYS[1], id)
end
return 0
"
);

/// Deletes the oldest rows of the jobs named that started more than a retention ago, up to a
/// limit. `KEYS`: every row's index, the running set. `ARGV`: the tag, the retention (µs), the
/// limit, a JSON array of job names. Answers how many it deleted.
const PRUNE: &str = concat!(
    crate::scripts::prelude!(),
    "
local tag = ARGV[1]
local cutoff = clock('') - tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local deleted = 0
for _, job in ipairs(cjson.decode(ARGV[4])) do
  local index = tag .. 'runs:job:' .. job
  local more = true
  while more and deleted < limit do
    local ids = redis.call('ZRANGE', index, 0, 99)
    if #ids == 0 then break end
    for _, id in ipairs(ids) do
      local key = tag .. 'run:' .. id
      local at = redis.call('HGET', key, 'at')
      if at and tonumber(at) and tonumber(at) >= cutoff then more = false; break end
      local name = redis.call('HGET', key, 'name')
      redis.call('DEL', key)
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZREM', index, id)
      if name then redis.call('ZREM', tag .. 'runs:name:' .. name, id) end
      redis.call('SREM', KEYS[2], id)
      redis.call('ZREM', tag .. 'runs:alerts', id)
      deleted = deleted + 1
      if deleted >= limit then more = false; break end
    end
  end
end
return deleted
"
);

/// The rows of one index, newest first, from below an id, as filtered. `KEYS`: the index.
/// `ARGV`: the tag, the id to read below (`''`: from the newest), the most rows, the most
/// entries to read, outcome, `locked_by`, since (µs), until (µs) (each `''` for none), `1` to
/// leave out operator and alert rows. Answers `{rows, next}`: each row its id and fields, and
/// the id to read on below (`''` when the walk is done).
const PAGE_SCRIPT: &str = "
local tag = ARGV[1]
local cursor = ARGV[2] == '' and '+inf' or '(' .. ARGV[2]
local limit, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local outcome, by = ARGV[5], ARGV[6]
local since = ARGV[7] ~= '' and tonumber(ARGV[7]) or nil
local untl = ARGV[8] ~= '' and tonumber(ARGV[8]) or nil
local runs_only = ARGV[9] == '1'
local skip = {operator = true, alert = true, ['alert-sent'] = true, ['alert-undelivered'] = true}
local rows, read = {}, 0
while read < budget do
  local ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], cursor, '-inf', 'LIMIT', 0, math.min(100, budget - read))
  if #ids == 0 then return {rows, ''} end
  for _, id in ipairs(ids) do
    read = read + 1
    cursor = '(' .. id
    local h = redis.call('HMGET', tag .. 'run:' .. id,
      'job', 'name', 'tick', 'at', 'fin', 'out', 'by', 'token', 'err', 'att', 'req')
    local at = h[4] and tonumber(h[4])
    if at and since and at < since - tonumber(ARGV[10]) then return {rows, ''} end
    if h[1] and h[2] and at
       and (outcome == '' or h[6] == outcome) and (by == '' or h[7] == by)
       and (not since or at >= since) and (not untl or at < untl)
       and not (runs_only and skip[h[6]]) then
      table.insert(h, 1, id)
      rows[#rows + 1] = h
      if #rows >= limit then return {rows, id} end
    end
  end
end
return {rows, string.sub(cursor, 2)}
";

/// The ledger's recorded ticks: the (job, tick) of each row of every row's index, newest first,
/// from below an id, that started at or after `since` with a tick in (`from`, `to`], operator
/// and alert rows left out. `KEYS`: the index. `ARGV`: the tag, the id to read below (`''`:
/// from the newest), the most entries to read, since, from, to (µs), the clock's slack (µs).
/// Answers `{pairs, next}`: each pair a job and its tick (µs, text), and the id to read on
/// below (`''` when the walk is done).
const TICKS: &str = "
local tag = ARGV[1]
local cursor = ARGV[2] == '' and '+inf' or '(' .. ARGV[2]
local budget = tonumber(ARGV[3])
local since, from, to = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local skip = {operator = true, alert = true, ['alert-sent'] = true, ['alert-undelivered'] = true}
local pairs_, read = {}, 0
while read < budget do
  local ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], cursor, '-inf', 'LIMIT', 0, math.min(100, budget - read))
  if #ids == 0 then return {pairs_, ''} end
  for _, id in ipairs(ids) do
    read = read + 1
    cursor = '(' .. id
    local job, tick, at, out = unpack(redis.call('HMGET', tag .. 'run:' .. id, 'job', 'tick', 'at', 'out'))
    at = at and tonumber(at)
    if at and at < since - tonumber(ARGV[7]) then return {pairs_, ''} end
    local t = tick and tonumber(tick)
    if job and t and at and at >= since and t > from and t <= to and not skip[out] then
      pairs_[#pairs_ + 1] = {job, tick}
    end
  end
end
return {pairs_, string.sub(cursor, 2)}
";

/// The running rows whose lock is not held by their token, with what was found. `KEYS`: the
/// running set. `ARGV`: the tag. Answers `{id, name, kind, token, time}` each: kind `gone` (no
/// lease and no record), `taken` (another token, taken at `time`), `expired` (its own lease,
/// run out at `time`). Ids of rows no longer running are removed from the set.
const ABANDONED: &str = concat!(
    crate::scripts::prelude!(),
    "
local tag = ARGV[1]
local now = clock('')
local found = {}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local key = tag .. 'run:' .. id
  local out, mine, name = unpack(redis.call('HMGET', key, 'out', 'token', 'name'))
  if out ~= 'running' or not name then
    redis.call('SREM', KEYS[1], id)
  elseif mine then
    local lock, meta = tag .. 'lock:' .. name, tag .. 'meta:' .. name
    local lt, lat, luntil = unpack(redis.call('HMGET', lock, 'token', 'at', 'until'))
    local mt, mat, muntil = unpack(redis.call('HMGET', meta, 'token', 'at', 'until'))
    local t, at, untl = lt or mt, lt and lat or mat, lt and luntil or muntil
    if not t then
      found[#found + 1] = {id, name, 'gone', '', ''}
    elseif t ~= mine then
      found[#found + 1] = {id, name, 'taken', t, at or ''}
    elseif not lt or not untl or not tonumber(untl) or tonumber(untl) <= now then
      found[#found + 1] = {id, name, 'expired', t, untl or ''}
    end
  end
end
return found
"
);

/// Closes rows as abandoned, each only while it is still `running`. `KEYS`: the running set.
/// `ARGV`: the tag, then an id and its reason for each row. Answers how many it closed.
const ABANDON: &str = concat!(
    crate::scripts::prelude!(),
    "
local now = num(clock(''))
local closed = 0
for i = 2, #ARGV, 2 do
  local key = ARGV[1] .. 'run:' .. ARGV[i]
  if redis.call('HGET', key, 'out') == 'running' then
    redis.call('HSET', key, 'out', 'abandoned', 'fin', now, 'err', ARGV[i + 1])
    closed = closed + 1
  end
  redis.call('SREM', KEYS[1], ARGV[i])
end
return closed
"
);

/// The history scripts, hashed once.
pub(crate) struct HistoryScripts {
    record: Script,
    finish: Script,
    prune: Script,
    page: Script,
    ticks: Script,
    abandoned: Script,
    abandon: Script,
}

impl HistoryScripts {
    pub(crate) fn new() -> Self {
        Self {
            record: Script::new(RECORD),
            finish: Script::new(FINISH),
            prune: Script::new(PRUNE),
            page: Script::new(PAGE_SCRIPT),
            ticks: Script::new(TICKS),
            abandoned: Script::new(ABANDONED),
            abandon: Script::new(ABANDON),
        }
    }
}

impl Inner {
    fn runs_key(&self, rest: &str) -> String {
        format!("{}runs{rest}", self.tag)
    }

    async fn record_chunk(&self, runs: &[NewRun]) -> Result<Vec<i64>> {
        let rows: Vec<_> = runs
            .iter()
            .map(|run| {
                (
                    &run.job,
                    &run.name,
                    run.tick.map(|t| t.timestamp_micros().to_string()),
                    i32::from(run.outcome == RunOutcome::Running),
                    run.outcome.as_str(),
                    run.fencing_token.map(|t| t.to_string()),
                    run.error.as_deref().map(storable_error),
                    run.attempt,
                    &run.requested_by,
                    i32::from(run.outcome.is_alert()),
                )
            })
            .collect();
        let json = serde_json::to_string(&rows).map_err(|e| self.encode_error(e))?;
        let mut invocation = self.scripts.history.record.prepare_invoke();
        invocation
            .key(self.runs_key(":seq"))
            .key(self.runs_key(""))
            .key(self.runs_key(":running"))
            .key(self.runs_key(&format!(":req:{}", self.request_id())))
            .arg(&self.tag)
            .arg(&self.settings.locked_by)
            .arg(json);
        let operation = || format!("record {} run history rows", runs.len());
        let ids: Vec<String> = self.run(&invocation, operation).await?;
        ids.iter()
            .map(|id| {
                id.parse::<i64>()
                    .map_err(|_| self.unreadable_run("runs:seq", "", &format!("id {id:?}")))
            })
            .collect()
    }

    async fn finish_chunk(&self, ends: &[(i64, &str, Option<&str>)]) -> Result<()> {
        let rows: Vec<_> = ends
            .iter()
            .map(|(id, outcome, error)| (id, outcome, error.map(storable_error)))
            .collect();
        let json = serde_json::to_string(&rows).map_err(|e| self.encode_error(e))?;
        let mut invocation = self.scripts.history.finish.prepare_invoke();
        invocation
            .key(self.runs_key(":running"))
            .arg(&self.tag)
            .arg(json);
        let operation = || format!("finish {} run history rows", ends.len());
        let _: i64 = self.run(&invocation, operation).await?;
        Ok(())
    }

    async fn prune_runs(&self, jobs: &[String], older_than: Duration) -> Result<u64> {
        let json = serde_json::to_string(jobs).map_err(|e| self.encode_error(e))?;
        let mut deleted = 0;
        loop {
            let mut invocation = self.scripts.history.prune.prepare_invoke();
            invocation
                .key(self.runs_key(""))
                .key(self.runs_key(":running"))
                .arg(&self.tag)
                .arg(micros(older_than))
                .arg(PRUNE_CHUNK)
                .arg(&json);
            let operation = || "prune the run history".to_owned();
            let done: u64 = self.run(&invocation, operation).await?;
            deleted += done;
            if done < PRUNE_CHUNK {
                return Ok(deleted);
            }
        }
    }

    /// Up to `limit` rows of `index` below `before`, newest first, as `query` filters them
    /// (its name is the index's).
    async fn page(&self, index: String, query: &RunQuery, limit: u32) -> Result<Vec<RunRecord>> {
        let mut rows = Vec::new();
        let mut before = query.before.map(|b| b.to_string()).unwrap_or_default();
        let time = |t: Option<DateTime<Utc>>| t.map(|t| t.timestamp_micros().to_string());
        loop {
            let mut invocation = self.scripts.history.page.prepare_invoke();
            invocation
                .key(&index)
                .arg(&self.tag)
                .arg(&before)
                .arg(limit as usize - rows.len())
                .arg(PAGE)
                .arg(query.outcome.map(RunOutcome::as_str).unwrap_or_default())
                .arg(query.instance.as_deref().unwrap_or_default())
                .arg(time(query.since).unwrap_or_default())
                .arg(time(query.until).unwrap_or_default())
                .arg(if query.runs_only { "1" } else { "0" })
                .arg(CLOCK_SLACK_US);
            let operation = || "read the run history".to_owned();
            let (found, next): (Vec<Vec<Value>>, String) = self.run(&invocation, operation).await?;
            for row in found {
                rows.push(self.decode(&row)?);
            }
            if next.is_empty() || rows.len() >= limit as usize {
                return Ok(rows);
            }
            before = next;
        }
    }

    async fn runs(&self, query: &RunQuery) -> Result<Vec<RunRecord>> {
        let limit = query.limit;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let Some(name) = &query.name else {
            // Alert rows (the sweeps' read of the open alerts) through their own index.
            if query.outcome.is_some_and(RunOutcome::is_alert) {
                return self.page(self.runs_key(":alerts"), query, limit).await;
            }
            return self.page(self.runs_key(""), query, limit).await;
        };
        // The rows of the lock name and those of the job name, merged newest first.
        let by_name = self.page(self.runs_key(&format!(":name:{name}")), query, limit);
        let by_job = self.page(self.runs_key(&format!(":job:{name}")), query, limit);
        let (by_name, by_job) = futures_util::future::try_join(by_name, by_job).await?;
        let merged: BTreeMap<i64, RunRecord> = by_name
            .into_iter()
            .chain(by_job)
            .map(|row| (row.id, row))
            .collect();
        Ok(merged.into_values().rev().take(limit as usize).collect())
    }

    /// The ledger's recorded (job, tick) pairs: [`TICKS`] scripts, [`PAGE`] index entries each,
    /// until the walk passes `since`.
    async fn recorded_ticks(
        &self,
        since: DateTime<Utc>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<RecordedTicks> {
        let mut recorded = Vec::new();
        let mut before = String::new();
        loop {
            let mut invocation = self.scripts.history.ticks.prepare_invoke();
            invocation
                .key(self.runs_key(""))
                .arg(&self.tag)
                .arg(&before)
                .arg(PAGE)
                .arg(since.timestamp_micros())
                .arg(from.timestamp_micros())
                .arg(to.timestamp_micros())
                .arg(CLOCK_SLACK_US);
            let operation = || "read the ledger's recorded ticks".to_owned();
            let (found, next): (Vec<(String, String)>, String) =
                self.run(&invocation, operation).await?;
            for (job, tick) in found {
                let tick = parse_time(tick.as_bytes()).ok_or_else(|| {
                    let problem = crate::read::problem("tick", tick.as_bytes(), tick.len());
                    self.unreadable_run(&format!("runs:job:{job}"), "tick", &problem)
                })?;
                recorded.push((job, tick));
            }
            if next.is_empty() {
                return Ok(recorded);
            }
            before = next;
        }
    }

    async fn close_abandoned_runs(&self) -> Result<u64> {
        let mut invocation = self.scripts.history.abandoned.prepare_invoke();
        invocation.key(self.runs_key(":running")).arg(&self.tag);
        let operation = || "find abandoned runs".to_owned();
        let found: Vec<(String, String, String, String, String)> =
            self.run(&invocation, operation).await?;
        if found.is_empty() {
            return Ok(0);
        }
        let mut invocation = self.scripts.history.abandon.prepare_invoke();
        invocation.key(self.runs_key(":running")).arg(&self.tag);
        for (id, name, kind, token, time) in &found {
            let when = parse_time(time.as_bytes())
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
                .unwrap_or_else(|| format!("{time:?}"));
            let reason = match kind.as_str() {
                "gone" => format!(
                    "abandoned: lock \"{name}\" has no keys (they were deleted) while this run \
                     was still recorded as running"
                ),
                "taken" => format!(
                    "abandoned: lock \"{name}\" was taken by fencing token {token} at {when} (a \
                     later run or another holder) while this run was still recorded as running \
                     (its process died or stopped, or its end could not be written)"
                ),
                _ => format!(
                    "abandoned: lock \"{name}\" expired at {when} while this run was still \
                     recorded as running (its process died or stopped, or its end could not be \
                     written)"
                ),
            };
            invocation.arg(id).arg(reason);
        }
        let operation = || "close abandoned runs".to_owned();
        self.run(&invocation, operation).await
    }

    /// A row as the `page` script answers it: its id, then `job`, `name`, `tick`, `at`, `fin`,
    /// `out`, `by`, `token`, `err`, `att`, `req`.
    fn decode(&self, row: &[Value]) -> Result<RunRecord> {
        let field = |i: usize| -> Option<Vec<u8>> {
            match row.get(i) {
                Some(Value::BulkString(bytes)) => Some(bytes.clone()),
                Some(Value::SimpleString(text)) => Some(text.clone().into_bytes()),
                Some(Value::Int(n)) => Some(n.to_string().into_bytes()),
                _ => None,
            }
        };
        let text = |i: usize| field(i).map(|b| String::from_utf8_lossy(&b).into_owned());
        let id_text = text(0).unwrap_or_default();
        let key = format!("run:{id_text}");
        let bad = |name: &str, value: &[u8]| {
            self.unreadable_run(&key, name, &crate::read::problem(name, value, value.len()))
        };
        let id = id_text
            .parse::<i64>()
            .map_err(|_| bad("id", id_text.as_bytes()))?;
        let time = |i: usize, name: &str| -> Result<Option<DateTime<Utc>>> {
            match field(i) {
                None => Ok(None),
                Some(v) => parse_time(&v).map(Some).ok_or_else(|| bad(name, &v)),
            }
        };
        let outcome_text = text(6).unwrap_or_default();
        let outcome = outcome_text
            .parse::<RunOutcome>()
            .map_err(|_| bad("out", outcome_text.as_bytes()))?;
        let fencing_token = match field(8) {
            None => None,
            Some(v) => Some(parse_token(&v).ok_or_else(|| bad("token", &v))?),
        };
        let attempt = match field(10) {
            None => None,
            Some(v) => Some(
                String::from_utf8_lossy(&v)
                    .parse::<u32>()
                    .map_err(|_| bad("att", &v))?,
            ),
        };
        let started_at = time(4, "at")?.ok_or_else(|| bad("at", b""))?;
        let mut record = RunRecord::new(
            id,
            text(1).unwrap_or_default(),
            text(2).unwrap_or_default(),
            started_at,
            outcome,
            text(7).unwrap_or_default(),
        );
        record.tick = time(3, "tick")?;
        record.finished_at = time(5, "fin")?;
        record.fencing_token = fencing_token;
        record.error = text(9);
        record.attempt = attempt;
        record.requested_by = text(11);
        Ok(record)
    }

    fn unreadable_run(&self, key: &str, _field: &str, problem: &str) -> Error {
        Error::UnreadableRow {
            backend: Backend::Redis,
            location: format!("{}{key}", self.tag),
            name: key.to_owned(),
            problem: problem.to_owned(),
        }
    }

    fn encode_error(&self, error: serde_json::Error) -> Error {
        Error::Database {
            backend: Backend::Redis,
            operation: "write run history rows as JSON".into(),
            location: self.address.clone(),
            source: Box::new(error),
        }
    }
}

/// The run history in keys beside the locks (see the module docs): each write one script per
/// 500 rows, a read a page of up to 500 index entries at a time.
impl RunStore for RedisLockProvider {
    fn record_run<'a>(&'a self, run: &'a NewRun) -> BoxFuture<'a, Result<i64>> {
        Box::pin(async move {
            let ids = self.inner.record_chunk(std::slice::from_ref(run)).await?;
            Ok(ids[0])
        })
    }

    fn record_runs<'a>(&'a self, runs: &'a [NewRun]) -> BoxFuture<'a, Vec<Result<i64>>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(runs.len());
            for chunk in runs.chunks(WRITE_CHUNK) {
                match self.inner.record_chunk(chunk).await {
                    Ok(ids) => answers.extend(ids.into_iter().map(Ok)),
                    Err(_) => {
                        let each = chunk.iter().map(|run| self.record_run(run));
                        answers.extend(futures_util::future::join_all(each).await);
                    }
                }
            }
            answers
        })
    }

    fn finish_run<'a>(
        &'a self,
        id: i64,
        outcome: RunOutcome,
        error: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.inner
                .finish_chunk(&[(id, outcome.as_str(), error)])
                .await
        })
    }

    fn finish_runs<'a>(&'a self, ends: &'a [RunEnd]) -> BoxFuture<'a, Vec<Result<()>>> {
        Box::pin(async move {
            let mut answers = Vec::with_capacity(ends.len());
            for chunk in ends.chunks(WRITE_CHUNK) {
                let rows: Vec<_> = chunk
                    .iter()
                    .map(|e| (e.id, e.outcome.as_str(), e.error.as_deref()))
                    .collect();
                match self.inner.finish_chunk(&rows).await {
                    Ok(()) => answers.extend(chunk.iter().map(|_| Ok(()))),
                    Err(_) => {
                        let each = chunk
                            .iter()
                            .map(|e| self.finish_run(e.id, e.outcome, e.error.as_deref()));
                        answers.extend(futures_util::future::join_all(each).await);
                    }
                }
            }
            answers
        })
    }

    fn prune_runs<'a>(
        &'a self,
        jobs: &'a [String],
        older_than: Duration,
    ) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.inner.prune_runs(jobs, older_than))
    }

    fn runs<'a>(&'a self, query: &'a RunQuery) -> BoxFuture<'a, Result<Vec<RunRecord>>> {
        Box::pin(self.inner.runs(query))
    }

    fn close_abandoned_runs(&self) -> BoxFuture<'_, Result<u64>> {
        Box::pin(self.inner.close_abandoned_runs())
    }

    /// A script per 500 index entries that reads only each row's job, tick, start and outcome.
    fn recorded_ticks<'a>(
        &'a self,
        since: DateTime<Utc>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> BoxFuture<'a, Result<RecordedTicks>> {
        Box::pin(self.inner.recorded_ticks(since, from, to))
    }
}
