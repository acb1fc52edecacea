//! `#[scheduled]`: its arguments, and every compile-time check of them and of the function it
//! sits on, giving a [`ScheduledFn`] or a `syn::Error` spanned on the offending token.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::Parser;
use syn::{Attribute, FnArg, Ident, ItemFn, LitStr, Pat, Type};

use crate::args::{self, Arguments, Errors};
use crate::scheduler_lock::{LockedFn, check_async};

/// A validated `#[scheduled]` function.
pub(crate) struct ScheduledFn {
    /// The function as written (still carrying its `#[scheduler_lock]`).
    pub(crate) func: ItemFn,
    /// The cron expression, checked with the runtime's parser settings.
    pub(crate) cron: LitStr,
    /// The IANA time zone name, checked against chrono-tz.
    pub(crate) time_zone: LitStr,
    /// The parameters, each a plain `name: Type`.
    pub(crate) params: Vec<(Ident, Type)>,
    /// The index in `params` of the one whose type is `Interval` (`shedlock::scheduler::
    /// Interval`, matched by its last path segment), if any: the scheduler fills it with the
    /// span each run covers, so `job(…)` does not take it.
    pub(crate) interval: Option<usize>,
    /// Its `#[scheduler_lock]`, parsed; `None` when the attribute is missing or not valid (it
    /// reports why when it expands). A name with `{param}` placeholders names the job too. When
    /// both durations are literals, `#[scheduled]` expands the attribute itself, so `job(…)`
    /// declares the lock and hands each run the scheduler's claim as an argument
    /// (`__private::claimed_job`); a duration given as an expression is evaluated on each call.
    pub(crate) declared_lock: Option<LockedFn>,
    /// The function has a `#[scheduler_lock]` that does not parse: it reports why when it
    /// expands, so `job(…)` does not call the function (whose signature that attribute would
    /// have changed), which would add a second, confusing type error to the first.
    pub(crate) lock_invalid: bool,
    /// Its overlap policy (`overlap = "…"` with its bounds), checked by the runtime's rules
    /// (`crate::overlap`, the same file as `shedlock::Overlap`'s); `Skip` when not given.
    pub(crate) overlap: crate::overlap::Overlap,
    /// `pause_after_failures = N` (at least 1), if given.
    pub(crate) pause_after_failures: Option<u32>,
    /// Its time rules (`exclude`, `on_excluded`, `start`, `end`, `max_runs`), checked by the
    /// runtime's rules (`crate::time_rules`).
    pub(crate) time_rules: crate::time_rules::TimeRules,
    /// What it promises (`expect_success_within`, `max_runtime`, `late_after`,
    /// `failures_in_a_row`, `paused_longer_than`), each duration parsed as the lock's are.
    pub(crate) deadlines: Deadlines,
}

/// `#[scheduled]`'s deadlines, checked: each duration above zero, the count at least 1.
#[derive(Default)]
pub(crate) struct Deadlines {
    pub(crate) expect_success_within: Option<std::time::Duration>,
    pub(crate) max_runtime: Option<std::time::Duration>,
    pub(crate) late_after: Option<std::time::Duration>,
    pub(crate) failures_in_a_row: Option<u32>,
    pub(crate) paused_longer_than: Option<std::time::Duration>,
    /// `on_overrun = "cancel"`: a run past `max_runtime` is cancelled.
    pub(crate) cancel_overrun: bool,
}

/// A deadline's duration literal: parsed (humantime or ISO-8601, as the lock's durations) and
/// above zero, or an error spanned on it.
fn deadline(
    arg: Option<&args::StrArg<impl args::Key>>,
    what: &str,
) -> syn::Result<Option<std::time::Duration>> {
    let Some(arg) = arg else {
        return Ok(None);
    };
    let text = arg.value.value();
    match crate::duration::parse(&text) {
        Ok(d) if d.is_zero() => Err(syn::Error::new(
            arg.value.span(),
            format!("{what} is zero: give a duration above zero such as \"1h\", or leave it out"),
        )),
        Ok(d) => Ok(Some(d)),
        Err(error) => Err(syn::Error::new(
            arg.value.span(),
            format!("{what} = {text:?} is not a duration: {error}"),
        )),
    }
}

