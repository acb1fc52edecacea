//! The README's Quick start, taken from the README's text and used as a reader would. Its
//! `Cargo.toml` and `src/main.rs` (at most 40 lines together) are this package's, word for word
//! but the path of the `shedlock` dependency (a test below compares them), so the workspace's
//! build compiles the Quick start beside everything else. Its binary is run as the README says,
//! as two pods (`POD_NAME=pod-a`, `pod-b`) on one PostgreSQL database: each tick runs once, the
//! run history names the pod that ran it, and Ctrl-C (SIGINT) stops each copy with exit code 0.
//!
//! `SHEDLOCK_SOAK=1` also builds the two blocks as a reader would, as a crate of its own outside
//! this workspace (about 150 packages compiled a second time: minutes on a loaded machine), and
//! runs that binary as the two pods instead. In the workspace, a feature the Quick start needs
//! but its `Cargo.toml` leaves out could come from another package; alone, it could not.
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The path the README's `Cargo.toml` gives for the `shedlock` crate (a clone beside the app).
const README_PATH: &str = "path = \"../shedlock/shedlock\"";

/// The first fenced block of `language` (its info string's first word) after the heading
/// `## Quick start`.
fn quick_start_block(readme: &str, language: &str) -> String {
    let start = readme
        .find("\n## Quick start\n")
        .expect("the README has a Quick start section");
    let mut lines = readme[start..].lines();
    let mut block = None;
    for line in lines.by_ref() {
        if let Some(info) = line.strip_prefix("```")
            && info.split([',', ' ']).next() == Some(language)
        {
            block = Some(Vec::new());
            break;
        }
    }
    let mut block = block.unwrap_or_else(|| panic!("a ```{language} block in the Quick start"));
    for line in lines {
        if line.starts_with("```") {
            return block.join("\n") + "\n";
        }
        block.push(line);
    }
    panic!("the ```{language} block of the Quick start is not closed")
}

/// The repository's root: this package is `examples/quick-start/` in it.
fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("the package is examples/quick-start in the repository")
}

fn readme() -> String {
    std::fs::read_to_string(repo_root().join("README.md")).unwrap()
}

/// The path this package's `Cargo.toml` gives for the `shedlock` crate instead of the README's.
const PACKAGE_PATH: &str = "path = \"../../shedlock\"";

/// This package's files are the README's blocks: `src/main.rs` the `rust` block, and
/// `Cargo.toml` starts with the `toml` block, but the path, then says where the README's part
/// ends (its dev-dependencies, for the tests here, follow).
#[test]
fn this_package_is_the_quick_start_word_for_word() {
    let readme = readme();
    let package = Path::new(env!("CARGO_MANIFEST_DIR"));
    let main = std::fs::read_to_string(package.join("src/main.rs")).unwrap();
    assert_eq!(
        main,
        quick_start_block(&readme, "rust"),
        "src/main.rs is the README's Quick start main.rs"
    );
    let toml = std::fs::read_to_string(package.join("Cargo.toml")).unwrap();
    let readme_toml = quick_start_block(&readme, "toml").replace(README_PATH, PACKAGE_PATH);
    let rest = toml.strip_prefix(readme_toml.as_str()).unwrap_or_else(|| {
        panic!("Cargo.toml starts with the README's Quick start Cargo.toml:\n{readme_toml}")
    });
    assert!(
        rest.starts_with("\n# Above: the README's Quick start `Cargo.toml`"),
        "Cargo.toml says where the README's part ends:\n{rest}"
    );
}

#[test]
fn the_quick_start_is_a_cargo_toml_and_a_main_rs_of_at_most_40_lines() {
    let readme = readme();
    let toml = quick_start_block(&readme, "toml");
    let main = quick_start_block(&readme, "rust");
    let lines = toml.lines().count() + main.lines().count();
    assert!(lines <= 40, "{lines} lines:\n{toml}\n{main}");
    assert!(
        toml.contains("[package]") && toml.contains(README_PATH),
        "{toml}"
    );
    assert!(
        main.contains("#[tokio::main]") && main.contains("fn main"),
        "{main}"
    );
    // What the issue found missing: a subscriber, the run history, a stop on Ctrl-C.
    for needed in [
        "tracing_subscriber",
        "RunHistory",
        "ctrl_c",
        "shutdown",
        "migrate",
    ] {
        assert!(
            main.contains(needed),
            "the Quick start uses {needed}:\n{main}"
        );
    }
}

