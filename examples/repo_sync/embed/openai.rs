//! An OpenAI-compatible embeddings endpoint: [`HttpEmbedder`], with batching, a per-request
//! timeout and retries. Optional: the example runs without it (the lexical embedder is the
//! default).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;

use super::{DEFAULT_BATCH_SIZE, EmbedError, Embedder, Embedding, normalize, unusable};
use crate::http::{
    Failed, RetryPolicy, error_chain, is_retryable_error, is_retryable_status, read_server_message,
    retry_after, shown_url, truncate,
};

/// The default per-request timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default number of retries after the first attempt.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 3;
/// How large a response may be, per input of the request: 256 KiB, room for 8,192
/// dimensions written out as JSON decimals of up to 30 characters. A request of the default 32
/// inputs accepts 8 MiB. A larger response is refused (not retried), at once when its
/// `Content-Length` says so, else as soon as reading passes the limit: it is never read whole.
pub(crate) const RESPONSE_BYTES_PER_INPUT: u64 = 256 * 1024;
/// Retries wait 200 ms, 400 ms, 800 ms..., or the server's `Retry-After`; no wait is longer
/// than 30 s. The number of retries is each embedder's [`HttpEmbedder::max_retries`].
const RETRY: RetryPolicy = RetryPolicy {
    client: "embeddings",
    max_retries: DEFAULT_MAX_RETRIES,
    base_backoff: Duration::from_millis(200),
    max_wait: Duration::from_secs(30),
};

/// An OpenAI-compatible embeddings endpoint: `POST {base_url}/v1/embeddings` with
/// `{"model": ..., "input": [...]}`, reading `data[i].embedding` placed by `data[i].index`.
///
/// - Inputs are sent in batches of [`batch_size`](Self::batch_size) and the results
///   concatenated in input order.
/// - Each request has a [`timeout`](Self::timeout); connect errors, timeouts, 429 and 5xx are
///   retried up to [`max_retries`](Self::max_retries) times after 200 ms, 400 ms, 800 ms...
///   (or the `Retry-After` seconds when the server sends them), each wait capped at 30 s. Other
///   4xx statuses and malformed responses are not retried.
/// - A response larger than [`RESPONSE_BYTES_PER_INPUT`] per input is refused without being
///   read whole.
/// - A vector with a component that is not a finite number (`1e39` does not fit an `f32`) is
///   refused, naming its input; the others are L2-normalized on receipt (most servers already
///   do), so [`cosine`](super::cosine) applies.
/// - The dimension is the configured one ([`dimension`](Self::dimension)) or else learned from
///   the first response; a vector of another length is an error.
/// - Proxies from the environment (`HTTP_PROXY`...) are honoured, as reqwest does by default.
///
/// Only `http://` URLs are accepted: this build of reqwest has no TLS. The `Debug` output
/// hides the API key.
#[derive(Clone)]
pub(crate) struct HttpEmbedder {
    client: reqwest::Client,
    url: String,
    /// `url` as messages and logs show it ([`shown_url`]: a password in it masked).
    shown_url: String,
    model: String,
    name: String,
    api_key: Option<String>,
    batch_size: usize,
    timeout: Duration,
    max_retries: u32,
    expected_dimension: Option<usize>,
    /// Learned from the first response when no dimension is configured; 0 = not yet known.
    /// Shared between clones, which talk to the same model.
    learned_dimension: Arc<AtomicUsize>,
}

impl fmt::Debug for HttpEmbedder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEmbedder")
            .field("url", &self.shown_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("batch_size", &self.batch_size)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("dimension", &self.dimension_now())
            .finish()
    }
}

