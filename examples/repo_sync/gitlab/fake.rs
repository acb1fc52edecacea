//! The fake GitLab the tests of [`super`] run against: `group/sub/demo` with two commits
//! ([`C1`], [`C2`]) whose trees hold the awkward cases (a symlink, a submodule, a rename, a
//! file that becomes a symlink, a path with a space, a non-ASCII path), served by the shared
//! [`crate::http::test_server`].

use super::GitLabProject;
use crate::http::percent_decode;
use crate::http::test_server::{Reply, Seen, TestServer, serve};

/// The first commit of the fake project.
pub(super) const C1: &str = "1111111111111111111111111111111111111111";
/// The second commit of the fake project, at the head of its default branch.
pub(super) const C2: &str = "2222222222222222222222222222222222222222";
/// The API path of `group/sub/demo`.
pub(super) const PROJECT: &str = "/api/v4/projects/group%2Fsub%2Fdemo";
/// The token the fake project is read with.
pub(super) const TOKEN: &str = "glpat-test-secret";
/// The size of `big.bin`.
pub(super) const BIG: usize = 5000;

/// The projects of a test server.
pub(super) trait Projects {
    /// The project at `path` on this server, read with [`TOKEN`].
    fn project(&self, path: &str) -> GitLabProject;
    /// `group/sub/demo`, read with [`TOKEN`].
    fn demo(&self) -> GitLabProject;
}

impl Projects for TestServer {
    fn project(&self, path: &str) -> GitLabProject {
        GitLabProject::parse(&format!("{}/{path}", self.base_url), Some(TOKEN.into())).unwrap()
    }
    fn demo(&self) -> GitLabProject {
        self.project("group/sub/demo")
    }
}

/// The fake GitLab serving `group/sub/demo`.
pub(super) async fn gitlab() -> TestServer {
    serve(|_, r| fake_gitlab(r)).await
}

