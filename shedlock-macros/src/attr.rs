//! Parsing and validation: each attribute's arguments and the function it sits on become a
//! [`LockedFn`] or a [`ScheduledFn`], or a `syn::Error` spanned on the offending token.

use std::str::FromStr;
use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{Lookahead1, Parse, ParseStream, Parser};
use syn::{Attribute, Expr, FnArg, Ident, ItemFn, Lit, LitStr, Pat, Token, Type};

use crate::duration;

/// The longest lock name, in bytes: the runtime's `shedlock::MAX_NAME_BYTES`.
const MAX_NAME_BYTES: usize = 64;

mod kw {
    syn::custom_keyword!(name);
    syn::custom_keyword!(lock_at_most_for);
    syn::custom_keyword!(lock_at_least_for);
    syn::custom_keyword!(cron);
    syn::custom_keyword!(time_zone);
}

const LOCK_KEYS: &str = "`name`, `lock_at_most_for` and `lock_at_least_for`";
const SCHEDULED_KEYS: &str = "`cron` and `time_zone`";

/// Both macros refuse a non-`async` fn with this message; rustc shows identical errors at one
/// span once.
const NOT_ASYNC: &str = "this function must be `async`: `#[scheduler_lock]` holds its lock while \
                         the function's future runs";

/// What `lock_at_most_for` and `lock_at_least_for` take, for messages.
const DURATION_VALUES: &str = "a duration string like \"30m\" or an expression of type \
                               `std::time::Duration`";

const DURATION_FORMS: &str = "write a humantime duration such as \"30m\", \"1h 30m\" or \
                              \"500ms\", or an ISO-8601 duration such as \"PT30M\", \"PT1H30M\" \
                              or \"P1DT2H\"";

// ---------------------------------------------------------------------------------------------
// #[scheduler_lock]

/// A validated `#[scheduler_lock]` function.
pub(crate) struct LockedFn {
    /// The function as written (minus the consumed attribute).
    pub(crate) func: ItemFn,
    /// The lock name.
    pub(crate) name: LockName,
    /// How long the lock stays held at most; never a zero literal.
    pub(crate) lock_at_most_for: LockDuration,
    /// How long the lock stays held at least; `Fixed(ZERO)` when omitted.
    pub(crate) lock_at_least_for: LockDuration,
}

/// A lock duration as the generated code gets it.
pub(crate) enum LockDuration {
    /// A string literal, parsed, rounded up to whole milliseconds and checked at compile time.
    Fixed(Duration),
    /// Any other expression: it must have type `std::time::Duration`, and is evaluated and
    /// validated (by `LockConfiguration::new`) on each call, before the body starts.
    Runtime(Expr),
}

/// A lock name: fixed text and `{param}` placeholders.
pub(crate) struct LockName {
    pub(crate) pieces: Vec<NamePiece>,
    /// The name literal's span, for the generated expression.
    pub(crate) span: Span,
}

/// One piece of a [`LockName`].
pub(crate) enum NamePiece {
    /// Fixed text, with `{{` and `}}` already unescaped.
    Text(String),
    /// A parameter of the function, spanned on the name literal.
    Param(Ident),
}

/// The raw arguments of `#[scheduler_lock(...)]`.
#[derive(Default)]
struct LockArgs {
    name: Option<LitStr>,
    lock_at_most_for: Option<DurationArg>,
    lock_at_least_for: Option<DurationArg>,
}

/// The raw value of `lock_at_most_for` or `lock_at_least_for`.
enum DurationArg {
    /// A duration string, checked at compile time.
    Literal(LitStr),
    /// Anything else but a non-string literal; typed and checked when it runs.
    Expr(Expr),
}

