//! `migrate()`: the embedded migration files with the configured table's name, recorded in a
//! history table of their own, and the check that the table has every column.
//!
//! The runner and the migration list are here; `tests.rs` holds their unit tests.

use std::borrow::Cow;

use sqlx::AssertSqlSafe;
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};

use super::core::Core;
use super::dialect::Failure;
use super::errors::classify;
use super::preflight;
use super::quirks::Quirks;
use super::table::{TableName, is_java_shedlock, missing_columns};
use crate::error::{Backend, Error, Result};

/// Whether the schedules table has its `note` (migration 8), its `overlap` (migration 11), its
/// `rules` (migration 13) and its `deadlines` (migration 14) already.
async fn schedule_columns_there<D: Quirks>(core: &Core<D>) -> Result<(bool, bool, bool, bool)> {
    match core.columns_of("_schedules").await {
        Ok(found) => {
            let there = |name: &str| found.iter().any(|c| c.eq_ignore_ascii_case(name));
            Ok((
                there("note"),
                there("overlap"),
                there("rules"),
                there("deadlines"),
            ))
        }
        Err(e) => Err(core.fail("read the schedules' columns".into(), e).await),
    }
}

/// postgres's migration files, `(version, description, SQL)`: the dialect's `MIGRATIONS`.
pub(crate) const POSTGRES: &[(i64, &str, &str)] = &[
    (
        1,
        "create shedlock table",
        include_str!("../../../migrations/postgres/0001_create_shedlock.sql"),
    ),
    (
        2,
        "create shedlock_runs table",
        include_str!("../../../migrations/postgres/0002_create_shedlock_runs.sql"),
    ),
    (
        3,
        "create shedlock_tokens sequence",
        include_str!("../../../migrations/postgres/0003_create_shedlock_tokens.sql"),
    ),
    (
        4,
        "create shedlock_schedules table",
        include_str!("../../../migrations/postgres/0004_create_shedlock_schedules.sql"),
    ),
    (
        5,
        "index shedlock_runs by id",
        include_str!("../../../migrations/postgres/0005_index_shedlock_runs_by_id.sql"),
    ),
    (
        6,
        "index shedlock_runs by start",
        include_str!("../../../migrations/postgres/0006_index_shedlock_runs_by_start.sql"),
    ),
    (
        8,
        "add shedlock_schedules note",
        include_str!("../../../migrations/postgres/0008_add_shedlock_schedules_note.sql"),
    ),
    (
        9,
        "create shedlock_fleet table",
        include_str!("../../../migrations/postgres/0009_create_shedlock_fleet.sql"),
    ),
    (
        10,
        "create shedlock_fleet_parts table",
        include_str!("../../../migrations/postgres/0010_create_shedlock_fleet_parts.sql"),
    ),
    (
        11,
        "add shedlock_schedules overlap",
        include_str!("../../../migrations/postgres/0011_add_shedlock_schedules_overlap.sql"),
    ),
    (
        12,
        "create shedlock_backfills table",
        include_str!("../../../migrations/postgres/0012_create_shedlock_backfills.sql"),
    ),
    (
        13,
        "add shedlock_schedules rules",
        include_str!("../../../migrations/postgres/0013_add_shedlock_schedules_rules.sql"),
    ),
    (
        14,
        "add shedlock_schedules deadlines",
        include_str!("../../../migrations/postgres/0014_add_shedlock_schedules_deadlines.sql"),
    ),
];

