//! What both attributes' arguments share: the keys ([`kw`]), one generic parser per kind of
//! value ([`Arg`]`<K, V>`: [`StrArg`] for `name`, `cron` and `time_zone`, [`DurationArg`] for
//! `lock_at_most_for` and `lock_at_least_for`, [`IntArg`] for the numbers, [`StrListArg`] for
//! `exclude`), the `key = value, ...` list ([`parse_list`]),
//! and the collection of errors ([`Errors`]).
//!
//! An attribute declares its arguments with [`arguments!`]: a struct with one
//! `Option<StrArg<kw::name>>`-like field per key, which [`parse_list`] fills through
//! [`parse_arg`]. Each kind of value says once what it accepts and how it refuses the rest, for
//! every key that takes it (tracing-attributes' `StrArg<kw::name>`, tokio-macros'
//! `parse_string`).

use proc_macro2::Span;
use syn::ext::IdentExt;
use syn::parse::{Lookahead1, Parse, ParseStream};
use syn::{Expr, Ident, Lit, LitStr, Token};

/// The key of an argument: a `syn::custom_keyword!` that knows its own name.
pub(crate) trait Key: Parse {
    /// The key as written, for messages.
    const NAME: &'static str;
    /// A valid string value, for the message refusing another kind of value.
    const EXAMPLE: &'static str;
    /// Whether `lookahead` sees this key next (recording it for "expected one of").
    fn peek(lookahead: &Lookahead1<'_>) -> bool;
    /// Where this key stands.
    fn span(&self) -> Span;
}

/// Declares each key as a custom keyword implementing [`Key`].
macro_rules! keys {
    ($($key:ident: $example:literal,)*) => {
        $(
            syn::custom_keyword!($key);

            impl super::Key for $key {
                const NAME: &'static str = stringify!($key);
                const EXAMPLE: &'static str = $example;
                fn peek(lookahead: &syn::parse::Lookahead1<'_>) -> bool {
                    lookahead.peek($key)
                }
                fn span(&self) -> proc_macro2::Span {
                    self.span
                }
            }
        )*
    };
}

/// The keys of both attributes.
pub(crate) mod kw {
    keys! {
        name: "\"repo_sync\"",
        lock_at_most_for: "\"30m\"",
        lock_at_least_for: "\"10s\"",
        cron: "\"0 */15 * * * *\"",
        time_zone: "\"Europe/Berlin\"",
        overlap: "\"buffer_one\"",
        buffer_limit: "5",
        max_running: "3",
        when_full: "\"skip\"",
        pause_after_failures: "3",
        exclude: "\"kr-holidays\"",
        on_excluded: "\"next\"",
        start: "\"2026-12-01T00:00:00Z\"",
        end: "\"2027-01-01T00:00:00Z\"",
        max_runs: "5",
        expect_success_within: "\"1h\"",
        max_runtime: "\"10m\"",
        late_after: "\"30s\"",
        failures_in_a_row: "3",
        paused_longer_than: "\"1d\"",
        on_overrun: "\"cancel\"",
    }
}

/// A kind of value an argument takes, made from the expression after `key =`.
pub(crate) trait Value: Sized {
    /// The value of key `K`, or an error spanned on `expr` saying what `K` takes.
    fn from_expr<K: Key>(expr: Expr) -> syn::Result<Self>;
}

/// `key = value`: one argument, `K` its key and `V` the kind of value it takes.
pub(crate) struct Arg<K, V> {
    /// The key, for its span.
    pub(crate) key: K,
    /// The value.
    pub(crate) value: V,
}

impl<K: Key, V: Value> Parse for Arg<K, V> {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let key = input.parse::<K>()?;
        input.parse::<Token![=]>()?;
        let value = V::from_expr::<K>(input.parse()?)?;
        Ok(Self { key, value })
    }
}

/// A string argument: `name`, `cron`, `time_zone`.
pub(crate) type StrArg<K> = Arg<K, LitStr>;

/// A whole-number argument: `buffer_limit`, `max_running`.
pub(crate) type IntArg<K> = Arg<K, syn::LitInt>;

impl Value for syn::LitInt {
    /// An integer literal and nothing else.
    fn from_expr<K: Key>(expr: Expr) -> syn::Result<Self> {
        match literal(&expr) {
            Some(Lit::Int(lit)) => Ok(lit.clone()),
            _ => Err(syn::Error::new_spanned(
                &expr,
                format!(
                    "`{key}` takes a whole number, such as `{key} = {example}`",
                    key = K::NAME,
                    example = K::EXAMPLE,
                ),
            )),
        }
    }
}

/// A string or a list of strings: `exclude`.
pub(crate) type StrListArg<K> = Arg<K, StrList>;

/// `"a"` or `["a", "b"]`: the strings, in order, and where the value stands.
pub(crate) struct StrList {
    /// Each string literal.
    pub(crate) items: Vec<LitStr>,
    /// The whole value (`"a"`, or the brackets), for an error about the list.
    pub(crate) span: Span,
}