impl Parse for LockArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Self::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::name) {
                let key = input.parse::<kw::name>()?;
                set_once(
                    &mut args.name,
                    "name",
                    key.span,
                    string_value(input, "name")?,
                )?;
            } else if lookahead.peek(kw::lock_at_most_for) {
                let key = input.parse::<kw::lock_at_most_for>()?;
                let value = duration_value(input, "lock_at_most_for")?;
                set_once(
                    &mut args.lock_at_most_for,
                    "lock_at_most_for",
                    key.span,
                    value,
                )?;
            } else if lookahead.peek(kw::lock_at_least_for) {
                let key = input.parse::<kw::lock_at_least_for>()?;
                let value = duration_value(input, "lock_at_least_for")?;
                set_once(
                    &mut args.lock_at_least_for,
                    "lock_at_least_for",
                    key.span,
                    value,
                )?;
            } else {
                return Err(unknown_key(
                    input,
                    lookahead,
                    "#[scheduler_lock]",
                    LOCK_KEYS,
                ));
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

impl LockedFn {
    /// Parses `#[scheduler_lock(args)]` on `item`, reporting every independent error at once.
    pub(crate) fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Self> {
        let func: ItemFn = syn::parse2(item)?;
        let mut errors = Errors::default();
        if func.sig.asyncness.is_none() {
            errors.push(syn::Error::new(func.sig.fn_token.span, NOT_ASYNC));
        }
        let args = match LockArgs::parse.parse2(args) {
            Ok(args) => args,
            Err(e) => return Err(errors.with(e)),
        };

        let name = match args.name {
            Some(lit) => errors.ok(parse_name(&lit, &func)),
            None => {
                errors.push(missing(
                    "#[scheduler_lock]",
                    "name = \"…\"",
                    "the lock's name",
                ));
                None
            }
        };
        let at_most = match &args.lock_at_most_for {
            Some(DurationArg::Literal(lit)) => errors
                .ok(parse_duration("lock_at_most_for", lit).and_then(|d| {
                    if d.is_zero() {
                        Err(syn::Error::new(
                            lit.span(),
                            "`lock_at_most_for` must be longer than zero: it is how long the \
                             lock stays held if the instance running the job dies",
                        ))
                    } else {
                        Ok(d)
                    }
                }))
                .map(LockDuration::Fixed),
            Some(DurationArg::Expr(expr)) => Some(LockDuration::Runtime(expr.clone())),
            None => {
                errors.push(missing(
                    "#[scheduler_lock]",
                    "lock_at_most_for = \"…\"",
                    "how long the lock stays held at most, if the instance running the job dies",
                ));
                None
            }
        };
        let at_least = match &args.lock_at_least_for {
            Some(DurationArg::Literal(lit)) => errors
                .ok(parse_duration("lock_at_least_for", lit))
                .map(LockDuration::Fixed),
            Some(DurationArg::Expr(expr)) => Some(LockDuration::Runtime(expr.clone())),
            None => Some(LockDuration::Fixed(Duration::ZERO)),
        };
        // Two literals are compared here; a comparison involving an expression happens on
        // each call, in `LockConfiguration::new`.
        if let (
            Some(LockDuration::Fixed(most)),
            Some(LockDuration::Fixed(least)),
            Some(DurationArg::Literal(least_lit)),
            Some(DurationArg::Literal(most_lit)),
        ) = (
            &at_most,
            &at_least,
            &args.lock_at_least_for,
            &args.lock_at_most_for,
        ) && least > most
        {
            errors.push(syn::Error::new(
                least_lit.span(),
                format!(
                    "`lock_at_least_for = {:?}` is longer than `lock_at_most_for = {:?}`; \
                     `lock_at_least_for` must not exceed `lock_at_most_for`",
                    least_lit.value(),
                    most_lit.value(),
                ),
            ));
        }
        errors.finish()?;
        match (name, at_most, at_least) {
            (Some(name), Some(lock_at_most_for), Some(lock_at_least_for)) => Ok(Self {
                func,
                name,
                lock_at_most_for,
                lock_at_least_for,
            }),
            // Every `None` above pushed an error, so `finish` returned it.
            _ => Err(syn::Error::new(
                Span::call_site(),
                "invalid `#[scheduler_lock]`",
            )),
        }
    }
}

/// Parses a lock duration literal, with a message naming the key and both accepted forms.
fn parse_duration(key: &str, lit: &LitStr) -> syn::Result<Duration> {
    let text = lit.value();
    duration::parse(&text).map_err(|e| {
        let message = match e {
            duration::Error::Invalid(detail) => {
                format!("invalid `{key}` {text:?}: {detail}; {DURATION_FORMS}")
            }
            duration::Error::NoFixedLength(_) => format!("invalid `{key}` {text:?}: {e}"),
            duration::Error::TooLong => format!(
                "`{key}` {text:?} is longer than {}, the longest lock duration",
                duration::MAX_TEXT
            ),
        };
        syn::Error::new(lit.span(), message)
    })
}

/// Splits a lock name into fixed text and `{param}` placeholders, and checks the fixed text
/// against the runtime's rules (a rendered name is checked again at run time).
fn parse_name(lit: &LitStr, func: &ItemFn) -> syn::Result<LockName> {
    let value = lit.value();
    let error = |message: String| Err(syn::Error::new(lit.span(), message));
    if value.is_empty() {
        return error(
            "the lock name is empty; name the lock, such as `name = \"repo_sync\"`".into(),
        );
    }
    let params = ident_params(func);
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                text.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                text.push('}');
            }
            '{' => {
                let mut placeholder = String::new();
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '}' {
                        closed = true;
                        break;
                    }
                    placeholder.push(c);
                }
                if !closed {
                    return error(
                        "unclosed `{` in the lock name; close the placeholder, as in \
                         `{repository_id}`, or write `{{` for a literal brace"
                            .into(),
                    );
                }
                let param = params
                    .iter()
                    .find(|p| p.unraw() == placeholder || p.to_string() == placeholder);
                let Some(param) = param else {
                    return error(unknown_placeholder(&placeholder, &func.sig.ident, &params));
                };
                if !text.is_empty() {
                    pieces.push(NamePiece::Text(std::mem::take(&mut text)));
                }
                let mut param = (*param).clone();
                param.set_span(lit.span());
                pieces.push(NamePiece::Param(param));
            }
            '}' => {
                return error(
                    "unmatched `}` in the lock name; write `}}` for a literal brace".into(),
                );
            }
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(NamePiece::Text(text));
    }

    let texts = || {
        pieces.iter().filter_map(|p| match p {
            NamePiece::Text(t) => Some(t.as_str()),
            NamePiece::Param(_) => None,
        })
    };
    let has_params = pieces.iter().any(|p| matches!(p, NamePiece::Param(_)));
    let fixed_len: usize = texts().map(str::len).sum();
    if fixed_len > MAX_NAME_BYTES {
        return error(if has_params {
            format!(
                "the lock name's fixed text (without its placeholders) is {fixed_len} bytes \
                 long; a lock name is at most {MAX_NAME_BYTES} bytes"
            )
        } else {
            format!(
                "the lock name is {fixed_len} bytes long; a lock name is at most \
                 {MAX_NAME_BYTES} bytes"
            )
        });
    }
    if texts().any(|t| t.chars().any(char::is_control)) {
        return error("the lock name contains a control character".into());
    }
    if let Some(NamePiece::Text(first)) = pieces.first()
        && first.starts_with(char::is_whitespace)
    {
        return error("the lock name starts with whitespace".into());
    }
    if let Some(NamePiece::Text(last)) = pieces.last()
        && last.ends_with(char::is_whitespace)
    {
        return error("the lock name ends with whitespace".into());
    }
    Ok(LockName {
        pieces,
        span: lit.span(),
    })
}

