//! The Lua scripts of [`RedisLockProvider`](crate::RedisLockProvider): one per operation, each
//! run by `EVALSHA` in one round trip, each atomic on the server.
//!
//! # Keys
//!
//! Every key of one prefix `P` (default `shedlock`) carries the cluster hash tag `{P}`, so all
//! of them live in one slot, as an SQL lock table lives on one server:
//!
//! - `{P}:lock:<name>`: the lease, a hash `token`, `by`, `at`, `until`, `req`, that Redis
//!   expires when the lease runs out (`PEXPIRE`). It exists exactly while someone may hold the
//!   lock. `req` names the acquire call that took it, so that the same call sent once more
//!   (its connection broke before the answer came) gets its own lease back.
//! - `{P}:meta:<name>`: the lock's record, a hash `token`, `by`, `at`, `until`, `tick`, that
//!   never expires: the newest fencing token and the newest claimed tick outlive the lease.
//! - `{P}:names`: a set of every lock name, for the operator's list.
//!
//! Times (`at`, `until`, `tick`) and durations are whole microseconds since the epoch, written
//! as decimal integers (`string.format('%.0f')`: Lua's numbers are doubles, exact to 2^53 µs,
//! year 2255). Tokens are compared as the strings they were written as.
//!
//! # The clock
//!
//! `TIME`, the server's own clock, decides expiry unless the caller passes its own time (the
//! application clock mode), as the empty string or an integer in microseconds.
//!
//! # Fencing tokens
//!
//! A new token is `max(previous + 1, TIME in µs)`: one more than the lock's newest, and never
//! below the server's clock in microseconds. So a token never goes back, also after both keys
//! of a lock are deleted by hand or lost in a restart of a server that kept nothing on disk:
//! every earlier token was at most the server's time when it was issued (plus the few that
//! one microsecond could issue), and that time has passed.

/// Helpers every script starts with: `num` writes an integer exactly; `check` refuses a key
/// that holds something other than a hash, naming it (`SHEDLOCK_WRONGTYPE <type> <key>`), and
/// `check_set` one that holds something other than a set;
/// `clock` reads `TIME` and the deciding time.
macro_rules! prelude {
    () => {
        "
local function num(x) return string.format('%.0f', x) end
local function check(key)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= 'hash' then
    error({err = 'SHEDLOCK_WRONGTYPE ' .. t .. ' ' .. key})
  end
end
local function check_set(key)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= 'set' then
    error({err = 'SHEDLOCK_WRONGTYPE ' .. t .. ' ' .. key})
  end
end
local function clock(app)
  local t = redis.call('TIME')
  local server = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if app ~= nil and app ~= '' then return server, tonumber(app) end
  return server, server
end
local function ttl(us) return math.max(1, math.ceil(us / 1000)) end
"
    };
}

