//! Backfills ([`ScheduleStore::create_backfill`](shedlock::schedules::ScheduleStore::create_backfill)
//! and the methods after it) beside the schedules, each operation one Lua script, times the
//! server's (`TIME`):
//!
//! - `{<prefix>}:backfills`: a hash, per backfill (the field: its id in decimal) the JSON of
//!   its row: `id`, `job`, `from_tick`, `to_tick`, `max_running`, `rate_per_min` (`null` for no bound),
//!   `rerun`, `total`, `requested_by`, `state`, `done`, `skipped`, `failed`, `created_at`,
//!   `updated_at`, `updated_by`. Times are whole microseconds since 1970 written as strings of
//!   digits (the scripts' JSON writes a number with 14 significant digits, fewer than a time
//!   in microseconds has); counts and bounds are numbers.
//! - `{<prefix>}:backfill_id`: the counter the ids come from (`INCR`).
//!
//! A change of state and a count are each one script that reads the row, changes it and
//! writes it back, so they are atomic.

use chrono::{DateTime, Utc};
use redis::{Script, Value};
use serde_json::json;
use shedlock::schedules::{
    BackfillCount, BackfillState, NewBackfill, StoredBackfill, check as shared,
};
use shedlock::{Backend, Error, Result};

use crate::Inner;

/// What every backfill script starts with, after the lock scripts' prelude: the server's time
/// in microseconds as a string of digits (`now_us`), the type check of the counter
/// (`check_counter`) and a row's JSON read (`decoded`: `nil` when it is not a JSON object).
macro_rules! backfill_prelude {
    () => {
        concat!(
            crate::scripts::prelude!(),
            "
local function now_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end
local function check_counter(key)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= 'string' then
    error({err = 'SHEDLOCK_WRONGTYPE ' .. t .. ' ' .. key})
  end
end
local function decoded(json)
  local ok, b = pcall(cjson.decode, json)
  if ok and type(b) == 'table' then return b end
  return nil
end
"
        )
    };
}

/// Stores a new backfill: its id from the counter (above every id the hash holds, also when
/// the counter was deleted by hand), `running`, its counts at zero, created and updated now by
/// its requester; answers its JSON. KEYS: the hash, the counter. ARGV: the spec's JSON.
const CREATE: &str = concat!(
    backfill_prelude!(),
    "
check(KEYS[1])
check_counter(KEYS[2])
local id = redis.call('INCR', KEYS[2])
if redis.call('HGET', KEYS[1], num(id)) then
  local all = redis.call('HGETALL', KEYS[1])
  local top = 0
  for i = 1, #all, 2 do
    local n = tonumber(all[i])
    if n ~= nil and n > top then top = n end
  end
  id = top + 1
  redis.call('SET', KEYS[2], num(id))
end
local b = decoded(ARGV[1])
local now = now_us()
b['id'] = id
b['state'] = 'running'
b['done'] = 0
b['skipped'] = 0
b['failed'] = 0
b['created_at'] = now
b['updated_at'] = now
b['updated_by'] = b['requested_by']
local json = cjson.encode(b)
redis.call('HSET', KEYS[1], num(id), json)
return {num(id), json}
"
);

/// Every backfill: the hash, flat (id, JSON, …). KEYS: the hash.
const ALL: &str = concat!(
    backfill_prelude!(),
    "
check(KEYS[1])
return redis.call('HGETALL', KEYS[1])
"
);

/// One backfill's JSON, or nil. KEYS: the hash. ARGV: the id.
const ONE: &str = concat!(
    backfill_prelude!(),
    "
check(KEYS[1])
return redis.call('HGET', KEYS[1], ARGV[1])
"
);

/// Sets a backfill's state, updated now by who, if its state is one of those given:
/// `{'ok', json}`, `{'none'}` (no such backfill, or another state), `{'unreadable', json}`.
/// KEYS: the hash. ARGV: the id, the new state, who, the states it may be in.
const SET_STATE: &str = concat!(
    backfill_prelude!(),
    "
check(KEYS[1])
local json = redis.call('HGET', KEYS[1], ARGV[1])
if not json then return {'none'} end
local b = decoded(json)
if b == nil or type(b['state']) ~= 'string' then return {'unreadable', json} end
for i = 4, #ARGV do
  if b['state'] == ARGV[i] then
    b['state'] = ARGV[2]
    b['updated_at'] = now_us()
    b['updated_by'] = ARGV[3]
    json = cjson.encode(b)
    redis.call('HSET', KEYS[1], ARGV[1], json)
    return {'ok', json}
  end
end
return {'none'}
"
);

