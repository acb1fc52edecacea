//! The `shedlock` command-line tool: what an operator needs on a bad day, for every backend.
//!
//! Build it with `cargo install shedlock --features cli` (or `cargo run -p shedlock --features
//! cli -- …` in this workspace).
//!
//! ```text
//! shedlock --database-url URL [--table NAME] list [--json]
//! shedlock --database-url URL [--table NAME] unlock NAME [--yes]
//! shedlock --database-url URL [--table NAME] history [NAME] [--limit N] [--outcome O] [--json] [--close-abandoned]
//! shedlock --database-url URL [--table NAME] migrate
//! ```
//!
//! - `list`: every lock of the table, held or free, with its holder, its time remaining (by the
//!   database clock), its fencing token and the last tick claimed through it.
//! - `unlock`: an emergency release of a lock whose holder is stuck. It shows the holder, asks
//!   for confirmation (unless `--yes`), and ends the lock only while it still carries the
//!   fencing token that was shown ([`LockProvider::force_release`]):
//!   a lock that changed hands in between is left alone. The token stays, so the next holder
//!   gets a higher one and the released holder's token is stale; `last_tick` stays, so the tick
//!   it claimed does not run again. Use it rather than deleting the row by hand: a deleted row
//!   takes its claimed tick with it on PostgreSQL and MySQL/MariaDB (SQLite keeps it).
//! - `history`: the run history (`<table>_runs`), newest first, filtered by lock or job name and
//!   by outcome. An `abandoned` run shows why in full in the `ERROR` column. A run still
//!   `running` shows `running` as its duration while its lock is held by its fencing token, and
//!   `unfinished` once it is not: the next sweep ([`LockProvider::close_abandoned_runs`], run by
//!   every scheduler with history on at start-up and every `RunHistory::prune_every`) closes it
//!   as `abandoned`. `--close-abandoned` runs that sweep first (without it, `history` only
//!   reads) and says on stderr how many runs it closed.
//! - `migrate`: creates or upgrades the lock table and the run history table.
//!
//! # Database URL
//!
//! `--database-url` (or `DATABASE_URL`) chooses the backend: `postgres://` or `postgresql://`
//! is PostgreSQL, `mysql://` or `mariadb://` is MySQL/MariaDB, and an `sqlite:` URL or a plain
//! file path is SQLite. Only `migrate` creates a missing SQLite file: the other commands say it
//! does not exist, so a typo in a path is not mistaken for an empty database. `--table` (or
//! `SHEDLOCK_TABLE`, default `shedlock`) is the lock table.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success (including `unlock` of a lock that is already free) |
//! | 1 | the database failed: unreachable, a table or SQLite file missing, a statement failed |
//! | 2 | usage error: bad arguments, an unsupported URL scheme, a bad table name |
//! | 3 | `unlock`: no lock of that name in the table |
//! | 4 | `unlock`: not released (declined at the prompt, or the lock changed hands or expired) |
//!
//! Each failure is one line on stderr: `shedlock: error: …` for codes 1 and 2, `shedlock: …`
//! for codes 3 and 4.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::Path;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use crate::settings::TableName;
use crate::{
    Backend, DEFAULT_TABLE_NAME, Error, LockProvider, LockState, MySqlLockProvider,
    PostgresLockProvider, RunOutcome, RunQuery, RunRecord, SqliteLockProvider, UnknownOutcome,
};

const EXIT_DATABASE: u8 = 1;
const EXIT_USAGE: u8 = 2;
const EXIT_NO_SUCH_LOCK: u8 = 3;
const EXIT_NOT_RELEASED: u8 = 4;

/// How long connecting may take before the tool gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// The longest error text shown in `history`'s table (`--json` has it whole, and so has the
/// table for an abandoned run's reason).
const ERROR_WIDTH: usize = 60;

const AFTER_HELP: &str = "\
Database URL: postgres:// or postgresql:// (PostgreSQL), mysql:// or mariadb:// (MySQL/MariaDB),
an sqlite: URL or a plain file path (SQLite; only `migrate` creates a missing file).

Exit codes:
  0  success (including `unlock` of a lock that is already free)
  1  the database failed: unreachable, a table or SQLite file missing, a statement failed
  2  usage error: bad arguments, an unsupported URL scheme, a bad table name
  3  unlock: no lock of that name in the table
  4  unlock: not released (declined at the prompt, or the lock changed hands or expired)";

