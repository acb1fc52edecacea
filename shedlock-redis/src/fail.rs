//! How a failed command or script is named: a key of the wrong type, a value that cannot be
//! read, refused credentials, a command the user may not run, a timeout, or an error naming
//! the server and what was being done.

use std::fmt;

use redis::RedisError;
use shedlock::{Backend, Error};

use crate::Inner;
use crate::read::{Bad, problem};

impl Inner {
    /// What a failed script or command becomes; `command` is what was sent (`EVALSHA`,
    /// `SSCAN`), for a permission the user lacks.
    pub(crate) fn fail(&self, operation: String, command: &str, source: RedisError) -> Error {
        if is_denied(&source) {
            return denied(&self.address, &self.prefix, operation, command, source);
        }
        match source.code() {
            Some("SHEDLOCK_WRONGTYPE") => {
                let detail = script_detail(&source);
                let (found, key) = detail.split_once(' ').unwrap_or(("unknown", detail));
                return Error::WrongType {
                    backend: Backend::Redis,
                    address: self.address.clone(),
                    key: key.to_owned(),
                    found: found.to_owned(),
                };
            }
            Some("SHEDLOCK_UNREADABLE") => {
                if let Some(bad) = self.unreadable(script_detail(&source)) {
                    return bad.into_error();
                }
            }
            _ => {}
        }
        if is_auth(&source) {
            return Error::Auth {
                backend: Backend::Redis,
                address: self.address.clone(),
                source: source.into(),
            };
        }
        if source.is_timeout() {
            return Error::Timeout {
                operation: format!("{operation} on the Redis server at {}", self.address),
                after: self.response_timeout,
            };
        }
        Error::Database {
            backend: Backend::Redis,
            operation,
            location: self.address.clone(),
            source: source.into(),
        }
    }

    /// A `SHEDLOCK_UNREADABLE <key> <field> <length> <value>` error's detail read back: the key
    /// and the value percent-decoded, the lock's name taken from the key.
    fn unreadable(&self, detail: &str) -> Option<Bad> {
        let mut parts = detail.splitn(4, ' ');
        let key = decode(parts.next()?);
        let field = parts.next()?;
        let len = parts.next()?.parse().ok()?;
        let value: Vec<u8> =
            percent_encoding::percent_decode_str(parts.next().unwrap_or("")).collect();
        let rest = key.strip_prefix(self.tag.as_str()).unwrap_or_default();
        // A schedule's hash names its schedule; the sorted set and the counter only themselves.
        if let Some(name) = rest.strip_prefix("schedule:") {
            return Some(Bad {
                name: name.to_owned(),
                problem: crate::schedules::problem(field, &value, len),
                key,
            });
        }
        if rest.starts_with("schedules") {
            return Some(Bad {
                name: key.clone(),
                problem: crate::schedules::problem(field, &value, len),
                key,
            });
        }
        let name = rest
            .split_once(':')
            .map_or(key.as_str(), |(_, name)| name)
            .to_owned();
        Some(Bad {
            name,
            problem: problem(field, &value, len),
            key,
        })
    }

    /// An answer the provider cannot use (a bug, or a server that is not Redis).
    pub(crate) fn unexpected(&self, operation: &str, what: String) -> Error {
        Error::Database {
            backend: Backend::Redis,
            operation: operation.to_owned(),
            location: self.address.clone(),
            source: RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected answer",
                what,
            ))
            .into(),
        }
    }
}

/// The commands the provider's Redis user must be allowed, in ACL rule syntax, on the keys
/// `~{<prefix>}:*` (see the crate's documentation): `PING` when it connects; `EVALSHA` for every
/// operation and `SCRIPT LOAD` for a server that does not have a script yet; `SSCAN` to list
/// the locks; and what the scripts run: `TIME`, `TYPE`, `HGET`, `HMGET`, `HSET`, `PEXPIRE`,
/// `DEL`, `EXISTS`, `SADD`, `SREM`. A URL that names a database other than 0 needs `+select`
/// too.
pub const REQUIRED_COMMANDS: &str = "+ping +evalsha +script|load +sscan +time +type +hget \
     +hmget +hset +pexpire +del +exists +sadd +srem";

