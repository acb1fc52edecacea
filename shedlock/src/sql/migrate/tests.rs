//! Unit tests of the migration list and the runner: the files' prefix, the configured table's
//! name and its quoting, the migrator's own history, checksums, and what migrations 4 and 5
//! leave out where their columns and indexes are there.

use super::*;
use crate::sql::table::COLUMNS;

#[test]
fn every_migration_file_starts_with_the_replaceable_prefix() {
    for text in [
        include_str!("../../../migrations/postgres/0001_create_shedlock.sql"),
        include_str!("../../../migrations/mysql/0001_create_shedlock.sql"),
        include_str!("../../../migrations/sqlite/0001_create_shedlock.sql"),
    ] {
        assert_eq!(text.matches(CREATE_TABLE_PREFIX).count(), 1, "{text}");
        for column in COLUMNS {
            assert!(text.contains(column), "{column} missing from {text}");
        }
    }
}

#[test]
fn run_history_migrations_follow_the_configured_table() {
    let files = [
        (
            Backend::Postgres,
            include_str!("../../../migrations/postgres/0002_create_shedlock_runs.sql"),
        ),
        (
            Backend::MySql,
            include_str!("../../../migrations/mysql/0002_create_shedlock_runs.sql"),
        ),
        (
            Backend::Sqlite,
            include_str!("../../../migrations/sqlite/0002_create_shedlock_runs.sql"),
        ),
    ];
    for (backend, text) in files {
        let text: String = text
            .lines()
            .filter(|line| !line.starts_with("--"))
            .map(|line| format!("{line}\n"))
            .collect();
        let text = text.as_str();
        let q = |name: &str| match backend {
            Backend::MySql => format!("`{name}`"),
            _ => format!("\"{name}\""),
        };
        let plain = for_table(
            text,
            &TableName::new("ops_locks", Backend::Postgres).unwrap(),
            backend,
        );
        assert!(!plain.contains("shedlock"), "{backend}: {plain}");
        assert!(
            plain.contains(&format!(
                "CREATE TABLE IF NOT EXISTS {} (",
                q("ops_locks_runs")
            )),
            "{plain}"
        );
        let qualified = for_table(
            text,
            &TableName::new("ops.locks", Backend::Postgres).unwrap(),
            backend,
        );
        assert!(!qualified.contains("shedlock"), "{backend}: {qualified}");
        let runs = format!("{}.{}", q("ops"), q("locks_runs"));
        assert!(qualified.contains(&format!("CREATE TABLE IF NOT EXISTS {runs} (")));
        match backend {
            Backend::Postgres => assert!(
                qualified.contains(&format!("EXISTS locks_runs_by_name ON {runs} (")),
                "{qualified}"
            ),
            Backend::Sqlite => assert!(
                qualified.contains(&format!(
                    "EXISTS ops.locks_runs_by_name ON {} (",
                    q("locks_runs")
                )),
                "{qualified}"
            ),
            Backend::MySql => assert!(qualified.contains("INDEX by_name"), "{qualified}"),
            Backend::Redis | Backend::Other(_) => {
                unreachable!("only the SQL backends are listed")
            }
        }
    }
}

#[test]
fn migrator_uses_the_configured_table_and_its_own_history() {
    let table = TableName::new("ops_locks", Backend::Postgres).unwrap();
    let migrator = migrator(
        &[(1, "create", "CREATE TABLE IF NOT EXISTS shedlock (x INT)")],
        &table,
        Backend::Postgres,
        Present::default(),
    );
    assert_eq!(migrator.table_name, "_ops_locks_migrations");
    let first = migrator.iter().next().unwrap();
    assert_eq!(
        first.sql.as_str(),
        "CREATE TABLE IF NOT EXISTS \"ops_locks\" (x INT)"
    );
}

#[test]
fn checksums_are_those_of_the_files_for_the_default_table() {
    for (backend, dir) in [
        (Backend::Postgres, "postgres"),
        (Backend::MySql, "mysql"),
        (Backend::Sqlite, "sqlite"),
    ] {
        let files = match backend {
            Backend::Postgres => POSTGRES,
            Backend::MySql => MYSQL,
            _ => SQLITE,
        };
        let ours = migrator(
            files,
            &TableName::new("shedlock", Backend::Postgres).unwrap(),
            backend,
            Present::default(),
        );
        for (migration, (version, _, text)) in ours.iter().zip(files) {
            let plain = Migration::new(
                *version,
                Cow::Borrowed("plain"),
                MigrationType::Simple,
                sqlx::SqlSafeStr::into_sql_str(AssertSqlSafe(text.to_string())),
                false,
            );
            assert_eq!(
                migration.checksum, plain.checksum,
                "{dir} {version}: the checksum sqlx migrate run records for the file"
            );
        }
    }
}

