//! Where a multi-process test runs its `shedlock-harness` processes: a [`Target`] on a unique
//! table (key prefix) and a temporary directory for the processes' logs (and the SQLite files),
//! with the helpers the fleet tests share: start a process, wait until every process applied a
//! schedule version, read one job's runs, count the locks still held, drop the tables.

use std::collections::BTreeMap;
use std::time::Duration;

use shedlock::{Backend, LockAdmin};
use sqlx::{AssertSqlSafe, Executor};

use crate::fleet::{Instance, Run, Target, spawn};
use crate::redis_server::delete_prefix;
use crate::{host_port, postgres_url, redis_url, skipped, unique_name};

/// How long [`Place::applied_by_all`] waits for a change to reach every process.
pub const APPLY_DEADLINE: Duration = Duration::from_secs(30);

/// A fresh target per test: a unique table (and for SQLite a fresh file in `logs`).
#[derive(Debug)]
pub struct Place {
    pub target: Target,
    /// The processes' logs (`<name>.log`), the SQLite lock file and Redis's results file.
    pub logs: tempfile::TempDir,
}

impl Place {
    /// A place on `backend`'s test server (SQLite: a file of its own), its table named
    /// `<prefix>_…`; `None` when the backend is skipped ([`skipped`]). `harness` is the
    /// `shedlock-harness` binary: `env!("CARGO_BIN_EXE_shedlock-harness")` in a test.
    pub fn new(backend: Backend, prefix: &str, harness: &'static str) -> Option<Place> {
        if skipped(backend) {
            return None;
        }
        let logs = tempfile::tempdir().unwrap();
        let url = match backend {
            Backend::Postgres => postgres_url(),
            Backend::MySql => crate::mysql_url(),
            Backend::Redis => redis_url(),
            shedlock_etcd::BACKEND => crate::etcd_url(),
            _ => logs.path().join("locks.db").display().to_string(),
        };
        Some(Place::at(backend, url, logs, prefix, harness))
    }

    /// A place on the lock database at `url`, with a unique table (key prefix) named
    /// `<prefix>_…`; Redis's results go to an SQLite file in `logs`.
    pub fn at(
        backend: Backend,
        url: String,
        logs: tempfile::TempDir,
        prefix: &str,
        harness: &'static str,
    ) -> Place {
        let results = (backend == Backend::Redis)
            .then(|| logs.path().join("results.db").display().to_string());
        let target = Target {
            backend,
            url,
            table: unique_name(prefix),
            results,
            harness,
        };
        Place { target, logs }
    }

    /// Starts a harness process named `name` with extra arguments; waits until it is ready.
    pub async fn spawn(&self, name: &str, extra: &[&str]) -> Instance {
        spawn(&self.target, name, extra, self.logs.path()).await
    }

    /// Runs the `shedlock` tool on the place's store and table: its exit code, stdout and
    /// stderr.
    pub async fn shedlock_cli(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let out = tokio::process::Command::new(crate::shedlock_binary())
            .args([
                "--database-url",
                &self.target.url,
                "--table",
                &self.target.table,
            ])
            .args(args)
            .env_remove("DATABASE_URL")
            .env_remove("SHEDLOCK_TABLE")
            .output()
            .await
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    }

    /// Drops every table the provider and the harness made (Redis, etcd: deletes the prefix's
    /// keys).
    pub async fn cleanup(&self) {
        let t = &self.target.table;
        let drop = format!(
            "DROP TABLE IF EXISTS {t}, _{t}_migrations, {t}_runs, {t}_schedules, {t}_results, {t}_fenced, {t}_terms, {t}_applied, {t}_work, {t}_fleet, {t}_fleet_parts, {t}_backfills"
        );
        match self.target.backend {
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self.target.url).await.unwrap();
                let _ = pool.execute(AssertSqlSafe(drop)).await;
            }
            Backend::MySql => {
                let pool = sqlx::MySqlPool::connect(&self.target.url).await.unwrap();
                let _ = pool.execute(AssertSqlSafe(drop)).await;
            }
            Backend::Redis => delete_prefix(&host_port(&self.target.url, 6379), t),
            shedlock_etcd::BACKEND => {
                let client = etcd_client::Client::connect([self.target.url.as_str()], None).await;
                if let Ok(mut client) = client {
                    let options = etcd_client::DeleteOptions::new().with_prefix();
                    let _ = client.delete(format!("{t}/"), Some(options)).await;
                }
            }
            _ => {}
        }
    }

    /// Waits (up to [`APPLY_DEADLINE`]) until each of `processes` applied `version` (or a later
    /// one), as `<table>_applied` says; returns when the last of them did (ms, this machine's
    /// clock).
    pub async fn applied_by_all(&self, processes: usize, version: i64) -> i64 {
        let deadline = tokio::time::Instant::now() + APPLY_DEADLINE;
        loop {
            let rows = self.target.applied().await;
            let mut latest: BTreeMap<&str, i64> = BTreeMap::new();
            for (instance, v, at) in &rows {
                if *v >= version {
                    latest.entry(instance.as_str()).or_insert(*at);
                }
            }
            if latest.len() == processes {
                return latest.values().copied().max().unwrap();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{} of {processes} processes applied version {version} within {APPLY_DEADLINE:?}: {rows:?}",
                latest.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every recorded run of `job`.
    pub async fn runs_of(&self, job: &str) -> Vec<Run> {
        self.target
            .runs()
            .await
            .into_iter()
            .filter(|run| run.job == job)
            .collect()
    }

    /// Lock rows still held now (after every process stopped, there should be none).
    pub async fn held_rows(&self) -> i64 {
        let t = &self.target.table;
        match self.target.backend {
            Backend::Redis => {
                let provider = self.target.redis_provider().await;
                let locks = provider.locks().await.unwrap();
                locks.iter().filter(|l| l.is_held()).count() as i64
            }
            Backend::Postgres => {
                let pool = sqlx::PgPool::connect(&self.target.url).await.unwrap();
                sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {t} WHERE locked_until > clock_timestamp()"
                )))
                .fetch_one(&pool)
                .await
                .unwrap()
            }
            Backend::MySql => {
                let pool = sqlx::MySqlPool::connect(&self.target.url).await.unwrap();
                sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {t} WHERE locked_until > UTC_TIMESTAMP(6)"
                )))
                .fetch_one(&pool)
                .await
                .unwrap()
            }
            _ => {
                let pool = crate::sqlite_pool(std::path::Path::new(&self.target.url), 1).await;
                sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {t} WHERE locked_until > CAST(unixepoch('subsec') * 1000 AS INTEGER)"
                )))
                .fetch_one(&pool)
                .await
                .unwrap()
            }
        }
    }
}
