//! The command line: global options, the four commands and their arguments.

use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use shedlock::history::{RunOutcome, UnknownOutcome};
use shedlock::settings::DEFAULT_TABLE_NAME;

const AFTER_HELP: &str = "\
Database URL: postgres:// or postgresql:// (PostgreSQL), mysql:// or mariadb:// (MySQL/MariaDB),
an sqlite: URL or a file path (SQLite: a path that starts with /, ./ or ../, or ends with
.db, .sqlite or .sqlite3; only `migrate` creates a missing file), redis:// or rediss://
(Redis; rediss:// is TLS). Anything else (a key=value string, a bare name) is refused.

Redis: --table (alias --key-prefix) is the key prefix: the keys are {NAME}:lock:<lock>,
{NAME}:meta:<lock> and {NAME}:names, the run history {NAME}:run:<id> and {NAME}:runs*.
`migrate` creates nothing there (it checks that the server answers and the keys' types).

Exit codes:
  0  success (including `unlock` of a lock that is already free)
  1  the database failed: unreachable, a table or SQLite file missing, a Redis key of the
     wrong type, a statement failed
  2  usage error: bad arguments, an unsupported URL scheme, a bad table name or key prefix
     (or another setting the library refuses)
  3  unlock: no lock of that name in the table (or under the key prefix); pause, resume,
     trigger, reschedule, reset, delete: no schedule or lock of that name; calendar and
     --exclude: no calendar of that name (the closest name is suggested)
  4  nothing done: unlock not released (declined at the prompt, or the lock changed hands or
     expired); trigger already pending (a request of that job is pending or its run is
     going); create of a name that already has a schedule; calendar create of a calendar
     that exists, calendar delete of one a job excludes

Schedules (jobs, pause, resume, trigger, reschedule, reset, create, delete) are kept in the
store beside the locks. Every change is recorded as made by cli:<user>@<host>, and every
change (unlock too) as an `operator` row of the run history. The schedule
named shedlock.fleet pauses every job of the fleet (pause --fleet, resume --fleet).";

/// Inspect and repair shedlock's lock table: list locks, release a stuck one, read the run
/// history, create the tables; list and change the schedules kept in the store.
#[derive(Debug, Parser)]
#[command(
    name = "shedlock",
    version,
    after_help = AFTER_HELP,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub(crate) struct Cli {
    /// The database: postgres://…, mysql://…, mariadb://…, sqlite:… or an SQLite file path
    /// (starting with /, ./ or ../, or ending with .db, .sqlite or .sqlite3), or Redis:
    /// redis://… or rediss://… (TLS).
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    pub(crate) database_url: Option<String>,

    /// The lock table; the run history is `<NAME>_runs` beside it. On Redis, the key prefix
    /// (keys `{NAME}:lock:<lock>`, `{NAME}:meta:<lock>`, `{NAME}:names`, the history
    /// `{NAME}:run:<id>` and `{NAME}:runs*`).
    #[arg(
        long,
        visible_alias = "key-prefix",
        env = "SHEDLOCK_TABLE",
        default_value = DEFAULT_TABLE_NAME,
        global = true,
        value_name = "NAME"
    )]
    pub(crate) table: String,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Every lock: held or free, holder, time remaining, fencing token, last tick.
    List {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Release a stuck lock now (an emergency measure): shows the holder and asks first.
    ///
    /// Only the holder that was shown is released: if the lock changed hands or expired in
    /// between, nothing changes (exit 4). The fencing token stays, so the next holder gets a
    /// higher one; the last tick stays, so the claimed tick does not run again. A job still
    /// running under the lock stops at its next keep-alive renewal; without keep-alive it runs
    /// on unguarded, with a stale fencing token.
    ///
    /// Use this rather than deleting the row by hand: a deleted row takes its claimed tick with
    /// it on PostgreSQL and MySQL/MariaDB, so that tick can run again (SQLite keeps it, and
    /// tokens never go back on any backend). On Redis, deleting the lock's `{PREFIX}:meta:<NAME>`
    /// key does the same.
    Unlock {
        /// The lock name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
        /// A note recorded with the release (one line, at most 500 characters): in the run
        /// history's operator row.
        #[arg(long, value_name = "TEXT")]
        note: Option<String>,
    },
    /// Recent runs from the run history, newest first.
    History(HistoryArgs),
    /// Create or upgrade the lock table and the run history table (idempotent).
    ///
    /// On Redis there is nothing to create: it checks that the server answers and that
    /// `{PREFIX}:names` is a set (or absent), the same work however many locks there are.
    Migrate,
    /// Serve the dashboard: jobs, locks, run history and a timeline of runs, with pause,
    /// resume, run now, reschedule and the release of a stuck lock (and its JSON API under
    /// /api/v1), until Ctrl-C.
    ///
    /// Nothing is served without authentication: a bearer token (--token, best given through
    /// SHEDLOCK_WEB_TOKEN so it never shows in the process list; a browser signs in once at
    /// /login), or --no-auth, which only a loopback address accepts.
    Serve(ServeArgs),
    /// Every schedule the store holds: overrides of code-defined jobs and jobs created at run
    /// time, with their cron, pause, next tick, pending trigger, last run and lock.
    ///
    /// With a job's name: its next runs (`--next N`, 5 by default) after its time zone, the
    /// store's override, its pause, the fleet's pause and its jitter, and each tick its cron
    /// gives between them that will not run, with why.
    Jobs(JobsArgs),
    /// Pause a job everywhere (or the whole fleet with --fleet); a run going on continues
    /// unless --cancel-running.
    Pause(PauseArgs),
    /// Resume a paused job (or the whole fleet with --fleet).
    Resume(ResumeArgs),
    /// Ask for one run of a job now, on one instance, under its lock (exit 4 when a request is
    /// already pending or its run is going).
    Trigger(NameArgs),
    /// Change a job's cron expression (and time zone), its jitter, its retry policy or its
    /// overlap policy, each without the others; checked before anything is written.
    Reschedule(RescheduleArgs),
    /// Clear the operator's override of a code-defined job: the code's schedule applies again.
    Reset(NameArgs),
    /// Create a job at run time, run by every instance that registered its handler.
    Create(CreateArgs),
    /// Delete a job's schedule (a run-time job, or an override).
    Delete(NameArgs),
    /// Run a job's past ticks over a range again, each once fleet-wide, oldest first, at a
    /// bounded pace, on the instances that carry the job (ticks that already ran are skipped
    /// unless --rerun). `shedlock backfills` follows it, pauses, resumes or cancels it.
    Backfill(BackfillArgs),
    /// The backfills the store keeps, with their progress; with an ID, that one (--watch: a
    /// progress bar until it is over), paused, resumed or cancelled.
    Backfills(BackfillsArgs),
    /// Calendars kept in the store: named sets of days and time ranges, read in one time zone,
    /// whose ticks the jobs that exclude them do not run (`reschedule NAME --exclude CAL`, or
    /// the code's `exclude`). Create, add, import an .ics file, remove, list, show, delete.
    #[command(subcommand)]
    Calendar(CalendarCommand),
    /// Every promise broken now, one line each on stdout, for a monitoring system's check:
    /// exit 0 when none, 5 when any. The alerts the ledger raised and did not recover (missed
    /// ticks, a job no running instance carries, a deadline broken), and what the store says
    /// itself when nobody sweeps: the ledger not swept for 2 minutes (the fleet is down), a
    /// job without a success within its expect_success_within. Reads the run history.
    Check(CheckArgs),
}

/// `check`'s options.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// Only this job's promises (and the fleet's own: the ledger).
    pub(crate) name: Option<String>,
    /// Print a JSON array of the problems instead of lines.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What `--help` of `shedlock calendar` adds: the entries' forms.
const CALENDAR_AFTER_HELP: &str = "\
An ENTRY is read on the wall clock of the calendar's time zone: a day (2026-12-25), days with
both ends included (2026-12-24..2026-12-26), or a time range with its end left out
(2026-12-24T12:00..2026-12-24T18:00).

  shedlock calendar create kr-holidays --zone Asia/Seoul 2026-01-01 2026-12-25 --label Holiday
  shedlock calendar import kr-holidays holidays.ics
  shedlock calendar add kr-holidays 2026-10-09 --label 'Hangul Day'
  shedlock reschedule nightly --exclude kr-holidays --on-excluded next
  shedlock jobs nightly --next 10";

/// `shedlock calendar …`.
#[derive(Debug, Subcommand)]
#[command(after_help = CALENDAR_AFTER_HELP)]
pub(crate) enum CalendarCommand {
    /// Create a calendar in a time zone, with entries given here and/or read from an .ics file.
    #[command(after_help = CALENDAR_AFTER_HELP)]
    Create(CalendarCreateArgs),
    /// Add entries (one with the same span as an entry there takes the new label).
    #[command(after_help = CALENDAR_AFTER_HELP)]
    Add(CalendarEntriesArgs),
    /// Add the events of an iCalendar (.ics) file: all-day events as their days, timed ones as
    /// their span on the calendar's clock, recurring ones up to --until, SUMMARY as the label.
    Import(CalendarImportArgs),
    /// Remove the entries with these spans.
    #[command(after_help = CALENDAR_AFTER_HELP)]
    Remove(CalendarEntriesArgs),
    /// Every calendar: its time zone, how many entries, the jobs that name it.
    List {
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A calendar's entries, one a line with its label, and the jobs that name it.
    Show(CalendarNameArgs),
    /// Delete a calendar (refused while a job names it: change those jobs' rules first).
    Delete(CalendarNameArgs),
}

/// `calendar create NAME --zone ZONE [ENTRY…] [--label TEXT] [--ics FILE [--until T]]`.
#[derive(Debug, Args)]
pub(crate) struct CalendarCreateArgs {
    /// The calendar's name: letters, digits, `-`, `_`, `.` (kr-holidays).
    pub(crate) name: String,
    /// The IANA time zone its entries are read in (Asia/Seoul, Europe/Berlin, UTC).
    #[arg(long, value_name = "ZONE")]
    pub(crate) zone: String,
    /// Entries: 2026-12-25, 2026-12-24..2026-12-26, 2026-12-24T12:00..2026-12-24T18:00.
    #[arg(value_name = "ENTRY")]
    pub(crate) entries: Vec<String>,
    /// A label for the entries given here (one line, at most 200 characters).
    #[arg(long, value_name = "TEXT")]
    pub(crate) label: Option<String>,
    /// Also add the events of this iCalendar (.ics) file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    pub(crate) ics: Option<std::path::PathBuf>,
    /// With --ics: expand recurring events up to this time (RFC 3339, or a day: 2028-12-31);
    /// two years from now by default.
    #[arg(long, value_name = "TIME", value_parser = parse_until, requires = "ics")]
    pub(crate) until: Option<chrono::DateTime<chrono::Utc>>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `calendar add|remove NAME ENTRY… [--label TEXT]`.
#[derive(Debug, Args)]
pub(crate) struct CalendarEntriesArgs {
    /// The calendar's name.
    pub(crate) name: String,
    /// Entries: 2026-12-25, 2026-12-24..2026-12-26, 2026-12-24T12:00..2026-12-24T18:00.
    #[arg(value_name = "ENTRY", required = true)]
    pub(crate) entries: Vec<String>,
    /// A label for the entries (add only; one line, at most 200 characters).
    #[arg(long, value_name = "TEXT")]
    pub(crate) label: Option<String>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `calendar import NAME FILE.ics [--until T]`.
#[derive(Debug, Args)]
pub(crate) struct CalendarImportArgs {
    /// The calendar's name.
    pub(crate) name: String,
    /// The iCalendar file (`-`: standard input).
    #[arg(value_name = "FILE.ics")]
    pub(crate) file: std::path::PathBuf,
    /// Expand recurring events up to this time (RFC 3339, or a day: 2028-12-31); two years
    /// from now by default.
    #[arg(long, value_name = "TIME", value_parser = parse_until)]
    pub(crate) until: Option<chrono::DateTime<chrono::Utc>>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `calendar show|delete NAME`.
#[derive(Debug, Args)]
pub(crate) struct CalendarNameArgs {
    /// The calendar's name.
    pub(crate) name: String,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--until`: an RFC 3339 instant, or a day (its end, in UTC).
fn parse_until(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(day) = chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d") {
        let end = day.and_time(chrono::NaiveTime::MIN) + chrono::TimeDelta::days(1)
            - chrono::TimeDelta::seconds(1);
        return Ok(end.and_utc());
    }
    parse_instant(text)
}

/// `shedlock backfill NAME --from T1 --to T2 …`.
#[derive(Debug, Args)]
pub(crate) struct BackfillArgs {
    /// The job's name.
    pub(crate) name: String,
    /// The range's start, excluded (RFC 3339: 2026-11-24T02:00:00Z, or with an offset).
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(crate) from: chrono::DateTime<chrono::Utc>,
    /// The range's end, included (RFC 3339), at most now.
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(crate) to: chrono::DateTime<chrono::Utc>,
    /// How many of its ticks may run at once, fleet-wide (1 to 100).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub(crate) max_running: u32,
    /// At most this many ticks start a minute, fleet-wide (default: as fast as they run).
    #[arg(long, value_name = "PER_MIN", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) rate: Option<u32>,
    /// Run the ticks that already ran again (needed where the job's runs left no history).
    #[arg(long)]
    pub(crate) rerun: bool,
    /// List the ticks it would run, and run none.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Stay and show a progress bar until it is over.
    #[arg(long)]
    pub(crate) watch: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `shedlock backfills [ID] [--pause | --resume | --cancel | --watch] [--json]`.
#[derive(Debug, Args)]
pub(crate) struct BackfillsArgs {
    /// A backfill's number (`#7` is 7).
    pub(crate) id: Option<i64>,
    /// Pause it: no new tick starts until --resume.
    #[arg(long, requires = "id", conflicts_with_all = ["resume", "cancel"])]
    pub(crate) pause: bool,
    /// Resume it.
    #[arg(long, requires = "id", conflicts_with = "cancel")]
    pub(crate) resume: bool,
    /// Cancel it: no new tick starts, ever (a tick running goes on to its end).
    #[arg(long, requires = "id")]
    pub(crate) cancel: bool,
    /// Stay and show a progress bar until it is over.
    #[arg(long, requires = "id")]
    pub(crate) watch: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// An RFC 3339 instant, named in the error when it is not one.
fn parse_instant(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .map(|at| at.with_timezone(&chrono::Utc))
        .map_err(|error| {
            format!("{text:?} is not an RFC 3339 time ({error}): write 2026-11-24T02:00:00Z, or with an offset, 2026-11-24T03:00:00+01:00")
        })
}

/// `shedlock jobs [NAME] [--next N] [--json]`.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// A job, to see its next runs instead of the table of every job.
    pub(crate) name: Option<String>,
    /// How many of the job's next runs to show (1 to 1000; with NAME).
    #[arg(long, value_name = "N", requires = "name",
          value_parser = clap::value_parser!(u64).range(1..=shedlock::operator::MOST_UPCOMING as u64))]
    pub(crate) next: Option<u64>,
    /// Print a JSON object (`fleet`, `history`, `jobs`; with NAME: `name`, `cron`, `time_zone`,
    /// `source`, `jitter_ms`, `time_rules`, `ticks`) instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// A job's name and `--json`.
#[derive(Debug, Args)]
pub(crate) struct NameArgs {
    /// The job's name.
    pub(crate) name: String,
    /// A note recorded with the change (one line, at most 500 characters): in the run
    /// history's operator row (on Redis, the audit line on stderr).
    #[arg(long, value_name = "TEXT")]
    pub(crate) note: Option<String>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct PauseArgs {
    /// The job's name (or --fleet).
    #[arg(required_unless_present = "fleet", conflicts_with = "fleet")]
    pub(crate) name: Option<String>,
    /// Why it is paused (one line, at most 500 characters): kept beside the pause until the
    /// resume, shown by `shedlock jobs`, the dashboard and its API, and recorded in the run
    /// history's operator row.
    #[arg(long, value_name = "TEXT")]
    pub(crate) note: Option<String>,
    /// Pause every job of the fleet (the schedule named shedlock.fleet).
    #[arg(long)]
    pub(crate) fleet: bool,
    /// Also release the job's lock held by a run going on, so the run is cancelled at its next
    /// keep-alive renewal (the lost-lock path). The job's lock is the one given with --lock;
    /// else, for a job created at run time, the lock of its name; else the lock its runs took
    /// as the run history records them (a run going on first), for a job whose lock is named
    /// otherwise (`#[scheduler_lock(name = …)]`, `Job::locked`); else the lock of its name.
    #[arg(long, conflicts_with = "fleet")]
    pub(crate) cancel_running: bool,
    /// The job's lock, for --cancel-running: needed when the lock is named otherwise than the
    /// job and the store keeps no run history of it (a scheduler without history).
    #[arg(long, value_name = "LOCK", requires = "cancel_running")]
    pub(crate) lock: Option<String>,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ResumeArgs {
    /// The job's name (or --fleet).
    #[arg(required_unless_present = "fleet", conflicts_with = "fleet")]
    pub(crate) name: Option<String>,
    /// A note recorded with the change (one line, at most 500 characters): in the run
    /// history's operator row (on Redis, the audit line on stderr).
    #[arg(long, value_name = "TEXT")]
    pub(crate) note: Option<String>,
    /// Resume the whole fleet (the schedule named shedlock.fleet).
    #[arg(long)]
    pub(crate) fleet: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
#[command(after_help = "\
Any of --cron, --jitter, --retry, --no-retry, --overlap, the time rules or the deadlines may be
given without the others: what is not given stays as stored (for a job defined in code, as its
code says).

Deadlines: --expect-success-within, --max-runtime, --late-after, --failures-in-a-row,
--paused-longer-than and --on-overrun each set one of the job's promises in the store, over the
code's; `off` turns the code's promise off, `default` gives it back. `shedlock check` and the
ledger's alerts follow them from the next sweep.
`reschedule NAME` with none of them is refused (exit 2).

Time rules: --exclude, --on-excluded, --start, --end and --max-runs write the job's whole time
rules from the flags given: the store's rules then replace the code's whole (a calendar the code
excludes is no longer excluded unless named again here). --rules-default clears the store's
rules: the code's apply again. `shedlock jobs NAME --next N` shows the ticks they leave out.

  shedlock reschedule nightly --cron '0 30 2 * * *' --time-zone Europe/Berlin
  shedlock reschedule nightly --exclude kr-holidays --exclude freeze --on-excluded next
  shedlock reschedule nightly --start 2026-12-01T00:00:00Z --max-runs 10
  shedlock reschedule nightly --rules-default
  shedlock reschedule nightly --jitter 2m
  shedlock reschedule nightly --retry 5 --retry-backoff 10s --retry-cap 5m
  shedlock reschedule nightly --no-retry --jitter none
  shedlock reschedule nightly --overlap buffer-one
  shedlock reschedule nightly --overlap allow-all:3 --note \"backfill week\"
  shedlock reschedule nightly --expect-success-within 26h --late-after off
  shedlock reschedule nightly --max-runtime 2h --on-overrun cancel")]
pub(crate) struct RescheduleArgs {
    /// The job's name.
    pub(crate) name: String,
    /// A note recorded with the change (one line, at most 500 characters): in the run
    /// history's operator row (on Redis, the audit line on stderr).
    #[arg(long, value_name = "TEXT")]
    pub(crate) note: Option<String>,
    /// The new cron expression (5, 6 or 7 fields); without it the cron stays as it is (only
    /// --jitter or the retry policy changes).
    #[arg(long, value_name = "EXPR")]
    pub(crate) cron: Option<String>,
    /// The IANA time zone the new --cron is read in (Europe/Berlin, UTC); without it the
    /// stored one stays (for an override without one, the code's).
    #[arg(long, value_name = "TZ", requires = "cron")]
    pub(crate) time_zone: Option<String>,
    #[command(flatten)]
    pub(crate) tuning: TuningArgs,
    #[command(flatten)]
    pub(crate) rules: RulesArgs,
    #[command(flatten)]
    pub(crate) deadlines: DeadlineArgs,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `reschedule`'s deadlines: each sets one of the job's promises in the store, over the code's
/// (`off` turns the code's off, `default` gives it back); the others stay as they are.
#[derive(Debug, Args)]
pub(crate) struct DeadlineArgs {
    /// A successful run at least this often (2h, 30m), else a `no-success` alert; `off` or
    /// `default`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) expect_success_within: Option<String>,
    /// No run longer than this, else an `overrun` alert (and with --on-overrun cancel, the
    /// run cancelled); `off` or `default`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) max_runtime: Option<String>,
    /// No start later than this after its tick, else a `late` alert; `off` or `default`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) late_after: Option<String>,
    /// A `failing` alert after this many failed runs in a row; `off` or `default`.
    #[arg(long, value_name = "COUNT")]
    pub(crate) failures_in_a_row: Option<String>,
    /// A `paused` alert when the job (or the fleet) stays paused longer; `off` or `default`.
    #[arg(long, value_name = "DURATION")]
    pub(crate) paused_longer_than: Option<String>,
    /// What becomes of a run past --max-runtime: report (an alert) or cancel (an alert, and
    /// the run cancelled and recorded failed); `default`.
    #[arg(long, value_name = "WHAT")]
    pub(crate) on_overrun: Option<String>,
}

impl DeadlineArgs {
    /// The promises given, `(name, value)` as the library's `Deadlines::edit` reads them.
    pub(crate) fn edits(&self) -> Vec<(String, String)> {
        [
            ("expect_success_within", &self.expect_success_within),
            ("max_runtime", &self.max_runtime),
            ("late_after", &self.late_after),
            ("failures_in_a_row", &self.failures_in_a_row),
            ("paused_longer_than", &self.paused_longer_than),
            ("on_overrun", &self.on_overrun),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), value.clone()?)))
        .collect()
    }
}

/// `reschedule`'s time rules: any of the first five writes the job's whole rules from them.
#[derive(Debug, Args)]
pub(crate) struct RulesArgs {
    /// A calendar whose entries the job does not run in (repeatable; the calendar must be in
    /// the store: `shedlock calendar list`). Writes the whole time rules: the code's no longer
    /// apply.
    #[arg(long, value_name = "CAL")]
    pub(crate) exclude: Vec<String>,
    /// What becomes of a tick a calendar excludes: skip (not run, recorded skipped-calendar;
    /// the default), next (run at the first instant after the excluded span) or previous (one
    /// second before it starts).
    #[arg(long, value_name = "skip|next|previous", value_parser = parse_on_excluded, requires = "exclude")]
    pub(crate) on_excluded: Option<shedlock::schedules::OnExcluded>,
    /// No run before this instant (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(crate) start: Option<chrono::DateTime<chrono::Utc>>,
    /// No run after this instant (RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_instant)]
    pub(crate) end: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many runs: the schedule's first N instants from --start (which it needs),
    /// 1 to 10000.
    #[arg(long, value_name = "N", requires = "start",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(shedlock::schedules::MAX_RUNS)))]
    pub(crate) max_runs: Option<u32>,
    /// Clear the store's time rules: the code's apply again.
    #[arg(long, conflicts_with_all = ["exclude", "on_excluded", "start", "end", "max_runs"])]
    pub(crate) rules_default: bool,
}

impl RulesArgs {
    /// Whether any was given.
    pub(crate) fn any(&self) -> bool {
        self.writes() || self.rules_default
    }

    /// Whether the flags write the whole rules.
    pub(crate) fn writes(&self) -> bool {
        !self.exclude.is_empty()
            || self.on_excluded.is_some()
            || self.start.is_some()
            || self.end.is_some()
            || self.max_runs.is_some()
    }

    /// The rules the flags write.
    pub(crate) fn rules(&self) -> shedlock::schedules::TimeRules {
        let mut rules = shedlock::schedules::TimeRules::new();
        for calendar in &self.exclude {
            rules = rules.exclude(calendar.clone());
        }
        if let Some(on) = self.on_excluded {
            rules = rules.on_excluded(on);
        }
        if let Some(start) = self.start {
            rules = rules.start(start);
        }
        if let Some(end) = self.end {
            rules = rules.end(end);
        }
        if let Some(runs) = self.max_runs {
            rules = rules.max_runs(runs);
        }
        rules
    }
}

/// `--on-excluded`: skip, next or previous.
fn parse_on_excluded(text: &str) -> Result<shedlock::schedules::OnExcluded, String> {
    text.parse()
}

/// The default of `--retry-backoff`.
pub(crate) const DEFAULT_RETRY_BACKOFF: Duration = Duration::from_secs(1);
/// The default of `--retry-cap` (or `--retry-backoff`, when that is longer).
pub(crate) const DEFAULT_RETRY_CAP: Duration = Duration::from_secs(60);
/// The most attempts `--retry` takes (the scheduler makes no more).
pub(crate) const MAX_RETRY_ATTEMPTS: u32 = 1000;

/// A value given on the command line, or `default`: back to the code's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setting<T> {
    /// This value.
    Set(T),
    /// The stored value cleared: the code's applies again.
    Default,
}

/// `--jitter` and the retry policy, of `reschedule` and `create`.
#[derive(Debug, Args)]
pub(crate) struct TuningArgs {
    /// Start each tick's run up to this much later (30s, 2m, 1h 30m), the same delay on every
    /// instance for a tick; `0` or `none`: no jitter, whatever the code says; `default`: back
    /// to the code's jitter (reschedule).
    #[arg(long, value_name = "DURATION", value_parser = parse_jitter, allow_hyphen_values = true)]
    pub(crate) jitter: Option<Setting<Duration>>,
    /// Retry a failed run: MAX_ATTEMPTS attempts in all, the first run included (1 to 1000; 1
    /// is no retry), each retry after a random delay below its bound (--retry-backoff doubling
    /// up to --retry-cap); `default`: back to the code's retry policy (reschedule).
    #[arg(long, value_name = "MAX_ATTEMPTS", value_parser = parse_retry, conflicts_with = "no_retry", allow_hyphen_values = true)]
    pub(crate) retry: Option<Setting<u32>>,
    /// The first retry's delay bound (with --retry); default 1s.
    #[arg(long, value_name = "DURATION", value_parser = parse_retry_duration, requires = "retry", allow_hyphen_values = true)]
    pub(crate) retry_backoff: Option<Duration>,
    /// The largest delay bound (with --retry); default 1m, or --retry-backoff when that is
    /// longer.
    #[arg(long, value_name = "DURATION", value_parser = parse_retry_duration, requires = "retry", allow_hyphen_values = true)]
    pub(crate) retry_cap: Option<Duration>,
    /// Let a retry start after the job's next tick (with --retry); by default it does not:
    /// the next tick's run takes over.
    #[arg(long, requires = "retry")]
    pub(crate) retry_past_next_tick: bool,
    /// Never retry a failed run, whatever the code says.
    #[arg(long)]
    pub(crate) no_retry: bool,
    /// What a tick does when a run of the job is still going, fleet-wide: skip, buffer-one,
    /// buffer-all:LIMIT (1 to 100 waiting), cancel-other, allow-all:N (at most N runs at once,
    /// 1 to 100) or allow-all:N:buffer-one; `default`: back to the code's policy
    /// (reschedule). A policy other than skip needs the job's lock declared (the lock its
    /// instances registered).
    #[arg(long, value_name = "POLICY", value_parser = parse_overlap)]
    pub(crate) overlap: Option<Setting<shedlock::Overlap>>,
}

impl TuningArgs {
    /// Whether any of them was given.
    pub(crate) fn any(&self) -> bool {
        self.jitter.is_some() || self.retry.is_some() || self.no_retry || self.overlap.is_some()
    }
}

/// `--overlap`: a policy as [`shedlock::Overlap`] reads it, or `default`.
fn parse_overlap(text: &str) -> Result<Setting<shedlock::Overlap>, String> {
    match text.trim() {
        "default" => Ok(Setting::Default),
        other => other.parse().map(Setting::Set),
    }
}

/// `--jitter`: a humantime duration, `0`/`none` (zero) or `default`.
fn parse_jitter(text: &str) -> Result<Setting<Duration>, String> {
    match text.trim() {
        "none" | "0" => Ok(Setting::Set(Duration::ZERO)),
        "default" => Ok(Setting::Default),
        other => parse_duration(other).map(Setting::Set),
    }
}

/// `--retry`: attempts in all (1 to 1000) or `default`.
fn parse_retry(text: &str) -> Result<Setting<u32>, String> {
    let text = text.trim();
    if text == "default" {
        return Ok(Setting::Default);
    }
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_RETRY_ATTEMPTS).contains(&n) => Ok(Setting::Set(n)),
        _ => Err(format!(
            "MAX_ATTEMPTS is the attempts in all, the first run included: a whole number from 1 to {MAX_RETRY_ATTEMPTS} (1: no retry), or `default` (the code's policy)"
        )),
    }
}

/// `--retry-backoff`, `--retry-cap`: a humantime duration above zero.
fn parse_retry_duration(text: &str) -> Result<Duration, String> {
    let duration = parse_duration(text.trim())?;
    if duration.is_zero() {
        return Err("a retry delay bound must be more than 0 (1s, 30s, 5m)".into());
    }
    Ok(duration)
}

/// A humantime duration (`30s`, `5m`, `1h 30m`), at most 1000 years.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text)
        .map_err(|e| format!("{e}: a duration such as 30s, 5m or 1h 30m"))?;
    if duration > shedlock::settings::MAX_LOCK_DURATION {
        return Err("more than 1000 years".into());
    }
    Ok(duration)
}

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    /// The job's name.
    pub(crate) name: String,
    /// A note recorded with the change (one line, at most 500 characters): in the run
    /// history's operator row (on Redis, the audit line on stderr).
    #[arg(long, value_name = "TEXT")]
    pub(crate) note: Option<String>,
    /// The handler that runs it (registered by the application).
    #[arg(long, value_name = "H")]
    pub(crate) handler: String,
    /// The cron expression (5, 6 or 7 fields).
    #[arg(long, value_name = "EXPR")]
    pub(crate) cron: String,
    /// The IANA time zone it is read in (default UTC).
    #[arg(long, value_name = "TZ")]
    pub(crate) time_zone: Option<String>,
    /// What the handler is given: JSON text (default `null`).
    #[arg(long, value_name = "JSON")]
    pub(crate) payload: Option<String>,
    #[command(flatten)]
    pub(crate) tuning: TuningArgs,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    /// Only runs of this lock name or job name.
    pub(crate) name: Option<String>,
    /// At most this many runs.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) limit: u32,
    /// Only runs with this outcome: running, executed, failed, skipped-held, skipped-overlap,
    /// cancelled-lost-lock, cancelled-shutdown, panicked, skipped-clock-skew, skipped-paused,
    /// skipped-shed, buffered, cancelled-by-next, skipped-calendar, missed, error, abandoned,
    /// operator, or the alerts: alert, alert-sent, alert-undelivered.
    #[arg(long, value_parser = parse_outcome)]
    pub(crate) outcome: Option<RunOutcome>,
    /// The ledger: one record per due tick (runs, skips and `missed` ticks), without the
    /// operators' rows and the alerts, with each start's lateness after its tick.
    #[arg(long)]
    pub(crate) ledger: bool,
    /// Print a JSON array instead of a table (errors in full).
    #[arg(long)]
    pub(crate) json: bool,
    /// First close every run left `running` whose lock is no longer held by its fencing token
    /// (its process died mid-run) as `abandoned`, with the reason, as schedulers with history on
    /// do at start-up and every prune interval; says on stderr how many it closed.
    #[arg(long)]
    pub(crate) close_abandoned: bool,
}