/// mysql's migration files, `(version, description, SQL)`: the dialect's `MIGRATIONS`.
pub(crate) const MYSQL: &[(i64, &str, &str)] = &[
    (
        1,
        "create shedlock table",
        include_str!("../../../migrations/mysql/0001_create_shedlock.sql"),
    ),
    (
        2,
        "create shedlock_runs table",
        include_str!("../../../migrations/mysql/0002_create_shedlock_runs.sql"),
    ),
    (
        4,
        "create shedlock_schedules table",
        include_str!("../../../migrations/mysql/0004_create_shedlock_schedules.sql"),
    ),
    (
        5,
        "index shedlock_runs by id",
        include_str!("../../../migrations/mysql/0005_index_shedlock_runs_by_id.sql"),
    ),
    (
        6,
        "index shedlock_runs by start",
        include_str!("../../../migrations/mysql/0006_index_shedlock_runs_by_start.sql"),
    ),
    (
        7,
        "widen shedlock_schedules payload",
        include_str!("../../../migrations/mysql/0007_widen_shedlock_schedules_payload.sql"),
    ),
    (
        8,
        "add shedlock_schedules note",
        include_str!("../../../migrations/mysql/0008_add_shedlock_schedules_note.sql"),
    ),
    (
        9,
        "create shedlock_fleet table",
        include_str!("../../../migrations/mysql/0009_create_shedlock_fleet.sql"),
    ),
    (
        10,
        "create shedlock_fleet_parts table",
        include_str!("../../../migrations/mysql/0010_create_shedlock_fleet_parts.sql"),
    ),
    (
        11,
        "add shedlock_schedules overlap",
        include_str!("../../../migrations/mysql/0011_add_shedlock_schedules_overlap.sql"),
    ),
    (
        12,
        "create shedlock_backfills table",
        include_str!("../../../migrations/mysql/0012_create_shedlock_backfills.sql"),
    ),
    (
        13,
        "add shedlock_schedules rules",
        include_str!("../../../migrations/mysql/0013_add_shedlock_schedules_rules.sql"),
    ),
    (
        14,
        "add shedlock_schedules deadlines",
        include_str!("../../../migrations/mysql/0014_add_shedlock_schedules_deadlines.sql"),
    ),
];

/// sqlite's migration files, `(version, description, SQL)`: the dialect's `MIGRATIONS`.
pub(crate) const SQLITE: &[(i64, &str, &str)] = &[
    (
        1,
        "create shedlock table",
        include_str!("../../../migrations/sqlite/0001_create_shedlock.sql"),
    ),
    (
        2,
        "create shedlock_runs table",
        include_str!("../../../migrations/sqlite/0002_create_shedlock_runs.sql"),
    ),
    (
        3,
        "create shedlock_retired table",
        include_str!("../../../migrations/sqlite/0003_create_shedlock_retired.sql"),
    ),
    (
        4,
        "create shedlock_schedules table",
        include_str!("../../../migrations/sqlite/0004_create_shedlock_schedules.sql"),
    ),
    (
        5,
        "index shedlock_runs by id",
        include_str!("../../../migrations/sqlite/0005_index_shedlock_runs_by_id.sql"),
    ),
    (
        6,
        "index shedlock_runs by start",
        include_str!("../../../migrations/sqlite/0006_index_shedlock_runs_by_start.sql"),
    ),
    (
        8,
        "add shedlock_schedules note",
        include_str!("../../../migrations/sqlite/0008_add_shedlock_schedules_note.sql"),
    ),
    (
        9,
        "create shedlock_fleet table",
        include_str!("../../../migrations/sqlite/0009_create_shedlock_fleet.sql"),
    ),
    (
        10,
        "create shedlock_fleet_parts table",
        include_str!("../../../migrations/sqlite/0010_create_shedlock_fleet_parts.sql"),
    ),
    (
        11,
        "add shedlock_schedules overlap",
        include_str!("../../../migrations/sqlite/0011_add_shedlock_schedules_overlap.sql"),
    ),
    (
        12,
        "create shedlock_backfills table",
        include_str!("../../../migrations/sqlite/0012_create_shedlock_backfills.sql"),
    ),
    (
        13,
        "add shedlock_schedules rules",
        include_str!("../../../migrations/sqlite/0013_add_shedlock_schedules_rules.sql"),
    ),
    (
        14,
        "add shedlock_schedules deadlines",
        include_str!("../../../migrations/sqlite/0014_add_shedlock_schedules_deadlines.sql"),
    ),
];

/// The opening of every lock table migration; a test checks each file has it once.
const CREATE_TABLE_PREFIX: &str = "CREATE TABLE IF NOT EXISTS shedlock (";

