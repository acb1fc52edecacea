//! The run history's operations on a [`Core`]: record, finish, prune, sweep and read runs.

use std::time::Duration;

use chrono::{DateTime, Utc};

use sqlx::Database;

use super::{Core, required, run};
use crate::error::Result;
use crate::history::{
    NewRun, RecordedTicks, RunEnd, RunOutcome, RunQuery, RunRecord, parse_outcome, storable_error,
};
use crate::sql::dialect::{Answer, Hooks, Param};
use crate::sql::driver::{Driver, Value};
use crate::sql::quirks::Quirks;
use crate::sql::{PRUNE_BATCH, PRUNE_JOBS, retention};

impl<D: Quirks> Core<D> {
    pub(crate) async fn record_run(&self, run: &NewRun) -> Result<i64> {
        let error = run.error.as_deref().map(storable_error);
        let values = |param| -> Option<Value<'_>> {
            Some(match param {
                Param::Job => run.job.as_str().into(),
                Param::Name => run.name.as_str().into(),
                Param::Tick => run.tick.into(),
                Param::Running => (run.outcome == RunOutcome::Running).into(),
                Param::Outcome => run.outcome.as_str().into(),
                Param::LockedBy => self.settings.common.locked_by.as_str().into(),
                Param::Token => run.fencing_token.into(),
                Param::Error => error.as_deref().into(),
                Param::Attempt => run.attempt.map(i64::from).into(),
                Param::RequestedBy => run.requested_by.as_deref().into(),
                _ => return None,
            })
        };
        let answer = if D::RETURNING {
            run!(self, self.sql.run_insert, fetch_optional, |p| values(p)).map(Answer::Row)
        } else {
            run!(self, self.sql.run_insert, execute, |p| values(p)).map(Answer::Done)
        };
        match answer.and_then(D::inserted_id) {
            Ok(id) => Ok(id),
            Err(e) => Err(self.fail_runs("record a run".into(), e).await),
        }
    }

    /// Run again when it lost a serialization race (as every statement is): at REPEATABLE READ
    /// or SERIALIZABLE, a sweep that closed this row after this statement took its snapshot
    /// makes it fail, and the real outcome must still land.
    pub(crate) async fn finish_run(
        &self,
        id: i64,
        outcome: RunOutcome,
        error: Option<&str>,
    ) -> Result<()> {
        let error = error.map(storable_error);
        let done = run!(self, self.sql.run_finish, execute, |p| match p {
            Param::Id => Some(id.into()),
            Param::Outcome => Some(outcome.as_str().into()),
            Param::Error => Some(error.as_deref().into()),
            _ => None,
        });
        match done {
            Ok(_) => Ok(()),
            Err(e) => Err(self.fail_runs("finish a run".into(), e).await),
        }
    }

    /// Many rows, [`RUNS_PER_STATEMENT`] per `run_insert_many`: each answered its id in the
    /// order of `runs`. A batch whose statement fails (a row the table refuses, the server
    /// gone, MySQL 8 without `RETURNING`) is written row by row, all at once, so each row gets
    /// its own answer.
    pub(crate) async fn record_runs(&self, runs: &[NewRun]) -> Vec<Result<i64>> {
        use std::sync::atomic::Ordering;
        let mut answers = Vec::with_capacity(runs.len());
        for chunk in runs.chunks(RUNS_PER_STATEMENT) {
            if chunk.len() > 1 && !self.batch_unsupported.load(Ordering::Relaxed) {
                match self.insert_runs(chunk).await {
                    Ok(ids) => {
                        answers.extend(ids.into_iter().map(Ok));
                        continue;
                    }
                    Err(e) if D::batch_unsupported(&e) => {
                        tracing::info!(backend = %D::BACKEND, error = %e,
                            "the server has no batch insert (no RETURNING): writing history rows one by one");
                        self.batch_unsupported.store(true, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::debug!(backend = %D::BACKEND, error = %e, rows = chunk.len(),
                        "a batch of history rows failed: writing them one by one")
                    }
                }
            }
            let each = chunk.iter().map(|run| self.record_run(run));
            answers.extend(futures_util::future::join_all(each).await);
        }
        answers
    }

    /// One `run_insert_many` of `runs`: their ids, in their order.
    async fn insert_runs(&self, runs: &[NewRun]) -> Result<Vec<i64>, sqlx::Error> {
        let items: Vec<_> = runs
            .iter()
            .map(|run| {
                (
                    &run.job,
                    &run.name,
                    run.tick.map(D::batch_time),
                    i32::from(run.outcome == RunOutcome::Running),
                    run.outcome.as_str(),
                    run.fencing_token,
                    run.error.as_deref().map(storable_error),
                    run.attempt,
                    &run.requested_by,
                )
            })
            .collect();
        let json = serde_json::to_string(&items).map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        let rows = run!(self, self.sql.run_insert_many, fetch_all, |p| match p {
            Param::Batch => Some(json.as_str().into()),
            Param::LockedBy => Some(self.settings.common.locked_by.as_str().into()),
            _ => None,
        })?;
        let mut ids = rows
            .iter()
            .map(|row| D::Db::int(row, 0))
            .collect::<Result<Vec<_>, _>>()?;
        if !D::RUNS_IN_ORDER {
            ids.sort_unstable();
        }
        if ids.len() == runs.len() {
            Ok(ids)
        } else {
            Err(sqlx::Error::Protocol(format!(
                "a batch insert of {} history rows answered {} ids",
                runs.len(),
                ids.len()
            )))
        }
    }

    /// Many rows' ends, [`RUNS_PER_STATEMENT`] per `run_finish_many`; a batch whose statement
    /// fails is finished row by row, all at once (each with its own answer).
    pub(crate) async fn finish_runs(&self, ends: &[RunEnd]) -> Vec<Result<()>> {
        let mut answers = Vec::with_capacity(ends.len());
        for chunk in ends.chunks(RUNS_PER_STATEMENT) {
            if chunk.len() > 1 {
                let items: Vec<_> = chunk
                    .iter()
                    .map(|end| {
                        let error = end.error.as_deref().map(storable_error);
                        (end.id, end.outcome.as_str(), error)
                    })
                    .collect();
                let done = match serde_json::to_string(&items) {
                    Ok(json) => run!(self, self.sql.run_finish_many, execute, |p| match p {
                        Param::Batch => Some(json.as_str().into()),
                        _ => None,
                    })
                    .map(drop),
                    Err(e) => Err(sqlx::Error::Encode(Box::new(e))),
                };
                match done {
                    Ok(()) => {
                        answers.extend(chunk.iter().map(|_| Ok(())));
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(backend = %D::BACKEND, error = %e, rows = chunk.len(),
                        "a batch of history rows' ends failed: finishing them one by one")
                    }
                }
            }
            let each = chunk
                .iter()
                .map(|end| self.finish_run(end.id, end.outcome, end.error.as_deref()));
            answers.extend(futures_util::future::join_all(each).await);
        }
        answers
    }

    /// Runs the prune statement for `jobs`, [`PRUNE_JOBS`] names at a time, each until it
    /// deletes fewer than [`PRUNE_BATCH`] rows.
    pub(crate) async fn prune_runs(&self, jobs: &[String], older_than: Duration) -> Result<u64> {
        let older_than = retention(older_than);
        let mut deleted = 0;
        for page in jobs.chunks(PRUNE_JOBS) {
            let json = match serde_json::to_string(page) {
                Ok(json) => json,
                Err(e) => {
                    let what = "write job names as JSON".to_owned();
                    return Err(self.fail(what, sqlx::Error::Encode(Box::new(e))).await);
                }
            };
            loop {
                let done = run!(self, self.sql.run_prune, execute, |p| match p {
                    Param::Retention => Some(older_than.into()),
                    Param::Names => Some(json.as_str().into()),
                    _ => None,
                });
                let done = match done {
                    Ok(done) => D::Db::rows_affected(&done),
                    Err(e) => return Err(self.fail_runs("prune the run history".into(), e).await),
                };
                deleted += done;
                if done < PRUNE_BATCH {
                    break;
                }
            }
        }
        Ok(deleted)
    }

    pub(crate) async fn close_abandoned_runs(&self) -> Result<u64> {
        match run!(self, self.sql.run_abandon, execute, |_p| None) {
            Ok(done) => Ok(D::Db::rows_affected(&done)),
            Err(e) => Err(self.fail_runs("close abandoned runs".into(), e).await),
        }
    }

    pub(crate) async fn runs(&self, query: &RunQuery) -> Result<Vec<RunRecord>> {
        let rows = run!(self, self.sql.runs, fetch_all, |p| match p {
            Param::NameFilter => Some(query.name.as_deref().into()),
            Param::OutcomeFilter => Some(query.outcome.map(RunOutcome::as_str).into()),
            Param::InstanceFilter => Some(query.instance.as_deref().into()),
            Param::Since => Some(query.since.into()),
            Param::Until => Some(query.until.into()),
            Param::Before => Some(query.before.into()),
            Param::RunsOnly => Some(query.runs_only.into()),
            Param::Limit => Some(i64::from(query.limit).into()),
            _ => None,
        });
        match rows.and_then(|rows| rows.iter().map(decode_run::<D>).collect()) {
            Ok(runs) => Ok(runs),
            Err(e) => Err(self.fail_runs("read the run history".into(), e).await),
        }
    }

    /// The ledger's recorded (job, tick) pairs: one statement (`runs_ticks`).
    pub(crate) async fn recorded_ticks(
        &self,
        since: DateTime<Utc>,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<RecordedTicks> {
        let rows = run!(self, self.sql.runs_ticks, fetch_all, |p| match p {
            Param::Since => Some(Some(since).into()),
            Param::TickFrom => Some(Some(from).into()),
            Param::TickTo => Some(Some(to).into()),
            _ => None,
        });
        let read = rows.and_then(|rows| {
            rows.iter()
                .filter_map(|row| match (D::Db::text(row, 0), D::time(row, 1)) {
                    (Ok(job), Ok(Some(tick))) => Some(Ok((job, tick))),
                    (Ok(_), Ok(None)) => None,
                    (Err(e), _) | (_, Err(e)) => Some(Err(e)),
                })
                .collect::<Result<RecordedTicks, _>>()
        });
        match read {
            Ok(ticks) => Ok(ticks),
            Err(e) => Err(self
                .fail_runs("read the ledger's recorded ticks".into(), e)
                .await),
        }
    }

    /// The newest row of each name that is not an operator's, [`LATEST_NAMES`] names per
    /// statement, ordered by name.
    pub(crate) async fn latest_runs(&self, names: &[String]) -> Result<Vec<RunRecord>> {
        let mut names: Vec<&String> = names.iter().collect();
        names.sort();
        names.dedup();
        let mut latest = Vec::with_capacity(names.len());
        for page in names.chunks(LATEST_NAMES) {
            let json = match serde_json::to_string(page) {
                Ok(json) => json,
                Err(e) => {
                    let what = "write lock names as JSON".to_owned();
                    return Err(self.fail(what, sqlx::Error::Encode(Box::new(e))).await);
                }
            };
            let rows = run!(self, self.sql.runs_latest, fetch_all, |p| match p {
                Param::Names => Some(json.as_str().into()),
                _ => None,
            });
            match rows.and_then(|rows| {
                rows.iter()
                    .map(decode_run::<D>)
                    .collect::<Result<Vec<_>, _>>()
            }) {
                Ok(runs) => latest.extend(runs),
                Err(e) => {
                    let what = format!("read the last runs of {} locks", page.len());
                    return Err(self.fail_runs(what, e).await);
                }
            }
        }
        Ok(latest)
    }
}

/// How many history rows [`Core::record_runs`] and [`Core::finish_runs`] write in one
/// statement.
const RUNS_PER_STATEMENT: usize = 1_000;

/// How many lock names [`Core::latest_runs`] reads in one statement.
const LATEST_NAMES: usize = 1_000;

/// A history row as `RUNS` and `RUNS_LATEST` return it.
fn decode_run<D: Hooks>(row: &<D::Db as Database>::Row) -> Result<RunRecord, sqlx::Error> {
    Ok(RunRecord {
        id: D::Db::int(row, 0)?,
        job: D::Db::text(row, 1)?,
        name: D::Db::text(row, 2)?,
        tick: D::time(row, 3)?,
        started_at: required(D::time(row, 4)?, "started_at")?,
        finished_at: D::time(row, 5)?,
        outcome: parse_outcome(&D::Db::text(row, 6)?)?,
        locked_by: D::Db::text(row, 7)?,
        fencing_token: D::Db::opt_int(row, 8)?,
        error: D::Db::opt_text(row, 9)?,
        attempt: D::Db::opt_i32(row, 10)?.map(|a| a.max(0).unsigned_abs()),
        requested_by: D::Db::opt_text(row, 11)?,
    })
}
