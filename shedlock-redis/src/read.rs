//! The operator's reads: the listing, a page at a time (`SSCAN` of the set of names, then the
//! `read` script on that page), and the states of named locks; and the rules by which a stored
//! value is read, shared with the messages of the scripts' `SHEDLOCK_UNREADABLE` errors.

use chrono::{DateTime, Utc};
use futures_util::future::try_join_all;
use shedlock::history::{LockRows, LockState, UnreadableRow};
use shedlock::{Backend, Error, Result};

use crate::Inner;

/// The most names one `read` script reads: two commands each (three for a name without keys),
/// so that a script runs well under a millisecond on a busy server.
pub(crate) const PAGE: usize = 40;

/// The `COUNT` of one `SSCAN` of the set of names: about as many names per step.
const SCAN_COUNT: usize = 250;

/// How many `read` scripts of a listing are sent together: the listing waits for the server's
/// answers once per group, while the server runs at most this many in a row.
const IN_FLIGHT: usize = 2;

/// The fields of a key as the `read` script returns them, each `None` where missing: the
/// lease's `token`, `by`, `at`, `until`; the record's, and its `tick`.
type Fields = Vec<Option<Vec<u8>>>;

/// A lock's keys as the `read` script returns them: `None` when it has neither (its name was
/// removed from the set), else the lease and the record, each `None` when its key holds none
/// of the fields (or does not exist).
type RawRow = Option<(Option<Fields>, Option<Fields>)>;

/// What the keys of one lock read as.
enum Read {
    /// Neither key holds a token: no lock.
    Absent,
    State(LockState),
    /// A value that cannot be read.
    Bad(Bad),
}

/// A value that cannot be read, and where.
pub(crate) struct Bad {
    /// The lock name (lossy, for a name that is no UTF-8).
    pub(crate) name: String,
    /// The key that holds it.
    pub(crate) key: String,
    /// What is wrong, naming the field and the value.
    pub(crate) problem: String,
}

impl Bad {
    /// As an error: [`Error::UnreadableRow`], with the key as its location.
    pub(crate) fn into_error(self) -> Error {
        Error::UnreadableRow {
            backend: Backend::Redis,
            location: self.key,
            name: self.name,
            problem: self.problem,
        }
    }

    /// As a row of [`LockRows::unreadable`]: the problem names the key.
    pub(crate) fn into_unreadable(self) -> UnreadableRow {
        UnreadableRow::new(self.name, format!("key {:?}: {}", self.key, self.problem))
    }
}

impl Inner {
    /// Every lock under the prefix: the type of the set of names checked (the `check` script),
    /// its names read with `SSCAN` (`COUNT` [`SCAN_COUNT`]), then their keys by `read` scripts
    /// of [`PAGE`] names each, sent [`IN_FLIGHT`] at a time, which also remove the names whose keys
    /// are both gone. No step reads more than its page, so none holds the server for long,
    /// whatever the number of names. Ordered by name.
    pub(crate) async fn lock_rows(&self) -> Result<LockRows> {
        let operation = || format!("list the locks under {:?}", self.tag);
        // A set of names of another type is named as such (SSCAN would only say WRONGTYPE).
        self.check(false).await?;
        let names = self.names(operation).await?;
        let mut reads = Vec::with_capacity(names.len());
        for group in names.chunks(PAGE * IN_FLIGHT) {
            let mut pages = Vec::with_capacity(IN_FLIGHT);
            for page in group.chunks(PAGE) {
                pages.push(self.read(page, operation));
            }
            reads.extend(try_join_all(pages).await?.into_iter().flatten());
        }
        let (mut locks, mut unreadable) = (Vec::new(), Vec::new());
        for read in reads {
            match read {
                Read::Absent => {}
                Read::State(state) => locks.push(state),
                Read::Bad(bad) => unreadable.push(bad.into_unreadable()),
            }
        }
        Ok(LockRows::new(locks, unreadable))
    }

