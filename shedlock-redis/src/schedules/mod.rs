//! [`ScheduleStore`] for [`RedisLockProvider`]: the schedules in keys beside the locks, each
//! operation one Lua script ([`scripts`]), the listing one script per page of
//! [`SINCE_PAGE`] schedules, the change feed a `SUBSCRIBE` to the channel every change
//! publishes on.

pub(crate) mod backfills;
mod check;
pub(crate) mod fleet;
mod read;
mod scripts;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use redis::{Script, Value};
use shedlock::schedules::{
    BackfillCount, BackfillState, ChangeFeed, NewBackfill, NewSchedule, Registration,
    ScheduleChange, ScheduleStore, StoredBackfill, StoredRegistration, StoredSchedule,
    TriggerAnswer,
};
use shedlock::{Error, Result};

use crate::{Inner, RedisLockProvider, micros};

pub(crate) use read::problem;

/// How many schedules one `since` script reads: a few milliseconds of the server's time at
/// most (about 2.7 ms measured on a loaded two-core machine).
pub(crate) const SINCE_PAGE: usize = 250;

/// How many schedules one script of [`create_schedules`](ScheduleStore::create_schedules)
/// creates (and one script of its first check reads): a few milliseconds of the server's
/// time, as a page of [`SINCE_PAGE`].
pub(crate) const BATCH_CHUNK: usize = 250;

/// The schedule scripts, hashed once.
pub(crate) struct ScheduleScripts {
    version: Script,
    since: Script,
    get: Script,
    write: Script,
    delete: Script,
    request: Script,
    claim: Script,
    start: Script,
    finish: Script,
    live: Script,
    batch: Script,
    cap: Script,
}

impl ScheduleScripts {
    pub(crate) fn new() -> Self {
        Self {
            version: Script::new(scripts::VERSION),
            since: Script::new(scripts::SINCE),
            get: Script::new(scripts::GET),
            write: Script::new(scripts::WRITE),
            delete: Script::new(scripts::DELETE),
            request: Script::new(scripts::REQUEST),
            claim: Script::new(scripts::CLAIM),
            start: Script::new(scripts::START),
            finish: Script::new(scripts::FINISH),
            live: Script::new(scripts::LIVE),
            batch: Script::new(scripts::BATCH),
            cap: Script::new(scripts::CAP),
        }
    }
}

/// The Lua text of schedule script `name`, for `test_util::script`.
#[cfg(feature = "test-util")]
pub(crate) fn script(name: &str) -> Option<&'static str> {
    Some(match name {
        "schedules_version" => scripts::VERSION,
        "schedules_since" => scripts::SINCE,
        "schedule" => scripts::GET,
        "schedule_write" => scripts::WRITE,
        "schedule_delete" => scripts::DELETE,
        "trigger_request" => scripts::REQUEST,
        "trigger_claim" => scripts::CLAIM,
        "trigger_start" => scripts::START,
        "trigger_finish" => scripts::FINISH,
        "schedules_live" => scripts::LIVE,
        "schedules_batch" => scripts::BATCH,
        "schedules_cap" => scripts::CAP,
        _ => return None,
    })
}

impl Inner {
    /// `{<prefix>}:schedule:<name>`.
    pub(crate) fn schedule_key(&self, name: &str) -> String {
        self.key("schedule:", name)
    }

    /// `{<prefix>}:schedules`: the sorted set of names by version; also the channel's name.
    pub(crate) fn schedules_key(&self) -> String {
        format!("{}schedules", self.tag)
    }

    /// `{<prefix>}:schedules:version`: the counter.
    pub(crate) fn counter_key(&self) -> String {
        format!("{}schedules:version", self.tag)
    }

    /// A request id for one writing script, the same for its retry (see `scripts`): this
    /// provider's prefix and a count, as the acquire's.
    pub(crate) fn request_id(&self) -> String {
        format!(
            "{}-{}",
            self.request_prefix,
            self.requests.fetch_add(1, Ordering::Relaxed)
        )
    }

