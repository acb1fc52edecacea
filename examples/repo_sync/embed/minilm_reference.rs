//! The numpy reference of all-MiniLM-L6-v2 (`scripts/minilm/reference.py`, the model of the
//! former numpy server without the server), run beside the in-process model to compare their
//! vectors and their speed. Used by `embed/minilm.rs`'s tests and `benches/minilm.rs`; not part of the job.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What `reference.py` printed.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Reference {
    /// One vector per text, in order.
    pub(crate) vectors: Vec<Vec<f32>>,
    /// The timed embedding (after a warm-up), in seconds.
    pub(crate) seconds: f64,
    /// Tokens read, after the cut at 256 per text.
    pub(crate) tokens: usize,
    /// Its worker threads.
    pub(crate) threads: usize,
    /// Its peak resident memory.
    pub(crate) peak_rss_mib: Option<f64>,
}

/// The repository's root: this package is `examples/repo_sync/` in it.
pub(crate) fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's python and the model's directory, from `scripts/minilm/setup --check`; an error
/// that names what is missing and how to get it otherwise.
pub(crate) fn setup() -> Result<(PathBuf, PathBuf), String> {
    let setup = repo_root().join("scripts/minilm/setup");
    let out = Command::new(&setup)
        .arg("--check")
        .output()
        .map_err(|e| format!("cannot run {}: {e}", setup.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "all-MiniLM-L6-v2's reference is not set up: {} --check says:\n{}\nRun \
             scripts/minilm/setup (scripts/test runs it before cargo test).",
            setup.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // minilm: ready: python=<path> model=<path>
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("minilm: ready: python="))
        .and_then(|l| l.split_once(" model="))
        .map(|(python, model)| (PathBuf::from(python), PathBuf::from(model)))
        .ok_or_else(|| format!("unexpected output of {}: {stdout}", setup.display()))
}

/// The reference's vectors of `texts`, computed with `threads` worker threads.
pub(crate) fn run(
    python: &Path,
    model: &Path,
    texts: &[String],
    threads: usize,
) -> Result<Reference, String> {
    let script = repo_root().join("scripts/minilm/reference.py");
    let mut child = Command::new(python)
        .arg(&script)
        .arg("--model-dir")
        .arg(model)
        .arg("--threads")
        .arg(threads.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} {}: {e}",
                python.display(),
                script.display()
            )
        })?;
    let input = serde_json::to_vec(texts).map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    writer
        .join()
        .map_err(|_| "the writer thread panicked".to_owned())?
        .map_err(|e| format!("cannot write the texts to {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("{} printed no usable JSON: {e}", script.display()))
}

/// The peak resident memory of this process (VmHWM), in MiB.
pub(crate) fn own_peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