    /// Every name in the set of names, sorted, each once (`SSCAN` may return a name twice when
    /// the set is resized between two steps).
    async fn names(&self, operation: impl Fn() -> String + Copy) -> Result<Vec<Vec<u8>>> {
        let names_key = self.names_key();
        let mut all = Vec::new();
        let mut cursor = String::from("0");
        loop {
            let mut sscan = redis::cmd("SSCAN");
            sscan
                .arg(&names_key)
                .arg(&cursor)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let (next, names): (String, Vec<Vec<u8>>) = self.query(&sscan, operation).await?;
            all.extend(names);
            if next == "0" {
                break;
            }
            cursor = next;
        }
        all.sort_unstable();
        all.dedup();
        Ok(all)
    }

    /// The locks `names` (a page at a time), ordered by name: the readable ones, and the others.
    pub(crate) async fn named(&self, names: &[String]) -> Result<(Vec<LockState>, Vec<Bad>)> {
        let mut sorted: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let operation = || match names {
            [name] => format!("read lock {name:?}"),
            names => format!("read {} locks", names.len()),
        };
        let (mut states, mut bad) = (Vec::new(), Vec::new());
        for page in sorted.chunks(PAGE) {
            for read in self.read(page, operation).await? {
                match read {
                    Read::Absent => {}
                    Read::State(state) => states.push(state),
                    Read::Bad(b) => bad.push(b),
                }
            }
        }
        Ok((states, bad))
    }

    /// The `read` script on the locks `names`: what each reads as, in order.
    async fn read(
        &self,
        names: &[impl AsRef<[u8]>],
        operation: impl Fn() -> String,
    ) -> Result<Vec<Read>> {
        let mut invocation = self.scripts.read.prepare_invoke();
        invocation.key(self.names_key());
        for name in names {
            let name = name.as_ref();
            invocation
                .key(self.key_bytes("lock:", name))
                .key(self.key_bytes("meta:", name))
                .arg(name);
        }
        let (now, rows): (String, Vec<RawRow>) = self.run(&invocation, operation).await?;
        let read_at = parse_time(now.as_bytes()).ok_or_else(|| {
            self.unexpected(
                "read the server's time",
                format!("the read script answered {now:?} for the time"),
            )
        })?;
        if rows.len() != names.len() {
            return Err(self.unexpected(
                "read the locks",
                "a different number of rows than names".into(),
            ));
        }
        Ok(names
            .iter()
            .zip(rows)
            .map(|(name, row)| match row {
                None => Read::Absent,
                Some((lease, record)) => self.row(name.as_ref(), lease, record, read_at),
            })
            .collect())
    }

    /// One lock's keys read: the lease where it exists, else the record; every value checked
    /// (those of the other key too: the acquire reads them).
    fn row(
        &self,
        name: &[u8],
        lease: Option<Fields>,
        record: Option<Fields>,
        read_at: DateTime<Utc>,
    ) -> Read {
        let bad = |key: &[u8], problem: String| {
            Read::Bad(Bad {
                name: String::from_utf8_lossy(name).into_owned(),
                key: String::from_utf8_lossy(key).into_owned(),
                problem,
            })
        };
        let (lock_key, meta_key) = (self.key_bytes("lock:", name), self.key_bytes("meta:", name));
        let Ok(text) = std::str::from_utf8(name) else {
            return bad(&meta_key, "its name is not UTF-8 text".into());
        };
        let get = |fields: &Option<Fields>, i: usize| -> Option<Vec<u8>> {
            fields.as_ref().and_then(|f| f.get(i).cloned().flatten())
        };
        // What the scripts read of each key, in their order (a lease has no `tick`).
        for (key, fields) in [(&lock_key, &lease), (&meta_key, &record)] {
            for (i, field) in [(0, "token"), (2, "at"), (3, "until"), (4, "tick")] {
                if let Some(value) = get(fields, i)
                    && !readable(field, &value)
                {
                    return bad(key, problem(field, &value, value.len()));
                }
            }
        }
        let (source, key) = match &lease {
            Some(_) => (&lease, &lock_key),
            None => (&record, &meta_key),
        };
        let Some(token) = get(source, 0).and_then(|t| parse_token(&t)) else {
            return Read::Absent;
        };
        let time = |i: usize, field: &str| {
            get(source, i)
                .and_then(|v| parse_time(&v))
                .ok_or_else(|| format!("field `{field}` is missing"))
        };
        let (at, until) = match (time(2, "at"), time(3, "until")) {
            (Ok(at), Ok(until)) => (at, until),
            (Err(problem), _) | (_, Err(problem)) => return bad(key, problem),
        };
        let by = get(source, 1)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let tick = get(&record, 4).and_then(|t| parse_time(&t));
        Read::State(LockState::new(
            text.to_owned(),
            until,
            at,
            by,
            token,
            tick,
            read_at,
        ))
    }
}