    async fn schedules_version(&self) -> Result<i64> {
        let mut invocation = self.scripts.schedules.version.prepare_invoke();
        invocation.key(self.schedules_key()).key(self.counter_key());
        let operation = || "read the schedule version".to_owned();
        let version: String = self.run(&invocation, operation).await?;
        read::parse_version(version.as_bytes())
            .ok_or_else(|| self.unexpected(&operation(), format!("the version {version:?}")))
    }

    /// Every schedule above `since`, a page of [`SINCE_PAGE`] at a time, each page from the
    /// score where the previous ended. A schedule that changes between two pages is found
    /// again at its new version: the newest read is kept. Ordered by version.
    async fn schedules_since(&self, since: i64) -> Result<Vec<StoredSchedule>> {
        let operation = || format!("read the schedules changed since version {since}");
        let zset = self.schedules_key();
        let mut bound = since.to_string();
        let mut all = Vec::new();
        loop {
            let mut invocation = self.scripts.schedules.since.prepare_invoke();
            invocation
                .key(&zset)
                .arg(&bound)
                .arg(SINCE_PAGE)
                .arg(&self.tag);
            let page: Vec<(Vec<u8>, String, Vec<Vec<u8>>)> =
                self.run(&invocation, operation).await?;
            let full = page.len() == SINCE_PAGE;
            for (name, score, flat) in page {
                bound = score;
                let Ok(name) = String::from_utf8(name) else {
                    return Err(read::unreadable(
                        &zset,
                        "",
                        "a member is no UTF-8 text (a schedule name)".into(),
                    ));
                };
                let key = self.schedule_key(&name);
                match read::schedule(&name, &key, flat)? {
                    Some(schedule) => all.push(schedule),
                    None => tracing::warn!(
                        key,
                        sorted_set = zset,
                        "a schedule listed in the sorted set has no hash (deleted by hand); left out"
                    ),
                }
            }
            if !full {
                break;
            }
        }
        let mut seen = HashSet::new();
        let mut newest: Vec<StoredSchedule> = all
            .into_iter()
            .rev()
            .filter(|s| seen.insert(s.name.clone()))
            .collect();
        newest.sort_by_key(|s| s.version);
        Ok(newest)
    }

    async fn schedule(&self, name: &str) -> Result<Option<StoredSchedule>> {
        check::existing_name(name)?;
        let key = self.schedule_key(name);
        let mut invocation = self.scripts.schedules.get.prepare_invoke();
        invocation.key(&key);
        let flat: Vec<Vec<u8>> = self
            .run(&invocation, || format!("read schedule {name:?}"))
            .await?;
        read::schedule(name, &key, flat)
    }

    /// A change that may make the schedule (an override, a request to run): its name by the
    /// rules of a name made now, unless the store holds it live already (a name an earlier
    /// version stored, which stays changeable).
    async fn made_or_live(&self, name: &str) -> Result<()> {
        check::existing_name(name)?;
        if let Err(refused) = check::name(name) {
            match self.schedule(name).await? {
                Some(stored) if !stored.deleted => {}
                _ => return Err(refused),
            }
        }
        Ok(())
    }

    /// [`Error::TooManySchedules`] from a script's `{'cap', held}` answer.
    fn over_cap(&self, name: &str, held: Option<&Value>) -> Error {
        Error::TooManySchedules {
            name: name.to_owned(),
            held: held
                .and_then(text)
                .and_then(|h| h.parse().ok())
                .unwrap_or_default(),
            cap: self.settings.schedule_limits.max_run_time_schedules,
        }
    }

    /// The `write` script: `create` when `handler` is given (`""` for an override), else
    /// `update`.
    async fn write(
        &self,
        name: &str,
        handler: Option<&str>,
        change: &ScheduleChange,
        by: &str,
    ) -> Result<StoredSchedule> {
        let limits = &self.settings.schedule_limits;
        if handler.is_some() {
            check::name(name)?;
        } else {
            self.made_or_live(name).await?;
        }
        if let Some(handler) = handler.filter(|h| !h.is_empty()) {
            check::handler(name, handler)?;
        }
        let fields = check::fields(name, change)?;
        shedlock::schedules::check::payload(name, change, limits)?;
        let key = self.schedule_key(name);
        let mut invocation = self.scripts.schedules.write.prepare_invoke();
        invocation
            .key(&key)
            .key(self.schedules_key())
            .key(self.counter_key());
        invocation
            .arg(if handler.is_some() {
                "create"
            } else {
                "update"
            })
            .arg(name)
            .arg(by)
            .arg(handler.unwrap_or(""))
            .arg(self.schedules_key())
            .arg(self.request_id())
            .arg(limits.max_run_time_schedules)
            .arg(&self.tag)
            .arg(fields.sets.len());
        for (field, value) in &fields.sets {
            invocation.arg(*field).arg(value);
        }
        for field in &fields.clears {
            invocation.arg(*field);
        }
        let operation = || format!("write schedule {name:?}");
        let answer: Vec<Value> = self.run(&invocation, operation).await?;
        self.written(name, &key, answer, &operation)
    }