/// A migration file's text for the configured table. The files name their objects after the
/// default table, `shedlock`: the table itself, `shedlock_runs`, `shedlock_tokens` (a
/// PostgreSQL sequence), `shedlock_retired` and the trigger `shedlock_retire` (SQLite),
/// `shedlock_schedules`, and indexes `shedlock_runs_by_*` and `shedlock_schedules_by_*`. Each
/// such word (outside `--` comments) becomes the configured
/// name, quoted and schema-qualified, except where the backend wants a bare name: PostgreSQL
/// index names (an index lives in its table's schema), and SQLite's `ON <table>` of an index or
/// trigger and a trigger's body, where names may not be qualified (the index or trigger name
/// carries the schema instead).
fn for_table(text: &str, table: &TableName, backend: Backend) -> String {
    rename(text, table, backend, true)
}

/// [`for_table`], with the names quoted or not (the unquoted text is what the checksum of a new
/// migration is taken from: for the default table, the file itself).
fn rename(text: &str, table: &TableName, backend: Backend, quoted: bool) -> String {
    let (schema, bare) = table.split();
    let name = |suffix: &str, qualified: bool| match (quoted, qualified) {
        (true, true) => table.quoted(backend, suffix),
        (true, false) => table.quoted_bare(backend, suffix),
        (false, true) => format!("{}{suffix}", table.as_str()),
        (false, false) => format!("{bare}{suffix}"),
    };
    let mut out = String::with_capacity(text.len() + 64);
    // Inside a trigger body: from a line that is `BEGIN` to a line that is `END;`.
    let mut in_body = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.starts_with("--") {
            out.push_str(line);
            continue;
        }
        if trimmed.eq_ignore_ascii_case("END;") {
            in_body = false;
        }
        let mut rest = line;
        while let Some(start) = rest.find("shedlock") {
            let before = &rest[..start];
            let end = rest[start..]
                .find(|c: char| !is_word(c))
                .map_or(rest.len(), |len| start + len);
            let word = &rest[start..end];
            out.push_str(before);
            rest = &rest[end..];
            if before.chars().next_back().is_some_and(is_word) {
                out.push_str(word); // part of a longer word
                continue;
            }
            let suffix = &word["shedlock".len()..];
            let after_on = before.trim_end().to_ascii_uppercase().ends_with(" ON")
                || before.trim_end().eq_ignore_ascii_case("ON");
            let replaced = if suffix.starts_with("_runs_by_")
                || suffix.starts_with("_schedules_by_")
                || suffix == "_retire"
            {
                // An index or trigger name: PostgreSQL keeps it in the table's schema, SQLite
                // wants the schema here rather than on the table.
                match (backend, schema) {
                    (Backend::Sqlite, Some(schema)) => format!("{schema}.{bare}{suffix}"),
                    _ => format!("{bare}{suffix}"),
                }
            } else {
                name(
                    suffix,
                    !(backend == Backend::Sqlite && (after_on || in_body)),
                )
            };
            out.push_str(&replaced);
        }
        out.push_str(rest);
        if trimmed.eq_ignore_ascii_case("BEGIN") {
            in_body = true;
        }
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The migrator behind `migrate()`: the dialect's migration files with the configured table
/// name, recorded in `_<table>_migrations` so it never meets the application's
/// `_sqlx_migrations` history.
///
/// The SQL that runs quotes the names ([`for_table`]); the checksum sqlx records and compares is
/// that of the same text with unquoted names: for versions 1 and 2 exactly the text the first
/// release embedded ([`legacy_for_table`]), and for the default table byte for byte the files
/// under `shedlock/migrations/`. So a database migrated by an earlier release is not refused as
/// "previously applied but modified", and the checksums match what `sqlx migrate run` records
/// for the files.
pub(crate) fn migrator(
    files: &[(i64, &'static str, &'static str)],
    table: &TableName,
    backend: Backend,
    present: Present,
) -> Migrator {
    let migrations = files
        .iter()
        .map(|(version, description, text)| {
            debug_assert!(text.contains(CREATE_TABLE_PREFIX) || *version > 1);
            let sql = |text: String| sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text));
            let recorded = if *version <= LAST_UNQUOTED_VERSION {
                legacy_for_table(text, table, backend)
            } else {
                rename(text, table, backend, false)
            };
            let checksum = Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                sql(recorded),
                false,
            )
            .checksum;
            let mut migration = Migration::new(
                *version,
                Cow::Borrowed(*description),
                MigrationType::Simple,
                sql(for_table(
                    &runnable(*version, text, present),
                    table,
                    backend,
                )),
                false,
            );
            migration.checksum = checksum;
            migration
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.dangerous_set_table_name(table.history_table());
    migrator
}