/// The commands the provider's Redis user needs, beyond [`REQUIRED_COMMANDS`], for the
/// schedules ([`ScheduleStore`](shedlock::schedules::ScheduleStore)): what their scripts run
/// (`HGETALL`, `HDEL`, `GET`, `SET`, `ZADD`, `ZRANGEBYSCORE`, `ZREVRANGE`, `PUBLISH`; `ZCARD`
/// and `ZRANGE` for the cap on run-time schedules; `INCR` for a backfill's id) and the change
/// feed's `SUBSCRIBE`. The channel the changes are published on is
/// `{<prefix>}:schedules` (ACL rule `&{<prefix>}:schedules`); without it a change is still
/// made (its `PUBLISH` is allowed to fail) and the watchers poll.
pub const SCHEDULE_COMMANDS: &str = "+hgetall +hdel +get +set +zadd +zrangebyscore +zrevrange +zcard +zrange +publish +subscribe +incr";

/// The commands the provider's Redis user needs, beyond [`REQUIRED_COMMANDS`], for the run
/// history ([`RunStore`](shedlock::RunStore)): what its scripts run (`INCR` for an id, `ZADD`,
/// `ZREM`, `ZRANGE` and `ZREVRANGEBYSCORE` on its indexes, `SMEMBERS` of the running rows,
/// `GET` and `SET` of a write's answer kept for its resend, `HDEL` of an error text).
pub const HISTORY_COMMANDS: &str =
    "+incr +zadd +zrem +zrange +zrevrangebyscore +smembers +get +set +hdel";

/// Whether the server refused a command to this user (an ACL rule): `NOPERM` for a command the
/// provider sent (redis-rs passes on the words alone for the `SELECT` of a new connection), the
/// error Redis 7.0 gives a script for one the script runs.
pub(crate) fn is_denied(e: &RedisError) -> bool {
    e.code() == Some("NOPERM")
        || e.detail().is_some_and(|d| {
            d.starts_with("The user executing the script can't")
                || d.starts_with("this user has no permissions to")
        })
}

/// A command refused to the user, as [`Error::Database`] whose source says what the user needs.
pub(crate) fn denied(
    address: &str,
    prefix: &str,
    operation: String,
    command: &str,
    source: RedisError,
) -> Error {
    Error::Database {
        backend: Backend::Redis,
        operation,
        location: address.to_owned(),
        source: Box::new(NoPermission {
            command: command.to_owned(),
            prefix: prefix.to_owned(),
            source,
        }),
    }
}

/// The server refused a command to the provider's user: which, what it said, and what the
/// user needs.
#[derive(Debug)]
struct NoPermission {
    command: String,
    prefix: String,
    source: RedisError,
}

impl fmt::Display for NoPermission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let said = self.source.detail().unwrap_or_default();
        let said = said.rsplit_once(" script: ").map_or(said, |(d, _)| d);
        write!(
            f,
            "permission denied: the Redis user may not run {} (the server said: {said}); the \
             provider's user needs the ACL rules ~{{{}}}:* {REQUIRED_COMMANDS} (and +select \
             for a database other than 0; for the schedules also {SCHEDULE_COMMANDS} \
             &{{{}}}:schedules; for the run history also {HISTORY_COMMANDS})",
            self.command, self.prefix, self.prefix,
        )
    }
}

impl std::error::Error for NoPermission {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The detail of a script's error, without the ` script: <sha>, on @user_script:<line>.` Redis
/// adds.
fn script_detail(source: &RedisError) -> &str {
    let detail = source.detail().unwrap_or_default();
    detail.rsplit_once(" script: ").map_or(detail, |(d, _)| d)
}

/// A percent-encoded text, decoded (bytes that are no UTF-8 replaced).
fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}

/// Whether the server refused the credentials, or wants some it was not given: `NOAUTH`,
/// `WRONGPASS`, or the protocol error Redis 7 gives an unauthenticated client whose command is
/// too long to read before `AUTH` (every script call of more than a few keys).
pub(crate) fn is_auth(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || e.detail()
            .is_some_and(|d| d.starts_with("Protocol error: unauthenticated"))
}