impl HttpEmbedder {
    /// An embedder for `model` at `base_url` (e.g. `http://127.0.0.1:8080`). `/v1/embeddings` is
    /// appended; a base URL that already ends in `/v1` gets only `/embeddings`. Refuses anything
    /// but `http://` (naming why for `https://`), URLs without a host, and an empty model.
    pub(crate) fn new(base_url: &str, model: &str) -> Result<Self, EmbedError> {
        let invalid = |reason: String| EmbedError::InvalidConfig { reason };
        let trimmed = base_url.trim();
        // Messages show the URL masked: a password in it never reaches a terminal or a log.
        let shown = shown_url(trimmed);
        let parsed = reqwest::Url::parse(trimmed)
            .map_err(|e| invalid(format!("embeddings URL {shown:?} is not a valid URL: {e}")))?;
        match parsed.scheme() {
            "http" => {}
            "https" => {
                return Err(invalid(format!(
                    "embeddings URL {shown:?} uses https, but this build has no TLS support \
                     (reqwest is built without a TLS feature); use an http:// URL, e.g. a local \
                     server or a TLS-terminating proxy"
                )));
            }
            other => {
                return Err(invalid(format!(
                    "embeddings URL {shown:?} has scheme {other:?}; only http:// is supported"
                )));
            }
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(invalid(format!("embeddings URL {shown:?} has no host")));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid(format!(
                "embeddings URL {shown:?} must not have a query or fragment"
            )));
        }
        let model = model.trim();
        if model.is_empty() {
            return Err(invalid("the embedding model name is empty".into()));
        }
        let base = parsed.as_str().trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/embeddings")
        } else {
            format!("{base}/v1/embeddings")
        };
        let client = reqwest::Client::builder()
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {}", error_chain(&e))))?;
        Ok(HttpEmbedder {
            client,
            shown_url: shown_url(&url),
            url,
            model: model.to_owned(),
            name: format!("http:{model}"),
            api_key: None,
            batch_size: DEFAULT_BATCH_SIZE,
            timeout: DEFAULT_TIMEOUT,
            max_retries: DEFAULT_MAX_RETRIES,
            expected_dimension: None,
            learned_dimension: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Sends `Authorization: Bearer <key>` when `Some` (an empty key counts as none).
    pub(crate) fn api_key(mut self, key: Option<String>) -> Self {
        self.api_key = key.filter(|k| !k.is_empty());
        self
    }

    /// Texts per request (default 32; 0 is taken as 1).
    pub(crate) fn batch_size(mut self, n: usize) -> Self {
        self.batch_size = n.max(1);
        self
    }

    /// The timeout of each request, response body included (default 30 s).
    pub(crate) fn timeout(mut self, d: Duration) -> Self {
        self.timeout = d;
        self
    }

    /// Retries after the first attempt (default 3, so at most 4 requests per batch).
    pub(crate) fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = n;
        self
    }

    /// The expected vector length; a response with another length is an error.
    pub(crate) fn dimension(mut self, d: usize) -> Self {
        self.expected_dimension = Some(d);
        self
    }

    /// The endpoint requests go to (`.../v1/embeddings`).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    fn dimension_now(&self) -> usize {
        self.expected_dimension
            .unwrap_or_else(|| self.learned_dimension.load(Ordering::Relaxed))
    }

    /// One batch, with retries; `offset` is the position of its first text among those given
    /// to [`Embedder::embed`].
    async fn embed_batch(
        &self,
        offset: usize,
        batch: &[String],
    ) -> Result<Vec<Embedding>, EmbedError> {
        let body = serde_json::json!({ "model": self.model, "input": batch });
        let retry = RetryPolicy {
            max_retries: self.max_retries,
            ..RETRY
        };
        let bytes = retry
            .run(&self.shown_url, |attempts| {
                self.attempt(&body, batch.len(), attempts)
            })
            .await?;
        self.parse(offset, batch, &bytes)
    }

    /// One request of `inputs` texts, the `attempts`-th: the body of a successful response, at
    /// most [`RESPONSE_BYTES_PER_INPUT`] per input.
    async fn attempt(
        &self,
        body: &serde_json::Value,
        inputs: usize,
        attempts: u32,
    ) -> Result<Vec<u8>, Failed<EmbedError>> {
        let mut request = self.client.post(&self.url).timeout(self.timeout).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let transport = |e: reqwest::Error| {
            let retryable = is_retryable_error(&e);
            // The message names the URL itself, masked; reqwest's would repeat it unmasked.
            let e = e.without_url();
            let error = if e.is_timeout() {
                EmbedError::Timeout {
                    url: self.shown_url.clone(),
                    attempts,
                    timeout: self.timeout,
                }
            } else {
                EmbedError::Transport {
                    url: self.shown_url.clone(),
                    attempts,
                    detail: error_chain(&e),
                }
            };
            Failed {
                error,
                retryable,
                retry_after: None,
            }
        };
        let mut response = request.send().await.map_err(transport)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = retry_after(response.headers());
            return Err(Failed {
                error: EmbedError::Status {
                    url: self.shown_url.clone(),
                    status: status.as_u16(),
                    attempts,
                    message: read_server_message(response).await,
                },
                retryable: is_retryable_status(status),
                retry_after,
            });
        }
        let limit = RESPONSE_BYTES_PER_INPUT.saturating_mul(inputs.max(1) as u64);
        let too_large = |seen: String| Failed {
            error: EmbedError::TooLarge {
                url: self.shown_url.clone(),
                limit: describe_bytes(limit),
                inputs,
                per_input: describe_bytes(RESPONSE_BYTES_PER_INPUT),
                seen,
            },
            retryable: false,
            retry_after: None,
        };
        if let Some(declared) = response.content_length()
            && declared > limit
        {
            // Dropping the response closes the connection without reading the body.
            return Err(too_large(format!("its Content-Length is {declared} bytes")));
        }
        let capacity = response.content_length().unwrap_or(0).min(limit);
        let mut bytes = Vec::with_capacity(capacity as usize);
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            let total = bytes.len() as u64 + chunk.len() as u64;
            if total > limit {
                return Err(too_large(format!("reading stopped at {total} bytes")));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(bytes)
    }

    /// Checks and orders a successful response's vectors for `batch` (whose first text is
    /// input `offset` of the call), and normalizes them.
    fn parse(
        &self,
        offset: usize,
        batch: &[String],
        bytes: &[u8],
    ) -> Result<Vec<Embedding>, EmbedError> {
        let expected = batch.len();
        #[derive(Deserialize)]
        struct Response {
            data: Vec<Item>,
        }
        #[derive(Deserialize)]
        struct Item {
            #[serde(default)]
            index: Option<usize>,
            embedding: Vec<f32>,
        }
        let invalid = |reason: String| EmbedError::InvalidResponse {
            url: self.shown_url.clone(),
            reason,
        };
        let response: Response = serde_json::from_slice(bytes).map_err(|e| {
            invalid(format!(
                "not an embeddings JSON object ({e}): {}",
                truncate(&String::from_utf8_lossy(bytes))
            ))
        })?;
        if response.data.len() != expected {
            return Err(invalid(format!(
                "{} embeddings for {expected} inputs",
                response.data.len()
            )));
        }
        let mut slots: Vec<Option<Embedding>> = vec![None; expected];
        for (position, item) in response.data.into_iter().enumerate() {
            let index = item.index.unwrap_or(position);
            let slot = slots.get_mut(index).ok_or_else(|| {
                invalid(format!("index {index} out of range for {expected} inputs"))
            })?;
            if slot.is_some() {
                return Err(invalid(format!("index {index} appears twice")));
            }
            *slot = Some(item.embedding);
        }
        let mut out = Vec::with_capacity(expected);
        for (i, mut embedding) in slots.into_iter().flatten().enumerate() {
            self.check_dimension(embedding.len())?;
            if let Some(reason) = unusable(&embedding) {
                return Err(EmbedError::InvalidVector {
                    url: self.shown_url.clone(),
                    input: offset + i,
                    excerpt: excerpt(&batch[i]),
                    reason,
                });
            }
            normalize(&mut embedding);
            out.push(embedding);
        }
        Ok(out)
    }

    fn check_dimension(&self, got: usize) -> Result<(), EmbedError> {
        let mismatch = |expected| EmbedError::DimensionMismatch {
            url: self.shown_url.clone(),
            expected,
            got,
        };
        if let Some(expected) = self.expected_dimension {
            return if got == expected {
                Ok(())
            } else {
                Err(mismatch(expected))
            };
        }
        if got == 0 {
            return Err(EmbedError::InvalidResponse {
                url: self.shown_url.clone(),
                reason: "an empty embedding".into(),
            });
        }
        match self
            .learned_dimension
            .compare_exchange(0, got, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Ok(()),
            Err(known) if known == got => Ok(()),
            Err(known) => Err(mismatch(known)),
        }
    }
}

impl Embedder for HttpEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimension(&self) -> usize {
        self.dimension_now()
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Embedding>, EmbedError>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(texts.len());
            for batch in texts.chunks(self.batch_size) {
                out.extend(self.embed_batch(out.len(), batch).await?);
            }
            Ok(out)
        })
    }
}

/// `n` bytes as `8 MiB`, `256 KiB` or `1000 bytes`.
fn describe_bytes(n: u64) -> String {
    const KIB: u64 = 1024;
    match n {
        n if n >= KIB * KIB && n % (KIB * KIB) == 0 => format!("{} MiB", n / (KIB * KIB)),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n => format!("{n} bytes"),
    }
}

/// The beginning of an input, for a message: its first 40 characters.
fn excerpt(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests;