args::arguments! {
    /// The raw arguments of `#[scheduled(...)]`.
    struct ScheduledArgs for "#[scheduled]" {
        cron: StrArg,
        time_zone: StrArg,
        overlap: StrArg,
        buffer_limit: IntArg,
        max_running: IntArg,
        when_full: StrArg,
        pause_after_failures: IntArg,
        exclude: StrListArg,
        on_excluded: StrArg,
        start: StrArg,
        end: StrArg,
        max_runs: IntArg,
        expect_success_within: StrArg,
        max_runtime: StrArg,
        late_after: StrArg,
        failures_in_a_row: IntArg,
        paused_longer_than: StrArg,
        on_overrun: StrArg,
    }
}

impl ScheduledFn {
    /// Parses `#[scheduled(args)]` on `item`, reporting every independent error at once.
    pub(crate) fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Self> {
        let func: ItemFn = syn::parse2(item)?;
        let mut errors = Errors::default();

        let args = errors.ok(args::parse_list::<ScheduledArgs>.parse2(args));
        let mut cron = None;
        let mut time_zone = None;
        let mut overlap = crate::overlap::Overlap::Skip;
        let mut pause_after_failures = None;
        if let Some(arg) = args.as_ref().and_then(|a| a.pause_after_failures.as_ref()) {
            pause_after_failures = errors.ok(
                arg.value
                    .base10_parse::<u32>()
                    .and_then(|n| match n {
                        0 => Err(syn::Error::new(
                            arg.value.span(),
                            "pause_after_failures is 0: give 1 or more failed runs in a row, or leave it out",
                        )),
                        n => Ok(n),
                    }),
            );
        }
        if let Some(args) = &args
            && let Some(policy) = errors.ok(check_overlap(args))
        {
            overlap = policy;
        }
        let mut deadlines = Deadlines::default();
        if let Some(args) = &args {
            deadlines.expect_success_within = errors
                .ok(deadline(
                    args.expect_success_within.as_ref(),
                    "expect_success_within",
                ))
                .flatten();
            deadlines.max_runtime = errors
                .ok(deadline(args.max_runtime.as_ref(), "max_runtime"))
                .flatten();
            deadlines.late_after = errors
                .ok(deadline(args.late_after.as_ref(), "late_after"))
                .flatten();
            deadlines.paused_longer_than = errors
                .ok(deadline(
                    args.paused_longer_than.as_ref(),
                    "paused_longer_than",
                ))
                .flatten();
            if let Some(arg) = &args.on_overrun {
                let cancel = match arg.value.value().as_str() {
                    "report" => Ok(false),
                    "cancel" if deadlines.max_runtime.is_none() && args.max_runtime.is_none() => {
                        Err(syn::Error::new(
                            arg.value.span(),
                            "on_overrun = \"cancel\" needs max_runtime: the run is cancelled once it passes it",
                        ))
                    }
                    "cancel" => Ok(true),
                    other => Err(syn::Error::new(
                        arg.value.span(),
                        format!("on_overrun = {other:?} is not \"report\" or \"cancel\""),
                    )),
                };
                deadlines.cancel_overrun = errors.ok(cancel).unwrap_or(false);
            }
            if let Some(arg) = &args.failures_in_a_row {
                deadlines.failures_in_a_row = errors.ok(arg.value.base10_parse::<u32>().and_then(
                    |n| match n {
                        0 => Err(syn::Error::new(
                            arg.value.span(),
                            "failures_in_a_row is 0: give 1 or more failed runs in a row, or leave it out",
                        )),
                        n => Ok(n),
                    },
                ));
            }
        }
        let mut time_rules = crate::time_rules::TimeRules::default();
        if let Some(args) = &args {
            let given = crate::time_rules::Given {
                exclude: args.exclude.as_ref(),
                on_excluded: args.on_excluded.as_ref(),
                start: args.start.as_ref(),
                end: args.end.as_ref(),
                max_runs: args.max_runs.as_ref(),
            };
            time_rules = crate::time_rules::check(given, &mut errors);
        }
        if let Some(args) = args {
            cron = errors.ok(ScheduledArgs::required(
                args.cron.as_ref(),
                "when the job runs, such as `cron = \"0 */15 * * * *\"`",
            )
            .and_then(|arg| check_cron(&arg.value).map(|()| arg.value.clone())));
            time_zone = match args.time_zone {
                Some(arg) => errors.ok(check_time_zone(&arg.value).map(|()| arg.value)),
                None => Some(LitStr::new("UTC", Span::call_site())),
            };
        }

        if !func.attrs.iter().any(is_scheduler_lock) {
            errors.push(syn::Error::new(
                Span::call_site(),
                "`#[scheduled]` needs `#[scheduler_lock(...)]` below it: a scheduled job without \
                 a lock would run on every instance; put `#[scheduler_lock(name = \"…\", \
                 lock_at_most_for = \"…\")]` below `#[scheduled(...)]`",
            ));
        }
        if let Some(again) = func.attrs.iter().find(|a| is_named(a, "scheduled")) {
            errors.push(syn::Error::new_spanned(
                again,
                "a function can have only one `#[scheduled]`; for a second schedule, write \
                 another function that calls this one",
            ));
        }
        // The same message as `#[scheduler_lock]`'s, at the same span.
        errors.ok(check_async(&func));
        let mut params = Vec::new();
        let mut interval = None;
        for arg in &func.sig.inputs {
            match arg {
                FnArg::Receiver(receiver) => errors.push(syn::Error::new(
                    receiver.self_token.span,
                    "`#[scheduled]` goes on a free function, not a method: its job calls the \
                     function without a `self`; move the job out of the `impl` block, or \
                     schedule a free function that calls this method",
                )),
                FnArg::Typed(typed) => match &*typed.pat {
                    Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                        if is_interval(&typed.ty) {
                            match interval {
                                None => interval = Some(params.len()),
                                Some(_) => errors.push(syn::Error::new_spanned(
                                    &typed.ty,
                                    "a second `Interval` parameter: the scheduler passes the \
                                     span a run covers once; keep one `Interval` parameter",
                                )),
                            }
                        }
                        params.push((pat.ident.clone(), (*typed.ty).clone()));
                    }
                    pat => errors.push(syn::Error::new_spanned(
                        pat,
                        "`#[scheduled]` needs each parameter to be a plain `name: Type`, since \
                         its `job(...)` takes the same arguments; destructure inside the body",
                    )),
                },
            }
        }
        errors.finish()?;
        let declared_lock = declared_lock(&func);
        let lock_invalid = declared_lock.is_none() && func.attrs.iter().any(is_scheduler_lock);
        if let (Some(at), Some(locked)) = (interval, &declared_lock) {
            check_interval_not_in_name(locked, &params[at].0)?;
        }
        if overlap != crate::overlap::Overlap::Skip
            && let Some(locked) = &declared_lock
        {
            check_overlap_lock(locked, overlap)?;
        }
        match (cron, time_zone) {
            (Some(cron), Some(time_zone)) => Ok(Self {
                func,
                cron,
                time_zone,
                params,
                interval,
                declared_lock,
                lock_invalid,
                overlap,
                pause_after_failures,
                deadlines,
                time_rules,
            }),
            // Every `None` above pushed an error, so `finish` returned it.
            _ => Err(syn::Error::new(Span::call_site(), "invalid `#[scheduled]`")),
        }
    }
}

