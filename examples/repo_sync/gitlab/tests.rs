//! The GitLab client against the fake GitLab of [`super::fake`]: URLs, the API calls, errors,
//! retries, size limits and redirects.

use std::time::{Duration, Instant};

use super::fake::*;
use super::request::RETRY;
use super::*;
use crate::http::test_server::{Reply, Seen, serve, unused_port};

// --- URLs and configuration --------------------------------------------------------------

#[test]
fn parse_accepts_project_urls() {
    let cases = [
        (
            "https://gitlab.example.com/group/subgroup/project",
            "https://gitlab.example.com/group/subgroup/project",
            "project",
        ),
        (
            "https://gitlab.example.com/group/project.git",
            "https://gitlab.example.com/group/project",
            "project",
        ),
        (
            "  http://GitLab.Example.com:8080/a/b/c/d-e.f_g/  ",
            "http://gitlab.example.com:8080/a/b/c/d-e.f_g",
            "d-e.f_g",
        ),
        (
            "https://gitlab.example.com:443/group/project.git/",
            "https://gitlab.example.com/group/project",
            "project",
        ),
    ];
    for (given, url, name) in cases {
        let p = GitLabProject::parse(given, None).unwrap();
        assert_eq!((p.url(), p.name()), (url, name), "{given}");
    }
    let p =
        GitLabProject::parse("https://gitlab.example.com/group/subgroup/project", None).unwrap();
    assert_eq!(
        p.api,
        "https://gitlab.example.com/api/v4/projects/group%2Fsubgroup%2Fproject"
    );
}

#[test]
fn parse_refuses_bad_urls_naming_them() {
    let cases = [
        ("ftp://gitlab.example.com/group/project", "scheme"),
        ("ssh://git@gitlab.example.com/group/project.git", "scheme"),
        (
            "git@gitlab.example.com:group/project.git",
            "not a valid URL",
        ),
        ("gitlab.example.com/group/project", "not a valid URL"),
        ("https://gitlab.example.com", "no project path"),
        ("https://gitlab.example.com/", "no project path"),
        ("https://gitlab.example.com/group", "no project path"),
        ("https://gitlab.example.com/.git", "no project path"),
        (
            "https://gitlab.example.com/group/project?ref=main",
            "query string",
        ),
        ("https://gitlab.example.com/group/project?", "query string"),
        (
            "https://gitlab.example.com/group/project#readme",
            "fragment",
        ),
        (
            "https://user:pw@gitlab.example.com/group/project",
            "credentials",
        ),
        (
            "https://gitlab.example.com/group/project/-/tree/main",
            "inside a project",
        ),
        ("", "empty"),
    ];
    for (url, expected) in cases {
        let err = GitLabProject::parse(url, None).unwrap_err();
        assert!(
            matches!(err, GitLabError::InvalidUrl { .. }),
            "{url}: {err:?}"
        );
        let msg = err.to_string();
        // As given; with its password masked when it holds one.
        let shown = crate::http::shown_url(url.trim());
        assert!(
            msg.contains(expected) && msg.contains(&format!("{shown:?}")) && !msg.contains(":pw@"),
            "{url}: {msg}"
        );
    }
    let err = GitLabProject::parse("https://h/g/p", Some("bad\ntoken".into())).unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    assert!(!err.to_string().contains("bad\ntoken"), "{err}");
}

#[test]
fn debug_does_not_print_the_token() {
    let p = GitLabProject::parse("https://h/g/p", Some(TOKEN.into())).unwrap();
    let debug = format!("{p:?}");
    assert!(
        !debug.contains(TOKEN) && debug.contains("redacted") && debug.contains("https://h/g/p"),
        "{debug}"
    );
    let none = format!("{:?}", GitLabProject::parse("https://h/g/p", None).unwrap());
    assert!(none.contains("token: None"), "{none}");
    // An empty token counts as none.
    let empty = GitLabProject::parse("https://h/g/p", Some("  ".into())).unwrap();
    assert!(empty.token.is_none());
}

