//! Reading a git repository through the `git` command (no libgit2): the commit at HEAD, the
//! files at a commit, what changed between two commits, and file contents.
//!
//! Everything here is synchronous (`std::process::Command`); from async code call it inside
//! `tokio::task::spawn_blocking`. Only plumbing commands with explicit, NUL-separated output
//! formats are used (`rev-parse`, `ls-tree -z`, `diff-tree -z`, `cat-file`), so the user's git
//! configuration (pagers, `diff.renames`, `core.quotePath`, external diff drivers...) does not
//! change the results. Variables that would point git at another repository (`GIT_DIR`,
//! `GIT_WORK_TREE`, `GIT_INDEX_FILE`...) are removed from the environment of every git process,
//! and `GIT_OPTIONAL_LOCKS=0` keeps them from writing to the repository.
//!
//! Indexed files are regular files: blobs with mode `100644`/`100755`. Symbolic links and
//! submodules (gitlinks) are never listed, and [`Repo::changes`] applies the same rule so the
//! two always agree. Paths that are not valid UTF-8 are skipped (they cannot be a `String`).

// Some items (the batch reader, builder options, accessors) are for callers that may not use
// them yet.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// Variables that locate a repository; inherited ones would redirect our git processes.
const REPOSITORY_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
];

/// A git repository (a work tree's top level or a bare repository) read with the `git` command.
#[derive(Debug, Clone)]
pub(crate) struct Repo {
    path: PathBuf,
    program: PathBuf,
    bare: bool,
}

/// Files that differ between two commits.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Changes {
    /// Added or modified regular files (including a rename's new path), sorted.
    pub(crate) upserted: Vec<String>,
    /// Deleted regular files (including a rename's old path, and a file that became a symlink
    /// or a submodule), sorted.
    pub(crate) deleted: Vec<String>,
}

impl Changes {
    /// True when nothing changed.
    pub(crate) fn is_empty(&self) -> bool {
        self.upserted.is_empty() && self.deleted.is_empty()
    }
}