fn unknown_placeholder(placeholder: &str, fn_name: &Ident, params: &[&Ident]) -> String {
    let shown = if placeholder.is_empty() {
        "`{}` in the lock name names no parameter".to_owned()
    } else if placeholder == "self" {
        "`{self}` cannot be part of a lock name".to_owned()
    } else {
        format!("`{{{placeholder}}}` in the lock name is not a parameter of `{fn_name}`")
    };
    let list: Vec<String> = params.iter().map(|p| format!("`{}`", p.unraw())).collect();
    match list.as_slice() {
        [] => format!(
            "{shown}; `{fn_name}` has no parameters to put in its lock name (write `{{{{` and \
             `}}}}` for literal braces)"
        ),
        [one] => format!("{shown}; its only parameter is {one}"),
        [init @ .., last] => format!("{shown}; its parameters are {} and {last}", init.join(", ")),
    }
}

/// The parameters bound to a plain identifier (not `self`, not a destructuring pattern).
fn ident_params(func: &ItemFn) -> Vec<&Ident> {
    func.sig
        .inputs
        .iter()
        .filter_map(|arg| match arg {
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(pat) if pat.subpat.is_none() => Some(&pat.ident),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// #[scheduled]

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
}

/// The raw arguments of `#[scheduled(...)]`.
#[derive(Default)]
struct ScheduledArgs {
    cron: Option<LitStr>,
    time_zone: Option<LitStr>,
}

impl Parse for ScheduledArgs {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let mut args = Self::default();
        while !input.is_empty() {
            let lookahead = input.lookahead1();
            if lookahead.peek(kw::cron) {
                let key = input.parse::<kw::cron>()?;
                set_once(
                    &mut args.cron,
                    "cron",
                    key.span,
                    string_value(input, "cron")?,
                )?;
            } else if lookahead.peek(kw::time_zone) {
                let key = input.parse::<kw::time_zone>()?;
                let value = string_value(input, "time_zone")?;
                set_once(&mut args.time_zone, "time_zone", key.span, value)?;
            } else {
                return Err(unknown_key(
                    input,
                    lookahead,
                    "#[scheduled]",
                    SCHEDULED_KEYS,
                ));
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        Ok(args)
    }
}

impl ScheduledFn {
    /// Parses `#[scheduled(args)]` on `item`, reporting every independent error at once.
    pub(crate) fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Self> {
        let func: ItemFn = syn::parse2(item)?;
        let mut errors = Errors::default();

        let args = errors.ok(ScheduledArgs::parse.parse2(args));
        let mut cron = None;
        let mut time_zone = None;
        if let Some(args) = args {
            match args.cron {
                Some(lit) => cron = errors.ok(check_cron(&lit).map(|()| lit)),
                None => errors.push(missing(
                    "#[scheduled]",
                    "cron = \"…\"",
                    "when the job runs, such as `cron = \"0 */15 * * * *\"`",
                )),
            }
            time_zone = match args.time_zone {
                Some(lit) => errors.ok(check_time_zone(&lit).map(|()| lit)),
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
        if func.sig.asyncness.is_none() {
            // The same message as `#[scheduler_lock]`'s, at the same span, so rustc shows it
            // once when both attributes report it.
            errors.push(syn::Error::new(func.sig.fn_token.span, NOT_ASYNC));
        }
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
        match (cron, time_zone) {
            (Some(cron), Some(time_zone)) => Ok(Self {
                func,
                cron,
                time_zone,
                params,
            }),
            // Every `None` above pushed an error, so `finish` returned it.
            _ => Err(syn::Error::new(Span::call_site(), "invalid `#[scheduled]`")),
        }
    }
}

/// Whether `attr` is a `#[scheduler_lock]` (matched by its path's last segment, so
/// `#[shedlock::scheduler_lock]` counts).
fn is_scheduler_lock(attr: &Attribute) -> bool {
    is_named(attr, "scheduler_lock")
}

fn is_named(attr: &Attribute, name: &str) -> bool {
    attr.path().segments.last().is_some_and(|s| s.ident == name)
}

/// Checks a cron expression with the runtime's parser settings: seconds optional, everything
/// else croner's defaults.
fn check_cron(lit: &LitStr) -> syn::Result<()> {
    use croner::parser::{CronParser, Seconds};
    let expression = lit.value();
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(&expression)
        .map(drop)
        .map_err(|e| {
            let reason = e.to_string();
            let reason = reason.trim_end_matches('.');
            syn::Error::new(
                lit.span(),
                format!(
                    "invalid cron expression {expression:?} ({reason}); write 5 fields (minute \
                     hour day-of-month month day-of-week), or 6 with a leading seconds field, \
                     such as \"0 */15 * * * *\""
                ),
            )
        })
}

/// Checks an IANA time zone name, suggesting the closest known name.
fn check_time_zone(lit: &LitStr) -> syn::Result<()> {
    let name = lit.value();
    if chrono_tz::Tz::from_str(&name).is_ok() {
        return Ok(());
    }
    let suggestion = closest_time_zone(&name)
        .map(|s| format!(" (did you mean {s:?}?)"))
        .unwrap_or_default();
    Err(syn::Error::new(
        lit.span(),
        format!(
            "unknown time zone {name:?}{suggestion}; write an IANA time zone name, such as \
             \"Europe/Berlin\", \"America/New_York\" or \"UTC\""
        ),
    ))
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

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
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

// ---------------------------------------------------------------------------------------------
// Shared

/// `= "string literal"` after `name`, `cron` or `time_zone`.
fn string_value(input: ParseStream<'_>, key: &str) -> syn::Result<LitStr> {
    input.parse::<Token![=]>()?;
    let value: Expr = input.parse()?;
    let mut inner = &value;
    // A literal passed through a `macro_rules!` fragment arrives in an invisible group.
    while let Expr::Group(group) = inner {
        inner = &group.expr;
    }
    match inner {
        Expr::Lit(syn::ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit.clone()),
        _ => Err(syn::Error::new_spanned(
            &value,
            format!(
                "`{key}` takes a string literal, such as `{key} = {}`",
                example(key)
            ),
        )),
    }
}

/// `= value` after `lock_at_most_for` or `lock_at_least_for`: a duration string literal, or
/// any expression but another kind of literal (a bare `30` has no unit, and the type error it
/// would otherwise give says less).
fn duration_value(input: ParseStream<'_>, key: &str) -> syn::Result<DurationArg> {
    input.parse::<Token![=]>()?;
    let value: Expr = input.parse()?;
    let mut inner = &value;
    // A literal passed through a `macro_rules!` fragment arrives in an invisible group.
    while let Expr::Group(group) = inner {
        inner = &group.expr;
    }
    let kind = match inner {
        Expr::Lit(syn::ExprLit { lit, .. }) => match lit {
            Lit::Str(lit) => return Ok(DurationArg::Literal(lit.clone())),
            Lit::Int(int) => {
                let n = int.base10_digits();
                return Err(syn::Error::new_spanned(
                    &value,
                    format!(
                        "`{key}` takes {DURATION_VALUES}, not an integer, which has no unit: \
                         write `\"{n}s\"`, `\"{n}m\"` or `std::time::Duration::from_secs({n})`"
                    ),
                ));
            }
            Lit::Float(_) => "a float literal",
            Lit::Bool(_) => "a boolean literal",
            Lit::Char(_) => "a character literal",
            Lit::Byte(_) => "a byte literal",
            Lit::ByteStr(_) => "a byte string literal",
            Lit::CStr(_) => "a C string literal",
            _ => "this literal",
        },
        // `-30`: a negated number.
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) if matches!(
            &**expr,
            Expr::Lit(syn::ExprLit {
                lit: Lit::Int(_) | Lit::Float(_),
                ..
            })
        ) =>
        {
            "a negative number"
        }
        _ => return Ok(DurationArg::Expr(value)),
    };
    Err(syn::Error::new_spanned(
        &value,
        format!("`{key}` takes {DURATION_VALUES}, not {kind}"),
    ))
}

fn example(key: &str) -> &'static str {
    match key {
        "name" => "\"repo_sync\"",
        "cron" => "\"0 */15 * * * *\"",
        _ => "\"Europe/Berlin\"",
    }
}

/// Stores a key's value, refusing a second one (spanned on the second key).
fn set_once<T>(slot: &mut Option<T>, key: &str, span: Span, value: T) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            span,
            format!("`{key}` is given twice; give each key once"),
        ));
    }
    *slot = Some(value);
    Ok(())
}

