//! `#[scheduled]`'s time rules beyond its cron line: `exclude`, `on_excluded`, `start`, `end`
//! and `max_runs`, checked at compile time as `shedlock::schedules::TimeRules::check` checks
//! them at run time, each mistake an error on the value (or key) at fault. A calendar's name is
//! checked by `names.rs` (a link to `shedlock/src/names.rs`, the rule `check_name` uses); the
//! rest of the rules live in `shedlock/src/cron/time_rules.rs`, which needs that crate's types
//! and so cannot be linked here: what this file repeats of it says so where it does.

use chrono::{DateTime, SecondsFormat, Utc};
use syn::LitStr;

use crate::args::{Errors, IntArg, Key, StrArg, StrListArg, kw};

/// The most runs `max_runs` may ask for: `shedlock::schedules::MAX_RUNS` (in
/// `shedlock/src/cron/time_rules.rs`), repeated here; `tests/macro_runtime.rs` holds the two
/// equal.
const MAX_RUNS: u32 = 10_000;

/// What becomes of an excluded tick: the name the attribute takes and the variant of
/// `shedlock::schedules::OnExcluded` it is (whose `FromStr`, for the command line, also takes
/// `prev` and any case; the attribute takes these names only).
const ON_EXCLUDED: [(&str, &str); 3] =
    [("skip", "Skip"), ("next", "Next"), ("previous", "Previous")];

/// `#[scheduled]`'s time rules, checked; each `None` or empty when not given.
#[derive(Default)]
pub(crate) struct TimeRules {
    /// The calendars whose entries exclude ticks, each named once.
    pub(crate) exclude: Vec<LitStr>,
    /// The `OnExcluded` variant an excluded tick follows (`"Next"`), when given.
    pub(crate) on_excluded: Option<&'static str>,
    /// No run before this instant.
    pub(crate) start: Option<DateTime<Utc>>,
    /// No run after this instant (after `start`).
    pub(crate) end: Option<DateTime<Utc>>,
    /// At most this many runs from `start` (1 to [`MAX_RUNS`]; `start` is given).
    pub(crate) max_runs: Option<u32>,
}

impl TimeRules {
    /// Whether no rule was given.
    pub(crate) fn is_empty(&self) -> bool {
        self.exclude.is_empty()
            && self.on_excluded.is_none()
            && self.start.is_none()
            && self.end.is_none()
            && self.max_runs.is_none()
    }
}

/// The arguments that give the time rules, as written.
pub(crate) struct Given<'a> {
    pub(crate) exclude: Option<&'a StrListArg<kw::exclude>>,
    pub(crate) on_excluded: Option<&'a StrArg<kw::on_excluded>>,
    pub(crate) start: Option<&'a StrArg<kw::start>>,
    pub(crate) end: Option<&'a StrArg<kw::end>>,
    pub(crate) max_runs: Option<&'a IntArg<kw::max_runs>>,
}

