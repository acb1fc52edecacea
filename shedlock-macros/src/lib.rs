//! Attribute macros for [`shedlock`](https://docs.rs/shedlock): [`macro@scheduler_lock`] runs
//! every call of an `async fn` under a named database lock, and [`macro@scheduled`] turns such
//! a function into a cron job for `shedlock::Scheduler`.
//!
//! Use them through `shedlock` (its default `macros` feature re-exports both), never directly:
//! the generated code names `::shedlock`.
//!
//! Everything that can be checked at compile time is: the durations written as literals, the
//! literal part of the lock name and every `{param}` in it, the cron expression (with the
//! runtime's own parser settings), the time zone, and a job's overlap policy and time rules
//! (calendar names, start and end instants, the most runs). Each mistake is a compile error pointing
//! at the offending literal, and the function still compiles next to it so the rest of the
//! crate type-checks. A duration may instead be a `std::time::Duration` expression (from the
//! application's settings, say), checked on each call.

// Layout (tokio-macros, tracing-attributes): `lib.rs` hands `proc_macro2` streams to
// `scheduler_lock.rs` or `scheduled.rs` (each attribute's arguments, parsing and validation)
// and then to `expand/` (code generation). `args.rs` holds what both attributes' arguments
// share (keys, one generic parser per kind of value, the error collector); `duration.rs`
// parses durations; `rules.rs`, a link to `shedlock/src/cron/rules.rs`, checks cron
// expressions and time zones by the runtime's own rules.
mod args;
mod duration;
mod expand;
mod names;
mod overlap;
mod rules;
mod scheduled;
mod scheduler_lock;
mod time_rules;

use proc_macro::TokenStream;

