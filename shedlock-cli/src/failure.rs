//! Why a command did not succeed: its exit code and its one line on stderr.

use shedlock::Error;
use shedlock::error::ErrorKind;

pub(crate) const EXIT_DATABASE: u8 = 1;
pub(crate) const EXIT_USAGE: u8 = 2;
const EXIT_NO_SUCH_LOCK: u8 = 3;
/// Nothing was done: `unlock` not released, `trigger` already pending, `create` of a name
/// that has a schedule.
pub(crate) const EXIT_NOT_DONE: u8 = 4;
/// `check` found a promise broken.
pub(crate) const EXIT_BROKEN: u8 = 5;

/// Why a command did not succeed; each is one line on stderr and an exit code.
#[derive(Debug)]
pub(crate) enum Failure {
    /// An error from the library.
    Library(Box<Error>),
    /// Bad input found by the tool (exit 2).
    Usage(String),
    /// The database could not be used, in words of the tool (exit 1).
    Database(String),
    /// `unlock` of a name that has no row or keys (exit 3); `place` is where it was looked for
    /// (`in table shedlock`, `under key prefix shedlock`).
    NoSuchLock { name: String, place: String },
    /// Nothing was done (exit 4): `unlock` did not release, `trigger` found a request
    /// pending.
    NotDone(String),
    /// `backfills ID` of a number the store keeps no backfill of (exit 3); `hint` names those
    /// it keeps.
    NoSuchBackfill { id: i64, hint: String },
    /// `check` found promises broken (exit 5): how many, the lines on stdout.
    Broken(usize),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Library(Box::new(error))
    }
}

impl Failure {
    pub(crate) fn code(&self) -> u8 {
        match self {
            Failure::Library(error) => match (&**error, error.kind()) {
                (Error::NoSuchSchedule { .. } | Error::NoSuchCalendar { .. }, _) => {
                    EXIT_NO_SUCH_LOCK
                }
                (Error::ScheduleExists { .. }, _) => EXIT_NOT_DONE,
                (_, ErrorKind::Configuration) => EXIT_USAGE,
                _ => EXIT_DATABASE,
            },
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Database(_) => EXIT_DATABASE,
            Failure::NoSuchLock { .. } | Failure::NoSuchBackfill { .. } => EXIT_NO_SUCH_LOCK,
            Failure::NotDone(_) => EXIT_NOT_DONE,
            Failure::Broken(_) => EXIT_BROKEN,
        }
    }

    /// The line on stderr; `table` is the lock table the command was about.
    pub(crate) fn line(&self, table: &str) -> String {
        match self {
            // Codes 3 and 4 are answers, not errors: a name the store does not hold, a name
            // it already holds.
            Failure::Library(error) if self.code() >= EXIT_NO_SUCH_LOCK => {
                format!("shedlock: {}", library_error_line(error, table))
            }
            Failure::Library(error) => {
                format!("shedlock: error: {}", library_error_line(error, table))
            }
            Failure::Usage(text) | Failure::Database(text) => {
                format!("shedlock: error: {}", one_line(text))
            }
            Failure::NoSuchLock { name, place } => format!(
                "shedlock: no lock named {name:?} {place}; `shedlock list` shows the locks there"
            ),
            Failure::NotDone(text) => format!("shedlock: {}", one_line(text)),
            Failure::Broken(count) => format!(
                "shedlock: {count} promise{} broken",
                if *count == 1 { "" } else { "s" }
            ),
            Failure::NoSuchBackfill { id, hint } => format!(
                "shedlock: no backfill #{id}{}; `shedlock backfills` lists them",
                one_line(hint)
            ),
        }
    }
}

/// The library's error as one line: a missing table says to run `shedlock migrate`, a Redis key
/// of the wrong type names the tool's option for another prefix, anything else is its message
/// with whatever its sources add.
fn library_error_line(error: &Error, table: &str) -> String {
    if let Error::WrongType {
        address,
        key,
        found,
        ..
    } = error
    {
        return format!(
            "the Redis key {key:?} at {address} holds a {found}, not the hash (or set) shedlock keeps \
             there: another program uses this key prefix; choose another prefix (--key-prefix) or \
             remove the key"
        );
    }
    if let Error::TableMissing {
        backend,
        table: missing,
    } = error
    {
        let which = if *missing == format!("{table}_runs") {
            "run history table"
        } else {
            "lock table"
        };
        return format!(
            "the {which} `{missing}` does not exist in the {backend} database: if your lock table \
             has another name, give it with --table (the default is `shedlock`); otherwise run \
             `shedlock migrate` (with the same --database-url and --table) to create it"
        );
    }
    let mut line = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    one_line(&line)
}

/// `text` with every run of whitespace, line breaks included, made one space.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
