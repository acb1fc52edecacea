//! The Lua scripts of the schedules, one per operation, each run atomically by `EVALSHA`.
//!
//! # Keys (`{P}` is the key prefix, as for the locks)
//!
//! - `{P}:schedule:<name>`: a hash per schedule. Its configuration: `handler`, `payload`,
//!   `cron`, `time_zone`, `note`, `overlap`, `rules` (text), `paused` and `retry_past` (`0` or `1`), `jitter`,
//!   `retry_base`, `retry_cap` (whole µs), `retry_attempts` (an integer below 2^32); its
//!   change: `version`, `deleted` (`0` or `1`), `updated_at` (µs since 1970), `updated_by`;
//!   its pending "run now" request, if any: `trigger_id`, `trigger_by`, `trigger_at`,
//!   `claimed_by`, `claimed_until`, `started`; and `req`, the request id of the last script
//!   that wrote it.
//! - `{P}:schedules`: a sorted set of the schedule names, each scored by its version.
//! - `{P}:schedules:version`: the counter the versions come from (`INCR`).
//! - The channel `{P}:schedules` (channels are not keys): each change publishes its version
//!   there, for [`change_feed`](shedlock::schedules::ScheduleStore::change_feed). A server
//!   that refuses the `PUBLISH` (an ACL without the channel) still makes the change: the
//!   watchers poll.
//!
//! # Versions
//!
//! A change's version is `INCR` of the counter, raised above the highest score of the sorted
//! set when it is not (the counter deleted by hand), so versions never go back; a version is
//! below 2^53 (a score holds it exactly). Every script checks the type of each key and every
//! field it reads before it writes anything (`SHEDLOCK_WRONGTYPE`, `SHEDLOCK_UNREADABLE`, as
//! the lock scripts), except the fields the change replaces, so a corrupted field can be
//! repaired by an update that sets it.
//!
//! # A script sent twice
//!
//! The provider sends a script once more when its connection broke before the answer came
//! (the first may have run). Each writing script carries a request id, unique to the call and
//! the same for its retry, and records it in the hash (`req`) when it writes: a script that
//! finds its own id there answers what the first run did (the schedule written, the request
//! made, claimed, started or finished) instead of "exists", "already pending" or "no".
//!
//! The reading script (`since`) reads the hashes of the names it finds in the sorted set,
//! keys it does not declare in `KEYS`: they carry the same hash tag, so they live in the same
//! cluster slot.

