//! `Error::kind`: one sample of each variant, with the kind the table on `Error` gives it.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Backend, Error, ErrorKind};

/// How many variants `Error` has: `variant` numbers them from 0.
const VARIANTS: usize = 43;

/// Which variant `error` is, by number. No wildcard: a new variant does not compile until it
/// is numbered here, and the test below then fails until it has a sample with its kind.
fn variant(error: &Error) -> usize {
    match error {
        Error::EmptyLockName => 0,
        Error::LockNameTooLong { .. } => 1,
        Error::InvalidLockName { .. } => 2,
        Error::ZeroLockAtMostFor { .. } => 3,
        Error::LockAtLeastForExceedsAtMostFor { .. } => 4,
        Error::DurationTooLong { .. } => 5,
        Error::InvalidTableName { .. } => 6,
        Error::InvalidLockedBy { .. } => 7,
        Error::InvalidKeepAlive(_) => 8,
        Error::InvalidTickTolerance(_) => 9,
        Error::HandOff { .. } => 10,
        Error::InvalidLeaderElection { .. } => 11,
        Error::InvalidUrl { .. } => 12,
        Error::InvalidSetting { .. } => 13,
        Error::Unreachable { .. } => 14,
        Error::Auth { .. } => 15,
        Error::UnknownDatabase { .. } => 16,
        Error::TableMissing { .. } => 17,
        Error::MissingColumns { .. } => 18,
        Error::Migrate { .. } => 19,
        Error::NoProvider => 20,
        Error::DefaultProviderAlreadySet => 21,
        Error::LockLost { .. } => 22,
        Error::Cancelled { .. } => 23,
        Error::InvalidCron { .. } => 24,
        Error::UnknownTimeZone { .. } => 25,
        Error::InvalidJobName { .. } => 26,
        Error::DuplicateJob { .. } => 27,
        Error::Timeout { .. } => 28,
        Error::TickInFuture { .. } => 29,
        Error::IncompatibleTable { .. } => 30,
        Error::UnreadableRow { .. } => 31,
        Error::WrongType { .. } => 32,
        Error::Database { .. } => 33,
        Error::InvalidWorkerSetting { .. } => 34,
        Error::ScheduleExists { .. } => 35,
        Error::NoSuchSchedule { .. } => 36,
        Error::InvalidSchedule { .. } => 37,
        Error::TooManySchedules { .. } => 38,
        Error::InvalidOverlap { .. } => 39,
        Error::InvalidCalendar { .. } => 40,
        Error::NoSuchCalendar { .. } => 41,
        Error::InvalidWebhook { .. } => 42,
    }
}

