//! Every schedule operation on the provider's core: reads as one statement; writes as one
//! transaction (the version taken from the counter row, the row read and locked, the decision
//! made in Rust, the row written, PostgreSQL's `NOTIFY`), run again when the connection was
//! lost before the commit or the transaction lost a race.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Connection as _, Database};

use super::super::core::Core;
use super::super::driver::{Driver, Value};
use super::super::quirks::Quirks;
use super::super::table::SCHEDULE_COLUMNS;
use super::retry::{WRITE_TRIES, again, pause_before_again};
use super::{
    BUMP, BUMP_BY, CLAIM, CLOCK, COUNTER, INSERT, INSERT_ROWS, ONE, REMOVE, RUN_TIME, SEED, SINCE,
    SOME, START, ScheduleSql, TAKEN, UPDATE, VERSION, args, channel, read_row, render, repeated,
    row_values,
};
use crate::error::{Error, Result};
use crate::schedules::{
    ChangeFeed, NewSchedule, ScheduleChange, StoredSchedule, Trigger, TriggerAnswer, check,
};

/// What a write decided on the row it read.
pub(crate) enum Decision<T> {
    /// Write this row (its version and time already set), answer `T`.
    Write(Box<StoredSchedule>, T),
    /// Write nothing, answer `T`.
    Answer(T),
}

/// Why a write's attempt failed: a statement (maybe run again), or the decision (final).
enum Failed {
    Sql(sqlx::Error),
    Refused(Error),
}

impl From<sqlx::Error> for Failed {
    fn from(e: sqlx::Error) -> Self {
        Self::Sql(e)
    }
}

/// `change` applied to `row`.
fn apply(row: &mut StoredSchedule, change: &ScheduleChange) {
    if let Some(cron) = &change.cron {
        row.cron.clone_from(cron);
    }
    if let Some(tz) = &change.time_zone {
        row.time_zone.clone_from(tz);
    }
    if let Some(paused) = change.paused {
        row.paused = paused;
    }
    if let Some(jitter) = change.jitter {
        row.jitter = jitter.map(whole_millis);
    }
    if let Some(retry) = change.retry {
        row.retry = retry.map(|mut r| {
            r.base = whole_millis(r.base);
            r.cap = whole_millis(r.cap);
            r
        });
    }
    if let Some(payload) = &change.payload {
        row.payload.clone_from(payload);
    }
    if let Some(note) = &change.note {
        row.note.clone_from(note);
    }
    if let Some(overlap) = &change.overlap {
        row.overlap.clone_from(overlap);
    }
    if let Some(rules) = &change.rules {
        row.rules.clone_from(rules);
    }
    if let Some(deadlines) = &change.deadlines {
        row.deadlines.clone_from(deadlines);
    }
}

/// A duration as stored: whole milliseconds, rounded up.
fn whole_millis(d: Duration) -> Duration {
    Duration::from_millis(super::super::millis_ceil(d).unsigned_abs())
}

/// A schedule with nothing set: what a create or an override starts from.
fn blank(
    name: &str,
    handler: Option<String>,
    version: i64,
    now: DateTime<Utc>,
    by: &str,
) -> StoredSchedule {
    StoredSchedule {
        name: name.to_owned(),
        handler,
        payload: None,
        cron: None,
        time_zone: None,
        paused: false,
        jitter: None,
        retry: None,
        version,
        deleted: false,
        updated_at: now,
        updated_by: by.to_owned(),
        trigger: None,
        note: None,
        overlap: None,
        rules: None,
        deadlines: None,
    }
}

/// The live row, if `old` is one (not a tombstone).
fn live(old: Option<StoredSchedule>) -> Option<StoredSchedule> {
    old.filter(|s| !s.deleted)
}

