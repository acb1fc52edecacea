//! Lock durations, written either in [humantime](https://docs.rs/humantime) form (`30m`,
//! `1h 30m`, `500ms`) or as an ISO-8601 duration in the style of Java's `Duration.parse`
//! (`PT30M`, `PT1H30M`, `PT0.5S`, `P1DT2H`).
//!
//! Years and months have no fixed length, so neither form accepts them.

use std::fmt;
use std::time::Duration;

/// The longest lock duration: 1000 years of 365 days. The same value as the runtime's
/// `shedlock::settings::MAX_LOCK_DURATION` (this crate cannot depend on `shedlock`).
pub(crate) const MAX: Duration = Duration::from_secs(1000 * 365 * 24 * 60 * 60);

/// How [`MAX`] reads in messages.
pub(crate) const MAX_TEXT: &str = "1000 years (365000 days)";

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Error {
    /// Neither form parses; the detail says what is wrong.
    Invalid(String),
    /// A unit without a fixed length: `"years"` or `"months"`.
    NoFixedLength(&'static str),
    /// Longer than [`MAX`].
    TooLong,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid(detail) => f.write_str(detail),
            Error::NoFixedLength(unit) => {
                let instead = if *unit == "years" {
                    "\"P365D\" or \"365d\""
                } else {
                    "\"P30D\" or \"30d\""
                };
                write!(
                    f,
                    "{unit} have no fixed length, so they cannot measure a lock; write days \
                     instead, such as {instead}"
                )
            }
            Error::TooLong => write!(f, "it is longer than {MAX_TEXT}, the limit"),
        }
    }
}

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Parses a lock duration and rounds it **up** to whole milliseconds, the rule the runtime
/// applies too (`shedlock::settings::DURATION_RESOLUTION`: every backend stores milliseconds, and a lease
/// is never shorter than asked), so that `"1500us"` and `"2ms"` compare as equal here exactly
/// as they do in `LockConfiguration::new`. Zero is accepted here (the caller decides whether it
/// may be zero); anything longer than [`MAX`] once rounded is [`Error::TooLong`].
pub(crate) fn parse(text: &str) -> Result<Duration, Error> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(Error::Invalid("it is empty".into()));
    }
    let unsigned = trimmed.strip_prefix('+').unwrap_or(trimmed);
    if unsigned.starts_with('-') {
        return Err(negative());
    }
    let duration = if unsigned.starts_with(['P', 'p']) {
        parse_iso(&unsigned[1..])?
    } else {
        parse_humantime(trimmed)?
    };
    let duration = round_up_to_millis(duration).ok_or(Error::TooLong)?;
    if duration > MAX {
        return Err(Error::TooLong);
    }
    Ok(duration)
}

/// `duration` rounded up to a whole number of milliseconds; `None` past `Duration::MAX`.
fn round_up_to_millis(duration: Duration) -> Option<Duration> {
    match duration.subsec_nanos() % 1_000_000 {
        0 => Some(duration),
        sub_milli => duration.checked_add(Duration::from_nanos(u64::from(1_000_000 - sub_milli))),
    }
}

fn negative() -> Error {
    Error::Invalid("a lock duration cannot be negative".into())
}

/// humantime, minus its `M`/`months` and `y`/`years` units (which it defines as 30.44 and
/// 365.25 days).
fn parse_humantime(text: &str) -> Result<Duration, Error> {
    let duration = humantime::parse_duration(text).map_err(|e| match e {
        humantime::DurationError::NumberOverflow => Error::TooLong,
        other => Error::Invalid(other.to_string()),
    })?;
    for unit in text.split(|c: char| !c.is_alphabetic()) {
        match unit {
            "M" | "month" | "months" => return Err(Error::NoFixedLength("months")),
            "y" | "yr" | "yrs" | "year" | "years" => return Err(Error::NoFixedLength("years")),
            _ => {}
        }
    }
    Ok(duration)
}