fn parse_outcome(text: &str) -> Result<RunOutcome, UnknownOutcome> {
    RunOutcome::from_str(text)
}

/// `serve`'s options.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub(crate) listen: std::net::SocketAddr,
    /// The bearer token a request (or a browser's sign-in) must give.
    #[arg(
        long,
        env = "SHEDLOCK_WEB_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub(crate) token: Option<String>,
    /// Serve without authentication: refused unless --listen is a loopback address. The
    /// dashboard then answers only for the host names localhost, 127.0.0.1 and `[::1]`.
    #[arg(long, conflicts_with = "token")]
    pub(crate) no_auth: bool,
    /// Show everything and offer no action.
    #[arg(long)]
    pub(crate) read_only: bool,
    /// A host name the dashboard answers for (repeatable), besides localhost, 127.0.0.1, `[::1]`
    /// and the IP address a connection reached: the name browsers use to reach it
    /// (`ops.example.com`, any port; `ops.example.com:8443`, that port). Any other Host is
    /// answered 421 (a DNS name pointed at this machine by a web page). Needs a token.
    #[arg(long = "allowed-host", value_name = "NAME", conflicts_with = "no_auth")]
    pub(crate) allowed_hosts: Vec<String>,
    /// Believe the proxy in front: X-Forwarded-Proto: https marks the browser's connection as
    /// HTTPS (cookies Secure, named __Host-; Origin https://), and the last X-Forwarded-For
    /// address is the client's (recorded with each action, counted by the sign-in throttle).
    /// Only behind a proxy that sets both on every request. `serve` itself speaks plain HTTP.
    #[arg(long)]
    pub(crate) trust_proxy_headers: bool,
}
