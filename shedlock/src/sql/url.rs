//! Which URL belongs to which database: `connect(url)` refuses a URL of another backend by its
//! scheme, before the client library reads it, and a string is an SQLite file path only when it
//! says so ([`backend_of_url`], the one rule of every front end).

use crate::error::{Backend, Error, Result};
use crate::secret::{is_sqlite_path, scheme};

/// The schemes of each backend, as `connect` and the `shedlock` tool take them.
const SCHEMES: [(Backend, &[&str]); 4] = [
    (Backend::Postgres, &["postgres", "postgresql"]),
    (Backend::MySql, &["mysql", "mariadb"]),
    (Backend::Sqlite, &["sqlite"]),
    (Backend::Redis, &["redis", "rediss"]),
];

/// What every refusal of a URL ends with: the forms that are taken.
pub(crate) const ACCEPTED: &str = "the accepted ones are postgres:// or postgresql:// \
     (PostgreSQL), mysql:// or mariadb:// (MySQL/MariaDB), redis:// or rediss:// (Redis), and \
     sqlite: or a file path (SQLite; a path starts with /, ./ or ../, or ends with .db, \
     .sqlite or .sqlite3)";

/// The backend whose scheme `url` starts with, and that scheme as written.
fn backend_of(url: &str) -> Option<(Backend, &str)> {
    let scheme = scheme(url)?;
    SCHEMES
        .iter()
        .find(|(_, schemes)| schemes.iter().any(|s| s.eq_ignore_ascii_case(scheme)))
        .map(|(backend, _)| (*backend, scheme))
}

/// How a backend's URL starts, for messages.
fn forms(backend: Backend) -> String {
    let schemes = SCHEMES
        .iter()
        .find(|(b, _)| *b == backend)
        .map_or(&[][..], |(_, schemes)| *schemes);
    let forms: Vec<String> = schemes
        .iter()
        .map(|s| match backend {
            Backend::Sqlite => format!("{s}:"),
            _ => format!("{s}://"),
        })
        .collect();
    forms.join(" or ")
}

/// Why a string without a known scheme is no database URL, or `None` when it is an SQLite file
/// path ([`is_sqlite_path`]).
fn not_a_path(url: &str) -> Option<String> {
    if url.trim().is_empty() {
        return Some(format!("it is empty; {ACCEPTED}"));
    }
    if let Some(other) = scheme(url)
        && (url[other.len() + 1..].starts_with("//") || !is_sqlite_path(url))
    {
        return Some(format!(
            "unsupported database URL scheme {other:?}: {ACCEPTED}"
        ));
    }
    if is_sqlite_path(url) {
        return None;
    }
    let lower = url.to_ascii_lowercase();
    if let Some((_, scheme)) = SCHEMES
        .iter()
        .flat_map(|(b, schemes)| schemes.iter().map(move |s| (b, s)))
        .filter(|(_, s)| lower.starts_with(&format!("{s}/")))
        .max_by_key(|(_, s)| s.len())
    {
        return Some(format!(
            "`{}` lacks the `:` after the scheme: write {scheme}://user:password@host:port/database; \
             {ACCEPTED}",
            &url[..scheme.len()]
        ));
    }
    if crate::secret::libpq_pair(url) {
        return Some(format!(
            "a key=value connection string (libpq's form) is not taken: write it as a URL, \
             postgres://user:password@host:port/dbname; {ACCEPTED}"
        ));
    }
    Some(format!(
        "it is neither a URL nor an SQLite file path; {ACCEPTED} (a file in the current \
         folder is written ./NAME)"
    ))
}