/// One of each variant, with the kind the table on `Error` gives it.
fn samples() -> Vec<(Error, ErrorKind)> {
    use ErrorKind::{Configuration, Connection, Run, Schema, Store};
    let (name, s) = (String::from("nightly"), String::from("x"));
    let pg = Backend::Postgres;
    let address = String::from("127.0.0.1:5432");
    let minute = Duration::from_secs(60);
    vec![
        (Error::EmptyLockName, Configuration),
        (
            Error::LockNameTooLong {
                name: s.clone(),
                len: 65,
                max: 64,
            },
            Configuration,
        ),
        (
            Error::InvalidLockName {
                name: s.clone(),
                reason: "r",
            },
            Configuration,
        ),
        (
            Error::ZeroLockAtMostFor { name: name.clone() },
            Configuration,
        ),
        (
            Error::LockAtLeastForExceedsAtMostFor {
                name: name.clone(),
                lock_at_least_for: minute * 2,
                lock_at_most_for: minute,
            },
            Configuration,
        ),
        (
            Error::DurationTooLong {
                name: name.clone(),
                field: "lock_at_most_for",
                value: minute,
            },
            Configuration,
        ),
        (
            Error::InvalidTableName {
                backend: pg,
                name: s.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::InvalidLockedBy {
                value: s.clone(),
                reason: "r",
            },
            Configuration,
        ),
        (Error::InvalidKeepAlive(s.clone()), Configuration),
        (Error::InvalidTickTolerance(s.clone()), Configuration),
        (
            Error::HandOff {
                job: name.clone(),
                reason: s.clone(),
            },
            Run,
        ),
        (
            Error::InvalidLeaderElection {
                name: name.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::InvalidWorkerSetting {
                setting: "PollInterval",
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::invalid_url(pg, "postgres://u:secret@h/db", "bad"),
            Configuration,
        ),
        (
            Error::InvalidSetting {
                backend: pg,
                setting: "response_timeout",
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::Unreachable {
                backend: pg,
                address: address.clone(),
                source: "refused".into(),
            },
            Connection,
        ),
        (
            Error::Auth {
                backend: pg,
                address: address.clone(),
                source: "denied".into(),
            },
            Connection,
        ),
        (
            Error::UnknownDatabase {
                backend: pg,
                address: address.clone(),
                database: s.clone(),
            },
            Connection,
        ),
        (
            Error::TableMissing {
                backend: pg,
                table: s.clone(),
            },
            Schema,
        ),
        (
            Error::MissingColumns {
                backend: pg,
                table: s.clone(),
                columns: vec![s.clone()],
                found: vec![],
                java_shedlock: false,
            },
            Schema,
        ),
        (
            Error::Migrate {
                backend: pg,
                table: s.clone(),
                source: sqlx::migrate::MigrateError::VersionMissing(1),
            },
            Schema,
        ),
        (Error::NoProvider, Configuration),
        (Error::DefaultProviderAlreadySet, Configuration),
        (
            Error::LockLost {
                name: name.clone(),
                fencing_token: 7,
            },
            Run,
        ),
        (Error::Cancelled { name: name.clone() }, Run),
        (
            Error::InvalidCron {
                expression: s.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::UnknownTimeZone {
                name: s.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::InvalidJobName {
                name: s.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (Error::DuplicateJob { name: name.clone() }, Configuration),
        (
            Error::InvalidOverlap {
                job: name.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (Error::ScheduleExists { name: name.clone() }, Configuration),
        (
            Error::TooManySchedules {
                name: name.clone(),
                held: 3,
                cap: 3,
            },
            Configuration,
        ),
        (
            Error::NoSuchSchedule {
                name: name.clone(),
                hint: s.clone(),
            },
            Configuration,
        ),
        (
            Error::InvalidSchedule {
                name: name.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::InvalidCalendar {
                name: name.clone(),
                reason: s.clone(),
            },
            Configuration,
        ),
        (
            Error::NoSuchCalendar {
                name: name.clone(),
                hint: s.clone(),
            },
            Configuration,
        ),
        (Error::InvalidWebhook { reason: s.clone() }, Configuration),
        (
            Error::Timeout {
                operation: s.clone(),
                after: minute,
            },
            Store,
        ),
        (
            Error::TickInFuture {
                name: name.clone(),
                tick: chrono::Utc::now(),
                tolerance: minute,
                ahead_by: None,
            },
            Run,
        ),
        (
            Error::IncompatibleTable {
                backend: pg,
                table: s.clone(),
                problem: s.clone(),
            },
            Schema,
        ),
        (
            Error::UnreadableRow {
                backend: pg,
                location: s.clone(),
                name: name.clone(),
                problem: s.clone(),
            },
            Schema,
        ),
        (
            Error::WrongType {
                backend: Backend::Redis,
                address: address.clone(),
                key: s.clone(),
                found: "list".into(),
            },
            Schema,
        ),
        (
            Error::Database {
                backend: pg,
                operation: s.clone(),
                location: s.clone(),
                source: "failed".into(),
            },
            Store,
        ),
    ]
}

#[test]
fn every_variant_has_its_kind() {
    let samples = samples();
    for (error, kind) in &samples {
        assert_eq!(error.kind(), *kind, "{error:?}");
    }
    let numbered: BTreeSet<usize> = samples.iter().map(|(e, _)| variant(e)).collect();
    let every: BTreeSet<usize> = (0..VARIANTS).collect();
    assert_eq!(numbered, every, "one sample of each variant");
    assert_eq!(samples.len(), every.len(), "no variant sampled twice");
}

/// `Debug` is the message (what `main` returning `Box<dyn Error>` prints after `Error: `), for
/// every variant: no field names, no variant name, no source's own `Debug`.
#[test]
fn debug_prints_the_message_of_every_variant() {
    for (error, _) in samples() {
        let debug = format!("{error:?}");
        assert_eq!(debug, error.to_string());
        assert!(!debug.contains(" { "), "a struct's Debug: {debug}");
    }
    let boxed: Box<dyn std::error::Error> = Box::new(Error::Auth {
        backend: Backend::Postgres,
        address: "127.0.0.1:5432".into(),
        source: "password authentication failed for user \"app\"".into(),
    });
    assert!(
        format!("{boxed:?}")
            .starts_with("the PostgreSQL server at 127.0.0.1:5432 refused the credentials"),
        "{boxed:?}"
    );
}