impl Value for StrList {
    /// A string literal, or an array of string literals (empty too: the caller refuses it,
    /// saying why).
    fn from_expr<K: Key>(expr: Expr) -> syn::Result<Self> {
        let refuse = |at: &dyn quote::ToTokens| {
            syn::Error::new_spanned(
                at,
                format!(
                    "`{key}` takes a string literal or a list of them, such as \
                     `{key} = {example}` or `{key} = [{example}, …]`",
                    key = K::NAME,
                    example = K::EXAMPLE,
                ),
            )
        };
        let span = syn::spanned::Spanned::span(&expr);
        let mut inner = &expr;
        while let Expr::Group(group) = inner {
            inner = &group.expr;
        }
        let items = match inner {
            Expr::Array(array) => array
                .elems
                .iter()
                .map(|elem| match literal(elem) {
                    Some(Lit::Str(lit)) => Ok(lit.clone()),
                    _ => Err(refuse(elem)),
                })
                .collect::<syn::Result<_>>()?,
            _ => match literal(&expr) {
                Some(Lit::Str(lit)) => vec![lit.clone()],
                _ => return Err(refuse(&expr)),
            },
        };
        Ok(Self { items, span })
    }
}

/// A duration argument: `lock_at_most_for`, `lock_at_least_for`.
pub(crate) type DurationArg<K> = Arg<K, DurationValue>;

/// The literal `expr` is, seen through the invisible groups a `macro_rules!` fragment
/// arrives in.
fn literal(expr: &Expr) -> Option<&Lit> {
    match expr {
        Expr::Group(group) => literal(&group.expr),
        Expr::Lit(lit) => Some(&lit.lit),
        _ => None,
    }
}

impl Value for LitStr {
    /// A string literal and nothing else.
    fn from_expr<K: Key>(expr: Expr) -> syn::Result<Self> {
        match literal(&expr) {
            Some(Lit::Str(lit)) => Ok(lit.clone()),
            _ => Err(syn::Error::new_spanned(
                &expr,
                format!(
                    "`{key}` takes a string literal, such as `{key} = {example}`",
                    key = K::NAME,
                    example = K::EXAMPLE,
                ),
            )),
        }
    }
}

/// The value of a duration argument.
pub(crate) enum DurationValue {
    /// A duration string, checked at compile time.
    Literal(LitStr),
    /// Anything else but a non-string literal; typed and checked when it runs.
    Expr(Expr),
}

impl DurationValue {
    /// The duration string, when the value is one.
    pub(crate) fn literal(&self) -> Option<&LitStr> {
        match self {
            DurationValue::Literal(lit) => Some(lit),
            DurationValue::Expr(_) => None,
        }
    }
}

/// What a duration argument takes, for messages.
const DURATION_VALUES: &str = "a duration string like \"30m\" or an expression of type \
                               `std::time::Duration`";

impl Value for DurationValue {
    /// A duration string literal, or any expression but another kind of literal (a bare `30`
    /// has no unit, and the type error it would otherwise give says less).
    fn from_expr<K: Key>(expr: Expr) -> syn::Result<Self> {
        let key = K::NAME;
        let kind = match literal(&expr) {
            Some(Lit::Str(lit)) => return Ok(DurationValue::Literal(lit.clone())),
            Some(Lit::Int(int)) => {
                let n = int.base10_digits();
                return Err(syn::Error::new_spanned(
                    &expr,
                    format!(
                        "`{key}` takes {DURATION_VALUES}, not an integer, which has no unit: \
                         write `\"{n}s\"`, `\"{n}m\"` or `std::time::Duration::from_secs({n})`"
                    ),
                ));
            }
            Some(Lit::Float(_)) => "a float literal",
            Some(Lit::Bool(_)) => "a boolean literal",
            Some(Lit::Char(_)) => "a character literal",
            Some(Lit::Byte(_)) => "a byte literal",
            Some(Lit::ByteStr(_)) => "a byte string literal",
            Some(Lit::CStr(_)) => "a C string literal",
            Some(_) => "this literal",
            None if is_negative_number(&expr) => "a negative number",
            None => return Ok(DurationValue::Expr(expr)),
        };
        Err(syn::Error::new_spanned(
            &expr,
            format!("`{key}` takes {DURATION_VALUES}, not {kind}"),
        ))
    }
}

/// `-30`, `-0.5`: a negated number literal (seen through invisible groups too).
fn is_negative_number(expr: &Expr) -> bool {
    match expr {
        Expr::Group(group) => is_negative_number(&group.expr),
        Expr::Unary(syn::ExprUnary {
            op: syn::UnOp::Neg(_),
            expr,
            ..
        }) => matches!(
            &**expr,
            Expr::Lit(syn::ExprLit {
                lit: Lit::Int(_) | Lit::Float(_),
                ..
            })
        ),
        _ => false,
    }
}

