//! `#[scheduler_lock]`: its arguments, and every compile-time check of them and of the
//! function it sits on, giving a [`LockedFn`] or a `syn::Error` spanned on the offending token.

use std::time::Duration;

use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::Parser;
use syn::{Expr, FnArg, Ident, ItemFn, LitStr, Pat};

use crate::args::{self, Arguments, DurationArg, DurationValue, Errors, Key};
use crate::duration;

/// The longest lock name, in bytes: the runtime's `shedlock::settings::MAX_NAME_BYTES`.
const MAX_NAME_BYTES: usize = 64;

/// Both macros refuse a non-`async` fn with this message; rustc shows identical errors at one
/// span once.
const NOT_ASYNC: &str = "this function must be `async`: `#[scheduler_lock]` holds its lock while \
                         the function's future runs";

/// The two forms a duration string takes, for messages.
const DURATION_FORMS: &str = "write a humantime duration such as \"30m\", \"1h 30m\" or \
                              \"500ms\", or an ISO-8601 duration such as \"PT30M\", \"PT1H30M\" \
                              or \"P1DT2H\"";

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
    /// The text and placeholders, in order.
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

args::arguments! {
    /// The raw arguments of `#[scheduler_lock(...)]`.
    struct LockArgs for "#[scheduler_lock]" {
        name: StrArg,
        lock_at_most_for: DurationArg,
        lock_at_least_for: DurationArg,
    }
}

impl LockedFn {
    /// Parses `#[scheduler_lock(args)]` on `item`, reporting every independent error at once.
    pub(crate) fn parse(args: TokenStream, item: TokenStream) -> syn::Result<Self> {
        let func: ItemFn = syn::parse2(item)?;
        let mut errors = Errors::default();
        errors.ok(check_async(&func));
        let args = match args::parse_list::<LockArgs>.parse2(args) {
            Ok(args) => args,
            Err(e) => return Err(errors.with(e)),
        };

        let name = errors.ok(LockArgs::required(args.name.as_ref(), "the lock's name")
            .and_then(|arg| parse_name(&arg.value, &func)));
        let at_most = errors.ok(LockArgs::required(
            args.lock_at_most_for.as_ref(),
            "how long the lock stays held at most, if the instance running the job dies",
        )
        .and_then(|arg| match (lock_duration(arg)?, arg.value.literal()) {
            (LockDuration::Fixed(d), Some(lit)) if d.is_zero() => Err(syn::Error::new(
                lit.span(),
                "`lock_at_most_for` must be longer than zero: it is how long the lock \
                     stays held if the instance running the job dies",
            )),
            (duration, _) => Ok(duration),
        }));
        let at_least = match &args.lock_at_least_for {
            Some(arg) => errors.ok(lock_duration(arg)),
            None => Some(LockDuration::Fixed(Duration::ZERO)),
        };
        // Two literals are compared here; a comparison involving an expression happens on
        // each call, in `LockConfiguration::new`.
        if let (Some(LockDuration::Fixed(most)), Some(LockDuration::Fixed(least))) =
            (&at_most, &at_least)
            && let (Some(most_lit), Some(least_lit)) = (
                args.lock_at_most_for
                    .as_ref()
                    .and_then(|arg| arg.value.literal()),
                args.lock_at_least_for
                    .as_ref()
                    .and_then(|arg| arg.value.literal()),
            )
            && least > most
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

/// Refuses a function that is not `async`, spanned on its `fn`. `#[scheduled]` refuses it
/// too, with the same message at the same span, so rustc shows it once when both report it.
pub(crate) fn check_async(func: &ItemFn) -> syn::Result<()> {
    match func.sig.asyncness {
        Some(_) => Ok(()),
        None => Err(syn::Error::new(func.sig.fn_token.span, NOT_ASYNC)),
    }
}

/// A duration argument as the generated code gets it: a literal parsed (and checked), an
/// expression kept for run time.
fn lock_duration<K: Key>(arg: &DurationArg<K>) -> syn::Result<LockDuration> {
    match &arg.value {
        DurationValue::Literal(lit) => parse_duration(K::NAME, lit).map(LockDuration::Fixed),
        DurationValue::Expr(expr) => Ok(LockDuration::Runtime(expr.clone())),
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
    // The runtime's rules of a name made now (`shedlock::settings::is_hidden_char`, `.`, `..`),
    // from the file both crates share.
    if let Some(c) = texts()
        .flat_map(str::chars)
        .find(|c| crate::names::hidden(*c))
    {
        return error(format!(
            "the lock name contains {}, a bidirectional control or zero-width character: it \
             changes how the name looks without being seen (`report\\u{{202e}}txt.exe` shows as \
             `reportexe.txt`); remove it",
            c.escape_unicode()
        ));
    }
    if !has_params && (value == "." || value == "..") {
        return error(format!(
            "the lock name is `{value}`, a path segment a browser collapses in a link, so the \
             dashboard could not open the job; name the lock, such as `name = \"repo_sync\"`"
        ));
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

/// Why `{placeholder}` names no parameter of `fn_name`, and which it could name.
fn unknown_placeholder(placeholder: &str, fn_name: &Ident, params: &[&Ident]) -> String {
    let shown = if placeholder.is_empty() {
        "`{}` in the lock name names no parameter".to_owned()
    } else if placeholder == "self" {
        "`{self}` cannot be part of a lock name".to_owned()
    } else {
        format!("`{{{placeholder}}}` in the lock name is not a parameter of `{fn_name}`")
    };
    let names: Vec<Ident> = params.iter().map(|p| p.unraw()).collect();
    match names.len() {
        0 => format!(
            "{shown}; `{fn_name}` has no parameters to put in its lock name (write `{{{{` and \
             `}}}}` for literal braces)"
        ),
        1 => format!("{shown}; its only parameter is {}", args::code_list(&names)),
        _ => format!("{shown}; its parameters are {}", args::code_list(&names)),
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

#[cfg(test)]
mod tests;
