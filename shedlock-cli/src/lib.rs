//! The `shedlock` command-line tool: what an operator needs on a bad day, for every backend:
//! PostgreSQL, MySQL/MariaDB, SQLite and Redis.
//!
//! Install it from the workspace with `cargo install --path shedlock-cli` (or run it in place
//! with `cargo run -p shedlock-cli -- …`).
//!
//! ```text
//! shedlock --database-url URL [--table NAME] list [--json]
//! shedlock --database-url URL [--table NAME] unlock NAME [--yes]
//! shedlock --database-url URL [--table NAME] history [NAME] [--limit N] [--outcome O] [--json] [--close-abandoned]
//! shedlock --database-url URL [--table NAME] migrate
//! shedlock --database-url URL [--table NAME] jobs [--json]
//! shedlock --database-url URL [--table NAME] pause (NAME [--cancel-running [--lock LOCK]] | --fleet) [--json]
//! shedlock --database-url URL [--table NAME] resume (NAME | --fleet) [--json]
//! shedlock --database-url URL [--table NAME] trigger NAME [--json]
//! shedlock --database-url URL [--table NAME] reschedule NAME [--cron EXPR [--time-zone TZ]] [TUNING] [--json]
//! shedlock --database-url URL [--table NAME] reset NAME [--json]
//! shedlock --database-url URL [--table NAME] create NAME --handler H --cron EXPR [--time-zone TZ] [--payload JSON] [TUNING] [--json]
//! shedlock --database-url URL [--table NAME] delete NAME [--json]
//! shedlock --database-url URL [--table NAME] backfill NAME --from T1 --to T2 [...] | backfills [ID] [...]
//! shedlock --database-url URL [--table NAME] calendar (create NAME --zone ZONE [ENTRY…] [--ics FILE] | add NAME ENTRY… [--label TEXT]
//!          | import NAME FILE.ics [--until T] | remove NAME ENTRY… | list | show NAME | delete NAME) [--json]
//!
//! TUNING: [--jitter DURATION|none|default]
//!         [--retry MAX_ATTEMPTS|default [--retry-backoff D] [--retry-cap D] [--retry-past-next-tick] | --no-retry]
//! ```
//!
//! - `list`: every lock of the table (on Redis, under the key prefix), held or free, with its
//!   holder, its time remaining (by the database clock), its fencing token and the last tick
//!   claimed through it.
//! - `unlock`: an emergency release of a lock whose holder is stuck. It shows the holder, asks
//!   for confirmation (unless `--yes`), and ends the lock only while it still carries the
//!   fencing token that was shown ([`LockAdmin::force_release`]):
//!   a lock that changed hands in between is left alone. The token stays, so the next holder
//!   gets a higher one and the released holder's token is stale; `last_tick` stays, so the tick
//!   it claimed does not run again. Use it rather than deleting the row by hand: a deleted row
//!   takes its claimed tick with it on PostgreSQL and MySQL/MariaDB (SQLite keeps it), as
//!   deleting a lock's `{<prefix>}:meta:<name>` key does on Redis.
//! - `history`: the run history (`<table>_runs`), newest first, filtered by lock or job name and
//!   by outcome. An `abandoned` run shows why in full in the `ERROR` column. A run still
//!   `running` shows `running` as its duration while its lock is held by its fencing token, and
//!   `unfinished` once it is not: the next sweep ([`RunStore::close_abandoned_runs`], run by
//!   every scheduler with history on at start-up and every `RunHistory::prune_every`) closes it
//!   as `abandoned`. `--close-abandoned` runs that sweep first (without it, `history` only
//!   reads) and says on stderr how many runs it closed. On Redis the history is in keys beside
//!   the locks (`{<prefix>}:run:<id>` and its indexes).
//! - `migrate`: creates or upgrades the lock table and the run history table. On Redis there is
//!   nothing to create: it checks that the server answers and that `{<prefix>}:names` is a set
//!   (or absent), the same work however many locks there are, and says so.
//!
//! ## Schedules
//!
//! The schedules kept in the store beside the locks
//! ([`ScheduleStore`](shedlock::schedules::ScheduleStore)): overrides of code-defined jobs (a
//! new cron, a pause) and jobs created at run time for a handler an application registered.
//! Every change is recorded as made by `cli:<user>@<host>` (`$USER`, the host name).
//!
//! # Audit
//!
//! Every change the tool makes (`pause`, `resume`, `trigger`, `reschedule`, `reset`, `create`,
//! `delete`, `unlock`, the fleet's pause and resume, the lock `pause --cancel-running`
//! releases) is recorded with who and from where: a row of outcome `operator` in the run
//! history (`requested_by` `cli:<user>@<host>`, `error` what was done and from where, `paused
//! (from <host>)`, `locked_by` the tool's process), as the dashboard records its actions.
//!
//! - `jobs`: every schedule (not the deleted ones): kind (`override`, or `run-time` with its
//!   handler), cron and time zone (`code default` where an override keeps the code's), paused,
//!   jitter, retry policy, next tick, pending "run now" request, the last run's outcome,
//!   duration and instance and the lock's holder and
//!   token; a line above the table when the whole fleet is paused. `--json` prints one object:
//!   `backend`; `fleet` (`paused`, `updated_by`, `updated_at`: the schedule `shedlock.fleet`);
//!   `history` (whether the store keeps a run history: `true` on every backend of the tool); `jobs`, one object
//!   per schedule by name: `name`, `kind` (`override` or `run-time`), `handler`, `payload` (the
//!   JSON value), `cron` and `time_zone` (`null`: the code's), `paused`, `jitter_ms`, `retry`
//!   (`max_attempts`, `base_ms`, `cap_ms`, `past_next_tick`), `next_tick` (`null` when the cron
//!   or its time zone is the code's), `trigger` (`id`, `requested_by`, `requested_at`,
//!   `claimed_by`, `claimed_until`, `started`), `version`, `updated_at`, `updated_by`,
//!   `last_run` (`outcome`, `tick`, `started_at`, `duration_ms`, `instance`, `attempt`,
//!   `requested_by`: who asked for a run by `trigger`) and `lock`
//!   (`held`, `locked_by`, `locked_until`, `fencing_token`). The other commands' `--json` print
//!   one object with `name`, `result` (`created`, `paused`, `resumed`, `requested`,
//!   `already_pending`, `rescheduled`, `reset`, `no_override`, `not_paused`, `deleted`) and the schedule as
//!   stored (`schedule`, with the fields above but `last_run` and `lock`). Times are RFC 3339
//!   in UTC with milliseconds.
//! - `pause NAME`: the job fires nowhere until resumed; a run going on goes on, unless
//!   `--cancel-running`, which also releases the job's lock from its holder by its fencing
//!   token, so the run stops at its next keep-alive renewal (the lost-lock path). The job's
//!   lock is the one given with `--lock LOCK`; else, for a run-time job, the lock of its name;
//!   else the lock its newest runs took as the run history records them (a run going on
//!   first), which finds a lock named otherwise than its job (`#[scheduler_lock(name = …)]`,
//!   `Job::locked`); else the lock of the job's name. Without a run history of the job (a
//!   scheduler without history) a lock named otherwise must be given with `--lock`; its
//!   `--json` says which lock it was and how it was found (`lock_name`, `lock_found_by`:
//!   `option`, `run_time_job`, `run_history`, `job_name`). `pause --fleet` / `resume --fleet` pause and resume every job (the
//!   schedule `shedlock.fleet`).
//! - `trigger NAME`: asks for one run now, on one instance, under the job's lock; exit 4 with
//!   "already pending (asked by X at T)" when a request is pending or its run is going.
//! - `reschedule NAME --cron EXPR [--time-zone TZ]`: checks the expression and the time zone
//!   as `#[scheduled]` does (same hints) before writing anything; shows old → new and the next
//!   three ticks. Without `--time-zone` the stored one stays. It also sets the job's jitter and
//!   retry policy (TUNING), each without the others and without `--cron`; with none of them it
//!   is refused (exit 2), naming the flags:
//!   - `--jitter DURATION` (humantime: `30s`, `2m`): each tick's run starts up to that much
//!     later, the same delay on every instance; `0` or `none`: no jitter, whatever the code
//!     says; `default`: the stored jitter is cleared, the code's applies again.
//!   - `--retry MAX_ATTEMPTS` (1 to 1000 attempts in all, the first run included), with
//!     `--retry-backoff D` (the first retry's delay bound, default 1s), `--retry-cap D` (the
//!     largest bound, default 1m or the backoff when longer; at least the backoff) and
//!     `--retry-past-next-tick` (retries may start after the next tick); `--retry default`
//!     clears the stored policy; `--no-retry`: never retry, whatever the code says.
//!
//!   Bad values are refused before anything is written (exit 2), naming the flag.
//! - `reset NAME`: clears an override: the code's schedule applies again (refused for a
//!   run-time job: use `delete`).
//! - `create NAME --handler H --cron EXPR [--time-zone TZ] [--payload JSON]`: a run-time job;
//!   the payload must be JSON (default `null`); TUNING as for `reschedule` (but `default`,
//!   which a run-time job has none of).
//! - `delete NAME`: deletes a run-time job or an override.
//! - `calendar …`: the calendars kept in the store, named sets of days and time ranges read on
//!   one time zone's wall clock (an entry is `2026-12-25`, `2026-12-24..2026-12-26` with both
//!   days, or `2026-12-24T12:00..2026-12-24T18:00` with its end left out): `create` (with
//!   entries given and/or an `.ics` file's), `add` (with a `--label`), `import` (an iCalendar
//!   file's events: all-day ones as their days, timed ones as their span on the calendar's
//!   clock, recurring ones up to `--until`, two years ahead by default; `SUMMARY` the label),
//!   `remove`, `list`, `show` (the entries with their labels, and the jobs that exclude it) and
//!   `delete` (refused, exit 4, while a job excludes it). `reschedule NAME --exclude CAL
//!   [--on-excluded skip|next|previous] [--start T] [--end T] [--max-runs N]` writes a job's
//!   whole time rules (the store's replace the code's whole; `--rules-default` clears them);
//!   `jobs NAME` then shows the ticks they leave out or move, with why, and `jobs --json` each
//!   job's `time_rules`. A calendar the store does not hold exits 3 with the closest name.
//!
//! A name these commands act on must be known to the store (a schedule, a lock, or a job in
//! the run history); any other is refused (exit 3) with the closest known name as a hint.
//!
//! # Database URL
//!
//! `--database-url` (or `DATABASE_URL`) chooses the backend: `postgres://` or `postgresql://`
//! is PostgreSQL, `mysql://` or `mariadb://` is MySQL/MariaDB, an `sqlite:` URL or a file
//! path is SQLite, and `redis://` or `rediss://` (TLS) is Redis, by the library's rule
//! ([`backend_of_url`](shedlock::settings::backend_of_url)). A string is a file path only
//! when it says so: it starts with `/`, `./` or `../`, or ends with `.db`, `.sqlite` or
//! `.sqlite3`. Anything else is refused (exit 2) naming the accepted forms: another scheme, a
//! libpq `key=value` string (`host=db user=app password=…`, its password shown as `***`), a
//! URL whose `:` or `//` is missing (`postgresql//…`, `postgres:user:pw@host`), a bare name;
//! so is `:memory:`, a database that would live only as long as the command. Only `migrate`
//! creates a missing SQLite file: the other commands say it does not exist, so a typo in a
//! path is not mistaken for an empty database. `--table` (or `SHEDLOCK_TABLE`, default `shedlock`) is the
//! lock table; on Redis it is the key prefix (its alias `--key-prefix` says so), whose keys are
//! `{<prefix>}:lock:<name>`, `{<prefix>}:meta:<name>` and `{<prefix>}:names`. No message
//! repeats a password or a secret query parameter of the URL: a URL is shown masked
//! (`shedlock::secret::mask_url`), and the line on stderr is scrubbed of the URL's secrets
//! whatever printed them; a usage error is scrubbed of the secrets of every argument (a URL
//! given without `--database-url` is repeated masked).
//!
//! # What the store holds
//!
//! Names, holders and error texts come from rows someone may have written by hand: their
//! control characters (a terminal escape, a carriage return) are printed escaped, as `\u{1b}`
//! and `\r`, in tables, messages and prompts (`--json` escapes them as JSON does). A lock row
//! that cannot be read (a time of `infinity`, a zero date) is left out of `list` and named on
//! stderr with what is wrong in it; `unlock` of it says the same and changes nothing.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (including `unlock` of a lock that is already free) |
//! | 1 | the database failed: unreachable, a table or SQLite file missing, a Redis key of the wrong type, a statement failed |
//! | 2 | usage error: bad arguments, an unsupported URL scheme, a bad table name or key prefix (or another setting the library refuses: an error of [`ErrorKind::Configuration`](shedlock::error::ErrorKind::Configuration)) |
//! | 3 | `unlock`: no lock of that name in the table (or under the key prefix); the schedule commands: no schedule, lock or run of that name; `calendar` and `--exclude`: no calendar of that name |
//! | 4 | nothing done: `unlock` not released (declined at the prompt, or the lock changed hands or expired); `trigger` already pending; `create` of a name that has a schedule; `calendar create` of a calendar that exists, `calendar delete` of one a job excludes |
//!
//! Each failure is one line on stderr: `shedlock: error: …` for codes 1 and 2, `shedlock: …`
//! for codes 3 and 4.
//!
//! [`LockAdmin::force_release`]: shedlock::LockAdmin::force_release
//! [`RunStore::close_abandoned_runs`]: shedlock::RunStore::close_abandoned_runs