/// An unknown key, spanned on it, listing the valid keys.
fn unknown_key(
    input: ParseStream<'_>,
    lookahead: Lookahead1<'_>,
    attribute: &str,
    keys: &str,
) -> syn::Error {
    if input.peek(Ident::peek_any)
        && let Ok(key) = input.call(Ident::parse_any)
    {
        return syn::Error::new(
            key.span(),
            format!("unknown key `{key}`; the keys of `{attribute}` are {keys}"),
        );
    }
    // Not a key at all: "expected one of `name`, ...".
    lookahead.error()
}

/// A required key is missing; spanned on the whole attribute.
fn missing(attribute: &str, key: &str, what: &str) -> syn::Error {
    syn::Error::new(
        Span::call_site(),
        format!("`{attribute}` needs `{key}`: {what}"),
    )
}

/// Errors collected across independent checks, reported together.
#[derive(Default)]
struct Errors(Option<syn::Error>);

impl Errors {
    fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    /// These errors followed by `error`.
    fn with(self, error: syn::Error) -> syn::Error {
        match self.0 {
            Some(mut errors) => {
                errors.combine(error);
                errors
            }
            None => error,
        }
    }

    fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    /// Every message of a (combined) error.
    fn messages(error: syn::Error) -> String {
        let all: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
        all.join("\n")
    }