#[test]
fn migration_5_leaves_out_mysqls_alter_where_the_indexes_are_there() {
    let indexes = Present {
        run_indexes: true,
        ..Present::default()
    };
    let (_, _, mysql) = MYSQL[3];
    assert!(mysql.contains("ALTER TABLE shedlock_runs"));
    assert_eq!(runnable(5, mysql, Present::default()), mysql);
    assert!(!runnable(5, mysql, indexes).contains("ALTER"));
    for (_, _, text) in [POSTGRES[4], SQLITE[4]] {
        assert!(text.contains(&format!("runs_{RUN_INDEX_5} ON shedlock_runs (name, id)")));
        assert_eq!(
            runnable(5, text, indexes),
            text,
            "IF NOT EXISTS: runs again"
        );
    }
    assert!(mysql.contains(&format!("ADD INDEX {RUN_INDEX_5} (name, id)")));
}

#[test]
fn migration_6_leaves_out_mysqls_alter_where_the_indexes_are_there() {
    let indexes = Present {
        run_start_indexes: true,
        ..Present::default()
    };
    let (version, _, mysql) = MYSQL[4];
    assert_eq!(version, 6);
    assert!(mysql.contains(&format!("ADD INDEX {RUN_INDEX_6} (outcome, started_at)")));
    assert_eq!(runnable(6, mysql, Present::default()), mysql);
    // Migration 5's indexes alone do not leave out migration 6.
    let five = Present {
        run_indexes: true,
        ..Present::default()
    };
    assert_eq!(runnable(6, mysql, five), mysql);
    assert!(!runnable(6, mysql, indexes).contains("ALTER"));
    for (_, _, text) in [POSTGRES[5], SQLITE[5]] {
        assert!(text.contains(&format!(
            "runs_{RUN_INDEX_6} ON shedlock_runs (outcome, started_at)"
        )));
        assert_eq!(
            runnable(6, text, indexes),
            text,
            "IF NOT EXISTS: runs again"
        );
    }
}

#[test]
fn migration_4_leaves_out_the_run_columns_where_they_are_there() {
    for (_, _, text) in [POSTGRES[3], MYSQL[2], SQLITE[3]] {
        assert_eq!(runnable(4, text, Present::default()), text);
        let columns = Present {
            run_columns: true,
            ..Present::default()
        };
        assert_eq!(
            runnable(
                4,
                text,
                Present {
                    run_indexes: true,
                    ..Present::default()
                }
            ),
            text
        );
        let without = runnable(4, text, columns);
        assert!(
            !without.contains("ALTER") && !without.contains("requested_by"),
            "{without}"
        );
        assert!(without.contains("CREATE TABLE IF NOT EXISTS shedlock_schedules ("));
        assert!(
            without.contains("shedlock_schedules_by_version") || !text.contains("CREATE INDEX")
        );
        let renamed = for_table(
            text,
            &TableName::new("ops.jobs", Backend::Postgres).unwrap(),
            Backend::Postgres,
        );
        let code: Vec<&str> = renamed.lines().filter(|l| !l.starts_with("--")).collect();
        assert!(!code.concat().contains("shedlock"), "{renamed}");
        assert!(
            renamed.contains("EXISTS \"ops\".\"jobs_schedules\" ("),
            "{renamed}"
        );
    }
}