/// Adds one tick to a backfill's counts, updated now: `{'ok'}`, `{'none'}` (no such
/// backfill), `{'unreadable', json}`. KEYS: the hash. ARGV: the id, what `done`, `failed` and
/// `skipped` each gain.
const COUNT: &str = concat!(
    backfill_prelude!(),
    "
check(KEYS[1])
local json = redis.call('HGET', KEYS[1], ARGV[1])
if not json then return {'none'} end
local b = decoded(json)
if b == nil then return {'unreadable', json} end
for i, field in ipairs({'done', 'failed', 'skipped'}) do
  if type(b[field]) ~= 'number' then return {'unreadable', json} end
  b[field] = b[field] + tonumber(ARGV[i + 1])
end
b['updated_at'] = now_us()
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(b))
return {'ok'}
"
);

/// The backfill scripts, hashed once.
pub(crate) struct BackfillScripts {
    create: Script,
    all: Script,
    one: Script,
    set_state: Script,
    count: Script,
}

impl BackfillScripts {
    pub(crate) fn new() -> Self {
        Self {
            create: Script::new(CREATE),
            all: Script::new(ALL),
            one: Script::new(ONE),
            set_state: Script::new(SET_STATE),
            count: Script::new(COUNT),
        }
    }
}

/// A time as the JSON keeps it: whole microseconds since 1970, as a string.
fn micros_text(t: DateTime<Utc>) -> String {
    t.timestamp_micros().to_string()
}

/// Backfill `id`'s JSON read back, or what is wrong with it.
fn parse(id: i64, json: &str) -> std::result::Result<StoredBackfill, String> {
    let row: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("not JSON ({e})"))?;
    let field = |name: &str| row.get(name).ok_or_else(|| format!("`{name}` is missing"));
    let text = |name: &str| {
        field(name)?
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("`{name}` is not a string"))
    };
    let count = |name: &str| {
        field(name)?
            .as_u64()
            .ok_or_else(|| format!("`{name}` is not a whole number from 0"))
    };
    let small = |name: &str, value: u64| {
        u32::try_from(value).map_err(|_| format!("`{name}` is {value}, above 2^32 − 1"))
    };
    let time = |name: &str| {
        let text = text(name)?;
        text.parse::<i64>()
            .ok()
            .and_then(DateTime::from_timestamp_micros)
            .ok_or_else(|| format!("`{name}` is {text:?}, not a time in microseconds since 1970"))
    };
    let rate_per_min = match field("rate_per_min")? {
        serde_json::Value::Null => None,
        value => {
            let rate = value
                .as_u64()
                .ok_or_else(|| "`rate_per_min` is not a whole number or null".to_owned())?;
            Some(small("rate_per_min", rate)?)
        }
    };
    let rerun = field("rerun")?
        .as_bool()
        .ok_or_else(|| "`rerun` is not true or false".to_owned())?;
    let state: BackfillState = text("state")?
        .parse()
        .map_err(|_| format!("`state` is {:?}", text("state").unwrap_or_default()))?;
    let spec = NewBackfill::new(
        text("job")?,
        time("from_tick")?,
        time("to_tick")?,
        count("total")?,
        text("requested_by")?,
    )
    .max_running(small("max_running", count("max_running")?)?)
    .rate_per_min(rate_per_min)
    .rerun(rerun);
    let mut stored = StoredBackfill::new(id, spec, time("created_at")?);
    stored.state = state;
    stored.done = count("done")?;
    stored.skipped = count("skipped")?;
    stored.failed = count("failed")?;
    stored.updated_at = time("updated_at")?;
    stored.updated_by = text("updated_by")?;
    Ok(stored)
}

