//! What the two HTTP clients (the HTTP embedder in `embed/`, the GitLab source in `gitlab/`)
//! share, so that both fail, retry and explain themselves the same way:
//!
//! - how an error is described: [`error_chain`] for a transport error and its causes,
//!   [`describe_status`] for a status, [`server_message`] for what the server said, cut by
//!   [`truncate`];
//! - what is retried ([`is_retryable_error`], [`is_retryable_status`]) and how:
//!   [`RetryPolicy::run`], one loop with exponential backoff that honours `Retry-After`;
//! - URL encoding ([`encode`], [`percent_decode`]);
//! - in tests, a small local HTTP server both clients are tested against (`test_server`, built
//!   for tests only).
//!
//! Only an optional source or embedder needs this module: the lexical embedder and local git
//! repositories do not.

use std::fmt::Write as _;
use std::future::Future;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

#[cfg(test)]
pub(crate) mod test_server;

/// Error messages from a server are cut to this many characters.
pub(crate) const MAX_MESSAGE_CHARS: usize = 500;

/// How much of an error response is read for its message.
pub(crate) const MAX_ERROR_BODY: u64 = 64 * 1024;

/// An error and its causes, `outer: inner: innermost` (reqwest's own message omits the cause).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

/// `url` for a message: as it was given, or through [`shedlock::secret::mask_url`] when that
/// masks something in it (a password, a secret-named query parameter), so no secret is shown.
pub(crate) fn shown_url(url: &str) -> String {
    let masked = shedlock::secret::mask_url(url);
    if masked.contains(shedlock::secret::MASK) {
        masked
    } else {
        url.to_owned()
    }
}

/// `text`, cut to [`MAX_MESSAGE_CHARS`] characters.
pub(crate) fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// Statuses and server messages

/// `HTTP 404 Not Found`; `HTTP 599` for a code without a standard reason.
pub(crate) fn describe_status(status: u16) -> String {
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    match reason {
        Some(reason) => format!("HTTP {status} {reason}"),
        None => format!("HTTP {status}"),
    }
}

