//! The fleet's code-defined jobs in `<table>_fleet` (one row per instance) and
//! `<table>_fleet_parts` (its jobs, JSON arrays of about
//! [`PART_BYTES`](crate::schedules::fleet::PART_BYTES) each; a registration written before
//! migration 10 kept them in the instance's row, and is still read from there):
//! [`ScheduleStore::register`](crate::schedules::ScheduleStore::register) as one transaction,
//! the heartbeat one statement, the read two.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Connection as _, Database};

use super::super::core::Core;
use super::super::driver::{Driver, Value};
use super::super::quirks::Quirks;
use super::retry::{WRITE_TRIES, again, pause_before_again};
use super::{CLOCK, ScheduleSql, args, render};
use crate::error::{Error, Result};
use crate::schedules::fleet::join_parts;
use crate::schedules::{Registration, StoredRegistration};

/// Every registration. Binds nothing.
const ALL: &str = "SELECT instance, fleet, jobs, last_seen, forget_after_ms FROM {fleet}";

/// When each instance was last seen, without its jobs. Binds nothing.
const SEEN: &str = "SELECT instance, last_seen, forget_after_ms FROM {fleet}";

/// Every part of every registration, in order. Binds nothing.
const ALL_PARTS: &str = "SELECT instance, jobs FROM {fleet_parts} ORDER BY instance, part";

/// Removes one instance's registration. Binds: the instance.
const REMOVE: &str = "DELETE FROM {fleet} WHERE instance = ?";

/// Removes one instance's parts. Binds: the instance.
const REMOVE_PARTS: &str = "DELETE FROM {fleet_parts} WHERE instance = ?";

/// A registration, seen now, its jobs in parts. Binds: the instance, its fleet,
/// `forget_after_ms`.
const INSERT: &str = "INSERT INTO {fleet} (instance, fleet, jobs, last_seen, forget_after_ms) VALUES (?, ?, '[]', {now}, ?)";

/// One part of a registration's jobs. Binds: the instance, the part's number, its jobs.
const INSERT_PART: &str = "INSERT INTO {fleet_parts} (instance, part, jobs) VALUES (?, ?, ?)";

/// The heartbeat. Binds: the instance.
const BEAT: &str = "UPDATE {fleet} SET last_seen = {now} WHERE instance = ?";

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

fn forget_after(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0).unsigned_abs())
}

impl<D: Quirks + ScheduleSql> Core<D> {
    /// [`fail`](Self::fail), a missing table named as `<table>_fleet`.
    async fn fail_fleet(&self, operation: String, source: sqlx::Error) -> Error {
        match self.fail(operation, source).await {
            Error::TableMissing { backend, .. } => Error::TableMissing {
                backend,
                table: format!("{}_fleet", self.settings.table.as_str()),
            },
            other => other,
        }
    }