/// Inspect and repair shedlock's lock table: list locks, release a stuck one, read the run
/// history, create the tables.
#[derive(Debug, Parser)]
#[command(
    name = "shedlock",
    version,
    after_help = AFTER_HELP,
    subcommand_required = true,
    arg_required_else_help = true
)]
struct Cli {
    /// The database: postgres://…, mysql://…, mariadb://…, sqlite:… or an SQLite file path.
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        global = true,
        value_name = "URL"
    )]
    database_url: Option<String>,

    /// The lock table; the run history is `<NAME>_runs` beside it.
    #[arg(
        long,
        env = "SHEDLOCK_TABLE",
        default_value = DEFAULT_TABLE_NAME,
        global = true,
        value_name = "NAME"
    )]
    table: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
    /// tokens never go back on any backend).
    Unlock {
        /// The lock name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Recent runs from the history table, newest first.
    History(HistoryArgs),
    /// Create or upgrade the lock table and the run history table (idempotent).
    Migrate,
}

#[derive(Debug, Args)]
struct HistoryArgs {
    /// Only runs of this lock name or job name.
    name: Option<String>,
    /// At most this many runs.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    /// Only runs with this outcome: running, executed, failed, skipped-held, skipped-overlap,
    /// cancelled-lost-lock, cancelled-shutdown, panicked, skipped-clock-skew, error or
    /// abandoned.
    #[arg(long, value_parser = parse_outcome)]
    outcome: Option<RunOutcome>,
    /// Print a JSON array instead of a table (errors in full).
    #[arg(long)]
    json: bool,
    /// First close every run left `running` whose lock is no longer held by its fencing token
    /// (its process died mid-run) as `abandoned`, with the reason, as schedulers with history on
    /// do at start-up and every prune interval; says on stderr how many it closed.
    #[arg(long)]
    close_abandoned: bool,
}

fn parse_outcome(text: &str) -> Result<RunOutcome, UnknownOutcome> {
    RunOutcome::from_str(text)
}

/// Runs the tool with the process's arguments and returns its exit code (see the
/// [module documentation](self) for their meaning).
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
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return clap_failure(&e),
    };
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
    match runtime.block_on(execute(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => report(failure.code(), &failure.line(&table)),
    }
}

/// Help and version go to stdout as clap prints them; a usage error becomes one line.
fn clap_failure(error: &clap::Error) -> ExitCode {
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
    report(code, &format!("shedlock: error: {}", one_line(&line)))
}

fn report(code: u8, line: &str) -> ExitCode {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
    ExitCode::from(code)
}

/// Why a command did not succeed; each is one line on stderr and an exit code.
#[derive(Debug)]
enum Failure {
    /// An error from the library.
    Library(Box<Error>),
    /// Bad input found by the tool (exit 2).
    Usage(String),
    /// The database could not be used, in words of the tool (exit 1).
    Database(String),
    /// `unlock` of a name that has no row (exit 3).
    NoSuchLock { name: String, table: String },
    /// `unlock` did not release (exit 4).
    NotReleased(String),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Library(Box::new(error))
    }
}

impl Failure {
    fn code(&self) -> u8 {
        match self {
            Failure::Library(error) => match **error {
                Error::InvalidUrl { .. } | Error::InvalidTableName { .. } => EXIT_USAGE,
                _ => EXIT_DATABASE,
            },
            Failure::Usage(_) => EXIT_USAGE,
            Failure::Database(_) => EXIT_DATABASE,
            Failure::NoSuchLock { .. } => EXIT_NO_SUCH_LOCK,
            Failure::NotReleased(_) => EXIT_NOT_RELEASED,
        }
    }

    /// The line on stderr; `table` is the lock table the command was about.
    fn line(&self, table: &str) -> String {
        match self {
            Failure::Library(error) => {
                format!("shedlock: error: {}", library_error_line(error, table))
            }
            Failure::Usage(text) | Failure::Database(text) => {
                format!("shedlock: error: {}", one_line(text))
            }
            Failure::NoSuchLock { name, table } => format!(
                "shedlock: no lock named {name:?} in table {table}; `shedlock list` shows the locks there"
            ),
            Failure::NotReleased(text) => format!("shedlock: {}", one_line(text)),
        }
    }
}