/// A status the scripts answer, as text.
fn status(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

impl Inner {
    /// `{<prefix>}:backfills`.
    fn backfills_key(&self) -> String {
        format!("{}backfills", self.tag)
    }

    /// `{<prefix>}:backfill_id`.
    fn backfill_id_key(&self) -> String {
        format!("{}backfill_id", self.tag)
    }

    /// Backfill `id`'s JSON read, or [`Error::UnreadableRow`] naming the hash, the backfill and
    /// what is wrong.
    fn read_backfill(&self, id: i64, json: &str) -> Result<StoredBackfill> {
        parse(id, json).map_err(|problem| {
            let mut shown: String = json.chars().take(64).collect();
            if shown.len() < json.len() {
                shown.push('…');
            }
            Error::UnreadableRow {
                backend: Backend::Redis,
                location: self.backfills_key(),
                name: format!("backfill {id}"),
                problem: format!("field `{id}` holds {shown:?}, which is no backfill: {problem}"),
            }
        })
    }

    pub(crate) async fn create_backfill(&self, new: &NewBackfill) -> Result<StoredBackfill> {
        shared::backfill(new)?;
        let spec = json!({
            "job": new.job,
            "from_tick": micros_text(new.from),
            "to_tick": micros_text(new.to),
            "max_running": new.max_running,
            "rate_per_min": new.rate_per_min,
            "rerun": new.rerun,
            "total": new.total,
            "requested_by": new.requested_by,
        });
        let mut invocation = self.scripts.backfills.create.prepare_invoke();
        invocation
            .key(self.backfills_key())
            .key(self.backfill_id_key())
            .arg(spec.to_string());
        let operation = || format!("create a backfill of {:?}", new.job);
        let (id, json): (String, String) = self.run(&invocation, operation).await?;
        let id = id
            .parse()
            .map_err(|_| self.unexpected(&operation(), format!("the id {id:?}")))?;
        self.read_backfill(id, &json)
    }

    /// Every backfill, by id (the hash holds them in no order).
    pub(crate) async fn backfills(&self) -> Result<Vec<StoredBackfill>> {
        let mut invocation = self.scripts.backfills.all.prepare_invoke();
        invocation.key(self.backfills_key());
        let operation = || "read the backfills".to_owned();
        let flat: Vec<(String, String)> = self.run(&invocation, operation).await?;
        let mut all = Vec::with_capacity(flat.len());
        for (id, json) in flat {
            let Ok(id) = id.parse::<i64>() else {
                tracing::warn!(
                    key = self.backfills_key(),
                    field = id,
                    "a field of the backfills is no id (written by hand?): left out"
                );
                continue;
            };
            all.push(self.read_backfill(id, &json)?);
        }
        all.sort_by_key(|b| b.id);
        Ok(all)
    }

    pub(crate) async fn backfill(&self, id: i64) -> Result<Option<StoredBackfill>> {
        let mut invocation = self.scripts.backfills.one.prepare_invoke();
        invocation.key(self.backfills_key()).arg(id);
        let json: Option<String> = self
            .run(&invocation, || format!("read backfill {id}"))
            .await?;
        json.map(|json| self.read_backfill(id, &json)).transpose()
    }

    /// What the `set_state` and `count` scripts answered: the JSON written, if any.
    fn changed(
        &self,
        id: i64,
        answer: &[Value],
        operation: &dyn Fn() -> String,
    ) -> Result<Option<String>> {
        match status(answer.first()).as_deref() {
            Some("ok") => Ok(status(answer.get(1))),
            Some("none") => Ok(None),
            Some("unreadable") => {
                let json = status(answer.get(1)).unwrap_or_default();
                match self.read_backfill(id, &json) {
                    Err(e) => Err(e),
                    Ok(_) => Err(self.unexpected(&operation(), format!("{answer:?}"))),
                }
            }
            _ => Err(self.unexpected(&operation(), format!("the answer {answer:?}"))),
        }
    }

    pub(crate) async fn set_backfill_state(
        &self,
        id: i64,
        state: BackfillState,
        from: &[BackfillState],
        by: &str,
    ) -> Result<Option<StoredBackfill>> {
        shared::who("backfill", "updated_by", by)?;
        if from.is_empty() {
            return Ok(None);
        }
        let mut invocation = self.scripts.backfills.set_state.prepare_invoke();
        invocation
            .key(self.backfills_key())
            .arg(id)
            .arg(state.as_str())
            .arg(by);
        for from in from {
            invocation.arg(from.as_str());
        }
        let operation = || format!("set backfill {id} {state}");
        let answer: Vec<Value> = self.run(&invocation, operation).await?;
        match self.changed(id, &answer, &operation)? {
            Some(json) => self.read_backfill(id, &json).map(Some),
            None => Ok(None),
        }
    }

    pub(crate) async fn count_backfill(&self, id: i64, count: BackfillCount) -> Result<()> {
        let (done, failed, skipped) = match count {
            BackfillCount::Ran => (1, 0, 0),
            BackfillCount::Failed => (1, 1, 0),
            BackfillCount::Skipped => (0, 0, 1),
            other => {
                return Err(Error::InvalidSchedule {
                    name: "backfill".to_owned(),
                    reason: format!("count: {other:?} is a count this provider does not know"),
                });
            }
        };
        let mut invocation = self.scripts.backfills.count.prepare_invoke();
        invocation
            .key(self.backfills_key())
            .arg(id)
            .arg(done)
            .arg(failed)
            .arg(skipped);
        let operation = || format!("count a tick of backfill {id} ({count:?})");
        let answer: Vec<Value> = self.run(&invocation, operation).await?;
        self.changed(id, &answer, &operation).map(drop)
    }
}
