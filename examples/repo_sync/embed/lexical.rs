//! Lexical feature hashing: [`LexicalHashEmbedder`], the default embedder. No network, no
//! model, the same vector on every machine.

use std::collections::BTreeMap;

use futures_util::future::BoxFuture;

use super::{EmbedError, Embedder, Embedding};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::cosine;

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
}