/// The backend a database URL names, by the rule every front end of the workspace uses (the
/// providers' `connect`, the `shedlock` tool, the examples):
///
/// - a URL with a backend's scheme is that backend's: `postgres://` or `postgresql://`,
///   `mysql://` or `mariadb://`, `redis://` or `rediss://`, `sqlite:`; a database's scheme
///   without its `//` (`postgres:user:pw@host`, a typo) is refused;
/// - a string without one is an SQLite file only when it says so: it starts with `/`, `./` or
///   `../` (on Windows also `.\`, `..\`, `\\` or a drive), or ends with `.db`, `.sqlite` or
///   `.sqlite3`; `:memory:` (SQLite's name for a database in memory, which lives as long as
///   the provider's pool and only in its process) is SQLite too;
/// - anything else is refused: another scheme (`mongodb://…`), a libpq `key=value` string
///   (`host=db user=app password=…`), a URL whose `:` is missing (`postgresql//…`), a bare
///   word (`locks`, which would have been a new SQLite file in the current folder, each
///   instance its own).
///
/// A refusal is [`Error::InvalidUrl`] naming what is wrong and the accepted forms, with the URL
/// masked ([`mask_url`](crate::secret::mask_url)); its backend is
/// [`Backend::Other("database")`](Backend::Other).
///
/// ```
/// use shedlock::Backend;
/// use shedlock::settings::backend_of_url;
///
/// assert_eq!(backend_of_url("postgres://app@db/app")?, Backend::Postgres);
/// assert_eq!(backend_of_url("./locks.db")?, Backend::Sqlite);
/// let refused = backend_of_url("host=db user=app password=hunter2").unwrap_err().to_string();
/// assert!(refused.contains("password=***") && !refused.contains("hunter2"));
/// assert!(backend_of_url("locks").is_err());
/// # Ok::<(), shedlock::Error>(())
/// ```
pub fn backend_of_url(url: &str) -> Result<Backend> {
    let refuse = |reason: String| Err(Error::invalid_url(Backend::Other("database"), url, reason));
    match backend_of(url) {
        Some((backend, scheme)) => match slashes_missing(backend, scheme, url) {
            Some(reason) => refuse(reason),
            None => Ok(backend),
        },
        None => match not_a_path(url) {
            Some(reason) => refuse(reason),
            None => Ok(Backend::Sqlite),
        },
    }
}

/// Why a URL with `backend`'s `scheme` is no URL: its `//` is missing (an SQLite URL needs
/// none).
fn slashes_missing(backend: Backend, scheme: &str, url: &str) -> Option<String> {
    let rest = &url[scheme.len() + 1..];
    (backend != Backend::Sqlite && !rest.starts_with("//")).then(|| {
        format!(
            "`{scheme}:` is not followed by `//`: write {scheme}://user:password@host:port/database"
        )
    })
}

