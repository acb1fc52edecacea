//! The macros' programs that must compile and run (`tests/ui/pass/`): each file is a module of
//! this one test binary, and each test calls its `main`. One binary, built with the rest of
//! the workspace, in place of trybuild's pass cases: those made trybuild build (not only
//! check) its own copy of every dependency and link one program per case, the largest part of
//! the `ui` test's minutes. Each file still uses only what a user's crate would (`shedlock`,
//! `tokio`, `chrono`, `futures-util`), its imports its own.
// What a user writes, not this workspace's lints: `pub` items in a private module, no docs, a
// future called and dropped to show it type-checks, an attribute on each side of a function.
#![allow(
    missing_docs,
    unreachable_pub,
    missing_debug_implementations,
    dead_code,
    clippy::let_underscore_future,
    clippy::mixed_attributes_style
)]

#[path = "ui/pass/generic_where_clause.rs"]
mod generic_where_clause;
#[path = "ui/pass/humantime_durations.rs"]
mod humantime_durations;
#[path = "ui/pass/invalid_runtime_durations.rs"]
mod invalid_runtime_durations;
#[path = "ui/pass/iso_durations.rs"]
mod iso_durations;
#[path = "ui/pass/literal_name.rs"]
mod literal_name;
#[path = "ui/pass/method_with_self.rs"]
mod method_with_self;
#[path = "ui/pass/omitted_lock_at_least_for.rs"]
mod omitted_lock_at_least_for;
#[path = "ui/pass/result_with_question_mark.rs"]
mod result_with_question_mark;
#[path = "ui/pass/runs_under_the_lock.rs"]
mod runs_under_the_lock;
#[path = "ui/pass/runtime_durations.rs"]
mod runtime_durations;
#[path = "ui/pass/scheduled_default_utc.rs"]
mod scheduled_default_utc;
#[path = "ui/pass/scheduled_interval.rs"]
mod scheduled_interval;
#[path = "ui/pass/scheduled_time_rules.rs"]
mod scheduled_time_rules;
#[path = "ui/pass/scheduled_visibility.rs"]
mod scheduled_visibility;
#[path = "ui/pass/scheduled_with_parameters.rs"]
mod scheduled_with_parameters;
#[path = "ui/pass/sub_millisecond_durations.rs"]
mod sub_millisecond_durations;
#[path = "ui/pass/template_name.rs"]
mod template_name;

#[test]
fn generic_where_clause() {
    generic_where_clause::main();
}

#[test]
fn humantime_durations() {
    humantime_durations::main();
}

#[test]
fn invalid_runtime_durations() {
    invalid_runtime_durations::main().unwrap();
}

#[test]
fn iso_durations() {
    iso_durations::main();
}

#[test]
fn literal_name() {
    literal_name::main();
}

#[test]
fn method_with_self() {
    method_with_self::main();
}

#[test]
fn omitted_lock_at_least_for() {
    omitted_lock_at_least_for::main();
}

#[test]
fn result_with_question_mark() {
    result_with_question_mark::main();
}

#[test]
fn runs_under_the_lock() {
    runs_under_the_lock::main().unwrap();
}

#[test]
fn runtime_durations() {
    runtime_durations::main();
}

#[test]
fn scheduled_default_utc() {
    scheduled_default_utc::main();
}

#[test]
fn scheduled_interval() {
    scheduled_interval::main();
}

#[test]
fn scheduled_time_rules() {
    scheduled_time_rules::main();
}

#[test]
fn scheduled_visibility() {
    scheduled_visibility::main();
}

#[test]
fn scheduled_with_parameters() {
    scheduled_with_parameters::main();
}

#[test]
fn sub_millisecond_durations() {
    sub_millisecond_durations::main();
}

#[test]
fn template_name() {
    template_name::main();
}
