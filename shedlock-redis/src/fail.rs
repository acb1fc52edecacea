//! How a failed command or script is named: a key of the wrong type, a value that cannot be
//! read, refused credentials, a timeout, or an error naming the server and what was being
//! done.

use redis::RedisError;
use shedlock::{Backend, Error};

use crate::read::{Bad, problem};
use crate::{Inner, connect};

impl Inner {
    /// What a failed script or command becomes.
    pub(crate) fn fail(&self, operation: String, source: RedisError) -> Error {
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
        if connect::is_auth(&source) {
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
        let name = key
            .strip_prefix(self.tag.as_str())
            .and_then(|rest| rest.split_once(':'))
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
