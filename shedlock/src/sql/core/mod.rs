//! What a [`SqlLockProvider`](crate::SqlLockProvider) holds ([`Core`]) and every operation
//! on it, written once: each runs one statement of its dialect ([`Hooks::SQL`]) on a connection
//! of the provider's pool, binds its parameters by meaning, retries a lost serialization race
//! and reports a failure by name.
//!
//! `history.rs` holds the run history's operations.

mod history;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::Pool;
use tokio::time::Instant;

use super::dialect::{Acquired, Answer, Hooks, Param, Statements};
use super::driver::{Driver, Value};
use super::exec::Prepared;
use super::quirks::Quirks;
use super::stash::{Lent, Stash};
use super::statement;
use super::table::TableName;
use crate::config::LockConfiguration;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::history::{LockRows, LockState, UnreadableRow};
use crate::lease::{Lease, Releases};
use crate::settings::ProviderSettings;

/// An SQL provider's settings: the shared ones, the table name checked, and how many
/// connections it keeps between statements.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// `locked_by`, the clock, keep-alive and the tick tolerance, as the builder checked them.
    pub(crate) common: ProviderSettings,
    pub(crate) table: TableName,
    /// Connections kept checked out between statements (`hold_connections`).
    pub(crate) hold_connections: usize,
    /// Whether every statement (not only the lock statements) uses the kept connections: the
    /// provider's own pool.
    pub(crate) hold_all: bool,
}

impl Settings {
    /// `common` with its table name checked as `D`'s.
    pub(crate) fn new<D: Hooks>(
        common: ProviderSettings,
        hold_connections: usize,
        hold_all: bool,
    ) -> Result<Self> {
        Ok(Self {
            table: TableName::new(&common.table, D::BACKEND)?,
            common,
            hold_connections,
            hold_all,
        })
    }

    /// The application's time in application clock mode, else `None`.
    pub(crate) fn app_now(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.common.app_now()
    }
}

/// What a provider holds: its pool, settings and statements, shared with its guards.
#[allow(unreachable_pub)] // named by `Hooks`, which is sealed
pub struct Core<D: Hooks> {
    pub(crate) pool: Pool<D::Db>,
    pub(crate) settings: Settings,
    pub(crate) address: String,
    pub(super) sql: Rendered,
    pub(super) stash: Stash<D::Db>,
    /// Set once the table's shape was checked ([`Hooks::check_shape`]).
    pub(super) shape_checked: tokio::sync::OnceCell<()>,
    /// Set once the server turned out not to know the batch acquire
    /// ([`Hooks::batch_unsupported`]): locks are then taken one by one.
    batch_unsupported: std::sync::atomic::AtomicBool,
    /// Unlocks grouped into one statement ([`Statements::unlock_many`]).
    ///
    /// [`Statements::unlock_many`]: super::dialect::Statements::unlock_many
    pub(super) releases: Releases,
}

impl<D: Hooks> fmt::Debug for Core<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Core")
            .field("backend", &D::BACKEND)
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

/// Every statement rendered for this provider's table and clock.
pub(super) type Rendered = Statements<Prepared>;

/// Renders every statement of `D` for `settings`' table and clock.
fn render<D: Hooks>(settings: &Settings) -> Rendered {
    let table = &settings.table;
    let app = settings.app_now().is_some();
    D::SQL.map(|st, lease| {
        if lease {
            // The lock statements read the clock that decides expiry: the database's, or the
            // application's, bound where the statement says (`Param::Now`).
            let at = st.binds.iter().position(|p| *p == Param::Now);
            let (now, grant_now) = super::dialect::clock::<D>(at.filter(|_| app).map(|i| i + 1));
            let text = st.sql.replace("{grant_now}", &grant_now);
            Prepared::new(statement::<D>(&text, table, &now), st, true)
        } else {
            // The operator's and the history's statements always read the database's clock.
            Prepared::new(statement::<D>(st.sql, table, D::NOW), st, false)
        }
    })
}

/// One statement's run: `$run` (a [`Driver`] function) of `$prepared`, its parameters from
/// the match arms, the application's clock where the statement reads it.
macro_rules! run {
    ($core:expr, $prepared:expr, $run:ident, |$param:ident| $values:expr) => {{
        let prepared = &$prepared;
        let app_now = $core.settings.app_now();
        $core
            .stash
            .run(
                &$core.pool,
                prepared.held,
                || prepared.args::<D>(app_now, |$param| $values),
                D::Db::$run,
                &prepared.sql,
            )
            .await
    }};
}
pub(super) use run;