/// `url` checked for `backend` before its client library reads it, and rewritten where the
/// library wants another spelling (`mariadb://` is read as `mysql://`, `:memory:` as
/// `sqlite::memory:`, one database shared by the pool's connections):
///
/// - a URL of another backend (`mysql://…` given to PostgreSQL) is [`Error::InvalidUrl`]
///   naming both, never a confusing protocol error from the server;
/// - a database's scheme without `//` (`postgres:user:pw@host`, a typo) is refused, naming the
///   scheme (for SQLite, such a string is never taken as a file path);
/// - for SQLite, a string without a known scheme is a file path only when it says so
///   ([`backend_of_url`]); anything else is refused naming the accepted forms.
///
/// Messages show the URL masked ([`mask_url`](crate::secret::mask_url)).
pub(crate) fn checked(url: &str, backend: Backend) -> Result<String> {
    let refuse = |reason: String| Err(Error::invalid_url(backend, url, reason));
    let Some((found, scheme)) = backend_of(url) else {
        if backend != Backend::Sqlite {
            return refuse(format!("a {backend} URL starts with {}", forms(backend)));
        }
        return match not_a_path(url) {
            Some(reason) => refuse(reason),
            None if url == ":memory:" => Ok("sqlite::memory:".to_owned()),
            None => Ok(url.to_owned()),
        };
    };
    if found != backend {
        return refuse(format!(
            "this is a {scheme}: URL, for {found}; a {backend} provider takes {} \
             (use the {found} provider for this URL)",
            forms(backend)
        ));
    }
    if let Some(reason) = slashes_missing(backend, scheme, url) {
        return refuse(reason);
    }
    let rest = &url[scheme.len() + 1..];
    Ok(match (backend, scheme.to_ascii_lowercase().as_str()) {
        (Backend::MySql, "mariadb") => format!("mysql:{rest}"),
        _ => url.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_of_another_backend_is_refused_by_name() {
        let e = checked("mysql://root:topsecret@h/db", Backend::Postgres).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("mysql: URL, for MySQL/MariaDB"), "{text}");
        assert!(text.contains("postgres:// or postgresql://"), "{text}");
        assert!(!text.contains("topsecret"), "{text}");
        for (url, backend) in [
            ("postgres://u@h/db", Backend::MySql),
            ("redis://h", Backend::Postgres),
            ("sqlite:x.db", Backend::MySql),
            ("postgresql://u@h/db", Backend::Sqlite),
            ("rediss://:pw@h", Backend::Sqlite),
            ("ftp://u:pw@h/x", Backend::Sqlite),
        ] {
            assert!(checked(url, backend).is_err(), "{url} for {backend}");
        }
    }

    #[test]
    fn a_scheme_without_slashes_is_no_path() {
        for url in [
            "postgres:postgres:topsecret@127.0.0.1",
            "postgresql:u:topsecret@h",
            "mysql:root:topsecret@h",
            "mariadb:root@h",
            "redis:h",
        ] {
            let e = checked(url, Backend::Sqlite).unwrap_err().to_string();
            assert!(!e.contains("topsecret"), "{e}");
            assert!(e.contains("URL, for"), "{e}");
        }
        let e = checked("postgres:postgres:topsecret@127.0.0.1", Backend::Postgres)
            .unwrap_err()
            .to_string();
        assert!(e.contains("`postgres:` is not followed by `//`"), "{e}");
        assert!(!e.contains("topsecret"), "{e}");
    }

    /// What was an SQLite file in the current folder before (issue 46): a libpq string, a URL
    /// whose `:` is missing, a bare word. Each is refused naming the accepted forms, its
    /// password masked, by `checked` and by `backend_of_url` alike.
    #[test]
    fn what_does_not_say_it_is_a_file_is_no_path() {
        for (url, says) in [
            (
                "host=127.0.0.1 user=app password=hunter2 dbname=db",
                "key=value connection string",
            ),
            (
                "host=db password='hunter2 x' dbname=db",
                "key=value connection string",
            ),
            (
                "postgresql//app:hunter2@db/app",
                "`postgresql` lacks the `:`",
            ),
            ("postgres/app:hunter2@db/app", "`postgres` lacks the `:`"),
            ("locks", "neither a URL nor an SQLite file path"),
            ("app:hunter2@db", "unsupported database URL scheme \"app\""),
            ("", "it is empty"),
        ] {
            for error in [
                checked(url, Backend::Sqlite).unwrap_err(),
                backend_of_url(url).unwrap_err(),
            ] {
                let text = error.to_string();
                assert!(text.contains(says), "{url}: {text}");
                assert!(
                    text.contains("postgres:// or postgresql://")
                        && text.contains("sqlite: or a file path"),
                    "{url}: {text}"
                );
                assert!(!text.contains("hunter2"), "{url}: {text}");
            }
        }
        let text = backend_of_url("host=db user=app password=hunter2")
            .unwrap_err()
            .to_string();
        assert!(text.contains("user=app password=***"), "{text}");
    }

    #[test]
    fn the_front_ends_rule_names_each_backend() {
        for (url, backend) in [
            ("postgres://u@h/db", Backend::Postgres),
            ("PostgreSQL://u@h/db", Backend::Postgres),
            ("mariadb://u@h/db", Backend::MySql),
            ("rediss://h", Backend::Redis),
            ("sqlite:x", Backend::Sqlite),
            ("/srv/locks", Backend::Sqlite),
            ("./locks", Backend::Sqlite),
            ("../locks", Backend::Sqlite),
            ("locks.db", Backend::Sqlite),
            ("locks.SQLite3", Backend::Sqlite),
            ("var/locks.sqlite", Backend::Sqlite),
            ("C:\\data\\locks", Backend::Sqlite),
            (":memory:", Backend::Sqlite),
        ] {
            assert_eq!(backend_of_url(url).unwrap(), backend, "{url}");
        }
        for url in [
            "postgres:u:pw@h",
            "mongodb://h",
            "ftp://h/x.db",
            "var/locks",
        ] {
            assert!(backend_of_url(url).is_err(), "{url}");
        }
        assert_eq!(
            checked(":memory:", Backend::Sqlite).unwrap(),
            "sqlite::memory:"
        );
    }

    #[test]
    fn good_urls_and_paths_pass() {
        assert_eq!(
            checked("mariadb://root@h:3306/test", Backend::MySql).unwrap(),
            "mysql://root@h:3306/test"
        );
        for (url, backend) in [
            ("postgres://u@h/db", Backend::Postgres),
            ("POSTGRESQL://u@h/db", Backend::Postgres),
            ("mysql://u@h/db", Backend::MySql),
            ("sqlite:x.db", Backend::Sqlite),
            ("sqlite:///srv/x.db?mode=rwc", Backend::Sqlite),
            ("/srv/x.db", Backend::Sqlite),
            ("x.db", Backend::Sqlite),
            ("my:file.db", Backend::Sqlite),
        ] {
            assert!(checked(url, backend).is_ok(), "{url} for {backend}");
        }
    }
}