/// The migration that adds `attempt` and `requested_by` to the run history.
const RUN_COLUMNS_MIGRATION: i64 = 4;

/// The migration that indexes the run history by id (on MySQL one `ALTER TABLE`).
const RUN_INDEXES_MIGRATION: i64 = 5;

/// The index migration 5 adds, looked for to tell whether it ran already.
pub(crate) const RUN_INDEX_5: &str = "by_name_id";

/// The migration that indexes the run history by start time and by job name (on MySQL one
/// `ALTER TABLE`).
const RUN_START_INDEXES_MIGRATION: i64 = 6;

/// The index migration 6 adds, looked for to tell whether it ran already.
pub(crate) const RUN_INDEX_6: &str = "by_outcome_start";

/// The migration that adds the schedules' `note`.
const SCHEDULE_NOTE_MIGRATION: i64 = 8;

/// The migration that adds the schedules' `overlap`.
const SCHEDULE_OVERLAP_MIGRATION: i64 = 11;
/// The migration that adds the schedules' `rules`.
const SCHEDULE_RULES_MIGRATION: i64 = 13;
/// The migration that adds the schedules' `deadlines`.
const SCHEDULE_DEADLINES_MIGRATION: i64 = 14;

/// What the run history holds already, before `migrate()` runs: what a migration applied
/// outside this migrator's record (by `sqlx migrate run` from the files, or before the lock
/// table and its record were dropped) left there.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Present {
    /// `attempt` and `requested_by` (migration 4).
    pub(crate) run_columns: bool,
    /// The indexes by id (migration 5).
    pub(crate) run_indexes: bool,
    /// The indexes by start time and `other_job` (migration 6).
    pub(crate) run_start_indexes: bool,
    /// The schedules' `note` (migration 8).
    pub(crate) schedule_note: bool,
    /// The schedules' `overlap` (migration 11).
    pub(crate) schedule_overlap: bool,
    /// The schedules' `rules` (migration 13).
    pub(crate) schedule_rules: bool,
    /// The schedules' `deadlines` (migration 14).
    pub(crate) schedule_deadlines: bool,
}

