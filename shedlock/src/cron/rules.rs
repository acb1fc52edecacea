//! The rules a schedule is checked by, written once for both places that check one: the
//! macros, at compile time (`#[scheduled]`), and the runtime (`Schedule::parse`). This file
//! is `shedlock/src/cron/rules.rs`; `shedlock-macros/src/rules.rs` is a link to it, so the
//! two cannot disagree. It names no type of either crate: each turns the messages into its own
//! errors.
// Each crate uses what it needs of these.
#![allow(dead_code)]

use std::str::FromStr;

use chrono::Utc;
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// What a cron expression is made of, for messages.
pub(crate) const CRON_FIELDS: &str = "write 5 fields (minute hour day-of-month month \
     day-of-week), or 6 with a leading seconds field, such as \"0 */15 * * * *\"";

/// What a time zone is, for messages.
pub(crate) const TIME_ZONE_HINT: &str =
    "write an IANA time zone name, such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\"";

/// The cron parser: seconds optional, everything else croner's defaults.
pub(crate) fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).build()
}

/// `expression` parsed, or why not, with what a cron expression is made of: croner's own
/// refusal; a step past the largest value of its field (`0 */61 * * * *`, which croner takes
/// and which fires once an hour); an expression no time matches from now on in `time_zone`
/// (the 31st of February, a year that has passed).
pub(crate) fn parse_cron(expression: &str, time_zone: Tz) -> Result<Cron, String> {
    let cron = parser().parse(expression).map_err(|e| {
        let reason = e.to_string();
        format!("{}; {CRON_FIELDS}", reason.trim_end_matches('.'))
    })?;
    check_steps(expression)?;
    if cron
        .find_next_occurrence(&Utc::now().with_timezone(&time_zone), false)
        .is_err()
    {
        return Err(
            "it never fires from now on: no time matches it (a day that month does not have, \
             or a year that has passed)"
                .to_owned(),
        );
    }
    Ok(cron)
}

/// Each field's name and largest value, for 5, 6 or 7 fields.
fn fields(count: usize) -> &'static [(&'static str, u32)] {
    const SIX: [(&str, u32); 7] = [
        ("seconds", 59),
        ("minute", 59),
        ("hour", 23),
        ("day-of-month", 31),
        ("month", 12),
        ("day-of-week", 7),
        ("year", u32::MAX),
    ];
    match count {
        5 => &SIX[1..6],
        6 => &SIX[..6],
        _ => &SIX,
    }
}

/// Refuses a step (`*/N`, `A-B/N`, `A/N`) larger than its field's largest value: it fires only
/// at the first value of the range, not what `/N` reads as.
fn check_steps(expression: &str) -> Result<(), String> {
    let parts: Vec<&str> = expression.split_whitespace().collect();
    for (text, (field, max)) in parts.iter().zip(fields(parts.len())) {
        for item in text.split(',') {
            let Some((_, step)) = item.split_once('/') else {
                continue;
            };
            let Ok(step) = step.parse::<u32>() else {
                continue; // croner names what it cannot read
            };
            if step > *max {
                return Err(format!(
                    "the step /{step} of the {field} field ({item:?}) is larger than its largest \
                     value, {max}: it would fire only at the start of the range; {CRON_FIELDS}"
                ));
            }
        }
    }
    Ok(())
}

/// `name` as a time zone, or why not: that it is unknown, with the closest known name when one
/// is close, and what a time zone name is.
pub(crate) fn parse_time_zone(name: &str) -> Result<Tz, String> {
    Tz::from_str(name).map_err(|_| {
        let suggestion = closest_time_zone(name)
            .map(|s| format!(" (did you mean {s:?}?)"))
            .unwrap_or_default();
        format!("unknown time zone {name:?}{suggestion}; {TIME_ZONE_HINT}")
    })
}

/// The known time zone name closest to `name` (case-insensitive), if any is close.
fn closest_time_zone(name: &str) -> Option<&'static str> {
    let wanted = name.to_ascii_lowercase();
    chrono_tz::TZ_VARIANTS
        .iter()
        .map(|tz| tz.name())
        .map(|candidate| {
            (
                edit_distance(&wanted, &candidate.to_ascii_lowercase()),
                candidate,
            )
        })
        .filter(|&(distance, _)| distance <= 3.min(wanted.len() / 3))
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance over chars (also the operator layer's closest-name hint).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_past_their_field_are_refused() {
        for (bad, field) in [
            ("0 */61 * * * *", "minute"),
            ("*/60 * * * * *", "seconds"),
            ("0 */24 * * *", "hour"),
            ("0 0 1 */13 *", "month"),
        ] {
            let e = parse_cron(bad, Tz::UTC).unwrap_err();
            assert!(e.contains(field) && e.contains("larger than"), "{bad}: {e}");
        }
        for good in [
            "0 */59 * * * *",
            "*/15 * * * *",
            "0 0 */2 * *",
            "0 0 0 1 */12 *",
        ] {
            assert!(parse_cron(good, Tz::UTC).is_ok(), "{good}");
        }
    }

    #[test]
    fn unknown_time_zones_name_the_closest() {
        let e = parse_time_zone("Europe/Berln").unwrap_err();
        assert!(e.contains("did you mean \"Europe/Berlin\"?"), "{e}");
        let e = parse_time_zone("Nowhere").unwrap_err();
        assert!(!e.contains("did you mean") && e.contains("IANA"), "{e}");
        assert!(parse_time_zone("Asia/Seoul").is_ok());
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("utc", "utc"), 0);
    }

    #[test]
    fn messages_say_what_a_cron_expression_is() {
        let e = parse_cron("61 * * * *", Tz::UTC).unwrap_err();
        assert!(e.contains("5 fields (minute hour"), "{e}");
        let e = parse_cron("0 0 0 31 2 *", Tz::UTC).unwrap_err();
        assert!(e.contains("never fires"), "{e}");
    }
}
