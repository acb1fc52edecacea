//! Compile-time tests of `#[scheduler_lock]` and `#[scheduled]` (and of what the types refuse,
//! such as history on a provider without a `RunStore`): every `tests/ui/pass` program
//! compiles and runs, every `tests/ui/fail` program fails with exactly its `.stderr`.
//!
//! Regenerate the `.stderr` files after changing a message with
//! `TRYBUILD=overwrite cargo test --test ui`, then read each one.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
