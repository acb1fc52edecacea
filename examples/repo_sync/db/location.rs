//! Where the database is: `--database-url` read as users type it (a file path, `sqlite:…`,
//! `postgres://…`), the default file of the repository a command runs in, and the URL sqlx opens.

use std::path::{Path, PathBuf};

/// Where the application database is, from `--database-url`: a file path, `sqlite:PATH`,
/// `sqlite://PATH` (`sqlite:///abs/path` too), or `postgres://…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Location {
    /// An SQLite file; it and its directory are created when missing.
    Sqlite(PathBuf),
    /// A PostgreSQL URL, as given.
    Postgres(String),
}

impl Location {
    /// Reads a `--database-url` value; the error names what is wrong with it.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return Ok(Location::Postgres(text.to_owned()));
        }
        let path = if let Some(rest) = text.strip_prefix("sqlite:") {
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            let (path, options) = rest.split_once('?').unwrap_or((rest, ""));
            for option in options.split('&').filter(|o| !o.is_empty()) {
                if !matches!(option, "mode=rwc" | "mode=rw") {
                    return Err(format!(
                        "unsupported option {option:?} in {text:?}: repo_sync opens SQLite read-write and creates the file when missing"
                    ));
                }
            }
            percent_encoding::percent_decode_str(path)
                .decode_utf8()
                .map_err(|_| format!("{text:?}: the path is not valid UTF-8 once decoded"))?
                .into_owned()
        } else if let Some((scheme, _)) = text.split_once("://") {
            return Err(format!(
                "unsupported database {scheme:?} in {text:?}: repo_sync keeps its data in SQLite (a file path, or sqlite://PATH) or PostgreSQL (postgres://USER@HOST:PORT/DATABASE)"
            ));
        } else {
            text.to_owned()
        };
        if path.is_empty() || path == ":memory:" {
            return Err(format!(
                "{text:?} names no file: give the path of an SQLite file (created if missing), or a postgres:// URL"
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
            Location::Postgres(url) => Ok(url.clone()),
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
            Location::Postgres(url) => f.write_str(url),
        }
    }
}