    /// A batch of new schedules: every one checked ([`shedlock::schedules::check::batch`],
    /// then this provider's own checks), then every name read (the `live` script, a chunk of
    /// [`BATCH_CHUNK`] at a time: one the store holds live refuses the batch before anything
    /// is written), then the `batch` script on each chunk, in order.
    async fn create_schedules(
        &self,
        schedules: &[NewSchedule],
        by: &str,
    ) -> Result<Vec<StoredSchedule>> {
        let limits = &self.settings.schedule_limits;
        let fields = shedlock::schedules::check::batch(schedules, by, |new| {
            if let Some(handler) = &new.handler {
                check::handler(&new.name, handler)?;
            }
            shedlock::schedules::check::payload(&new.name, &new.fields, limits)?;
            check::converted(&new.name, &new.fields)
        })?;
        let total = schedules.len();
        // The cap, before any chunk is written (each chunk's script checks it again).
        let mut run_time = schedules.iter().filter(|s| s.handler.is_some());
        let first_run_time = run_time.next().map(|s| s.name.as_str());
        if let Some(first) = first_run_time {
            let adding = run_time.count() + 1;
            let mut invocation = self.scripts.schedules.cap.prepare_invoke();
            invocation
                .key(self.schedules_key())
                .arg(adding)
                .arg(limits.max_run_time_schedules)
                .arg(&self.tag);
            let operation = || format!("count the run-time schedules before a batch of {total}");
            let held: i64 = self.run(&invocation, operation).await?;
            if let Ok(held) = usize::try_from(held) {
                shedlock::schedules::check::run_time_schedules(first, held, adding, limits)?;
            }
        }
        for chunk in schedules.chunks(BATCH_CHUNK) {
            let mut invocation = self.scripts.schedules.live.prepare_invoke();
            for new in chunk {
                invocation.key(self.schedule_key(&new.name)).arg(&new.name);
            }
            let operation = || format!("read the names of a batch of {total} schedules");
            let live: String = self.run(&invocation, operation).await?;
            if !live.is_empty() {
                return Err(Error::ScheduleExists { name: live });
            }
        }
        let mut created = Vec::with_capacity(total);
        for (chunk, fields) in schedules
            .chunks(BATCH_CHUNK)
            .zip(fields.chunks(BATCH_CHUNK))
        {
            let keys: Vec<String> = chunk.iter().map(|s| self.schedule_key(&s.name)).collect();
            let mut invocation = self.scripts.schedules.batch.prepare_invoke();
            invocation.key(self.schedules_key()).key(self.counter_key());
            for key in &keys {
                invocation.key(key);
            }
            invocation
                .arg(by)
                .arg(self.schedules_key())
                .arg(self.request_id())
                .arg(limits.max_run_time_schedules)
                .arg(&self.tag)
                .arg(chunk.len());
            for (new, fields) in chunk.iter().zip(fields) {
                invocation
                    .arg(&new.name)
                    .arg(new.handler.as_deref().unwrap_or(""))
                    .arg(fields.sets.len());
                for (field, value) in &fields.sets {
                    invocation.arg(*field).arg(value);
                }
            }
            let done = created.len();
            let operation = || {
                format!(
                    "create schedules {done} to {} of a batch of {total}",
                    done + chunk.len() - 1
                )
            };
            let mut answer: Vec<Value> = self.run(&invocation, operation).await?;
            let status = answer.first().and_then(text);
            match status.as_deref() {
                Some("exists") => {
                    let name = answer.get(1).and_then(text).unwrap_or_default();
                    return Err(Error::ScheduleExists { name });
                }
                Some("cap") => {
                    let first = chunk.iter().find(|s| s.handler.is_some());
                    let name = first.map_or("", |s| s.name.as_str());
                    return Err(self.over_cap(name, answer.get(1)));
                }
                Some("ok") if answer.len() == 2 => {
                    let hashes: Vec<Vec<Vec<u8>>> = redis::from_redis_value(answer.swap_remove(1))
                        .map_err(|e| self.unexpected(&operation(), e.to_string()))?;
                    if hashes.len() != chunk.len() {
                        return Err(self.unexpected(
                            &operation(),
                            format!("{} hashes for {} schedules", hashes.len(), chunk.len()),
                        ));
                    }
                    for ((new, key), flat) in chunk.iter().zip(&keys).zip(hashes) {
                        created.push(read::schedule(&new.name, key, flat)?.ok_or_else(|| {
                            self.unexpected(&operation(), "no fields after the write".into())
                        })?);
                    }
                }
                _ => return Err(self.unexpected(&operation(), format!("the answer {answer:?}"))),
            }
        }
        Ok(created)
    }