/// `func`'s `#[scheduler_lock]`, parsed (on `func` without it); its name may have `{param}`
/// placeholders (`job(…)` has the same parameters).
fn declared_lock(func: &ItemFn) -> Option<LockedFn> {
    let attr = func.attrs.iter().find(|a| is_scheduler_lock(a))?;
    let args = match &attr.meta {
        syn::Meta::List(list) => list.tokens.clone(),
        _ => return None,
    };
    let mut bare = func.clone();
    bare.attrs.retain(|a| !is_scheduler_lock(a));
    LockedFn::parse(args, bare.to_token_stream()).ok()
}

/// Whether `attr` is a `#[scheduler_lock]` (matched by its path's last segment, so
/// `#[shedlock::scheduler_lock]` counts).
fn is_scheduler_lock(attr: &Attribute) -> bool {
    is_named(attr, "scheduler_lock")
}

/// Whether `attr`'s path ends in `name`.
fn is_named(attr: &Attribute, name: &str) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == name)
}

/// Whether `ty` is `Interval` (by its path's last segment, without generic arguments, so
/// `shedlock::scheduler::Interval` and an imported `Interval` both count): the parameter the
/// scheduler fills with the span each run covers.
fn is_interval(ty: &Type) -> bool {
    match ty {
        Type::Path(path) if path.qself.is_none() => path
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "Interval" && s.arguments.is_none()),
        Type::Group(group) => is_interval(&group.elem),
        _ => false,
    }
}

