//! all-MiniLM-L6-v2 in the process against its numpy reference, side by side in one run: the
//! same chunks of this repository through both, their vectors compared (cosine similarity per
//! chunk) and their speed (chunks and tokens a second, the timed embedding after a warm-up,
//! not the model's loading) and peak memory printed.
//!
//! ```sh
//! scripts/minilm/setup     # the model's files and the reference's venv, once
//! cargo bench -p repo_sync --features minilm --bench minilm [-- --chunks 200 --batch-size 16]
//! ```
//!
//! The chunks are this repository's files at `CORPUS_COMMIT` (the commit `tests/embeddings.rs`
//! indexes), `.rs` and `.md` files of at most 11 KiB in path order, cut into 700-character
//! chunks (100 overlapping), the first `--chunks` of them. Both use as many threads as candle
//! does: `RAYON_NUM_THREADS`, or one per core (the reference's worker threads, its
//! `--threads`; candle's matrix products). `--workers W` runs W batches at once in the process
//! (default: as many as those threads). Exits 1 when a chunk's vectors differ (cosine below
//! 0.999), or when `--min-ratio R` is given and the in-process model is less than R times as
//! fast.
#![allow(missing_docs, dead_code, unreachable_pub)]
// Built with `cfg(test)` by `cargo bench`: the included modules' unit tests use what the bench does not.
#![cfg_attr(test, allow(unused_imports))]
// ... and `embed/minilm.rs`'s tests include `minilm_reference.rs` too, as this file does.
#![cfg_attr(test, allow(clippy::duplicate_mod))]

#[path = "../chunk.rs"]
mod chunk;
#[path = "../embed/mod.rs"]
mod embed;
#[cfg(feature = "http")]
#[path = "../http/mod.rs"]
mod http;
#[path = "../embed/minilm_reference.rs"]
mod reference;

use std::process::{Command, ExitCode};
use std::time::Instant;

use crate::chunk::{ChunkConfig, chunk};
use crate::embed::{MiniLmEmbedder, cosine};

/// The commit whose files are cut into chunks (the one `tests/embeddings.rs` indexes).
const CORPUS_COMMIT: &str = "5d914f930c43c343543b67246ffefa621094c861";
const MAX_FILE_BYTES: usize = 11 * 1024;

struct Options {
    chunks: usize,
    batch_size: usize,
    min_ratio: Option<f64>,
    workers: Option<usize>,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        chunks: 200,
        batch_size: crate::embed::MINILM_BATCH_SIZE,
        min_ratio: None,
        workers: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--chunks" => o.chunks = number(&value("--chunks")?, "--chunks")?,
            "--batch-size" => o.batch_size = number(&value("--batch-size")?, "--batch-size")?,
            "--min-ratio" => {
                let v = value("--min-ratio")?;
                o.min_ratio = Some(
                    v.parse()
                        .map_err(|_| format!("--min-ratio {v:?}: not a number"))?,
                );
            }
            "--workers" => o.workers = Some(number(&value("--workers")?, "--workers")?),
            // What cargo bench passes to every bench binary.
            "--bench" => {}
            other => {
                return Err(format!(
                    "unknown option {other:?} (--chunks, --batch-size, --workers, --min-ratio)"
                ));
            }
        }
    }
    Ok(o)
}

fn number(v: &str, name: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{name} {v:?}: not a whole number above zero")),
    }
}

fn git(args: &[&str]) -> Result<Vec<u8>, String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(reference::repo_root())
        .args(args)
        .output()
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {} (a clone without the commit {CORPUS_COMMIT}? fetch the whole history)",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out.stdout)
}