/// The library's error as one line: a missing table says to run `shedlock migrate`, anything
/// else is its message with whatever its sources add.
fn library_error_line(error: &Error, table: &str) -> String {
    if let Error::TableMissing {
        backend,
        table: missing,
    } = error
    {
        let which = if *missing == format!("{table}_runs") {
            "run history table"
        } else {
            "lock table"
        };
        return format!(
            "the {which} `{missing}` does not exist in the {backend} database: run `shedlock migrate` \
             (with the same --database-url and --table) to create it"
        );
    }
    let mut line = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    one_line(&line)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Where the database is, from `--database-url`.
#[derive(Debug)]
enum Target {
    Postgres(String),
    MySql(String),
    /// An `sqlite:` URL or a file path.
    Sqlite(String),
}

impl Target {
    fn parse(url: &str) -> Result<Self, Failure> {
        if url.trim().is_empty() {
            return Err(Failure::Usage(
                "the database URL is empty: pass --database-url URL or set DATABASE_URL".into(),
            ));
        }
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            Ok(Target::Postgres(url.to_owned()))
        } else if lower.starts_with("mysql://") {
            Ok(Target::MySql(url.to_owned()))
        } else if lower.starts_with("mariadb://") {
            Ok(Target::MySql(format!(
                "mysql://{}",
                &url["mariadb://".len()..]
            )))
        } else if lower.starts_with("sqlite:") {
            Ok(Target::Sqlite(url.to_owned()))
        } else if let Some((scheme, _)) = url.split_once("://") {
            // Only the scheme is repeated: the rest may hold a password.
            Err(Failure::Usage(format!(
                "unsupported database URL scheme {scheme:?}: use postgres:// or postgresql:// (PostgreSQL), \
                 mysql:// or mariadb:// (MySQL/MariaDB), or an sqlite: URL or a file path (SQLite)"
            )))
        } else {
            Ok(Target::Sqlite(url.to_owned()))
        }
    }

    fn backend(&self) -> Backend {
        match self {
            Target::Postgres(_) => Backend::Postgres,
            Target::MySql(_) => Backend::MySql,
            Target::Sqlite(_) => Backend::Sqlite,
        }
    }
}

/// A connected provider of one of the three backends.
#[derive(Debug)]
enum Db {
    Postgres(PostgresLockProvider),
    MySql(MySqlLockProvider),
    Sqlite(SqliteLockProvider),
}

impl Db {
    fn provider(&self) -> &dyn LockProvider {
        match self {
            Db::Postgres(p) => p,
            Db::MySql(p) => p,
            Db::Sqlite(p) => p,
        }
    }

    async fn close(self) {
        match self {
            Db::Postgres(p) => p.pool().close().await,
            Db::MySql(p) => p.pool().close().await,
            Db::Sqlite(p) => p.pool().close().await,
        }
    }
}

/// Connects to `target` and builds a provider on `table`. `create` allows a missing SQLite
/// file to be created.
async fn open(target: &Target, table: &str, create: bool) -> Result<Db, Error> {
    Ok(match target {
        Target::Postgres(url) => {
            let provider = PostgresLockProvider::connect(url).await?;
            Db::Postgres(
                PostgresLockProvider::builder(provider.pool().clone())
                    .table_name(table)
                    .build()?,
            )
        }
        Target::MySql(url) => {
            let provider = MySqlLockProvider::connect(url).await?;
            Db::MySql(
                MySqlLockProvider::builder(provider.pool().clone())
                    .table_name(table)
                    .build()?,
            )
        }
        Target::Sqlite(path_or_url) => {
            let options = sqlite_options(path_or_url)?;
            let address = options.get_filename().display().to_string();
            let pool = SqlitePoolOptions::new()
                .max_connections(2)
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(
                    SqliteLockProvider::recommended_options(options).create_if_missing(create),
                )
                .await
                .map_err(|source| Error::Unreachable {
                    backend: Backend::Sqlite,
                    address,
                    source,
                })?;
            Db::Sqlite(
                SqliteLockProvider::builder(pool)
                    .table_name(table)
                    .build()?,
            )
        }
    })
}

fn sqlite_options(path_or_url: &str) -> Result<SqliteConnectOptions, Error> {
    if path_or_url.starts_with("sqlite:") {
        SqliteConnectOptions::from_str(path_or_url).map_err(|source| Error::InvalidUrl {
            backend: Backend::Sqlite,
            source,
        })
    } else {
        Ok(SqliteConnectOptions::new().filename(path_or_url))
    }
}

