//! What every CLI test uses: running the binary, pointing it at a backend, reading its tables.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use serde_json::Value;
use shedlock::history::LockState;
use shedlock::{LockAdmin, LockConfiguration};
use shedlock_suite::{MySql, Opts, Postgres, SqlTestDb, Sqlite};
use tokio::io::AsyncWriteExt;

pub(crate) const HOLDER: &str = "cli-worker-7";
pub(crate) const TEN_MINUTES: Duration = Duration::from_secs(600);

/// The `shedlock` binary cargo built for these tests.
fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_shedlock")
}

/// What one run of the tool did.
#[derive(Debug)]
pub(crate) struct Out {
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Out {
    /// The only line on stderr (every failure is exactly one).
    pub(crate) fn error_line(&self) -> &str {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one stderr line expected: {self:#?}");
        lines[0]
    }

    pub(crate) fn json(&self) -> Vec<Value> {
        match serde_json::from_str(&self.stdout) {
            Ok(Value::Array(items)) => items,
            other => panic!("a JSON array expected: {other:?} from {self:#?}"),
        }
    }
}

pub(crate) fn command(args: &[&str]) -> tokio::process::Command {
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

pub(crate) fn finish(output: std::process::Output) -> Out {
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
pub(crate) async fn run(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Out {
    let mut cmd = command(args);
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    // A command that does not read its input may exit first: a closed pipe is fine.
    let _ = input.write_all(stdin.as_bytes()).await;
    drop(input);
    finish(child.wait_with_output().await.unwrap())
}

/// Exit 0 with nothing on stderr but the audit lines a change on Redis writes there (`shedlock:
/// audit: …`; the SQL stores record it in the run history instead, `audit.rs` checks both).
pub(crate) fn assert_done(out: &Out) {
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stderr
            .lines()
            .all(|line| line.starts_with("shedlock: audit: ")),
        "{out:#?}"
    );
}

/// A backend the tool can be pointed at (an SQL one: its cases read the run history).
pub(crate) trait CliDb: SqlTestDb<Provider: shedlock::RunStore> {
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
pub(crate) async fn cli<D: CliDb>(db: &D, args: &[&str], stdin: &str) -> Out {
    let (url, table) = (db.url(), db.table());
    let mut all = vec!["--database-url", &url, "--table", &table];
    all.extend_from_slice(args);
    run(&all, &[], stdin).await
}

pub(crate) async fn provider<D: CliDb>(db: &D) -> D::Provider {
    db.provider_with(Opts::default().locked_by(HOLDER)).await
}

pub(crate) fn cfg(name: &str, at_most: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, Duration::ZERO).unwrap()
}

pub(crate) fn tick(n: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + 60 * n, 0).unwrap()
}

pub(crate) fn secs(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

pub(crate) fn millis(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub(crate) fn time(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap_or_else(|| panic!("{value}")))
        .unwrap()
        .with_timezone(&Utc)
}

pub(crate) async fn state<P: LockAdmin>(provider: &P, name: &str) -> LockState {
    provider
        .lock_state(name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("lock {name} has a row"))
}

/// An aligned text table, one map per row keyed by the header's titles. Each cell is cut at
/// the column where its title starts, so a cell that spilled over would show up broken.
pub(crate) fn parse_table(text: &str) -> Vec<BTreeMap<String, String>> {
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

pub(crate) fn column(rows: &[BTreeMap<String, String>], title: &str) -> Vec<String> {
    rows.iter().map(|row| row[title].clone()).collect()
}