/// How many live run-time schedules the table holds, read in the write's transaction `tx`.
async fn run_time_held<D: Quirks + ScheduleSql>(
    tx: &mut <D::Db as Database>::Connection,
    sql: std::sync::Arc<str>,
) -> Result<usize, sqlx::Error> {
    let row = D::Db::fetch_optional(tx, sql, args::<D>(&[])?)
        .await?
        .ok_or(sqlx::Error::RowNotFound)?;
    Ok(usize::try_from(D::Db::int(&row, 0)?).unwrap_or(0))
}

impl<D: Quirks + ScheduleSql> Core<D> {
    fn sql(&self, template: &str) -> std::sync::Arc<str> {
        render::<D>(template, &self.settings.table).into()
    }

    /// [`fail`](Self::fail) for a statement on the schedules table: a missing table is named
    /// as the schedules table, which `migrate()` creates.
    async fn fail_schedules(&self, operation: String, source: sqlx::Error) -> Error {
        match self.fail(operation, source).await {
            Error::TableMissing { backend, .. } => Error::TableMissing {
                backend,
                table: self.settings.table.schedules_table(),
            },
            other => other,
        }
    }

    /// Runs one read statement on a connection from the pool.
    async fn read(
        &self,
        what: &str,
        template: &str,
        values: &[Value<'_>],
    ) -> Result<Vec<<D::Db as Database>::Row>> {
        let sql = self.sql(template);
        let rows = self
            .stash
            .run(
                &self.pool,
                false,
                || args::<D>(values),
                D::Db::fetch_all,
                &sql,
            )
            .await;
        match rows {
            Ok(rows) => Ok(rows),
            Err(e) => Err(self.fail_schedules(what.to_owned(), e).await),
        }
    }

    pub(crate) async fn schedules_version(&self) -> Result<i64> {
        let what = "read the schedule version";
        let rows = self.read(what, VERSION, &[]).await?;
        match rows.first().map(|row| D::Db::int(row, 0)) {
            Some(Ok(v)) => Ok(v),
            None => Ok(0),
            Some(Err(e)) => Err(self.fail_schedules(what.into(), e).await),
        }
    }

    pub(crate) async fn schedules_since(&self, since: i64) -> Result<Vec<StoredSchedule>> {
        let what = format!("read the schedules changed after version {since}");
        let rows = self
            .read(&what, SINCE, &[since.into(), COUNTER.into()])
            .await?;
        match rows.iter().map(read_row::<D>).collect() {
            Ok(all) => Ok(all),
            Err(e) => Err(self.fail_schedules(what, e).await),
        }
    }

    pub(crate) async fn schedule(&self, name: &str) -> Result<Option<StoredSchedule>> {
        check::existing_name(name)?;
        let what = format!("read schedule {name:?}");
        let rows = self.read(&what, ONE, &[name.into()]).await?;
        match rows.first().map(read_row::<D>).transpose() {
            Ok(row) => Ok(row),
            Err(e) => Err(self.fail_schedules(what, e).await),
        }
    }

    /// One write: `decide` is given the row `name` holds (locked until the commit), the
    /// version this write takes and the store's time, and says what to write.
    pub(crate) async fn write<T>(
        &self,
        what: String,
        name: &str,
        decide: impl Fn(Option<StoredSchedule>, i64, DateTime<Utc>) -> Result<Decision<T>>,
    ) -> Result<T> {
        self.write_counted(what, name, false, |old, version, now, _| {
            decide(old, version, now)
        })
        .await
    }

    /// [`write`](Self::write), and with `count`, `decide` is also given how many live
    /// run-time schedules the store holds, counted in the same transaction (after the counter
    /// row is locked, so no other write changes the count before the commit).
    async fn write_counted<T>(
        &self,
        what: String,
        name: &str,
        count: bool,
        decide: impl Fn(Option<StoredSchedule>, i64, DateTime<Utc>, usize) -> Result<Decision<T>>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.write_once(name, count, &decide).await {
                Ok(answer) => return Ok(answer),
                Err(Failed::Refused(e)) => return Err(e),
                Err(Failed::Sql(e)) if tries < WRITE_TRIES && again(&e, D::connection_lost) => {
                    tracing::debug!(error = %e, tries, "a schedule write failed before its commit; running it again");
                    pause_before_again(tries).await;
                }
                Err(Failed::Sql(e)) => return Err(self.fail_schedules(what, e).await),
            }
        }
    }