/// `[nW][nD][T[nH][nM][n[.f]S]]`, the part after the `P`, case-insensitive. Components come in
/// that order, each at most once; only seconds take a fraction (up to 9 digits).
fn parse_iso(after_p: &str) -> Result<Duration, Error> {
    let invalid = |detail: String| Err(Error::Invalid(detail));
    if after_p.is_empty() {
        return invalid("an ISO-8601 duration needs at least one component after `P`".into());
    }
    let mut rest = after_p;
    let mut in_time = false;
    // The rank of the last component read, to enforce order and uniqueness.
    let mut last_rank = 0;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        if let Some(after_t) = rest.strip_prefix(['T', 't']) {
            if in_time {
                return invalid("`T` appears twice".into());
            }
            if after_t.is_empty() {
                return invalid(
                    "`T` must be followed by hours, minutes or seconds, as in `PT30M`".into(),
                );
            }
            in_time = true;
            rest = after_t;
            continue;
        }
        if rest.starts_with('-') {
            return Err(negative());
        }
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let digits = &rest[..digits_end];
        if digits.is_empty() {
            return invalid(format!("expected a number at `{rest}`"));
        }
        rest = &rest[digits_end..];
        let mut fraction = None;
        if let Some(after_point) = rest.strip_prefix(['.', ',']) {
            let end = after_point
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after_point.len());
            fraction = Some(&after_point[..end]);
            rest = &after_point[end..];
        }
        let Some(unit) = rest.chars().next() else {
            return invalid(format!("the number `{digits}` has no unit"));
        };
        rest = &rest[unit.len_utf8()..];
        let (rank, unit_secs) = match (in_time, unit.to_ascii_uppercase()) {
            (false, 'Y') => return Err(Error::NoFixedLength("years")),
            (false, 'M') => return Err(Error::NoFixedLength("months")),
            (false, 'W') => (1, 7 * 24 * 60 * 60),
            (false, 'D') => (2, 24 * 60 * 60),
            (true, 'H') => (3, 60 * 60),
            (true, 'M') => (4, 60),
            (true, 'S') => (5, 1),
            (false, 'H' | 'S') => {
                return invalid(format!(
                    "`{unit}` belongs after `T`, as in `PT1H30M` or `P1DT2H`"
                ));
            }
            (true, 'W' | 'D' | 'Y') => {
                return invalid(format!("`{unit}` belongs before `T`, as in `P1DT2H`"));
            }
            _ => return invalid(format!("unknown unit `{unit}`")),
        };
        if rank <= last_rank {
            return invalid("components must come once each, in the order W, D, T, H, M, S".into());
        }
        last_rank = rank;
        let whole: u128 = digits.parse().map_err(|_| Error::TooLong)?;
        let mut nanos = whole
            .checked_mul(unit_secs * NANOS_PER_SEC)
            .ok_or(Error::TooLong)?;
        if let Some(fraction) = fraction {
            if rank != 5 {
                return invalid("only seconds may have a fraction, as in `PT0.5S`".into());
            }
            if fraction.is_empty() || fraction.len() > 9 {
                return invalid("a fraction of a second has 1 to 9 digits, as in `PT0.5S`".into());
            }
            let scale = 10u128.pow(9 - fraction.len() as u32);
            let value = fraction
                .bytes()
                .fold(0u128, |acc, digit| acc * 10 + u128::from(digit - b'0'));
            nanos += value * scale;
        }
        total = total.checked_add(nanos).ok_or(Error::TooLong)?;
    }
    let secs = u64::try_from(total / NANOS_PER_SEC).map_err(|_| Error::TooLong)?;
    let subsec = (total % NANOS_PER_SEC) as u32;
    Ok(Duration::new(secs, subsec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn humantime_forms() {
        assert_eq!(parse("30m"), Ok(secs(30 * 60)));
        assert_eq!(parse("1h 30m"), Ok(secs(90 * 60)));
        assert_eq!(parse("1h30m"), Ok(secs(90 * 60)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2days 1s"), Ok(secs(2 * 86_400 + 1)));
        assert_eq!(parse("1w"), Ok(secs(7 * 86_400)));
        assert_eq!(parse("  10s  "), Ok(secs(10)));
    }

    #[test]
    fn iso_forms() {
        assert_eq!(parse("PT30M"), Ok(secs(30 * 60)));
        assert_eq!(parse("PT1H30M"), Ok(secs(90 * 60)));
        assert_eq!(parse("P1DT2H"), Ok(secs(86_400 + 2 * 3600)));
        assert_eq!(parse("P2D"), Ok(secs(2 * 86_400)));
        assert_eq!(parse("P1W"), Ok(secs(7 * 86_400)));
        assert_eq!(parse("PT10S"), Ok(secs(10)));
        assert_eq!(parse("pt1h"), Ok(secs(3600)));
        assert_eq!(parse("+PT1S"), Ok(secs(1)));
        assert_eq!(parse("P1DT1H1M1S"), Ok(secs(86_400 + 3600 + 60 + 1)));
    }

    #[test]
    fn iso_fractional_seconds() {
        assert_eq!(parse("PT0.5S"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("PT0,25S"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("PT1.000000001S"), Ok(Duration::from_millis(1001)));
        assert_eq!(parse("PT0.0005S"), Ok(Duration::from_millis(1)));
        assert_eq!(parse("PT1M0.1S"), Ok(Duration::from_millis(60_100)));
        assert!(matches!(parse("PT0.0000000001S"), Err(Error::Invalid(_))));
        assert!(matches!(parse("PT1.S"), Err(Error::Invalid(_))));
        assert!(matches!(parse("PT1.5M"), Err(Error::Invalid(_))));
    }

    #[test]
    fn years_and_months_are_refused() {
        assert_eq!(parse("P1Y"), Err(Error::NoFixedLength("years")));
        assert_eq!(parse("P1M"), Err(Error::NoFixedLength("months")));
        assert_eq!(parse("P1Y2M3D"), Err(Error::NoFixedLength("years")));
        assert_eq!(parse("1M"), Err(Error::NoFixedLength("months")));
        assert_eq!(parse("2 months"), Err(Error::NoFixedLength("months")));
        assert_eq!(parse("1y"), Err(Error::NoFixedLength("years")));
        assert_eq!(parse("1year 2d"), Err(Error::NoFixedLength("years")));
        // Minutes, not months, after the `T`.
        assert_eq!(parse("PT1M"), Ok(secs(60)));
        let message = Error::NoFixedLength("months").to_string();
        assert!(message.contains("no fixed length"), "{message}");
    }

    #[test]
    fn sub_millisecond_durations_round_up_to_whole_milliseconds() {
        assert_eq!(parse("1ns"), Ok(Duration::from_millis(1)));
        assert_eq!(parse("1500us"), Ok(Duration::from_millis(2)));
        assert_eq!(parse("2ms"), Ok(Duration::from_millis(2)));
        assert_eq!(parse("33ms 333us 333ns"), Ok(Duration::from_millis(34)));
        assert_eq!(parse("1s 1ns"), Ok(Duration::from_millis(1001)));
    }

    #[test]
    fn zero_parses_as_zero() {
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("PT0S"), Ok(Duration::ZERO));
        assert_eq!(parse("P0D"), Ok(Duration::ZERO));
    }

    #[test]
    fn garbage_is_refused() {
        for text in [
            "",
            "   ",
            "abc",
            "30",
            "30 minutes please",
            "P",
            "PT",
            "PTS",
            "P1H",
            "PT1D",
            "P1DT",
            "PT30M garbage",
            "PT1M1H",
            "PT1S1S",
            "P1D1W",
            "PT1HT1M",
            "P1X",
            "-30m",
            "-PT1S",
            "P-1D",
            "PT1H-1M",
            "1h -",
            "P1DT2H3",
        ] {
            assert!(
                matches!(parse(text), Err(Error::Invalid(_))),
                "{text:?} gave {:?}",
                parse(text)
            );
        }
    }

    #[test]
    fn over_1000_years_is_refused() {
        assert_eq!(parse("P365000D"), Ok(MAX));
        assert_eq!(parse("365000d"), Ok(MAX));
        assert_eq!(parse("P365000DT0.000000001S"), Err(Error::TooLong));
        assert_eq!(parse("P365001D"), Err(Error::TooLong));
        assert_eq!(parse("365001d"), Err(Error::TooLong));
        assert_eq!(
            parse("P99999999999999999999999999999999999999999D"),
            Err(Error::TooLong)
        );
        assert_eq!(parse("PT18446744073709551616S"), Err(Error::TooLong));
        assert_eq!(parse("99999999999999999999999h"), Err(Error::TooLong));
    }
}
