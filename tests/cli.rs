//! The `shedlock` command-line tool, run as a subprocess (the real binary, built here if it is
//! stale) against PostgreSQL, MariaDB and SQLite.
//!
//! The cases are written once, generic over the backend, and instantiated per backend by
//! `cli_suite!`; each uses its own uniquely named table, dropped at the end. What every backend
//! answers the same way (bad arguments, unreachable servers, missing files) is tested once.
#![allow(missing_docs)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde_json::Value;
use shedlock::{
    LockConfiguration, LockProvider, LockState, NewRun, RunOutcome, RunQuery, SqliteLockProvider,
};
use shedlock_suite::{MySql, Opts, Postgres, Sqlite, TestDb, unique_name};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HOLDER: &str = "cli-worker-7";
const TEN_MINUTES: Duration = Duration::from_secs(600);

/// The `shedlock` binary of this target directory, built once per test process.
fn binary() -> PathBuf {
    shedlock_suite::shedlock_binary()
}

/// What one run of the tool did.
#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Out {
    /// The only line on stderr (every failure is exactly one).
    fn error_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one stderr line expected: {self:#?}");
        lines[0]
    }

    fn json(&self) -> Vec<Value> {
        match serde_json::from_str(&self.stdout) {
            Ok(Value::Array(items)) => items,
            other => panic!("a JSON array expected: {other:?} from {self:#?}"),
        }
    }
}

fn command(args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(binary());
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("SHEDLOCK_TABLE")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn finish(output: std::process::Output) -> Out {
    let out = Out {
        code: output
            .status
            .code()
            .expect("exited, not killed by a signal"),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    };
    assert!(
        !out.stderr.contains("panicked at") && !out.stderr.contains("backtrace"),
        "{out:#?}"
    );
    out
}

/// Runs `shedlock ARGS` with `env` set and `stdin` as its input.
async fn run(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Out {
    let mut cmd = command(args);
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    // A command that does not read its input may exit first: a closed pipe is fine.
    let _ = input.write_all(stdin.as_bytes()).await;
    drop(input);
    finish(child.wait_with_output().await.unwrap())
}

/// A backend the tool can be pointed at.
trait CliDb: TestDb {
    /// What `--database-url` gets.
    fn url(&self) -> String;
}

impl CliDb for Postgres {
    fn url(&self) -> String {
        shedlock_suite::postgres_url()
    }
}

impl CliDb for MySql {
    fn url(&self) -> String {
        shedlock_suite::mysql_url()
    }
}

impl CliDb for Sqlite {
    fn url(&self) -> String {
        self.path().display().to_string()
    }
}

/// `shedlock --database-url <db> --table <db's table> ARGS`, with `stdin` as input.
async fn cli<D: CliDb>(db: &D, args: &[&str], stdin: &str) -> Out {
    let url = db.url();
    let mut all = vec!["--database-url", &url, "--table", db.table()];
    all.extend_from_slice(args);
    run(&all, &[], stdin).await
}

async fn provider<D: CliDb>(db: &D) -> D::Provider {
    db.provider_with(Opts::default().locked_by(HOLDER)).await
}

fn cfg(name: &str, at_most: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, Duration::ZERO).unwrap()
}

fn tick(n: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + 60 * n, 0).unwrap()
}

fn secs(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn millis(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn time(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap_or_else(|| panic!("{value}")))
        .unwrap()
        .with_timezone(&Utc)
}

async fn state<P: LockProvider>(provider: &P, name: &str) -> LockState {
    provider
        .lock_state(name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("lock {name} has a row"))
}

/// An aligned text table, one map per row keyed by the header's titles. Each cell is cut at
/// the column where its title starts, so a cell that spilled over would show up broken.
fn parse_table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines();
    let header: Vec<char> = lines.next().expect("a header line").chars().collect();
    let starts: Vec<usize> = (0..header.len())
        .filter(|&i| header[i] != ' ' && (i == 0 || header[i - 1] == ' '))
        .collect();
    let cell = |chars: &[char], k: usize| -> String {
        let from = starts[k].min(chars.len());
        let to = starts
            .get(k + 1)
            .map_or(chars.len(), |&s| s.min(chars.len()));
        chars[from..to].iter().collect::<String>().trim().to_owned()
    };
    let titles: Vec<String> = (0..starts.len()).map(|k| cell(&header, k)).collect();
    lines
        .map(|line| {
            let chars: Vec<char> = line.chars().collect();
            for &start in &starts[1..] {
                if start < chars.len() {
                    assert_eq!(chars[start - 1], ' ', "misaligned row {line:?}");
                }
            }
            titles
                .iter()
                .enumerate()
                .map(|(k, title)| (title.clone(), cell(&chars, k)))
                .collect()
        })
        .collect()
}