    fn locked(args: TokenStream, item: TokenStream) -> Result<LockedFn, String> {
        LockedFn::parse(args, item).map_err(messages)
    }

    fn name_of(result: Result<LockedFn, String>) -> Vec<String> {
        result
            .unwrap_or_else(|e| panic!("{e}"))
            .name
            .pieces
            .iter()
            .map(|p| match p {
                NamePiece::Text(t) => format!("text:{t}"),
                NamePiece::Param(p) => format!("param:{p}"),
            })
            .collect()
    }

    #[test]
    fn name_templates_split_into_text_and_params() {
        let item = quote!(
            async fn sync(repository_id: u64, r#type: &str) {}
        );
        let args = quote!(
            name = "repo_{{sync}}_{repository_id}_{type}",
            lock_at_most_for = "1m"
        );
        assert_eq!(
            name_of(locked(args, item)),
            [
                "text:repo_{sync}_",
                "param:repository_id",
                "text:_",
                "param:r#type"
            ]
        );
    }

    #[test]
    fn name_template_errors() {
        let item = quote!(
            async fn sync(&self, id: u64, (a, b): (u8, u8)) {}
        );
        let cases = [
            (
                "{repo}",
                "`{repo}` in the lock name is not a parameter of `sync`",
            ),
            ("{self}", "`{self}` cannot be part of a lock name"),
            ("{a}", "its only parameter is `id`"),
            ("x_{id", "unclosed `{`"),
            ("x_}", "unmatched `}`"),
            ("", "the lock name is empty"),
            (" x", "starts with whitespace"),
            ("{id} ", "ends with whitespace"),
            ("a\tb", "control character"),
        ];
        for (name, expected) in cases {
            let args = quote!(name = #name, lock_at_most_for = "1m");
            let error = locked(args, item.clone()).err().unwrap_or_default();
            assert!(error.contains(expected), "{name:?}: {error}");
        }
    }

    #[test]
    fn name_length_counts_fixed_text_only() {
        let item = quote!(
            async fn sync(id: u64) {}
        );
        let at_limit = "n".repeat(64);
        assert!(
            locked(
                quote!(name = #at_limit, lock_at_most_for = "1m"),
                item.clone()
            )
            .is_ok()
        );
        let templated = format!("{at_limit}{{id}}");
        assert!(
            locked(
                quote!(name = #templated, lock_at_most_for = "1m"),
                item.clone()
            )
            .is_ok()
        );
        let over = "n".repeat(65);
        let error = locked(quote!(name = #over, lock_at_most_for = "1m"), item)
            .err()
            .unwrap_or_default();
        assert!(error.contains("65 bytes"), "{error}");
    }

    #[test]
    fn argument_errors() {
        let item = quote!(
            async fn job() {}
        );
        let cases = [
            (quote!(name = "a"), "needs `lock_at_most_for = \"…\"`"),
            (quote!(lock_at_most_for = "1m"), "needs `name = \"…\"`"),
            (quote!(name = "a", name = "b"), "`name` is given twice"),
            (quote!(nam = "a"), "unknown key `nam`"),
            (quote!(name = a), "`name` takes a string literal"),
            (
                quote!(name = "a", lock_at_most_for = 30),
                "takes a duration string like \"30m\" or an expression",
            ),
            (
                quote!(name = "a", lock_at_most_for = D, lock_at_most_for = D),
                "`lock_at_most_for` is given twice",
            ),
            (
                quote!(name = "a", lock_at_most_for = "0s"),
                "longer than zero",
            ),
            (
                quote!(name = "a", lock_at_most_for = "P1M"),
                "no fixed length",
            ),
            (quote!(name = "a", lock_at_most_for = "soon"), "\"PT30M\""),
            (
                quote!(name = "a", lock_at_most_for = "P365001D"),
                "longer than 1000 years",
            ),
            (
                quote!(
                    name = "a",
                    lock_at_most_for = "1m",
                    lock_at_least_for = "2m"
                ),
                "`lock_at_least_for = \"2m\"` is longer than `lock_at_most_for = \"1m\"`",
            ),
        ];
        for (args, expected) in cases {
            let shown = args.to_string();
            let error = locked(args, item.clone()).err().unwrap_or_default();
            assert!(error.contains(expected), "{shown}: {error}");
        }
    }

    #[test]
    fn durations_are_parsed() {
        let item = quote!(
            async fn job() {}
        );
        let args = quote!(
            name = "a",
            lock_at_most_for = "PT1H30M",
            lock_at_least_for = "500ms"
        );
        let parsed = locked(args, item).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            parsed.lock_at_most_for,
            LockDuration::Fixed(d) if d == Duration::from_secs(90 * 60)
        ));
        assert!(matches!(
            parsed.lock_at_least_for,
            LockDuration::Fixed(d) if d == Duration::from_millis(500)
        ));
    }

    /// How a parsed duration reads: `fixed:<Debug>` or `runtime:<tokens>`.
    fn shown(duration: &LockDuration) -> String {
        match duration {
            LockDuration::Fixed(d) => format!("fixed:{d:?}"),
            LockDuration::Runtime(expr) => format!("runtime:{}", quote!(#expr)),
        }
    }

    #[test]
    fn expressions_are_kept_for_run_time() {
        let item = quote!(
            async fn job(ctx: &Settings) {}
        );
        let cases = [
            (
                quote!(name = "a", lock_at_most_for = ctx.lock_at_most_for),
                ["runtime:ctx . lock_at_most_for", "fixed:0ns"],
            ),
            (
                quote!(
                    name = "a",
                    lock_at_most_for = "1m",
                    lock_at_least_for = settings::least()
                ),
                ["fixed:60s", "runtime:settings :: least ()"],
            ),
            (
                quote!(
                    name = "a",
                    lock_at_most_for = LOCK_AT_MOST_FOR,
                    lock_at_least_for = "2h"
                ),
                ["runtime:LOCK_AT_MOST_FOR", "fixed:7200s"],
            ),
        ];
        for (args, expected) in cases {
            let what = args.to_string();
            let parsed = locked(args, item.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                [
                    shown(&parsed.lock_at_most_for),
                    shown(&parsed.lock_at_least_for)
                ],
                expected,
                "{what}"
            );
        }
    }

    #[test]
    fn a_literal_beside_an_expression_is_still_checked() {
        let item = quote!(
            async fn job() {}
        );
        let cases = [
            (
                quote!(name = "a", lock_at_most_for = "0s", lock_at_least_for = D),
                "longer than zero",
            ),
            (
                quote!(name = "a", lock_at_most_for = D, lock_at_least_for = "soon"),
                "invalid `lock_at_least_for` \"soon\"",
            ),
            (
                quote!(
                    name = "a",
                    lock_at_most_for = D,
                    lock_at_least_for = "P365001D"
                ),
                "longer than 1000 years",
            ),
        ];
        for (args, expected) in cases {
            let what = args.to_string();
            let error = locked(args, item.clone()).err().unwrap_or_default();
            assert!(error.contains(expected), "{what}: {error}");
        }
    }

    #[test]
    fn other_literals_are_not_durations() {
        let item = quote!(
            async fn job() {}
        );
        let cases = [
            (
                quote!(name = "a", lock_at_most_for = 30),
                "`lock_at_most_for` takes a duration string like \"30m\" or an expression of \
                 type `std::time::Duration`, not an integer, which has no unit: write `\"30s\"`, \
                 `\"30m\"` or `std::time::Duration::from_secs(30)`",
            ),
            (
                quote!(name = "a", lock_at_most_for = "1h", lock_at_least_for = 1.5),
                "`lock_at_least_for` takes a duration string like \"30m\" or an expression of \
                 type `std::time::Duration`, not a float literal",
            ),
            (
                quote!(name = "a", lock_at_most_for = -30),
                "not a negative number",
            ),
            (
                quote!(name = "a", lock_at_most_for = true),
                "not a boolean literal",
            ),
            (
                quote!(name = "a", lock_at_most_for = 'm'),
                "not a character literal",
            ),
            (
                quote!(name = "a", lock_at_most_for = b"1m"),
                "not a byte string literal",
            ),
        ];
        for (args, expected) in cases {
            let what = args.to_string();
            let error = locked(args, item.clone()).err().unwrap_or_default();
            assert!(error.contains(expected), "{what}: {error}");
        }
    }

    #[test]
    fn not_async_is_refused() {
        let error = locked(
            quote!(name = "a", lock_at_most_for = "1m"),
            quote!(
                fn job() {}
            ),
        )
        .err()
        .unwrap_or_default();
        assert!(error.contains("must be `async`"), "{error}");
    }

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
        let cases = [
            (
                quote!(cron = "61 * * * *"),
                quote!(#lock async fn j() {}),
                "invalid cron",
            ),
            (
                quote!(cron = "* * * * *", time_zone = "Europe/Berln"),
                quote!(#lock async fn j() {}),
                "did you mean \"Europe/Berlin\"?",
            ),
            (
                quote!(cron = "* * * * *", time_zone = "europe/berlin"),
                quote!(#lock async fn j() {}),
                "did you mean \"Europe/Berlin\"?",
            ),
            (
                quote!(cron = "* * * * *"),
                quote!(
                    async fn j() {}
                ),
                "without a lock",
            ),
            (
                quote!(cron = "* * * * *"),
                quote!(#lock fn j() {}),
                "must be `async`",
            ),
            (
                quote!(cron = "* * * * *"),
                quote!(#lock async fn j(&self) {}),
                "not a method",
            ),
            (
                quote!(cron = "* * * * *"),
                quote!(#lock async fn j((a, b): (u8, u8)) {}),
                "plain",
            ),
            (
                quote!(time_zone = "UTC"),
                quote!(#lock async fn j() {}),
                "needs `cron = \"…\"`",
            ),
            (
                quote!(cron = "* * * * *", cron = "* * * * *"),
                quote!(#lock async fn j() {}),
                "twice",
            ),
            (
                quote!(cron = "* * * * *", tz = "UTC"),
                quote!(#lock async fn j() {}),
                "unknown key",
            ),
        ];
        for (args, item, expected) in cases {
            let shown = format!("{args} {item}");
            let error = scheduled(args, item).err().unwrap_or_default();
            assert!(error.contains(expected), "{shown}: {error}");
        }
    }

    #[test]
    fn edit_distance_counts_edits() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("utc", "utc"), 0);
    }
}