/// A tree entry of the fake project: `(path, type, mode, content)`.
type Entry = (&'static str, &'static str, &'static str, Vec<u8>);

/// Every tree entry at a commit of `group/sub/demo`.
fn tree(commit: &str) -> Option<Vec<Entry>> {
    let blob = |path, mode, content: &[u8]| (path, "blob", mode, content.to_vec());
    let dir = |path| (path, "tree", "040000", Vec::new());
    let mut entries = vec![
        dir("docs"),
        dir("src"),
        dir("vendor"),
        blob("big.bin", "100644", &[b'z'; BIG]),
        blob("docs/my notes.md", "100644", b"notes with a space\n"),
        blob("link", "120000", b"README.md"),
        blob("src/main.rs", "100755", b"fn main() {}\n"),
        ("vendor/lib", "commit", "160000", Vec::new()),
    ];
    match commit {
        C1 => entries.extend([
            blob("README.md", "100644", b"# demo\n"),
            blob("docs/was_file.md", "100644", b"soon a link\n"),
            blob("docs/한국어.md", "100644", "안녕하세요\n".as_bytes()),
            blob("gone.txt", "100644", b"bye\n"),
            blob("src/old_name.rs", "100644", b"pub fn f() {}\n"),
        ]),
        C2 => entries.extend([
            blob("README.md", "100644", b"# demo v2\n"),
            blob("docs/was_file.md", "120000", b"../README.md"),
            blob("docs/한국어.md", "100644", "안녕\n".as_bytes()),
            blob("link2", "120000", b"src/main.rs"),
            blob("new.txt", "100644", b"new\n"),
            blob("src/new_name.rs", "100644", b"pub fn f() {}\n"),
            ("vendor/lib2", "commit", "160000", Vec::new()),
        ]),
        _ => return None,
    }
    Some(entries)
}

/// A diff of the compare endpoint; `a`/`b` are the old and new modes (`None`: not sent).
fn diff(old: &str, new: &str, a: Option<&str>, b: Option<&str>) -> serde_json::Value {
    let mut d = serde_json::json!({
        "old_path": old, "new_path": new, "diff": "@@ -1 +1 @@\n",
        "new_file": a == Some("0"), "deleted_file": b == Some("0"),
        "renamed_file": old != new,
    });
    if let (Some(a), Some(b)) = (a, b) {
        d["a_mode"] = a.into();
        d["b_mode"] = b.into();
    }
    d
}

/// An error status with GitLab's `{"message": text}` body.
pub(super) fn message(status: u16, text: &str) -> Reply {
    Reply::Json(status, vec![], serde_json::json!({ "message": text }))
}

/// The answer of the fake GitLab to a request, as GitLab would give it.
pub(super) fn fake_gitlab(r: &Seen) -> Reply {
    let Some(rest) = r.path().strip_prefix(PROJECT) else {
        return message(404, "404 Project Not Found");
    };
    if !rest.is_empty() && !rest.starts_with('/') {
        return message(404, "404 Project Not Found");
    }
    if rest.is_empty() {
        return Reply::Json(
            200,
            vec![],
            serde_json::json!({"id": 7, "path_with_namespace": "group/sub/demo",
                               "default_branch": "release/v1"}),
        );
    }
    if rest == "/repository/commits/release%2Fv1" {
        return Reply::Json(200, vec![], serde_json::json!({"id": C2, "title": "two"}));
    }
    if rest == "/repository/tree" {
        let Some(entries) = tree(&r.query("ref").unwrap_or_default()) else {
            return message(404, "404 Tree Not Found");
        };
        if r.query("recursive").as_deref() != Some("true")
            || r.query("per_page").as_deref() != Some("100")
        {
            return message(400, "expected recursive=true&per_page=100");
        }
        let half = entries.len().div_ceil(2);
        let (page, next) = match r.query("page").as_deref() {
            Some("1") | None => (&entries[..half], "2"),
            Some("2") => (&entries[half..], ""),
            _ => (&entries[..0], ""),
        };
        let json: Vec<serde_json::Value> = page
            .iter()
            .map(|(path, kind, mode, _)| {
                let name = path.rsplit('/').next().unwrap();
                serde_json::json!({"id": "abc", "name": name, "type": kind,
                                   "path": path, "mode": mode})
            })
            .collect();
        return Reply::Json(
            200,
            vec![("X-Next-Page", next.into()), ("X-Per-Page", "100".into())],
            serde_json::Value::Array(json),
        );
    }
    if rest == "/repository/compare" {
        if r.query("straight").as_deref() != Some("true") {
            return message(400, "expected straight=true");
        }
        let (from, to) = (r.query("from").unwrap(), r.query("to").unwrap());
        if tree(&from).is_none() || tree(&to).is_none() {
            return message(404, "404 Ref Not Found");
        }
        if from == to {
            return Reply::Json(
                200,
                vec![],
                serde_json::json!({"commit": null, "commits": [], "diffs": [],
                                   "compare_timeout": false, "compare_same_ref": true}),
            );
        }
        assert_eq!((from.as_str(), to.as_str()), (C1, C2));
        let m = Some("100644");
        let diffs = vec![
            diff("README.md", "README.md", m, m),
            diff("docs/was_file.md", "docs/was_file.md", m, Some("120000")),
            // Older GitLab versions send no modes.
            diff("docs/한국어.md", "docs/한국어.md", None, None),
            diff("gone.txt", "gone.txt", m, Some("0")),
            diff("link2", "link2", Some("0"), Some("120000")),
            diff("new.txt", "new.txt", Some("0"), m),
            diff("src/old_name.rs", "src/new_name.rs", m, m),
            diff("vendor/lib2", "vendor/lib2", Some("0"), Some("160000")),
        ];
        return Reply::Json(
            200,
            vec![],
            serde_json::json!({"commit": {"id": C2}, "commits": [{"id": C2}],
                               "diffs": diffs, "compare_timeout": false,
                               "compare_same_ref": false}),
        );
    }
    if let Some(encoded) = rest
        .strip_prefix("/repository/files/")
        .and_then(|p| p.strip_suffix("/raw"))
    {
        if encoded.contains('/') {
            return message(400, "the file path must be URL-encoded");
        }
        let path = percent_decode(encoded).unwrap();
        let Some(entries) = tree(&r.query("ref").unwrap_or_default()) else {
            return message(404, "404 Commit Not Found");
        };
        return match entries.into_iter().find(|e| e.0 == path && e.1 == "blob") {
            Some((_, _, _, content)) => Reply::Bytes(200, content),
            None => message(404, "404 File Not Found"),
        };
    }
    message(404, "404 Not Found")
}

/// The regular files at [`C1`], sorted.
pub(super) fn c1_files() -> Vec<&'static str> {
    vec![
        "README.md",
        "big.bin",
        "docs/my notes.md",
        "docs/was_file.md",
        "docs/한국어.md",
        "gone.txt",
        "src/main.rs",
        "src/old_name.rs",
    ]
}