#[test]
fn backoff_doubles_and_retry_after_is_capped() {
    let ms = Duration::from_millis;
    assert_eq!(RETRY.max_retries, 3);
    assert_eq!(RETRY.backoff(1, None), ms(200));
    assert_eq!(RETRY.backoff(2, None), ms(400));
    assert_eq!(RETRY.backoff(3, None), ms(800));
    assert_eq!(
        RETRY.backoff(1, Some(Duration::from_secs(2))),
        Duration::from_secs(2)
    );
    assert_eq!(
        RETRY.backoff(1, Some(Duration::from_secs(3600))),
        Duration::from_secs(5)
    );
}

// --- the API -----------------------------------------------------------------------------

#[tokio::test]
async fn head_is_the_default_branch_commit_and_the_token_is_sent() {
    let server = gitlab().await;
    assert_eq!(server.demo().head().await.unwrap(), C2);
    let requests = server.requests();
    let targets: Vec<&str> = requests.iter().map(|r| r.target.as_str()).collect();
    assert_eq!(
        targets,
        [
            PROJECT.to_owned(),
            format!("{PROJECT}/repository/commits/release%2Fv1")
        ]
    );
    for r in &requests {
        assert_eq!(r.header("private-token").as_deref(), Some(TOKEN), "{r:?}");
        assert!(r.head.starts_with("GET "), "{}", r.head);
    }
    // Without a token, no header.
    let anonymous =
        GitLabProject::parse(&format!("{}/group/sub/demo.git", server.base_url), None).unwrap();
    anonymous.head().await.unwrap();
    assert_eq!(server.requests()[2].header("private-token"), None);
}

#[tokio::test]
async fn list_files_follows_pages_and_skips_symlinks_and_submodules() {
    let server = gitlab().await;
    let project = server.demo();
    assert_eq!(project.list_files(C1).await.unwrap(), c1_files());
    let pages: Vec<Option<String>> = server.requests().iter().map(|r| r.query("page")).collect();
    assert_eq!(pages, [Some("1".into()), Some("2".into())]);
    assert_eq!(
        project.list_files(C2).await.unwrap(),
        [
            "README.md",
            "big.bin",
            "docs/my notes.md",
            "docs/한국어.md",
            "new.txt",
            "src/main.rs",
            "src/new_name.rs",
        ]
    );
    let err = project.list_files("deadbeef").await.unwrap_err();
    assert!(
        matches!(&err, GitLabError::UnknownRevision { revision, .. } if revision == "deadbeef"),
        "{err:?}"
    );
}

#[tokio::test]
async fn list_files_refuses_a_full_page_without_pagination_headers() {
    let entries: Vec<serde_json::Value> = (0..100)
        .map(|i| serde_json::json!({"path": format!("f{i:03}"), "type": "blob", "mode": "100644"}))
        .collect();
    let server =
        serve(move |_, _| Reply::Json(200, vec![], serde_json::Value::Array(entries.clone())))
            .await;
    let err = server.demo().list_files(C1).await.unwrap_err();
    assert!(
        matches!(err, GitLabError::InvalidResponse { .. })
            && err.to_string().contains("X-Next-Page"),
        "{err}"
    );
    // A page number that does not advance is refused too (no endless loop).
    let server = serve(|_, _| {
        Reply::Json(
            200,
            vec![("X-Next-Page", "1".into())],
            serde_json::json!([]),
        )
    })
    .await;
    let err = server.demo().list_files(C1).await.unwrap_err();
    assert!(err.to_string().contains("does not follow page 1"), "{err}");
}