fn column(rows: &[BTreeMap<String, String>], title: &str) -> Vec<String> {
    rows.iter().map(|row| row[title].clone()).collect()
}

// --- every backend ----------------------------------------------------------------------------

async fn migrate_creates_both_tables_and_is_idempotent<D: CliDb>(db: &D) {
    let table = unique_name("cli_m");
    let fresh = db.provider_for_table(&table);
    assert!(
        fresh.locks().await.is_err(),
        "{table} does not exist before migrate"
    );
    let url = db.url();
    let base = ["--database-url", url.as_str(), "--table", table.as_str()];
    let expected = format!(
        "tables {table} and {table}_runs are up to date ({})\n",
        D::BACKEND
    );
    for _ in 0..2 {
        let out = run(&[&base[..], &["migrate"]].concat(), &[], "").await;
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (0, expected.as_str(), "")
        );
        assert_eq!(fresh.locks().await.unwrap(), vec![]);
        assert_eq!(fresh.runs(&RunQuery::latest(5)).await.unwrap(), vec![]);
    }
    let out = run(&[&base[..], &["list"]].concat(), &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stdout,
        format!("no locks in table {table} ({})\n", D::BACKEND)
    );
    let out = run(&[&base[..], &["list", "--json"]].concat(), &[], "").await;
    assert_eq!((out.code, out.json()), (0, vec![]));
    let out = run(&[&base[..], &["history"]].concat(), &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stdout,
        format!("no runs in table {table}_runs ({})\n", D::BACKEND)
    );
    for t in [
        format!("{table}_runs"),
        format!("_{table}_migrations"),
        table,
    ] {
        db.exec(&format!("DROP TABLE IF EXISTS {t}")).await;
    }
}