/// An attribute's arguments: one `Option<Arg<..>>` field per key. Declared with
/// [`arguments!`].
pub(crate) trait Arguments: Default {
    /// The attribute, as messages write it: `#[scheduler_lock]`.
    const ATTRIBUTE: &'static str;
    /// Its keys, in order.
    const KEYS: &'static [&'static str];
    /// Parses the argument at `input` into its field if `lookahead` sees one of this
    /// attribute's keys (with [`parse_arg`]); `false` if it sees none.
    fn parse_known(
        &mut self,
        input: ParseStream<'_>,
        lookahead: &Lookahead1<'_>,
    ) -> syn::Result<bool>;

    /// The argument a required key gave, or the error that this attribute needs it, spanned
    /// on the whole attribute; `what` says what the key is for.
    fn required<'a, K: Key, V>(
        arg: Option<&'a Arg<K, V>>,
        what: &str,
    ) -> syn::Result<&'a Arg<K, V>> {
        arg.ok_or_else(|| {
            syn::Error::new(
                Span::call_site(),
                format!("`{}` needs `{} = \"…\"`: {what}", Self::ATTRIBUTE, K::NAME),
            )
        })
    }
}

/// Declares an attribute's arguments: a struct with an `Option` of the given kind of [`Arg`]
/// per key, and its [`Arguments`] implementation, which tries the keys in order.
macro_rules! arguments {
    (
        $(#[$meta:meta])*
        struct $name:ident for $attribute:literal {
            $($key:ident: $kind:ident,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(Default)]
        struct $name {
            $($key: Option<$crate::args::$kind<$crate::args::kw::$key>>,)+
        }

        impl $crate::args::Arguments for $name {
            const ATTRIBUTE: &'static str = $attribute;
            const KEYS: &'static [&'static str] = &[$(stringify!($key)),+];

            fn parse_known(
                &mut self,
                input: syn::parse::ParseStream<'_>,
                lookahead: &syn::parse::Lookahead1<'_>,
            ) -> syn::Result<bool> {
                $(
                    if $crate::args::parse_arg(input, lookahead, &mut self.$key)? {
                        return Ok(true);
                    }
                )+
                Ok(false)
            }
        }
    };
}
pub(crate) use arguments;

/// `key = value, ...` (a trailing comma allowed) into `A`.
pub(crate) fn parse_list<A: Arguments>(input: ParseStream<'_>) -> syn::Result<A> {
    let mut args = A::default();
    while !input.is_empty() {
        let lookahead = input.lookahead1();
        if !args.parse_known(input, &lookahead)? {
            return Err(unknown_key(input, lookahead, A::ATTRIBUTE, A::KEYS));
        }
        if input.is_empty() {
            break;
        }
        input.parse::<Token![,]>()?;
    }
    Ok(args)
}

/// Parses `K = value` into `slot` if `lookahead` sees `K`, refusing a second one (spanned on
/// the second key, once its value parsed); `false` if it does not see `K`.
pub(crate) fn parse_arg<K: Key, V: Value>(
    input: ParseStream<'_>,
    lookahead: &Lookahead1<'_>,
    slot: &mut Option<Arg<K, V>>,
) -> syn::Result<bool> {
    if !K::peek(lookahead) {
        return Ok(false);
    }
    let arg: Arg<K, V> = input.parse()?;
    if slot.is_some() {
        return Err(syn::Error::new(
            arg.key.span(),
            format!("`{}` is given twice; give each key once", K::NAME),
        ));
    }
    *slot = Some(arg);
    Ok(true)
}

/// An unknown key, spanned on it, listing the valid keys.
fn unknown_key(
    input: ParseStream<'_>,
    lookahead: Lookahead1<'_>,
    attribute: &str,
    keys: &[&str],
) -> syn::Error {
    if input.peek(Ident::peek_any)
        && let Ok(key) = input.call(Ident::parse_any)
    {
        return syn::Error::new(
            key.span(),
            format!(
                "unknown key `{key}`; the keys of `{attribute}` are {}",
                code_list(keys)
            ),
        );
    }
    // Not a key at all: "expected one of `name`, ...".
    lookahead.error()
}

/// `items` in backticks, as prose lists them: "`a`", "`a` and `b`", "`a`, `b` and `c`".
pub(crate) fn code_list(items: &[impl std::fmt::Display]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| format!("`{item}`")).collect();
    match quoted.as_slice() {
        [init @ .., last] if !init.is_empty() => format!("{} and {last}", init.join(", ")),
        _ => quoted.concat(),
    }
}

/// Errors collected across independent checks, reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    /// Adds `error` after those collected.
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    /// The value, or `None` after collecting the error.
    pub(crate) fn ok<T>(&mut self, result: syn::Result<T>) -> Option<T> {
        result.map_err(|e| self.push(e)).ok()
    }

    /// These errors followed by `error`.
    pub(crate) fn with(self, error: syn::Error) -> syn::Error {
        match self.0 {
            Some(mut errors) => {
                errors.combine(error);
                errors
            }
            None => error,
        }
    }

    /// The errors collected, if any.
    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// Every message of a (combined) error, one a line, for the tests.
#[cfg(test)]
pub(crate) fn messages(error: syn::Error) -> String {
    let all: Vec<String> = error.into_iter().map(|e| e.to_string()).collect();
    all.join("\n")
}