    /// What the `write` script answered.
    fn written(
        &self,
        name: &str,
        key: &str,
        mut answer: Vec<Value>,
        operation: &dyn Fn() -> String,
    ) -> Result<StoredSchedule> {
        let status = answer.first().and_then(text);
        match status.as_deref() {
            Some("exists") => Err(Error::ScheduleExists {
                name: name.to_owned(),
            }),
            Some("cap") => Err(self.over_cap(name, answer.get(1))),
            Some("invalid") => Err(check::invalid(
                name,
                answer.get(1).and_then(text).unwrap_or_default(),
            )),
            Some("ok") if answer.len() == 2 => {
                let flat = redis::from_redis_value(answer.swap_remove(1))
                    .map_err(|e| self.unexpected(&operation(), e.to_string()))?;
                read::schedule(name, key, flat)?.ok_or_else(|| {
                    self.unexpected(&operation(), "no fields after the write".into())
                })
            }
            _ => Err(self.unexpected(&operation(), format!("the answer {answer:?}"))),
        }
    }

    /// The `delete`, `request` and `finish` scripts' keys: the hash, the sorted set, the
    /// counter.
    fn changing<'s>(&self, script: &'s Script, name: &str) -> redis::ScriptInvocation<'s> {
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.schedule_key(name))
            .key(self.schedules_key())
            .key(self.counter_key());
        invocation
    }

    async fn delete_schedule(&self, name: &str, by: &str) -> Result<bool> {
        check::existing_name(name)?;
        let mut invocation = self.changing(&self.scripts.schedules.delete, name);
        invocation
            .arg(name)
            .arg(by)
            .arg(self.schedules_key())
            .arg(self.request_id());
        let deleted: i64 = self
            .run(&invocation, || format!("delete schedule {name:?}"))
            .await?;
        Ok(deleted == 1)
    }

    async fn request_trigger(&self, name: &str, by: &str) -> Result<TriggerAnswer> {
        self.made_or_live(name).await?;
        let key = self.schedule_key(name);
        let mut invocation = self.changing(&self.scripts.schedules.request, name);
        invocation
            .arg(name)
            .arg(by)
            .arg(self.schedules_key())
            .arg(self.request_id());
        let operation = || format!("request a run of {name:?} now");
        let answer: Vec<Value> = self.run(&invocation, operation).await?;
        let status = answer.first().and_then(text);
        match (status.as_deref(), answer.get(1)) {
            (Some("requested"), Some(id)) => text(id)
                .and_then(|id| read::parse_version(id.as_bytes()))
                .map(|id| TriggerAnswer::Requested { id })
                .ok_or_else(|| self.unexpected(&operation(), format!("the id {id:?}"))),
            (Some("pending"), Some(fields)) => {
                let flat = redis::from_redis_value_ref(fields)
                    .map_err(|e| self.unexpected(&operation(), e.to_string()))?;
                read::schedule(name, &key, flat)?
                    .and_then(|s| s.trigger)
                    .map(TriggerAnswer::AlreadyPending)
                    .ok_or_else(|| {
                        self.unexpected(&operation(), "a pending answer without a trigger".into())
                    })
            }
            _ => Err(self.unexpected(&operation(), format!("the answer {answer:?}"))),
        }
    }

    /// The `claim` or `start` script on request `id` of `name`.
    async fn lease_trigger(
        &self,
        script: &Script,
        what: &str,
        name: &str,
        id: i64,
        by: &str,
        lease: Duration,
    ) -> Result<bool> {
        check::existing_name(name)?;
        shedlock::schedules::check::lease(name, lease)?;
        let mut invocation = script.prepare_invoke();
        invocation
            .key(self.schedule_key(name))
            .arg(id)
            .arg(by)
            .arg(micros(lease))
            .arg(self.request_id());
        let done: i64 = self
            .run(&invocation, || {
                format!("{what} run-now request {id} of {name:?}")
            })
            .await?;
        Ok(done == 1)
    }

    async fn finish_trigger(&self, name: &str, id: i64) -> Result<bool> {
        check::existing_name(name)?;
        let mut invocation = self.changing(&self.scripts.schedules.finish, name);
        invocation
            .arg(id)
            .arg(name)
            .arg(self.schedules_key())
            .arg(self.request_id());
        let done: i64 = self
            .run(&invocation, || {
                format!("finish run-now request {id} of {name:?}")
            })
            .await?;
        Ok(done == 1)
    }

    /// A `SUBSCRIBE` to the channel every change publishes on, on a connection of its own;
    /// the stream ends when that connection is lost.
    async fn change_feed(&self) -> Result<ChangeFeed> {
        let operation = || format!("subscribe to the schedule changes of {:?}", self.tag);
        let subscribe = async {
            let mut pubsub = self.client.get_async_pubsub().await?;
            pubsub.subscribe(self.schedules_key()).await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        let pubsub = match tokio::time::timeout(self.response_timeout, subscribe).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(e)) => return Err(self.fail(operation(), "SUBSCRIBE", e)),
            Err(_) => {
                return Err(Error::Timeout {
                    operation: format!("{} on the Redis server at {}", operation(), self.address),
                    after: self.response_timeout,
                });
            }
        };
        Ok(pubsub.into_on_message().map(|_| ()).boxed())
    }
}

