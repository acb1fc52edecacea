//! [`LockConfiguration`]: what to lock, for how long, and for which tick.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// The longest lock name, in bytes (the `name` column is `VARCHAR(64)`).
pub const MAX_NAME_BYTES: usize = 64;

/// The longest `lock_at_most_for` or `lock_at_least_for` accepted: 1000 years.
///
/// Longer values would overflow date arithmetic in some databases (MySQL's `DATETIME` ends in
/// the year 9999); nothing real needs them.
pub const MAX_LOCK_DURATION: Duration = Duration::from_secs(1000 * 365 * 24 * 60 * 60);

/// The unit every lock duration is kept in: one millisecond, the finest every backend stores
/// (SQLite keeps times in milliseconds).
///
/// **The rule:** `lock_at_most_for`, `lock_at_least_for`, an [`extend`](crate::LockGuard::extend),
/// a keep-alive lease and a history retention are rounded **up** to a whole number of
/// milliseconds before anything else looks at them, so a lease is never shorter than asked and
/// every backend honours the same value: `Duration::from_millis(100) / 3` (33.333… ms) becomes
/// 34 ms, one nanosecond becomes 1 ms. Zero stays zero (and is refused where a lease must be
/// longer than zero). The macros apply the same rule at compile time.
pub const DURATION_RESOLUTION: Duration = Duration::from_millis(1);

/// `duration` rounded up to whole milliseconds ([`DURATION_RESOLUTION`]), saturating at
/// `Duration::MAX`'s last whole millisecond.
pub(crate) fn round_up_to_millis(duration: Duration) -> Duration {
    let sub_milli = duration.subsec_nanos() % 1_000_000;
    if sub_milli == 0 {
        return duration;
    }
    duration
        .checked_add(Duration::from_nanos(u64::from(1_000_000 - sub_milli)))
        .unwrap_or(duration - Duration::from_nanos(u64::from(sub_milli)))
}

/// A validated request for a lock: its name, how long it may be held at most, how long it is
/// kept at least, and optionally the cron tick it claims.
///
/// An invalid configuration cannot be built: [`LockConfiguration::new`] checks every field.
///
/// ```
/// use std::time::Duration;
/// use shedlock::LockConfiguration;
///
/// let cfg = LockConfiguration::new("nightly_report", Duration::from_secs(30 * 60), Duration::from_secs(10))?;
/// assert_eq!(cfg.name(), "nightly_report");
///
/// let err = LockConfiguration::new("nightly_report", Duration::ZERO, Duration::ZERO).unwrap_err();
/// assert!(err.to_string().contains("lock_at_most_for"));
/// # Ok::<(), shedlock::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockConfiguration {
    name: String,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
    tick: Option<DateTime<Utc>>,
}

