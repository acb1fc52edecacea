//! Embeddings: the [`Embedder`] trait and two implementations.
//!
//! - [`LexicalHashEmbedder`] (`lexical.rs`): deterministic lexical feature hashing, no network
//!   and no model. It is *not* a neural embedding: it captures shared words and identifiers, not
//!   meaning. It keeps the example and its tests self-contained.
//! - `HttpEmbedder` (`openai.rs`): any OpenAI-compatible `POST /v1/embeddings` endpoint
//!   (OpenAI, vLLM, llama.cpp's server, Ollama, text-embeddings-inference...), plain `http://`
//!   only in this build, with batching, a per-request timeout and retries with exponential
//!   backoff (the shared `crate::http` helpers). Optional: built with the `http` feature only,
//!   as are the HTTP variants of [`EmbedError`]; a copy that needs only the lexical embedder
//!   can drop them.
//!
//! Both return L2-normalized vectors, so [`cosine`] is a dot product. [`to_bytes`] and
//! [`from_bytes`] store a vector as little-endian `f32`s in a BLOB/bytea column.

// Some items (builder options, accessors) are for callers that may not use them yet.
#![allow(dead_code)]

use std::fmt;
#[cfg(feature = "http")]
use std::time::Duration;

use futures_util::future::BoxFuture;

#[cfg(feature = "http")]
use crate::http::describe_status;

mod lexical;
#[cfg(feature = "minilm")]
mod minilm;
#[cfg(feature = "http")]
mod openai;

pub(crate) use lexical::LexicalHashEmbedder;
#[cfg(feature = "minilm")]
#[allow(
    unused_imports,
    reason = "used by main.rs; tests/repo_sync.rs includes this module without it"
)]
pub(crate) use minilm::{
    DEFAULT_BATCH_SIZE as MINILM_BATCH_SIZE, MiniLmEmbedder, default_model_dir,
};
#[cfg(feature = "http")]
#[allow(
    unused_imports,
    reason = "used by main.rs; tests/repo_sync.rs includes this module without it"
)]
pub(crate) use openai::HttpEmbedder;

/// Texts per request to an embeddings server, unless `--embedder-batch-size` says otherwise.
pub(crate) const DEFAULT_BATCH_SIZE: usize = 32;

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
    /// all-MiniLM-L6-v2 cannot run in this process: its files are missing or not the model's,
    /// or a forward pass failed.
    #[cfg(feature = "minilm")]
    #[error("all-MiniLM-L6-v2 (model directory {dir}): {reason}")]
    Model {
        /// The model directory.
        dir: String,
        /// What is wrong, and for a missing file the command that fetches it.
        reason: String,
    },
    /// Every attempt timed out (the last error was a timeout).
    #[cfg(feature = "http")]
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
    #[cfg(feature = "http")]
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
    #[cfg(feature = "http")]
    #[error(
        "POST {url} answered {described} after {attempts} attempt(s): {message}",
        described = describe_status(*status)
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
    #[cfg(feature = "http")]
    #[error("POST {url} returned an unusable embeddings response: {reason}")]
    InvalidResponse {
        /// The endpoint.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A vector that cannot be scored: a component that is not a finite number (`1e39` is
    /// beyond `f32`; normalizing it gave NaN).
    #[cfg(feature = "http")]
    #[error("POST {url} returned an unusable embedding for input {input} ({excerpt:?}): {reason}")]
    InvalidVector {
        /// The endpoint.
        url: String,
        /// The input's position among the texts given to [`Embedder::embed`] (0-based).
        input: usize,
        /// The input's beginning.
        excerpt: String,
        /// What is wrong with the vector.
        reason: String,
    },
    /// The response is larger than the client reads ([`openai::RESPONSE_BYTES_PER_INPUT`] per
    /// input of the request); not retried.
    #[cfg(feature = "http")]
    #[error(
        "POST {url} answered with more than the limit of {limit} for {inputs} input(s) \
         ({per_input} per input; {seen}): refused"
    )]
    TooLarge {
        /// The endpoint.
        url: String,
        /// The limit of this request, described (`8 MiB`).
        limit: String,
        /// The inputs of the request.
        inputs: usize,
        /// The limit per input, described.
        per_input: String,
        /// What gave it away: the declared length, or the bytes read when reading stopped.
        seen: String,
    },
    /// The vectors do not have the expected dimension.
    #[cfg(feature = "http")]
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

impl EmbedError {
    /// The position, among the texts given to [`Embedder::embed`], of the input whose vector
    /// was refused; `None` for errors about a whole request.
    pub(crate) fn input(&self) -> Option<usize> {
        #[cfg(feature = "http")]
        if let EmbedError::InvalidVector { input, .. } = self {
            return Some(*input);
        }
        None
    }
}

/// Something that turns texts into vectors.
pub(crate) trait Embedder: Send + Sync + fmt::Debug {
    /// A stable name for what produced the vectors, stored beside them so vectors from
    /// different embedders are never compared: `lexical-hash-384`, `http:<model>`.
    fn name(&self) -> &str;
    /// The length of every vector. For an `HttpEmbedder` without a configured dimension this
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

/// Why `v` cannot be stored or scored: a component that is not a finite number (its position
/// and value). `None` for a usable vector; a zero vector is usable (it scores 0 against every
/// other). Every vector is checked before it is stored (`sync.rs`), whichever the embedder.
pub(crate) fn unusable(v: &[f32]) -> Option<String> {
    let (position, value) = v.iter().enumerate().find(|(_, x)| !x.is_finite())?;
    Some(format!(
        "component {position} is {value}, not a finite number (a value beyond ±3.4e38 does not fit an f32)"
    ))
}

/// Scales `v` to unit length in place; a zero vector stays zero. The norm is computed in
/// `f64`, so a vector of finite components (see [`unusable`]) stays finite.
pub(crate) fn normalize(v: &mut [f32]) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
