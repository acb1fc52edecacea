//! A Java ShedLock table where shedlock's would be, made by Java ShedLock's own DDL and holding
//! its rows: `migrate()` refuses it before writing anything (no history, run table, sequence or
//! trigger: the table can still be emptied and renamed, which an earlier release broke), names
//! the columns it found and the ways out; then the upgrade statements of
//! `docs/operations.md` ("Moving from Java ShedLock"), read from that page, convert it, and
//! `migrate()` and the locks work on it, a held Java lock still held until its `lock_until`.
#![allow(missing_docs)]

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use shedlock::{Backend, Error, LockAdmin, LockConfiguration, LockProvider};
use shedlock_suite::{MySql, Postgres, SqlTestDb, Sqlite, TestDb, unique_name};
use sqlx::AssertSqlSafe;

/// What the case reads besides the kit's hooks: the names of the tables and triggers whose
/// names start with `prefix` (or `_prefix`, the migrations' record).
trait Objects: SqlTestDb {
    async fn objects(&self, prefix: &str) -> Vec<String>;
}

macro_rules! objects {
    ($db:ty, $sql:expr) => {
        impl Objects for $db {
            async fn objects(&self, prefix: &str) -> Vec<String> {
                let sql = format!($sql, prefix = prefix);
                let query = sqlx::query_scalar(AssertSqlSafe(sql));
                let mut names: Vec<String> = query.fetch_all(self.provider().pool()).await.unwrap();
                names.sort();
                names
            }
        }
    };
}

objects!(
    Postgres,
    "SELECT relname::TEXT FROM pg_class WHERE relnamespace = current_schema()::regnamespace \
     AND relkind IN ('r', 'S') AND (relname LIKE '{prefix}%' OR relname LIKE '\\_{prefix}%')"
);
objects!(
    MySql,
    "SELECT CAST(table_name AS CHAR) FROM information_schema.tables WHERE table_schema = DATABASE() \
     AND (table_name LIKE '{prefix}%' OR table_name LIKE '\\_{prefix}%')"
);
objects!(
    Sqlite,
    "SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger') \
     AND (name LIKE '{prefix}%' OR name LIKE '\\_{prefix}%' ESCAPE '\\')"
);

/// Java ShedLock's DDL for each database, as its documentation gives it.
fn java_ddl(backend: Backend, table: &str) -> String {
    match backend {
        Backend::Postgres => format!(
            "CREATE TABLE {table}(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, \
             locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))"
        ),
        Backend::MySql => format!(
            "CREATE TABLE {table}(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3) NOT NULL, \
             locked_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), \
             locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))"
        ),
        _ => format!(
            "CREATE TABLE {table}(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, \
             locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))"
        ),
    }
}

/// The upgrade statements of `backend` from docs/operations.md, for `table`.
fn upgrade_statements(backend: Backend, table: &str) -> String {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operations.md"),
    )
    .unwrap();
    let marker = format!(
        "<!-- java-shedlock-upgrade: {} -->",
        shedlock_suite::backend_name(backend)
    );
    let after = page
        .split_once(&marker)
        .unwrap_or_else(|| panic!("{marker} in docs/operations.md"))
        .1;
    let block = after
        .split_once("```sql\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .unwrap()
        .0;
    block.replace("shedlock", table)
}

