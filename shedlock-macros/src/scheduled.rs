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
}

args::arguments! {
    /// The raw arguments of `#[scheduled(...)]`.
    struct ScheduledArgs for "#[scheduled]" {
        cron: StrArg,
        time_zone: StrArg,
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
        match (cron, time_zone) {
            (Some(cron), Some(time_zone)) => Ok(Self {
                func,
                cron,
                time_zone,
                params,
                declared_lock,
                lock_invalid,
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
        for (args, item, expected) in cases {
            let shown = format!("{args} {item}");
            let error = scheduled(args, item).err().unwrap_or_default();
            assert!(error.contains(expected), "{shown}: {error}");
        }
    }
}
