//! The fleet's code-defined jobs in `<table>_fleet` (one row per instance, its jobs one JSON
//! document): [`ScheduleStore::register`](crate::schedules::ScheduleStore::register) as one
//! transaction, the heartbeat and the reads one statement each.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Connection as _, Database};

use super::super::core::Core;
use super::super::driver::{Driver, Value};
use super::super::quirks::Quirks;
use super::{CLOCK, ScheduleSql, args, render};
use crate::error::{Error, Result};
use crate::schedules::{Registration, StoredRegistration};

/// Every registration. Binds nothing.
const ALL: &str = "SELECT instance, fleet, jobs, last_seen, forget_after_ms FROM {fleet}";

/// When each instance was last seen, without its jobs. Binds nothing.
const SEEN: &str = "SELECT instance, last_seen, forget_after_ms FROM {fleet}";

/// Removes one instance's registration. Binds: the instance.
const REMOVE: &str = "DELETE FROM {fleet} WHERE instance = ?";

/// A registration, seen now. Binds: the instance, its fleet, its jobs, `forget_after_ms`.
const INSERT: &str = "INSERT INTO {fleet} (instance, fleet, jobs, last_seen, forget_after_ms) VALUES (?, ?, ?, {now}, ?)";

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
            let mut all = Vec::with_capacity(rows.len());
            for row in &rows {
                all.push(StoredRegistration::new(
                    D::Db::text(row, 0)?,
                    D::Db::text(row, 1)?,
                    D::Db::text(row, 2)?,
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
        let jobs = registration.jobs_json();
        let write = async {
            let mut conn = self.connection().await?;
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
                    D::Db::execute(
                        &mut *tx,
                        sql(REMOVE),
                        args::<D>(&[instance.as_str().into()])?,
                    )
                    .await?;
                }
                let values = [
                    registration.instance.as_str().into(),
                    registration.fleet.as_str().into(),
                    jobs.as_ref().into(),
                    millis(registration.forget_after).into(),
                ];
                D::Db::execute(&mut *tx, sql(INSERT), args::<D>(&values)?).await?;
                tx.commit().await
            }
            .await;
            self.give_back(conn, outcome.is_ok());
            outcome
        };
        match write.await {
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