fn sql_time(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

async fn a_java_shedlock_table_is_refused_untouched_then_converted<D: Objects>(db: &D) {
    let backend = D::BACKEND;
    let table = unique_name("java");
    db.exec(&java_ddl(backend, &table)).await;
    let now = Utc::now().trunc_subsecs(3);
    let (held_until, free_until) = (
        now + chrono::TimeDelta::hours(1),
        now - chrono::TimeDelta::hours(1),
    );
    let insert = |name: &str, until: String, at: String, by: &str| {
        format!(
            "INSERT INTO {table} (name, lock_until, locked_at, locked_by) VALUES ('{name}', {until}, {at}, '{by}')"
        )
    };
    let quoted = |t: DateTime<Utc>| format!("'{}'", sql_time(t));
    let rows = match backend {
        // TIMESTAMP is read in the session's time zone: the rows are written in UTC.
        Backend::MySql => format!(
            "SET time_zone = '+00:00'; {}; {}",
            insert("held_job", quoted(held_until), quoted(now), "java-host-1"),
            insert("free_job", quoted(free_until), quoted(now), "java-host-2")
        ),
        // One time as text, one as milliseconds: what JDBC drivers for SQLite write.
        Backend::Sqlite => format!(
            "{}; {}",
            insert("held_job", quoted(held_until), quoted(now), "java-host-1"),
            insert(
                "free_job",
                free_until.timestamp_millis().to_string(),
                now.timestamp_millis().to_string(),
                "java-host-2"
            )
        ),
        _ => format!(
            "{}; {}",
            insert("held_job", quoted(held_until), quoted(now), "java-host-1"),
            insert("free_job", quoted(free_until), quoted(now), "java-host-2")
        ),
    };
    db.exec(&rows).await;

    let provider = db.provider_for_table(&table);
    let refused = provider.migrate().await.unwrap_err();
    match &refused {
        Error::MissingColumns {
            columns,
            found,
            java_shedlock,
            ..
        } => {
            assert_eq!(columns, &["locked_until", "fencing_token", "last_tick"]);
            assert!(found.iter().any(|c| c == "lock_until"), "{found:?}");
            assert!(*java_shedlock);
        }
        other => panic!("a Java ShedLock table is refused by name: {other:?}"),
    }
    let message = refused.to_string();
    for says in [
        "it has ",
        "lock_until",
        "Java ShedLock table",
        "nothing was changed",
        "another table name",
        "Moving from Java ShedLock",
    ] {
        assert!(message.contains(says), "{says:?} in {message}");
    }
    let cfg = LockConfiguration::new("new_job", Duration::from_secs(60), Duration::ZERO).unwrap();
    // Refused by name (MySQL's shape check first names the TIMESTAMP columns).
    let refused = provider.lock(&cfg).await.unwrap_err();
    assert!(
        matches!(
            refused,
            Error::MissingColumns { .. } | Error::IncompatibleTable { .. }
        ),
        "{refused:?}"
    );
    // Nothing was written: the table is alone, can be emptied of a row and renamed.
    assert_eq!(db.objects(&table).await, std::slice::from_ref(&table));
    db.exec(&format!("DELETE FROM {table} WHERE name = 'no_such_job'"))
        .await;
    let renamed = format!("{table}_x");
    let rename = |from: &str, to: &str| match backend {
        Backend::MySql => format!("RENAME TABLE {from} TO {to}"),
        _ => format!("ALTER TABLE {from} RENAME TO {to}"),
    };
    db.exec(&rename(&table, &renamed)).await;
    db.exec(&rename(&renamed, &table)).await;

    // The documented conversion, then migrate().
    db.exec(&upgrade_statements(backend, &table)).await;
    provider.migrate().await.unwrap();
    provider.migrate().await.unwrap();
    let names = ["free_job".to_owned(), "held_job".to_owned()];
    let states = provider.lock_states(&names).await.unwrap();
    assert_eq!(states.len(), 2, "{states:?}");
    let (free, held) = (&states[0], &states[1]);
    assert_eq!(held.locked_until, held_until, "{held:?}");
    assert_eq!(held.locked_by, "java-host-1");
    assert!(held.is_held() && !free.is_held(), "{states:?}");
    assert_eq!(free.locked_until, free_until, "{free:?}");
    let held_cfg =
        LockConfiguration::new("held_job", Duration::from_secs(60), Duration::ZERO).unwrap();
    assert!(
        provider.lock(&held_cfg).await.unwrap().is_none(),
        "a held Java lock stays held"
    );
    let free_cfg =
        LockConfiguration::new("free_job", Duration::from_secs(60), Duration::ZERO).unwrap();
    let guard = provider.lock(&free_cfg).await.unwrap().unwrap();
    let token = guard.fencing_token();
    assert!(token > 0);
    assert!(guard.unlock().await.unwrap());
    let first = provider.lock(&cfg).await.unwrap().unwrap();
    assert!(first.fencing_token() > token);
    assert!(first.unlock().await.unwrap());

    let objects = db.objects(&table).await;
    for object in objects.iter().rev().filter(|o| !o.ends_with("_id_seq")) {
        let drop = match (
            backend,
            object.ends_with("_tokens"),
            object.ends_with("_retire"),
        ) {
            (Backend::Postgres, true, _) => format!("DROP SEQUENCE {object}"),
            (Backend::Sqlite, _, true) => format!("DROP TRIGGER {object}"),
            _ => format!("DROP TABLE {object}"),
        };
        db.exec(&drop).await;
    }
}

shedlock_suite::backend_tests!(super => [
    a_java_shedlock_table_is_refused_untouched_then_converted,
]);