/// The text `migrate()` runs for a migration file: the file, but without its
/// `ALTER TABLE shedlock_runs …` statements, which MySQL and SQLite cannot run twice, for
/// migration 4 where the run history has its columns already and migrations 5 and 6 where it
/// has their indexes (MySQL's `ADD INDEX` and `DROP INDEX`; the other dialects say `IF NOT EXISTS`),
/// and without migration 8's (11's) `ALTER TABLE shedlock_schedules` where the schedules have
/// their `note` (`overlap`) already. The checksum stays the file's.
fn runnable(version: i64, text: &str, present: Present) -> String {
    let (there, altered) = match version {
        RUN_COLUMNS_MIGRATION => (present.run_columns, "ALTER TABLE shedlock_runs"),
        RUN_INDEXES_MIGRATION => (present.run_indexes, "ALTER TABLE shedlock_runs"),
        RUN_START_INDEXES_MIGRATION => (present.run_start_indexes, "ALTER TABLE shedlock_runs"),
        SCHEDULE_NOTE_MIGRATION => (present.schedule_note, "ALTER TABLE shedlock_schedules"),
        SCHEDULE_OVERLAP_MIGRATION => (present.schedule_overlap, "ALTER TABLE shedlock_schedules"),
        SCHEDULE_RULES_MIGRATION => (present.schedule_rules, "ALTER TABLE shedlock_schedules"),
        SCHEDULE_DEADLINES_MIGRATION => {
            (present.schedule_deadlines, "ALTER TABLE shedlock_schedules")
        }
        _ => (false, ""),
    };
    if !there {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut in_alter = false;
    for line in text.split_inclusive('\n') {
        in_alter = in_alter || line.starts_with(altered);
        if !in_alter {
            out.push_str(line);
        }
        if line.trim_end().ends_with(';') {
            in_alter = false;
        }
    }
    out
}

/// The newest migration version the first release embedded, with unquoted names.
const LAST_UNQUOTED_VERSION: i64 = 2;

/// The text the first release embedded for a migration: the configured name put in place of
/// `shedlock` by four patterns, unquoted. Only its checksum is used (see [`migrator`]).
fn legacy_for_table(text: &str, table: &TableName, backend: Backend) -> String {
    let (schema, bare) = table.split();
    let runs = table.runs_table();
    let bare_runs = format!("{bare}_runs");
    let (index, on) = match (backend, schema) {
        (Backend::Sqlite, Some(schema)) => (format!("{schema}.{bare}_runs"), bare_runs.as_str()),
        _ => (bare_runs.clone(), runs.as_str()),
    };
    text.replace(
        CREATE_TABLE_PREFIX,
        &format!("CREATE TABLE IF NOT EXISTS {} (", table.as_str()),
    )
    .replace(
        "CREATE TABLE IF NOT EXISTS shedlock_runs (",
        &format!("CREATE TABLE IF NOT EXISTS {runs} ("),
    )
    .replace("EXISTS shedlock_runs_by_", &format!("EXISTS {index}_by_"))
    .replace("ON shedlock_runs (", &format!("ON {on} ("))
}

impl<D: Quirks> Core<D> {
    /// [`Quirks::shape_problem`], once per provider: a lock table whose shape would break a
    /// guarantee is refused, saying what to change.
    pub(crate) async fn check_shape(&self) -> Result<()> {
        self.shape_checked
            .get_or_try_init(|| async {
                let problem = match self.connection().await {
                    Ok(mut conn) => {
                        let problem = D::shape_problem(&mut conn, &self.settings.table).await;
                        self.give_back(conn, problem.is_ok());
                        problem
                    }
                    Err(e) => Err(e),
                };
                match problem {
                    Ok(None) => Ok(()),
                    Ok(Some(problem)) => Err(Error::IncompatibleTable {
                        backend: D::BACKEND,
                        table: self.settings.table.as_str().to_owned(),
                        problem,
                    }),
                    Err(e) => Err(self.fail("check the lock table's shape".into(), e).await),
                }
            })
            .await
            .map(drop)
    }

    /// Runs `migrator` on a connection of the provider's, as the dialect does it
    /// ([`Quirks::run_migrator`]).
    pub(crate) async fn run_migrator(&self, migrator: &Migrator) -> Result<(), MigrateError> {
        let mut conn = self.connection().await?;
        let outcome =
            D::run_migrator(&mut conn, &self.settings.table, &self.address, migrator).await;
        self.give_back(conn, outcome.is_ok());
        outcome
    }
}

/// `migrate()` for every backend:
///
/// 1. refuse, before anything is written, a table of the lock table's name (or of its run
///    history's) that shedlock did not create ([`preflight::refuse_foreign`]);
/// 2. clear a record of applied migrations whose lock table is gone
///    ([`preflight::forget_stale_history`]);
/// 3. run the embedded migrations, leaving alone versions a newer release applied (a rolling
///    upgrade: the previous release keeps starting on the next one's schema, and says so);
/// 4. check that the table has every column and the shape the dialect needs.
pub(crate) async fn migrate<D: Quirks>(core: &Core<D>) -> Result<()> {
    let table = &core.settings.table;
    preflight::refuse_foreign(core).await?;
    preflight::forget_stale_history(core).await?;
    let run_columns_there = match core.columns_of("_runs").await {
        Ok(found) => found.iter().any(|c| c.eq_ignore_ascii_case("attempt")),
        Err(e) => return Err(core.fail("read the run history's columns".into(), e).await),
    };
    let (run_indexes, run_start_indexes) = match core.indexes_of("_runs").await {
        Ok(found) => (
            found.iter().any(|i| i.ends_with(RUN_INDEX_5)),
            found.iter().any(|i| i.ends_with(RUN_INDEX_6)),
        ),
        Err(e) => return Err(core.fail("read the run history's indexes".into(), e).await),
    };
    let (schedule_note, schedule_overlap, schedule_rules, schedule_deadlines) =
        schedule_columns_there(core).await?;
    let present = Present {
        run_columns: run_columns_there,
        run_indexes,
        run_start_indexes,
        schedule_note,
        schedule_overlap,
        schedule_rules,
        schedule_deadlines,
    };
    let mut migrator = migrator(D::MIGRATIONS, table, D::BACKEND, present);
    // A version this release does not know was applied by a newer one: it promises to keep
    // the tables working for this one (docs/operations.md, "Upgrades").
    migrator.set_ignore_missing(true);
    let mut outcome = core.run_migrator(&migrator).await;
    // Instances migrating at once: another added the run history's columns (migration 4) or
    // the schedules' note or overlap (migrations 8 and 11) between the read above and this one's migration
    // ("duplicate column name"): read them again and migrate without them, a few times (with
    // many instances starting together, another may win the next race too).
    // On MySQL, a migration another instance left part-way (its record says so) was forgotten by
    // `run_migrator` and is run again the same way.
    for _ in 0..5 {
        let lost_race = matches!(&outcome, Err(MigrateError::ExecuteMigration(e, 4 | SCHEDULE_NOTE_MIGRATION | SCHEDULE_OVERLAP_MIGRATION | SCHEDULE_RULES_MIGRATION | SCHEDULE_DEADLINES_MIGRATION))
            if e.to_string().to_ascii_lowercase().contains("duplicate column"));
        let part_way =
            D::BACKEND == Backend::MySql && matches!(&outcome, Err(MigrateError::Dirty(_)));
        if !lost_race && !part_way {
            break;
        }
        let there = match core.columns_of("_runs").await {
            Ok(found) => found.iter().any(|c| c.eq_ignore_ascii_case("attempt")),
            Err(e) => return Err(core.fail("read the run history's columns".into(), e).await),
        };
        let (schedule_note, schedule_overlap, schedule_rules, schedule_deadlines) =
            schedule_columns_there(core).await?;
        let present = Present {
            run_columns: there,
            schedule_note,
            schedule_overlap,
            schedule_rules,
            schedule_deadlines,
            ..present
        };
        let mut again = self::migrator(D::MIGRATIONS, table, D::BACKEND, present);
        again.set_ignore_missing(true);
        outcome = core.run_migrator(&again).await;
    }
    if let Err(source) = outcome {
        return Err(match source {
            MigrateError::Execute(e) => core.fail("migrate".into(), e).await,
            // A migration that failed on a table made by something else (a column it reads is
            // missing) or an unreachable server is reported as such, by name.
            MigrateError::ExecuteMigration(e, version)
                if classify(&e, D::failure) != Failure::Other =>
            {
                core.fail(format!("apply migration {version}"), e).await
            }
            source => Error::Migrate {
                backend: D::BACKEND,
                table: table.as_str().to_owned(),
                source,
            },
        });
    }
    let known = D::MIGRATIONS.iter().map(|(v, ..)| *v).max().unwrap_or(0);
    let newer: Vec<i64> = preflight::applied_versions(core)
        .await?
        .into_iter()
        .filter(|v| *v > known)
        .collect();
    if !newer.is_empty() {
        tracing::info!(
            table = table.as_str(),
            ?newer,
            known,
            "the schema is newer than this release: migration(s) {newer:?} were applied by a newer release; this instance works on it"
        );
    }
    match core.found_columns().await {
        Ok(found) => match missing_columns(&found) {
            columns if columns.is_empty() => core.check_shape().await,
            columns => Err(Error::MissingColumns {
                backend: D::BACKEND,
                table: table.as_str().to_owned(),
                columns,
                java_shedlock: is_java_shedlock(&found),
                found,
            }),
        },
        Err(e) => Err(core.fail("check the lock table's columns".into(), e).await),
    }
}

#[cfg(test)]
mod tests;