    async fn write_once<T>(
        &self,
        name: &str,
        count: bool,
        decide: &impl Fn(Option<StoredSchedule>, i64, DateTime<Utc>, usize) -> Result<Decision<T>>,
    ) -> Result<T, Failed> {
        let mut conn = self.connection().await?;
        let outcome = self.transaction(&mut conn, name, count, decide).await;
        self.give_back(conn, outcome.is_ok());
        outcome
    }

    async fn transaction<T>(
        &self,
        conn: &mut <D::Db as Database>::Connection,
        name: &str,
        count: bool,
        decide: &impl Fn(Option<StoredSchedule>, i64, DateTime<Utc>, usize) -> Result<Decision<T>>,
    ) -> Result<T, Failed> {
        let mut tx = conn.begin_with(AssertSqlSafe(D::BEGIN)).await?;
        let bumped =
            D::Db::execute(&mut *tx, self.sql(BUMP), args::<D>(&[COUNTER.into()])?).await?;
        if D::Db::rows_affected(&bumped) == 0 {
            let values = [COUNTER.into(), true.into(), "".into()];
            D::Db::execute(&mut *tx, self.sql(SEED), args::<D>(&values)?).await?;
        }
        let taken = D::Db::fetch_optional(&mut *tx, self.sql(TAKEN), args::<D>(&[COUNTER.into()])?)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        let version = D::Db::int(&taken, 0)?;
        let now = D::time(&taken, 1)?.ok_or(sqlx::Error::RowNotFound)?;
        let one = format!("{ONE} {}", D::FOR_UPDATE);
        let old = D::Db::fetch_optional(&mut *tx, self.sql(&one), args::<D>(&[name.into()])?)
            .await?
            .map(|row| read_row::<D>(&row))
            .transpose()?;
        let existed = old.is_some();
        let held = if count {
            run_time_held::<D>(&mut tx, self.sql(RUN_TIME)).await?
        } else {
            0
        };
        let (row, answer) = match decide(old, version, now, held).map_err(Failed::Refused)? {
            Decision::Answer(answer) => {
                tx.rollback().await?;
                return Ok(answer);
            }
            Decision::Write(row, answer) => (row, answer),
        };
        let values = row_values(&row);
        if existed {
            let mut update = values[1..].to_vec();
            update.push(row.name.as_str().into());
            D::Db::execute(&mut *tx, self.sql(UPDATE), args::<D>(&update)?).await?;
        } else {
            D::Db::execute(&mut *tx, self.sql(INSERT), args::<D>(&values)?).await?;
        }
        if let Some(notify) = D::NOTIFY {
            let channel = channel(&self.settings.table);
            let version = version.to_string();
            let values = [channel.as_str().into(), version.as_str().into()];
            D::Db::fetch_all(&mut *tx, self.sql(notify), args::<D>(&values)?).await?;
        }
        tx.commit().await?;
        Ok(answer)
    }

    pub(crate) async fn create_schedule(
        &self,
        new: &NewSchedule,
        by: &str,
    ) -> Result<StoredSchedule> {
        let limits = &self.settings.common.schedule_limits;
        check::name(&new.name)?;
        check::who(&new.name, "updated_by", by)?;
        check::change(&new.name, &new.fields)?;
        check::payload(&new.name, &new.fields, limits)?;
        let what = format!("create schedule {:?}", new.name);
        let run_time = new.handler.is_some();
        self.write_counted(what, &new.name, run_time, |old, version, now, held| {
            if live(old).is_some() {
                return Err(Error::ScheduleExists {
                    name: new.name.clone(),
                });
            }
            check::run_time_schedules(&new.name, held, usize::from(run_time), limits)?;
            let mut row = blank(&new.name, new.handler.clone(), version, now, by);
            apply(&mut row, &new.fields);
            check::schedule(&row)?;
            Ok(Decision::Write(Box::new(row.clone()), row))
        })
        .await
    }

