//! Tests of the git plumbing, against repositories made in temporary directories.

use super::*;

/// Runs git in `dir` isolated from the machine's configuration; panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.args([
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "init.defaultBranch=main",
        "-c",
        "core.autocrlf=false",
        "-c",
        "core.symlinks=true",
    ])
    .arg("-C")
    .arg(dir)
    .args(args)
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_CONFIG_NOSYSTEM", "1");
    for var in REPOSITORY_ENV {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("git is installed");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn write(dir: &Path, path: &str, bytes: &[u8]) {
    let full = dir.join(path);
    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
    std::fs::write(full, bytes).unwrap();
}

const BINARY: &[u8] = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\xff";

/// A repository with two commits; returns (dir, first commit, second commit).
fn fixture() -> (tempfile::TempDir, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q"]);
    write(d, "README.md", b"# readme\n");
    write(d, "src/lib.rs", b"pub fn f() {}\n");
    write(d, "docs/my notes.txt", b"notes with spaces\n");
    write(d, "한글/파일.md", "유니코드 내용\n".as_bytes());
    write(d, "bin/blob.bin", BINARY);
    write(d, "bin/tool.sh", b"#!/bin/sh\necho hi\n");
    write(d, "-dash.txt", b"leading dash\n");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink("README.md", d.join("link")).unwrap();
        write(d, "odd\nname.txt", b"newline in the name\n");
    }
    git(d, &["add", "-A"]);
    // A submodule entry (gitlink) without a checkout.
    git(
        d,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            "160000,1111111111111111111111111111111111111111,vendor/sub",
        ],
    );
    git(d, &["commit", "-q", "-m", "first"]);
    let first = git(d, &["rev-parse", "HEAD"]);

    write(d, "README.md", b"# readme, modified\n");
    git(d, &["rm", "-q", "src/lib.rs"]);
    write(d, "src/new.rs", b"pub fn g() {}\n");
    git(d, &["mv", "docs/my notes.txt", "docs/notes renamed.txt"]);
    #[cfg(unix)]
    {
        // A file replaced by a symlink: no longer indexable.
        std::fs::remove_file(d.join("bin/tool.sh")).unwrap();
        std::os::unix::fs::symlink("../README.md", d.join("bin/tool.sh")).unwrap();
    }
    #[cfg(not(unix))]
    std::fs::remove_file(d.join("bin/tool.sh")).unwrap();
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "second"]);
    let second = git(d, &["rev-parse", "HEAD"]);
    (dir, first, second)
}

fn expected_first_files() -> Vec<String> {
    let mut files = vec![
        "-dash.txt",
        "README.md",
        "bin/blob.bin",
        "bin/tool.sh",
        "docs/my notes.txt",
        "src/lib.rs",
        "한글/파일.md",
    ];
    if cfg!(unix) {
        files.push("odd\nname.txt");
    }
    let mut files: Vec<String> = files.into_iter().map(String::from).collect();
    files.sort();
    files
}

