//! GitLab's requests: one `GET` with retries ([`RETRY`]), a cap on the body for file contents,
//! and redirects followed only within the same host.

use std::time::Duration;

use reqwest::header::LOCATION;

use super::GitLabProject;
use crate::http::{
    Failed, RetryPolicy, error_chain, is_retryable_error, is_retryable_status, read_server_message,
    retry_after,
};

/// Connect errors, timeouts, 429 and 5xx are retried 3 times (so at most 4 requests per call)
/// after 200 ms, 400 ms and 800 ms, or after the server's `Retry-After`, honoured up to 5 s.
pub(super) const RETRY: RetryPolicy = RetryPolicy {
    client: "GitLab",
    max_retries: 3,
    base_backoff: Duration::from_millis(200),
    max_wait: Duration::from_secs(5),
};

/// Redirects followed per request (within the same host).
const MAX_REDIRECTS: usize = 5;

/// A successful response's body.
pub(super) enum Body {
    /// The whole body, and the `X-Next-Page` header (`None` when absent).
    Full {
        bytes: Vec<u8>,
        next_page: Option<String>,
    },
    /// More than the limit: `Content-Length`, or the bytes received when reading stopped.
    TooLarge(u64),
}

/// Why a request failed, before it is turned into a [`super::GitLabError`].
pub(super) enum Failure {
    /// An error status, with the server's message.
    Status {
        status: u16,
        message: String,
        attempts: u32,
    },
    /// No response, or a body that could not be read.
    Transport { detail: String, attempts: u32 },
}

impl GitLabProject {
    /// `GET url` with retries; `limit` caps the body (see [`Body::TooLarge`]).
    pub(super) async fn get(&self, url: &str, limit: Option<u64>) -> Result<Body, Failure> {
        RETRY
            .run(url, |attempts| self.attempt(url, limit, attempts))
            .await
    }

    /// One request, the `attempts`-th.
    async fn attempt(
        &self,
        url: &str,
        limit: Option<u64>,
        attempts: u32,
    ) -> Result<Body, Failed<Failure>> {
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
            Failed {
                error: Failure::Transport { detail, attempts },
                retryable: is_retryable_error(&e),
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
            let retry_after = retry_after(response.headers());
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
                read_server_message(response).await
            };
            return Err(Failed {
                error: Failure::Status {
                    status: status.as_u16(),
                    message,
                    attempts,
                },
                retryable: is_retryable_status(status),
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

/// Follows redirects only to the same host: same scheme and port, or `http` to `https`.
pub(super) fn same_host_redirects() -> reqwest::redirect::Policy {
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
