//! The Lua scripts of [`RedisLockProvider`](crate::RedisLockProvider): one per operation (the
//! listing: one per page), each run by `EVALSHA` in one round trip, each atomic on the server.
//!
//! # Keys
//!
//! Every key of one prefix `P` (default `shedlock`) carries the cluster hash tag `{P}`, so all
//! of them live in one slot, as an SQL lock table lives on one server; every script declares
//! each key it touches in `KEYS`:
//!
//! - `{P}:lock:<name>`: the lease, a hash `token`, `by`, `at`, `until`, `req`, that Redis
//!   expires when the lease runs out (`PEXPIRE`). It exists exactly while someone may hold the
//!   lock. `req` names the acquire call that took it, so that the same call sent once more
//!   (its connection broke before the answer came) gets its own lease back.
//! - `{P}:meta:<name>`: the lock's record, a hash `token`, `by`, `at`, `until`, `tick`, that
//!   never expires: the newest fencing token and the newest claimed tick outlive the lease.
//! - `{P}:names`: a set of the lock names, for the operator's list, read a page at a time
//!   (`SSCAN`); a name whose two keys are both gone is removed from it by the read that finds
//!   so.
//!
//! # Values
//!
//! Tokens are integers from 0 to 2^63 − 1, written in decimal. Lua's numbers are doubles,
//! exact only to 2^53, so the scripts never turn a token into a number: they check its digits,
//! compare two tokens by length and then as two numbers of at most ten digits each (a string
//! comparison would follow the server's locale), add one digit by digit, and compare with the
//! server's clock in microseconds, which a double holds exactly.
//!
//! Times (`at`, `until`, `tick`) and durations are whole microseconds since the epoch, written
//! as decimal integers (`string.format('%.0f')`; exact to 2^53 µs, year 2255, and within a
//! few µs of the truth for the longest leases beyond). A time must be an optional `-` and
//! digits, of magnitude below 2^63.
//!
//! A stored value that is neither (`1e300`, `nan`, `inf`, `0x10`, a token past 2^63 − 1: Lua's
//! `tonumber` reads all of these as numbers) fails the script with
//! `SHEDLOCK_UNREADABLE <key> <field> <length> <value>` (key and first 64 bytes of the value
//! percent-encoded) before it writes anything, so the provider can name the key; the reads
//! return the values as they are and the provider checks them by the same rules. A missing
//! `until` reads as a lease that is not held, a missing `tick` as no tick claimed.
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
/// answers whether it exists; `check_set` refuses one that holds something other than a set;
/// `token` and `time` read a stored value by the rules above (`unreadable` otherwise), `cmp`
/// and `inc` compare and count up tokens; `clock` reads `TIME` and the deciding time.
macro_rules! prelude {
    () => {
        "
local function num(x) return string.format('%.0f', x) end
local function enc(s)
  return (string.gsub(s, '[^0-9A-Za-z_.:/{}-]',
    function(c) return string.format('%%%02X', string.byte(c)) end))
end
local function unreadable(key, field, value)
  error({err = 'SHEDLOCK_UNREADABLE ' .. enc(key) .. ' ' .. field .. ' ' .. #value .. ' '
    .. enc(string.sub(value, 1, 64))})
end
local function check(key)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= 'hash' then
    error({err = 'SHEDLOCK_WRONGTYPE ' .. t .. ' ' .. key})
  end
  return t == 'hash'
end
local function check_set(key)
  local t = redis.call('TYPE', key)['ok']
  if t ~= 'none' and t ~= 'set' then
    error({err = 'SHEDLOCK_WRONGTYPE ' .. t .. ' ' .. key})
  end
end
local MAX = '9223372036854775807'
local function cmp(a, b)
  if #a ~= #b then if #a < #b then return -1 else return 1 end end
  local cut = math.max(0, #a - 9)
  local x, y = tonumber(string.sub(a, 1, cut)) or 0, tonumber(string.sub(b, 1, cut)) or 0
  if x == y then x, y = tonumber(string.sub(a, cut + 1)), tonumber(string.sub(b, cut + 1)) end
  if x == y then return 0 elseif x < y then return -1 else return 1 end
end
local function digits(key, field, value, signed)
  if not value then return nil, nil end
  local sign, d = string.match(value, '^(%-?)0*([0-9]+)$')
  if d == nil or (sign == '-' and not signed) or #d > 19 or cmp(d, MAX) > 0 then
    unreadable(key, field, value)
  end
  return sign, d
end
local function token(key, value)
  local _, d = digits(key, 'token', value, false)
  return d
end
local function time(key, field, value)
  local sign, d = digits(key, field, value, true)
  if d == nil then return nil end
  if sign == '-' then return -tonumber(d) end
  return tonumber(d)
end
local function inc(d)
  local i = #d
  while i > 0 and string.sub(d, i, i) == '9' do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #d) end
  return string.sub(d, 1, i - 1) .. string.char(string.byte(d, i) + 1) .. string.rep('0', #d - i)
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
pub(crate) use prelude;

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
/// Answers `{token or '0', tick - now in µs or nil}` per lock, the token as a decimal string.
/// A name given twice is taken by its first entry; the second finds it held.
///
/// Every key's type and every field it reads (`token`, `at`, `until` of both keys, `tick` of
/// the record) are checked before anything is written, and so is a token of 2^63 − 1, which
/// no token can follow: a script that fails part way keeps what it wrote (Redis does not roll
/// scripts back), and a lock taken by a claim that then reports an error would stay held with
/// nobody to run or release it.
pub(super) const ACQUIRE: &str = concat!(
    prelude!(),
    "
local server, now = clock(ARGV[3])
local tolerance = tonumber(ARGV[2])
local req = ARGV[4]
local floor = num(server)
local taken = {}
local out = {}
local function fields(key, with_tick)
  local v = redis.call('HMGET', key, 'token', 'at', 'until', 'tick')
  local tick = nil
  if with_tick then tick = time(key, 'tick', v[4]) end
  return {token = token(key, v[1]), at = time(key, 'at', v[2]), untl = time(key, 'until', v[3]),
          tick = tick}
end
check_set(KEYS[1])
for i = 2, #KEYS do check(KEYS[i]) end
for i = 1, (#KEYS - 1) / 2 do
  for _, f in ipairs({{KEYS[2 * i], false}, {KEYS[2 * i + 1], true}}) do
    if fields(f[1], f[2]).token == MAX then unreadable(f[1], 'token', MAX) end
  end
end
for i = 1, (#KEYS - 1) / 2 do
  local lock, meta = KEYS[2 * i], KEYS[2 * i + 1]
  local name, at_most, tick = ARGV[3 * i + 2], tonumber(ARGV[3 * i + 3]), ARGV[3 * i + 4]
  if tick == '' then tick = nil else tick = tonumber(tick) end
  local answer = '0'
  if tick == nil or tick <= now + tolerance then
    local l, m = fields(lock, false), fields(meta, true)
    local held = l.untl ~= nil and l.untl > now
    local claimed = tick ~= nil and m.tick ~= nil and m.tick >= tick
    if held and not taken[lock] and req ~= '' and redis.call('HGET', lock, 'req') == req then
      answer = l.token or '0'
    elseif not held and not claimed then
      local previous = l.token
      if previous == nil or (m.token ~= nil and cmp(m.token, previous) > 0) then
        previous = m.token
      end
      local new = floor
      if previous ~= nil and cmp(inc(previous), new) > 0 then new = inc(previous) end
      local untl = num(now + at_most)
      redis.call('HSET', lock, 'token', new, 'by', ARGV[1], 'at', num(now), 'until', untl,
                 'req', req)
      redis.call('PEXPIRE', lock, ttl(at_most))
      redis.call('HSET', meta, 'token', new, 'by', ARGV[1], 'at', num(now), 'until', untl)
      if tick ~= nil then redis.call('HSET', meta, 'tick', num(tick)) end
      redis.call('SADD', KEYS[1], name)
      taken[lock] = true
      answer = new
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
if redis.call('HGET', lock, 'token') ~= ARGV[1] then return 0 end
local untl = time(lock, 'until', redis.call('HGET', lock, 'until'))
if untl == nil or untl <= now then return 0 end
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
/// Every lock of the group is read (and its times checked) before any is written.
pub(super) const UNLOCK: &str = concat!(
    prelude!(),
    "
for i = 1, #KEYS do check(KEYS[i]) end
local server, now = clock(ARGV[1])
local plans = {}
for i = 1, #KEYS / 2 do
  local lock, meta = KEYS[2 * i - 1], KEYS[2 * i]
  local token = ARGV[3 * i - 1]
  local leased = redis.call('HGET', lock, 'token')
  local current = leased or redis.call('HGET', meta, 'token')
  if current == token then
    local source = meta
    if leased then source = lock end
    local at = time(source, 'at', redis.call('HGET', source, 'at')) or now
    local untl = time(source, 'until', redis.call('HGET', source, 'until')) or now
    local keep = math.max(now, at + tonumber(ARGV[3 * i]), untl - tonumber(ARGV[3 * i + 1]))
    plans[#plans + 1] = {lock = lock, meta = meta, token = token, leased = leased, keep = keep,
                         untl = untl}
  end
end
for _, p in ipairs(plans) do
  if p.leased then
    if p.keep > now then
      redis.call('HSET', p.lock, 'until', num(p.keep))
      redis.call('PEXPIRE', p.lock, ttl(p.keep - now))
    else
      redis.call('DEL', p.lock)
    end
  end
  if redis.call('HGET', p.meta, 'token') == p.token then
    redis.call('HSET', p.meta, 'until', num(math.min(p.keep, p.untl)))
  end
end
return #plans
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
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] then return 0 end
local untl = time(KEYS[1], 'until', redis.call('HGET', KEYS[1], 'until'))
if untl ~= nil and untl > now then return 1 end
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
if redis.call('HGET', lock, 'token') ~= ARGV[1] then return 0 end
local untl = time(lock, 'until', redis.call('HGET', lock, 'until'))
if untl == nil or untl <= now then return 0 end
redis.call('DEL', lock)
if redis.call('HGET', meta, 'token') == ARGV[1] then redis.call('HSET', meta, 'until', num(now)) end
return 1
"
);

/// Read: the keys of the locks named (one page of the listing, or the locks asked for), with
/// the server's time they were read at; removes from `{P}:names` each name whose two keys are
/// both gone.
///
/// `KEYS`: `{P}:names`, then `lock`, `meta` of each lock. `ARGV`: the name of each lock.
/// Answers `{now, {row, …}}`, a row per lock in order: nil when it has neither key (its name
/// removed from the set), else `{lease, record}`, each nil when its key holds none of the
/// fields, else its fields as stored (`token`, `by`, `at`, `until`, and the record's `tick`;
/// nil where missing). The provider checks the values. Two commands per lock (three when
/// neither key has a field): a key of the wrong type fails its `HMGET`, and is then named;
/// the names are removed after every key was read.
pub(super) const READ: &str = concat!(
    prelude!(),
    "
local server, now = clock('')
check_set(KEYS[1])
local function fields(key, ...)
  local v = redis.pcall('HMGET', key, ...)
  if v['err'] then
    check(key)
    error(v)
  end
  for i = 1, #v do
    if v[i] then return v end
  end
  return false
end
local rows, gone = {}, {}
for i = 1, #ARGV do
  local lock, meta = KEYS[2 * i], KEYS[2 * i + 1]
  local lease = fields(lock, 'token', 'by', 'at', 'until')
  local record = fields(meta, 'token', 'by', 'at', 'until', 'tick')
  if not lease and not record and redis.call('EXISTS', lock, meta) == 0 then
    gone[#gone + 1] = ARGV[i]
    rows[i] = false
  else
    rows[i] = {lease, record}
  end
end
if #gone > 0 then redis.call('SREM', KEYS[1], unpack(gone)) end
return {num(now), rows}
"
);

/// Check (`migrate`): that the set of names is a set, the schedules' sorted set a sorted set
/// and their counter a string, or absent, in one step whatever they hold.
///
/// `KEYS`: `{P}:names`, and for `migrate` `{P}:schedules`, `{P}:schedules:version`. Answers 1.
pub(super) const CHECK: &str = concat!(
    prelude!(),
    "
check_set(KEYS[1])
for i, want in ipairs({'zset', 'string'}) do
  if KEYS[i + 1] == nil then break end
  local t = redis.call('TYPE', KEYS[i + 1])['ok']
  if t ~= 'none' and t ~= want then
    error({err = 'SHEDLOCK_WRONGTYPE ' .. t .. ' ' .. KEYS[i + 1]})
  end
end
return 1
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