/// A lock name cannot have the interval's placeholder: the job, named by its lock, is one
/// job across its runs, while each run covers another span.
fn check_interval_not_in_name(locked: &LockedFn, interval: &Ident) -> syn::Result<()> {
    use crate::scheduler_lock::NamePiece;
    let used = locked
        .name
        .pieces
        .iter()
        .any(|piece| matches!(piece, NamePiece::Param(p) if p == interval));
    if used {
        return Err(syn::Error::new(
            locked.name.span,
            format!(
                "the lock name uses `{{{interval}}}`, the `Interval` parameter the scheduler \
                 fills for each run: a job keeps one name across its runs; name the lock by \
                 the `job(…)` arguments only"
            ),
        ));
    }
    Ok(())
}

/// Checks a cron expression by the runtime's rules (`crate::rules`, the same file as
/// `Schedule::parse`'s), in UTC: the time zone is checked on its own.
fn check_cron(lit: &LitStr) -> syn::Result<()> {
    let expression = lit.value();
    crate::rules::parse_cron(&expression, chrono_tz::Tz::UTC)
        .map(drop)
        .map_err(|reason| {
            syn::Error::new(
                lit.span(),
                format!("invalid cron expression {expression:?}: {reason}"),
            )
        })
}

/// The overlap policy the arguments give, by the runtime's rules (`crate::overlap`): a bound
/// missing, out of range or given to another policy is an error on the key at fault.
fn check_overlap(args: &ScheduledArgs) -> syn::Result<crate::overlap::Overlap> {
    use crate::overlap::{Overlap, WhenFull};
    fn number<K>(arg: Option<&args::IntArg<K>>) -> syn::Result<Option<u32>> {
        arg.map(|arg| arg.value.base10_parse::<u32>()).transpose()
    }
    let buffer_limit = number(args.buffer_limit.as_ref())?;
    let max_running = number(args.max_running.as_ref())?;
    let when_full = match &args.when_full {
        Some(arg) => Some(
            arg.value
                .value()
                .parse::<WhenFull>()
                .map_err(|reason| syn::Error::new(arg.value.span(), reason))?,
        ),
        None => None,
    };
    let (name, span) = match &args.overlap {
        Some(arg) => (arg.value.value(), arg.value.span()),
        None if max_running.is_some() => ("allow_all".to_owned(), Span::call_site()),
        None => ("skip".to_owned(), Span::call_site()),
    };
    // The error goes on the bound that is wrong, when one is named in it.
    Overlap::from_parts(&name, buffer_limit, max_running, when_full).map_err(|reason| {
        let span = [
            (
                "buffer_limit",
                args.buffer_limit.as_ref().map(|a| a.value.span()),
            ),
            (
                "max_running",
                args.max_running.as_ref().map(|a| a.value.span()),
            ),
            ("when_full", args.when_full.as_ref().map(|a| a.value.span())),
        ]
        .into_iter()
        .find_map(|(key, at)| {
            at.filter(|_| reason.starts_with(key) || reason.contains(&format!("{key} is")))
        })
        .unwrap_or(span);
        syn::Error::new(span, reason)
    })
}

