//! Reading a GitLab project through the REST API v4: the commit at the head of the default
//! branch, the files at a commit, what changed between two commits, and file contents. The
//! counterpart of [`crate::git`] for repositories that are not cloned locally; it returns the
//! same [`Changes`] and [`Blob`] and applies the same rules:
//!
//! - indexed files are regular files (modes `100644`/`100755`); symbolic links (`120000`) and
//!   submodules (`160000`, tree entries of type `commit`) are never listed, and
//!   [`GitLabProject::changes`] applies the same rule, so a listing and a change set agree;
//! - a rename is the deletion of its old path plus the upsert of its new one, and a file that
//!   became a symlink or a submodule is a deletion.
//!
//! Requests:
//!
//! - one `reqwest::Client` per project (cloning the project shares it) with a 30 s timeout per
//!   request, body included;
//! - the token goes in the `PRIVATE-TOKEN` header, never in a URL, and is hidden from `Debug`.
//!   Redirects are followed only within the same host (and from `http` to `https`), so the
//!   token is never sent to another host;
//! - connect errors, timeouts, 429 and 5xx are retried 3 times after 200 ms, 400 ms and 800 ms
//!   (or the `Retry-After` seconds, capped at 5 s); other statuses are not retried (the loop
//!   and the backoff are [`crate::http::RetryPolicy`]'s; requests are in `request.rs`);
//! - the project id in URLs is its URL-encoded path (`group%2Fsub%2Fproject`); file paths and
//!   refs are URL-encoded too.
//!
//! The project URL is `http(s)://host[:port]/group[/subgroup...]/project`: GitLab installed
//! under a relative URL root (`https://host/gitlab/...`) is not supported, since the project
//! path could not be told apart from the prefix.
//!
//! Files: this one (the project, its errors, the API calls); `request.rs` (one `GET` with
//! retries, the body limit, redirects); `fake.rs` and `tests.rs` (the tests, against a fake
//! GitLab served by `crate::http::test_server`).

// Some items (the timeout setter, accessors) are for callers that may not use them yet.
#![allow(dead_code)]

use std::fmt;
use std::time::Duration;

use reqwest::header::HeaderValue;
use serde::Deserialize;

use crate::git::{Blob, Changes};
use crate::http::{describe_status, encode, error_chain, percent_decode, truncate};

#[cfg(test)]
mod fake;
mod request;
#[cfg(test)]
mod tests;

use request::{Body, Failure};

/// The timeout of each request, response body included.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Entries per page of the tree listing (GitLab's maximum).
const PER_PAGE: u32 = 100;

/// Why a GitLab operation failed. Every message names the project URL or the request URL.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GitLabError {
    /// The project URL (or the token given with it) is unusable.
    #[error("invalid GitLab project URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A commit the project does not have (e.g. after a force-push): callers fall back to a
    /// full listing.
    #[error(
        "GitLab project {project}: commit {revision:?} is not in the project \
         (history rewritten, e.g. by a force-push?)"
    )]
    UnknownRevision {
        /// The project URL.
        project: String,
        /// The commit asked for.
        revision: String,
    },
    /// The project, a branch or a file does not exist, or the token cannot see it (GitLab
    /// answers 404 for projects the caller may not read).
    #[error(
        "GitLab project {project}: {what} not found (HTTP 404); check the project URL and that \
         the token has access to the project (GitLab answers 404 for a private project the \
         token cannot read)"
    )]
    NotFound {
        /// The project URL.
        project: String,
        /// What was not found: `project`, `branch "main"`, `file "a.rs" at commit ...`.
        what: String,
    },
    /// The server answered with an error status (after retries for 429 and 5xx).
    #[error(
        "GET {url} answered {described} after {attempts} attempt(s): {message}",
        described = describe_status(*status)
    )]
    Status {
        /// The request URL (it never contains the token).
        url: String,
        /// The HTTP status code.
        status: u16,
        /// The server's message; for 401/403 also what is wrong with the token.
        message: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The request could not be sent or its response not read (connection refused, timeout...).
    #[error("GET {url} failed after {attempts} attempt(s): {detail}")]
    Transport {
        /// The request URL.
        url: String,
        /// The error and its causes.
        detail: String,
        /// Attempts made.
        attempts: u32,
    },
    /// A successful status, but not the response GitLab gives.
    #[error("GET {url} returned an unusable response: {detail}")]
    InvalidResponse {
        /// The request URL.
        url: String,
        /// What is wrong with it.
        detail: String,
    },
}