/// The first `n` chunks of the corpus.
fn corpus(n: usize) -> Result<Vec<String>, String> {
    let config = ChunkConfig::new(700, 100)?;
    let list = git(&["ls-tree", "-r", "-z", "--name-only", CORPUS_COMMIT])?;
    let mut texts = Vec::new();
    for path in list.split(|&b| b == 0).filter(|p| !p.is_empty()) {
        let path = String::from_utf8_lossy(path);
        if !(path.ends_with(".rs") || path.ends_with(".md")) {
            continue;
        }
        let bytes = git(&["show", &format!("{CORPUS_COMMIT}:{path}")])?;
        if bytes.len() > MAX_FILE_BYTES {
            continue;
        }
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        texts.extend(chunk(&text, &config).into_iter().map(|c| c.text));
        if texts.len() >= n {
            texts.truncate(n);
            return Ok(texts);
        }
    }
    Ok(texts)
}

fn main() -> ExitCode {
    match bench() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("minilm bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn bench() -> Result<bool, String> {
    let o = options()?;
    // candle's CPU threads (RAYON_NUM_THREADS, or the cores): the reference gets as many.
    let threads = candle_core::utils::get_num_threads();
    let (python, model) = reference::setup()?;
    let texts = corpus(o.chunks)?;
    let chars: usize = texts.iter().map(|t| t.chars().count()).sum();
    println!(
        "{} chunks of {CORPUS_COMMIT:.7} ({chars} characters), batch size {}, {} threads, {} cores",
        texts.len(),
        o.batch_size,
        threads,
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    let reference = reference::run(&python, &model, &texts, threads)?;

    let load = Instant::now();
    let minilm = MiniLmEmbedder::load(&model)
        .map_err(|e| e.to_string())?
        .batch_size(o.batch_size);
    let minilm = match o.workers {
        Some(w) => minilm.threads(w),
        None => minilm,
    };
    let load = load.elapsed().as_secs_f64();
    minilm
        .embed_blocking(&texts[..texts.len().min(8)])
        .map_err(|e| e.to_string())?;
    let start = Instant::now();
    let (vectors, tokens) = minilm.embed_blocking(&texts).map_err(|e| e.to_string())?;
    let seconds = start.elapsed().as_secs_f64();

    let n = texts.len() as f64;
    println!(
        "| embedder | threads | chunks | tokens | seconds | chunks/s | tokens/s | peak memory |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mib = |m: Option<f64>| m.map_or("?".into(), |m| format!("{m:.0} MiB"));
    println!(
        "| numpy reference (scripts/minilm/reference.py) | {} | {} | {} | {:.1} | {:.1} | {:.0} | {} |",
        reference.threads,
        texts.len(),
        reference.tokens,
        reference.seconds,
        n / reference.seconds,
        reference.tokens as f64 / reference.seconds,
        mib(reference.peak_rss_mib)
    );
    println!(
        "| in process (candle, --embedder minilm) | {} | {} | {tokens} | {seconds:.1} | {:.1} | {:.0} | {} |",
        threads,
        texts.len(),
        n / seconds,
        tokens as f64 / seconds,
        mib(reference::own_peak_rss_mib())
    );
    let ratio = reference.seconds / seconds;
    println!("in process / numpy, chunks per second: {ratio:.1} x (model loaded in {load:.1} s)");

    let similarities: Vec<f32> = vectors
        .iter()
        .zip(&reference.vectors)
        .map(|(a, b)| cosine(a, b))
        .collect();
    let (worst, at) = similarities
        .iter()
        .enumerate()
        .map(|(i, s)| (*s, i))
        .fold((f32::INFINITY, 0), |a, b| if b.0 < a.0 { b } else { a });
    let mean = similarities.iter().map(|&s| f64::from(s)).sum::<f64>() / n;
    println!("cosine with the reference: lowest {worst:.6} (chunk {at}), mean {mean:.6}");
    let mut ok = true;
    if tokens != reference.tokens {
        println!(
            "FAILED: {tokens} tokens read against the reference's {}",
            reference.tokens
        );
        ok = false;
    }
    let below = similarities.iter().filter(|&&s| s < 0.999).count();
    if below > 0 {
        println!("FAILED: {below} chunk(s) with a cosine below 0.999");
        ok = false;
    }
    if let Some(min) = o.min_ratio
        && ratio < min
    {
        println!("FAILED: {ratio:.1} x, below --min-ratio {min}");
        ok = false;
    }
    Ok(ok)
}
