//! Unit tests of `#[scheduler_lock]`'s parsing and validation.

use super::*;
use crate::args::messages;
use quote::quote;

fn locked(args: TokenStream, item: TokenStream) -> Result<LockedFn, String> {
    LockedFn::parse(args, item).map_err(messages)
}

/// Asserts that `#[scheduler_lock(args)]` on `async fn job() {}` fails, with a message
/// containing `expected`, for each `(args, expected)`.
fn assert_errors<'a>(cases: impl IntoIterator<Item = (TokenStream, &'a str)>) {
    for (args, expected) in cases {
        let shown = args.to_string();
        let item = quote!(
            async fn job() {}
        );
        let error = locked(args, item).err().unwrap_or_default();
        assert!(error.contains(expected), "{shown}: {error}");
    }
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
    assert_errors(cases);
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
    assert_errors(cases);
}

#[test]
fn other_literals_are_not_durations() {
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
    assert_errors(cases);
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