/// The rules `given`, each checked on its own (every mistake pushed to `errors`, spanned on
/// the value or key at fault); what is wrong is left out of the answer.
pub(crate) fn check(given: Given<'_>, errors: &mut Errors) -> TimeRules {
    let mut rules = TimeRules::default();
    if let Some(arg) = given.exclude {
        if arg.value.items.is_empty() {
            errors.push(syn::Error::new(
                arg.value.span,
                "`exclude = []` names no calendar: name one, such as `exclude = \"kr-holidays\"`, \
                 or leave `exclude` out",
            ));
        }
        for lit in &arg.value.items {
            let name = lit.value();
            if let Some(reason) = crate::names::calendar_name_refusal(&name) {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!("invalid calendar name {name:?} in `exclude`: {reason}"),
                ));
            } else if rules.exclude.iter().any(|seen| seen.value() == name) {
                errors.push(syn::Error::new(
                    lit.span(),
                    format!("calendar {name:?} is named twice in `exclude`; name each once"),
                ));
            } else {
                rules.exclude.push(lit.clone());
            }
        }
    }
    if let Some(arg) = given.on_excluded {
        let text = arg.value.value();
        match ON_EXCLUDED.iter().find(|(name, _)| *name == text) {
            None => errors.push(syn::Error::new(
                arg.value.span(),
                format!(
                    "unknown on_excluded {text:?}: write \"skip\" (an excluded tick does not run; \
                     the default), \"next\" (it runs at the first instant after the excluded \
                     span) or \"previous\" (it runs one second before the span)"
                ),
            )),
            Some(_) if given.exclude.is_none() => errors.push(syn::Error::new(
                arg.key.span(),
                "`on_excluded` says what becomes of a tick a calendar excludes, but no calendar \
                 is named: add `exclude = \"kr-holidays\"`, or drop `on_excluded`",
            )),
            Some((_, variant)) => rules.on_excluded = Some(variant),
        }
    }
    rules.start = given
        .start
        .and_then(|arg| errors.ok(instant(&arg.value, kw::start::NAME)));
    rules.end = given
        .end
        .and_then(|arg| errors.ok(instant(&arg.value, kw::end::NAME)));
    if let (Some(start), Some(end), Some(arg)) = (rules.start, rules.end, given.end)
        && start >= end
    {
        errors.push(syn::Error::new(
            arg.value.span(),
            format!(
                "`end` ({}) is not after `start` ({}): the job runs from its start to its end; \
                 give an end after the start",
                shown(end),
                shown(start)
            ),
        ));
        rules.end = None;
    }
    if let Some(arg) = given.max_runs {
        match arg.value.base10_parse::<u32>() {
            Ok(runs) if (1..=MAX_RUNS).contains(&runs) => match given.start {
                Some(_) => rules.max_runs = Some(runs),
                None => errors.push(syn::Error::new(
                    arg.value.span(),
                    "`max_runs` counts the schedule's instants from the job's start: add \
                     `start = \"2026-12-01T00:00:00Z\"` (the first instant a run may come at) too",
                )),
            },
            _ => errors.push(syn::Error::new(
                arg.value.span(),
                format!(
                    "max_runs is {}: give 1 to {MAX_RUNS} (a longer series is an `end` instant)",
                    arg.value.base10_digits()
                ),
            )),
        }
    }
    rules
}

/// `lit` (key `key`'s value) as an RFC 3339 instant, in UTC.
fn instant(lit: &LitStr, key: &str) -> syn::Result<DateTime<Utc>> {
    let text = lit.value();
    let at = DateTime::parse_from_rfc3339(&text)
        .map_err(|e| {
            syn::Error::new(
                lit.span(),
                format!(
                    "`{key} = {text:?}` is not an RFC 3339 instant ({e}): write a date, a time \
                     and an offset, such as \"2026-12-01T00:00:00Z\" or \
                     \"2026-12-01T09:00:00+09:00\""
                ),
            )
        })?
        .with_timezone(&Utc);
    // chrono reads `:60` as a leap second (a nanosecond part past one second), which the
    // expansion's `DateTime::from_timestamp` would take only on some instants.
    if at.timestamp_subsec_nanos() >= 1_000_000_000 {
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`{key} = {text:?}` is a leap second (:60): write :59, or the next minute's :00"
            ),
        ));
    }
    Ok(at)
}

/// An instant as the messages write it: RFC 3339 in UTC.
fn shown(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_read_in_utc_and_leap_seconds_refused() {
        let lit = |s: &str| LitStr::new(s, proc_macro2::Span::call_site());
        let at = instant(&lit("2026-12-01T09:00:00+09:00"), "start").unwrap();
        assert_eq!(shown(at), "2026-12-01T00:00:00Z");
        let at = instant(&lit("2026-12-01T00:00:00.25Z"), "start").unwrap();
        assert_eq!(at.timestamp_subsec_nanos(), 250_000_000);
        let e = instant(&lit("2026-12-31T23:59:60Z"), "end").unwrap_err();
        assert!(e.to_string().contains("leap second"), "{e}");
        let e = instant(&lit("2026-12-01"), "start").unwrap_err();
        assert!(e.to_string().contains("not an RFC 3339 instant"), "{e}");
    }
}