/// For every command but `migrate`: a missing SQLite file is an error, not a new database.
fn check_sqlite_file_exists(path_or_url: &str) -> Result<(), Failure> {
    let lower = path_or_url.to_ascii_lowercase();
    if lower.contains(":memory:") || lower.contains("mode=memory") {
        return Ok(());
    }
    let options = sqlite_options(path_or_url)?;
    let path = options.get_filename();
    if Path::new(path).exists() {
        Ok(())
    } else {
        Err(Failure::Database(format!(
            "the SQLite database file {} does not exist (check the path; `shedlock migrate` creates it)",
            path.display()
        )))
    }
}

async fn execute(cli: Cli) -> Result<(), Failure> {
    let Some(url) = cli.database_url.as_deref() else {
        return Err(Failure::Usage(
            "no database given: pass --database-url URL or set DATABASE_URL".into(),
        ));
    };
    let target = Target::parse(url)?;
    let table = cli.table;
    TableName::new(&table)?;
    let create = matches!(cli.command, Command::Migrate);
    if let (Target::Sqlite(path_or_url), false) = (&target, create) {
        check_sqlite_file_exists(path_or_url)?;
    }
    let db = match tokio::time::timeout(CONNECT_TIMEOUT, open(&target, &table, create)).await {
        Ok(db) => db?,
        Err(_) => {
            return Err(Failure::Database(format!(
                "cannot reach the {} database: no answer within {}",
                target.backend(),
                humantime::format_duration(CONNECT_TIMEOUT)
            )));
        }
    };
    let provider = db.provider();
    let outcome = match cli.command {
        Command::List { json } => list(provider, json).await,
        Command::Unlock { name, yes } => unlock(provider, &name, yes).await,
        Command::History(args) => history(provider, &args).await,
        Command::Migrate => migrate(provider).await,
    };
    db.close().await;
    outcome
}