async fn list_shows_held_and_free_locks<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let held = provider
        .lock(&cfg("held_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let free = provider
        .lock(&cfg("free_job", TEN_MINUTES).for_tick(tick(1)))
        .await
        .unwrap()
        .unwrap();
    let free_token = free.fencing_token();
    assert!(free.unlock().await.unwrap());
    let free_state = state(&provider, "free_job").await;

    let out = cli(db, &["list"], "").await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    let rows = parse_table(&out.stdout);
    assert_eq!(
        column(&rows, "NAME"),
        ["free_job", "held_job"],
        "{}",
        out.stdout
    );
    let (f, h) = (&rows[0], &rows[1]);
    assert_eq!(h["STATE"], "held");
    assert_eq!(h["LOCKED_BY"], HOLDER);
    assert_eq!(h["TOKEN"], held.fencing_token().to_string());
    assert_eq!(h["LAST_TICK"], "-");
    let remaining = humantime::parse_duration(&h["REMAINING"]).unwrap();
    assert!(
        (Duration::from_secs(540)..=TEN_MINUTES).contains(&remaining),
        "{}",
        out.stdout
    );
    assert!(h["LOCKED_UNTIL"] > h["LOCKED_AT"], "{}", out.stdout);
    assert_eq!(f["STATE"], "free");
    assert_eq!(f["REMAINING"], "-");
    assert_eq!(f["TOKEN"], free_token.to_string());
    assert_eq!(f["LAST_TICK"], secs(tick(1)));
    assert_eq!(f["LOCKED_UNTIL"], secs(free_state.locked_until));

    let out = cli(db, &["list", "--json"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let locks = out.json();
    assert_eq!(locks.len(), 2, "{}", out.stdout);
    let (f, h) = (&locks[0], &locks[1]);
    assert_eq!(h["name"], "held_job");
    assert_eq!(h["held"], true);
    assert_eq!(h["locked_by"], HOLDER);
    assert_eq!(h["fencing_token"], held.fencing_token());
    assert_eq!(h["last_tick"], Value::Null);
    let remaining_ms = h["remaining_ms"].as_u64().unwrap();
    assert!((540_000..=600_000).contains(&remaining_ms), "{h}");
    let until = time(&h["locked_until"]) - time(&h["locked_at"]);
    assert!(
        (599_000..=600_000).contains(&until.num_milliseconds()),
        "{h}"
    );
    assert_eq!(f["name"], "free_job");
    assert_eq!(f["held"], false);
    assert_eq!(f["remaining_ms"], 0);
    assert_eq!(f["fencing_token"], free_token);
    assert_eq!(time(&f["last_tick"]), tick(1));
    assert_eq!(f["locked_until"], millis(free_state.locked_until));
    assert_eq!(f["locked_at"], millis(free_state.locked_at));
    assert!(held.unlock().await.unwrap());
}

async fn unlock_of_a_missing_name_exits_3<D: CliDb>(db: &D) {
    for args in [
        &["unlock", "no_such_job"][..],
        &["unlock", "no_such_job", "--yes"],
    ] {
        let out = cli(db, args, "y\n").await;
        assert_eq!(out.code, 3, "{out:#?}");
        assert_eq!(out.stdout, "");
        assert_eq!(
            out.error_line(),
            format!(
                "shedlock: no lock named \"no_such_job\" in table {}; `shedlock list` shows the locks there",
                db.table()
            )
        );
    }
    let provider = db.provider();
    assert_eq!(provider.lock_state("no_such_job").await.unwrap(), None);
}

async fn unlock_declined_exits_4_and_keeps_the_lock<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let guard = provider
        .lock(&cfg("stuck_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    let before = state(&provider, "stuck_job").await;
    let prompt = format!("Release lock \"stuck_job\" held by {HOLDER} (token {token})? [y/N] ");
    for answer in ["n\n", "", "\n", "maybe\n"] {
        let out = cli(db, &["unlock", "stuck_job"], answer).await;
        assert_eq!(out.code, 4, "answer {answer:?}: {out:#?}");
        assert!(out.stderr.starts_with(&prompt), "{out:#?}");
        let last = out.stderr.lines().last().unwrap();
        assert_eq!(
            last,
            format!(
                "shedlock: not released: lock \"stuck_job\" is still held by {HOLDER} (token {token})"
            )
        );
        assert!(
            out.stdout.contains(&format!("locked_by     {HOLDER}\n")),
            "{}",
            out.stdout
        );
        assert!(
            out.stdout.contains(&format!("fencing_token {token}\n")),
            "{}",
            out.stdout
        );
        let after = state(&provider, "stuck_job").await;
        assert!(after.is_held(), "{after:?}");
        assert_eq!(
            (after.fencing_token, after.locked_until, after.locked_at),
            (token, before.locked_until, before.locked_at)
        );
    }
    assert!(guard.unlock().await.unwrap(), "the holder still holds it");
}

async fn unlock_confirmed_releases_the_lock<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let mut guard = provider
        .lock(&cfg("stuck_job", TEN_MINUTES).for_tick(tick(2)))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    let out = cli(db, &["unlock", "stuck_job"], "y\n").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stderr,
        format!("Release lock \"stuck_job\" held by {HOLDER} (token {token})? [y/N] \n")
    );
    for text in [
        format!("released lock \"stuck_job\" (held by {HOLDER}, token {token})"),
        format!("the fencing token stays {token}: the next holder gets a higher one"),
        format!(
            "the last tick stays {}: that tick does not run again",
            secs(tick(2))
        ),
        "stops at its next keep-alive renewal".to_owned(),
        format!("its fencing token {token} is now stale"),
    ] {
        assert!(out.stdout.contains(&text), "{text:?} in {}", out.stdout);
    }
    let after = state(&provider, "stuck_job").await;
    assert!(!after.is_held(), "released: {after:?}");
    assert!(after.locked_until <= after.read_at);
    assert_eq!(after.fencing_token, token, "the token stays");
    assert_eq!(after.last_tick, Some(tick(2)), "the claimed tick stays");
    assert!(
        !guard.extend(TEN_MINUTES, Duration::ZERO).await.unwrap(),
        "the released holder's keep-alive renewal is refused"
    );
    assert!(
        provider
            .lock(&cfg("stuck_job", TEN_MINUTES).for_tick(tick(2)))
            .await
            .unwrap()
            .is_none(),
        "the claimed tick does not run again"
    );
    let next = provider
        .lock(&cfg("stuck_job", TEN_MINUTES))
        .await
        .unwrap()
        .expect("free for the next holder");
    assert!(next.fencing_token() > token);
    assert!(
        !guard.unlock().await.unwrap(),
        "the stale holder cannot free it"
    );
    assert!(state(&provider, "stuck_job").await.is_held());

    assert!(next.unlock().await.unwrap());

    // --yes does not ask.
    let mut other = provider
        .lock(&cfg("other_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let other_token = other.fencing_token();
    let out = cli(db, &["unlock", "other_job", "--yes"], "").await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    assert!(
        out.stdout.contains(&format!(
            "released lock \"other_job\" (held by {HOLDER}, token {other_token})"
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("no tick was claimed through it"),
        "{}",
        out.stdout
    );
    let after = state(&provider, "other_job").await;
    assert!(!after.is_held(), "{after:?}");
    assert_eq!((after.fencing_token, after.last_tick), (other_token, None));
    assert!(!other.extend(TEN_MINUTES, Duration::ZERO).await.unwrap());
}

async fn unlock_of_a_free_lock_changes_nothing<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let guard = provider
        .lock(&cfg("done_job", TEN_MINUTES).for_tick(tick(3)))
        .await
        .unwrap()
        .unwrap();
    assert!(guard.unlock().await.unwrap());
    let before = state(&provider, "done_job").await;
    for args in [
        &["unlock", "done_job", "--yes"][..],
        &["unlock", "done_job"],
    ] {
        let out = cli(db, args, "").await;
        assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
        assert!(
            out.stdout.ends_with(&format!(
                "lock \"done_job\" is already free (it expired at {}); nothing to do\n",
                secs(before.locked_until)
            )),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("remaining     -\n"), "{}", out.stdout);
        let after = state(&provider, "done_job").await;
        assert_eq!(
            (
                &after.locked_by,
                after.fencing_token,
                after.locked_at,
                after.locked_until,
                after.last_tick
            ),
            (
                &before.locked_by,
                before.fencing_token,
                before.locked_at,
                before.locked_until,
                before.last_tick
            )
        );
    }
}

/// The holder that was shown is the only one released: if the lock changes hands while the
/// operator reads the prompt, the answer "y" releases nothing.
async fn unlock_refuses_a_lock_that_changed_hands<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let short = Duration::from_secs(5);
    let first = provider
        .lock(&cfg("flaky_job", short))
        .await
        .unwrap()
        .unwrap();
    let url = db.url();
    let mut child = command(&[
        "--database-url",
        &url,
        "--table",
        db.table(),
        "unlock",
        "flaky_job",
    ])
    .spawn()
    .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("[y/N] ") {
        let n = tokio::time::timeout(Duration::from_secs(30), stderr.read(&mut buf))
            .await
            .expect("the prompt within 30 s")
            .unwrap();
        assert!(
            n > 0,
            "stderr closed before the prompt: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    // Meanwhile the lock expires and someone else takes it.
    while state(&provider, "flaky_job").await.is_held() {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let second = provider
        .lock(&cfg("flaky_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"y\n").await.unwrap();
    drop(input);
    let mut rest = Vec::new();
    stderr.read_to_end(&mut rest).await.unwrap();
    seen.extend_from_slice(&rest);
    let status = child.wait().await.unwrap();
    let stderr = String::from_utf8(seen).unwrap();
    assert_eq!(status.code(), Some(4), "{stderr}");
    let old = first.fencing_token();
    assert!(
        stderr.lines().last().unwrap().starts_with(&format!(
            "shedlock: not released: lock \"flaky_job\" changed hands or expired since it was read (token {old} no longer holds it)"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("(token {old})? [y/N] ")),
        "{stderr}"
    );
    let after = state(&provider, "flaky_job").await;
    assert!(after.is_held(), "the new holder keeps it: {after:?}");
    assert_eq!(after.fencing_token, second.fencing_token());
    assert!(second.fencing_token() > old);
    assert!(second.unlock().await.unwrap());
    assert!(
        !first.unlock().await.unwrap(),
        "the first holder's token is stale"
    );
}

async fn history_lists_runs_newest_first<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let long_error = format!("boom: upstream said no {}", "x".repeat(100));
    let a1 = provider
        .record_run(
            &NewRun::new("job_a", "lock_a", Some(tick(4)), RunOutcome::Running)
                .fencing_token(Some(11)),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    provider
        .finish_run(a1, RunOutcome::Executed, None)
        .await
        .unwrap();
    let b1 = provider
        .record_run(
            &NewRun::new("job_b", "lock_b", None, RunOutcome::Failed)
                .fencing_token(Some(21))
                .error(Some(long_error.clone())),
        )
        .await
        .unwrap();
    let a2 = provider
        .record_run(&NewRun::new(
            "job_a",
            "lock_a",
            Some(tick(5)),
            RunOutcome::SkippedHeld,
        ))
        .await
        .unwrap();
    // Started under token 12, whose lock nobody holds: its instance died.
    let a3 = provider
        .record_run(
            &NewRun::new("job_a", "lock_a", Some(tick(6)), RunOutcome::Running)
                .fencing_token(Some(12)),
        )
        .await
        .unwrap();
    // Started under a lock that is still held: running.
    let guard = provider
        .lock(&cfg("lock_c", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let c1 = provider
        .record_run(
            &NewRun::new("job_c", "lock_c", None, RunOutcome::Running)
                .fencing_token(Some(guard.fencing_token())),
        )
        .await
        .unwrap();
    let ids = |ids: &[i64]| ids.iter().map(i64::to_string).collect::<Vec<_>>();

    let out = cli(db, &["history"], "").await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    let rows = parse_table(&out.stdout);
    assert_eq!(
        column(&rows, "ID"),
        ids(&[c1, a3, a2, b1, a1]),
        "{}",
        out.stdout
    );
    assert_eq!(
        column(&rows, "OUTCOME"),
        ["running", "running", "skipped-held", "failed", "executed"]
    );
    assert_eq!(
        column(&rows, "JOB"),
        ["job_c", "job_a", "job_a", "job_b", "job_a"]
    );
    assert_eq!(
        column(&rows, "LOCK"),
        ["lock_c", "lock_a", "lock_a", "lock_b", "lock_a"]
    );
    assert_eq!(column(&rows, "LOCKED_BY"), [HOLDER; 5]);
    let durations = column(&rows, "DURATION");
    assert_eq!(durations[..2], ["running", "unfinished"], "{}", out.stdout);
    assert_eq!(
        humantime::parse_duration(&durations[2]).unwrap(),
        Duration::ZERO
    );
    let ran = humantime::parse_duration(&durations[4]).unwrap();
    assert!(
        (Duration::from_millis(50)..Duration::from_secs(30)).contains(&ran),
        "{}",
        out.stdout
    );
    let a1_row = &rows[4];
    assert_eq!(
        (
            a1_row["TICK"].as_str(),
            a1_row["TOKEN"].as_str(),
            a1_row["ERROR"].as_str()
        ),
        (secs(tick(4)).as_str(), "11", "-")
    );
    assert_eq!(rows[2]["TOKEN"], "-");
    let shown = &rows[3]["ERROR"];
    assert!(
        shown.starts_with("boom: upstream said no xx") && shown.ends_with('…'),
        "{shown}"
    );
    assert!(
        shown.chars().count() < long_error.chars().count(),
        "{shown}"
    );

    for (args, expected) in [
        (&["history", "lock_a"][..], ids(&[a3, a2, a1])),
        (&["history", "job_b"], ids(&[b1])),
        (&["history", "--outcome", "failed"], ids(&[b1])),
        (&["history", "lock_a", "--outcome", "executed"], ids(&[a1])),
        (&["history", "--outcome", "running"], ids(&[c1, a3])),
        (&["history", "--limit", "2"], ids(&[c1, a3])),
    ] {
        let out = cli(db, args, "").await;
        assert_eq!(out.code, 0, "{args:?}: {out:#?}");
        assert_eq!(
            column(&parse_table(&out.stdout), "ID"),
            expected,
            "{args:?}: {}",
            out.stdout
        );
    }
    let out = cli(
        db,
        &["history", "lock_a", "--outcome", "cancelled-shutdown"],
        "",
    )
    .await;
    assert_eq!(
        (out.code, out.stdout),
        (
            0,
            format!(
                "no runs for \"lock_a\" with outcome cancelled-shutdown in table {}_runs ({})\n",
                db.table(),
                D::BACKEND
            )
        )
    );

    let out = cli(db, &["history", "--json"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let runs = out.json();
    let json_ids: Vec<i64> = runs.iter().map(|r| r["id"].as_i64().unwrap()).collect();
    assert_eq!(json_ids, [c1, a3, a2, b1, a1]);
    let (a3j, b1j, a1j) = (&runs[1], &runs[3], &runs[4]);
    assert_eq!(a1j["job"], "job_a");
    assert_eq!(a1j["name"], "lock_a");
    assert_eq!(a1j["outcome"], "executed");
    assert_eq!(a1j["locked_by"], HOLDER);
    assert_eq!(a1j["fencing_token"], 11);
    assert_eq!(a1j["error"], Value::Null);
    assert_eq!(time(&a1j["tick"]), tick(4));
    let ms = a1j["duration_ms"].as_u64().unwrap();
    assert!((50..30_000).contains(&ms), "{a1j}");
    let span = time(&a1j["finished_at"]) - time(&a1j["started_at"]);
    assert!((span.num_milliseconds() - ms as i64).abs() <= 1, "{a1j}");
    assert_eq!(b1j["outcome"], "failed");
    assert_eq!(b1j["error"], long_error.as_str(), "the whole error");
    assert_eq!(b1j["tick"], Value::Null);
    assert_eq!(b1j["duration_ms"], 0);
    assert_eq!(a3j["outcome"], "running");
    assert_eq!(a3j["finished_at"], Value::Null);
    assert_eq!(a3j["duration_ms"], Value::Null);
    assert!(guard.unlock().await.unwrap());
}

/// `history` only reads: a run whose lock is gone shows as `unfinished`. With
/// `--close-abandoned` it first closes such runs as `abandoned`, says how many on stderr, and
/// shows the reason whole; a run whose lock is still held stays `running`.
async fn history_closes_abandoned_runs_on_request<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let dead = provider
        .lock(&cfg("dead_lock", Duration::from_millis(300)))
        .await
        .unwrap()
        .unwrap();
    let dead_run = provider
        .record_run(
            &NewRun::new("dead_job", "dead_lock", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(dead.fencing_token())),
        )
        .await
        .unwrap();
    let live = provider
        .lock(&cfg("live_lock", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let live_run = provider
        .record_run(
            &NewRun::new("live_job", "live_lock", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(live.fencing_token())),
        )
        .await
        .unwrap();
    let mut expired = false;
    for _ in 0..300 {
        if !state(&provider, "dead_lock").await.is_held() {
            expired = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(expired, "the dead run's lease ran out");
    let ids = |ids: &[i64]| ids.iter().map(i64::to_string).collect::<Vec<_>>();

    let out = cli(db, &["history"], "").await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    let rows = parse_table(&out.stdout);
    assert_eq!(column(&rows, "ID"), ids(&[live_run, dead_run]));
    assert_eq!(column(&rows, "OUTCOME"), ["running", "running"]);
    assert_eq!(column(&rows, "DURATION"), ["running", "unfinished"]);
    let stored = provider.runs(&RunQuery::latest(5)).await.unwrap();
    assert!(
        stored.iter().all(|r| r.outcome == RunOutcome::Running),
        "without the flag nothing is written: {stored:?}"
    );

    let out = cli(db, &["history", "--close-abandoned"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stderr,
        "shedlock: closed 1 run left running whose lock is no longer held by its fencing token, as abandoned\n"
    );
    let rows = parse_table(&out.stdout);
    assert_eq!(column(&rows, "ID"), ids(&[live_run, dead_run]));
    assert_eq!(column(&rows, "OUTCOME"), ["running", "abandoned"]);
    assert_eq!(column(&rows, "DURATION"), ["running", "unknown"]);
    let reason = provider
        .runs(&RunQuery::latest(1).outcome(RunOutcome::Abandoned))
        .await
        .unwrap()[0]
        .error
        .clone()
        .unwrap();
    let expected = format!(
        "abandoned: lock \"dead_lock\" expired at {} while this run was still recorded as running \
         (its process died or stopped, or its end could not be written)",
        millis(state(&provider, "dead_lock").await.locked_until)
    );
    assert_eq!(reason, expected);
    assert_eq!(rows[1]["ERROR"], expected, "the reason in full");
    assert_eq!(rows[0]["ERROR"], "-");

    let out = cli(
        db,
        &[
            "history",
            "--close-abandoned",
            "--outcome",
            "abandoned",
            "--json",
        ],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stderr,
        "shedlock: closed 0 runs left running whose lock is no longer held by its fencing token, as abandoned\n"
    );
    let runs = out.json();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["id"], dead_run);
    assert_eq!(runs[0]["outcome"], "abandoned");
    assert_eq!(runs[0]["error"], expected.as_str());
    assert_eq!(runs[0]["duration_ms"], Value::Null);
    assert!(time(&runs[0]["finished_at"]) >= time(&runs[0]["started_at"]));
    assert!(live.unlock().await.unwrap());
    drop(dead);
}

/// Runs each case against one backend, on a table of its own that is dropped afterwards.
macro_rules! cli_suite {
    ($module:ident, $db:ty) => {
        mod $module {
            cli_suite!(@tests $db;
                migrate_creates_both_tables_and_is_idempotent,
                list_shows_held_and_free_locks,
                unlock_of_a_missing_name_exits_3,
                unlock_declined_exits_4_and_keeps_the_lock,
                unlock_confirmed_releases_the_lock,
                unlock_of_a_free_lock_changes_nothing,
                unlock_refuses_a_lock_that_changed_hands,
                history_lists_runs_newest_first,
                history_closes_abandoned_runs_on_request
            );
        }
    };
    (@tests $db:ty; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                use shedlock_suite::TestDb as _;
                let Some(db) = <$db>::setup().await else { return };
                super::$name(&db).await;
                db.teardown().await;
            }
        )*
    };
}

cli_suite!(postgres, shedlock_suite::Postgres);
cli_suite!(mysql, shedlock_suite::MySql);
cli_suite!(sqlite, shedlock_suite::Sqlite);

// --- once -------------------------------------------------------------------------------------

#[tokio::test]
async fn an_unreachable_server_is_one_line_naming_its_address() {
    for (url, address) in [
        ("postgres://postgres@127.0.0.1:1/test", "127.0.0.1:1"),
        ("mysql://root@127.0.0.1:1/test", "127.0.0.1:1"),
    ] {
        for command in ["list", "history", "migrate"] {
            let out = run(&["--database-url", url, command], &[], "").await;
            assert_eq!(out.code, 1, "{out:#?}");
            assert_eq!(out.stdout, "");
            let line = out.error_line();
            assert!(
                line.starts_with("shedlock: error: cannot reach the ") && line.contains(address),
                "{line}"
            );
        }
    }
}

#[tokio::test]
async fn bad_arguments_are_usage_errors_with_exit_2() {
    let cases: [(&[&str], &[&str]); 7] = [
        (
            &[
                "--database-url",
                "redis://admin:hunter2@cache:6379/0",
                "list",
            ],
            &[
                "unsupported database URL scheme \"redis\"",
                "postgres://",
                "mariadb://",
                "sqlite:",
            ],
        ),
        (
            &["--database-url", "x.db", "history", "--outcome", "bogus"],
            &[
                "\"bogus\"",
                "skipped-held",
                "cancelled-lost-lock",
                "executed",
            ],
        ),
        (
            &[
                "--database-url",
                "x.db",
                "--table",
                "locks; drop table x",
                "list",
            ],
            &["invalid table name \"locks; drop table x\""],
        ),
        (&["list"], &["--database-url", "DATABASE_URL"]),
        (
            &["--database-url", "x.db", "history", "--limit", "0"],
            &["--limit"],
        ),
        (&["--database-url", "x.db", "lsit"], &["lsit"]),
        (&["--database-url", "x.db", "unlock"], &["<NAME>"]),
    ];
    for (args, expected) in cases {
        let out = run(args, &[], "").await;
        assert_eq!(out.code, 2, "{args:?}: {out:#?}");
        assert_eq!(out.stdout, "");
        let line = out.error_line();
        assert!(line.starts_with("shedlock: error: "), "{line}");
        for text in expected {
            assert!(line.contains(text), "{text:?} in {line}");
        }
        assert!(
            !line.contains("hunter2"),
            "the password is not echoed: {line}"
        );
    }
    assert!(!Path::new("x.db").exists(), "no file made by a usage error");
}

#[tokio::test]
async fn help_lists_the_exit_codes() {
    let out = run(
        &["--help"],
        &[("DATABASE_URL", "postgres://u:hunter2@h/db")],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    for line in [
        "Exit codes:",
        "  0  success",
        "  1  the database failed",
        "  2  usage error",
        "  3  unlock: no lock of that name",
        "  4  unlock: not released",
    ] {
        assert!(out.stdout.contains(line), "{line:?} in {}", out.stdout);
    }
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
    // Where an operator reads before deleting a row by hand.
    let out = run(&["unlock", "--help"], &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let text = out.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains("rather than deleting the row by hand")
            && text.contains("so that tick can run again"),
        "{text}"
    );
}

#[tokio::test]
async fn missing_tables_say_run_shedlock_migrate() {
    let db = Sqlite::setup().await.unwrap();
    let url = db.url();
    let other = unique_name("cli_none");
    for (command, missing) in [
        ("list", format!("the lock table `{other}`")),
        ("history", format!("the run history table `{other}_runs`")),
    ] {
        let out = run(
            &["--database-url", &url, "--table", &other, command],
            &[],
            "",
        )
        .await;
        assert_eq!(out.code, 1, "{out:#?}");
        let line = out.error_line();
        assert!(
            line.starts_with(&format!(
                "shedlock: error: {missing} does not exist in the SQLite database"
            )),
            "{line}"
        );
        assert!(line.contains("run `shedlock migrate`"), "{line}");
    }
    let out = run(
        &[
            "--database-url",
            &url,
            "--table",
            &other,
            "unlock",
            "x",
            "--yes",
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(out.error_line().contains("shedlock migrate"), "{out:#?}");
    // The lock table is there, its history table is not.
    db.exec(&format!("DROP TABLE {}_runs", db.table())).await;
    let out = cli(&db, &["history"], "").await;
    assert_eq!(out.code, 1, "{out:#?}");
    assert!(
        out.error_line().starts_with(&format!(
            "shedlock: error: the run history table `{}_runs` does not exist",
            db.table()
        )),
        "{out:#?}"
    );
    assert_eq!(cli(&db, &["list"], "").await.code, 0);
    db.teardown().await;
}

#[tokio::test]
async fn a_missing_sqlite_file_is_reported_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let shown = path.display().to_string();
    for url in [
        shown.clone(),
        format!("sqlite://{shown}"),
        format!("sqlite://{shown}?mode=rwc"),
    ] {
        for args in [&["list"][..], &["history"], &["unlock", "job", "--yes"]] {
            let out = run(
                &[&["--database-url", url.as_str()][..], args].concat(),
                &[],
                "",
            )
            .await;
            assert_eq!(out.code, 1, "{url} {args:?}: {out:#?}");
            assert_eq!(
                out.error_line(),
                format!(
                    "shedlock: error: the SQLite database file {shown} does not exist (check the path; `shedlock migrate` creates it)"
                )
            );
            assert!(!path.exists(), "{url} {args:?} created {shown}");
        }
    }
    let url = format!("sqlite://{shown}");
    let out = run(&["--database-url", &url, "migrate"], &[], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stdout,
        "tables shedlock and shedlock_runs are up to date (SQLite)\n"
    );
    assert!(path.exists());
    let out = run(&["--database-url", &shown, "list"], &[], "").await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (0, "no locks in table shedlock (SQLite)\n")
    );
}

#[tokio::test]
async fn database_url_and_table_come_from_the_environment() {
    let db = Sqlite::setup().await.unwrap();
    let provider = SqliteLockProvider::builder(shedlock_suite::sqlite_pool(db.path(), 2).await)
        .table_name(db.table())
        .locked_by(HOLDER)
        .build()
        .unwrap();
    let guard = provider
        .lock(&cfg("env_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let url = format!("sqlite://{}", db.path().display());
    let out = run(
        &["list", "--json"],
        &[("DATABASE_URL", &url), ("SHEDLOCK_TABLE", db.table())],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let locks = out.json();
    assert_eq!(locks.len(), 1, "{}", out.stdout);
    assert_eq!(locks[0]["name"], "env_job");
    assert_eq!(locks[0]["fencing_token"], guard.fencing_token());
    assert!(guard.unlock().await.unwrap());
    db.teardown().await;
}

#[tokio::test]
async fn a_mariadb_url_is_read_as_mysql() {
    let Some(db) = MySql::setup().await else {
        return;
    };
    let provider = provider(&db).await;
    let guard = provider
        .lock(&cfg("maria_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let url = db.url().replacen("mysql://", "mariadb://", 1);
    assert!(url.starts_with("mariadb://"), "{url}");
    let out = run(
        &[
            "--database-url",
            &url,
            "--table",
            db.table(),
            "list",
            "--json",
        ],
        &[],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let locks = out.json();
    assert_eq!(locks.len(), 1, "{}", out.stdout);
    assert_eq!(locks[0]["locked_by"], HOLDER);
    assert_eq!(locks[0]["fencing_token"], guard.fencing_token());
    assert!(guard.unlock().await.unwrap());
    db.teardown().await;
}
