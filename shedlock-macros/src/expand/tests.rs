//! The generated code of both attributes, as text.

use super::*;
use crate::scheduled::ScheduledFn;

fn expand_lock(args: TokenStream, item: TokenStream) -> String {
    let locked = LockedFn::parse(args, item).unwrap_or_else(|e| panic!("{e}"));
    scheduler_lock(locked).to_string()
}

#[test]
fn literal_name_is_a_string_from() {
    let out = expand_lock(
        quote!(name = "a{{b}}", lock_at_most_for = "PT0.5S"),
        quote!(
            async fn job() {}
        ),
    );
    assert!(out.contains(r#"String :: from ("a{b}")"#), "{out}");
    assert!(
        out.contains("Duration :: new (0u64 , 500000000u32)"),
        "{out}"
    );
    assert!(out.contains("Duration :: new (0u64 , 0u32)"), "{out}");
    assert!(out.contains("TaskResult < () >"), "{out}");
    assert!(out.contains("body :: < () , _ >"), "{out}");
}

#[test]
fn template_name_is_a_format() {
    let out = expand_lock(
        quote!(name = "{{x}}_{id}", lock_at_most_for = "1h"),
        quote!(
            pub async fn job(id: u64) -> Result<(), String> {
                Ok(())
            }
        ),
    );
    assert!(out.contains(r#"format ! ("{{x}}_{}" , id)"#), "{out}");
    assert!(out.contains("Duration :: new (3600u64 , 0u32)"), "{out}");
    assert!(
        out.contains("TaskResult < Result < () , String > >"),
        "{out}"
    );
    assert!(out.starts_with("pub async fn job (id : u64)"), "{out}");
}

#[test]
fn inner_attributes_stay_inside_the_body() {
    let out = expand_lock(
        quote!(name = "a", lock_at_most_for = "1h"),
        quote!(
            #[inline]
            async fn job() {
                #![allow(unused)]
            }
        ),
    );
    assert!(out.starts_with("# [inline] async fn job ()"), "{out}");
    assert!(
        out.contains("{ # ! [allow (unused)] let __shedlock_name"),
        "{out}"
    );
}

#[test]
fn an_expression_is_evaluated_before_the_body_captures_the_parameters() {
    let out = expand_lock(
        quote!(
            name = "a_{id}",
            lock_at_most_for = ctx.lock_at_most_for,
            lock_at_least_for = "1s"
        ),
        quote!(
            async fn job(id: u64, ctx: &Settings) {}
        ),
    );
    let binding = "let __shedlock_lock_at_most_for : :: shedlock :: __private :: Duration = \
                   ctx . lock_at_most_for ;";
    let at = |needle: &str| {
        out.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {out}"))
    };
    assert!(at("let __shedlock_name") < at(binding), "{out}");
    assert!(at(binding) < at("async move"), "{out}");
    assert!(
        out.contains(
            "run_locked (__shedlock_name , __shedlock_lock_at_most_for , \
             :: shedlock :: __private :: Duration :: new (1u64 , 0u32) ,"
        ),
        "{out}"
    );
    assert!(!out.contains("__shedlock_lock_at_least_for"), "{out}");
}

#[test]
fn impl_trait_output_is_inferred() {
    let out = expand_lock(
        quote!(name = "a", lock_at_most_for = "1h"),
        quote!(
            async fn job() -> impl std::fmt::Display {
                1
            }
        ),
    );
    assert!(out.contains("body :: < _ , _ >"), "{out}");
}

#[test]
fn the_1000_year_limit_is_exact() {
    let out = expand_lock(
        quote!(name = "a", lock_at_most_for = "P365000D"),
        quote!(
            async fn job() {}
        ),
    );
    assert!(
        out.contains("Duration :: new (31536000000u64 , 0u32)"),
        "{out}"
    );
}

#[test]
fn scheduled_adds_a_job_constructor() {
    let scheduled_fn = ScheduledFn::parse(
        quote!(cron = "0 */5 * * * *", time_zone = "Europe/Berlin"),
        quote!(
            #[scheduler_lock(name = "a", lock_at_most_for = "1m")]
            pub(crate) async fn sync<T: Clone, const N: usize>(id: u64, t: T) {}
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = scheduled(scheduled_fn).to_string();
    assert!(out.contains("pub (crate) enum sync { }"), "{out}");
    assert!(
        out.contains("pub (crate) fn job < T : Clone , const N : usize > (id : u64 , t : T)"),
        "{out}"
    );
    // The lock is declared: each run hands its claim to the hidden sibling, and the
    // function itself calls the sibling with none.
    assert!(
        out.contains("__shedlock_claimed_sync :: < T , N > (__shedlock_claim , id , t) . await"),
        "{out}"
    );
    assert!(
        out.contains("__shedlock_claimed_sync :: < T , N > (:: shedlock :: __private :: Claim :: none () , id , t) . await"),
        "{out}"
    );
    assert!(
        out.contains(":: shedlock :: __private :: claimed_job ("),
        "{out}"
    );
    assert!(
        out.contains(r#""0 */5 * * * *" , "Europe/Berlin""#),
        "{out}"
    );
}

#[test]
fn time_rules_are_builder_calls_with_instants_read_at_compile_time() {
    let scheduled_fn = ScheduledFn::parse(
        quote!(
            cron = "0 0 * * * *",
            exclude = ["kr-holidays", "us-holidays"],
            on_excluded = "previous",
            start = "2026-12-01T09:00:00+09:00",
            end = "2027-01-01T00:00:00.5Z",
            max_runs = 3
        ),
        quote!(
            #[scheduler_lock(name = "a", lock_at_most_for = "1m")]
            async fn nightly() {}
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = scheduled(scheduled_fn).to_string();
    let calls = ". exclude (\"kr-holidays\") . exclude (\"us-holidays\") \
                 . on_excluded (:: shedlock :: schedules :: OnExcluded :: Previous) \
                 . starting_at (:: shedlock :: __private :: instant (1796083200i64 , 0u32)) \
                 . ending_at (:: shedlock :: __private :: instant (1798761600i64 , 500000000u32)) \
                 . max_runs (3u32)";
    assert!(out.contains(calls), "{out}");
    // No rule, no call.
    let plain = ScheduledFn::parse(
        quote!(cron = "0 0 * * * *"),
        quote!(
            #[scheduler_lock(name = "a", lock_at_most_for = "1m")]
            async fn nightly() {}
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = scheduled(plain).to_string();
    assert!(
        !out.contains("starting_at") && !out.contains(". exclude"),
        "{out}"
    );
}