use std::ffi::OsString;
use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use shedlock::secret::scrub;

mod args;
mod backfill;
mod calendar;
mod check;
mod db;
mod failure;
mod history;
mod jobs;
mod list;
mod migrate;
mod output;
mod serve;
mod unlock;

use args::{Cli, Command};
use failure::{EXIT_DATABASE, EXIT_USAGE, Failure, one_line};

/// Runs the tool with the process's arguments and returns its exit code (see the
/// [crate documentation](crate) for their meaning).
pub fn main() -> ExitCode {
    run(std::env::args_os())
}

/// Runs the tool with `args` (the first one is the program name), printing to the process's
/// stdout and stderr and reading confirmations from its stdin. Returns the exit code.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => return clap_failure(&e, &args),
    };
    // rediss:// needs a process-wide TLS cryptography provider; one installed already (by a
    // service embedding the tool) is kept.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return report(
                EXIT_DATABASE,
                &format!("shedlock: error: cannot start the async runtime: {e}"),
            );
        }
    };
    let table = cli.table.clone();
    let url = cli.database_url.clone().unwrap_or_default();
    match runtime.block_on(execute(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        // What a client library's message repeats of the URL is masked here too.
        Err(failure) => report(failure.code(), &scrub(&failure.line(&table), &url)),
    }
}