/// A GitLab project: `https://gitlab.example.com/group/subgroup/project` (also `http://`, and
/// a trailing `.git` or `/` is fine). Cheap to clone: clones share one HTTP client.
#[derive(Clone)]
pub(crate) struct GitLabProject {
    client: reqwest::Client,
    /// `scheme://host[:port]/group/.../project`, normalized.
    url: String,
    /// `scheme://host[:port]/api/v4/projects/group%2F...%2Fproject`.
    api: String,
    /// The last path segment.
    name: String,
    /// Sent as `PRIVATE-TOKEN` (marked sensitive).
    token: Option<HeaderValue>,
    timeout: Duration,
}

impl fmt::Debug for GitLabProject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitLabProject")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// Entries of `GET /projects/:id/repository/tree`.
#[derive(Deserialize)]
struct TreeEntry {
    path: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    mode: Option<String>,
}

/// One diff of `GET /projects/:id/repository/compare`.
#[derive(Deserialize)]
struct Diff {
    old_path: String,
    new_path: String,
    #[serde(default)]
    a_mode: Option<String>,
    #[serde(default)]
    b_mode: Option<String>,
    #[serde(default)]
    new_file: bool,
    #[serde(default)]
    renamed_file: bool,
    #[serde(default)]
    deleted_file: bool,
}