#[tokio::test]
async fn changes_between_commits() {
    let server = gitlab().await;
    let project = server.demo();
    let changes = project.changes(C1, C2).await.unwrap();
    assert_eq!(
        changes.upserted,
        ["README.md", "docs/한국어.md", "new.txt", "src/new_name.rs"]
    );
    // The deletion, the rename's old path and the file that became a symlink.
    assert_eq!(
        changes.deleted,
        ["docs/was_file.md", "gone.txt", "src/old_name.rs"]
    );
    // Applying the changes to the first listing gives the second.
    let mut files: Vec<String> = project
        .list_files(C1)
        .await
        .unwrap()
        .into_iter()
        .filter(|f| !changes.deleted.contains(f) && !changes.upserted.contains(f))
        .chain(changes.upserted.iter().cloned())
        .collect();
    files.sort();
    assert_eq!(files, project.list_files(C2).await.unwrap());
    assert!(project.changes(C2, C2).await.unwrap().is_empty());
}

#[test]
fn a_path_deleted_and_added_again_is_only_upserted() {
    let diffs: Vec<Diff> = serde_json::from_value(serde_json::json!([
        {"old_path": "a", "new_path": "b", "renamed_file": true},
        {"old_path": "a", "new_path": "a", "new_file": true},
        {"old_path": "c", "new_path": "c", "a_mode": "120000", "b_mode": "100644"},
        {"old_path": "d", "new_path": "d", "a_mode": "160000", "b_mode": "0", "deleted_file": true},
    ]))
    .unwrap();
    let changes = changes_from_diffs(diffs);
    assert_eq!(changes.upserted, ["a", "b", "c"]);
    assert!(changes.deleted.is_empty(), "{changes:?}");
}

#[tokio::test]
async fn an_unknown_from_commit_is_unknown_revision() {
    let server = gitlab().await;
    let err = server.demo().changes("f00d", C2).await.unwrap_err();
    assert!(
        matches!(&err, GitLabError::UnknownRevision { revision, project }
            if revision == "f00d" && project.ends_with("/group/sub/demo")),
        "{err:?}"
    );
    assert!(err.to_string().contains("f00d"), "{err}");
    assert_eq!(server.requests().len(), 1, "a 404 is not retried");
}

#[tokio::test]
async fn a_compare_timeout_is_an_error_not_a_partial_change_set() {
    let server = serve(|_, _| {
        Reply::Json(
            200,
            vec![],
            serde_json::json!({"diffs": [], "compare_timeout": true}),
        )
    })
    .await;
    let err = server.demo().changes(C1, C2).await.unwrap_err();
    assert!(
        matches!(err, GitLabError::InvalidResponse { .. })
            && err.to_string().contains("compare_timeout"),
        "{err}"
    );
}

#[tokio::test]
async fn read_returns_exact_bytes_with_encoded_paths() {
    let server = gitlab().await;
    let project = server.demo();
    let read = |path: &'static str| {
        let project = project.clone();
        async move { project.read(C1, path, 1 << 20).await.unwrap() }
    };
    assert_eq!(read("README.md").await, Blob::Data(b"# demo\n".to_vec()));
    assert_eq!(
        read("docs/my notes.md").await,
        Blob::Data(b"notes with a space\n".to_vec())
    );
    assert_eq!(
        read("docs/한국어.md").await,
        Blob::Data("안녕하세요\n".as_bytes().to_vec())
    );
    assert_eq!(read("big.bin").await, Blob::Data(vec![b'z'; BIG]));
    let targets: Vec<String> = server.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        targets[1..3],
        [
            format!("{PROJECT}/repository/files/docs%2Fmy%20notes.md/raw?ref={C1}"),
            format!(
                "{PROJECT}/repository/files/docs%2F%ED%95%9C%EA%B5%AD%EC%96%B4.md/raw?ref={C1}"
            ),
        ]
    );
    // Exactly at the limit is not too large.
    assert_eq!(
        project.read(C1, "big.bin", BIG as u64).await.unwrap(),
        Blob::Data(vec![b'z'; BIG])
    );
    assert_eq!(
        project.read(C1, "big.bin", 100).await.unwrap(),
        Blob::TooLarge { bytes: BIG as u64 }
    );
}