/// Help and version go to stdout as clap prints them; a usage error becomes one line, scrubbed
/// of the secrets of every argument (clap repeats an unexpected one as it was given: a URL
/// passed without `--database-url` would show its password) and of `DATABASE_URL`.
fn clap_failure(error: &clap::Error, args: &[OsString]) -> ExitCode {
    use clap::error::ErrorKind;
    let code = u8::try_from(error.exit_code()).unwrap_or(EXIT_USAGE);
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // Nothing useful is left to do if the terminal is gone.
        let _ = error.print();
        return ExitCode::from(code);
    }
    let rendered = error.render().to_string();
    let mut line = String::new();
    for part in rendered.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let part = part.strip_prefix("error: ").unwrap_or(part);
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') { " " } else { "; " });
        }
        line.push_str(part);
    }
    let mut line = format!("shedlock: error: {}", one_line(&line));
    let env = std::env::var_os("DATABASE_URL");
    for arg in args.iter().skip(1).chain(env.as_ref()) {
        line = scrub(&line, &arg.to_string_lossy());
    }
    report(code, &line)
}

/// Writes `line` to stderr, its control characters escaped, and returns `code`.
fn report(code: u8, line: &str) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{}", output::escape(line, false));
    ExitCode::from(code)
}

/// Checks the target and the table name, opens the database and runs the command.
async fn execute(cli: Cli) -> Result<(), Failure> {
    let Some(url) = cli.database_url.as_deref() else {
        return Err(Failure::Usage(
            "no database given: pass --database-url URL or set DATABASE_URL".into(),
        ));
    };
    let target = db::Target::parse(url)?;
    let table = cli.table;
    // Refused before anything is opened. A Redis key prefix is checked by the provider's
    // builder, before it connects.
    if !target.is_redis() {
        db::check_table_name(&table)?;
    }
    if let Command::Serve(args) = &cli.command {
        // Refused before anything is opened.
        serve::auth(args)?;
    }
    let create = matches!(cli.command, Command::Migrate);
    if let (db::Target::Sqlite(path_or_url), false) = (&target, create) {
        db::check_sqlite_file_exists(path_or_url)?;
    }
    let db = db::connect(&target, &table, create).await?;
    let outcome = match cli.command {
        Command::List { json } => list::list(db.admin(), json).await,
        Command::Unlock { name, yes, note } => {
            unlock::unlock(db.schedules(), db.runs(), &name, yes, note.as_deref()).await
        }
        Command::History(args) => history::history(db.with_history(), &args).await,
        Command::Migrate => migrate::migrate(&db).await,
        // The dashboard keeps the connection until it stops.
        Command::Serve(args) => return serve::serve(db, &args).await,
        command => steer(&db, command).await,
    };
    db.close().await;
    outcome
}

