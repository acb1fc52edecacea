//! Embeddings: the [`Embedder`] trait and two implementations.
//!
//! - [`LexicalHashEmbedder`]: deterministic lexical feature hashing, no network and no model. It
//!   is *not* a neural embedding: it captures shared words and identifiers, not meaning. It keeps
//!   the example and its tests self-contained.
//! - [`HttpEmbedder`]: any OpenAI-compatible `POST /v1/embeddings` endpoint (OpenAI, vLLM,
//!   llama.cpp's server, Ollama, text-embeddings-inference...), plain `http://` only in this
//!   build, with batching, a per-request timeout and retries with exponential backoff.
//!
//! Both return L2-normalized vectors, so [`cosine`] is a dot product. [`to_bytes`] and
//! [`from_bytes`] store a vector as little-endian `f32`s in a BLOB/bytea column.

// Some items (builder options, accessors) are for callers that may not use them yet.
#![allow(dead_code)]

use crate::http::{error_chain, truncate};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::Deserialize;

/// One embedding vector.
pub(crate) type Embedding = Vec<f32>;

/// Why embedding failed. Every message names the URL (for the HTTP embedder) and, for request
/// failures, how many attempts were made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EmbedError {
    /// The embedder's configuration is unusable (a bad URL, an empty model name).
    #[error("invalid embedder config: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// Every attempt timed out (the last error was a timeout).
    #[error("POST {url} timed out (timeout {timeout:?} per request) after {attempts} attempt(s)")]
    Timeout {
        /// The endpoint.
        url: String,
        /// Attempts made (1 + retries).
        attempts: u32,
        /// The per-request timeout.
        timeout: Duration,
    },
    /// The request could not be sent or its response not read (connection refused, reset...).
    #[error("POST {url} failed after {attempts} attempt(s): {detail}")]
    Transport {
        /// The endpoint.
        url: String,
        /// Attempts made (1 + retries, or fewer when the error is not retried).
        attempts: u32,
        /// The error and its causes.
        detail: String,
    },
    /// The server answered with an error status (after retries for 429 and 5xx).
    #[error(
        "POST {url} answered HTTP {status} {reason} after {attempts} attempt(s): {message}",
        reason = status_reason(*status)
    )]
    Status {
        /// The endpoint.
        url: String,
        /// The HTTP status code.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The server's error message (from a JSON `error.message` when present, else the body).
        message: String,
    },
    /// A successful status, but the body is not a usable embeddings response.
    #[error("POST {url} returned an unusable embeddings response: {reason}")]
    InvalidResponse {
        /// The endpoint.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The vectors do not have the expected dimension.
    #[error("POST {url} returned embeddings of dimension {got}, expected {expected}")]
    DimensionMismatch {
        /// The endpoint.
        url: String,
        /// The dimension configured, or learned from an earlier response.
        expected: usize,
        /// The dimension received.
        got: usize,
    },
}

/// "Bad Request" for 400, "" for an unknown code.
fn status_reason(status: u16) -> &'static str {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

/// Something that turns texts into vectors.
pub(crate) trait Embedder: Send + Sync + fmt::Debug {
    /// A stable name for what produced the vectors, stored beside them so vectors from
    /// different embedders are never compared: `lexical-hash-384`, `http:<model>`.
    fn name(&self) -> &str;
    /// The length of every vector. For an [`HttpEmbedder`] without a configured dimension this
    /// is 0 until the first response has been received.
    fn dimension(&self) -> usize;
    /// One embedding per text, in the order of `texts`.
    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Embedding>, EmbedError>>;
}