/// Why a git operation failed. Every message names the repository path.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GitError {
    /// The `git` program could not be started.
    #[error(
        "cannot run `{}` for repository {}: {source} (is git installed and on PATH?)",
        program.display(),
        repo.display()
    )]
    GitNotFound {
        /// The repository it was wanted for.
        repo: PathBuf,
        /// The program that was run.
        program: PathBuf,
        /// Why it could not be started.
        source: io::Error,
    },
    /// The path is not a git work tree or bare repository.
    #[error(
        "{} is not a git repository (neither a work tree nor a bare repository): {detail}",
        path.display()
    )]
    NotARepository {
        /// The path given.
        path: PathBuf,
        /// What git (or the file system) said.
        detail: String,
    },
    /// The path is inside a work tree but not its top level.
    #[error(
        "{} is inside the git work tree {} but is not its top level; use {}",
        path.display(),
        top.display(),
        top.display()
    )]
    NotTopLevel {
        /// The path given.
        path: PathBuf,
        /// The work tree's top level.
        top: PathBuf,
    },
    /// HEAD does not point to a commit yet (a freshly initialized repository).
    #[error(
        "repository {} has no commits yet (HEAD does not point to a commit)",
        path.display()
    )]
    NoCommits {
        /// The repository.
        path: PathBuf,
    },
    /// A revision argument that is refused before running git (empty, starting with `-`...).
    #[error("repository {}: invalid revision {rev:?}: {reason}", path.display())]
    InvalidRevision {
        /// The repository.
        path: PathBuf,
        /// The revision given.
        rev: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The revision does not name a commit in this repository.
    #[error(
        "repository {}: {rev:?} is not a commit in this repository (rewritten history?)",
        path.display()
    )]
    UnknownRevision {
        /// The repository.
        path: PathBuf,
        /// The revision given.
        rev: String,
    },
    /// The file does not exist at that commit.
    #[error("repository {}: {file:?} does not exist at commit {commit}", path.display())]
    FileNotFound {
        /// The repository.
        path: PathBuf,
        /// The commit.
        commit: String,
        /// The file's path in the repository.
        file: String,
    },
    /// The path names a tree or a submodule, not a file.
    #[error(
        "repository {}: {file:?} at commit {commit} is a {kind}, not a file",
        path.display()
    )]
    NotABlob {
        /// The repository.
        path: PathBuf,
        /// The commit.
        commit: String,
        /// The path in the repository.
        file: String,
        /// What it is instead (`tree`, `commit`...).
        kind: String,
    },
    /// A git command exited unsuccessfully.
    #[error(
        "`git {command}` failed in {} ({status}): {}",
        path.display(),
        if stderr.is_empty() { "no error output" } else { stderr.as_str() }
    )]
    Command {
        /// The repository.
        path: PathBuf,
        /// The command's arguments after `git`.
        command: String,
        /// How it exited.
        status: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// Talking to a git process failed, or its output was not what was expected.
    #[error("repository {}: {what}: {source}", path.display())]
    Io {
        /// The repository.
        path: PathBuf,
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

impl Repo {
    /// Opens the repository at `path`: the top level of a work tree, or a bare repository (its
    /// git directory). Fails, naming the path, when it is neither (including a subdirectory of
    /// a work tree) or when `git` cannot be run.
    pub(crate) fn open(path: &Path) -> Result<Repo, GitError> {
        Repo::open_with_program(path, Path::new("git"))
    }

    fn open_with_program(path: &Path, program: &Path) -> Result<Repo, GitError> {
        let not_a_repo = |detail: String| GitError::NotARepository {
            path: path.to_path_buf(),
            detail,
        };
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(not_a_repo("it is not a directory".into())),
            Err(e) => return Err(not_a_repo(e.to_string())),
        }
        let canonical = std::fs::canonicalize(path).map_err(|e| not_a_repo(e.to_string()))?;
        let repo = Repo {
            path: canonical.clone(),
            program: program.to_path_buf(),
            bare: false,
        };
        let out = match repo.output(&[
            "rev-parse",
            "--is-bare-repository",
            "--is-inside-work-tree",
            "--absolute-git-dir",
        ]) {
            Ok(out) => out,
            Err(GitError::Command { stderr, .. }) => return Err(not_a_repo(stderr)),
            Err(GitError::GitNotFound {
                program, source, ..
            }) => {
                return Err(GitError::GitNotFound {
                    repo: path.to_path_buf(),
                    program,
                    source,
                });
            }
            Err(e) => return Err(e),
        };
        let text = String::from_utf8_lossy(&out);
        let mut lines = text.lines();
        let (bare, in_work_tree, git_dir) = (lines.next(), lines.next(), lines.next());
        let same = |other: &str| std::fs::canonicalize(other).is_ok_and(|other| other == canonical);
        if bare == Some("true") {
            if git_dir.is_some_and(same) {
                return Ok(Repo { bare: true, ..repo });
            }
            return Err(not_a_repo(format!(
                "it is inside the bare repository {}",
                git_dir.unwrap_or("?")
            )));
        }
        if in_work_tree != Some("true") {
            return Err(not_a_repo(format!(
                "it is inside the git directory {} of a work tree, not a work tree",
                git_dir.unwrap_or("?")
            )));
        }
        let top = repo.output(&["rev-parse", "--show-toplevel"])?;
        let top = String::from_utf8_lossy(&top)
            .trim_end_matches('\n')
            .to_owned();
        if !same(&top) {
            return Err(GitError::NotTopLevel {
                path: path.to_path_buf(),
                top: PathBuf::from(top),
            });
        }
        Ok(repo)
    }

    /// The repository's path (canonicalized when opened).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True for a bare repository.
    pub(crate) fn is_bare(&self) -> bool {
        self.bare
    }

    /// The full commit id HEAD points to; [`GitError::NoCommits`] for a repository without
    /// commits.
    pub(crate) fn head(&self) -> Result<String, GitError> {
        match self.try_resolve("HEAD")? {
            Some(sha) => Ok(sha),
            None => Err(GitError::NoCommits {
                path: self.path.clone(),
            }),
        }
    }

    /// The full commit id of `rev` (a commit id, possibly abbreviated, a branch, a tag...);
    /// [`GitError::UnknownRevision`] when it does not name a commit here, e.g. a commit lost to
    /// a force-push and garbage collection.
    pub(crate) fn resolve(&self, rev: &str) -> Result<String, GitError> {
        self.try_resolve(rev)?
            .ok_or_else(|| GitError::UnknownRevision {
                path: self.path.clone(),
                rev: rev.to_owned(),
            })
    }

    fn try_resolve(&self, rev: &str) -> Result<Option<String>, GitError> {
        self.check_rev(rev)?;
        let spec = format!("{rev}^{{commit}}");
        let mut cmd = self.command();
        cmd.args(["rev-parse", "--verify", "--quiet", &spec]);
        let out = self.run(cmd, &format!("rev-parse --verify --quiet {spec}"))?;
        if !out.status.success() {
            // --verify --quiet: exit status 1 when the name does not resolve to a commit (it
            // names nothing, or a tree or blob); failures to read the repository exit with 128.
            if out.status.code() == Some(1) {
                return Ok(None);
            }
            return Err(self.command_error(&format!("rev-parse --verify {spec}"), &out));
        }
        let sha = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        Ok(Some(sha))
    }

    /// Every regular file at `commit`, sorted (byte order of the UTF-8 path): symlinks and
    /// submodules are left out, as are paths that are not UTF-8.
    pub(crate) fn list_files(&self, commit: &str) -> Result<Vec<String>, GitError> {
        let sha = self.resolve(commit)?;
        let out = self.output(&["ls-tree", "-r", "-z", "--full-tree", &sha])?;
        let mut files = Vec::new();
        for entry in out.split(|&b| b == 0).filter(|e| !e.is_empty()) {
            // <mode> SP <type> SP <object> TAB <path>
            let Some(tab) = entry.iter().position(|&b| b == b'\t') else {
                return Err(self.unexpected("ls-tree", entry));
            };
            let Ok(meta) = std::str::from_utf8(&entry[..tab]) else {
                return Err(self.unexpected("ls-tree", entry));
            };
            let mut fields = meta.split(' ');
            let (mode, kind) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
            if kind != "blob" || !is_regular_file_mode(mode) {
                continue;
            }
            if let Ok(path) = std::str::from_utf8(&entry[tab + 1..]) {
                files.push(path.to_owned());
            }
        }
        files.sort();
        Ok(files)
    }

    /// The regular files that differ between commits `from` and `to`, without rename detection
    /// (a rename is a delete and an add). Added, modified and type-changed files are
    /// `upserted`; deleted ones `deleted`. A file that became a symlink or a submodule counts
    /// as deleted, and one that was a symlink or submodule and became a file as upserted, so
    /// that the result always matches [`list_files`](Self::list_files) at both commits.
    pub(crate) fn changes(&self, from: &str, to: &str) -> Result<Changes, GitError> {
        let (from, to) = (self.resolve(from)?, self.resolve(to)?);
        let out = self.output(&["diff-tree", "-r", "-z", "--no-renames", "--raw", &from, &to])?;
        let mut changes = Changes::default();
        let mut tokens = out.split(|&b| b == 0).filter(|t| !t.is_empty());
        while let Some(header) = tokens.next() {
            // :<old mode> <new mode> <old sha> <new sha> <status>, then the path(s).
            let header = std::str::from_utf8(header)
                .ok()
                .and_then(|h| h.strip_prefix(':'))
                .ok_or_else(|| self.unexpected("diff-tree", header))?;
            let fields: Vec<&str> = header.split(' ').collect();
            let [old_mode, new_mode, _, _, status] = fields[..] else {
                return Err(self.unexpected("diff-tree", header.as_bytes()));
            };
            let two_paths = status.starts_with('R') || status.starts_with('C');
            let first = tokens
                .next()
                .ok_or_else(|| self.unexpected("diff-tree", header.as_bytes()))?;
            let (old_path, new_path) = if two_paths {
                let second = tokens
                    .next()
                    .ok_or_else(|| self.unexpected("diff-tree", header.as_bytes()))?;
                (first, second)
            } else {
                (first, first)
            };
            let (Ok(old_path), Ok(new_path)) =
                (std::str::from_utf8(old_path), std::str::from_utf8(new_path))
            else {
                continue;
            };
            let (was_file, is_file) = (
                is_regular_file_mode(old_mode),
                is_regular_file_mode(new_mode),
            );
            if is_file {
                changes.upserted.push(new_path.to_owned());
            }
            if was_file && (!is_file || old_path != new_path) {
                changes.deleted.push(old_path.to_owned());
            }
        }
        changes.upserted.sort();
        changes.upserted.dedup();
        changes.deleted.sort();
        changes.deleted.dedup();
        Ok(changes)
    }

    /// The bytes of the file `path` at `commit`. Starts one git process; for many files use
    /// [`blob_reader`](Self::blob_reader).
    pub(crate) fn read(&self, commit: &str, path: &str) -> Result<Vec<u8>, GitError> {
        self.check_rev(commit)?;
        let object = self.object_name(commit, path)?;
        self.output(&["cat-file", "blob", &object])
            .map_err(|e| self.file_error(e, commit, path))
    }

    /// The size in bytes of the file `path` at `commit`, without reading it
    /// ([`GitError::NotABlob`] for a directory or a submodule).
    pub(crate) fn blob_size(&self, commit: &str, path: &str) -> Result<u64, GitError> {
        self.check_rev(commit)?;
        self.object_name(commit, path)?;
        // ls-tree -l names the entry's type and size; literal pathspecs so `*` is just a name.
        let out = self.output(&[
            "--literal-pathspecs",
            "ls-tree",
            "-l",
            "-z",
            "--full-tree",
            commit,
            "--",
            path,
        ])?;
        for entry in out.split(|&b| b == 0).filter(|e| !e.is_empty()) {
            // <mode> SP <type> SP <object> SP+ <size> TAB <path>
            let Some(tab) = entry.iter().position(|&b| b == b'\t') else {
                return Err(self.unexpected("ls-tree -l", entry));
            };
            if &entry[tab + 1..] != path.as_bytes() {
                continue;
            }
            let meta = String::from_utf8_lossy(&entry[..tab]);
            let fields: Vec<&str> = meta.split_whitespace().collect();
            let [_, kind, _, size] = fields[..] else {
                return Err(self.unexpected("ls-tree -l", entry));
            };
            if kind != "blob" {
                return Err(GitError::NotABlob {
                    path: self.path.clone(),
                    commit: commit.to_owned(),
                    file: path.to_owned(),
                    kind: kind.to_owned(),
                });
            }
            return size
                .parse()
                .map_err(|_| self.unexpected("ls-tree -l", entry));
        }
        Err(GitError::FileNotFound {
            path: self.path.clone(),
            commit: commit.to_owned(),
            file: path.to_owned(),
        })
    }

    /// A reader for many files at `commit` through one `git cat-file --batch` process.
    pub(crate) fn blob_reader(&self, commit: &str) -> Result<BlobReader, GitError> {
        let commit = self.resolve(commit)?;
        let mut cmd = self.command();
        cmd.args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| self.spawn_error(e, "cat-file --batch"))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(BufReader::new);
        let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(self.io_error(
                "starting cat-file --batch",
                io::Error::other("no pipes to the child process"),
            ));
        };
        Ok(BlobReader {
            repo: self.clone(),
            commit,
            child,
            stdin,
            stdout,
        })
    }

    // --- helpers ---------------------------------------------------------------------------

    /// `git -C <path>` with a clean environment; add arguments.
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("-C").arg(&self.path);
        for var in REPOSITORY_ENV {
            cmd.env_remove(var);
        }
        cmd.env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null());
        // Its own process group: Ctrl-C in a terminal goes to the whole foreground group, and
        // a git killed by it would fail the running sync ("Broken pipe") before the scheduler
        // could finish or cancel it. The scheduler's shutdown ends a sync; a reader dropped
        // with a cancelled sync kills its git (see `Drop for BlobReader`).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd
    }

    fn run(&self, mut cmd: Command, display: &str) -> Result<std::process::Output, GitError> {
        cmd.output().map_err(|e| self.spawn_error(e, display))
    }

    /// Runs `git <args>` and returns its standard output, or an error with its stderr.
    fn output<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<Vec<u8>, GitError> {
        let mut cmd = self.command();
        cmd.args(args);
        let display = args
            .iter()
            .map(|a| a.as_ref().to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ");
        let out = self.run(cmd, &display)?;
        if out.status.success() {
            Ok(out.stdout)
        } else {
            Err(self.command_error(&display, &out))
        }
    }

    fn command_error(&self, command: &str, out: &std::process::Output) -> GitError {
        GitError::Command {
            path: self.path.clone(),
            command: command.to_owned(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        }
    }

    fn spawn_error(&self, e: io::Error, command: &str) -> GitError {
        if e.kind() == io::ErrorKind::NotFound {
            GitError::GitNotFound {
                repo: self.path.clone(),
                program: self.program.clone(),
                source: e,
            }
        } else {
            self.io_error(&format!("starting `git {command}`"), e)
        }
    }

    fn io_error(&self, what: &str, source: io::Error) -> GitError {
        GitError::Io {
            path: self.path.clone(),
            what: what.to_owned(),
            source,
        }
    }

    fn unexpected(&self, command: &str, output: &[u8]) -> GitError {
        let shown: String = String::from_utf8_lossy(output).chars().take(200).collect();
        self.io_error(
            &format!("reading the output of `git {command}`"),
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected output {shown:?}"),
            ),
        )
    }

    fn check_rev(&self, rev: &str) -> Result<(), GitError> {
        let reason = if rev.is_empty() {
            "it is empty"
        } else if rev.starts_with('-') {
            "it starts with '-'"
        } else if rev.contains(['\0', '\n', ':']) {
            "it contains a NUL, newline or ':'"
        } else {
            return Ok(());
        };
        Err(GitError::InvalidRevision {
            path: self.path.clone(),
            rev: rev.to_owned(),
            reason,
        })
    }

    fn object_name(&self, commit: &str, path: &str) -> Result<String, GitError> {
        if path.is_empty() || path.contains('\0') {
            return Err(GitError::FileNotFound {
                path: self.path.clone(),
                commit: commit.to_owned(),
                file: path.to_owned(),
            });
        }
        Ok(format!("{commit}:{path}"))
    }

    /// Turns cat-file's failure for a missing path into [`GitError::FileNotFound`], and a path
    /// that is a directory into [`GitError::NotABlob`].
    fn file_error(&self, e: GitError, commit: &str, path: &str) -> GitError {
        let GitError::Command { stderr, .. } = &e else {
            return e;
        };
        let file = path.to_owned();
        let commit = commit.to_owned();
        if stderr.contains("does not exist") || stderr.contains("exists on disk, but not in") {
            GitError::FileNotFound {
                path: self.path.clone(),
                commit,
                file,
            }
        } else if stderr.contains("bad file") || stderr.contains("expected blob") {
            GitError::NotABlob {
                path: self.path.clone(),
                commit,
                file,
                kind: "tree or submodule".into(),
            }
        } else {
            e
        }
    }
}