/// A status or number the scripts answer, as text.
fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The schedules in keys beside the locks (see the crate's documentation for the keys). Every
/// operation is one Lua script, atomic, its times the Redis server's clock (`TIME`);
/// [`schedules_since`](ScheduleStore::schedules_since) is one script per 250 schedules, as
/// [`create_schedules`](ScheduleStore::create_schedules) is (after a read of the names).
impl ScheduleStore for RedisLockProvider {
    /// One script: the counter, or the highest version in the sorted set when that is higher.
    fn schedules_version(&self) -> BoxFuture<'_, Result<i64>> {
        Box::pin(self.inner.schedules_version())
    }

    fn schedules_since(&self, since: i64) -> BoxFuture<'_, Result<Vec<StoredSchedule>>> {
        Box::pin(self.inner.schedules_since(since))
    }

    fn schedule<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<StoredSchedule>>> {
        Box::pin(self.inner.schedule(name))
    }

    fn create_schedule<'a>(
        &'a self,
        schedule: &'a NewSchedule,
        by: &'a str,
    ) -> BoxFuture<'a, Result<StoredSchedule>> {
        Box::pin(async move {
            if let Some(handler) = &schedule.handler {
                check::handler(&schedule.name, handler)?;
            }
            let handler = schedule.handler.as_deref().unwrap_or("");
            self.inner
                .write(&schedule.name, Some(handler), &schedule.fields, by)
                .await
        })
    }

    /// Every schedule is checked first, then every name is read (a script per 250): a name
    /// the store already holds live refuses the whole batch before anything is written,
    /// [`Error::ScheduleExists`] naming it. Then one script per chunk of 250 creates the
    /// chunk, all or none, each schedule at the next version: consecutive within a chunk,
    /// and the whole batch's when it is one chunk (another writer's change may take a version
    /// between two chunks). A name another writer creates between the read and its chunk's
    /// script refuses that chunk and the rest, `ScheduleExists` naming it; the chunks before
    /// it stay created (Redis has no transaction across scripts). Every chunk publishes its
    /// last version once.
    fn create_schedules<'a>(
        &'a self,
        schedules: &'a [NewSchedule],
        by: &'a str,
    ) -> BoxFuture<'a, Result<Vec<StoredSchedule>>> {
        Box::pin(self.inner.create_schedules(schedules, by))
    }

    fn update_schedule<'a>(
        &'a self,
        name: &'a str,
        change: &'a ScheduleChange,
        by: &'a str,
    ) -> BoxFuture<'a, Result<StoredSchedule>> {
        Box::pin(self.inner.write(name, None, change, by))
    }

    fn delete_schedule<'a>(&'a self, name: &'a str, by: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.delete_schedule(name, by))
    }

    fn request_trigger<'a>(
        &'a self,
        name: &'a str,
        by: &'a str,
    ) -> BoxFuture<'a, Result<TriggerAnswer>> {
        Box::pin(self.inner.request_trigger(name, by))
    }

    fn claim_trigger<'a>(
        &'a self,
        name: &'a str,
        id: i64,
        by: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        let script = &self.inner.scripts.schedules.claim;
        Box::pin(
            self.inner
                .lease_trigger(script, "claim", name, id, by, lease),
        )
    }

    fn start_trigger<'a>(
        &'a self,
        name: &'a str,
        id: i64,
        by: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        let script = &self.inner.scripts.schedules.start;
        Box::pin(
            self.inner
                .lease_trigger(script, "start", name, id, by, lease),
        )
    }

    fn finish_trigger<'a>(&'a self, name: &'a str, id: i64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.finish_trigger(name, id))
    }

    /// A `SUBSCRIBE` to the channel `{<prefix>}:schedules`, on which every change publishes
    /// its version, on a connection of its own; the feed ends when that connection is lost.
    fn change_feed(&self) -> BoxFuture<'_, Result<Option<ChangeFeed>>> {
        Box::pin(async move { self.inner.change_feed().await.map(Some) })
    }

    /// One script: this instance's jobs (one JSON document) in `{<prefix>}:fleet:jobs`, when
    /// it was seen in `{<prefix>}:fleet:seen`; the forgotten instances deleted from both.
    fn register<'a>(&'a self, registration: &'a Registration) -> BoxFuture<'a, Result<()>> {
        Box::pin(self.inner.register(registration))
    }

    fn heartbeat<'a>(&'a self, instance: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.inner.heartbeat(instance))
    }

    fn registrations(
        &self,
    ) -> BoxFuture<'_, Result<(Vec<StoredRegistration>, chrono::DateTime<chrono::Utc>)>> {
        Box::pin(self.inner.registrations())
    }

    /// Checked first ([`check::backfill`](shedlock::schedules::check::backfill)), then one
    /// script: the id from `INCR {<prefix>}:backfill_id`, the row's JSON written in the hash
    /// `{<prefix>}:backfills`, created and updated at the server's `TIME`.
    fn create_backfill<'a>(
        &'a self,
        backfill: &'a NewBackfill,
    ) -> BoxFuture<'a, Result<StoredBackfill>> {
        Box::pin(self.inner.create_backfill(backfill))
    }

    /// One script that reads the hash whole; ordered by id.
    fn backfills(&self) -> BoxFuture<'_, Result<Vec<StoredBackfill>>> {
        Box::pin(self.inner.backfills())
    }

    fn backfill(&self, id: i64) -> BoxFuture<'_, Result<Option<StoredBackfill>>> {
        Box::pin(self.inner.backfill(id))
    }

    /// One script: the row read, its state checked against `from`, changed and written back.
    fn set_backfill_state<'a>(
        &'a self,
        id: i64,
        state: BackfillState,
        from: &'a [BackfillState],
        by: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredBackfill>>> {
        Box::pin(self.inner.set_backfill_state(id, state, from, by))
    }

    /// One script: the row read, its counts raised and `updated_at` set, written back.
    fn count_backfill(&self, id: i64, count: BackfillCount) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.inner.count_backfill(id, count))
    }
}