/// Runs every call of an `async fn` under a named lock, so that only one instance at a time
/// runs it; a call that finds the lock held elsewhere is skipped.
///
/// ```ignore
/// use shedlock::{scheduler_lock, TaskResult};
///
/// #[scheduler_lock(name = "repo_sync_{repository_id}", lock_at_most_for = "30m", lock_at_least_for = "10s")]
/// async fn sync_repository(repository_id: u64) -> Result<usize, String> {
///     let changed = fetch_changes(repository_id).await?;
///     Ok(changed.len())
/// }
///
/// match sync_repository(42).await? {
///     TaskResult::Executed(Ok(n)) => println!("synced {n} files"),
///     TaskResult::Executed(Err(e)) => eprintln!("sync failed: {e}"),
///     TaskResult::Skipped => println!("another instance holds repo_sync_42"),
/// }
/// ```
///
/// # Arguments
///
/// | key | | |
/// |---|---|---|
/// | `name` | required | The lock's name: 1 to 64 bytes, no control characters, no bidirectional control or zero-width character (`shedlock::settings::is_hidden_char`), not `.` or `..`, no leading or trailing whitespace. `{param}` inserts a parameter's `Display` value (see below). |
/// | `lock_at_most_for` | required | How long the lock stays held if the instance running the function dies (or hangs). Longer than zero; longer than the function ever runs. A duration string or a `Duration` expression (see below). |
/// | `lock_at_least_for` | optional, default zero | How long the lock stays held at least, even when the function finishes sooner, so a fast function does not run again on another instance whose clock is a little behind. At most `lock_at_most_for`. A duration string or a `Duration` expression (see below). |
///
/// `name` is a string literal. Each duration is either a string literal, checked at compile
/// time, or any other Rust expression of type [`std::time::Duration`], checked on each call.
///
/// # Durations
///
/// Either form, up to 1000 years (365000 days):
///
/// - [humantime](https://docs.rs/humantime): `"30m"`, `"1h 30m"`, `"500ms"`, `"2days"`,
///   `"1w"`;
/// - ISO-8601, as Java's `Duration.parse` (and Spring's ShedLock) writes it: `"PT30M"`,
///   `"PT1H30M"`, `"PT0.5S"`, `"P1DT2H"` (and `"P1W"`); case-insensitive; only seconds take a
///   fraction, up to nanoseconds.
///
/// Years and months have no fixed length, so neither form takes them (`"P1M"`, `"1y"` and
/// humantime's `"M"` are compile errors); write days instead. In the ISO form, `M` after the
/// `T` is minutes: `"PT1M"`.
///
/// # Durations from configuration
///
/// When the durations are decided at run time, by the application's settings, give each as an
/// expression of type [`std::time::Duration`] instead of a string:
///
/// ```ignore
/// #[scheduler_lock(
///     name = "repo_sync_{repository_id}",
///     lock_at_most_for = settings.lock_at_most_for,   // `settings: &Settings` is a parameter
///     lock_at_least_for = "10s",                      // a literal and an expression mix
/// )]
/// async fn sync_repository(repository_id: u64, settings: &Settings) -> Result<usize, String> {
///     /* ... */
/// }
/// ```
///
/// Any expression works: a parameter's field (`ctx.lock_at_most_for`), a field of `self` in a
/// method, a const (`LOCK_AT_MOST_FOR`), a call (`settings::lock_at_most_for()`,
/// `Duration::from_secs(30)`), even an `.await`. It is evaluated on **each call**, inside the
/// function, where the parameters are in scope: after the lock name is rendered,
/// `lock_at_most_for` first, then `lock_at_least_for` (whatever their order in the attribute),
/// and before the body starts, also when the lock then turns out to be held elsewhere. A
/// scheduled job evaluates it at each run, from the arguments given to its `job(...)`.
///
/// - **Type.** It must have type `Duration` itself: another type is a compile error on the
///   expression ("mismatched types: expected `Duration`, found `u64`"). A `&Duration` is not
///   one either: dereference it (`*settings.lock_timeout()`). A literal other than a string,
///   such as `30`, is refused (a number has no unit).
/// - **Moves.** It runs before the body takes its parameters, in the same scope, so it may
///   read them freely: a field of `Duration` type is copied, whether the parameter is a
///   reference or owned (`ctx.lock_at_most_for` with `ctx: Settings` leaves `ctx` to the
///   body), and `&self`, `self` or `&mut self` methods may read `self.field`. It must not
///   *move* a parameter that the body still uses (`lock_for(settings)` with an owned
///   `settings: Settings`): that is rustc's "use of moved value" error. Borrow instead
///   (`lock_for(&settings)`), or clone.
/// - **Checks.** Each call checks the values as `shedlock::LockConfiguration::new` does: both
///   are rounded up to whole milliseconds, `lock_at_most_for` must be longer than zero, neither
///   may exceed 1000 years, and `lock_at_least_for` must not exceed `lock_at_most_for`. A call
///   with an invalid value returns `Err` with that error (such as
///   `shedlock::Error::ZeroLockAtMostFor`, naming the lock) **without running the body** and
///   without touching the lock table. When one duration is a literal and the other an
///   expression, the literal is still checked alone at compile time and the two are compared
///   on each call.
///
/// # Lock names with parameters
///
/// `{param}` names one of the function's parameters (a plain identifier pattern; not `self`)
/// and is replaced, on each call, by its [`Display`](std::fmt::Display) value, so
/// `sync_repository(42)` and `sync_repository(7)` take different locks and run concurrently.
/// `{{` and `}}` are literal braces. The fixed text is checked at compile time; the rendered
/// name is checked again on each call, and a call whose name breaks the rules (say, longer than
/// 64 bytes) returns an error without running the body.
///
/// # What it generates
///
/// The function keeps its name, attributes, visibility, generics, `where` clause, parameters
/// and receiver (methods work), but now returns
/// `shedlock::Result<shedlock::TaskResult<T>>`, where `T` is the declared return type (or
/// `()`):
///
/// - `Ok(TaskResult::Executed(value))`: the lock was taken and the body ran to completion;
/// - `Ok(TaskResult::Skipped)`: the lock is held elsewhere (or, in a scheduled run, this tick
///   already ran); the body did not start;
/// - `Err(_)`: no provider is configured, the lock could not be attempted, the lock was lost
///   while the body ran, or the rendered name or a duration given as an expression is
///   invalid (the body does not start then).
///
/// ```ignore
/// // This function...
/// #[scheduler_lock(name = "repo_sync_{id}", lock_at_most_for = "30m")]
/// pub async fn sync(id: u64) -> Result<usize, String> { /* body */ }
///
/// // ...becomes (in essence):
/// pub async fn sync(id: u64) -> shedlock::Result<shedlock::TaskResult<Result<usize, String>>> {
///     let name = format!("repo_sync_{}", id);
///     // (a duration given as an expression is evaluated here: `let at_most: Duration = expr;`)
///     shedlock::run_locked(
///         LockConfiguration::new(name, Duration::from_secs(1800), Duration::ZERO)?,
///         async move { /* body */ },
///     )
///     .await
/// }
/// ```
///
/// The body runs as an `async move` block whose output is the declared return type, so `?` and
/// `return` inside it work as before.
///
/// Every call takes the lock, whether the scheduler makes it or you do. The provider is the one
/// of the current scope: `shedlock::with_provider`, else `shedlock::set_default_provider`;
/// inside a scheduled run the lock also claims the run's cron tick, so the tick runs once
/// across instances.
///
/// # Errors at compile time
///
/// Each is spanned on the offending literal or token: an unparsable, zero or over-long
/// duration literal; a literal `lock_at_least_for` longer than a literal `lock_at_most_for`;
/// an empty name, or fixed text over 64 bytes; a `{placeholder}` that is not a parameter, or
/// an unclosed `{`; a function that is not `async`; an unknown, repeated or missing key; a
/// `name` that is not a string literal; a duration that is a literal but not a string (`30`:
/// "takes a duration string like "30m" or an expression of type `std::time::Duration`"); a
/// duration expression whose type is not `Duration` (rustc's "expected `Duration`", on the
/// expression).
#[proc_macro_attribute]
pub fn scheduler_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    if args.to_string() == expand::EXPANDED_BY_SCHEDULED {
        // `#[scheduled]` above expanded the lock already and left the attribute (so the
        // caller's `use shedlock::scheduler_lock` stays used) with this marker.
        return item;
    }
    attribute(
        args,
        item,
        scheduler_lock::LockedFn::parse,
        expand::scheduler_lock,
    )
}

