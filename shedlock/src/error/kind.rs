//! [`ErrorKind`]: the few groups of [`Error`]s a caller tells apart.

use super::{Backend, BoxError, Error};

/// What kind of failure an [`Error`] is ([`Error::kind`]): the few groups a caller tells apart,
/// so one match arm covers, say, every configuration mistake. The table on [`Error`] lists
/// the variants of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A mistake in what the program gave shedlock (a lock configuration, a provider setting,
    /// a URL, a table name or key prefix, a schedule, a job, a leader election; no provider,
    /// or a second default one). The same call fails again until the program changes.
    Configuration,
    /// The store could not be reached, refused the credentials, or has no such database.
    Connection,
    /// What the store holds is not what shedlock keeps there: its table is missing (run
    /// `migrate()`), a table or key of that name was made by something else or has another
    /// shape, a row or key holds a value shedlock cannot read, or a migration failed. A person
    /// must act; nothing was written.
    Schema,
    /// The store failed or refused an operation, or did not answer in time.
    Store,
    /// A run under a lock did not complete as asked: keep-alive lost its lock, the scheduler's
    /// shutdown cancelled it, the store refused its tick as ahead of its clock (clock skew), or
    /// its hand-off to a queue failed.
    Run,
}

impl Error {
    /// What kind of failure this is; see the table on [`Error`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::EmptyLockName
            | Error::LockNameTooLong { .. }
            | Error::InvalidLockName { .. }
            | Error::ZeroLockAtMostFor { .. }
            | Error::LockAtLeastForExceedsAtMostFor { .. }
            | Error::DurationTooLong { .. }
            | Error::InvalidTableName { .. }
            | Error::InvalidLockedBy { .. }
            | Error::InvalidKeepAlive(_)
            | Error::InvalidTickTolerance(_)
            | Error::InvalidLeaderElection { .. }
            | Error::InvalidWorkerSetting { .. }
            | Error::InvalidUrl { .. }
            | Error::InvalidSetting { .. }
            | Error::NoProvider
            | Error::DefaultProviderAlreadySet
            | Error::InvalidCron { .. }
            | Error::InvalidOverlap { .. }
            | Error::UnknownTimeZone { .. }
            | Error::InvalidJobName { .. }
            | Error::DuplicateJob { .. }
            | Error::ScheduleExists { .. }
            | Error::NoSuchSchedule { .. }
            | Error::InvalidSchedule { .. }
            | Error::InvalidCalendar { .. }
            | Error::NoSuchCalendar { .. }
            | Error::InvalidWebhook { .. }
            | Error::TooManySchedules { .. } => ErrorKind::Configuration,
            Error::Unreachable { .. } | Error::Auth { .. } | Error::UnknownDatabase { .. } => {
                ErrorKind::Connection
            }
            Error::TableMissing { .. }
            | Error::MissingColumns { .. }
            | Error::IncompatibleTable { .. }
            | Error::Migrate { .. }
            | Error::UnreadableRow { .. }
            | Error::WrongType { .. } => ErrorKind::Schema,
            Error::Database { .. } | Error::Timeout { .. } => ErrorKind::Store,
            Error::LockLost { .. }
            | Error::Cancelled { .. }
            | Error::TickInFuture { .. }
            | Error::HandOff { .. } => ErrorKind::Run,
        }
    }

    /// [`Error::InvalidUrl`] for `url`, its secrets masked
    /// ([`secret::mask_url`](crate::secret::mask_url)): what a provider's
    /// `connect` returns for a URL its client library cannot read.
    pub fn invalid_url(backend: Backend, url: &str, source: impl Into<BoxError>) -> Self {
        Self::InvalidUrl {
            backend,
            url: crate::secret::mask_url(url),
            source: source.into(),
        }
    }
}
