//! The fleet's code-defined jobs ([`ScheduleStore::register`](shedlock::schedules::ScheduleStore::register))
//! in two hashes beside the schedules, each operation one Lua script, times the server's
//! (`TIME`):
//!
//! - `{<prefix>}:fleet:jobs`: per instance (its `locked_by`), its jobs as one JSON document;
//! - `{<prefix>}:fleet:seen`: per instance, `<last seen, ms since 1970> <forget after, ms>
//!   <fleet>`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use redis::Script;
use shedlock::Result;
use shedlock::schedules::{Registration, StoredRegistration};

use crate::Inner;

/// Replaces one instance's registration and deletes those forgotten. KEYS: jobs, seen. ARGV:
/// instance, fleet, jobs, forget after (ms).
const REGISTER: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = redis.call('HGETALL', KEYS[2])
for i = 1, #seen, 2 do
  local last, forget = string.match(seen[i + 1], '^(%d+) (%d+) ')
  if last == nil or now - tonumber(last) > tonumber(forget) then
    redis.call('HDEL', KEYS[1], seen[i])
    redis.call('HDEL', KEYS[2], seen[i])
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], now .. ' ' .. ARGV[4] .. ' ' .. ARGV[2])
return 1
"#;

/// Marks one instance seen now, when it is registered; 1 or 0. KEYS: jobs, seen. ARGV: the
/// instance.
const BEAT: &str = r#"
local old = redis.call('HGET', KEYS[2], ARGV[1])
if not old or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local rest = string.match(old, '^%d+ (.*)$')
if rest == nil then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], ARGV[1], now .. ' ' .. rest)
return 1
"#;

/// Every registration and the server's time: `{now, seen..., jobs...}` (each hash flat).
const ALL: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {tostring(now), redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[1])}
"#;

/// A hash read whole: field, value.
type Pairs = Vec<(String, String)>;

/// The fleet scripts, hashed once.
pub(crate) struct FleetScripts {
    register: Script,
    beat: Script,
    all: Script,
}

impl FleetScripts {
    pub(crate) fn new() -> Self {
        Self {
            register: Script::new(REGISTER),
            beat: Script::new(BEAT),
            all: Script::new(ALL),
        }
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

impl Inner {
    fn fleet_keys(&self) -> (String, String) {
        (
            format!("{}fleet:jobs", self.tag),
            format!("{}fleet:seen", self.tag),
        )
    }

    pub(crate) async fn register(&self, registration: &Registration) -> Result<()> {
        let (jobs, seen) = self.fleet_keys();
        let mut invocation = self.scripts.fleet.register.prepare_invoke();
        invocation
            .key(&jobs)
            .key(&seen)
            .arg(&registration.instance)
            .arg(&registration.fleet)
            .arg(registration.jobs_json())
            .arg(u64::try_from(registration.forget_after.as_millis()).unwrap_or(u64::MAX));
        let operation = || {
            format!(
                "register the {} jobs of instance {:?}",
                registration.len(),
                registration.instance
            )
        };
        let _: i64 = self.run(&invocation, operation).await?;
        Ok(())
    }

    pub(crate) async fn heartbeat(&self, instance: &str) -> Result<bool> {
        let (jobs, seen) = self.fleet_keys();
        let mut invocation = self.scripts.fleet.beat.prepare_invoke();
        invocation.key(&jobs).key(&seen).arg(instance);
        let operation = || "send this instance's heartbeat".to_owned();
        let there: i64 = self.run(&invocation, operation).await?;
        Ok(there == 1)
    }

    pub(crate) async fn registrations(&self) -> Result<(Vec<StoredRegistration>, DateTime<Utc>)> {
        let (jobs, seen) = self.fleet_keys();
        let mut invocation = self.scripts.fleet.all.prepare_invoke();
        invocation.key(&jobs).key(&seen);
        let operation = || "read the fleet's registered jobs".to_owned();
        let (now, seen, jobs): (String, Pairs, Pairs) = self.run(&invocation, operation).await?;
        let now = now
            .parse::<i64>()
            .map_err(|_| self.unexpected(&operation(), format!("the time {now:?}")))?;
        let jobs: std::collections::HashMap<String, String> = jobs.into_iter().collect();
        let mut all = Vec::with_capacity(seen.len());
        for (instance, value) in seen {
            let mut parts = value.splitn(3, ' ');
            let (Some(last), Some(forget), Some(fleet)) =
                (parts.next(), parts.next(), parts.next())
            else {
                tracing::warn!(
                    instance,
                    value,
                    "the fleet's record of this instance cannot be read: left out"
                );
                continue;
            };
            let (Ok(last), Ok(forget)) = (last.parse::<i64>(), forget.parse::<u64>()) else {
                tracing::warn!(
                    instance,
                    value,
                    "the fleet's record of this instance cannot be read: left out"
                );
                continue;
            };
            let Some(document) = jobs.get(&instance) else {
                continue;
            };
            all.push(StoredRegistration::new(
                instance,
                fleet,
                document.clone(),
                at(last),
                Duration::from_millis(forget),
            ));
        }
        Ok((all, at(now)))
    }
}