    /// Every schedule of `schedules` in one transaction: all checked first (nothing sent for a
    /// bad one), then the counter row bumped once by their number, the names read and locked
    /// (a live one refuses the batch), tombstones removed, the rows inserted a chunk under
    /// the dialect's bind limit at a time, one `NOTIFY` (the last version).
    pub(crate) async fn create_schedules(
        &self,
        schedules: &[NewSchedule],
        by: &str,
    ) -> Result<Vec<StoredSchedule>> {
        let limits = &self.settings.common.schedule_limits;
        let rows = check::batch(schedules, by, |new| {
            check::payload(&new.name, &new.fields, limits)?;
            let mut row = blank(&new.name, new.handler.clone(), 0, DateTime::UNIX_EPOCH, by);
            apply(&mut row, &new.fields);
            Ok(row)
        })?;
        if rows.is_empty() {
            return Ok(rows);
        }
        let what = format!("create {} schedules", rows.len());
        let mut tries = 0;
        loop {
            tries += 1;
            let outcome = async {
                let mut conn = self.connection().await?;
                let outcome = self.batch_transaction(&mut conn, &rows).await;
                self.give_back(conn, outcome.is_ok());
                outcome
            };
            match outcome.await {
                Ok(stored) => return Ok(stored),
                Err(Failed::Refused(e)) => return Err(e),
                Err(Failed::Sql(e)) if tries < WRITE_TRIES && again(&e, D::connection_lost) => {
                    tracing::debug!(error = %e, tries, "a batch of schedules failed before its commit; running it again");
                    pause_before_again(tries).await;
                }
                Err(Failed::Sql(e)) => return Err(self.fail_schedules(what, e).await),
            }
        }
    }