/// The schedule commands.
async fn steer(db: &db::Db, command: Command) -> Result<(), Failure> {
    let (store, runs) = (db.schedules(), db.runs());
    match command {
        Command::Jobs(args) => match &args.name {
            Some(name) => jobs::upcoming(store, runs, name, args.next, args.json).await,
            None => jobs::jobs(store, runs, args.json).await,
        },
        Command::Pause(args) => jobs::pause(store, runs, &args).await,
        Command::Resume(args) => jobs::resume(store, runs, &args).await,
        Command::Trigger(args) => jobs::trigger(store, runs, &args).await,
        Command::Reschedule(args) => jobs::reschedule(store, runs, &args).await,
        Command::Reset(args) => jobs::reset(store, runs, &args).await,
        Command::Create(args) => jobs::create(store, runs, &args).await,
        Command::Delete(args) => jobs::delete(store, runs, &args).await,
        Command::Backfill(args) => backfill::backfill(store, runs, &args).await,
        Command::Backfills(args) => backfill::backfills(store, runs, &args).await,
        Command::Calendar(command) => calendar::calendar(store, runs, &command).await,
        Command::Check(args) => check::check(store, runs, &args).await,
        // `execute` runs these itself.
        Command::List { .. }
        | Command::Unlock { .. }
        | Command::History(_)
        | Command::Migrate
        | Command::Serve(_) => Err(Failure::Usage("not a schedule command".into())),
    }
}