#[tokio::test]
async fn too_large_by_content_length_does_not_read_the_body() {
    // 10 MB announced, 10 bytes sent, then nothing: reading the body would hang.
    let server = serve(|_, _| Reply::Stall {
        len: 10_000_000,
        sent: 10,
    })
    .await;
    let blob = tokio::time::timeout(
        Duration::from_secs(5),
        server.demo().read(C1, "huge.bin", 1000),
    )
    .await
    .expect("returns without reading the body")
    .unwrap();
    assert_eq!(blob, Blob::TooLarge { bytes: 10_000_000 });
}

#[tokio::test]
async fn too_large_while_streaming_stops_reading_past_the_limit() {
    // No Content-Length and a body that never ends.
    let server = serve(|_, _| Reply::Endless).await;
    let blob = tokio::time::timeout(
        Duration::from_secs(10),
        server.demo().read(C1, "endless.log", 10_000),
    )
    .await
    .expect("stops reading")
    .unwrap();
    let Blob::TooLarge { bytes } = blob else {
        panic!("{blob:?}")
    };
    assert!(bytes > 10_000 && bytes <= 10_000 + 1024, "{bytes}");
    // The server stops soon after: the connection was dropped, not drained.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let streamed = server.streamed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.streamed(), streamed);
}

#[tokio::test]
async fn missing_project_and_file_are_not_found() {
    let server = gitlab().await;
    let err = server
        .project("group/sub/missing")
        .head()
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitLabError::NotFound { project, what }
            if project == &format!("{}/group/sub/missing", server.base_url) && what == "project"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("group/sub/missing")
            && msg.contains("check the project URL")
            && msg.contains("token"),
        "{msg}"
    );
    assert_eq!(server.requests().len(), 1, "a 404 is not retried");
    // The project's 404 is recognized on other endpoints too.
    let err = server
        .project("group/sub/missing")
        .list_files(C1)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitLabError::NotFound { what, .. } if what == "project"),
        "{err:?}"
    );

    let err = server
        .demo()
        .read(C1, "nope/x y.rs", 100)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, GitLabError::NotFound { what, .. } if what.contains("\"nope/x y.rs\"") && what.contains(C1)),
        "{err:?}"
    );
}