/// An overlap policy other than `skip` is kept beside the job's lock: both durations must be
/// literals (so `job()` declares the lock), and a name without parameters must leave room for
/// the rows the policy adds (a name with parameters is checked when the job is added).
fn check_overlap_lock(locked: &LockedFn, overlap: crate::overlap::Overlap) -> syn::Result<()> {
    use crate::scheduler_lock::{LockDuration, NamePiece};
    let literal = matches!(
        (&locked.lock_at_most_for, &locked.lock_at_least_for),
        (LockDuration::Fixed(_), LockDuration::Fixed(_))
    );
    if !literal {
        return Err(syn::Error::new(
            Span::call_site(),
            format!(
                "`overlap = \"{}\"` is kept beside the job's lock, which `job()` declares only when \
                 `lock_at_most_for` and `lock_at_least_for` are string literals: write them as \
                 `\"30m\"`, or drop `overlap`",
                overlap.name()
            ),
        ));
    }
    let fixed: Option<String> = locked
        .name
        .pieces
        .iter()
        .map(|piece| match piece {
            NamePiece::Text(text) => Some(text.as_str()),
            NamePiece::Param(_) => None,
        })
        .collect();
    const MAX: usize = 64 - ":wait100".len();
    match fixed {
        Some(name) if name.len() > MAX => Err(syn::Error::new(
            locked.name.span,
            format!(
                "`overlap = \"{}\"` keeps rows named after the lock (`{name}:run1`, `:wait1`, \
                 `:cancel`), so the lock name may have at most {MAX} bytes; it has {}",
                overlap.name(),
                name.len()
            ),
        )),
        _ => Ok(()),
    }
}

