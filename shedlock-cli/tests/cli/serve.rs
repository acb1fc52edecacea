//! `shedlock serve`: refused without authentication (or with `--no-auth` off loopback, or a
//! token under 16 characters) before anything opens; on a store, the API answers what `jobs
//! --json`, `list --json` and `history --json` print, field for field; a token guards it; it
//! answers only for its own host names (`--allowed-host`), holds under slow clients, and
//! SIGTERM stops it (exit 0).

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use shedlock::history::{NewRun, RunOutcome};
use shedlock::schedules::{NewSchedule, ScheduleStore};
use shedlock::{LockProvider, RunStore};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::common::{CliDb, TEN_MINUTES, cfg, cli, command, provider, run};

/// A `GET` over HTTP/1.1 (the connection closed after it): the status and the body.
pub(crate) async fn get(address: &str, path: &str, token: Option<&str>) -> (u16, String) {
    get_as(address, address, path, token).await
}

/// A `GET` for `host` (the `Host` header) sent to `address`.
async fn get_as(address: &str, host: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, body.to_owned())
}

/// A running `shedlock serve`, stopped by SIGTERM when dropped (and killed if it lingers).
pub(crate) struct Served {
    child: tokio::process::Child,
    pub(crate) address: String,
}

pub(crate) async fn serve(url: &str, table: &str, extra: &[&str], env: &[(&str, &str)]) -> Served {
    let mut args = vec![
        "--database-url",
        url,
        "--table",
        table,
        "serve",
        "--listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let mut cmd = command(&args);
    cmd.envs(env.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("serve says where it listens within a minute")
        .unwrap()
        .expect("a line");
    let address = first
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    Served { child, address }
}

impl Served {
    async fn stop(mut self) -> i32 {
        let pid = self.child.id().expect("running") as i32;
        // SAFETY-free: kill(1) by its command, as an operator would.
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("serve stops within 30 s of SIGTERM")
            .unwrap();
        status.code().expect("exited, not killed")
    }
}

/// The serve API and the commands' `--json` print the same objects.
pub(crate) async fn serve_answers_what_the_commands_print<D: CliDb>(db: &std::sync::Arc<D>)
where
    D::Provider: ScheduleStore,
{
    let p = provider(db.as_ref()).await;
    p.create_schedule(
        &NewSchedule::job(
            "served-job",
            "h",
            "{}",
            "0 0 3 * * *",
            Some("Asia/Seoul".into()),
        ),
        "test",
    )
    .await
    .unwrap();
    let guard = p
        .lock(&cfg("served-job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    for outcome in [RunOutcome::Executed, RunOutcome::Failed] {
        p.record_run(&NewRun::new("served-job", "served-job", None, outcome))
            .await
            .unwrap();
    }
    let url = db.url();
    let served = serve(&url, &db.table(), &["--no-auth"], &[]).await;

    let (status, body) = get(&served.address, "/api/v1/jobs", None).await;
    assert_eq!(status, 200, "{body}");
    let mut api: Value = serde_json::from_str(&body).unwrap();
    // The API pages the jobs (a hundred a page); the command prints them all.
    let paging = api.as_object_mut().unwrap();
    for key in ["page", "pages", "next"] {
        assert!(paging.remove(key).is_some(), "{key} in {body}");
    }
    let printed: Value =
        serde_json::from_str(&cli(db.as_ref(), &["jobs", "--json"], "").await.stdout).unwrap();
    assert_eq!(api, printed, "jobs: the API and `jobs --json`");

    let (_, body) = get(&served.address, "/api/v1/runs", None).await;
    let api: Value = serde_json::from_str(&body).unwrap();
    let printed: Value =
        serde_json::from_str(&cli(db.as_ref(), &["history", "--json"], "").await.stdout).unwrap();
    assert_eq!(
        api["runs"], printed,
        "history: the API and `history --json`"
    );

    let (_, body) = get(&served.address, "/api/v1/locks", None).await;
    let mut api: Value = serde_json::from_str(&body).unwrap();
    let mut printed: Value =
        serde_json::from_str(&cli(db.as_ref(), &["list", "--json"], "").await.stdout).unwrap();
    // The time left is read at each call.
    for locks in [&mut api, &mut printed] {
        for lock in locks.as_array_mut().unwrap() {
            assert!(lock["remaining_ms"].as_u64().is_some(), "{lock}");
            lock["remaining_ms"] = Value::Null;
        }
    }
    assert_eq!(api, printed, "locks: the API and `list --json`");

    let (status, page) = get(&served.address, "/jobs", None).await;
    assert_eq!(status, 200);
    assert!(
        page.contains("data-job=\"served-job\"") && !page.contains(&url),
        "{page}"
    );
    assert_eq!(served.stop().await, 0, "SIGTERM stops it cleanly");
    drop(guard);
}

/// With a token: nothing without it, everything with it; the token never in a page.
pub(crate) async fn serve_with_a_token_refuses_requests_without_it<D: CliDb>(
    db: &std::sync::Arc<D>,
) {
    let url = db.url();
    let token = "a-long-random-dashboard-token";
    let served = serve(&url, &db.table(), &[], &[("SHEDLOCK_WEB_TOKEN", token)]).await;
    assert_eq!(get(&served.address, "/api/v1/locks", None).await.0, 401);
    assert_eq!(
        get(&served.address, "/api/v1/locks", Some("wrong")).await.0,
        401
    );
    assert_eq!(
        get(&served.address, "/jobs", None).await.0,
        303,
        "a browser is sent to sign in"
    );
    let (status, body) = get(&served.address, "/api/v1/locks", Some(token)).await;
    assert_eq!(status, 200, "{body}");
    let (_, page) = get(&served.address, "/", Some(token)).await;
    assert!(!page.contains(token));
    assert_eq!(served.stop().await, 0);
}

/// Refused before anything opens: no authentication, `--no-auth` off loopback, an empty
/// token (exit 2, one line naming what to do).
pub(crate) async fn serve_refuses_to_serve_without_authentication() {
    let no_auth = run(&["--database-url", "/nonexistent/x.db", "serve"], &[], "").await;
    assert_eq!(no_auth.code, 2, "{no_auth:#?}");
    assert!(
        no_auth
            .error_line()
            .contains("the dashboard needs authentication"),
        "{no_auth:#?}"
    );
    let open = run(
        &[
            "--database-url",
            "/nonexistent/x.db",
            "serve",
            "--no-auth",
            "--listen",
            "0.0.0.0:8080",
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(open.code, 2, "{open:#?}");
    assert!(
        open.error_line()
            .contains("only allowed on a loopback address, not on 0.0.0.0:8080"),
        "{open:#?}"
    );
    let empty = run(
        &["--database-url", "/nonexistent/x.db", "serve"],
        &[("SHEDLOCK_WEB_TOKEN", " ")],
        "",
    )
    .await;
    assert_eq!(empty.code, 2, "{empty:#?}");
    assert!(empty.error_line().contains("token is empty"), "{empty:#?}");
    let short = run(
        &[
            "--database-url",
            "/nonexistent/x.db",
            "serve",
            "--token",
            "a",
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(short.code, 2, "{short:#?}");
    let line = short.error_line();
    assert!(
        line.contains("1 character long: give at least 16"),
        "{short:#?}"
    );
    let open_names = run(
        &[
            "--database-url",
            "/nonexistent/x.db",
            "serve",
            "--no-auth",
            "--allowed-host",
            "ops.example.com",
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(open_names.code, 2, "{open_names:#?}");
    assert!(
        open_names.stderr.contains("--allowed-host"),
        "{open_names:#?}"
    );
}

/// DNS rebinding and slow clients, on an SQLite file: without authentication it answers only
/// for the loopback names (421 for another `Host`, naming it); with a token also for
/// `--allowed-host`; 100 connections with unfinished request heads (more than its 64) leave a
/// real request answered, and are closed by its header timeout.
pub(crate) async fn serve_answers_its_own_hosts_and_holds_under_slow_clients_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("served.db").display().to_string();
    let migrated = run(&["--database-url", &url, "migrate"], &[], "").await;
    assert_eq!(migrated.code, 0, "{migrated:#?}");
    let served = serve(&url, "shedlock", &["--no-auth"], &[]).await;
    let port = served.address.rsplit(':').next().unwrap().to_owned();
    let (status, body) = get_as(
        &served.address,
        &format!("attacker.example:{port}"),
        "/",
        None,
    )
    .await;
    assert_eq!(status, 421, "{body}");
    assert!(
        body.contains(&format!("\"attacker.example:{port}\"")),
        "{body}"
    );
    for host in ["localhost", "127.0.0.1", "[::1]"] {
        let (status, _) = get_as(&served.address, &format!("{host}:{port}"), "/", None).await;
        assert_eq!(status, 200, "{host}");
    }

    let slow = shedlock_suite::slow_clients::open(&served.address, 100, b"GET / HT").await;
    let (status, _) = tokio::time::timeout(
        Duration::from_secs(60),
        get(&served.address, "/api/v1/locks", None),
    )
    .await
    .expect("answered within 60 s under 100 slow clients");
    assert_eq!(status, 200);
    let cut = shedlock_suite::slow_clients::count_closed(slow, Duration::from_secs(60)).await;
    assert_eq!(cut, 100, "slow clients closed by the header timeout");
    assert_eq!(served.stop().await, 0);

    let token = "a-long-random-dashboard-token";
    let served = serve(
        &url,
        "shedlock",
        &["--allowed-host", "ops.example.com"],
        &[("SHEDLOCK_WEB_TOKEN", token)],
    )
    .await;
    let (status, body) = get_as(
        &served.address,
        "ops.example.com",
        "/api/v1/locks",
        Some(token),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_as(
        &served.address,
        "evil.example",
        "/api/v1/locks",
        Some(token),
    )
    .await;
    assert_eq!(status, 421, "{body}");
    assert!(body.contains("--allowed-host evil.example"), "{body}");
    assert_eq!(served.stop().await, 0);
}
