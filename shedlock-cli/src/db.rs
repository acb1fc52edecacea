//! Where the database is (`--database-url`), the checks made before opening it, and the
//! provider the commands run on: a lock table in PostgreSQL, MySQL/MariaDB or SQLite, or the
//! keys under a key prefix in Redis.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use shedlock::schedules::ScheduleStore;
use shedlock::settings::backend_of_url;
use shedlock::{
    Backend, Error, LockAdmin, MySqlLockProvider, PostgresLockProvider, RunStore,
    SqliteLockProvider,
};
use shedlock_redis::RedisLockProvider;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use crate::failure::Failure;

/// How long connecting may take before the tool gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// Where the database is, from `--database-url`.
#[derive(Debug)]
pub(crate) enum Target {
    Postgres(String),
    MySql(String),
    /// An `sqlite:` URL or a file path.
    Sqlite(String),
    /// A `redis://` or `rediss://` (TLS) URL.
    Redis(String),
}

impl Target {
    /// The backend `url` names, by the library's rule
    /// ([`backend_of_url`](shedlock::settings::backend_of_url)): a string is an SQLite file
    /// only when it says so; anything else that is no URL of a backend is refused (exit 2),
    /// naming the accepted forms, its secrets masked.
    pub(crate) fn parse(url: &str) -> Result<Self, Failure> {
        if url.trim().is_empty() {
            return Err(Failure::Usage(
                "the database URL is empty: pass --database-url URL or set DATABASE_URL".into(),
            ));
        }
        match backend_of_url(url)? {
            Backend::Postgres => Ok(Target::Postgres(url.to_owned())),
            Backend::MySql => Ok(Target::MySql(mysql_spelling(url))),
            Backend::Redis => Ok(Target::Redis(url.to_owned())),
            _ if url == ":memory:" || url.to_ascii_lowercase().starts_with("sqlite::memory:") => {
                Err(Failure::Usage(
                    "an SQLite database in memory (:memory:) lives only as long as one command: \
                     the tool would read an empty store; give the path of the file the \
                     schedulers use"
                        .into(),
                ))
            }
            _ => Ok(Target::Sqlite(url.to_owned())),
        }
    }

    fn backend(&self) -> Backend {
        match self {
            Target::Postgres(_) => Backend::Postgres,
            Target::MySql(_) => Backend::MySql,
            Target::Sqlite(_) => Backend::Sqlite,
            Target::Redis(_) => Backend::Redis,
        }
    }

    /// Whether the locks are in Redis, where `--table` is the key prefix and there is no run
    /// history.
    pub(crate) fn is_redis(&self) -> bool {
        matches!(self, Target::Redis(_))
    }
}

/// A connected provider of one of the four backends.
#[derive(Debug)]
pub(crate) enum Db {
    Postgres(PostgresLockProvider),
    MySql(MySqlLockProvider),
    Sqlite(SqliteLockProvider),
    Redis(RedisLockProvider),
}

/// What `history` needs of a provider: its locks ([`LockAdmin`]) and its run history
/// ([`RunStore`]), which only the SQL backends keep.
pub(crate) trait Operated: LockAdmin + RunStore {}

impl<P: LockAdmin + RunStore> Operated for P {}

/// What the schedule commands need of a provider: its schedules ([`ScheduleStore`]) and its
/// locks ([`LockAdmin`]), on every backend.
pub(crate) trait Steered: ScheduleStore + LockAdmin {}

impl<P: ScheduleStore + LockAdmin> Steered for P {}

impl Db {
    /// The locks, on every backend.
    pub(crate) fn admin(&self) -> &dyn LockAdmin {
        match self {
            Db::Postgres(p) => p,
            Db::MySql(p) => p,
            Db::Sqlite(p) => p,
            Db::Redis(p) => p,
        }
    }

    /// The schedules and the locks, on every backend.
    pub(crate) fn schedules(&self) -> &dyn Steered {
        match self {
            Db::Postgres(p) => p,
            Db::MySql(p) => p,
            Db::Sqlite(p) => p,
            Db::Redis(p) => p,
        }
    }

    /// The run history, on every backend (the operator layer takes an `Option`: a store of
    /// its own may keep none).
    pub(crate) fn runs(&self) -> Option<&dyn RunStore> {
        Some(self.with_history())
    }

    /// The locks and the run history, on every backend.
    pub(crate) fn with_history(&self) -> &dyn Operated {
        match self {
            Db::Postgres(p) => p,
            Db::MySql(p) => p,
            Db::Sqlite(p) => p,
            Db::Redis(p) => p,
        }
    }

    pub(crate) async fn close(self) {
        match self {
            Db::Postgres(p) => p.pool().close().await,
            Db::MySql(p) => p.pool().close().await,
            Db::Sqlite(p) => p.pool().close().await,
            // Its connection closes when the provider is dropped.
            Db::Redis(p) => drop(p),
        }
    }
}

/// Where the locks are, as the messages say it: `in table shedlock`, or `under key prefix
/// shedlock` on Redis.
pub(crate) fn place(provider: &dyn LockAdmin) -> String {
    match provider.backend() {
        Backend::Redis => format!("under key prefix {}", provider.table_name()),
        _ => format!("in table {}", provider.table_name()),
    }
}

/// Refuses a bad `--table` before anything is opened, by the library's own rule: the builder
/// of a provider over an SQLite pool that never connects (nothing is opened or spawned).
pub(crate) fn check_table_name(table: &str) -> Result<(), Failure> {
    let pool = SqlitePoolOptions::new()
        .max_lifetime(None)
        .idle_timeout(None)
        .connect_lazy_with(SqliteConnectOptions::new());
    match SqliteLockProvider::builder(pool).table_name(table).build() {
        Err(error @ Error::InvalidTableName { .. }) => Err(error.into()),
        // Any other setting is checked again, as before, when the real provider is built.
        _ => Ok(()),
    }
}