/// Writes to stdout; a closed pipe (`shedlock list | head -1`) is not an error.
fn print(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

async fn migrate(provider: &dyn LockProvider) -> Result<(), Failure> {
    provider.migrate().await?;
    let table = provider.table_name();
    print(&format!(
        "tables {table} and {table}_runs are up to date ({})\n",
        provider.backend()
    ));
    Ok(())
}

async fn list(provider: &dyn LockProvider, json: bool) -> Result<(), Failure> {
    let locks = provider.locks().await?;
    if json {
        let array: Vec<Value> = locks.iter().map(lock_json).collect();
        print(&format!("{}\n", pretty(&Value::Array(array))));
        return Ok(());
    }
    if locks.is_empty() {
        print(&format!(
            "no locks in table {} ({})\n",
            provider.table_name(),
            provider.backend()
        ));
        return Ok(());
    }
    let rows = locks
        .iter()
        .map(|lock| {
            vec![
                lock.name.clone(),
                if lock.is_held() { "held" } else { "free" }.to_owned(),
                lock.locked_by.clone(),
                time(lock.locked_at),
                time(lock.locked_until),
                remaining(lock),
                lock.fencing_token.to_string(),
                lock.last_tick.map_or_else(|| "-".to_owned(), time),
            ]
        })
        .collect::<Vec<_>>();
    print(&render_table(
        &[
            "NAME",
            "STATE",
            "LOCKED_BY",
            "LOCKED_AT",
            "LOCKED_UNTIL",
            "REMAINING",
            "TOKEN",
            "LAST_TICK",
        ],
        &rows,
    ));
    Ok(())
}

fn lock_json(lock: &LockState) -> Value {
    json!({
        "name": lock.name,
        "held": lock.is_held(),
        "locked_by": lock.locked_by,
        "locked_at": json_time(lock.locked_at),
        "locked_until": json_time(lock.locked_until),
        "remaining_ms": u64::try_from(lock.remaining().as_millis()).unwrap_or(u64::MAX),
        "fencing_token": lock.fencing_token,
        "last_tick": lock.last_tick.map(json_time),
    })
}

async fn unlock(provider: &dyn LockProvider, name: &str, yes: bool) -> Result<(), Failure> {
    let table = provider.table_name().to_owned();
    let Some(state) = provider.lock_state(name).await? else {
        return Err(Failure::NoSuchLock {
            name: name.to_owned(),
            table,
        });
    };
    let token = state.fencing_token;
    let mut shown = format!("lock {name:?} in table {table}:\n");
    for (label, value) in [
        ("locked_by", state.locked_by.clone()),
        ("locked_at", time(state.locked_at)),
        ("locked_until", time(state.locked_until)),
        ("remaining", remaining(&state)),
        ("fencing_token", token.to_string()),
        (
            "last_tick",
            state.last_tick.map_or_else(|| "-".to_owned(), time),
        ),
    ] {
        let _ = writeln!(shown, "  {label:<14}{value}");
    }
    print(&shown);
    if !state.is_held() {
        print(&format!(
            "lock {name:?} is already free (it expired at {}); nothing to do\n",
            time(state.locked_until)
        ));
        return Ok(());
    }
    if !yes && !confirm(name, &state.locked_by, token).await {
        return Err(Failure::NotReleased(format!(
            "not released: lock {name:?} is still held by {} (token {token})",
            state.locked_by
        )));
    }
    if !provider.force_release(name, token).await? {
        return Err(Failure::NotReleased(format!(
            "not released: lock {name:?} changed hands or expired since it was read (token {token} no longer holds it); \
             run `shedlock unlock {name}` again to see who holds it now"
        )));
    }
    let tick = match state.last_tick {
        Some(tick) => format!(
            "the last tick stays {}: that tick does not run again",
            time(tick)
        ),
        None => "no tick was claimed through it".to_owned(),
    };
    print(&format!(
        "released lock {name:?} (held by {holder}, token {token}).\n\
         - the fencing token stays {token}: the next holder gets a higher one\n\
         - {tick}\n\
         - a job still running under token {token} stops at its next keep-alive renewal; \
         without keep-alive it runs on unguarded, and its fencing token {token} is now stale\n",
        holder = state.locked_by
    ));
    Ok(())
}

/// Asks on stderr, reads a line from stdin: only `y` or `yes` is a yes; end of input is a no.
async fn confirm(name: &str, holder: &str, token: i64) -> bool {
    use tokio::io::AsyncBufReadExt;
    {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(
            stderr,
            "Release lock {name:?} held by {holder} (token {token})? [y/N] "
        );
        let _ = stderr.flush();
    }
    let mut answer = String::new();
    let read = tokio::io::BufReader::new(tokio::io::stdin())
        .read_line(&mut answer)
        .await;
    // A terminal echoes the operator's Enter; piped input and end of input end the line here.
    if !matches!(read, Ok(n) if n > 0 && std::io::stdin().is_terminal()) {
        let _ = writeln!(std::io::stderr());
    }
    match read {
        Ok(0) | Err(_) => false,
        Ok(_) => matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"),
    }
}

async fn history(provider: &dyn LockProvider, args: &HistoryArgs) -> Result<(), Failure> {
    if args.close_abandoned {
        let closed = provider.close_abandoned_runs().await?;
        let runs = if closed == 1 { "run" } else { "runs" };
        let mut stderr = std::io::stderr().lock();
        let _ = writeln!(
            stderr,
            "shedlock: closed {closed} {runs} left running whose lock is no longer held by its fencing token, as abandoned"
        );
    }
    let mut query = RunQuery::latest(args.limit);
    query.name.clone_from(&args.name);
    query.outcome = args.outcome;
    let runs = provider.runs(&query).await?;
    if args.json {
        let array: Vec<Value> = runs.iter().map(run_json).collect();
        print(&format!("{}\n", pretty(&Value::Array(array))));
        return Ok(());
    }
    if runs.is_empty() {
        let mut filter = String::new();
        if let Some(name) = &args.name {
            let _ = write!(filter, " for {name:?}");
        }
        if let Some(outcome) = args.outcome {
            let _ = write!(filter, " with outcome {outcome}");
        }
        print(&format!(
            "no runs{filter} in table {}_runs ({})\n",
            provider.table_name(),
            provider.backend()
        ));
        return Ok(());
    }
    let mut rows = Vec::with_capacity(runs.len());
    for run in &runs {
        let duration = match run.duration() {
            Some(duration) => human(duration, true),
            // Closed by a sweep: when the run ended was never recorded.
            None if run.outcome == RunOutcome::Abandoned => "unknown".to_owned(),
            None if still_running(provider, run).await => "running".to_owned(),
            None => "unfinished".to_owned(),
        };
        rows.push(vec![
            run.id.to_string(),
            run.job.clone(),
            run.name.clone(),
            run.tick.map_or_else(|| "-".to_owned(), time),
            time(run.started_at),
            duration,
            run.outcome.to_string(),
            run.locked_by.clone(),
            run.fencing_token
                .map_or_else(|| "-".to_owned(), |t| t.to_string()),
            // The reason a run was abandoned is shown whole: it is what the operator came for.
            match (run.outcome, run.error.as_deref()) {
                (_, None) => "-".to_owned(),
                (RunOutcome::Abandoned, Some(reason)) => one_line(reason),
                (_, Some(error)) => truncate(error),
            },
        ]);
    }
    print(&render_table(
        &[
            "ID",
            "JOB",
            "LOCK",
            "TICK",
            "STARTED_AT",
            "DURATION",
            "OUTCOME",
            "LOCKED_BY",
            "TOKEN",
            "ERROR",
        ],
        &rows,
    ));
    Ok(())
}

/// An unfinished run is running while its lock is still held with its token; otherwise its
/// instance died or lost the lock, and the row stays unfinished until a sweep closes it as
/// abandoned.
async fn still_running(provider: &dyn LockProvider, run: &RunRecord) -> bool {
    let Some(token) = run.fencing_token else {
        return run.outcome == RunOutcome::Running;
    };
    matches!(
        provider.lock_state(&run.name).await,
        Ok(Some(state)) if state.fencing_token == token && state.is_held()
    )
}

fn run_json(run: &RunRecord) -> Value {
    json!({
        "id": run.id,
        "job": run.job,
        "name": run.name,
        "tick": run.tick.map(json_time),
        "started_at": json_time(run.started_at),
        "finished_at": run.finished_at.map(json_time),
        "duration_ms": run.duration().map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        "outcome": run.outcome.as_str(),
        "locked_by": run.locked_by,
        "fencing_token": run.fencing_token,
        "error": run.error,
    })
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// Columns padded to their widest cell, two spaces apart, no trailing spaces.
fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A time in the table: RFC 3339, UTC, whole seconds.
fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A time in JSON: RFC 3339, UTC, milliseconds.
fn json_time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn remaining(lock: &LockState) -> String {
    if lock.is_held() {
        human(lock.remaining(), false)
    } else {
        "-".to_owned()
    }
}

/// A duration the way humantime writes it (`4m 12s`, `350ms`): whole seconds from a minute
/// up, or from a second up unless `precise`; milliseconds below.
fn human(duration: Duration, precise: bool) -> String {
    const SECOND: Duration = Duration::from_secs(1);
    let shown = if duration >= 60 * SECOND || (!precise && duration >= SECOND) {
        Duration::from_secs(duration.as_secs())
    } else if duration >= Duration::from_millis(1) {
        Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    } else {
        Duration::from_micros(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
    };
    humantime::format_duration(shown).to_string()
}

/// An error text on one line, cut to [`ERROR_WIDTH`] characters.
fn truncate(error: &str) -> String {
    let error = one_line(error);
    if error.chars().count() <= ERROR_WIDTH {
        return error;
    }
    let mut cut: String = error.chars().take(ERROR_WIDTH - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_choose_the_backend() {
        assert!(matches!(
            Target::parse("postgresql://u@h/db"),
            Ok(Target::Postgres(_))
        ));
        assert!(matches!(
            Target::parse("mariadb://root@h:3306/test"),
            Ok(Target::MySql(url)) if url == "mysql://root@h:3306/test"
        ));
        assert!(matches!(
            Target::parse("sqlite://x.db"),
            Ok(Target::Sqlite(_))
        ));
        assert!(matches!(
            Target::parse("var/locks.db"),
            Ok(Target::Sqlite(_))
        ));
        let Err(Failure::Usage(text)) = Target::parse("redis://u:secret@h/0") else {
            panic!("redis:// is refused");
        };
        assert!(
            text.contains("\"redis\"") && !text.contains("secret"),
            "{text}"
        );
    }

    #[test]
    fn durations_read_like_humantime() {
        assert_eq!(human(Duration::from_millis(252_400), false), "4m 12s");
        assert_eq!(human(Duration::from_millis(1_500), false), "1s");
        assert_eq!(human(Duration::from_millis(1_500), true), "1s 500ms");
        assert_eq!(human(Duration::from_micros(350_700), true), "350ms");
    }

    #[test]
    fn tables_are_aligned_without_trailing_spaces() {
        let out = render_table(
            &["A", "LONG_HEADER"],
            &[vec!["wide cell".into(), "x".into()]],
        );
        assert_eq!(out, "A          LONG_HEADER\nwide cell  x\n");
    }

    #[test]
    fn long_errors_are_cut_in_the_table() {
        let cut = truncate(&"e".repeat(100));
        assert_eq!(cut.chars().count(), ERROR_WIDTH);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("a\nb"), "a b");
    }
}