#[test]
fn head_list_read_and_size() {
    let (dir, first, second) = fixture();
    let repo = Repo::open(dir.path()).unwrap();
    assert!(!repo.is_bare());
    assert_eq!(repo.path(), std::fs::canonicalize(dir.path()).unwrap());
    let head = repo.head().unwrap();
    assert_eq!(head, second);
    assert_eq!(head.len(), 40);
    assert_ne!(first, second);

    // Symlinks ("link") and submodules ("vendor/sub") are not listed.
    assert_eq!(repo.list_files(&first).unwrap(), expected_first_files());
    let mut at_head = vec![
        "-dash.txt",
        "README.md",
        "bin/blob.bin",
        "docs/notes renamed.txt",
        "src/new.rs",
        "한글/파일.md",
    ];
    if cfg!(unix) {
        at_head.push("odd\nname.txt");
    }
    at_head.sort();
    assert_eq!(repo.list_files("HEAD").unwrap(), at_head);

    assert_eq!(repo.read(&first, "README.md").unwrap(), b"# readme\n");
    assert_eq!(
        repo.read(&head, "README.md").unwrap(),
        b"# readme, modified\n"
    );
    assert_eq!(
        repo.read(&first, "docs/my notes.txt").unwrap(),
        b"notes with spaces\n"
    );
    assert_eq!(
        repo.read(&first, "한글/파일.md").unwrap(),
        "유니코드 내용\n".as_bytes()
    );
    assert_eq!(repo.read(&first, "bin/blob.bin").unwrap(), BINARY);
    assert_eq!(repo.read(&first, "-dash.txt").unwrap(), b"leading dash\n");
    assert_eq!(
        repo.blob_size(&first, "bin/blob.bin").unwrap(),
        BINARY.len() as u64
    );
    assert_eq!(repo.blob_size(&first, "한글/파일.md").unwrap(), 20);
    if cfg!(unix) {
        assert_eq!(
            repo.read(&first, "odd\nname.txt").unwrap(),
            b"newline in the name\n"
        );
    }

    let err = repo.read(&head, "src/lib.rs").unwrap_err();
    assert!(matches!(err, GitError::FileNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("src/lib.rs"), "{err}");
    let err = repo.blob_size(&head, "nope").unwrap_err();
    assert!(matches!(err, GitError::FileNotFound { .. }), "{err:?}");
    let err = repo.read(&head, "src").unwrap_err();
    assert!(matches!(err, GitError::NotABlob { .. }), "{err:?}");
    let err = repo.blob_size(&head, "src").unwrap_err();
    assert!(
        matches!(&err, GitError::NotABlob { kind, .. } if kind == "tree"),
        "{err:?}"
    );
    let err = repo.blob_size(&first, "vendor/sub").unwrap_err();
    assert!(
        matches!(&err, GitError::NotABlob { kind, .. } if kind == "commit"),
        "{err:?}"
    );
    assert_eq!(repo.blob_size(&first, "docs/my notes.txt").unwrap(), 18);
    assert_eq!(repo.blob_size(&first, "-dash.txt").unwrap(), 13);
    assert!(matches!(
        repo.blob_size(&first, "docs/my").unwrap_err(),
        GitError::FileNotFound { .. }
    ));
    if cfg!(unix) {
        assert_eq!(repo.blob_size(&first, "odd\nname.txt").unwrap(), 20);
    }
}

#[test]
fn changes_between_commits() {
    let (dir, first, second) = fixture();
    let repo = Repo::open(dir.path()).unwrap();
    let changes = repo.changes(&first, &second).unwrap();
    assert_eq!(
        changes.upserted,
        vec!["README.md", "docs/notes renamed.txt", "src/new.rs"]
    );
    // The rename's old path, the deletion and the file that became a symlink.
    assert_eq!(
        changes.deleted,
        vec!["bin/tool.sh", "docs/my notes.txt", "src/lib.rs"]
    );
    assert!(repo.changes(&second, &second).unwrap().is_empty());
    // The other way round: the mirror image, and the symlink becoming a file again.
    let back = repo.changes(&second, &first).unwrap();
    assert_eq!(
        back.upserted,
        vec![
            "README.md",
            "bin/tool.sh",
            "docs/my notes.txt",
            "src/lib.rs"
        ]
    );
    assert_eq!(back.deleted, vec!["docs/notes renamed.txt", "src/new.rs"]);
    // Applying the changes to the first listing gives the second.
    let mut files: Vec<String> = repo
        .list_files(&first)
        .unwrap()
        .into_iter()
        .filter(|f| !changes.deleted.contains(f) && !changes.upserted.contains(f))
        .chain(changes.upserted.iter().cloned())
        .collect();
    files.sort();
    assert_eq!(files, repo.list_files(&second).unwrap());
}

#[test]
fn changes_detects_mode_only_and_rename_with_edit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    git(d, &["init", "-q"]);
    write(d, "a.txt", b"same content for the rename test\n");
    write(d, "run.sh", b"echo\n");
    git(d, &["add", "-A"]);
    git(d, &["commit", "-q", "-m", "1"]);
    git(d, &["mv", "a.txt", "b.txt"]);
    git(d, &["update-index", "--chmod=+x", "run.sh"]);
    git(d, &["commit", "-q", "-m", "2"]);
    let repo = Repo::open(d).unwrap();
    let changes = repo.changes("HEAD~1", "HEAD").unwrap();
    assert_eq!(changes.upserted, vec!["b.txt", "run.sh"]);
    assert_eq!(changes.deleted, vec!["a.txt"]);
}

#[test]
fn blob_reader_reads_many_files_in_one_process() {
    let (dir, first, _) = fixture();
    let repo = Repo::open(dir.path()).unwrap();
    let mut reader = repo.blob_reader(&first).unwrap();
    assert_eq!(reader.commit(), first);
    for path in repo.list_files(&first).unwrap() {
        let blob = reader.read(&path, u64::MAX).unwrap();
        assert_eq!(
            blob,
            Blob::Data(repo.read(&first, &path).unwrap()),
            "{path}"
        );
    }
    assert_eq!(
        reader.read("bin/blob.bin", 4).unwrap(),
        Blob::TooLarge {
            bytes: BINARY.len() as u64
        }
    );
    let err = reader.read("no/such file", u64::MAX).unwrap_err();
    assert!(matches!(err, GitError::FileNotFound { .. }), "{err:?}");
    let err = reader.read("src", u64::MAX).unwrap_err();
    assert!(
        matches!(&err, GitError::NotABlob { kind, .. } if kind == "tree"),
        "{err:?}"
    );
    // Still usable after those, and after a skipped large file.
    assert_eq!(
        reader.read("README.md", 9).unwrap(),
        Blob::Data(b"# readme\n".to_vec())
    );
    assert_eq!(
        reader.read("README.md", 8).unwrap(),
        Blob::TooLarge { bytes: 9 }
    );
    assert_eq!(
        reader.read("docs/my notes.txt", 100).unwrap(),
        Blob::Data(b"notes with spaces\n".to_vec())
    );
}