/// Makes a `#[scheduler_lock]` function a cron job: `my_job::job(args…)` returns the
/// `shedlock::Job` to register with a `shedlock::Scheduler`.
///
/// Write it **above** `#[scheduler_lock]`, on a free (non-method) `async fn`:
///
/// ```ignore
/// use shedlock::{scheduled, scheduler_lock, Scheduler};
///
/// #[scheduled(cron = "0 */15 * * * *", time_zone = "Europe/Berlin")]
/// #[scheduler_lock(name = "repo_sync_{repository_id}", lock_at_most_for = "30m")]
/// async fn repo_sync(repository_id: u64) -> Result<usize, String> {
///     /* ... */
/// #   Ok(0)
/// }
///
/// let scheduler = Scheduler::new(provider);
/// scheduler.add(repo_sync::job(42).named("repo_sync_42"))?;
/// scheduler.add(repo_sync::job(7).named("repo_sync_7"))?;
/// scheduler.start();
/// ```
///
/// # Arguments
///
/// | key | | |
/// |---|---|---|
/// | `cron` | required | A cron expression: 5 fields (minute, hour, day of month, month, day of week) or 6 with a leading seconds field; names (`MON`, `JAN`), ranges, steps, lists, `L`, `W` and `#` work as in [croner](https://docs.rs/croner). Checked at compile time with the same parser settings as `shedlock::Schedule::parse`. |
/// | `time_zone` | optional, default `"UTC"` | The IANA time zone the expression is read in, such as `"Europe/Berlin"`. Checked at compile time against the time zone database of `chrono-tz`. |
/// | `overlap` | optional, default `"skip"` | What a tick does when it finds the job still running, fleet-wide: `"skip"`, `"buffer_one"`, `"buffer_all"` (with `buffer_limit = N`, 1 to 100), `"cancel_other"` or `"allow_all"` (with `max_running = N`, 1 to 100, and optionally `when_full = "skip"` or `"buffer_one"`); `max_running` alone means `"allow_all"`. Becomes `Job::overlap`. |
/// | `pause_after_failures` | optional | After this many failed runs in a row (1 or more) the job pauses itself. Becomes `Job::pause_after_failures`. |
/// | `exclude` | optional | A calendar kept in the store whose entries the job does not run in, or a list of them: `exclude = "kr-holidays"`, `exclude = ["kr-holidays", "us-holidays"]`. Each name 1 to 100 bytes of ASCII letters, digits, `-`, `_` and `.` (the rule of `shedlock::schedules::calendar::check_name`), named once. Becomes one `Job::exclude` each. |
/// | `on_excluded` | optional, default `"skip"`; needs `exclude` | What becomes of a tick a calendar excludes: `"skip"` (it does not run, recorded `skipped-calendar`), `"next"` (it runs at the first instant after the excluded span) or `"previous"` (one second before the span). Becomes `Job::on_excluded`. |
/// | `start`, `end` | optional | The first and last instant a run may come at, in RFC 3339 with an offset: `"2026-12-01T00:00:00Z"`, `"2026-12-01T09:00:00+09:00"`; `start` before `end`. Read at compile time: the expansion calls `Job::starting_at` and `Job::ending_at` with the instant's seconds and nanoseconds, parsing nothing at run time. |
/// | `max_runs` | optional; needs `start` | At most this many runs, 1 to 10,000 (`shedlock::schedules::MAX_RUNS`): the schedule's first instants from `start`, whether each ran or was skipped. Becomes `Job::max_runs`. |
/// | `expect_success_within` | optional | A successful run at least this often (`"1h"`, humantime or ISO-8601, above zero): the ledger raises a `no-success` alert when the job's newest success is older. Becomes `Job::expect_success_within`. |
/// | `max_runtime` | optional | No run longer than this: a run still going past it raises an `overrun` alert. Becomes `Job::max_runtime`. |
/// | `on_overrun` | optional, default `"report"`; `"cancel"` needs `max_runtime` | `"cancel"`: a run past `max_runtime` is also cancelled, as a shutdown cancels it, and recorded `failed`. Becomes `Deadlines::cancel_overrun`. |
/// | `late_after` | optional | No start later than this after its tick: a later one raises a `late` alert. Becomes `Job::late_after`. |
/// | `failures_in_a_row` | optional, at least 1 | An alert (`failing`) after this many failed runs in a row. Becomes `Deadlines::failures_in_a_row`. |
/// | `paused_longer_than` | optional | An alert (`paused`) when the job or the fleet stays paused longer. Becomes `Deadlines::paused_longer_than`. |
///
/// # What it generates
///
/// The function itself, unchanged (its `#[scheduler_lock]` expands next, so it stays callable
/// by hand, under its lock), plus an uninhabited `enum` of the same name and visibility whose
/// associated function `job` takes the function's parameters and returns a `shedlock::Job`
/// named after the function, or, when the `#[scheduler_lock]` name has placeholders, after the
/// lock name filled in (`repo_sync::job(42)` is the job `repo_sync_42`, so one function
/// scheduled per parameter makes a job per value). When both `#[scheduler_lock]` durations are literals, `job`
/// also declares the lock (so the scheduler claims the job's ticks with the others' from the
/// first one on) and each run receives the scheduler's answer as an argument: the body then
/// lives in a hidden sibling function that holds the lock with that answer, and the function
/// calls the sibling with none (so a call by hand still takes its lock). Otherwise, in
/// essence:
///
/// ```ignore
/// #[scheduled(cron = "0 */15 * * * *")]
/// #[scheduler_lock(name = "repo_sync_{repository_id}", lock_at_most_for = "30m")]
/// pub async fn repo_sync(repository_id: u64) -> Result<usize, String> { /* ... */ }
///
/// // ...adds (in essence):
/// pub enum repo_sync {}
/// impl repo_sync {
///     pub fn job(repository_id: u64) -> shedlock::Job {
///         let name = format!("repo_sync_{}", repository_id);
///         Job::new(name, Schedule::parse("0 */15 * * * *", "UTC")?, move || {
///             let repository_id = repository_id.clone();
///             async move { repo_sync(repository_id).await }
///         })
///     }
/// }
/// ```
///
/// An enum rather than a module, so that `repo_sync::job` works wherever the function is
/// declared, inside a function body (or a doctest) too: a module there could not name the
/// function. The enum lives in the type namespace and the function in the value namespace, so
/// `use jobs::repo_sync;` imports both.
///
/// The arguments given to `job` are cloned for each run, so each parameter's type must be
/// `Clone + Send + Sync + 'static`; the function's output must be `()` or a `Result<T, E>`
/// with `E: Display`, so the scheduler can tell a failed run from a good one. Generic
/// functions work when every type parameter appears in the parameters.
///
/// # Errors at compile time
///
/// Each is spanned on the offending literal or token: an invalid cron expression (with
/// croner's reason); an unknown time zone (with the closest IANA name); an unknown overlap
/// policy, a bound out of range or given to another policy, a `pause_after_failures` of 0; a
/// calendar name that breaks the rule, one named twice, or an empty `exclude = []`; an unknown
/// `on_excluded`, or one without `exclude`; a `start` or `end` that is not an RFC 3339 instant
/// (a leap second `:60` included), or an `end` not after `start`; `max_runs` outside 1 to
/// 10,000, or without `start`; an unknown, repeated or missing key; a value of the wrong kind
/// (anything but a string literal for the keys that take strings, or a list of them for
/// `exclude`; anything but a whole number for `buffer_limit`, `max_running`,
/// `pause_after_failures` and `max_runs`); a function that is not `async`, that has a `self`
/// receiver, or whose parameters are not plain `name: Type`; and a function without
/// `#[scheduler_lock]` below `#[scheduled]`, since a scheduled job without a lock would
/// run on every instance.
///
/// `#[scheduled]` cannot see whether it is inside an `impl` block; on an associated function
/// without `self` the generated `enum` is a syntax error there. Schedule a free function.
#[proc_macro_attribute]
pub fn scheduled(args: TokenStream, item: TokenStream) -> TokenStream {
    attribute(args, item, scheduled::ScheduledFn::parse, expand::scheduled)
}

/// An attribute macro: `parse` validates the arguments and the item, `generate` expands what
/// it validated; on an error, the item stays as written next to the `compile_error!`.
fn attribute<T>(
    args: TokenStream,
    item: TokenStream,
    parse: fn(proc_macro2::TokenStream, proc_macro2::TokenStream) -> syn::Result<T>,
    generate: fn(T) -> proc_macro2::TokenStream,
) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    match parse(args.into(), item.clone()) {
        Ok(parsed) => generate(parsed),
        Err(error) => expand::token_stream_with_error(item, error),
    }
    .into()
}