#[tokio::test]
async fn unauthorized_says_what_is_wrong_with_the_token() {
    let server = serve(|_, r| {
        if r.header("private-token").as_deref() == Some(TOKEN) {
            fake_gitlab(r)
        } else {
            message(401, "401 Unauthorized")
        }
    })
    .await;
    let anonymous =
        GitLabProject::parse(&format!("{}/group/sub/demo", server.base_url), None).unwrap();
    let err = anonymous.head().await.unwrap_err();
    assert!(
        matches!(
            err,
            GitLabError::Status {
                status: 401,
                attempts: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("401 Unauthorized")
            && msg.contains("no GitLab token")
            && msg.contains("read_api"),
        "{msg}"
    );
    let wrong = GitLabProject::parse(
        &format!("{}/group/sub/demo", server.base_url),
        Some("glpat-wrong".into()),
    )
    .unwrap();
    let msg = wrong.list_files(C1).await.unwrap_err().to_string();
    assert!(
        msg.contains("token was refused")
            && msg.contains("read_api")
            && msg.contains("read_repository"),
        "{msg}"
    );
    assert!(!msg.contains("glpat-wrong"), "{msg}");
    assert_eq!(server.requests().len(), 2, "401 is not retried");
    assert_eq!(server.demo().head().await.unwrap(), C2);
}

#[tokio::test]
async fn retries_503_then_succeeds() {
    let server = serve(|n, r| {
        if n < 2 {
            message(503, "try later")
        } else {
            fake_gitlab(r)
        }
    })
    .await;
    let started = Instant::now();
    assert_eq!(server.demo().list_files(C2).await.unwrap().len(), 7);
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "3 for page 1, 1 for page 2");
    assert!(
        requests[..3]
            .iter()
            .all(|r| r.query("page").as_deref() == Some("1"))
    );
    // Backoff 200 ms then 400 ms.
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn honours_retry_after_on_429() {
    let server = serve(|n, r| {
        if n == 0 {
            Reply::Json(
                429,
                vec![("Retry-After", "1".into())],
                serde_json::json!({"message": "429 Too Many Requests"}),
            )
        } else {
            fake_gitlab(r)
        }
    })
    .await;
    let started = Instant::now();
    assert_eq!(server.demo().head().await.unwrap(), C2);
    assert_eq!(server.requests().len(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn gives_up_after_three_retries_naming_status_and_attempts() {
    let server = serve(|_, _| Reply::Bytes(500, b"boom".to_vec())).await;
    let err = server.demo().head().await.unwrap_err();
    assert_eq!(server.requests().len(), 4);
    assert!(
        matches!(
            err,
            GitLabError::Status {
                status: 500,
                attempts: 4,
                ..
            }
        ),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("500 Internal Server Error") && msg.contains("boom") && msg.contains(PROJECT),
        "{msg}"
    );
}

#[tokio::test]
async fn other_4xx_and_bad_json_are_not_retried() {
    let server = serve(|n, _| match n {
        0 => message(400, "400 Bad request - ref is invalid"),
        _ => Reply::Bytes(200, b"<html>sign in</html>".to_vec()),
    })
    .await;
    let project = server.demo();
    let err = project.changes(C1, C2).await.unwrap_err();
    assert!(
        matches!(
            err,
            GitLabError::Status {
                status: 400,
                attempts: 1,
                ..
            }
        ) && err.to_string().contains("ref is invalid"),
        "{err:?}"
    );
    let err = project.head().await.unwrap_err();
    assert!(
        matches!(err, GitLabError::InvalidResponse { .. }) && err.to_string().contains("sign in"),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn timeouts_are_retried_then_reported() {
    let server = serve(|_, _| Reply::Hang).await;
    let started = Instant::now();
    let err = server
        .demo()
        .timeout(Duration::from_millis(200))
        .head()
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err, GitLabError::Transport { attempts: 4, .. }),
        "{err:?}"
    );
    assert_eq!(server.requests().len(), 4);
    // 4 × 200 ms of waiting plus 200 + 400 + 800 ms of backoff.
    assert!(elapsed >= Duration::from_millis(2200), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(err.to_string().contains("timed out"), "{err}");
}

#[tokio::test]
async fn connection_refused_is_retried_then_reported() {
    let port = unused_port().await;
    let project = GitLabProject::parse(&format!("http://127.0.0.1:{port}/g/p"), None).unwrap();
    let err = project.head().await.unwrap_err();
    assert!(
        matches!(err, GitLabError::Transport { attempts: 4, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}

#[tokio::test]
async fn redirects_to_another_host_are_not_followed_with_the_token() {
    let elsewhere = gitlab().await;
    // `localhost` is another host than `127.0.0.1` as far as the token is concerned.
    let target = elsewhere.base_url.replace("127.0.0.1", "localhost");
    let server = serve(move |_, r| {
        if r.target.starts_with("/moved") {
            fake_gitlab(&Seen {
                target: r.target.trim_start_matches("/moved").to_owned(),
                ..r.clone()
            })
        } else if r.target.contains("tree") {
            // Same host: followed.
            Reply::Json(
                302,
                vec![("Location", format!("/moved{}", r.target))],
                serde_json::json!({}),
            )
        } else {
            Reply::Json(
                302,
                vec![("Location", format!("{target}{}", r.target))],
                serde_json::json!({}),
            )
        }
    })
    .await;
    let project = server.demo();
    assert_eq!(project.list_files(C1).await.unwrap(), c1_files());
    let err = project.head().await.unwrap_err();
    assert!(
        matches!(err, GitLabError::Status { status: 302, .. })
            && err.to_string().contains("not followed"),
        "{err:?}"
    );
    assert!(elsewhere.requests().is_empty());
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("private-token").as_deref() == Some(TOKEN))
    );
}