/// Cosine similarity of two L2-normalized vectors: their dot product (in `-1.0..=1.0`).
/// Vectors of different lengths (from different embedders) have similarity 0.
pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Encodes an embedding as little-endian `f32` bytes (4 per component).
pub(crate) fn to_bytes(e: &[f32]) -> Vec<u8> {
    e.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes [`to_bytes`]'s output. Trailing bytes that do not make a whole `f32` are ignored.
pub(crate) fn from_bytes(b: &[u8]) -> Embedding {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Scales `v` to unit length in place; a zero vector stays zero.
fn normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for x in v {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Lexical feature hashing

/// The default dimension of [`LexicalHashEmbedder`].
pub(crate) const DEFAULT_LEXICAL_DIMENSION: usize = 384;

const UNIGRAM_WEIGHT: f64 = 1.0;
const COMPOUND_WEIGHT: f64 = 0.5;
const BIGRAM_WEIGHT: f64 = 0.5;

/// Deterministic lexical feature hashing — **not a neural model**: texts are similar when they
/// share words and identifiers, not when they mean the same thing. Good enough to find the file
/// that mentions `fencing_token`, useless for "where do we prevent stale writers?".
///
/// Features of a text:
/// - identifiers are maximal runs of alphanumeric characters and `_`; each is split into parts
///   at `_` and at camelCase boundaries (`fencingToken` → `fencing`, `token`;
///   `HTTPServer` → `http`, `server`), lower-cased; every part is a unigram (weight 1);
/// - an identifier of several parts is also a feature as a whole, without underscores
///   (`fencing_token` and `fencingToken` both give `fencingtoken`, weight 0.5);
/// - consecutive parts form bigrams (weight 0.5).
///
/// Each distinct feature adds `±weight × √count` to one of `dimension` buckets, bucket and sign
/// taken from a fixed 64-bit hash (FNV-1a with a SplitMix64 finalizer), the same on every run
/// and platform. Features are summed in sorted order in `f64` and only IEEE-exact operations
/// (`+ × ÷ √`) are used, so the vector is identical bit for bit everywhere. The result is
/// L2-normalized; a text without features gives the zero vector.
#[derive(Debug, Clone)]
pub(crate) struct LexicalHashEmbedder {
    dimension: usize,
    name: String,
}

impl Default for LexicalHashEmbedder {
    fn default() -> Self {
        LexicalHashEmbedder::new(DEFAULT_LEXICAL_DIMENSION)
    }
}

impl LexicalHashEmbedder {
    /// An embedder producing vectors of `dimension` components (at least 1; 0 is taken as 1).
    pub(crate) fn new(dimension: usize) -> Self {
        let dimension = dimension.max(1);
        LexicalHashEmbedder {
            dimension,
            name: format!("lexical-hash-{dimension}"),
        }
    }

    /// The vector of one text (synchronous; [`Embedder::embed`] maps this over its input).
    pub(crate) fn embed_one(&self, text: &str) -> Embedding {
        let mut features: BTreeMap<(u8, String), u32> = BTreeMap::new();
        let mut previous: Option<String> = None;
        for identifier in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            let parts = identifier_parts(identifier);
            if parts.len() > 1 {
                *features.entry((b'c', parts.concat())).or_default() += 1;
            }
            for part in parts {
                if let Some(prev) = previous.take() {
                    *features
                        .entry((b'b', format!("{prev} {part}")))
                        .or_default() += 1;
                }
                *features.entry((b'u', part.clone())).or_default() += 1;
                previous = Some(part);
            }
        }
        let mut sums = vec![0f64; self.dimension];
        for ((kind, feature), count) in &features {
            let weight = match kind {
                b'u' => UNIGRAM_WEIGHT,
                b'c' => COMPOUND_WEIGHT,
                _ => BIGRAM_WEIGHT,
            };
            let h = feature_hash(*kind, feature);
            let bucket = (h % self.dimension as u64) as usize;
            let sign = if h >> 63 == 1 { -1.0 } else { 1.0 };
            sums[bucket] += sign * weight * f64::from(*count).sqrt();
        }
        let norm = sums.iter().map(|x| x * x).sum::<f64>().sqrt();
        if norm == 0.0 {
            return vec![0.0; self.dimension];
        }
        sums.iter().map(|x| (x / norm) as f32).collect()
    }
}

impl Embedder for LexicalHashEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimension(&self) -> usize {
        self.dimension
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Embedding>, EmbedError>> {
        Box::pin(async move { Ok(texts.iter().map(|t| self.embed_one(t)).collect()) })
    }
}

/// Splits an identifier at `_` and camelCase boundaries, lower-casing the parts.
fn identifier_parts(identifier: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for word in identifier.split('_').filter(|w| !w.is_empty()) {
        let chars: Vec<char> = word.chars().collect();
        let mut from = 0;
        for i in 1..chars.len() {
            let (prev, cur) = (chars[i - 1], chars[i]);
            let next_is_lower = chars.get(i + 1).is_some_and(|c| c.is_lowercase());
            // fooBar | foo1Bar: a capital after a lower-case letter or digit starts a part;
            // HTTPServer: the last capital of a run starts a part when lower-case follows.
            let boundary = cur.is_uppercase()
                && (prev.is_lowercase()
                    || prev.is_numeric()
                    || (prev.is_uppercase() && next_is_lower));
            if boundary {
                parts.push(chars[from..i].iter().collect::<String>().to_lowercase());
                from = i;
            }
        }
        parts.push(chars[from..].iter().collect::<String>().to_lowercase());
    }
    parts
}

/// FNV-1a over the kind byte and the feature's UTF-8 bytes, then SplitMix64's finalizer so
/// that the low bits (bucket) and the high bit (sign) are well mixed.
fn feature_hash(kind: u8, feature: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in std::iter::once(&kind).chain(feature.as_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

// ---------------------------------------------------------------------------------------------
// OpenAI-compatible HTTP

/// The default number of texts per request.
pub(crate) const DEFAULT_BATCH_SIZE: usize = 32;
/// The default per-request timeout.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default number of retries after the first attempt.
pub(crate) const DEFAULT_MAX_RETRIES: u32 = 3;
/// The first backoff; it doubles on every retry (200 ms, 400 ms, 800 ms...).
const BASE_BACKOFF: Duration = Duration::from_millis(200);
/// No backoff, computed or from `Retry-After`, is longer than this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// An OpenAI-compatible embeddings endpoint: `POST {base_url}/v1/embeddings` with
/// `{"model": ..., "input": [...]}`, reading `data[i].embedding` placed by `data[i].index`.
///
/// - Inputs are sent in batches of [`batch_size`](Self::batch_size) and the results
///   concatenated in input order.
/// - Each request has a [`timeout`](Self::timeout); connect errors, timeouts, 429 and 5xx are
///   retried up to [`max_retries`](Self::max_retries) times after 200 ms, 400 ms, 800 ms...
///   (or the `Retry-After` seconds when the server sends them), each wait capped at 30 s. Other
///   4xx statuses and malformed responses are not retried.
/// - Vectors are L2-normalized on receipt (most servers already do), so [`cosine`] applies.
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
            .field("url", &self.url)
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
        let parsed = reqwest::Url::parse(trimmed).map_err(|e| {
            invalid(format!(
                "embeddings URL {trimmed:?} is not a valid URL: {e}"
            ))
        })?;
        match parsed.scheme() {
            "http" => {}
            "https" => {
                return Err(invalid(format!(
                    "embeddings URL {trimmed:?} uses https, but this build has no TLS support \
                     (reqwest is built without a TLS feature); use an http:// URL, e.g. a local \
                     server or a TLS-terminating proxy"
                )));
            }
            other => {
                return Err(invalid(format!(
                    "embeddings URL {trimmed:?} has scheme {other:?}; only http:// is supported"
                )));
            }
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(invalid(format!("embeddings URL {trimmed:?} has no host")));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(invalid(format!(
                "embeddings URL {trimmed:?} must not have a query or fragment"
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

    /// One batch, with retries.
    async fn embed_batch(&self, batch: &[String]) -> Result<Vec<Embedding>, EmbedError> {
        let body = serde_json::json!({ "model": self.model, "input": batch });
        let mut attempts = 0;
        loop {
            attempts += 1;
            let (error, retry_after) = match self.attempt(&body, attempts).await {
                Attempt::Done(bytes) => return self.parse(batch.len(), &bytes),
                Attempt::Fatal(e) => return Err(e),
                Attempt::Retryable(e, retry_after) => (e, retry_after),
            };
            if attempts > self.max_retries {
                return Err(error);
            }
            let backoff = BASE_BACKOFF.saturating_mul(1 << (attempts - 1).min(16));
            tokio::time::sleep(retry_after.unwrap_or(backoff).min(MAX_BACKOFF)).await;
        }
    }

    async fn attempt(&self, body: &serde_json::Value, attempts: u32) -> Attempt {
        let mut request = self.client.post(&self.url).timeout(self.timeout).json(body);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let transport = |e: reqwest::Error| {
            let retryable = e.is_timeout() || e.is_connect() || e.is_request() || e.is_body();
            let error = if e.is_timeout() {
                EmbedError::Timeout {
                    url: self.url.clone(),
                    attempts,
                    timeout: self.timeout,
                }
            } else {
                EmbedError::Transport {
                    url: self.url.clone(),
                    attempts,
                    detail: error_chain(&e),
                }
            };
            if retryable {
                Attempt::Retryable(error, None)
            } else {
                Attempt::Fatal(error)
            }
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return transport(e),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let bytes = match response.bytes().await {
            Ok(b) => b,
            Err(e) => return transport(e),
        };
        if status.is_success() {
            return Attempt::Done(bytes.to_vec());
        }
        let error = EmbedError::Status {
            url: self.url.clone(),
            status: status.as_u16(),
            attempts,
            message: server_message(&bytes),
        };
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
            Attempt::Retryable(error, retry_after)
        } else {
            Attempt::Fatal(error)
        }
    }

    /// Checks and orders a successful response's vectors, and normalizes them.
    fn parse(&self, expected: usize, bytes: &[u8]) -> Result<Vec<Embedding>, EmbedError> {
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
            url: self.url.clone(),
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
        for mut embedding in slots.into_iter().flatten() {
            self.check_dimension(embedding.len())?;
            normalize(&mut embedding);
            out.push(embedding);
        }
        Ok(out)
    }

    fn check_dimension(&self, got: usize) -> Result<(), EmbedError> {
        let mismatch = |expected| EmbedError::DimensionMismatch {
            url: self.url.clone(),
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
                url: self.url.clone(),
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
                out.extend(self.embed_batch(batch).await?);
            }
            Ok(out)
        })
    }
}

/// The outcome of one request.
enum Attempt {
    Done(Vec<u8>),
    Retryable(EmbedError, Option<Duration>),
    Fatal(EmbedError),
}

/// The message of an error response: `error.message`, `error` or `message`/`detail` from a JSON
/// body, else the body itself, shortened.
fn server_message(body: &[u8]) -> String {
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        let candidates = [
            json.pointer("/error/message"),
            json.get("error"),
            json.get("message"),
            json.get("detail"),
        ];
        if let Some(text) = candidates.into_iter().flatten().find_map(|v| v.as_str()) {
            return truncate(text);
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
    use std::sync::Mutex;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    // --- lexical -----------------------------------------------------------------------------

    fn norm(v: &[f32]) -> f32 {
        v.iter().map(|x| x * x).sum::<f32>().sqrt()
    }

    #[test]
    fn identifiers_split_into_parts() {
        assert_eq!(identifier_parts("fencingToken"), vec!["fencing", "token"]);
        assert_eq!(identifier_parts("fencing_token"), vec!["fencing", "token"]);
        assert_eq!(identifier_parts("HTTPServer"), vec!["http", "server"]);
        assert_eq!(identifier_parts("__init__"), vec!["init"]);
        assert_eq!(
            identifier_parts("parseV2Header"),
            vec!["parse", "v2", "header"]
        );
        assert_eq!(
            identifier_parts("SCREAMING_CASE"),
            vec!["screaming", "case"]
        );
        assert_eq!(identifier_parts("한국어"), vec!["한국어"]);
        assert!(identifier_parts("___").is_empty());
    }

    #[test]
    fn lexical_is_deterministic_bit_for_bit() {
        let e = LexicalHashEmbedder::default();
        assert_eq!(e.name(), "lexical-hash-384");
        assert_eq!(e.dimension(), 384);
        let text = "fn acquire_lock(fencingToken: u64) -> Result<Guard> // 한국어";
        let v = e.embed_one(text);
        assert_eq!(v.len(), 384);
        assert_eq!(
            v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            e.embed_one(text)
                .iter()
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        );
        // Computed once; a platform- or run-dependent hash would change these.
        let nonzero: Vec<(usize, u32)> = v
            .iter()
            .enumerate()
            .filter(|(_, x)| **x != 0.0)
            .map(|(i, x)| (i, x.to_bits()))
            .take(6)
            .collect();
        assert_eq!(nonzero, EXPECTED_FIRST_NONZERO);
        assert_eq!(feature_hash(b'u', "token"), EXPECTED_TOKEN_HASH);
    }

    const EXPECTED_FIRST_NONZERO: [(usize, u32); 6] = [
        (16, 3197565702),
        (50, 3197565702),
        (74, 3197565702),
        (91, 3189177094),
        (100, 3189177094),
        (101, 1050082054),
    ];
    const EXPECTED_TOKEN_HASH: u64 = 4_050_006_302_545_932_005;

    #[test]
    fn lexical_vectors_are_normalized_and_empty_is_zero() {
        let e = LexicalHashEmbedder::new(64);
        for text in [
            "a",
            "hello world",
            "x".repeat(10_000).as_str(),
            "🦀 crab 🦀",
        ] {
            let v = e.embed_one(text);
            assert!((norm(&v) - 1.0).abs() < 1e-5, "{text}: {}", norm(&v));
        }
        for text in ["", "   ", "-- // {} ()", "🦀"] {
            assert_eq!(e.embed_one(text), vec![0.0; 64], "{text:?}");
        }
        assert_eq!(LexicalHashEmbedder::new(0).dimension(), 1);
    }

    #[test]
    fn related_texts_score_higher() {
        let e = LexicalHashEmbedder::default();
        let query = e.embed_one("fencing token");
        let related = e.embed_one(
            "Every lock acquisition returns a fencing token. The fencing token increases \
             monotonically, so storage can refuse writes that carry an older token.",
        );
        let unrelated = e.embed_one(
            "Boil the pasta in plenty of salted water for nine minutes, then toss it with \
             olive oil, garlic and a little of the cooking water.",
        );
        let (r, u) = (cosine(&query, &related), cosine(&query, &unrelated));
        assert!(r > 0.3, "related {r}");
        assert!(r > u + 0.2, "related {r} vs unrelated {u}");
        // Identifier spellings meet each other.
        let camel = e.embed_one("let t = lock.fencingToken();");
        let snake = e.embed_one("let t = lock.fencing_token();");
        assert!(cosine(&camel, &snake) > 0.8, "{}", cosine(&camel, &snake));
        assert!((cosine(&query, &query) - 1.0).abs() < 1e-5);
    }

    #[tokio::test]
    async fn lexical_embed_keeps_order() {
        let e = LexicalHashEmbedder::new(32);
        let texts = vec!["alpha".to_string(), "beta".into(), String::new()];
        let out = e.embed(&texts).await.unwrap();
        assert_eq!(out.len(), 3);
        for (t, v) in texts.iter().zip(&out) {
            assert_eq!(v, &e.embed_one(t));
        }
    }

    #[test]
    fn bytes_round_trip_little_endian() {
        let v = vec![1.0f32, -0.5, 0.0, f32::MIN_POSITIVE, 3.25];
        let b = to_bytes(&v);
        assert_eq!(b.len(), 20);
        assert_eq!(&b[..4], &[0, 0, 0x80, 0x3f]);
        assert_eq!(from_bytes(&b), v);
        assert_eq!(from_bytes(&b[..7]), vec![1.0]);
        assert!(from_bytes(&[]).is_empty());
    }

    #[test]
    fn cosine_is_the_dot_product() {
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 1.0]), 0.0);
        assert_eq!(cosine(&[0.6, 0.8], &[0.6, 0.8]), 1.0);
        assert_eq!(cosine(&[1.0, 0.0], &[-1.0, 0.0]), -1.0);
        assert_eq!(cosine(&[1.0], &[1.0, 0.0]), 0.0);
    }

    // --- HTTP --------------------------------------------------------------------------------

    /// A request as the test server saw it.
    #[derive(Debug, Clone)]
    struct SeenRequest {
        /// Request line and headers, header names lower-cased.
        head: String,
        body: serde_json::Value,
    }

    impl SeenRequest {
        fn header(&self, name: &str) -> Option<String> {
            self.head.lines().find_map(|l| {
                let (n, v) = l.split_once(':')?;
                (n == name).then(|| v.trim().to_owned())
            })
        }
        fn inputs(&self) -> Vec<String> {
            serde_json::from_value(self.body["input"].clone()).unwrap()
        }
    }

    enum Reply {
        Json(u16, Vec<(&'static str, String)>, serde_json::Value),
        Text(u16, String),
        Hang,
    }

    struct TestServer {
        base_url: String,
        seen: Arc<Mutex<Vec<SeenRequest>>>,
    }

    impl TestServer {
        fn requests(&self) -> Vec<SeenRequest> {
            self.seen.lock().unwrap().clone()
        }
    }

    /// A hand-rolled HTTP/1.1 server on 127.0.0.1:0; `reply` gets the 0-based request number.
    async fn serve<F>(reply: F) -> TestServer
    where
        F: Fn(usize, &SeenRequest) -> Reply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let reply = Arc::new(reply);
        let seen2 = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let (seen, reply) = (seen2.clone(), reply.clone());
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
                    let head: String = String::from_utf8_lossy(&buf[..header_end])
                        .lines()
                        .map(|l| match l.split_once(':') {
                            Some((n, v)) => format!("{}:{v}\n", n.to_ascii_lowercase()),
                            None => format!("{l}\n"),
                        })
                        .collect();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    while buf.len() < header_end + length {
                        match socket.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = serde_json::from_slice(&buf[header_end..header_end + length])
                        .unwrap_or(serde_json::Value::Null);
                    let request = SeenRequest { head, body };
                    let number = {
                        let mut seen = seen.lock().unwrap();
                        seen.push(request.clone());
                        seen.len() - 1
                    };
                    let (status, headers, body) = match reply(number, &request) {
                        Reply::Json(s, h, v) => (s, h, v.to_string()),
                        Reply::Text(s, t) => (s, vec![], t),
                        Reply::Hang => {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                            return;
                        }
                    };
                    let mut response = format!(
                        "HTTP/1.1 {status} Test\r\nContent-Type: application/json\r\n\
                         Content-Length: {}\r\nConnection: close\r\n",
                        body.len()
                    );
                    for (name, value) in headers {
                        response.push_str(&format!("{name}: {value}\r\n"));
                    }
                    response.push_str("\r\n");
                    response.push_str(&body);
                    let _ = socket.write_all(response.as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        TestServer { base_url, seen }
    }

    /// One-hot vector of dimension `dim` at the number in an input like "t3".
    fn one_hot(input: &str, dim: usize) -> Vec<f32> {
        let i: usize = input.trim_start_matches('t').parse().unwrap();
        let mut v = vec![0.0; dim];
        v[i % dim] = 1.0;
        v
    }

    /// A success body for the request's inputs, `data` in reverse index order.
    fn embeddings_reply(request: &SeenRequest, dim: usize) -> Reply {
        let data: Vec<serde_json::Value> = request
            .inputs()
            .iter()
            .enumerate()
            .rev()
            .map(|(i, t)| serde_json::json!({"object": "embedding", "index": i, "embedding": one_hot(t, dim)}))
            .collect();
        Reply::Json(
            200,
            vec![],
            serde_json::json!({"object": "list", "data": data, "model": "m"}),
        )
    }

    fn inputs(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("t{i}")).collect()
    }

    fn embedder(server: &TestServer) -> HttpEmbedder {
        HttpEmbedder::new(&server.base_url, "test-model").unwrap()
    }

    #[test]
    fn url_validation() {
        let e = HttpEmbedder::new("http://127.0.0.1:8080", "m").unwrap();
        assert_eq!(e.url(), "http://127.0.0.1:8080/v1/embeddings");
        assert_eq!(e.name(), "http:m");
        assert_eq!(Embedder::dimension(&e), 0);
        let e = HttpEmbedder::new("http://host/prefix/", "m").unwrap();
        assert_eq!(e.url(), "http://host/prefix/v1/embeddings");
        let e = HttpEmbedder::new("http://localhost:11434/v1/", "m").unwrap();
        assert_eq!(e.url(), "http://localhost:11434/v1/embeddings");

        let err = HttpEmbedder::new("https://api.openai.com", "m").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("https") && msg.contains("TLS") && msg.contains("http://"),
            "{msg}"
        );
        for bad in ["ftp://host", "not a url", "http://", "http://h/?q=1", ""] {
            let err = HttpEmbedder::new(bad, "m").unwrap_err();
            assert!(
                matches!(err, EmbedError::InvalidConfig { .. }),
                "{bad}: {err}"
            );
        }
        assert!(HttpEmbedder::new("http://h", " ").is_err());
    }

    #[test]
    fn debug_hides_the_api_key() {
        let e = HttpEmbedder::new("http://h", "m")
            .unwrap()
            .api_key(Some("sk-secret".into()));
        let debug = format!("{e:?}");
        assert!(
            !debug.contains("sk-secret") && debug.contains("redacted"),
            "{debug}"
        );
    }

    #[tokio::test]
    async fn batches_keep_order_even_when_data_is_out_of_order() {
        let server = serve(|_, r| embeddings_reply(r, 8)).await;
        let e = embedder(&server).batch_size(2);
        let out = e.embed(&inputs(5)).await.unwrap();
        assert_eq!(
            out,
            (0..5)
                .map(|i| one_hot(&format!("t{i}"), 8))
                .collect::<Vec<_>>()
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        let batches: Vec<Vec<String>> = requests.iter().map(SeenRequest::inputs).collect();
        assert_eq!(
            batches,
            vec![vec!["t0", "t1"], vec!["t2", "t3"], vec!["t4"]]
        );
        for r in &requests {
            assert!(
                r.head.starts_with("POST /v1/embeddings HTTP/1.1"),
                "{}",
                r.head
            );
            assert_eq!(r.body["model"], "test-model");
            assert_eq!(r.header("authorization"), None);
        }
        assert_eq!(Embedder::dimension(&e), 8, "learned from the response");
        // Nothing to embed: no request.
        assert!(e.embed(&[]).await.unwrap().is_empty());
        assert_eq!(server.requests().len(), 3);
    }

    #[tokio::test]
    async fn vectors_are_normalized_on_receipt() {
        let server = serve(|_, _| {
            Reply::Json(
                200,
                vec![],
                serde_json::json!({"data": [{"index": 0, "embedding": [3.0, 4.0]}, {"embedding": [0.0, 0.0]}]}),
            )
        })
        .await;
        let out = embedder(&server).embed(&inputs(2)).await.unwrap();
        assert_eq!(out, vec![vec![0.6, 0.8], vec![0.0, 0.0]]);
    }

    #[tokio::test]
    async fn retries_503_then_succeeds() {
        let server = serve(|n, r| {
            if n < 2 {
                Reply::Text(503, "overloaded".into())
            } else {
                embeddings_reply(r, 4)
            }
        })
        .await;
        let started = Instant::now();
        let out = embedder(&server).embed(&inputs(2)).await.unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(server.requests().len(), 3);
        // Backoff 200 ms then 400 ms.
        assert!(
            started.elapsed() >= Duration::from_millis(600),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn gives_up_after_max_retries_naming_status_and_attempts() {
        let server = serve(|_, _| Reply::Text(500, "boom".into())).await;
        let err = embedder(&server)
            .max_retries(1)
            .embed(&inputs(1))
            .await
            .unwrap_err();
        assert_eq!(server.requests().len(), 2);
        let msg = err.to_string();
        assert!(
            msg.contains("500") && msg.contains("2 attempt(s)") && msg.contains("boom"),
            "{msg}"
        );
        assert!(
            msg.contains(&format!("{}/v1/embeddings", server.base_url)),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn honours_retry_after_on_429() {
        let server = serve(|n, r| {
            if n == 0 {
                Reply::Json(
                    429,
                    vec![("Retry-After", "1".into())],
                    serde_json::json!({"error": {"message": "slow down"}}),
                )
            } else {
                embeddings_reply(r, 4)
            }
        })
        .await;
        let started = Instant::now();
        embedder(&server).embed(&inputs(1)).await.unwrap();
        assert_eq!(server.requests().len(), 2);
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_400_is_not_retried_and_names_the_server_message() {
        let server = serve(|_, _| {
            Reply::Json(
                400,
                vec![],
                serde_json::json!({"error": {"message": "input is too long", "type": "invalid_request_error"}}),
            )
        })
        .await;
        let err = embedder(&server).embed(&inputs(3)).await.unwrap_err();
        assert_eq!(server.requests().len(), 1);
        assert!(
            matches!(
                err,
                EmbedError::Status {
                    status: 400,
                    attempts: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("400 Bad Request") && msg.contains("input is too long"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn timeouts_are_retried_then_reported() {
        let server = serve(|_, _| Reply::Hang).await;
        let started = Instant::now();
        let err = embedder(&server)
            .timeout(Duration::from_millis(300))
            .max_retries(2)
            .embed(&inputs(1))
            .await
            .unwrap_err();
        let elapsed = started.elapsed();
        assert!(
            matches!(err, EmbedError::Timeout { attempts: 3, .. }),
            "{err:?}"
        );
        assert_eq!(server.requests().len(), 3);
        // 3 × 300 ms of waiting plus 200 + 400 ms of backoff.
        assert!(elapsed >= Duration::from_millis(1500), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("timed out") && msg.contains("3 attempt(s)"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn connection_refused_is_retried_then_reported() {
        // Bind then drop to get a port nothing listens on.
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap().port()
        };
        let err = HttpEmbedder::new(&format!("http://127.0.0.1:{port}"), "m")
            .unwrap()
            .max_retries(1)
            .embed(&inputs(1))
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, EmbedError::Transport { attempts: 2, .. }),
            "{err:?}"
        );
        assert!(msg.contains(&port.to_string()), "{msg}");
    }

    #[tokio::test]
    async fn wrong_dimension_is_an_error() {
        let server = serve(|_, r| embeddings_reply(r, 8)).await;
        let err = embedder(&server)
            .dimension(4)
            .embed(&inputs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                EmbedError::DimensionMismatch {
                    expected: 4,
                    got: 8,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(server.requests().len(), 1, "not retried");
        assert!(err.to_string().contains("dimension 8, expected 4"), "{err}");

        // Learned dimension: a later response of another length is refused too.
        let server = serve(|n, r| embeddings_reply(r, if n == 0 { 8 } else { 6 })).await;
        let e = embedder(&server);
        e.embed(&inputs(1)).await.unwrap();
        let err = e.embed(&inputs(1)).await.unwrap_err();
        assert!(
            matches!(
                err,
                EmbedError::DimensionMismatch {
                    expected: 8,
                    got: 6,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn malformed_responses_are_errors() {
        let server = serve(|n, r| match n {
            0 => Reply::Text(200, "<html>not json</html>".into()),
            1 => Reply::Json(200, vec![], serde_json::json!({"data": []})),
            _ => {
                let one = one_hot(&r.inputs()[0], 4);
                Reply::Json(
                    200,
                    vec![],
                    serde_json::json!({"data": [{"index": 0, "embedding": one}, {"index": 0, "embedding": one}]}),
                )
            }
        })
        .await;
        let e = embedder(&server);
        let err = e.embed(&inputs(2)).await.unwrap_err();
        assert!(err.to_string().contains("not json"), "{err}");
        let err = e.embed(&inputs(2)).await.unwrap_err();
        assert!(
            err.to_string().contains("0 embeddings for 2 inputs"),
            "{err}"
        );
        let err = e.embed(&inputs(2)).await.unwrap_err();
        assert!(err.to_string().contains("index 0 appears twice"), "{err}");
        assert_eq!(server.requests().len(), 3, "none retried");
    }

    #[tokio::test]
    async fn authorization_header_when_an_api_key_is_set() {
        let server = serve(|_, r| embeddings_reply(r, 4)).await;
        embedder(&server)
            .api_key(Some("sk-test-123".into()))
            .embed(&inputs(1))
            .await
            .unwrap();
        embedder(&server)
            .api_key(None)
            .embed(&inputs(1))
            .await
            .unwrap();
        let requests = server.requests();
        assert_eq!(
            requests[0].header("authorization").as_deref(),
            Some("Bearer sk-test-123")
        );
        assert_eq!(requests[1].header("authorization"), None);
    }
}
