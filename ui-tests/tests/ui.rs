//! Compile-time tests of `#[scheduler_lock]` and `#[scheduled]` (and of what the types refuse,
//! such as a provider that leaves out a required method): every `tests/ui/fail` program fails
//! with exactly its `.stderr` (the `tests/ui/pass` programs compile and run as modules of
//! `tests/pass.rs`, so that trybuild only checks: it builds nothing). That
//! history on Redis does not compile is a `compile_fail` doc test of shedlock-redis.
//!
//! trybuild builds the cases in a project of its own (`target/tests/trybuild/`) that depends on
//! everything this package depends on: hence a package of its own, with only what the cases use.
//!
//! Regenerate the `.stderr` files after changing a message with
//! `TRYBUILD=overwrite cargo test -p shedlock-ui-tests`, then read each one.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