/// Checks an IANA time zone name by the runtime's rules, suggesting the closest known name.
fn check_time_zone(lit: &LitStr) -> syn::Result<()> {
    crate::rules::parse_time_zone(&lit.value())
        .map(drop)
        .map_err(|reason| syn::Error::new(lit.span(), reason))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::messages;
    use quote::quote;

    fn scheduled(args: TokenStream, item: TokenStream) -> Result<ScheduledFn, String> {
        ScheduledFn::parse(args, item).map_err(messages)
    }

    #[test]
    fn scheduled_checks() {
        let lock = quote!(#[scheduler_lock(name = "a", lock_at_most_for = "1m")]);
        let ok = scheduled(
            quote!(cron = "0 */5 * * *"),
            quote!(#lock async fn job(x: u8) {}),
        );
        let ok = ok.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.time_zone.value(), "UTC");
        assert_eq!(ok.params.len(), 1);
        // Wrong arguments on a good function, then good arguments on a wrong function.
        let argument_cases = [
            (quote!(cron = "61 * * * *"), "invalid cron"),
            (quote!(cron = "0 0 0 31 2 *"), "never fires"),
            (
                quote!(cron = "* * * * *", time_zone = "Europe/Berln"),
                "did you mean \"Europe/Berlin\"?",
            ),
            (
                quote!(cron = "* * * * *", time_zone = "europe/berlin"),
                "did you mean \"Europe/Berlin\"?",
            ),
            (quote!(time_zone = "UTC"), "needs `cron = \"…\"`"),
            (quote!(cron = "* * * * *", cron = "* * * * *"), "twice"),
            (quote!(cron = "* * * * *", tz = "UTC"), "unknown key"),
            (
                quote!(cron = "* * * * *", overlap = "sometimes"),
                "unknown overlap policy",
            ),
            (
                quote!(cron = "* * * * *", overlap = "buffer_all"),
                "needs a bound",
            ),
            (
                quote!(cron = "* * * * *", overlap = "buffer_all", buffer_limit = 0),
                "buffer_limit is 0: it must be 1 to 100",
            ),
            (
                quote!(cron = "* * * * *", overlap = "allow_all", max_running = 101),
                "max_running is 101",
            ),
            (
                quote!(cron = "* * * * *", overlap = "skip", max_running = 3),
                "max_running is for overlap = \"allow_all\"",
            ),
            (
                quote!(cron = "* * * * *", max_running = 2, when_full = "wait"),
                "unknown when_full",
            ),
            (
                quote!(cron = "* * * * *", max_running = "3"),
                "takes a whole number",
            ),
            (
                quote!(cron = "* * * * *", pause_after_failures = 0),
                "pause_after_failures is 0",
            ),
            (
                quote!(cron = "* * * * *", exclude = "kr holidays"),
                "invalid calendar name \"kr holidays\" in `exclude`: a calendar's name is 1 to 100",
            ),
            (
                quote!(cron = "* * * * *", exclude = []),
                "names no calendar",
            ),
            (
                quote!(cron = "* * * * *", exclude = ["kr", "us", "kr"]),
                "calendar \"kr\" is named twice",
            ),
            (
                quote!(cron = "* * * * *", exclude = ["kr", 3]),
                "takes a string literal or a list of them",
            ),
            (
                quote!(cron = "* * * * *", exclude = "kr", on_excluded = "later"),
                "unknown on_excluded \"later\": write \"skip\"",
            ),
            (
                quote!(cron = "* * * * *", on_excluded = "next"),
                "no calendar is named: add `exclude",
            ),
            (
                quote!(cron = "* * * * *", start = "2026-12-01"),
                "`start = \"2026-12-01\"` is not an RFC 3339 instant",
            ),
            (
                quote!(
                    cron = "* * * * *",
                    start = "2026-12-01T09:00:00+09:00",
                    end = "2026-12-01T00:00:00Z"
                ),
                "`end` (2026-12-01T00:00:00Z) is not after `start` (2026-12-01T00:00:00Z)",
            ),
            (
                quote!(
                    cron = "* * * * *",
                    start = "2026-12-01T00:00:00Z",
                    max_runs = 0
                ),
                "max_runs is 0: give 1 to 10000",
            ),
            (
                quote!(
                    cron = "* * * * *",
                    start = "2026-12-01T00:00:00Z",
                    max_runs = 10001
                ),
                "max_runs is 10001",
            ),
            (
                quote!(cron = "* * * * *", max_runs = 3),
                "counts the schedule's instants from the job's start",
            ),
            (
                quote!(cron = "* * * * *", expect_success_within = "0s"),
                "expect_success_within is zero",
            ),
            (
                quote!(cron = "* * * * *", late_after = "soon"),
                "late_after = \"soon\" is not a duration",
            ),
            (
                quote!(cron = "* * * * *", failures_in_a_row = 0),
                "failures_in_a_row is 0",
            ),
            (quote!(cron = "* * * * *", max_runtime = 5), "max_runtime"),
            (
                quote!(cron = "* * * * *", on_overrun = "cancel"),
                "on_overrun = \"cancel\" needs max_runtime",
            ),
            (
                quote!(cron = "* * * * *", max_runtime = "1m", on_overrun = "kill"),
                "on_overrun = \"kill\" is not",
            ),
        ];
        let function_cases = [
            (
                quote!(
                    async fn j() {}
                ),
                "without a lock",
            ),
            (quote!(#lock fn j() {}), "must be `async`"),
            (quote!(#lock async fn j(&self) {}), "not a method"),
            (quote!(#lock async fn j((a, b): (u8, u8)) {}), "plain"),
        ];
        let good_function = quote!(#lock async fn j() {});
        let good_arguments = quote!(cron = "* * * * *");
        let cases = argument_cases
            .into_iter()
            .map(|(args, expected)| (args, good_function.clone(), expected))
            .chain(
                function_cases
                    .into_iter()
                    .map(|(item, expected)| (good_arguments.clone(), item, expected)),
            );
        // A policy kept in the store needs the lock declared, with room for its rows.
        let runtime_lock = quote!(
            #[scheduler_lock(name = "a", lock_at_most_for = at_most())]
            async fn j() {}
        );
        let long_name = "n".repeat(57);
        let long_lock = quote!(
            #[scheduler_lock(name = #long_name, lock_at_most_for = "1m")]
            async fn j() {}
        );
        let overlap = quote!(cron = "* * * * *", overlap = "buffer_one");
        let cases = cases.chain([
            (overlap.clone(), runtime_lock, "string literals"),
            (overlap, long_lock, "at most 56 bytes; it has 57"),
        ]);
        for (args, item, expected) in cases {
            let shown = format!("{args} {item}");
            let error = scheduled(args, item).err().unwrap_or_default();
            assert!(error.contains(expected), "{shown}: {error}");
        }
    }
}