/// The README stays short and puts the Quick start first: at most 250 lines, the Quick start's
/// heading within the first 15 and its code (the `main.rs` block) closed within the first 60.
#[test]
fn the_readme_is_at_most_250_lines_with_the_quick_start_in_its_first_60() {
    let readme = readme();
    let lines: Vec<&str> = readme.lines().collect();
    assert!(lines.len() <= 250, "README.md has {} lines", lines.len());
    let heading = lines
        .iter()
        .position(|l| *l == "## Quick start")
        .expect("a Quick start section");
    assert!(
        heading < 15,
        "the Quick start starts on line {}",
        heading + 1
    );
    let main_start = lines
        .iter()
        .position(|l| l.starts_with("```rust"))
        .expect("the Quick start's main.rs");
    let main_end = main_start
        + lines[main_start + 1..]
            .iter()
            .position(|l| *l == "```")
            .expect("its block closes")
        + 1;
    assert!(
        main_end < 60,
        "the Quick start's code ends on line {}",
        main_end + 1
    );
}

/// The binary the pods run: this package's, which the workspace's build compiled; with
/// `SHEDLOCK_SOAK=1`, the Quick start built as a crate of its own ([`build_quick_start`]).
fn quick_start_binary() -> PathBuf {
    if std::env::var("SHEDLOCK_SOAK").is_ok_and(|v| v == "1") {
        build_quick_start()
    } else {
        PathBuf::from(env!("CARGO_BIN_EXE_hello-shedlock"))
    }
}

/// Writes the Quick start's crate under the test's target folder (kept between runs, so a
/// second run builds only what changed) and builds it, as a reader would; its binary.
fn build_quick_start() -> PathBuf {
    let readme = readme();
    let workspace = repo_root();
    let shedlock = workspace.join("shedlock");
    let toml = quick_start_block(&readme, "toml").replace(
        README_PATH,
        &format!("path = {:?}", shedlock.to_str().unwrap()),
    );
    // A workspace of its own: the folder lies inside this repository's.
    let toml = toml + "\n[workspace]\n";
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-quick-start");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), toml).unwrap();
    std::fs::write(dir.join("src/main.rs"), quick_start_block(&readme, "rust")).unwrap();
    // The versions this repository builds with (so the build needs nothing new from the
    // registry).
    std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--quiet", "--offline"])
        .current_dir(&dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("RUSTFLAGS")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Quick start builds as pasted:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("target/debug/hello-shedlock")
}

mod postgres {
    use std::collections::HashSet;
    use std::process::Stdio;
    use std::time::Duration;

    use sqlx::Row;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::process::{Child, Command};
    use tokio::sync::mpsc;

    use shedlock_suite::{drop_postgres_database, postgres_database};

    const DEADLINE: Duration = Duration::from_secs(120);

    fn pod(binary: &std::path::Path, url: &str, name: &str, lines: mpsc::Sender<String>) -> Child {
        let mut child = Command::new(binary)
            .env("DATABASE_URL", url)
            .env("POD_NAME", name)
            .env_remove("SHEDLOCK_LOCKED_BY")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                let _ = lines.send(line).await;
            }
        });
        child
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_quick_start_runs_as_pasted_on_two_pods() {
        let binary = tokio::task::spawn_blocking(super::quick_start_binary)
            .await
            .unwrap();
        let (url, database) = postgres_database("readme").await;
        let (send, mut printed) = mpsc::channel(64);
        let pods = [
            pod(&binary, &url, "pod-a", send.clone()),
            pod(&binary, &url, "pod-b", send),
        ];
        // Four ticks' lines (every 5 s), from either pod.
        let mut reports = Vec::new();
        let waited = tokio::time::timeout(DEADLINE, async {
            while reports.len() < 4 {
                let line = printed.recv().await.expect("the pods run");
                if line.starts_with("report: tick") {
                    reports.push(line);
                }
            }
        })
        .await;
        // Ctrl-C: SIGINT to each pod; each stops with exit code 0.
        let mut outputs = Vec::new();
        for child in pods {
            let pid = child.id().expect("still running");
            let kill = std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status()
                .unwrap();
            assert!(kill.success());
            let out = tokio::time::timeout(DEADLINE, child.wait_with_output())
                .await
                .expect("a pod stops on Ctrl-C")
                .unwrap();
            outputs.push(out);
        }
        for out in &outputs {
            assert!(
                out.status.success(),
                "{:?}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            waited.is_ok(),
            "four ticks ran within {DEADLINE:?}: {reports:?}; stderr: {}",
            String::from_utf8_lossy(&outputs[0].stderr)
        );
        // What `shedlock history` reads: each tick ran once, by a pod named as such.
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let rows = sqlx::query(
            "SELECT tick, locked_by FROM shedlock_runs WHERE outcome = 'executed' ORDER BY tick",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        drop_postgres_database(&database).await;
        let ticks: Vec<chrono::DateTime<chrono::Utc>> =
            rows.iter().map(|row| row.get("tick")).collect();
        let distinct: HashSet<_> = ticks.iter().collect();
        assert_eq!(distinct.len(), ticks.len(), "each tick once: {ticks:?}");
        assert!(ticks.len() >= reports.len(), "{ticks:?} {reports:?}");
        for row in &rows {
            let by: String = row.get("locked_by");
            assert!(
                by.starts_with("pod-a:") || by.starts_with("pod-b:"),
                "locked_by names the pod: {by}"
            );
        }
    }
}