    async fn batch_transaction(
        &self,
        conn: &mut <D::Db as Database>::Connection,
        rows: &[StoredSchedule],
    ) -> Result<Vec<StoredSchedule>, Failed> {
        let n = i64::try_from(rows.len()).unwrap_or(i64::MAX);
        let mut tx = conn.begin_with(AssertSqlSafe(D::BEGIN)).await?;
        let bumped = D::Db::execute(
            &mut *tx,
            self.sql(BUMP_BY),
            args::<D>(&[n.into(), COUNTER.into()])?,
        )
        .await?;
        if D::Db::rows_affected(&bumped) == 0 {
            // The seed takes the first version; the rest follow it.
            let values = [COUNTER.into(), true.into(), "".into()];
            D::Db::execute(&mut *tx, self.sql(SEED), args::<D>(&values)?).await?;
            if n > 1 {
                let values = [(n - 1).into(), COUNTER.into()];
                D::Db::execute(&mut *tx, self.sql(BUMP_BY), args::<D>(&values)?).await?;
            }
        }
        let taken = D::Db::fetch_optional(&mut *tx, self.sql(TAKEN), args::<D>(&[COUNTER.into()])?)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        let last = D::Db::int(&taken, 0)?;
        let now = D::time(&taken, 1)?.ok_or(sqlx::Error::RowNotFound)?;

        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        let mut tombstones = Vec::new();
        for chunk in names.chunks(D::MAX_BINDS) {
            let some = format!("{} {}", repeated(SOME, chunk.len()), D::FOR_UPDATE);
            let values: Vec<Value<'_>> = chunk.iter().map(|&name| name.into()).collect();
            let found = D::Db::fetch_all(&mut *tx, self.sql(&some), args::<D>(&values)?).await?;
            for row in &found {
                let old = read_row::<D>(row)?;
                if !old.deleted {
                    return Err(Failed::Refused(Error::ScheduleExists { name: old.name }));
                }
                tombstones.push(old.name);
            }
        }
        for chunk in tombstones.chunks(D::MAX_BINDS) {
            let values: Vec<Value<'_>> = chunk.iter().map(|name| name.as_str().into()).collect();
            let remove = self.sql(&repeated(REMOVE, chunk.len()));
            D::Db::execute(&mut *tx, remove, args::<D>(&values)?).await?;
        }

        let mut run_time = rows.iter().filter(|r| r.handler.is_some());
        if let Some(first) = run_time.next() {
            let held = run_time_held::<D>(&mut tx, self.sql(RUN_TIME)).await?;
            let limits = &self.settings.common.schedule_limits;
            check::run_time_schedules(&first.name, held, run_time.count() + 1, limits)
                .map_err(Failed::Refused)?;
        }

        let first = last - n + 1;
        let stored: Vec<StoredSchedule> = rows
            .iter()
            .zip(first..)
            .map(|(row, version)| {
                let mut row = row.clone();
                (row.version, row.updated_at) = (version, now);
                row
            })
            .collect();
        for chunk in stored.chunks(D::MAX_BINDS / SCHEDULE_COLUMNS.len()) {
            let values: Vec<Value<'_>> = chunk.iter().flat_map(row_values).collect();
            let insert = self.sql(&repeated(INSERT_ROWS, chunk.len()));
            D::Db::execute(&mut *tx, insert, args::<D>(&values)?).await?;
        }
        if let Some(notify) = D::NOTIFY {
            let channel = channel(&self.settings.table);
            let version = last.to_string();
            let values = [channel.as_str().into(), version.as_str().into()];
            D::Db::fetch_all(&mut *tx, self.sql(notify), args::<D>(&values)?).await?;
        }
        tx.commit().await?;
        Ok(stored)
    }

    pub(crate) async fn update_schedule(
        &self,
        name: &str,
        change: &ScheduleChange,
        by: &str,
    ) -> Result<StoredSchedule> {
        check::existing_name(name)?;
        check::who(name, "updated_by", by)?;
        check::change(name, change)?;
        check::payload(name, change, &self.settings.common.schedule_limits)?;
        let what = format!("change schedule {name:?}");
        self.write(what, name, |old, version, now| {
            let mut row = match live(old) {
                Some(row) => row,
                // An override made now: its name is held to the rules of a name made.
                None => {
                    check::name(name)?;
                    blank(name, None, version, now, by)
                }
            };
            apply(&mut row, change);
            (row.version, row.updated_at, row.updated_by) = (version, now, by.to_owned());
            check::schedule(&row)?;
            Ok(Decision::Write(Box::new(row.clone()), row))
        })
        .await
    }

    pub(crate) async fn delete_schedule(&self, name: &str, by: &str) -> Result<bool> {
        check::existing_name(name)?;
        check::who(name, "updated_by", by)?;
        self.write(
            format!("delete schedule {name:?}"),
            name,
            |old, version, now| {
                Ok(match live(old) {
                    Some(mut row) => {
                        row.deleted = true;
                        row.trigger = None;
                        (row.version, row.updated_at, row.updated_by) =
                            (version, now, by.to_owned());
                        Decision::Write(Box::new(row), true)
                    }
                    None => Decision::Answer(false),
                })
            },
        )
        .await
    }