#[test]
fn reserved_words_and_schemas_are_quoted_in_migration_3() {
    let pg = include_str!("../../../migrations/postgres/0003_create_shedlock_tokens.sql");
    let text = for_table(
        pg,
        &TableName::new("Ops.User", Backend::Postgres).unwrap(),
        Backend::Postgres,
    );
    assert!(
        text.contains("CREATE SEQUENCE IF NOT EXISTS \"ops\".\"user_tokens\" AS BIGINT"),
        "{text}"
    );
    assert!(text.contains("setval('\"ops\".\"user_tokens\"'"), "{text}");
    assert!(text.contains("FROM \"ops\".\"user\")"), "{text}");
    let lite = include_str!("../../../migrations/sqlite/0003_create_shedlock_retired.sql");
    let text = for_table(
        lite,
        &TableName::new("aux.order", Backend::Postgres).unwrap(),
        Backend::Sqlite,
    );
    assert!(
        text.contains("CREATE TABLE IF NOT EXISTS \"aux\".\"order_retired\" ("),
        "{text}"
    );
    assert!(
        text.contains("CREATE TRIGGER IF NOT EXISTS aux.order_retire AFTER DELETE ON \"order\"\n"),
        "{text}"
    );
    assert!(
        text.contains("INSERT INTO \"order_retired\" (name"),
        "{text}"
    );
    let text = for_table(
        lite,
        &TableName::new("order", Backend::Postgres).unwrap(),
        Backend::Sqlite,
    );
    assert!(
        text.contains("CREATE TRIGGER IF NOT EXISTS order_retire AFTER DELETE ON \"order\"\n"),
        "{text}"
    );
}

#[test]
fn migration_8_leaves_out_the_note_where_it_is_there() {
    for migrations in [POSTGRES, MYSQL, SQLITE] {
        let (_, _, text) = *migrations
            .iter()
            .find(|(version, _, _)| *version == 8)
            .expect("migration 8");
        assert!(
            text.contains("ALTER TABLE shedlock_schedules ADD COLUMN"),
            "{text}"
        );
        assert_eq!(runnable(8, text, Present::default()), text);
        let note = Present {
            schedule_note: true,
            ..Present::default()
        };
        assert!(!runnable(8, text, note).contains("ALTER"));
    }
}

#[test]
fn migration_11_leaves_out_the_overlap_where_it_is_there() {
    for migrations in [POSTGRES, MYSQL, SQLITE] {
        let (_, _, text) = *migrations
            .iter()
            .find(|(version, _, _)| *version == 11)
            .expect("migration 11");
        assert!(
            text.contains("ALTER TABLE shedlock_schedules ADD COLUMN"),
            "{text}"
        );
        assert_eq!(runnable(11, text, Present::default()), text);
        // The note's presence does not leave out the overlap's column, nor the other way.
        let note = Present {
            schedule_note: true,
            ..Present::default()
        };
        assert_eq!(runnable(11, text, note), text);
        let overlap = Present {
            schedule_overlap: true,
            ..Present::default()
        };
        assert!(!runnable(11, text, overlap).contains("ALTER"));
        let (_, _, eight) = *migrations.iter().find(|(v, _, _)| *v == 8).unwrap();
        assert_eq!(runnable(8, eight, overlap), eight);
    }
}

#[test]
fn migration_13_leaves_out_the_rules_where_they_are_there() {
    for migrations in [POSTGRES, MYSQL, SQLITE] {
        let (_, _, text) = *migrations
            .iter()
            .find(|(version, _, _)| *version == 13)
            .expect("migration 13");
        assert!(
            text.contains("ALTER TABLE shedlock_schedules ADD COLUMN"),
            "{text}"
        );
        assert_eq!(runnable(13, text, Present::default()), text);
        // The overlap's presence does not leave out the rules' column, nor the other way.
        let overlap = Present {
            schedule_overlap: true,
            ..Present::default()
        };
        assert_eq!(runnable(13, text, overlap), text);
        let rules = Present {
            schedule_rules: true,
            ..Present::default()
        };
        assert!(!runnable(13, text, rules).contains("ALTER"));
        let (_, _, eleven) = *migrations.iter().find(|(v, _, _)| *v == 11).unwrap();
        assert_eq!(runnable(11, eleven, rules), eleven);
    }
}

#[test]
fn migration_14_leaves_out_the_deadlines_where_they_are_there() {
    for migrations in [POSTGRES, MYSQL, SQLITE] {
        let (_, _, text) = *migrations
            .iter()
            .find(|(version, _, _)| *version == 14)
            .expect("migration 14");
        assert!(
            text.contains("ALTER TABLE shedlock_schedules ADD COLUMN"),
            "{text}"
        );
        assert_eq!(runnable(14, text, Present::default()), text);
        let rules = Present {
            schedule_rules: true,
            ..Present::default()
        };
        assert_eq!(runnable(14, text, rules), text);
        let deadlines = Present {
            schedule_deadlines: true,
            ..Present::default()
        };
        assert!(!runnable(14, text, deadlines).contains("ALTER"));
        let (_, _, thirteen) = *migrations.iter().find(|(v, _, _)| *v == 13).unwrap();
        assert_eq!(runnable(13, thirteen, deadlines), thirteen);
    }
}