/// Acquire: claims every lock of the request in order, each as the SQL acquire decides it.
///
/// `KEYS`: `{P}:names`, then `lock`, `meta` of each lock. `ARGV`: `locked_by`, tick tolerance
/// (µs), application time (µs, or empty), request id (unique per acquire call, the same for
/// its retry), then `name`, `lock_at_most_for` (µs), tick (µs, or empty) of each lock.
///
/// For each lock, refuses a tick further ahead of now than the tolerance (nothing written); else
/// answers the lease's token when the lease is held and was taken by this request (a retry
/// whose first attempt was run, its answer lost); else refuses while the lease is held, or when
/// its tick is not newer than the last claimed one; else takes it: a new token, a lease until
/// `now + lock_at_most_for`, the tick recorded. A lease taken by this very run is not "this
/// request's" for a later entry of the same name.
/// Answers `{token or 0, tick - now in µs or nil}` per lock. A name given twice is taken by its
/// first entry; the second finds it held.
///
/// Every key's type is checked before anything is written: a script that fails part way keeps
/// what it wrote (Redis does not roll scripts back), and a lock taken by a claim that then
/// reports an error would stay held with nobody to run or release it.
pub(super) const ACQUIRE: &str = concat!(
    prelude!(),
    "
local server, now = clock(ARGV[3])
local tolerance = tonumber(ARGV[2])
local req = ARGV[4]
local taken = {}
local out = {}
check_set(KEYS[1])
for i = 2, #KEYS do check(KEYS[i]) end
for i = 1, (#KEYS - 1) / 2 do
  local lock, meta = KEYS[2 * i], KEYS[2 * i + 1]
  local name, at_most, tick = ARGV[3 * i + 2], tonumber(ARGV[3 * i + 3]), ARGV[3 * i + 4]
  if tick == '' then tick = nil else tick = tonumber(tick) end
  local answer = 0
  if tick == nil or tick <= now + tolerance then
    local held_until = tonumber(redis.call('HGET', lock, 'until'))
    local last = tonumber(redis.call('HGET', meta, 'tick'))
    local held = held_until ~= nil and held_until > now
    local claimed = tick ~= nil and last ~= nil and last >= tick
    if held and not taken[lock] and req ~= '' and redis.call('HGET', lock, 'req') == req then
      answer = tonumber(redis.call('HGET', lock, 'token'))
    elseif not held and not claimed then
      local previous = math.max(tonumber(redis.call('HGET', meta, 'token')) or 0,
                                tonumber(redis.call('HGET', lock, 'token')) or 0)
      local token = num(math.max(previous + 1, server))
      local untl = num(now + at_most)
      redis.call('HSET', lock, 'token', token, 'by', ARGV[1], 'at', num(now), 'until', untl,
                 'req', req)
      redis.call('PEXPIRE', lock, ttl(at_most))
      redis.call('HSET', meta, 'token', token, 'by', ARGV[1], 'at', num(now), 'until', untl)
      if tick ~= nil then redis.call('HSET', meta, 'tick', num(tick)) end
      redis.call('SADD', KEYS[1], name)
      taken[lock] = true
      answer = tonumber(token)
    end
  end
  local ahead = false
  if tick ~= nil then ahead = tick - now end
  out[i] = {answer, ahead}
end
return out
"
);

/// Extend: while the lease carries the token and has not run out, it is held until
/// `now + lock_at_most_for`.
///
/// `KEYS`: `lock`, `meta`. `ARGV`: token, `lock_at_most_for` (µs), application time (µs, or
/// empty). Answers 1 when extended, 0 when the lock is no longer this token's.
pub(super) const EXTEND: &str = concat!(
    prelude!(),
    "
local lock, meta = KEYS[1], KEYS[2]
check(lock)
check(meta)
local server, now = clock(ARGV[3])
local untl = tonumber(redis.call('HGET', lock, 'until'))
if redis.call('HGET', lock, 'token') ~= ARGV[1] or untl == nil or untl <= now then return 0 end
local at_most = tonumber(ARGV[2])
redis.call('HSET', lock, 'until', num(now + at_most))
redis.call('PEXPIRE', lock, ttl(at_most))
if redis.call('HGET', meta, 'token') == ARGV[1] then
  redis.call('HSET', meta, 'until', num(now + at_most))
end
return 1
"
);

/// Unlock: for each lock of the request, while it carries the token (its lease, or once the
/// lease ran out its record), it stays held until `max(now, at + lock_at_least_for,
/// until - slack)`, or is freed now. One lock or a group of them (grouped releases).
///
/// `KEYS`: `lock`, `meta` of each lock. `ARGV`: application time (µs, or empty), then token,
/// `lock_at_least_for` (µs), slack of the newest lease (µs) of each lock. Answers how many
/// locks still carried their token and were released (another holder's lock is left alone).
pub(super) const UNLOCK: &str = concat!(
    prelude!(),
    "
for i = 1, #KEYS do check(KEYS[i]) end
local server, now = clock(ARGV[1])
local released = 0
for i = 1, #KEYS / 2 do
  local lock, meta = KEYS[2 * i - 1], KEYS[2 * i]
  local token = ARGV[3 * i - 1]
  local leased = redis.call('HGET', lock, 'token')
  local current = leased or redis.call('HGET', meta, 'token')
  if current == token then
    local source = meta
    if leased then source = lock end
    local at = tonumber(redis.call('HGET', source, 'at')) or now
    local untl = tonumber(redis.call('HGET', source, 'until')) or now
    local keep = math.max(now, at + tonumber(ARGV[3 * i]), untl - tonumber(ARGV[3 * i + 1]))
    if leased then
      if keep > now then
        redis.call('HSET', lock, 'until', num(keep))
        redis.call('PEXPIRE', lock, ttl(keep - now))
      else
        redis.call('DEL', lock)
      end
    end
    if redis.call('HGET', meta, 'token') == token then
      redis.call('HSET', meta, 'until', num(math.min(keep, untl)))
    end
    released = released + 1
  end
end
return released
"
);

/// Is held: whether the lease carries the token and has not run out.
///
/// `KEYS`: `lock`. `ARGV`: token, application time (µs, or empty). Answers 1 or 0.
pub(super) const IS_HELD: &str = concat!(
    prelude!(),
    "
check(KEYS[1])
local server, now = clock(ARGV[2])
local untl = tonumber(redis.call('HGET', KEYS[1], 'until'))
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] and untl ~= nil and untl > now then return 1 end
return 0
"
);