impl<D: Quirks> Core<D> {
    pub(crate) fn new(pool: Pool<D::Db>, settings: Settings) -> Self {
        Self {
            address: D::address(&pool.connect_options()),
            sql: render::<D>(&settings),
            stash: Stash::new(
                settings.hold_connections,
                settings.hold_all,
                D::connection_lost,
                D::READ_COMMITTED.map(|(_, begin)| begin),
            ),
            shape_checked: tokio::sync::OnceCell::new(),
            batch_unsupported: std::sync::atomic::AtomicBool::new(false),
            releases: Releases::default(),
            pool,
            settings,
        }
    }

    /// A connection for statements that do not go through [`run!`] (the migrator, the shape
    /// check): a held one first, so none waits for a connection idle in the stash; checked with a
    /// ping, so a connection the server closed is replaced rather than failing them. Give it
    /// back with [`Core::give_back`].
    pub(crate) async fn connection(&self) -> Result<Lent<'_, D::Db>, sqlx::Error> {
        self.stash.live(&self.pool, true).await
    }

    /// Returns a connection from [`Core::connection`]: kept for the next statement after
    /// success, else to the pool, which checks it.
    pub(crate) fn give_back(&self, conn: Lent<'_, D::Db>, succeeded: bool) {
        if !succeeded {
            conn.give_to_pool();
        }
    }

    /// Gives the held connections back and closes the pool.
    pub(crate) async fn close(&self) {
        self.stash.drain();
        self.pool.close().await;
    }

    /// Statements this provider sent (each attempt of a retried one counts).
    #[cfg(feature = "test-util")]
    pub(crate) fn statements_sent(&self) -> u64 {
        self.stash.sent()
    }

    pub(crate) async fn acquire(
        self: &Arc<Self>,
        config: &LockConfiguration,
    ) -> Result<Option<LockGuard>> {
        self.check_shape().await?;
        let sent_at = Instant::now();
        let tolerance = self.settings.common.tick_tolerance;
        let values = |param| -> Option<Value<'_>> {
            Some(match param {
                Param::Name => config.name().into(),
                Param::AtMost => config.lock_at_most_for().into(),
                Param::LockedBy => self.settings.common.locked_by.as_str().into(),
                Param::Tick => config.tick().into(),
                Param::Tolerance => tolerance.into(),
                _ => return None,
            })
        };
        let answer = if D::RETURNING {
            run!(self, self.sql.acquire, fetch_optional, |p| values(p)).map(Answer::Row)
        } else {
            run!(self, self.sql.acquire, execute, |p| values(p)).map(Answer::Done)
        };
        let acquired = answer.and_then(|a| D::acquired(a, config.tick(), self.settings.app_now()));
        match acquired {
            Ok(acquired) => self.decide(config, acquired, sent_at),
            Err(e) => Err(self
                .fail(format!("acquire lock {:?}", config.name()), e)
                .await),
        }
    }

    /// What an acquire answers ([`Acquired::into_guard`]), with this provider as the lease.
    fn decide(
        self: &Arc<Self>,
        config: &LockConfiguration,
        acquired: Acquired,
        sent_at: Instant,
    ) -> Result<Option<LockGuard>> {
        let lease = || Arc::clone(self) as Arc<dyn Lease>;
        acquired.into_guard(config, lease, sent_at, self.settings.common.tick_tolerance)
    }

    /// Takes many locks in one statement ([`Statements::acquire_many`]): one answer per config,
    /// in order. A name given twice is claimed once in the statement and then, for its later
    /// configs, one by one (a statement cannot take one row twice).
    ///
    /// [`Statements::acquire_many`]: super::dialect::Statements::acquire_many
    pub(crate) async fn acquire_many(
        self: &Arc<Self>,
        configs: &[LockConfiguration],
    ) -> Result<Vec<Result<Option<LockGuard>>>> {
        use std::sync::atomic::Ordering;
        if configs.len() < 2 || self.batch_unsupported.load(Ordering::Relaxed) {
            let mut answers = Vec::with_capacity(configs.len());
            for config in configs {
                answers.push(self.acquire(config).await);
            }
            return Ok(answers);
        }
        self.check_shape().await?;
        let mut seen = std::collections::HashSet::new();
        let (batch, again): (Vec<usize>, Vec<usize>) =
            (0..configs.len()).partition(|&i| seen.insert(configs[i].name()));
        let items: Vec<_> = batch
            .iter()
            .map(|&i| {
                let config = &configs[i];
                (
                    config.name(),
                    D::batch_duration(config.lock_at_most_for()),
                    config.tick().map(D::batch_time),
                )
            })
            .collect();
        let json = match serde_json::to_string(&items) {
            Ok(json) => json,
            Err(e) => {
                let what = format!("write {} lock names as JSON", batch.len());
                return Err(self.fail(what, sqlx::Error::Encode(Box::new(e))).await);
            }
        };
        let sent_at = Instant::now();
        let tolerance = self.settings.common.tick_tolerance;
        let rows = run!(self, self.sql.acquire_many, fetch_all, |p| match p {
            Param::Batch => Some(json.as_str().into()),
            Param::LockedBy => Some(self.settings.common.locked_by.as_str().into()),
            Param::Tolerance => Some(tolerance.into()),
            _ => None,
        });
        let rows = match rows {
            Err(e) if D::batch_unsupported(&e) => {
                tracing::info!(backend = %D::BACKEND, error = %e,
                    "the server has no batch acquire (no RETURNING): taking locks one by one");
                self.batch_unsupported.store(true, Ordering::Relaxed);
                return Box::pin(self.acquire_many(configs)).await;
            }
            Err(e) => {
                let what = format!("claim {} locks in one statement", batch.len());
                return Err(self.fail(what, e).await);
            }
            Ok(rows) => rows,
        };
        let mut reported = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let read = (|| -> Result<_, sqlx::Error> {
                Ok((
                    D::Db::text(row, 0)?,
                    D::Db::opt_int(row, 1)?,
                    D::Db::opt_int(row, 2)?,
                ))
            })();
            match read {
                Ok((name, token, ahead_us)) => {
                    let acquired = match token {
                        Some(token) if token > 0 => Acquired::Token(token),
                        _ => Acquired::NotTaken { ahead_us },
                    };
                    reported.insert(name, acquired);
                }
                Err(e) => {
                    let what = format!("read the answer of a claim of {} locks", batch.len());
                    return Err(self.fail(what, e).await);
                }
            }
        }
        let app_now = self.settings.app_now();
        let mut answers: Vec<Option<Result<Option<LockGuard>>>> =
            configs.iter().map(|_| None).collect();
        for &i in &batch {
            let config = &configs[i];
            let acquired = reported
                .remove(config.name())
                .unwrap_or_else(|| D::batch_missing(config.tick(), app_now));
            answers[i] = Some(self.decide(config, acquired, sent_at));
        }
        for &i in &again {
            answers[i] = Some(self.acquire(&configs[i]).await);
        }
        Ok(answers.into_iter().flatten().collect())
    }

    pub(crate) async fn is_held(&self, name: &str, token: i64) -> Result<bool> {
        let row = run!(self, self.sql.held, fetch_optional, |p| match p {
            Param::Name => Some(name.into()),
            Param::Token => Some(token.into()),
            _ => None,
        });
        match row.and_then(|row| row.map_or(Ok(0), |row| D::Db::int(&row, 0))) {
            Ok(count) => Ok(count > 0),
            Err(e) => Err(self.fail(format!("check lock {name:?}"), e).await),
        }
    }

    /// The time by the clock that decides expiry.
    pub(crate) async fn now(&self) -> Result<DateTime<Utc>> {
        if let Some(now) = self.settings.app_now() {
            return Ok(now);
        }
        let row = run!(self, self.sql.clock, fetch_optional, |_p| None);
        let now = row.and_then(|row| match row {
            Some(row) => required(D::time(&row, 0)?, "now"),
            None => Err(sqlx::Error::RowNotFound),
        });
        match now {
            Ok(now) => Ok(now),
            Err(e) => Err(self.fail("read the database clock".into(), e).await),
        }
    }

    /// The lock table's column names.
    pub(crate) async fn found_columns(&self) -> Result<Vec<String>, sqlx::Error> {
        let (schema, table) = self.settings.table.split();
        self.columns(schema, table).await
    }

    /// The column names of table `name` in `schema` (the connection's own without one); empty
    /// when there is no such table.
    pub(crate) async fn columns(
        &self,
        schema: Option<&str>,
        name: &str,
    ) -> Result<Vec<String>, sqlx::Error> {
        let (schema, name) = (schema.map(D::catalogue_name), D::catalogue_name(name));
        let rows = run!(self, self.sql.columns, fetch_all, |p| match p {
            Param::Schema => Some(schema.as_deref().into()),
            Param::Table => Some(name.as_str().into()),
            _ => None,
        })?;
        rows.iter().map(|row| D::Db::text(row, 0)).collect()
    }

    /// Every lock, or those of `names` (a JSON array in [`Param::Names`]): the rows read, and
    /// those with a value that cannot be read (a time of `infinity` or out of chrono's range, a
    /// zero date), each named with its column, never a panic and never a failure of the others.
    pub(crate) async fn lock_rows(&self, names: Option<&[String]>) -> Result<LockRows> {
        let names = names.map(|names| {
            let mut names: Vec<&String> = names.iter().collect();
            names.sort();
            names.dedup();
            names
        });
        let json = match names.map(|names| serde_json::to_string(&names)).transpose() {
            Ok(json) => json,
            Err(e) => {
                let what = "write lock names as JSON".to_owned();
                return Err(self.fail(what, sqlx::Error::Encode(Box::new(e))).await);
            }
        };
        let rows = run!(self, self.sql.locks, fetch_all, |p| match p {
            Param::Names => Some(json.as_deref().into()),
            _ => None,
        });
        let rows = match rows {
            Ok(rows) => rows,
            Err(e) => return Err(self.fail("list locks".into(), e).await),
        };
        let (mut locks, mut unreadable) = (Vec::with_capacity(rows.len()), Vec::new());
        for row in &rows {
            let name = match D::Db::text(row, 0) {
                Ok(name) => name,
                Err(e) => return Err(self.fail("list locks".into(), e).await),
            };
            let column = |column: &str, e: sqlx::Error| match e {
                sqlx::Error::Decode(source) => format!("column `{column}` holds {source}"),
                e => format!("column `{column}` cannot be read: {e}"),
            };
            let time = |index: usize, name: &str| {
                D::time(row, index)
                    .map_err(|e| column(name, e))
                    .and_then(|t| {
                        t.ok_or_else(|| format!("column `{name}` is null{}", D::NULL_TIME_HINT))
                    })
            };
            let state = (|| -> Result<LockState, String> {
                Ok(LockState {
                    locked_until: time(1, "locked_until")?,
                    locked_at: time(2, "locked_at")?,
                    locked_by: D::Db::text(row, 3).map_err(|e| column("locked_by", e))?,
                    fencing_token: D::Db::int(row, 4).map_err(|e| column("fencing_token", e))?,
                    last_tick: D::time(row, 5).map_err(|e| column("last_tick", e))?,
                    read_at: time(6, "the database's now")?,
                    name: name.clone(),
                })
            })();
            match state {
                Ok(state) => locks.push(state),
                Err(problem) => unreadable.push(UnreadableRow::new(name, problem)),
            }
        }
        Ok(LockRows::new(locks, unreadable))
    }

    /// Where the locks are, for messages: ``table `shedlock` ``.
    pub(crate) fn location(&self) -> String {
        format!("table `{}`", self.settings.table.as_str())
    }

    pub(crate) async fn force_release(&self, name: &str, token: i64) -> Result<bool> {
        let done = run!(self, self.sql.release, execute, |p| match p {
            Param::Name => Some(name.into()),
            Param::Token => Some(token.into()),
            _ => None,
        });
        match done {
            Ok(done) => Ok(D::Db::rows_affected(&done) == 1),
            Err(e) => Err(self.fail(format!("release lock {name:?}"), e).await),
        }
    }
}

/// A time read from a column that is never null.
fn required(time: Option<DateTime<Utc>>, column: &str) -> Result<DateTime<Utc>, sqlx::Error> {
    time.ok_or_else(|| sqlx::Error::Decode(format!("`{column}` is null").into()))
}
