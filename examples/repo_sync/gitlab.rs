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
//!   (or the `Retry-After` seconds, capped at 5 s); other statuses are not retried;
//! - the project id in URLs is its URL-encoded path (`group%2Fsub%2Fproject`); file paths and
//!   refs are URL-encoded too.
//!
//! The project URL is `http(s)://host[:port]/group[/subgroup...]/project`: GitLab installed
//! under a relative URL root (`https://host/gitlab/...`) is not supported, since the project
//! path could not be told apart from the prefix.

// Some items (the timeout setter, accessors) are for callers that may not use them yet.
#![allow(dead_code)]

use crate::http::{error_chain, truncate};
use std::fmt;
use std::fmt::Write as _;
use std::time::Duration;

use reqwest::header::{HeaderValue, LOCATION, RETRY_AFTER};
use serde::Deserialize;

use crate::git::{Blob, Changes};

/// The timeout of each request, response body included.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Retries after the first attempt (so at most 4 requests per call).
const MAX_RETRIES: u32 = 3;
/// The first backoff; it doubles on every retry (200 ms, 400 ms, 800 ms).
const BASE_BACKOFF: Duration = Duration::from_millis(200);
/// A server's `Retry-After` is honoured up to this long.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
/// Entries per page of the tree listing (GitLab's maximum).
const PER_PAGE: u32 = 100;
/// How much of an error response is read for its message.
const MAX_ERROR_BODY: u64 = 64 * 1024;
/// Redirects followed per request (within the same host).
const MAX_REDIRECTS: usize = 5;

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
        "GET {url} answered HTTP {status} {reason} after {attempts} attempt(s): {message}",
        reason = status_reason(*status)
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

/// "Not Found" for 404, "" for an unknown code.
fn status_reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
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

/// A successful response's body.
enum Body {
    /// The whole body, and the `X-Next-Page` header (`None` when absent).
    Full {
        bytes: Vec<u8>,
        next_page: Option<String>,
    },
    /// More than the limit: `Content-Length`, or the bytes received when reading stopped.
    TooLarge(u64),
}

/// Why a request failed, before it is turned into a [`GitLabError`].
enum Failure {
    Status {
        status: u16,
        message: String,
        attempts: u32,
    },
    Transport {
        detail: String,
        attempts: u32,
    },
}

/// The outcome of one failed attempt.
struct AttemptError {
    failure: Failure,
    retryable: bool,
    retry_after: Option<Duration>,
}

impl GitLabProject {
    /// Parses the project URL; `token` (trimmed; empty counts as none) goes in the
    /// `PRIVATE-TOKEN` header. Refuses other schemes than `http`/`https`, URLs without a host
    /// or without a project path (`group/project` at least), a query string or fragment,
    /// credentials in the URL, and URLs pointing inside a project (`.../-/tree/main`).
    pub(crate) fn parse(url: &str, token: Option<String>) -> Result<Self, GitLabError> {
        let given = url.trim();
        let invalid = |reason: String| GitLabError::InvalidUrl {
            url: given.to_owned(),
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
            .redirect(same_host_redirects())
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

    // --- requests ----------------------------------------------------------------------------

    /// `GET url` with retries; `limit` caps the body (see [`Body::TooLarge`]).
    async fn get(&self, url: &str, limit: Option<u64>) -> Result<Body, Failure> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let error = match self.attempt(url, limit, attempts).await {
                Ok(body) => return Ok(body),
                Err(e) => e,
            };
            if !error.retryable || attempts > MAX_RETRIES {
                return Err(error.failure);
            }
            let wait = backoff(attempts, error.retry_after);
            tracing::debug!(
                url,
                attempts,
                wait_ms = wait.as_millis() as u64,
                "GitLab request failed, retrying"
            );
            tokio::time::sleep(wait).await;
        }
    }