    async fn fleet_read(
        &self,
        template: &str,
        values: &[Value<'_>],
    ) -> Result<Vec<<D::Db as Database>::Row>, sqlx::Error> {
        let sql: std::sync::Arc<str> = render::<D>(template, &self.settings.table).into();
        let mut conn = self.connection().await?;
        let rows = D::Db::fetch_all(&mut conn, sql, args::<D>(values)?).await;
        self.give_back(conn, rows.is_ok());
        rows
    }

    pub(crate) async fn registrations(&self) -> Result<(Vec<StoredRegistration>, DateTime<Utc>)> {
        let what = "read the fleet's registered jobs";
        let read = async {
            let clock = self.fleet_read(CLOCK, &[]).await?;
            let now = clock
                .first()
                .map(|row| D::time(row, 0))
                .transpose()?
                .flatten()
                .ok_or(sqlx::Error::RowNotFound)?;
            let rows = self.fleet_read(ALL, &[]).await?;
            let mut parts: std::collections::HashMap<String, Vec<String>> = Default::default();
            for row in &self.fleet_read(ALL_PARTS, &[]).await? {
                parts
                    .entry(D::Db::text(row, 0)?)
                    .or_default()
                    .push(D::Db::text(row, 1)?);
            }
            let mut all = Vec::with_capacity(rows.len());
            for row in &rows {
                let instance = D::Db::text(row, 0)?;
                // Its parts; a registration from before migration 10 has its jobs in its row.
                let jobs = match parts.remove(&instance) {
                    Some(parts) => join_parts(&parts),
                    None => D::Db::text(row, 2)?,
                };
                all.push(StoredRegistration::new(
                    instance,
                    D::Db::text(row, 1)?,
                    jobs,
                    D::time(row, 3)?.ok_or(sqlx::Error::RowNotFound)?,
                    forget_after(D::Db::int(row, 4)?),
                ));
            }
            Ok::<_, sqlx::Error>((all, now))
        };
        match read.await {
            Ok(answer) => Ok(answer),
            Err(e) => Err(self.fail_fleet(what.to_owned(), e).await),
        }
    }

    pub(crate) async fn heartbeat(&self, instance: &str) -> Result<bool> {
        let sql: std::sync::Arc<str> = render::<D>(BEAT, &self.settings.table).into();
        let done = async {
            let mut conn = self.connection().await?;
            let done = D::Db::execute(&mut conn, sql, args::<D>(&[instance.into()])?).await;
            self.give_back(conn, done.is_ok());
            Ok::<_, sqlx::Error>(D::Db::rows_affected(&done?) > 0)
        };
        match done.await {
            Ok(there) => Ok(there),
            Err(e) => Err(self
                .fail_fleet("send this instance's heartbeat".to_owned(), e)
                .await),
        }
    }

    /// One transaction: the instance's registration replaced, the forgotten ones deleted.
    pub(crate) async fn register(&self, registration: &Registration) -> Result<()> {
        let sql = |template: &str| -> std::sync::Arc<str> {
            render::<D>(template, &self.settings.table).into()
        };
        let sqlite = D::BACKEND == crate::Backend::Sqlite;
        let pragma = |text: &str| -> std::sync::Arc<str> { text.into() };
        let write = || async {
            let mut conn = self.connection().await?;
            // On SQLite, the pages a registration writes (about 5 MB for 100,000 jobs) would
            // fill the connection's page cache (2 MB by default) and stay in the allocator of its
            // thread: it writes through a cache of 256 KiB, then frees it, then has its own back.
            let cache = if sqlite {
                let rows =
                    D::Db::fetch_all(&mut *conn, pragma("PRAGMA cache_size"), args::<D>(&[])?)
                        .await?;
                let size = rows.first().map(|row| D::Db::int(row, 0)).transpose()?;
                D::Db::execute(
                    &mut *conn,
                    pragma("PRAGMA cache_size = -256"),
                    args::<D>(&[])?,
                )
                .await?;
                size
            } else {
                None
            };
            let outcome = async {
                let mut tx = conn.begin_with(AssertSqlSafe(D::BEGIN)).await?;
                let clock = D::Db::fetch_all(&mut *tx, sql(CLOCK), args::<D>(&[])?).await?;
                let now = clock
                    .first()
                    .map(|row| D::time(row, 0))
                    .transpose()?
                    .flatten()
                    .ok_or(sqlx::Error::RowNotFound)?;
                let seen = D::Db::fetch_all(&mut *tx, sql(SEEN), args::<D>(&[])?).await?;
                let mut gone = vec![registration.instance.clone()];
                for row in &seen {
                    let instance = D::Db::text(row, 0)?;
                    let last = D::time(row, 1)?.unwrap_or(now);
                    let stored = StoredRegistration::new(
                        instance.clone(),
                        "",
                        "",
                        last,
                        forget_after(D::Db::int(row, 2)?),
                    );
                    if stored.forgotten(now) && instance != registration.instance {
                        gone.push(instance);
                    }
                }
                for instance in &gone {
                    for remove in [REMOVE, REMOVE_PARTS] {
                        D::Db::execute(
                            &mut *tx,
                            sql(remove),
                            args::<D>(&[instance.as_str().into()])?,
                        )
                        .await?;
                    }
                }
                let values = [
                    registration.instance.as_str().into(),
                    registration.fleet.as_str().into(),
                    millis(registration.forget_after).into(),
                ];
                D::Db::execute(&mut *tx, sql(INSERT), args::<D>(&values)?).await?;
                let insert_part = sql(INSERT_PART);
                // Each part is rendered as it is written, and dropped before the next.
                for (number, part) in registration.parts().enumerate() {
                    let values = [
                        registration.instance.as_str().into(),
                        i64::try_from(number).unwrap_or(i64::MAX).into(),
                        part.as_str().into(),
                    ];
                    D::Db::execute(&mut *tx, insert_part.clone(), args::<D>(&values)?).await?;
                }
                tx.commit().await
            }
            .await;
            // The cache is given back its size whether the write succeeded or not.
            let restored = match cache {
                Some(size) => {
                    async {
                        if outcome.is_ok() {
                            D::Db::execute(
                                &mut *conn,
                                pragma("PRAGMA shrink_memory"),
                                args::<D>(&[])?,
                            )
                            .await?;
                        }
                        let restore = format!("PRAGMA cache_size = {size}");
                        D::Db::execute(&mut *conn, restore.as_str().into(), args::<D>(&[])?)
                            .await?;
                        Ok(())
                    }
                    .await
                }
                None => Ok(()),
            };
            let outcome = outcome.and(restored);
            self.give_back(conn, outcome.is_ok());
            outcome
        };
        // Instances starting together register at once: on MySQL each one's delete of its
        // earlier rows locks the gap its insert needs, and one of two deadlocks (seen in the
        // kit, two instances started together: one registration lost until the next
        // heartbeat). A write that lost a race or its connection ran to no effect: again.
        let mut tries = 1;
        let outcome = loop {
            match write().await {
                Err(e) if tries < WRITE_TRIES && again(&e, D::connection_lost) => {
                    tracing::debug!(error = %e, tries, "a registration failed before its commit; running it again");
                    pause_before_again(tries).await;
                    tries += 1;
                }
                outcome => break outcome,
            }
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(e) => {
                let what = format!(
                    "register the {} jobs of instance {:?}",
                    registration.len(),
                    registration.instance
                );
                Err(self.fail_fleet(what, e).await)
            }
        }
    }
}
