//! Where the database is: `--database-url` read as users type it (a file path, `sqlite:…`,
//! `postgres://…`), the default file of the repository a command runs in, and the URL sqlx opens.

use std::path::{Path, PathBuf};

use shedlock::Backend;
use shedlock::secret::{SecretUrl, mask_url};
use shedlock::settings::backend_of_url;

/// How a PostgreSQL URL is written, for the messages.
const POSTGRES_FORM: &str = "postgres://USER:PASSWORD@HOST:PORT/DATABASE";

/// Where the application database is, from `--database-url`: a file path, `sqlite:PATH`,
/// `sqlite://PATH` (`sqlite:///abs/path` too), or `postgres://…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// An SQLite file; it and its directory are created when missing.
    Sqlite(PathBuf),
    /// A PostgreSQL URL, as given (printed with its password masked).
    Postgres(SecretUrl),
}

impl Location {
    /// Reads a `--database-url` value; the error names what is wrong with it, and shows the
    /// value through [`mask_url`] (never its password).
    ///
    /// A value that starts with a scheme (`postgres:`, `mysql:`, …) is a URL, never a file
    /// name: `postgres:user:pw@host` (its `//` missing) is refused, not created as a file. A
    /// file whose name starts like that is written `./postgres:…`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let shown = mask_url(text);
        // The workspace's one rule: a string is an SQLite file only when it says so (a path
        // that starts with /, ./ or ../, or ends with .db, .sqlite or .sqlite3); a libpq
        // `key=value` string or a bare word is refused, never a file of its own per instance.
        let backend = backend_of_url(text).map_err(|e| {
            format!("{e}; repo_sync keeps its data in SQLite or PostgreSQL ({POSTGRES_FORM})")
        })?;
        let scheme = scheme(text).map(str::to_ascii_lowercase);
        let path = match (backend, scheme.as_deref()) {
            (Backend::Postgres, _) => return postgres(text, &shown).map(Location::Postgres),
            (Backend::Sqlite, Some("sqlite")) => {
                let rest = &text["sqlite:".len()..];
                let rest = rest.strip_prefix("//").unwrap_or(rest);
                let (path, options) = rest.split_once('?').unwrap_or((rest, ""));
                for option in options.split('&').filter(|o| !o.is_empty()) {
                    if !matches!(option, "mode=rwc" | "mode=rw") {
                        return Err(format!(
                            "unsupported option {option:?} in {shown:?}: repo_sync opens SQLite \
                             read-write and creates the file when missing"
                        ));
                    }
                }
                percent_encoding::percent_decode_str(path)
                    .decode_utf8()
                    .map_err(|_| format!("{shown:?}: the path is not valid UTF-8 once decoded"))?
                    .into_owned()
            }
            (Backend::Sqlite, _) => text.to_owned(),
            (other, _) => {
                let scheme = scheme.unwrap_or_default();
                return Err(format!(
                    "unsupported database {scheme:?} ({other}) in {shown:?}: repo_sync keeps its \
                     data in SQLite (a file path, or sqlite://PATH) or PostgreSQL ({POSTGRES_FORM})"
                ));
            }
        };
        if path.is_empty() || path == ":memory:" || path.starts_with(":memory:") {
            return Err(format!(
                "{shown:?} names no file: give the path of an SQLite file (created if missing), \
                 or a postgres:// URL"
            ));
        }
        Ok(Location::Sqlite(PathBuf::from(path)))
    }

    /// The database of the repository the command runs in: `repo_sync.db` in its git
    /// directory (`.git/`), which belongs to that clone alone and is never committed; outside
    /// a git repository, `repo_sync.db` in the current directory.
    pub(crate) fn default_for(dir: &Path) -> Self {
        let git_dir = std::process::Command::new("git")
            .args(["rev-parse", "--absolute-git-dir"])
            .current_dir(dir)
            .stderr(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
        Location::Sqlite(
            git_dir
                .unwrap_or_else(|| dir.to_owned())
                .join("repo_sync.db"),
        )
    }

    /// The SQLite file as an absolute path, its directory created; PostgreSQL: `None`.
    pub(crate) fn sqlite_file(&self) -> Result<Option<PathBuf>, String> {
        let Location::Sqlite(path) = self else {
            return Ok(None);
        };
        let path = std::path::absolute(path)
            .map_err(|e| format!("cannot resolve the path {}: {e}", path.display()))?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!(
                    "cannot create the directory {} for the database: {e}",
                    dir.display()
                )
            })?;
        }
        Ok(Some(path))
    }

    /// The URL sqlx opens: `sqlite:///abs/path?mode=rwc` (percent-encoded) or the
    /// PostgreSQL URL.
    pub(super) fn url(&self) -> Result<String, String> {
        match self {
            Location::Postgres(url) => Ok(url.expose().to_owned()),
            Location::Sqlite(_) => {
                let path = self.sqlite_file()?.unwrap_or_default();
                let path = path
                    .to_str()
                    .ok_or_else(|| format!("{}: not a UTF-8 path", path.display()))?;
                const ESCAPE: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
                    .add(b'%')
                    .add(b'?')
                    .add(b'#')
                    .add(b' ');
                let encoded = percent_encoding::utf8_percent_encode(path, ESCAPE);
                Ok(format!("sqlite://{encoded}?mode=rwc"))
            }
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => write!(f, "{url}"),
        }
    }
}

/// The scheme `text` starts with (`postgres` of `postgres://…` and of `postgres:…`): a letter,
/// then letters, digits, `+`, `-` or `.`, then `:`. One letter is a Windows drive (`C:\\…`), not
/// a scheme.
fn scheme(text: &str) -> Option<&str> {
    let (candidate, _) = text.split_once(':')?;
    let mut chars = candidate.chars();
    let first = chars.next()?;
    let valid = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && candidate.len() > 1;
    valid.then_some(candidate)
}

/// A PostgreSQL URL, checked the way the driver reads it (the `url` crate): `scheme://`, then a
/// user-info, host and port that parse. `shown` is `text` masked, for the message.
fn postgres(text: &str, shown: &str) -> Result<SecretUrl, String> {
    let scheme = &text[..text.find(':').unwrap_or(0)];
    let invalid = |reason: &str| {
        format!(
            "{shown:?} is not a valid {scheme} URL ({reason}): write it as {POSTGRES_FORM}, with \
             any / ? # @ : % in the user name or password percent-encoded (/ as %2F); it is not \
             taken as a file name (a file whose name starts so is written ./NAME)"
        )
    };
    if !text[scheme.len()..].starts_with("://") {
        return Err(invalid(&format!("no // after {scheme}:")));
    }
    match url::Url::parse(text) {
        Ok(_) => Ok(SecretUrl::new(text)),
        Err(e) => Err(invalid(&e.to_string())),
    }
}