    async fn attempt(
        &self,
        url: &str,
        limit: Option<u64>,
        attempts: u32,
    ) -> Result<Body, AttemptError> {
        let transport = |e: reqwest::Error| {
            let detail = if e.is_timeout() {
                format!(
                    "timed out (timeout {:?} per request): {}",
                    self.timeout,
                    error_chain(&e)
                )
            } else {
                error_chain(&e)
            };
            AttemptError {
                failure: Failure::Transport { detail, attempts },
                retryable: e.is_timeout() || e.is_connect() || e.is_request() || e.is_body(),
                retry_after: None,
            }
        };
        let mut request = self.client.get(url).timeout(self.timeout);
        if let Some(token) = &self.token {
            request = request.header("PRIVATE-TOKEN", token.clone());
        }
        let mut response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let message = if status.is_redirection() {
                let location = response
                    .headers()
                    .get(LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("(no Location)")
                    .to_owned();
                format!(
                    "redirect to {location} not followed: only redirects within the same host \
                     are followed, so that the token is never sent elsewhere"
                )
            } else {
                // The message is a courtesy: a body that cannot be read leaves it empty.
                let mut body = Vec::new();
                while let Ok(Some(chunk)) = response.chunk().await {
                    body.extend_from_slice(&chunk);
                    if body.len() as u64 >= MAX_ERROR_BODY {
                        break;
                    }
                }
                server_message(&body)
            };
            return Err(AttemptError {
                failure: Failure::Status {
                    status: status.as_u16(),
                    message,
                    attempts,
                },
                retryable: status == reqwest::StatusCode::TOO_MANY_REQUESTS
                    || status.is_server_error(),
                retry_after,
            });
        }
        let next_page = response
            .headers()
            .get("x-next-page")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let declared = response.content_length();
        if let (Some(limit), Some(declared)) = (limit, declared)
            && declared > limit
        {
            // Dropping the response closes the connection without reading the body.
            return Ok(Body::TooLarge(declared));
        }
        let capacity = declared
            .unwrap_or(0)
            .min(limit.unwrap_or(u64::MAX))
            .min(1 << 23);
        let mut bytes = Vec::with_capacity(capacity as usize);
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            let total = bytes.len() as u64 + chunk.len() as u64;
            if let Some(limit) = limit
                && total > limit
            {
                return Ok(Body::TooLarge(total));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Body::Full { bytes, next_page })
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

/// The wait before retry number `attempt` (1-based): the server's `Retry-After` (capped at
/// 5 s) or 200 ms doubled per retry.
fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    match retry_after {
        Some(wait) => wait.min(MAX_RETRY_AFTER),
        None => BASE_BACKOFF.saturating_mul(1 << attempt.saturating_sub(1).min(16)),
    }
}

/// Follows redirects only to the same host: same scheme and port, or `http` to `https`.
fn same_host_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let Some(first) = attempt.previous().first().cloned() else {
            return attempt.stop();
        };
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
        }
        let next = attempt.url();
        let same_host = next.host_str() == first.host_str();
        let same_origin = next.scheme() == first.scheme()
            && next.port_or_known_default() == first.port_or_known_default();
        let upgrade = first.scheme() == "http" && next.scheme() == "https";
        if same_host && (same_origin || upgrade) {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
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

/// Percent-encodes everything but RFC 3986's unreserved characters, so `/` becomes `%2F` and a
/// whole path fits in one URL path segment or query value.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Decodes `%XX` escapes; `None` for a malformed escape or a result that is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The message of an error response: GitLab's `message` (a string, or an object of field
/// errors), `error_description` or `error` from a JSON body, else the body itself, shortened.
fn server_message(body: &[u8]) -> String {
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        let mut parts = Vec::new();
        for key in ["message", "error", "error_description"] {
            match json.get(key) {
                Some(serde_json::Value::String(s)) => parts.push(s.clone()),
                Some(serde_json::Value::Null) | None => {}
                Some(other) => parts.push(other.to_string()),
            }
        }
        if !parts.is_empty() {
            return truncate(&parts.join(": "));
        }
    }
    let text = String::from_utf8_lossy(body);
    if text.trim().is_empty() {
        "(empty body)".into()
    } else {
        truncate(text.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    const C1: &str = "1111111111111111111111111111111111111111";
    const C2: &str = "2222222222222222222222222222222222222222";
    const PROJECT: &str = "/api/v4/projects/group%2Fsub%2Fdemo";
    const TOKEN: &str = "glpat-test-secret";
    const BIG: usize = 5000;

    // --- the fake GitLab ---------------------------------------------------------------------

    /// A request as the test server saw it.
    #[derive(Debug, Clone)]
    struct Seen {
        /// The request target as sent (still percent-encoded).
        target: String,
        /// Request line and headers, header names lower-cased.
        head: String,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<String> {
            self.head.lines().skip(1).find_map(|l| {
                let (n, v) = l.split_once(':')?;
                (n == name).then(|| v.trim().to_owned())
            })
        }
        fn path(&self) -> &str {
            self.target.split_once('?').map_or(&self.target, |(p, _)| p)
        }
        fn query(&self, key: &str) -> Option<String> {
            let (_, query) = self.target.split_once('?')?;
            query.split('&').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == key).then(|| percent_decode(v).unwrap())
            })
        }
    }

    enum Reply {
        Json(u16, Vec<(&'static str, String)>, serde_json::Value),
        Bytes(u16, Vec<u8>),
        /// Announces `Content-Length: len`, sends `sent` bytes, then holds the connection open.
        Stall {
            len: u64,
            sent: usize,
        },
        /// A chunked body of 1 KiB chunks that never ends (until the client goes away).
        Endless,
        /// Never answers.
        Hang,
    }

    struct Server {
        base: String,
        seen: Arc<Mutex<Vec<Seen>>>,
        /// Body bytes written by `Reply::Endless`.
        streamed: Arc<AtomicU64>,
    }

    impl Server {
        fn requests(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }
        fn project(&self, path: &str) -> GitLabProject {
            GitLabProject::parse(&format!("{}/{path}", self.base), Some(TOKEN.into())).unwrap()
        }
        fn demo(&self) -> GitLabProject {
            self.project("group/sub/demo")
        }
    }

    /// A hand-rolled HTTP/1.1 server on 127.0.0.1:0; `reply` gets the 0-based request number.
    async fn serve<F>(reply: F) -> Server
    where
        F: Fn(usize, &Seen) -> Reply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let streamed = Arc::new(AtomicU64::new(0));
        let reply = Arc::new(reply);
        let (seen2, streamed2) = (seen.clone(), streamed.clone());
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let (seen, streamed, reply) = (seen2.clone(), streamed2.clone(), reply.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    let header_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let text = String::from_utf8_lossy(&buf[..header_end]).into_owned();
                    let target = text.split(' ').nth(1).unwrap_or_default().to_owned();
                    let head: String = text
                        .lines()
                        .map(|l| match l.split_once(':') {
                            Some((n, v)) => format!("{}:{v}\n", n.to_ascii_lowercase()),
                            None => format!("{l}\n"),
                        })
                        .collect();
                    let request = Seen { target, head };
                    let number = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(request.clone());
                        seen.len() - 1
                    };
                    let (status, content_type, headers, body) = match reply(number, &request) {
                        Reply::Json(s, h, v) => (s, "application/json", h, v.to_string().into()),
                        Reply::Bytes(s, b) => (s, "text/plain", vec![], b),
                        Reply::Stall { len, sent } => {
                            let head = format!(
                                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\
                                 Content-Length: {len}\r\n\r\n"
                            );
                            let _ = socket.write_all(head.as_bytes()).await;
                            let _ = socket.write_all(&vec![b'x'; sent]).await;
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            return;
                        }
                        Reply::Endless => {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\
                                        Transfer-Encoding: chunked\r\n\r\n";
                            if socket.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            let mut frame = b"400\r\n".to_vec();
                            frame.extend_from_slice(&[b'y'; 1024]);
                            frame.extend_from_slice(b"\r\n");
                            while socket.write_all(&frame).await.is_ok() {
                                streamed.fetch_add(1024, Ordering::Relaxed);
                            }
                            return;
                        }
                        Reply::Hang => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            return;
                        }
                    };
                    let mut response = format!(
                        "HTTP/1.1 {status} Test\r\nContent-Type: {content_type}\r\n\
                         Content-Length: {}\r\nConnection: close\r\n",
                        body.len()
                    );
                    for (name, value) in headers {
                        response.push_str(&format!("{name}: {value}\r\n"));
                    }
                    response.push_str("\r\n");
                    let mut bytes = response.into_bytes();
                    bytes.extend_from_slice(&body);
                    let _ = socket.write_all(&bytes).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Server {
            base,
            seen,
            streamed,
        }
    }

    /// The fake GitLab serving `group/sub/demo`.
    async fn gitlab() -> Server {
        serve(|_, r| fake_gitlab(r)).await
    }

    /// A tree entry of the fake project: `(path, type, mode, content)`.
    type Entry = (&'static str, &'static str, &'static str, Vec<u8>);

    /// Every tree entry at a commit of `group/sub/demo`.
    fn tree(commit: &str) -> Option<Vec<Entry>> {
        let blob = |path, mode, content: &[u8]| (path, "blob", mode, content.to_vec());
        let dir = |path| (path, "tree", "040000", Vec::new());
        let mut entries = vec![
            dir("docs"),
            dir("src"),
            dir("vendor"),
            blob("big.bin", "100644", &[b'z'; BIG]),
            blob("docs/my notes.md", "100644", b"notes with a space\n"),
            blob("link", "120000", b"README.md"),
            blob("src/main.rs", "100755", b"fn main() {}\n"),
            ("vendor/lib", "commit", "160000", Vec::new()),
        ];
        match commit {
            C1 => entries.extend([
                blob("README.md", "100644", b"# demo\n"),
                blob("docs/was_file.md", "100644", b"soon a link\n"),
                blob("docs/한국어.md", "100644", "안녕하세요\n".as_bytes()),
                blob("gone.txt", "100644", b"bye\n"),
                blob("src/old_name.rs", "100644", b"pub fn f() {}\n"),
            ]),
            C2 => entries.extend([
                blob("README.md", "100644", b"# demo v2\n"),
                blob("docs/was_file.md", "120000", b"../README.md"),
                blob("docs/한국어.md", "100644", "안녕\n".as_bytes()),
                blob("link2", "120000", b"src/main.rs"),
                blob("new.txt", "100644", b"new\n"),
                blob("src/new_name.rs", "100644", b"pub fn f() {}\n"),
                ("vendor/lib2", "commit", "160000", Vec::new()),
            ]),
            _ => return None,
        }
        Some(entries)
    }

    fn diff(old: &str, new: &str, a: Option<&str>, b: Option<&str>) -> serde_json::Value {
        let mut d = serde_json::json!({
            "old_path": old, "new_path": new, "diff": "@@ -1 +1 @@\n",
            "new_file": a == Some("0"), "deleted_file": b == Some("0"),
            "renamed_file": old != new,
        });
        if let (Some(a), Some(b)) = (a, b) {
            d["a_mode"] = a.into();
            d["b_mode"] = b.into();
        }
        d
    }

    fn message(status: u16, text: &str) -> Reply {
        Reply::Json(status, vec![], serde_json::json!({ "message": text }))
    }

    fn fake_gitlab(r: &Seen) -> Reply {
        let Some(rest) = r.path().strip_prefix(PROJECT) else {
            return message(404, "404 Project Not Found");
        };
        if !rest.is_empty() && !rest.starts_with('/') {
            return message(404, "404 Project Not Found");
        }
        if rest.is_empty() {
            return Reply::Json(
                200,
                vec![],
                serde_json::json!({"id": 7, "path_with_namespace": "group/sub/demo",
                                   "default_branch": "release/v1"}),
            );
        }
        if rest == "/repository/commits/release%2Fv1" {
            return Reply::Json(200, vec![], serde_json::json!({"id": C2, "title": "two"}));
        }
        if rest == "/repository/tree" {
            let Some(entries) = tree(&r.query("ref").unwrap_or_default()) else {
                return message(404, "404 Tree Not Found");
            };
            if r.query("recursive").as_deref() != Some("true")
                || r.query("per_page").as_deref() != Some("100")
            {
                return message(400, "expected recursive=true&per_page=100");
            }
            let half = entries.len().div_ceil(2);
            let (page, next) = match r.query("page").as_deref() {
                Some("1") | None => (&entries[..half], "2"),
                Some("2") => (&entries[half..], ""),
                _ => (&entries[..0], ""),
            };
            let json: Vec<serde_json::Value> = page
                .iter()
                .map(|(path, kind, mode, _)| {
                    let name = path.rsplit('/').next().unwrap();
                    serde_json::json!({"id": "abc", "name": name, "type": kind,
                                       "path": path, "mode": mode})
                })
                .collect();
            return Reply::Json(
                200,
                vec![("X-Next-Page", next.into()), ("X-Per-Page", "100".into())],
                serde_json::Value::Array(json),
            );
        }
        if rest == "/repository/compare" {
            if r.query("straight").as_deref() != Some("true") {
                return message(400, "expected straight=true");
            }
            let (from, to) = (r.query("from").unwrap(), r.query("to").unwrap());
            if tree(&from).is_none() || tree(&to).is_none() {
                return message(404, "404 Ref Not Found");
            }
            if from == to {
                return Reply::Json(
                    200,
                    vec![],
                    serde_json::json!({"commit": null, "commits": [], "diffs": [],
                                       "compare_timeout": false, "compare_same_ref": true}),
                );
            }
            assert_eq!((from.as_str(), to.as_str()), (C1, C2));
            let m = Some("100644");
            let diffs = vec![
                diff("README.md", "README.md", m, m),
                diff("docs/was_file.md", "docs/was_file.md", m, Some("120000")),
                // Older GitLab versions send no modes.
                diff("docs/한국어.md", "docs/한국어.md", None, None),
                diff("gone.txt", "gone.txt", m, Some("0")),
                diff("link2", "link2", Some("0"), Some("120000")),
                diff("new.txt", "new.txt", Some("0"), m),
                diff("src/old_name.rs", "src/new_name.rs", m, m),
                diff("vendor/lib2", "vendor/lib2", Some("0"), Some("160000")),
            ];
            return Reply::Json(
                200,
                vec![],
                serde_json::json!({"commit": {"id": C2}, "commits": [{"id": C2}],
                                   "diffs": diffs, "compare_timeout": false,
                                   "compare_same_ref": false}),
            );
        }
        if let Some(encoded) = rest
            .strip_prefix("/repository/files/")
            .and_then(|p| p.strip_suffix("/raw"))
        {
            if encoded.contains('/') {
                return message(400, "the file path must be URL-encoded");
            }
            let path = percent_decode(encoded).unwrap();
            let Some(entries) = tree(&r.query("ref").unwrap_or_default()) else {
                return message(404, "404 Commit Not Found");
            };
            return match entries.into_iter().find(|e| e.0 == path && e.1 == "blob") {
                Some((_, _, _, content)) => Reply::Bytes(200, content),
                None => message(404, "404 File Not Found"),
            };
        }
        message(404, "404 Not Found")
    }

    fn c1_files() -> Vec<&'static str> {
        vec![
            "README.md",
            "big.bin",
            "docs/my notes.md",
            "docs/was_file.md",
            "docs/한국어.md",
            "gone.txt",
            "src/main.rs",
            "src/old_name.rs",
        ]
    }

    // --- URLs and configuration --------------------------------------------------------------

    #[test]
    fn parse_accepts_project_urls() {
        let cases = [
            (
                "https://gitlab.example.com/group/subgroup/project",
                "https://gitlab.example.com/group/subgroup/project",
                "project",
            ),
            (
                "https://gitlab.example.com/group/project.git",
                "https://gitlab.example.com/group/project",
                "project",
            ),
            (
                "  http://GitLab.Example.com:8080/a/b/c/d-e.f_g/  ",
                "http://gitlab.example.com:8080/a/b/c/d-e.f_g",
                "d-e.f_g",
            ),
            (
                "https://gitlab.example.com:443/group/project.git/",
                "https://gitlab.example.com/group/project",
                "project",
            ),
        ];
        for (given, url, name) in cases {
            let p = GitLabProject::parse(given, None).unwrap();
            assert_eq!((p.url(), p.name()), (url, name), "{given}");
        }
        let p = GitLabProject::parse("https://gitlab.example.com/group/subgroup/project", None)
            .unwrap();
        assert_eq!(
            p.api,
            "https://gitlab.example.com/api/v4/projects/group%2Fsubgroup%2Fproject"
        );
    }

    #[test]
    fn parse_refuses_bad_urls_naming_them() {
        let cases = [
            ("ftp://gitlab.example.com/group/project", "scheme"),
            ("ssh://git@gitlab.example.com/group/project.git", "scheme"),
            (
                "git@gitlab.example.com:group/project.git",
                "not a valid URL",
            ),
            ("gitlab.example.com/group/project", "not a valid URL"),
            ("https://gitlab.example.com", "no project path"),
            ("https://gitlab.example.com/", "no project path"),
            ("https://gitlab.example.com/group", "no project path"),
            ("https://gitlab.example.com/.git", "no project path"),
            (
                "https://gitlab.example.com/group/project?ref=main",
                "query string",
            ),
            ("https://gitlab.example.com/group/project?", "query string"),
            (
                "https://gitlab.example.com/group/project#readme",
                "fragment",
            ),
            (
                "https://user:pw@gitlab.example.com/group/project",
                "credentials",
            ),
            (
                "https://gitlab.example.com/group/project/-/tree/main",
                "inside a project",
            ),
            ("", "empty"),
        ];
        for (url, expected) in cases {
            let err = GitLabProject::parse(url, None).unwrap_err();
            assert!(
                matches!(err, GitLabError::InvalidUrl { .. }),
                "{url}: {err:?}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains(expected) && msg.contains(&format!("{:?}", url.trim())),
                "{url}: {msg}"
            );
        }
        let err = GitLabProject::parse("https://h/g/p", Some("bad\ntoken".into())).unwrap_err();
        assert!(err.to_string().contains("token"), "{err}");
        assert!(!err.to_string().contains("bad\ntoken"), "{err}");
    }

    #[test]
    fn debug_does_not_print_the_token() {
        let p = GitLabProject::parse("https://h/g/p", Some(TOKEN.into())).unwrap();
        let debug = format!("{p:?}");
        assert!(
            !debug.contains(TOKEN) && debug.contains("redacted") && debug.contains("https://h/g/p"),
            "{debug}"
        );
        let none = format!("{:?}", GitLabProject::parse("https://h/g/p", None).unwrap());
        assert!(none.contains("token: None"), "{none}");
        // An empty token counts as none.
        let empty = GitLabProject::parse("https://h/g/p", Some("  ".into())).unwrap();
        assert!(empty.token.is_none());
    }

    #[test]
    fn paths_are_url_encoded() {
        assert_eq!(encode("group/sub/demo"), "group%2Fsub%2Fdemo");
        assert_eq!(encode("docs/my notes.md"), "docs%2Fmy%20notes.md");
        assert_eq!(encode("한"), "%ED%95%9C");
        assert_eq!(encode("a+b&c=d?e#f%g"), "a%2Bb%26c%3Dd%3Fe%23f%25g");
        assert_eq!(encode("A-z_0.9~"), "A-z_0.9~");
        for s in ["docs/한국어.md", "a b/c%d", ""] {
            assert_eq!(percent_decode(&encode(s)).as_deref(), Some(s));
        }
        assert_eq!(percent_decode("%zz"), None);
        assert_eq!(percent_decode("%E"), None);
    }

    #[test]
    fn backoff_doubles_and_retry_after_is_capped() {
        let ms = Duration::from_millis;
        assert_eq!(backoff(1, None), ms(200));
        assert_eq!(backoff(2, None), ms(400));
        assert_eq!(backoff(3, None), ms(800));
        assert_eq!(
            backoff(1, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            backoff(1, Some(Duration::from_secs(3600))),
            Duration::from_secs(5)
        );
    }

    // --- the API -----------------------------------------------------------------------------

    #[tokio::test]
    async fn head_is_the_default_branch_commit_and_the_token_is_sent() {
        let server = gitlab().await;
        assert_eq!(server.demo().head().await.unwrap(), C2);
        let requests = server.requests();
        let targets: Vec<&str> = requests.iter().map(|r| r.target.as_str()).collect();
        assert_eq!(
            targets,
            [
                PROJECT.to_owned(),
                format!("{PROJECT}/repository/commits/release%2Fv1")
            ]
        );
        for r in &requests {
            assert_eq!(r.header("private-token").as_deref(), Some(TOKEN), "{r:?}");
            assert!(r.head.starts_with("GET "), "{}", r.head);
        }
        // Without a token, no header.
        let anonymous =
            GitLabProject::parse(&format!("{}/group/sub/demo.git", server.base), None).unwrap();
        anonymous.head().await.unwrap();
        assert_eq!(server.requests()[2].header("private-token"), None);
    }

    #[tokio::test]
    async fn list_files_follows_pages_and_skips_symlinks_and_submodules() {
        let server = gitlab().await;
        let project = server.demo();
        assert_eq!(project.list_files(C1).await.unwrap(), c1_files());
        let pages: Vec<Option<String>> =
            server.requests().iter().map(|r| r.query("page")).collect();
        assert_eq!(pages, [Some("1".into()), Some("2".into())]);
        assert_eq!(
            project.list_files(C2).await.unwrap(),
            [
                "README.md",
                "big.bin",
                "docs/my notes.md",
                "docs/한국어.md",
                "new.txt",
                "src/main.rs",
                "src/new_name.rs",
            ]
        );
        let err = project.list_files("deadbeef").await.unwrap_err();
        assert!(
            matches!(&err, GitLabError::UnknownRevision { revision, .. } if revision == "deadbeef"),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn list_files_refuses_a_full_page_without_pagination_headers() {
        let entries: Vec<serde_json::Value> = (0..100)
            .map(|i| serde_json::json!({"path": format!("f{i:03}"), "type": "blob", "mode": "100644"}))
            .collect();
        let server =
            serve(move |_, _| Reply::Json(200, vec![], serde_json::Value::Array(entries.clone())))
                .await;
        let err = server.demo().list_files(C1).await.unwrap_err();
        assert!(
            matches!(err, GitLabError::InvalidResponse { .. })
                && err.to_string().contains("X-Next-Page"),
            "{err}"
        );
        // A page number that does not advance is refused too (no endless loop).
        let server = serve(|_, _| {
            Reply::Json(
                200,
                vec![("X-Next-Page", "1".into())],
                serde_json::json!([]),
            )
        })
        .await;
        let err = server.demo().list_files(C1).await.unwrap_err();
        assert!(err.to_string().contains("does not follow page 1"), "{err}");
    }

    #[tokio::test]
    async fn changes_between_commits() {
        let server = gitlab().await;
        let project = server.demo();
        let changes = project.changes(C1, C2).await.unwrap();
        assert_eq!(
            changes.upserted,
            ["README.md", "docs/한국어.md", "new.txt", "src/new_name.rs"]
        );
        // The deletion, the rename's old path and the file that became a symlink.
        assert_eq!(
            changes.deleted,
            ["docs/was_file.md", "gone.txt", "src/old_name.rs"]
        );
        // Applying the changes to the first listing gives the second.
        let mut files: Vec<String> = project
            .list_files(C1)
            .await
            .unwrap()
            .into_iter()
            .filter(|f| !changes.deleted.contains(f) && !changes.upserted.contains(f))
            .chain(changes.upserted.iter().cloned())
            .collect();
        files.sort();
        assert_eq!(files, project.list_files(C2).await.unwrap());
        assert!(project.changes(C2, C2).await.unwrap().is_empty());
    }

    #[test]
    fn a_path_deleted_and_added_again_is_only_upserted() {
        let diffs: Vec<Diff> = serde_json::from_value(serde_json::json!([
            {"old_path": "a", "new_path": "b", "renamed_file": true},
            {"old_path": "a", "new_path": "a", "new_file": true},
            {"old_path": "c", "new_path": "c", "a_mode": "120000", "b_mode": "100644"},
            {"old_path": "d", "new_path": "d", "a_mode": "160000", "b_mode": "0", "deleted_file": true},
        ]))
        .unwrap();
        let changes = changes_from_diffs(diffs);
        assert_eq!(changes.upserted, ["a", "b", "c"]);
        assert!(changes.deleted.is_empty(), "{changes:?}");
    }

    #[tokio::test]
    async fn an_unknown_from_commit_is_unknown_revision() {
        let server = gitlab().await;
        let err = server.demo().changes("f00d", C2).await.unwrap_err();
        assert!(
            matches!(&err, GitLabError::UnknownRevision { revision, project }
                if revision == "f00d" && project.ends_with("/group/sub/demo")),
            "{err:?}"
        );
        assert!(err.to_string().contains("f00d"), "{err}");
        assert_eq!(server.requests().len(), 1, "a 404 is not retried");
    }

    #[tokio::test]
    async fn a_compare_timeout_is_an_error_not_a_partial_change_set() {
        let server = serve(|_, _| {
            Reply::Json(
                200,
                vec![],
                serde_json::json!({"diffs": [], "compare_timeout": true}),
            )
        })
        .await;
        let err = server.demo().changes(C1, C2).await.unwrap_err();
        assert!(
            matches!(err, GitLabError::InvalidResponse { .. })
                && err.to_string().contains("compare_timeout"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn read_returns_exact_bytes_with_encoded_paths() {
        let server = gitlab().await;
        let project = server.demo();
        let read = |path: &'static str| {
            let project = project.clone();
            async move { project.read(C1, path, 1 << 20).await.unwrap() }
        };
        assert_eq!(read("README.md").await, Blob::Data(b"# demo\n".to_vec()));
        assert_eq!(
            read("docs/my notes.md").await,
            Blob::Data(b"notes with a space\n".to_vec())
        );
        assert_eq!(
            read("docs/한국어.md").await,
            Blob::Data("안녕하세요\n".as_bytes().to_vec())
        );
        assert_eq!(read("big.bin").await, Blob::Data(vec![b'z'; BIG]));
        let targets: Vec<String> = server.requests().into_iter().map(|r| r.target).collect();
        assert_eq!(
            targets[1..3],
            [
                format!("{PROJECT}/repository/files/docs%2Fmy%20notes.md/raw?ref={C1}"),
                format!(
                    "{PROJECT}/repository/files/docs%2F%ED%95%9C%EA%B5%AD%EC%96%B4.md/raw?ref={C1}"
                ),
            ]
        );
        // Exactly at the limit is not too large.
        assert_eq!(
            project.read(C1, "big.bin", BIG as u64).await.unwrap(),
            Blob::Data(vec![b'z'; BIG])
        );
        assert_eq!(
            project.read(C1, "big.bin", 100).await.unwrap(),
            Blob::TooLarge { bytes: BIG as u64 }
        );
    }

    #[tokio::test]
    async fn too_large_by_content_length_does_not_read_the_body() {
        // 10 MB announced, 10 bytes sent, then nothing: reading the body would hang.
        let server = serve(|_, _| Reply::Stall {
            len: 10_000_000,
            sent: 10,
        })
        .await;
        let blob = tokio::time::timeout(
            Duration::from_secs(5),
            server.demo().read(C1, "huge.bin", 1000),
        )
        .await
        .expect("returns without reading the body")
        .unwrap();
        assert_eq!(blob, Blob::TooLarge { bytes: 10_000_000 });
    }

    #[tokio::test]
    async fn too_large_while_streaming_stops_reading_past_the_limit() {
        // No Content-Length and a body that never ends.
        let server = serve(|_, _| Reply::Endless).await;
        let blob = tokio::time::timeout(
            Duration::from_secs(10),
            server.demo().read(C1, "endless.log", 10_000),
        )
        .await
        .expect("stops reading")
        .unwrap();
        let Blob::TooLarge { bytes } = blob else {
            panic!("{blob:?}")
        };
        assert!(bytes > 10_000 && bytes <= 10_000 + 1024, "{bytes}");
        // The server stops soon after: the connection was dropped, not drained.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let streamed = server.streamed.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(server.streamed.load(Ordering::Relaxed), streamed);
    }

    #[tokio::test]
    async fn missing_project_and_file_are_not_found() {
        let server = gitlab().await;
        let err = server
            .project("group/sub/missing")
            .head()
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GitLabError::NotFound { project, what }
                if project == &format!("{}/group/sub/missing", server.base) && what == "project"),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("group/sub/missing")
                && msg.contains("check the project URL")
                && msg.contains("token"),
            "{msg}"
        );
        assert_eq!(server.requests().len(), 1, "a 404 is not retried");
        // The project's 404 is recognized on other endpoints too.
        let err = server
            .project("group/sub/missing")
            .list_files(C1)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GitLabError::NotFound { what, .. } if what == "project"),
            "{err:?}"
        );

        let err = server
            .demo()
            .read(C1, "nope/x y.rs", 100)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, GitLabError::NotFound { what, .. } if what.contains("\"nope/x y.rs\"") && what.contains(C1)),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn unauthorized_says_what_is_wrong_with_the_token() {
        let server = serve(|_, r| {
            if r.header("private-token").as_deref() == Some(TOKEN) {
                fake_gitlab(r)
            } else {
                message(401, "401 Unauthorized")
            }
        })
        .await;
        let anonymous =
            GitLabProject::parse(&format!("{}/group/sub/demo", server.base), None).unwrap();
        let err = anonymous.head().await.unwrap_err();
        assert!(
            matches!(
                err,
                GitLabError::Status {
                    status: 401,
                    attempts: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("401 Unauthorized")
                && msg.contains("no GitLab token")
                && msg.contains("read_api"),
            "{msg}"
        );
        let wrong = GitLabProject::parse(
            &format!("{}/group/sub/demo", server.base),
            Some("glpat-wrong".into()),
        )
        .unwrap();
        let msg = wrong.list_files(C1).await.unwrap_err().to_string();
        assert!(
            msg.contains("token was refused")
                && msg.contains("read_api")
                && msg.contains("read_repository"),
            "{msg}"
        );
        assert!(!msg.contains("glpat-wrong"), "{msg}");
        assert_eq!(server.requests().len(), 2, "401 is not retried");
        assert_eq!(server.demo().head().await.unwrap(), C2);
    }

    #[tokio::test]
    async fn retries_503_then_succeeds() {
        let server = serve(|n, r| {
            if n < 2 {
                message(503, "try later")
            } else {
                fake_gitlab(r)
            }
        })
        .await;
        let started = Instant::now();
        assert_eq!(server.demo().list_files(C2).await.unwrap().len(), 7);
        let requests = server.requests();
        assert_eq!(requests.len(), 4, "3 for page 1, 1 for page 2");
        assert!(
            requests[..3]
                .iter()
                .all(|r| r.query("page").as_deref() == Some("1"))
        );
        // Backoff 200 ms then 400 ms.
        assert!(
            started.elapsed() >= Duration::from_millis(600),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn honours_retry_after_on_429() {
        let server = serve(|n, r| {
            if n == 0 {
                Reply::Json(
                    429,
                    vec![("Retry-After", "1".into())],
                    serde_json::json!({"message": "429 Too Many Requests"}),
                )
            } else {
                fake_gitlab(r)
            }
        })
        .await;
        let started = Instant::now();
        assert_eq!(server.demo().head().await.unwrap(), C2);
        assert_eq!(server.requests().len(), 3);
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn gives_up_after_three_retries_naming_status_and_attempts() {
        let server = serve(|_, _| Reply::Bytes(500, b"boom".to_vec())).await;
        let err = server.demo().head().await.unwrap_err();
        assert_eq!(server.requests().len(), 4);
        assert!(
            matches!(
                err,
                GitLabError::Status {
                    status: 500,
                    attempts: 4,
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("500 Internal Server Error")
                && msg.contains("boom")
                && msg.contains(PROJECT),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn other_4xx_and_bad_json_are_not_retried() {
        let server = serve(|n, _| match n {
            0 => message(400, "400 Bad request - ref is invalid"),
            _ => Reply::Bytes(200, b"<html>sign in</html>".to_vec()),
        })
        .await;
        let project = server.demo();
        let err = project.changes(C1, C2).await.unwrap_err();
        assert!(
            matches!(
                err,
                GitLabError::Status {
                    status: 400,
                    attempts: 1,
                    ..
                }
            ) && err.to_string().contains("ref is invalid"),
            "{err:?}"
        );
        let err = project.head().await.unwrap_err();
        assert!(
            matches!(err, GitLabError::InvalidResponse { .. })
                && err.to_string().contains("sign in"),
            "{err:?}"
        );
        assert_eq!(server.requests().len(), 2);
    }

    #[tokio::test]
    async fn timeouts_are_retried_then_reported() {
        let server = serve(|_, _| Reply::Hang).await;
        let started = Instant::now();
        let err = server
            .demo()
            .timeout(Duration::from_millis(200))
            .head()
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        assert!(
            matches!(err, GitLabError::Transport { attempts: 4, .. }),
            "{err:?}"
        );
        assert_eq!(server.requests().len(), 4);
        // 4 × 200 ms of waiting plus 200 + 400 + 800 ms of backoff.
        assert!(elapsed >= Duration::from_millis(2200), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
        assert!(err.to_string().contains("timed out"), "{err}");
    }

    #[tokio::test]
    async fn connection_refused_is_retried_then_reported() {
        // Bind then drop to get a port nothing listens on.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap().port()
        };
        let project = GitLabProject::parse(&format!("http://127.0.0.1:{port}/g/p"), None).unwrap();
        let err = project.head().await.unwrap_err();
        assert!(
            matches!(err, GitLabError::Transport { attempts: 4, .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains(&port.to_string()), "{err}");
    }

    #[tokio::test]
    async fn redirects_to_another_host_are_not_followed_with_the_token() {
        let elsewhere = gitlab().await;
        // `localhost` is another host than `127.0.0.1` as far as the token is concerned.
        let target = elsewhere.base.replace("127.0.0.1", "localhost");
        let server = serve(move |_, r| {
            if r.target.starts_with("/moved") {
                fake_gitlab(&Seen {
                    target: r.target.trim_start_matches("/moved").to_owned(),
                    head: r.head.clone(),
                })
            } else if r.target.contains("tree") {
                // Same host: followed.
                Reply::Json(
                    302,
                    vec![("Location", format!("/moved{}", r.target))],
                    serde_json::json!({}),
                )
            } else {
                Reply::Json(
                    302,
                    vec![("Location", format!("{target}{}", r.target))],
                    serde_json::json!({}),
                )
            }
        })
        .await;
        let project = server.demo();
        assert_eq!(project.list_files(C1).await.unwrap(), c1_files());
        let err = project.head().await.unwrap_err();
        assert!(
            matches!(err, GitLabError::Status { status: 302, .. })
                && err.to_string().contains("not followed"),
            "{err:?}"
        );
        assert!(elsewhere.requests().is_empty());
        assert!(
            server
                .requests()
                .iter()
                .all(|r| r.header("private-token").as_deref() == Some(TOKEN))
        );
    }
}