/// What every schedule script starts with, after the lock scripts' prelude: the fields, the
/// rules by which each is read (`load`), the type check of a key (`check_as`), the next
/// version (`next_version`) and the cap on run-time schedules (`run_time_over`: `nil` when
/// `adding` more fit under `cap`, else how many live ones, a handler and not deleted, the
/// store holds; the sorted set's size answers without reading a hash until it nears the
/// cap).
macro_rules! schedule_prelude {
    () => {
        concat!(
            crate::scripts::prelude!(),
            "
local CONFIG = {'handler', 'payload', 'cron', 'time_zone', 'paused', 'jitter',
  'retry_attempts', 'retry_base', 'retry_cap', 'retry_past', 'note', 'overlap', 'rules',
  'deadlines'}
local TRIGGER = {'trigger_id', 'trigger_by', 'trigger_at', 'claimed_by', 'claimed_until',
  'started'}
local RULES = {{'version', 'count'}, {'deleted', 'flag'}, {'updated_at', 'time'},
  {'paused', 'flag'}, {'jitter', 'count'}, {'retry_attempts', 'attempts'},
  {'retry_base', 'count'}, {'retry_cap', 'count'}, {'retry_past', 'flag'},
  {'trigger_id', 'count'}, {'trigger_at', 'time'}, {'claimed_until', 'time'},
  {'started', 'flag'}}
local LIMIT = 9007199254740992
local function check_as(key, want)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    error({err = 'SHEDLOCK_WRONGTYPE ' .. t .. ' ' .. key})
  end
end
local function count(key, field, value)
  local _, d = digits(key, field, value, false)
  if d == nil then return nil end
  if #d > 16 or tonumber(d) >= LIMIT then unreadable(key, field, value) end
  return tonumber(d)
end
local function load(key, skip)
  check(key)
  local flat = redis.call('HGETALL', key)
  local h = {}
  for i = 1, #flat, 2 do h[flat[i]] = flat[i + 1] end
  for _, rule in ipairs(RULES) do
    local field, kind, v = rule[1], rule[2], h[rule[1]]
    if v ~= nil and not skip[field] then
      if kind == 'flag' then
        if v ~= '0' and v ~= '1' then unreadable(key, field, v) end
      elseif kind == 'time' then
        time(key, field, v)
      elseif kind == 'attempts' then
        local n = count(key, field, v)
        if n > 4294967295 then unreadable(key, field, v) end
      else
        count(key, field, v)
      end
    end
  end
  return h
end
local function live(h) return h['version'] ~= nil and h['deleted'] ~= '1' end
local function top(zset)
  local t = redis.call('ZREVRANGE', zset, 0, 0, 'WITHSCORES')
  if not t[2] then return 0 end
  local s = tonumber(t[2])
  if s == nil or s ~= s or s < 0 or s >= LIMIT or s ~= math.floor(s) then
    unreadable(zset, 'score', t[2])
  end
  return s
end
local function current(zset, counter)
  local c = redis.call('GET', counter)
  local v = 0
  if c then v = count(counter, 'value', c) end
  return math.max(v, top(zset))
end
local function next_version(zset, counter)
  local v = current(zset, counter) + 1
  redis.call('SET', counter, num(v))
  return v
end
local function drop(key, h, fields)
  local gone = {}
  for _, f in ipairs(fields) do
    if h[f] ~= nil then gone[#gone + 1] = f end
  end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
end
local function run_time_over(zset, prefix, adding, cap)
  if adding == 0 or redis.call('ZCARD', zset) + adding <= cap then return nil end
  local held = 0
  for _, name in ipairs(redis.call('ZRANGE', zset, 0, -1)) do
    local key = prefix .. 'schedule:' .. name
    check(key)
    local f = redis.call('HMGET', key, 'handler', 'deleted')
    if f[1] and f[2] ~= '1' then held = held + 1 end
  end
  if held + adding <= cap then return nil end
  return held
end
local function same_id(key, h, id)
  if h['trigger_id'] == nil then return false end
  local _, d = digits(key, 'trigger_id', h['trigger_id'], false)
  return d == id
end
"
        )
    };
}

/// The highest version handed out: `max(counter, highest score)`.
///
/// `KEYS`: `{P}:schedules`, `{P}:schedules:version`. Answers the version as a decimal string.
pub(crate) const VERSION: &str = concat!(
    schedule_prelude!(),
    "
check_as(KEYS[1], 'zset')
check_as(KEYS[2], 'string')
return num(current(KEYS[1], KEYS[2]))
"
);

/// One page of the schedules whose version is above a bound, in version order.
///
/// `KEYS`: `{P}:schedules`. `ARGV`: the bound (exclusive, as Redis writes a score), the page
/// size, `{P}:`. Answers `{{name, score, {field, value, …}}, …}`; a name whose hash is gone
/// answers an empty list of fields.
pub(crate) const SINCE: &str = concat!(
    schedule_prelude!(),
    "
check_as(KEYS[1], 'zset')
local page = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[1], '+inf', 'WITHSCORES',
  'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for i = 1, #page, 2 do
  local key = ARGV[3] .. 'schedule:' .. page[i]
  check(key)
  out[#out + 1] = {page[i], page[i + 1], redis.call('HGETALL', key)}
end
return out
"
);

/// One schedule's hash, as stored.
///
/// `KEYS`: `{P}:schedule:<name>`. Answers `{field, value, …}` (empty when there is none).
pub(crate) const GET: &str = concat!(
    schedule_prelude!(),
    "
check(KEYS[1])
return redis.call('HGETALL', KEYS[1])
"
);

/// Create or update: the schedule after the change is worked out and checked before anything
/// is written.
///
/// `KEYS`: `{P}:schedule:<name>`, `{P}:schedules`, `{P}:schedules:version`. `ARGV`: `create`
/// or `update`, the name, who, the handler (`create` only; empty for an override), the
/// channel, the request id, the cap on run-time schedules, `{P}:`, `n`, then `n` pairs of
/// field and value to set, then the fields to clear.
///
/// `create` over a live schedule answers `{'exists'}`; a `create` with a handler past the cap
/// answers `{'cap', held}`, nothing written. A schedule that does not exist or is a
/// tombstone starts from no configuration (`update` then makes an override); a live one from
/// its own. A result with a handler and no cron, or a payload and no handler, answers
/// `{'invalid', reason}`, nothing written. Else: a new version, the fields written (those
/// cleared removed), `deleted` 0, the name scored by the version, the version published;
/// answers `{'ok', {field, value, …}}`. A pending trigger is kept.
pub(crate) const WRITE: &str = concat!(
    schedule_prelude!(),
    "
local hash, zset, counter = KEYS[1], KEYS[2], KEYS[3]
check_as(zset, 'zset')
check_as(counter, 'string')
check(hash)
local mode, name, by, handler, channel, req = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
  ARGV[6]
local cap, prefix, n = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
local sets, clears = {}, {}
for i = 0, n - 1 do sets[#sets + 1] = {ARGV[10 + 2 * i], ARGV[11 + 2 * i]} end
for i = 10 + 2 * n, #ARGV do clears[#clears + 1] = ARGV[i] end
local flat = redis.call('HGETALL', hash)
local was = {}
for i = 1, #flat, 2 do was[flat[i]] = flat[i + 1] end
if was['req'] == req then return {'ok', flat} end
local alive = live(was)
if mode == 'create' and alive then return {'exists'} end
if mode == 'create' and handler ~= '' then
  local held = run_time_over(zset, prefix, 1, cap)
  if held then return {'cap', num(held)} end
end
local skip = {}
if alive then
  for _, p in ipairs(sets) do skip[p[1]] = true end
  for _, f in ipairs(clears) do skip[f] = true end
else
  for _, f in ipairs(CONFIG) do skip[f] = true end
end
local h = load(hash, skip)
local new = {}
if alive then
  for _, f in ipairs(CONFIG) do new[f] = h[f] end
end
if mode == 'create' and handler ~= '' then new['handler'] = handler end
for _, p in ipairs(sets) do new[p[1]] = p[2] end
for _, f in ipairs(clears) do new[f] = nil end
if new['handler'] and not new['cron'] then
  return {'invalid', 'cron: a job created at run time (handler ' .. new['handler']
    .. ') needs a cron expression'}
end
if not new['handler'] and new['payload'] then
  return {'invalid', 'payload: only a job created at run time (with a handler) has one; '
    .. 'this is an override of a job defined in code'}
end
local server, now = clock('')
local v = next_version(zset, counter)
local gone = {}
for _, f in ipairs(CONFIG) do
  if new[f] == nil and h[f] ~= nil then gone[#gone + 1] = f end
end
if #gone > 0 then redis.call('HDEL', hash, unpack(gone)) end
local args = {'version', num(v), 'deleted', '0', 'updated_at', num(now), 'updated_by', by,
  'req', req}
for _, f in ipairs(CONFIG) do
  if new[f] ~= nil then
    args[#args + 1] = f
    args[#args + 1] = new[f]
  end
end
redis.call('HSET', hash, unpack(args))
redis.call('ZADD', zset, num(v), name)
redis.pcall('PUBLISH', channel, num(v))
return {'ok', redis.call('HGETALL', hash)}
"
);

/// Delete: a live schedule becomes a tombstone at a new version (its fields kept, a trigger
/// not yet started dropped); answers 1, or 0 when there was none (nothing written).
///
/// `KEYS`: as [`WRITE`]. `ARGV`: the name, who, the channel, the request id.
pub(crate) const DELETE: &str = concat!(
    schedule_prelude!(),
    "
local hash, zset, counter = KEYS[1], KEYS[2], KEYS[3]
check_as(zset, 'zset')
check_as(counter, 'string')
local h = load(hash, {})
if h['req'] == ARGV[4] then return 1 end
if not live(h) then return 0 end
local server, now = clock('')
local v = next_version(zset, counter)
if h['trigger_id'] ~= nil and h['started'] ~= '1' then drop(hash, h, TRIGGER) end
redis.call('HSET', hash, 'version', num(v), 'deleted', '1', 'updated_at', num(now),
  'updated_by', ARGV[2], 'req', ARGV[4])
redis.call('ZADD', zset, num(v), ARGV[1])
redis.pcall('PUBLISH', ARGV[3], num(v))
return 1
"
);

/// Request a run now. A trigger already there answers `{'pending', {field, value, …}}` unless
/// it started and its lease ran out by the server's clock (its run counts as ended). Else a
/// new version, which is the request's id; a schedule that does not exist or is a tombstone
/// becomes an override with no configuration; answers `{'requested', id}`.
///
/// `KEYS`: as [`WRITE`]. `ARGV`: the name, who, the channel, the request id.
pub(crate) const REQUEST: &str = concat!(
    schedule_prelude!(),
    "
local hash, zset, counter = KEYS[1], KEYS[2], KEYS[3]
check_as(zset, 'zset')
check_as(counter, 'string')
local h = load(hash, {})
if h['req'] == ARGV[4] then return {'requested', h['trigger_id'] or '0'} end
local server, now = clock('')
if h['trigger_id'] ~= nil then
  local untl = time(hash, 'claimed_until', h['claimed_until'])
  local ended = h['started'] == '1' and (untl == nil or untl <= now)
  if not ended then return {'pending', redis.call('HGETALL', hash)} end
end
local v = next_version(zset, counter)
if not live(h) then drop(hash, h, CONFIG) end
drop(hash, h, {'claimed_by', 'claimed_until', 'started'})
redis.call('HSET', hash, 'version', num(v), 'deleted', '0', 'updated_at', num(now),
  'updated_by', ARGV[2], 'trigger_id', num(v), 'trigger_by', ARGV[2], 'trigger_at', num(now),
  'req', ARGV[4])
redis.call('ZADD', zset, num(v), ARGV[1])
redis.pcall('PUBLISH', ARGV[3], num(v))
return {'requested', num(v)}
"
);

/// Claim request `id` for `by` until now + lease, when it is not started and its claim (if
/// any) ran out by the server's clock. Answers 1 or 0. No new version: a claim is a lease, as
/// a lock is.
///
/// `KEYS`: `{P}:schedule:<name>`. `ARGV`: the id, who, the lease (µs), the request id.
pub(crate) const CLAIM: &str = concat!(
    schedule_prelude!(),
    "
local hash = KEYS[1]
local h = load(hash, {})
if h['req'] == ARGV[4] then return 1 end
if not same_id(hash, h, ARGV[1]) or h['started'] == '1' then return 0 end
local server, now = clock('')
local untl = time(hash, 'claimed_until', h['claimed_until'])
if untl ~= nil and untl > now then return 0 end
redis.call('HSET', hash, 'claimed_by', ARGV[2], 'claimed_until', num(now + tonumber(ARGV[3])),
  'req', ARGV[4])
return 1
"
);

/// Start request `id`: while `by` holds a live claim on it and it has not started, it is
/// started and held until now + lease. Answers 1 or 0 (the claim was lost).
///
/// `KEYS`: `{P}:schedule:<name>`. `ARGV`: the id, who, the lease (µs), the request id.
pub(crate) const START: &str = concat!(
    schedule_prelude!(),
    "
local hash = KEYS[1]
local h = load(hash, {})
if h['req'] == ARGV[4] then return 1 end
if not same_id(hash, h, ARGV[1]) or h['started'] == '1' then return 0 end
if h['claimed_by'] ~= ARGV[2] then return 0 end
local server, now = clock('')
local untl = time(hash, 'claimed_until', h['claimed_until'])
if untl == nil or untl <= now then return 0 end
redis.call('HSET', hash, 'started', '1', 'claimed_until', num(now + tonumber(ARGV[3])),
  'req', ARGV[4])
return 1
"
);

/// Finish request `id`: its fields removed, at a new version (readers learn that it is gone).
/// Answers 1, or 0 when the schedule has no request `id` (nothing written).
///
/// `KEYS`: as [`WRITE`]. `ARGV`: the id, the name, the channel, the request id.
pub(crate) const FINISH: &str = concat!(
    schedule_prelude!(),
    "
local hash, zset, counter = KEYS[1], KEYS[2], KEYS[3]
check_as(zset, 'zset')
check_as(counter, 'string')
local h = load(hash, {})
if h['req'] == ARGV[4] then return 1 end
if not same_id(hash, h, ARGV[1]) then return 0 end
local v = next_version(zset, counter)
drop(hash, h, TRIGGER)
redis.call('HSET', hash, 'version', num(v), 'req', ARGV[4])
redis.call('ZADD', zset, num(v), ARGV[2])
redis.pcall('PUBLISH', ARGV[3], num(v))
return 1
"
);

/// Which of some names hold a live schedule (a read, before a batch writes anything).
///
/// `KEYS`: `{P}:schedule:<name>` of each. `ARGV`: the names, in the same order. Answers the
/// first name whose hash is live, or an empty string.
pub(crate) const LIVE: &str = concat!(
    schedule_prelude!(),
    "
local skip = {}
for _, f in ipairs(CONFIG) do skip[f] = true end
for i, key in ipairs(KEYS) do
  if live(load(key, skip)) then return ARGV[i] end
end
return ''
"
);

/// Creates a batch of schedules (a chunk of a bigger one), all or none: every name is read
/// first, and a live one answers `{'exists', name}` with nothing written. Else each gets the
/// next version in turn (consecutive), from no configuration (a tombstone's fields removed, a
/// trigger it kept left), as [`WRITE`]'s `create`; the counter is set to the last version,
/// which is published once. Answers `{'ok', {{field, value, …}, …}}`, the hashes in the order
/// given. A retry of the same script (its request id in the first hash) answers the hashes.
///
/// `KEYS`: `{P}:schedules`, `{P}:schedules:version`, then `{P}:schedule:<name>` of each.
/// `ARGV`: who, the channel, the request id, the cap on run-time schedules, `{P}:`, the number
/// of schedules, then for each: its name, its handler (empty for an override), `k`, and `k`
/// pairs of field and value to set. Run-time schedules past the cap answer `{'cap', held}`,
/// nothing written.
/// The schedules are checked by the provider before it sends them (handler, cron, payload):
/// the script does not check them again.
pub(crate) const BATCH: &str = concat!(
    schedule_prelude!(),
    "
local zset, counter = KEYS[1], KEYS[2]
check_as(zset, 'zset')
check_as(counter, 'string')
local by, channel, req = ARGV[1], ARGV[2], ARGV[3]
local cap, prefix, n = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local items = {}
local a = 7
for i = 1, n do
  local it = {hash = KEYS[2 + i], name = ARGV[a], handler = ARGV[a + 1], sets = {}}
  local k = tonumber(ARGV[a + 2])
  for j = 0, k - 1 do it.sets[#it.sets + 1] = {ARGV[a + 3 + 2 * j], ARGV[a + 4 + 2 * j]} end
  a = a + 3 + 2 * k
  items[i] = it
end
local function answer()
  local out = {}
  for i, it in ipairs(items) do out[i] = redis.call('HGETALL', it.hash) end
  return {'ok', out}
end
if n > 0 and check(items[1].hash) and redis.call('HGET', items[1].hash, 'req') == req then
  return answer()
end
local skip = {}
for _, f in ipairs(CONFIG) do skip[f] = true end
local hs = {}
for i, it in ipairs(items) do
  local h = load(it.hash, skip)
  if live(h) then return {'exists', it.name} end
  hs[i] = h
end
local adding = 0
for _, it in ipairs(items) do
  if it.handler ~= '' then adding = adding + 1 end
end
local held = run_time_over(zset, prefix, adding, cap)
if held then return {'cap', num(held)} end
local server, now = clock('')
local v = current(zset, counter)
for i, it in ipairs(items) do
  v = v + 1
  local h = hs[i]
  local new = {}
  if it.handler ~= '' then new['handler'] = it.handler end
  for _, p in ipairs(it.sets) do new[p[1]] = p[2] end
  local gone = {}
  for _, f in ipairs(CONFIG) do
    if new[f] == nil and h[f] ~= nil then gone[#gone + 1] = f end
  end
  if #gone > 0 then redis.call('HDEL', it.hash, unpack(gone)) end
  local args = {'version', num(v), 'deleted', '0', 'updated_at', num(now), 'updated_by', by,
    'req', req}
  for _, f in ipairs(CONFIG) do
    if new[f] ~= nil then
      args[#args + 1] = f
      args[#args + 1] = new[f]
    end
  end
  redis.call('HSET', it.hash, unpack(args))
  redis.call('ZADD', zset, num(v), it.name)
end
if n > 0 then
  redis.call('SET', counter, num(v))
  redis.pcall('PUBLISH', channel, num(v))
end
return answer()
"
);

/// Whether `adding` more run-time schedules fit under the cap (a batch's check before its
/// first chunk is written).
///
/// `KEYS`: `{P}:schedules`. `ARGV`: `adding`, the cap, `{P}:`. Answers -1 when they fit, else
/// how many live run-time schedules the store holds.
pub(crate) const CAP: &str = concat!(
    schedule_prelude!(),
    "
check_as(KEYS[1], 'zset')
local held = run_time_over(KEYS[1], ARGV[3], tonumber(ARGV[1]), tonumber(ARGV[2]))
if held then return held end
return -1
"
);