    pub(crate) async fn request_trigger(&self, name: &str, by: &str) -> Result<TriggerAnswer> {
        check::existing_name(name)?;
        check::who(name, "requested_by", by)?;
        self.write(
            format!("ask for a run of {name:?}"),
            name,
            |old, version, now| {
                let mut row = match live(old) {
                    Some(row) => row,
                    None => {
                        check::name(name)?;
                        blank(name, None, version, now, by)
                    }
                };
                if let Some(t) = &row.trigger
                    && (!t.started || t.claimed_until.is_some_and(|until| until > now))
                {
                    return Ok(Decision::Answer(TriggerAnswer::AlreadyPending(t.clone())));
                }
                row.trigger = Some(Trigger {
                    id: version,
                    requested_by: by.to_owned(),
                    requested_at: now,
                    claimed_by: None,
                    claimed_until: None,
                    started: false,
                });
                (row.version, row.updated_at, row.updated_by) = (version, now, by.to_owned());
                Ok(Decision::Write(
                    Box::new(row),
                    TriggerAnswer::Requested { id: version },
                ))
            },
        )
        .await
    }

    pub(crate) async fn finish_trigger(&self, name: &str, id: i64) -> Result<bool> {
        check::existing_name(name)?;
        self.write(
            format!("finish run request {id} of {name:?}"),
            name,
            |old, version, _| {
                Ok(match old {
                    Some(mut row) if row.trigger.as_ref().is_some_and(|t| t.id == id) => {
                        row.trigger = None;
                        row.version = version;
                        Decision::Write(Box::new(row), true)
                    }
                    _ => Decision::Answer(false),
                })
            },
        )
        .await
    }

    /// The store's clock (never the application's).
    async fn store_now(&self, what: &str) -> Result<DateTime<Utc>> {
        let rows = self.read(what, CLOCK, &[]).await?;
        let now = match rows.first() {
            Some(row) => D::time(row, 0).and_then(|t| t.ok_or(sqlx::Error::RowNotFound)),
            None => Err(sqlx::Error::RowNotFound),
        };
        match now {
            Ok(now) => Ok(now),
            Err(e) => Err(self.fail_schedules(what.to_owned(), e).await),
        }
    }

    /// Runs a claim or start: `values` from the store's time.
    async fn trigger_update<'v>(
        &self,
        what: String,
        template: &str,
        lease: Duration,
        values: impl Fn(DateTime<Utc>, DateTime<Utc>) -> Vec<Value<'v>>,
    ) -> Result<bool> {
        let now = self.store_now(&what).await?;
        let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::MAX);
        let values = values(now, until);
        let sql = self.sql(template);
        let done = self
            .stash
            .run(
                &self.pool,
                false,
                || args::<D>(&values),
                D::Db::execute,
                &sql,
            )
            .await;
        match done {
            Ok(done) => Ok(D::Db::rows_affected(&done) == 1),
            Err(e) => Err(self.fail_schedules(what, e).await),
        }
    }

    pub(crate) async fn claim_trigger(
        &self,
        name: &str,
        id: i64,
        by: &str,
        lease: Duration,
    ) -> Result<bool> {
        check::existing_name(name)?;
        check::who(name, "claimed_by", by)?;
        check::lease(name, lease)?;
        let what = format!("claim run request {id} of {name:?}");
        self.trigger_update(what, CLAIM, lease, |now, until| {
            vec![
                by.into(),
                Some(until).into(),
                name.into(),
                id.into(),
                Some(now).into(),
            ]
        })
        .await
    }

    pub(crate) async fn start_trigger(
        &self,
        name: &str,
        id: i64,
        by: &str,
        lease: Duration,
    ) -> Result<bool> {
        check::existing_name(name)?;
        check::who(name, "claimed_by", by)?;
        check::lease(name, lease)?;
        let what = format!("start run request {id} of {name:?}");
        self.trigger_update(what, START, lease, |_, until| {
            vec![
                true.into(),
                Some(until).into(),
                name.into(),
                id.into(),
                by.into(),
            ]
        })
        .await
    }

    pub(crate) async fn change_feed(&self) -> Result<Option<ChangeFeed>> {
        match D::change_feed(&self.pool, channel(&self.settings.table)).await {
            Ok(feed) => Ok(feed),
            Err(e) => Err(self
                .fail_schedules("listen for schedule changes".into(), e)
                .await),
        }
    }
}