/// Whether `value` reads as what `field` holds: a token or a time.
fn readable(field: &str, value: &[u8]) -> bool {
    if field == "token" {
        parse_token(value).is_some()
    } else {
        parse_time(value).is_some()
    }
}

/// A magnitude as the scripts read it: ASCII digits only (leading zeros allowed), at most
/// 2^63 − 1.
fn magnitude(value: &[u8]) -> Option<i64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let text = std::str::from_utf8(value).ok()?;
    i64::try_from(text.parse::<u64>().ok()?).ok()
}

/// A stored token: an integer from 0 to 2^63 − 1 in decimal.
pub(crate) fn parse_token(value: &[u8]) -> Option<i64> {
    magnitude(value)
}

/// A stored time: whole microseconds since the epoch, an optional `-` and digits, that a
/// timestamp can hold (years −262143 to 262142).
pub(crate) fn parse_time(value: &[u8]) -> Option<DateTime<Utc>> {
    let micros = match value.strip_prefix(b"-") {
        Some(digits) => -magnitude(digits)?,
        None => magnitude(value)?,
    };
    DateTime::from_timestamp_micros(micros)
}

/// What is wrong with `value` (its first bytes; `len` bytes in all) in `field`: the text of
/// [`Error::UnreadableRow`]'s problem, for a value the scripts refused or a read found.
pub(crate) fn problem(field: &str, value: &[u8], len: usize) -> String {
    let head = &value[..value.len().min(64)];
    let mut shown = format!("{:?}", String::from_utf8_lossy(head));
    if len > head.len() {
        shown.push_str(&format!("… ({len} bytes)"));
    }
    match field {
        "token" if parse_token(value) == Some(i64::MAX) => format!(
            "field `token` holds {}, the largest 64-bit token: no higher token can follow it",
            i64::MAX
        ),
        "token" => {
            format!("field `token` holds {shown}, which is not a 64-bit non-negative integer")
        }
        _ if value
            .strip_prefix(b"-")
            .map_or(magnitude(value), magnitude)
            .is_some() =>
        {
            format!("field `{field}` holds {shown}, which is past the times a timestamp can hold")
        }
        _ => format!(
            "field `{field}` holds {shown}, which is not a time (whole microseconds since 1970)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_by_the_scripts_rules() {
        for (value, token) in [
            ("0", Some(0)),
            ("007", Some(7)),
            ("9007199254740993", Some(9_007_199_254_740_993)),
            ("9223372036854775807", Some(i64::MAX)),
            ("9223372036854775808", None),
            ("1e300", None),
            ("nan", None),
            ("inf", None),
            ("-1", None),
            ("+1", None),
            (" 1", None),
            ("0x10", None),
            ("1.5", None),
            ("", None),
        ] {
            assert_eq!(parse_token(value.as_bytes()), token, "{value:?}");
        }
        assert_eq!(
            parse_time(b"-1"),
            DateTime::from_timestamp_micros(-1),
            "before 1970"
        );
        for bad in ["nan", "1e300", "", "-", "--1", "9223372036854775807"] {
            assert_eq!(parse_time(bad.as_bytes()), None, "{bad:?}");
        }
        assert!(problem("until", b"9223372036854775807", 19).contains("past the times"));
        assert!(problem("until", b"nan", 3).contains("not a time"));
        let long = problem("token", &[b'x'; 64], 1000);
        assert!(
            long.ends_with("(1000 bytes)") || long.contains("(1000 bytes)"),
            "{long}"
        );
    }
}