/// The message of an error response. From a JSON object: its `message`, `error` (a string, or
/// an object's `message`), `error_description` and `detail`, joined by `: ` (GitLab sends
/// `message`, or `error` with `error_description` for OAuth; OpenAI-compatible servers send
/// `error.message`, `error` or `detail`); a value that is not a string, such as GitLab's field
/// errors, is given as JSON. Otherwise the body itself. Cut by [`truncate`]; `(empty body)`
/// for an empty one.
pub(crate) fn server_message(body: &[u8]) -> String {
    if let Ok(serde_json::Value::Object(json)) = serde_json::from_slice(body) {
        let mut parts = Vec::new();
        for key in ["message", "error", "error_description", "detail"] {
            let value = match json.get(key) {
                None | Some(serde_json::Value::Null) => continue,
                Some(serde_json::Value::Object(o)) if key == "error" => match o.get("message") {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    _ => serde_json::Value::Object(o.clone()).to_string(),
                },
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            };
            if !parts.contains(&value) {
                parts.push(value);
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

/// The [`server_message`] of an error response, from at most [`MAX_ERROR_BODY`] bytes of its
/// body. The message is a courtesy: a body that cannot be read ends it where reading failed.
pub(crate) async fn read_server_message(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        body.extend_from_slice(&chunk);
        if body.len() as u64 >= MAX_ERROR_BODY {
            break;
        }
    }
    server_message(&body)
}

// ---------------------------------------------------------------------------------------------
// Retries

/// Whether a failed request is worth trying again: it timed out, could not connect, or failed
/// while sending the request or reading the body.
pub(crate) fn is_retryable_error(e: &reqwest::Error) -> bool {
    e.is_timeout() || e.is_connect() || e.is_request() || e.is_body()
}

/// Whether an error status is worth trying again: 429 Too Many Requests and every 5xx.
pub(crate) fn is_retryable_status(status: StatusCode) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// A `Retry-After` header given in seconds (an HTTP date is ignored).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs)
}

/// How a client retries: how often, and how long it waits in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Who is retrying, for the log: `GitLab`, `embeddings`.
    pub(crate) client: &'static str,
    /// Retries after the first attempt (so at most `max_retries + 1` attempts).
    pub(crate) max_retries: u32,
    /// The wait before the first retry; it doubles on every further retry.
    pub(crate) base_backoff: Duration,
    /// No wait, computed or from `Retry-After`, is longer than this.
    pub(crate) max_wait: Duration,
}

/// One failed attempt: the error to return if it is the last, whether another attempt may
/// help, and how long the server asked to wait.
#[derive(Debug)]
pub(crate) struct Failed<E> {
    /// The error, naming the attempt it came from.
    pub(crate) error: E,
    /// Whether it is worth another attempt.
    pub(crate) retryable: bool,
    /// The server's `Retry-After`, when it sent one.
    pub(crate) retry_after: Option<Duration>,
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1-based): the server's `Retry-After`, else
    /// `base_backoff` doubled per earlier retry; either capped at `max_wait`.
    pub(crate) fn backoff(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        retry_after
            .unwrap_or_else(|| {
                self.base_backoff
                    .saturating_mul(1 << retry.saturating_sub(1).min(16))
            })
            .min(self.max_wait)
    }

    /// Calls `attempt` with the attempt number (1, 2, ...) until it succeeds, fails for good,
    /// or has failed `max_retries + 1` times; then returns the last error. `url` is for the log.
    pub(crate) async fn run<T, E, F, Fut>(&self, url: &str, mut attempt: F) -> Result<T, E>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, Failed<E>>>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let failed = match attempt(attempts).await {
                Ok(value) => return Ok(value),
                Err(failed) => failed,
            };
            if !failed.retryable || attempts > self.max_retries {
                return Err(failed.error);
            }
            let wait = self.backoff(attempts, failed.retry_after);
            tracing::debug!(
                url,
                attempts,
                wait_ms = wait.as_millis() as u64,
                "{} request failed, retrying",
                self.client
            );
            tokio::time::sleep(wait).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// URLs

/// Percent-encodes everything but RFC 3986's unreserved characters, so `/` becomes `%2F` and a
/// whole path fits in one URL path segment or query value.
pub(crate) fn encode(s: &str) -> String {
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
pub(crate) fn percent_decode(s: &str) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::time::Instant;

    fn retryable<E>(error: E, retry_after: Option<Duration>) -> Failed<E> {
        Failed {
            error,
            retryable: true,
            retry_after,
        }
    }

    const FAST: RetryPolicy = RetryPolicy {
        client: "test",
        max_retries: 2,
        base_backoff: Duration::from_millis(20),
        max_wait: Duration::from_millis(50),
    };

    #[test]
    fn statuses_are_described_with_their_reason() {
        assert_eq!(describe_status(404), "HTTP 404 Not Found");
        assert_eq!(describe_status(500), "HTTP 500 Internal Server Error");
        assert_eq!(describe_status(599), "HTTP 599");
    }

    #[test]
    fn server_messages_of_both_apis() {
        let message = |body: &str| server_message(body.as_bytes());
        // OpenAI-compatible servers.
        assert_eq!(
            message(r#"{"error": {"message": "input is too long", "type": "invalid"}}"#),
            "input is too long"
        );
        assert_eq!(
            message(r#"{"error": "model not found"}"#),
            "model not found"
        );
        assert_eq!(message(r#"{"detail": "Not Found"}"#), "Not Found");
        assert_eq!(message(r#"{"error": {"code": 5}}"#), r#"{"code":5}"#);
        // GitLab: a message, field errors, OAuth errors.
        assert_eq!(
            message(r#"{"message": "404 Project Not Found"}"#),
            "404 Project Not Found"
        );
        assert_eq!(
            message(r#"{"message": {"name": ["has already been taken"]}}"#),
            r#"{"name":["has already been taken"]}"#
        );
        assert_eq!(
            message(r#"{"error": "invalid_token", "error_description": "Token was revoked"}"#),
            "invalid_token: Token was revoked"
        );
        assert_eq!(message(r#"{"message": "same", "error": "same"}"#), "same");
        // Anything else: the body, trimmed and cut.
        assert_eq!(message("  <html>sign in</html>\n"), "<html>sign in</html>");
        assert_eq!(message(r#"{"message": null}"#), r#"{"message": null}"#);
        assert_eq!(message(r#""just a string""#), r#""just a string""#);
        assert_eq!(message(" \n"), "(empty body)");
        let long = message(&"x".repeat(MAX_MESSAGE_CHARS + 10));
        assert_eq!(long.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn what_is_retried() {
        assert!(is_retryable_status(StatusCode::TOO_MANY_REQUESTS));
        assert!(is_retryable_status(StatusCode::SERVICE_UNAVAILABLE));
        assert!(is_retryable_status(StatusCode::from_u16(599).unwrap()));
        for status in [400, 401, 403, 404, 302] {
            assert!(!is_retryable_status(StatusCode::from_u16(status).unwrap()));
        }
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(RETRY_AFTER, " 7 ".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn backoff_doubles_and_every_wait_is_capped() {
        let ms = Duration::from_millis;
        let policy = RetryPolicy {
            client: "test",
            max_retries: 100,
            base_backoff: ms(100),
            max_wait: ms(1000),
        };
        let waits: Vec<Duration> = (1..=6).map(|n| policy.backoff(n, None)).collect();
        assert_eq!(
            waits,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        // No overflow however many retries.
        assert_eq!(policy.backoff(100, None), ms(1000));
        // The server's Retry-After replaces the computed wait, capped alike.
        assert_eq!(policy.backoff(4, Some(ms(0))), ms(0));
        assert_eq!(policy.backoff(1, Some(ms(700))), ms(700));
        assert_eq!(policy.backoff(1, Some(Duration::from_secs(3600))), ms(1000));
    }

    #[tokio::test]
    async fn run_retries_until_success_or_the_last_attempt() {
        // Succeeds on the third attempt, after waiting 20 ms then 40 ms.
        let seen = Cell::new(0);
        let started = Instant::now();
        let out: Result<u32, String> = FAST
            .run("http://test", |n| {
                seen.set(n);
                async move {
                    if n < 3 {
                        Err(retryable(format!("attempt {n}"), None))
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(out, Ok(3));
        assert!(started.elapsed() >= Duration::from_millis(60));

        // Gives up after 1 + max_retries attempts with the last error; Retry-After is capped.
        let started = Instant::now();
        let out: Result<(), String> = FAST
            .run("http://test", |n| async move {
                Err(retryable(
                    format!("attempt {n}"),
                    Some(Duration::from_secs(3600)),
                ))
            })
            .await;
        assert_eq!(out, Err("attempt 3".into()));
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(100) && elapsed < Duration::from_secs(5),
            "{elapsed:?}"
        );

        // A fatal failure ends at once.
        let out: Result<(), String> = FAST
            .run("http://test", |n| async move {
                Err(Failed {
                    error: format!("attempt {n}"),
                    retryable: false,
                    retry_after: None,
                })
            })
            .await;
        assert_eq!(out, Err("attempt 1".into()));
    }

    #[test]
    fn urls_are_shown_as_given_unless_they_hold_a_secret() {
        assert_eq!(
            shown_url("https://gitlab.example.com"),
            "https://gitlab.example.com"
        );
        assert_eq!(shown_url("not a url"), "not a url");
        assert_eq!(shown_url("http://u:pw@h:80/x"), "http://u:***@h/x");
        assert_eq!(shown_url("http://h/?api_key=k1"), "http://h/?api_key=***");
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
    fn error_chain_names_each_cause_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "error sending request",
            Some(Box::new(E(
                "connection refused",
                Some(Box::new(E("refused", None))),
            ))),
        );
        assert_eq!(error_chain(&e), "error sending request: connection refused");
    }
}