impl LockConfiguration {
    /// Validates and builds a configuration.
    ///
    /// - `name`: 1 to [`MAX_NAME_BYTES`] bytes, no control characters, no leading or trailing
    ///   whitespace (MySQL compares `'a'` and `'a '` as equal, so such names could collide), no
    ///   bidirectional control or zero-width character ([`is_hidden_char`]: `report\u{202e}txt`
    ///   would show reversed), not `.` or `..` (a browser collapses them in a link).
    /// - `lock_at_most_for`: how long the lock is held if its holder dies without unlocking;
    ///   greater than zero, at most [`MAX_LOCK_DURATION`].
    /// - `lock_at_least_for`: the lock is kept at least this long after it was taken, even if
    ///   the job finishes sooner; at most `lock_at_most_for`.
    ///
    /// Both durations are rounded up to whole milliseconds first ([`DURATION_RESOLUTION`]);
    /// [`lock_at_most_for`](Self::lock_at_most_for) and
    /// [`lock_at_least_for`](Self::lock_at_least_for) return the rounded values, which are
    /// what every backend stores.
    pub fn new(
        name: impl Into<String>,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<Self> {
        let name = validate_name(name.into())?;
        let (lock_at_most_for, lock_at_least_for) =
            validate_durations(&name, lock_at_most_for, lock_at_least_for)?;
        Ok(Self {
            name,
            lock_at_most_for,
            lock_at_least_for,
            tick: None,
        })
    }

    /// Claims one cron tick with this lock: once any instance has acquired the lock for `tick`,
    /// no instance can acquire it again for the same tick (or an earlier one), however soon the
    /// first holder unlocks. Manual runs (no tick) are unaffected.
    ///
    /// The tick is stored with millisecond precision on SQLite and microsecond precision
    /// elsewhere; cron ticks are whole seconds.
    #[must_use]
    pub fn for_tick(mut self, tick: DateTime<Utc>) -> Self {
        self.tick = Some(tick);
        self
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long the lock is held at most, if never unlocked or extended.
    pub fn lock_at_most_for(&self) -> Duration {
        self.lock_at_most_for
    }

    /// How long the lock is kept at least after it was taken.
    pub fn lock_at_least_for(&self) -> Duration {
        self.lock_at_least_for
    }

    /// The tick this configuration claims, if any.
    pub fn tick(&self) -> Option<DateTime<Utc>> {
        self.tick
    }
}

/// Whether `c` is a character that changes how a name looks without being seen: the
/// bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which
/// reorder what follows (`report\u{202e}txt.exe` shows as `reportexe.txt`), and the zero-width
/// characters (U+200B to U+200D, U+2060, U+FEFF), which make two different names look the same.
/// A name carrying one is refused where names are made ([`LockConfiguration::new`], a
/// schedule's creation, `#[scheduler_lock]` at compile time); a front end that shows a name
/// written by someone else escapes them.
pub fn is_hidden_char(c: char) -> bool {
    crate::names::hidden(c)
}

/// Checks a lock name made now against the rules of [`LockConfiguration::new`]: those of a
/// name already stored ([`validate_existing_name`]), and no hidden character
/// ([`is_hidden_char`]), not `.` or `..`.
pub(crate) fn validate_name(name: String) -> Result<String> {
    let name = validate_existing_name(name)?;
    match crate::names::refusal(&name) {
        Some(reason) => Err(Error::InvalidLockName { name, reason }),
        None => Ok(name),
    }
}

/// Checks a name that may already be stored (a schedule to read, change or delete): 1 to
/// [`MAX_NAME_BYTES`] bytes, no control character, no leading or trailing whitespace. A name
/// an earlier version stored with a hidden character, or `.`, passes, so what was stored can
/// still be read and deleted.
pub(crate) fn validate_existing_name(name: String) -> Result<String> {
    if name.is_empty() {
        return Err(Error::EmptyLockName);
    }
    if name.len() > MAX_NAME_BYTES {
        let len = name.len();
        return Err(Error::LockNameTooLong {
            name,
            len,
            max: MAX_NAME_BYTES,
        });
    }
    if name.chars().any(char::is_control) {
        return Err(Error::InvalidLockName {
            name,
            reason: "contains a control character",
        });
    }
    if name.trim() != name {
        return Err(Error::InvalidLockName {
            name,
            reason: "has leading or trailing whitespace",
        });
    }
    Ok(name)
}

/// Checks a `lock_at_most_for` and `lock_at_least_for` pair (a configuration's or an
/// extension's) and returns them rounded up to whole milliseconds.
pub(crate) fn validate_durations(
    name: &str,
    at_most: Duration,
    at_least: Duration,
) -> Result<(Duration, Duration)> {
    if at_most.is_zero() {
        return Err(Error::ZeroLockAtMostFor { name: name.into() });
    }
    check_not_too_long(name, "lock_at_most_for", at_most)?;
    check_not_too_long(name, "lock_at_least_for", at_least)?;
    let (rounded_most, rounded_least) = (round_up_to_millis(at_most), round_up_to_millis(at_least));
    if rounded_least > rounded_most {
        return Err(Error::LockAtLeastForExceedsAtMostFor {
            name: name.into(),
            lock_at_least_for: at_least,
            lock_at_most_for: at_most,
        });
    }
    Ok((rounded_most, rounded_least))
}

fn check_not_too_long(name: &str, field: &'static str, value: Duration) -> Result<()> {
    if round_up_to_millis(value) > MAX_LOCK_DURATION {
        return Err(Error::DurationTooLong {
            name: name.into(),
            field,
            value,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn each_invalid_field_has_its_own_error_naming_field_and_value() {
        assert!(matches!(
            LockConfiguration::new("", S, S),
            Err(Error::EmptyLockName)
        ));
        let long = "x".repeat(65);
        let err = LockConfiguration::new(long.clone(), S, S).unwrap_err();
        assert!(matches!(&err, Error::LockNameTooLong { len: 65, .. }));
        assert!(err.to_string().contains("65 bytes"), "{err}");
        assert!(err.to_string().contains(&long), "{err}");

        let err = LockConfiguration::new("job", Duration::ZERO, Duration::ZERO).unwrap_err();
        assert!(matches!(&err, Error::ZeroLockAtMostFor { .. }));
        assert!(err.to_string().contains("`lock_at_most_for`"), "{err}");

        let err = LockConfiguration::new("job", S, 2 * S).unwrap_err();
        assert!(matches!(&err, Error::LockAtLeastForExceedsAtMostFor { .. }));
        let text = err.to_string();
        assert!(text.contains("`lock_at_least_for` (2s)"), "{text}");
        assert!(text.contains("`lock_at_most_for` (1s)"), "{text}");

        let err = LockConfiguration::new("job", MAX_LOCK_DURATION + S, S).unwrap_err();
        assert!(matches!(
            &err,
            Error::DurationTooLong {
                field: "lock_at_most_for",
                ..
            }
        ));
    }

    #[test]
    fn names_at_the_limit_unicode_and_sql_are_accepted_verbatim() {
        let at_limit = "n".repeat(MAX_NAME_BYTES);
        assert_eq!(
            LockConfiguration::new(at_limit.clone(), S, S)
                .unwrap()
                .name(),
            at_limit
        );
        // 16 four-byte characters = 64 bytes; one more is over.
        let emoji = "🦀".repeat(16);
        assert!(LockConfiguration::new(emoji.clone(), S, S).is_ok());
        assert!(LockConfiguration::new(format!("{emoji}a"), S, S).is_err());
        let sql = "x'; DROP TABLE shedlock; --";
        assert_eq!(LockConfiguration::new(sql, S, S).unwrap().name(), sql);
    }

    #[test]
    fn names_that_could_collide_or_break_storage_are_refused() {
        for bad in ["job ", " job", "job\n", "a\0b"] {
            let err = LockConfiguration::new(bad, S, S).unwrap_err();
            assert!(
                matches!(err, Error::InvalidLockName { .. }),
                "{bad:?}: {err}"
            );
        }
    }

    /// Issue 46: a name that shows otherwise than it is, or that a link collapses, is refused
    /// where it is made; what was stored with one can still be named to read or delete it.
    #[test]
    fn names_that_look_otherwise_or_collapse_in_a_link_are_refused() {
        for bad in [
            "report\u{202e}txt.exe",
            "a\u{200b}b",
            "\u{feff}job",
            "job\u{2066}",
            "x\u{061c}y",
            ".",
            "..",
        ] {
            let err = LockConfiguration::new(bad, S, S).unwrap_err();
            assert!(
                matches!(err, Error::InvalidLockName { .. }),
                "{bad:?}: {err}"
            );
            assert!(
                !err.to_string().contains('\u{202e}'),
                "shown escaped: {err}"
            );
            assert_eq!(validate_existing_name(bad.to_owned()).unwrap(), bad);
        }
        let err = LockConfiguration::new("report\u{202e}txt.exe", S, S).unwrap_err();
        assert!(
            err.to_string().contains(r"report\u{202e}txt.exe")
                && err
                    .to_string()
                    .contains("bidirectional control or zero-width"),
            "{err}"
        );
        for good in ["...", ".job", "a.b", "é", "שלום", "🦀"] {
            assert!(LockConfiguration::new(good, S, S).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn durations_are_rounded_up_to_whole_milliseconds() {
        let third = Duration::from_millis(100) / 3;
        let cfg = LockConfiguration::new("job", third, third).unwrap();
        assert_eq!(cfg.lock_at_most_for(), Duration::from_millis(34));
        assert_eq!(cfg.lock_at_least_for(), Duration::from_millis(34));
        let tiny = LockConfiguration::new("job", Duration::from_nanos(1), Duration::ZERO).unwrap();
        assert_eq!(tiny.lock_at_most_for(), Duration::from_millis(1));
        assert_eq!(tiny.lock_at_least_for(), Duration::ZERO);
        // Compared after rounding: 1.5 ms and 2 ms are both 2 ms.
        let cfg = LockConfiguration::new(
            "job",
            Duration::from_micros(1500),
            2 * Duration::from_millis(1),
        )
        .unwrap();
        assert_eq!(cfg.lock_at_most_for(), cfg.lock_at_least_for());
        assert!(
            LockConfiguration::new("job", Duration::from_millis(2), Duration::from_micros(2001))
                .is_err()
        );
        assert_eq!(
            round_up_to_millis(Duration::MAX).subsec_nanos() % 1_000_000,
            0
        );
        assert!(matches!(
            LockConfiguration::new("job", Duration::MAX, Duration::MAX),
            Err(Error::DurationTooLong { .. })
        ));
        assert!(
            LockConfiguration::new("job", MAX_LOCK_DURATION, MAX_LOCK_DURATION).is_ok(),
            "the limit itself is a whole millisecond"
        );
        assert!(matches!(
            LockConfiguration::new("job", MAX_LOCK_DURATION + Duration::from_nanos(1), S),
            Err(Error::DurationTooLong { .. })
        ));
    }

    #[test]
    fn equal_durations_and_zero_at_least_are_fine() {
        assert!(LockConfiguration::new("job", S, S).is_ok());
        assert!(LockConfiguration::new("job", S, Duration::ZERO).is_ok());
        assert!(LockConfiguration::new("job", Duration::from_millis(1), Duration::ZERO).is_ok());
        let hundred_years = Duration::from_secs(100 * 365 * 24 * 3600);
        assert!(LockConfiguration::new("job", hundred_years, Duration::ZERO).is_ok());
    }
}