impl GitLabProject {
    /// Parses the project URL; `token` (trimmed; empty counts as none) goes in the
    /// `PRIVATE-TOKEN` header. Refuses other schemes than `http`/`https`, URLs without a host
    /// or without a project path (`group/project` at least), a query string or fragment,
    /// credentials in the URL, and URLs pointing inside a project (`.../-/tree/main`).
    pub(crate) fn parse(url: &str, token: Option<String>) -> Result<Self, GitLabError> {
        let given = url.trim();
        let invalid = |reason: String| GitLabError::InvalidUrl {
            // A password in the URL (refused below) is never shown.
            url: crate::http::shown_url(given),
            reason,
        };
        if given.is_empty() {
            return Err(invalid("the URL is empty".into()));
        }
        let parsed = reqwest::Url::parse(given).map_err(|e| {
            invalid(format!(
                "not a valid URL ({e}); expected https://gitlab.example.com/group/project"
            ))
        })?;
        match parsed.scheme() {
            "http" | "https" => {}
            other => {
                return Err(invalid(format!(
                    "scheme {other:?} is not supported; use the project's http:// or https:// \
                     URL (for a local clone, give its path instead)"
                )));
            }
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(invalid("the URL has no host".into()));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(invalid(
                "the URL must not contain credentials; pass the token separately \
                 (it is sent in the PRIVATE-TOKEN header)"
                    .into(),
            ));
        }
        if parsed.query().is_some() {
            return Err(invalid(
                "the URL must not have a query string (`?...`); give the project URL only".into(),
            ));
        }
        if parsed.fragment().is_some() {
            return Err(invalid(
                "the URL must not have a fragment (`#...`); give the project URL only".into(),
            ));
        }
        let mut segments = Vec::new();
        for raw in parsed.path().split('/').filter(|s| !s.is_empty()) {
            let segment = percent_decode(raw).ok_or_else(|| {
                invalid(format!(
                    "path segment {raw:?} is not valid percent-encoded UTF-8"
                ))
            })?;
            if segment == "-" {
                return Err(invalid(
                    "the URL points inside a project (`/-/...`); give the project URL itself, \
                     e.g. https://gitlab.example.com/group/project"
                        .into(),
                ));
            }
            segments.push(segment);
        }
        if let Some(last) = segments.last_mut()
            && let Some(stripped) = last.strip_suffix(".git")
        {
            *last = stripped.to_owned();
            if last.is_empty() {
                segments.pop();
            }
        }
        match segments.len() {
            0 => {
                return Err(invalid(
                    "the URL has no project path; expected \
                     https://gitlab.example.com/group/project"
                        .into(),
                ));
            }
            1 => {
                return Err(invalid(format!(
                    "the URL has no project path: {:?} alone is a group or user; expected \
                     https://gitlab.example.com/group/project",
                    segments[0]
                )));
            }
            _ => {}
        }
        let origin = parsed.origin().ascii_serialization();
        let path = segments.join("/");
        let url = format!(
            "{origin}/{}",
            segments
                .iter()
                .map(|s| encode(s))
                .collect::<Vec<_>>()
                .join("/")
        );
        let api = format!("{origin}/api/v4/projects/{}", encode(&path));
        let token = match token.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            None => None,
            Some(t) => {
                let mut value = HeaderValue::from_str(t).map_err(|_| {
                    invalid(
                        "the GitLab token contains characters that cannot be sent in an HTTP \
                         header"
                            .into(),
                    )
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let client = reqwest::Client::builder()
            .timeout(DEFAULT_TIMEOUT)
            .redirect(request::same_host_redirects())
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        Ok(GitLabProject {
            client,
            url,
            api,
            name: segments.last().cloned().unwrap_or_default(),
            token,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// The timeout of each request, response body included (default 30 s).
    pub(crate) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The project URL as given (normalized: no `.git`, no trailing `/`, lower-case host),
    /// used as the schedule's `source`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// A display name: the last path segment.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The commit at the head of the default branch: `GET /projects/:id` for its
    /// `default_branch`, then `GET /projects/:id/repository/commits/:branch` for its `id`.
    /// [`GitLabError::NotFound`] when the project is missing (or not visible to the token), or
    /// has no default branch (an empty repository).
    pub(crate) async fn head(&self) -> Result<String, GitLabError> {
        #[derive(Deserialize)]
        struct Project {
            #[serde(default)]
            default_branch: Option<String>,
        }
        #[derive(Deserialize)]
        struct Commit {
            id: String,
        }
        let url = self.api.clone();
        let project: Project = match self.get(&url, None).await {
            Ok(body) => self.json(&url, body)?,
            Err(Failure::Status { status: 404, .. }) => return Err(self.not_found("project")),
            Err(f) => return Err(self.error(&url, f)),
        };
        let Some(branch) = project.default_branch.filter(|b| !b.is_empty()) else {
            return Err(self.not_found("default branch (is the repository empty?)"));
        };
        let url = format!("{}/repository/commits/{}", self.api, encode(&branch));
        let commit: Commit = match self.get(&url, None).await {
            Ok(body) => self.json(&url, body)?,
            Err(Failure::Status {
                status: 404,
                message,
                ..
            }) => {
                return Err(self.not_found_or(&message, || {
                    self.not_found(&format!("default branch {branch:?}"))
                }));
            }
            Err(f) => return Err(self.error(&url, f)),
        };
        if !is_commit_id(&commit.id) {
            return Err(GitLabError::InvalidResponse {
                url,
                detail: format!("{:?} is not a commit id", commit.id),
            });
        }
        Ok(commit.id)
    }

    /// Every regular file's path at `commit`, sorted: `GET /projects/:id/repository/tree`
    /// (recursive, 100 entries a page, following `X-Next-Page` until it is empty). Keeps
    /// entries of type `blob` except symlinks (mode `120000`); submodules (type `commit`) and
    /// directories are skipped. [`GitLabError::UnknownRevision`] when GitLab has no tree for
    /// `commit`.
    pub(crate) async fn list_files(&self, commit: &str) -> Result<Vec<String>, GitLabError> {
        let mut files = Vec::new();
        let mut page: u64 = 1;
        loop {
            let url = format!(
                "{}/repository/tree?ref={}&recursive=true&per_page={PER_PAGE}&page={page}",
                self.api,
                encode(commit)
            );
            let (bytes, next_page) = match self.get(&url, None).await {
                Ok(Body::Full { bytes, next_page }) => (bytes, next_page),
                Ok(Body::TooLarge(_)) => unreachable!("no limit was given"),
                Err(Failure::Status {
                    status: 404,
                    message,
                    ..
                }) => {
                    return Err(self.not_found_or(&message, || self.unknown_revision(commit)));
                }
                Err(f) => return Err(self.error(&url, f)),
            };
            let entries: Vec<TreeEntry> = parse_json(&url, &bytes)?;
            let count = entries.len();
            files.extend(
                entries
                    .into_iter()
                    .filter(|e| e.kind == "blob" && e.mode.as_deref() != Some("120000"))
                    .map(|e| e.path),
            );
            let next = match next_page.as_deref().map(str::trim) {
                Some("") => break,
                Some(next) => next
                    .parse::<u64>()
                    .ok()
                    .filter(|&n| n > page)
                    .ok_or_else(|| GitLabError::InvalidResponse {
                        url: url.clone(),
                        detail: format!("X-Next-Page {next:?} does not follow page {page}"),
                    })?,
                // No pagination headers: a partial page is the last one; a full page might
                // not be, and a silently truncated listing would unindex files.
                None if count < PER_PAGE as usize => break,
                None => {
                    return Err(GitLabError::InvalidResponse {
                        url,
                        detail: format!(
                            "a full page of {count} entries without an X-Next-Page header \
                             (a proxy removing headers?); cannot tell whether more follow"
                        ),
                    });
                }
            };
            page = next;
        }
        files.sort();
        files.dedup();
        Ok(files)
    }

    /// The regular files that differ between `from` and `to`: `GET /projects/:id/repository/
    /// compare?from=&to=&straight=true`. For each diff, a deleted file is deleted (old path), a
    /// renamed one deleted (old path) and upserted (new path), anything else upserted (new
    /// path); symlinks and submodules (by `a_mode`/`b_mode`, when present) are skipped, and a
    /// file that became one is deleted. Sorted and deduplicated; a path both deleted and
    /// upserted is only upserted.
    ///
    /// [`GitLabError::UnknownRevision`] (naming `from`) when GitLab does not know one of the
    /// commits; [`GitLabError::InvalidResponse`] when GitLab timed out computing the comparison
    /// (`compare_timeout`), since its list of diffs is then incomplete.
    pub(crate) async fn changes(&self, from: &str, to: &str) -> Result<Changes, GitLabError> {
        #[derive(Deserialize)]
        struct Compare {
            diffs: Vec<Diff>,
            #[serde(default)]
            compare_timeout: bool,
        }
        let url = format!(
            "{}/repository/compare?from={}&to={}&straight=true",
            self.api,
            encode(from),
            encode(to)
        );
        let compare: Compare = match self.get(&url, None).await {
            Ok(body) => self.json(&url, body)?,
            Err(Failure::Status {
                status: 404,
                message,
                ..
            }) => {
                return Err(self.not_found_or(&message, || self.unknown_revision(from)));
            }
            Err(f) => return Err(self.error(&url, f)),
        };
        if compare.compare_timeout {
            return Err(GitLabError::InvalidResponse {
                url,
                detail: "GitLab timed out computing the comparison (compare_timeout), so its \
                         list of changed files is incomplete; list all files instead"
                    .into(),
            });
        }
        Ok(changes_from_diffs(compare.diffs))
    }

    /// The bytes of the file `path` at `commit`: `GET /projects/:id/repository/files/:path/raw
    /// ?ref=:commit`. [`Blob::TooLarge`] when it has more than `max_bytes` bytes: decided from
    /// `Content-Length` without reading the body, or, without one, by reading no further than
    /// the first chunk past the limit (then `bytes` is what was received, a lower bound).
    /// [`GitLabError::NotFound`] when the file (or the project) does not exist.
    pub(crate) async fn read(
        &self,
        commit: &str,
        path: &str,
        max_bytes: u64,
    ) -> Result<Blob, GitLabError> {
        let what = || format!("file {path:?} at commit {commit}");
        if path.is_empty() {
            return Err(self.not_found(&what()));
        }
        let url = format!(
            "{}/repository/files/{}/raw?ref={}",
            self.api,
            encode(path),
            encode(commit)
        );
        match self.get(&url, Some(max_bytes)).await {
            Ok(Body::Full { bytes, .. }) => Ok(Blob::Data(bytes)),
            Ok(Body::TooLarge(bytes)) => Ok(Blob::TooLarge { bytes }),
            Err(Failure::Status {
                status: 404,
                message,
                ..
            }) => Err(self.not_found_or(&message, || self.not_found(&what()))),
            Err(f) => Err(self.error(&url, f)),
        }
    }

    // --- errors ------------------------------------------------------------------------------

    fn not_found(&self, what: &str) -> GitLabError {
        GitLabError::NotFound {
            project: self.url.clone(),
            what: what.to_owned(),
        }
    }

    fn unknown_revision(&self, revision: &str) -> GitLabError {
        GitLabError::UnknownRevision {
            project: self.url.clone(),
            revision: revision.to_owned(),
        }
    }

    /// A 404 about the project itself (`404 Project Not Found`) names the project; any other
    /// 404 is `otherwise`.
    fn not_found_or(&self, message: &str, otherwise: impl FnOnce() -> GitLabError) -> GitLabError {
        if message.to_ascii_lowercase().contains("project not found") {
            self.not_found("project")
        } else {
            otherwise()
        }
    }

    /// A failure other than the 404s the callers interpret.
    fn error(&self, url: &str, failure: Failure) -> GitLabError {
        match failure {
            Failure::Transport { detail, attempts } => GitLabError::Transport {
                url: url.to_owned(),
                detail,
                attempts,
            },
            Failure::Status {
                status: 404,
                message,
                ..
            } => self.not_found_or(&message, || self.not_found(&format!("{url} ({message})"))),
            Failure::Status {
                status,
                message,
                attempts,
            } => {
                let message = if status == 401 || status == 403 {
                    let hint = if self.token.is_some() {
                        "the GitLab token was refused: it is invalid or expired, lacks the \
                         read_api scope (read_repository alone does not cover the project, tree \
                         and compare endpoints), or its user cannot read this project"
                    } else {
                        "no GitLab token was given: a private project needs a personal, group \
                         or project access token with the read_api scope (read_repository \
                         alone does not cover the project, tree and compare endpoints)"
                    };
                    format!("{message}; {hint}")
                } else {
                    message
                };
                GitLabError::Status {
                    url: url.to_owned(),
                    status,
                    message,
                    attempts,
                }
            }
        }
    }

    fn json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        body: Body,
    ) -> Result<T, GitLabError> {
        match body {
            Body::Full { bytes, .. } => parse_json(url, &bytes),
            Body::TooLarge(_) => unreachable!("JSON requests have no limit"),
        }
    }
}

/// Applies [`GitLabProject::changes`]'s rules to the diffs of a comparison.
fn changes_from_diffs(diffs: Vec<Diff>) -> Changes {
    let mut changes = Changes::default();
    for diff in diffs {
        let is_file = !diff.deleted_file && is_file_mode(diff.b_mode.as_deref());
        let was_file = !diff.new_file && is_file_mode(diff.a_mode.as_deref());
        let moved = diff.renamed_file || diff.old_path != diff.new_path;
        if is_file {
            changes.upserted.push(diff.new_path);
        }
        if was_file && (!is_file || moved) {
            changes.deleted.push(diff.old_path);
        }
    }
    changes.upserted.sort();
    changes.upserted.dedup();
    changes.deleted.sort();
    changes.deleted.dedup();
    let upserted = &changes.upserted;
    changes
        .deleted
        .retain(|p| upserted.binary_search(p).is_err());
    changes
}

/// A regular file's mode (`100644`, `100755`), or no mode given (older GitLab versions).
fn is_file_mode(mode: Option<&str>) -> bool {
    match mode.map(str::trim) {
        None | Some("") => true,
        Some(mode) => mode.starts_with("100"),
    }
}

/// A full SHA-1 or SHA-256 commit id.
fn is_commit_id(id: &str) -> bool {
    matches!(id.len(), 40 | 64) && id.bytes().all(|b| b.is_ascii_hexdigit())
}

fn parse_json<T: serde::de::DeserializeOwned>(url: &str, bytes: &[u8]) -> Result<T, GitLabError> {
    serde_json::from_slice(bytes).map_err(|e| GitLabError::InvalidResponse {
        url: url.to_owned(),
        detail: format!(
            "not the JSON GitLab returns ({e}): {}",
            truncate(String::from_utf8_lossy(bytes).trim())
        ),
    })
}