/// Connects to `target` and builds a provider on `table`, giving up after [`CONNECT_TIMEOUT`].
/// `create` allows a missing SQLite file to be created.
pub(crate) async fn connect(target: &Target, table: &str, create: bool) -> Result<Db, Failure> {
    match tokio::time::timeout(CONNECT_TIMEOUT, open(target, table, create)).await {
        Ok(db) => Ok(db?),
        Err(_) => Err(Failure::Database(match target {
            Target::Redis(url) => {
                let tls = if url.to_ascii_lowercase().starts_with("rediss://") {
                    " (rediss:// expects TLS on that port: check that the server speaks TLS there)"
                } else {
                    ""
                };
                format!(
                    "cannot reach the Redis server at {}: no answer within {}{tls}",
                    redis_address(url),
                    humantime::format_duration(CONNECT_TIMEOUT)
                )
            }
            _ => format!(
                "cannot reach the {} database: no answer within {}",
                target.backend(),
                humantime::format_duration(CONNECT_TIMEOUT)
            ),
        })),
    }
}

/// A MySQL/MariaDB URL as sqlx reads it: `mariadb://…` becomes `mysql://…`.
fn mysql_spelling(url: &str) -> String {
    match url.split_once(':') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => format!("mysql:{rest}"),
        _ => url.to_owned(),
    }
}

/// `host:port` of a Redis URL (port 6379 where it has none), without user or password.
fn redis_address(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    // `[::1]` has colons but no port; `[::1]:6380` and `cache:6380` have one.
    let has_port = host
        .rsplit_once(':')
        .is_some_and(|(before, _)| !before.starts_with('[') || before.ends_with(']'));
    if has_port {
        host.to_owned()
    } else {
        format!("{host}:6379")
    }
}

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
        // The builder checks the key prefix before it connects.
        Target::Redis(url) => Db::Redis(
            RedisLockProvider::builder(url.as_str())
                .table_name(table)
                .build()
                .await?,
        ),
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
                    source: source.into(),
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
        SqliteConnectOptions::from_str(path_or_url)
            .map_err(|source| Error::invalid_url(Backend::Sqlite, path_or_url, source))
    } else {
        Ok(SqliteConnectOptions::new().filename(path_or_url))
    }
}

/// For every command but `migrate`: a missing SQLite file is an error, not a new database.
pub(crate) fn check_sqlite_file_exists(path_or_url: &str) -> Result<(), Failure> {
    if path_or_url.to_ascii_lowercase().contains("mode=memory") {
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
        assert!(matches!(
            Target::parse("redis://u:secret@h/0"),
            Ok(Target::Redis(url)) if url == "redis://u:secret@h/0"
        ));
        assert!(matches!(
            Target::parse("REDISS://h:6380"),
            Ok(Target::Redis(_))
        ));
        let refused = |url: &str| {
            let failure = Target::parse(url).expect_err(url);
            assert_eq!(failure.code(), 2, "{url}: {failure:?}");
            failure.line("shedlock")
        };
        for typo in [
            "postgres:postgres:topsecret@127.0.0.1",
            "postgresql:u:topsecret@h/db",
            "mysql:root:topsecret@h",
            "MariaDB:root:topsecret@h",
            "redis::topsecret@h",
            "rediss:h:6380",
        ] {
            let text = refused(typo);
            assert!(text.contains("is not followed by `//`"), "{text}");
            assert!(!text.contains("topsecret"), "{text}");
        }
        // Not a file in the current folder (issue 46): each names the accepted forms.
        for (url, says) in [
            ("mongodb://u:topsecret@h/0", "\"mongodb\""),
            (
                "host=127.0.0.1 user=app password=topsecret dbname=db",
                "password=***",
            ),
            ("postgresql//app:topsecret@db/app", "lacks the `:`"),
            ("locks", "neither a URL nor an SQLite file path"),
        ] {
            let text = refused(url);
            assert!(
                text.contains(says)
                    && text.contains("redis:// or rediss://")
                    && !text.contains("topsecret"),
                "{text}"
            );
        }
        assert!(refused(":memory:").contains("lives only as long as one command"));
    }

    #[test]
    fn redis_addresses_leave_the_password_out() {
        for (url, address) in [
            ("redis://:secret@cache:6380/0", "cache:6380"),
            ("rediss://app:secret@cache/1", "cache:6379"),
            ("redis://127.0.0.1", "127.0.0.1:6379"),
            ("redis://[::1]:6380", "[::1]:6380"),
            ("redis://[::1]", "[::1]:6379"),
            ("redis://u@h:1?protocol=resp3", "h:1"),
        ] {
            assert_eq!(redis_address(url), address, "{url}");
        }
    }

    #[test]
    fn table_names_are_checked_without_a_runtime_or_a_database() {
        for good in ["shedlock", "ops.scheduler_locks", "Sched_Locks"] {
            assert!(check_table_name(good).is_ok(), "{good}");
        }
        for bad in ["locks; drop table x", "", "1locks", "a.b.c"] {
            let failure = check_table_name(bad).unwrap_err();
            assert_eq!(failure.code(), 2, "{bad}: {failure:?}");
            assert!(
                failure
                    .line(bad)
                    .starts_with(&format!("shedlock: error: invalid table name {bad:?}")),
                "{}",
                failure.line(bad)
            );
        }
    }
}
