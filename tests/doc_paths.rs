//! Every path of this repository that README.md, DEVELOPERS.md, BENCHMARKS.md, a crate's README
//! or a page under docs/ names exists: a file that moves takes its mentions with it.
//!
//! What counts as a path: a Markdown link's target (not a URL), and text in backticks that
//! looks like one (it contains a `/` and starts with a folder of the repository, `src/` or
//! `tests/`, or it is a file name with an extension of the repository's files). A path
//! resolves against the repository's root, the page's own folder or any workspace member's
//! folder (the README's workspace list names `src/…` under the crate it describes); a bare
//! file name (`fire.rs`, with the extension of a source file) must be the name of some file
//! in the repository. `{a,b}` is expanded. Generated places (`target/`, `.git/`, `.cache/`)
//! are not checked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// File extensions a backticked bare name must carry to be read as a path of the repository
/// (a name such as `tokenizer.json`, a file of a downloaded model, is not one).
const EXTENSIONS: &[&str] = &["rs", "md", "sql", "toml", "sh", "py"];

/// Folders made by builds and tools, never committed.
const GENERATED: &[&str] = &["target", ".git", ".cache", "node_modules"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The pages checked: the top-level Markdown files, each crate's README, and docs/.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = Vec::new();
    for name in ["README.md", "DEVELOPERS.md", "BENCHMARKS.md"] {
        pages.push(root.join(name));
    }
    for member in members(root) {
        let readme = member.join("README.md");
        if member != root && readme.exists() {
            pages.push(readme);
        }
    }
    let mut folders = vec![root.join("docs")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("docs/ is readable") {
            let path = entry.expect("a docs/ entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages
}

/// The workspace members' folders, read from the root Cargo.toml's `members = [...]`.
fn members(root: &Path) -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("the workspace lists its members on one line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(|m| root.join(m))
        .collect()
}

/// Every file name in the repository (generated folders left out).
fn file_names(root: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).expect("a readable folder") {
            let entry = entry.expect("a folder entry");
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir() {
                if !GENERATED.contains(&name.as_str()) {
                    folders.push(entry.path());
                }
            } else {
                names.insert(name);
            }
        }
    }
    names
}

/// `src/sql/{postgres,mysql}.rs` → both paths; text without braces → itself.
fn expand(text: &str) -> Vec<String> {
    match (text.find('{'), text.find('}')) {
        (Some(open), Some(close)) if open < close => text[open + 1..close]
            .split(',')
            .flat_map(|part| expand(&format!("{}{part}{}", &text[..open], &text[close + 1..])))
            .collect(),
        _ => vec![text.to_owned()],
    }
}

/// The spans of a page in backticks, and its Markdown links' targets, with their line numbers.
fn mentions(page: &str) -> Vec<(usize, String, bool)> {
    let mut found = Vec::new();
    let mut in_fence = false;
    for (index, line) in page.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1 {
                found.push((index + 1, span.to_owned(), false));
            }
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                found.push((index + 1, rest[..end].to_owned(), true));
            }
        }
    }
    found
}

/// Whether backticked text reads as a path of this repository.
fn looks_like_path(text: &str, top: &BTreeSet<String>) -> bool {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_.-/{},".contains(c);
    if text.is_empty() || !text.chars().all(allowed) || text.starts_with('/') {
        return false;
    }
    let first = text.split('/').next().unwrap_or_default();
    if text.contains('/') {
        return top.contains(first) || first == "src" || first == "tests";
    }
    text.rsplit_once('.')
        .is_some_and(|(stem, ext)| !stem.is_empty() && EXTENSIONS.contains(&ext))
}

/// What a page is checked against: the repository's root, its members, its file names and
/// top-level entries.
struct Repository {
    root: PathBuf,
    members: Vec<PathBuf>,
    names: BTreeSet<String>,
    top: BTreeSet<String>,
}

impl Repository {
    fn read() -> Self {
        let root = root();
        let top = std::fs::read_dir(&root)
            .expect("the repository root")
            .map(|e| {
                e.expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|name| !GENERATED.contains(&name.as_str()))
            .collect();
        Repository {
            members: members(&root),
            names: file_names(&root),
            top,
            root,
        }
    }

    /// The paths a page at `page` with `text` names, and those of them that do not exist
    /// (`page:line: path`).
    fn check(&self, page: &Path, text: &str) -> (usize, Vec<String>) {
        let folder = page.parent().expect("a page has a folder").to_path_buf();
        let (mut checked, mut stale) = (0, Vec::new());
        for (line, mention, is_link) in mentions(text) {
            let mention = mention.split('#').next().unwrap_or_default().trim();
            let mention = mention.trim_end_matches(['.', ',', ':', ';']);
            if mention.is_empty() || mention.contains("://") || mention.starts_with("mailto:") {
                continue;
            }
            if !is_link && !looks_like_path(mention, &self.top) {
                continue;
            }
            if GENERATED
                .iter()
                .any(|g| mention.starts_with(&format!("{g}/")))
            {
                continue;
            }
            for path in expand(mention) {
                checked += 1;
                let exists = if !path.contains('/') && !is_link {
                    self.names.contains(&path) || self.root.join(&path).exists()
                } else {
                    std::iter::once(&self.root)
                        .chain(std::iter::once(&folder))
                        .chain(self.members.iter())
                        .any(|base| base.join(&path).exists())
                };
                if !exists {
                    let page = page.strip_prefix(&self.root).unwrap_or(page).display();
                    stale.push(format!("{page}:{line}: {path}"));
                }
            }
        }
        (checked, stale)
    }
}

#[test]
fn every_repository_path_named_in_the_docs_exists() {
    let repository = Repository::read();
    let (mut checked, mut stale) = (0, Vec::new());
    for page in pages(&repository.root) {
        let text = std::fs::read_to_string(&page).expect("a readable page");
        let (count, missing) = repository.check(&page, &text);
        checked += count;
        stale.extend(missing);
    }
    assert!(
        checked > 100,
        "only {checked} paths found: is the scan reading the pages?"
    );
    assert!(
        stale.is_empty(),
        "paths named in the docs that the repository does not have:\n{}",
        stale.join("\n")
    );
}

#[test]
fn a_path_that_moved_is_named_with_its_page_and_line() {
    let repository = Repository::read();
    let page = repository.root.join("docs/page.md");
    let text = "The statements (`shedlock/src/sql/postgres.rs`, `src/sql/{postgres,sqlite}.rs`),\n\
                its core (`src/sql/core.rs`), [the guide](guide.md), [gone](gone.md), `fire.rs`,\n\
                `firing.rs`; not paths: `text/html`, `api/v1/jobs`, `Ctrl-C`, `target/x.rs`.\n\
                ```\n`src/in/a/fence.rs`\n```\n";
    let (checked, stale) = repository.check(&page, text);
    assert_eq!(checked, 8, "the paths of the sample page");
    assert_eq!(
        stale,
        [
            "docs/page.md:2: src/sql/core.rs",
            "docs/page.md:2: gone.md",
            "docs/page.md:3: firing.rs"
        ]
    );
}