/// `100644`, `100755` (and the historical `100664`): a regular file, not a symlink (`120000`),
/// a submodule (`160000`) or nothing (`000000`).
fn is_regular_file_mode(mode: &str) -> bool {
    mode.starts_with("100")
}

/// One file read through a [`BlobReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blob {
    /// The file's bytes.
    Data(Vec<u8>),
    /// The file is larger than the limit given; its bytes were skipped, not kept.
    TooLarge {
        /// Its size in bytes.
        bytes: u64,
    },
}

/// Reads many files at one commit through a single `git cat-file --batch` process (one request
/// and one response per file, in the order asked). Dropping it ends the process.
#[derive(Debug)]
pub(crate) struct BlobReader {
    repo: Repo,
    commit: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl BlobReader {
    /// The full id of the commit read from.
    pub(crate) fn commit(&self) -> &str {
        &self.commit
    }

    /// The file `path`: its bytes, or [`Blob::TooLarge`] when it has more than `max_bytes`
    /// bytes (pass `u64::MAX` for no limit). [`GitError::FileNotFound`] and
    /// [`GitError::NotABlob`] leave the reader usable; other errors end it.
    pub(crate) fn read(&mut self, path: &str, max_bytes: u64) -> Result<Blob, GitError> {
        if path.contains('\n') || path.contains('\r') {
            // The batch protocol is line-based: read this one on its own.
            let size = self.repo.blob_size(&self.commit, path)?;
            if size > max_bytes {
                return Ok(Blob::TooLarge { bytes: size });
            }
            return self.repo.read(&self.commit, path).map(Blob::Data);
        }
        let object = self.repo.object_name(&self.commit, path)?;
        let request = format!("{object}\n");
        if let Err(e) = self
            .stdin
            .write_all(request.as_bytes())
            .and_then(|()| self.stdin.flush())
        {
            return Err(self.failed("writing to `git cat-file --batch`", e));
        }
        let mut header = Vec::new();
        match self.stdout.read_until(b'\n', &mut header) {
            Ok(0) => {
                return Err(self.failed(
                    "reading from `git cat-file --batch`",
                    io::ErrorKind::UnexpectedEof.into(),
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(self.failed("reading from `git cat-file --batch`", e)),
        }
        let header = String::from_utf8_lossy(&header)
            .trim_end_matches('\n')
            .to_owned();
        // "<object> missing" / "<object> ambiguous", or "<oid> <type> <size>".
        if header.ends_with(" missing") || header.ends_with(" ambiguous") {
            return Err(GitError::FileNotFound {
                path: self.repo.path.clone(),
                commit: self.commit.clone(),
                file: path.to_owned(),
            });
        }
        let mut fields = header.rsplitn(3, ' ');
        let (size, kind) = (fields.next(), fields.next());
        let (Some(Ok(size)), Some(kind)) = (size.map(str::parse::<u64>), kind) else {
            let e = io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected header {header:?}"),
            );
            return Err(self.failed("reading from `git cat-file --batch`", e));
        };
        let keep = kind == "blob" && size <= max_bytes;
        let mut data = Vec::new();
        let result = if keep {
            data.reserve(usize::try_from(size).unwrap_or(0));
            (&mut self.stdout)
                .take(size)
                .read_to_end(&mut data)
                .map(|n| n as u64)
        } else {
            io::copy(&mut (&mut self.stdout).take(size), &mut io::sink())
        };
        let mut newline = [0u8; 1];
        match result.and_then(|n| {
            self.stdout.read_exact(&mut newline)?;
            Ok(n)
        }) {
            Ok(n) if n == size && newline == [b'\n'] => {}
            Ok(_) => {
                let e = io::Error::new(io::ErrorKind::InvalidData, "truncated object");
                return Err(self.failed("reading from `git cat-file --batch`", e));
            }
            Err(e) => return Err(self.failed("reading from `git cat-file --batch`", e)),
        }
        if kind != "blob" {
            return Err(GitError::NotABlob {
                path: self.repo.path.clone(),
                commit: self.commit.clone(),
                file: path.to_owned(),
                kind: kind.to_owned(),
            });
        }
        Ok(if keep {
            Blob::Data(data)
        } else {
            Blob::TooLarge { bytes: size }
        })
    }

    /// An error from the batch process, with what it wrote to stderr once it is stopped.
    fn failed(&mut self, what: &str, e: io::Error) -> GitError {
        let _ = self.child.kill();
        let status = self.child.wait();
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = pipe.read_to_string(&mut stderr);
        }
        let stderr = stderr.trim();
        match status {
            Ok(status) if !stderr.is_empty() => GitError::Command {
                path: self.repo.path.clone(),
                command: "cat-file --batch".into(),
                status: status.to_string(),
                stderr: stderr.to_owned(),
            },
            _ => self.repo.io_error(what, e),
        }
    }
}

impl Drop for BlobReader {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests;