#[test]
fn bare_repository() {
    let (dir, first, second) = fixture();
    let bare = tempfile::tempdir().unwrap();
    let bare_path = bare.path().join("mirror.git");
    git(
        dir.path(),
        &["clone", "-q", "--bare", ".", bare_path.to_str().unwrap()],
    );
    let repo = Repo::open(&bare_path).unwrap();
    assert!(repo.is_bare());
    assert_eq!(repo.head().unwrap(), second);
    assert_eq!(repo.list_files(&first).unwrap(), expected_first_files());
    assert_eq!(repo.read(&first, "README.md").unwrap(), b"# readme\n");
    assert_eq!(repo.changes(&first, &second).unwrap().upserted.len(), 3);
    // Inside the bare repository is not the repository.
    let err = Repo::open(&bare_path.join("refs")).unwrap_err();
    assert!(matches!(err, GitError::NotARepository { .. }), "{err:?}");
}

#[test]
fn revisions_are_resolved_and_checked() {
    let (dir, first, _) = fixture();
    let repo = Repo::open(dir.path()).unwrap();
    assert_eq!(repo.resolve(&first[..10]).unwrap(), first);
    assert_eq!(repo.resolve("main~1").unwrap(), first);
    let err = repo
        .resolve("0123456789012345678901234567890123456789")
        .unwrap_err();
    assert!(matches!(err, GitError::UnknownRevision { .. }), "{err:?}");
    let err = repo.list_files("no-such-branch").unwrap_err();
    assert!(matches!(err, GitError::UnknownRevision { .. }), "{err:?}");
    assert!(err.to_string().contains("no-such-branch"), "{err}");
    let err = repo.changes("--output=/tmp/x", "HEAD").unwrap_err();
    assert!(matches!(err, GitError::InvalidRevision { .. }), "{err:?}");
    let err = repo.read("", "README.md").unwrap_err();
    assert!(matches!(err, GitError::InvalidRevision { .. }), "{err:?}");
    // A tree id is not a commit.
    let tree = git(dir.path(), &["rev-parse", "HEAD^{tree}"]);
    assert!(matches!(
        repo.resolve(&tree),
        Err(GitError::UnknownRevision { .. })
    ));
}

#[test]
fn not_a_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Repo::open(dir.path()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            GitError::NotARepository { .. } | GitError::NotTopLevel { .. }
        ),
        "{err:?}"
    );
    assert!(msg.contains(&dir.path().display().to_string()), "{msg}");

    let missing = dir.path().join("missing");
    let err = Repo::open(&missing).unwrap_err();
    assert!(matches!(err, GitError::NotARepository { .. }), "{err:?}");
    assert!(err.to_string().contains("missing"), "{err}");

    write(dir.path(), "file", b"x");
    let err = Repo::open(&dir.path().join("file")).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[test]
fn a_subdirectory_of_a_work_tree_is_refused() {
    let (dir, _, _) = fixture();
    let err = Repo::open(&dir.path().join("src")).unwrap_err();
    assert!(matches!(err, GitError::NotTopLevel { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("src") && msg.contains("top level"), "{msg}");
    let err = Repo::open(&dir.path().join(".git")).unwrap_err();
    assert!(matches!(err, GitError::NotARepository { .. }), "{err:?}");
}

#[test]
fn an_empty_repository_has_no_head() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q"]);
    let repo = Repo::open(dir.path()).unwrap();
    let err = repo.head().unwrap_err();
    assert!(matches!(err, GitError::NoCommits { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("no commits") && msg.contains(&repo.path().display().to_string()),
        "{msg}"
    );
}

#[test]
fn git_not_installed_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = Repo::open_with_program(dir.path(), Path::new("/nonexistent/bin/git")).unwrap_err();
    assert!(matches!(err, GitError::GitNotFound { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("is git installed") && msg.contains(&dir.path().display().to_string()),
        "{msg}"
    );
}