/// Operator release: ends the lease now, only while it carries the token and has not run out
/// by the server's clock. The record keeps its token and tick.
///
/// `KEYS`: `lock`, `meta`. `ARGV`: token. Answers 1 when released, else 0.
pub(super) const RELEASE: &str = concat!(
    prelude!(),
    "
local lock, meta = KEYS[1], KEYS[2]
check(lock)
check(meta)
local server, now = clock('')
local untl = tonumber(redis.call('HGET', lock, 'until'))
if redis.call('HGET', lock, 'token') ~= ARGV[1] or untl == nil or untl <= now then return 0 end
redis.call('DEL', lock)
if redis.call('HGET', meta, 'token') == ARGV[1] then redis.call('HSET', meta, 'until', num(now)) end
return 1
"
);

/// List: the state of every lock named in `{P}:names`, or of the locks named, with the
/// server's time it was read at.
///
/// `KEYS`: `{P}:names`, and for named locks the `lock` and `meta` of each. `ARGV`: the key
/// prefix up to the name (`{P}:`), what to read (`all` or `named`), and for `named` the names,
/// in name order. Answers `{now, {{name, token, by, at, until, tick or nil}, …}}`: the
/// lease where it exists, else the record; a name with neither is left out.
pub(super) const STATES: &str = concat!(
    prelude!(),
    "
local server, now = clock('')
check_set(KEYS[1])
local names = {}
if ARGV[2] == 'named' then
  for i = 3, #ARGV do names[#names + 1] = ARGV[i] end
elseif ARGV[2] == 'all' then
  names = redis.call('SMEMBERS', KEYS[1])
  table.sort(names)
end
local rows = {}
for _, name in ipairs(names) do
  local lock, meta = ARGV[1] .. 'lock:' .. name, ARGV[1] .. 'meta:' .. name
  check(lock)
  check(meta)
  local source = meta
  if redis.call('EXISTS', lock) == 1 then source = lock end
  local token = redis.call('HGET', source, 'token')
  if token then
    local h = redis.call('HMGET', source, 'by', 'at', 'until')
    local tick = redis.call('HGET', meta, 'tick')
    rows[#rows + 1] = {name, token, h[1] or '', h[2] or '0', h[3] or '0', tick}
  end
end
return {num(now), rows}
"
);

/// The server's time, in microseconds since the epoch.
pub(super) const NOW: &str = concat!(
    prelude!(),
    "
local server, now = clock('')
return num(server)
"
);
