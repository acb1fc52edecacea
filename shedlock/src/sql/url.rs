//! Which URL belongs to which database: `connect(url)` refuses a URL of another backend by its
//! scheme, before the client library reads it, and a string that begins with a database's
//! scheme is never taken for an SQLite file path.

use crate::error::{Backend, Error, Result};
use crate::secret::scheme;

/// The schemes of each backend, as `connect` and the `shedlock` tool take them.
const SCHEMES: [(Backend, &[&str]); 4] = [
    (Backend::Postgres, &["postgres", "postgresql"]),
    (Backend::MySql, &["mysql", "mariadb"]),
    (Backend::Sqlite, &["sqlite"]),
    (Backend::Redis, &["redis", "rediss"]),
];

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

/// `url` checked for `backend` before its client library reads it, and rewritten where the
/// library wants another spelling (`mariadb://` is read as `mysql://`):
///
/// - a URL of another backend (`mysql://…` given to PostgreSQL) is [`Error::InvalidUrl`]
///   naming both, never a confusing protocol error from the server;
/// - a database's scheme without `//` (`postgres:user:pw@host`, a typo) is refused, naming the
///   scheme (for SQLite, such a string is never taken as a file path);
/// - for SQLite, a string without a known scheme is a file path, as it was.
///
/// Messages show the URL masked ([`mask_url`](crate::secret::mask_url)).
pub(crate) fn checked(url: &str, backend: Backend) -> Result<String> {
    let refuse = |reason: String| Err(Error::invalid_url(backend, url, reason));
    let Some((found, scheme)) = backend_of(url) else {
        return match (backend, scheme(url)) {
            // `ftp://…`: a URL of something else, no file path.
            (Backend::Sqlite, Some(other)) if url[other.len() + 1..].starts_with("//") => refuse(
                format!("`{other}://` is no SQLite URL: give an sqlite: URL or a file path"),
            ),
            (Backend::Sqlite, _) => Ok(url.to_owned()),
            _ => refuse(format!("a {backend} URL starts with {}", forms(backend))),
        };
    };
    if found != backend {
        return refuse(format!(
            "this is a {scheme}: URL, for {found}; a {backend} provider takes {} \
             (use the {found} provider for this URL)",
            forms(backend)
        ));
    }
    let rest = &url[scheme.len() + 1..];
    if backend != Backend::Sqlite && !rest.starts_with("//") {
        return refuse(format!(
            "`{scheme}:` is not followed by `//`: write {scheme}://user:password@host:port/database"
        ));
    }
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
