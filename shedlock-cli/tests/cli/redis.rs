//! The tool on Redis (`redis://`, `rediss://`): `list`, `unlock`, `migrate`, `history`, and the
//! errors of a server that cannot be used. Each test works under a key prefix
//! of its own and deletes its keys at the end; the Redis server is shared, so nothing here
//! flushes or restarts it.

use std::time::Duration;

use serde_json::Value;
use shedlock::history::{NewRun, RunOutcome, RunQuery};
use shedlock::{Backend, LockAdmin, LockProvider, RunStore};
use shedlock_redis::RedisLockProvider;
use shedlock_suite::unique_name;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{
    HOLDER, Out, TEN_MINUTES, assert_done, cfg, column, command, millis, parse_table, run, secs,
    state, tick, time,
};

/// The shared Redis server and a key prefix no other test uses.
struct Redis {
    url: String,
    prefix: String,
    conn: ::redis::aio::MultiplexedConnection,
}

impl Redis {
    /// `None`, said on stderr, when `scripts/test` reported Redis unreachable; panics, saying
    /// how to start it, when it is down and not skipped.
    async fn setup() -> Option<Self> {
        if shedlock_suite::skipped(Backend::Redis) {
            eprintln!("skipped: Redis was reported unreachable by scripts/test");
            return None;
        }
        let url = shedlock_suite::redis_url();
        let client = ::redis::Client::open(url.as_str()).unwrap();
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "Redis at {url} is not reachable ({error}).\n  start it with: {}",
                    shedlock_suite::how_to_start(Backend::Redis)
                )
            });
        Some(Self {
            url,
            prefix: unique_name("cli_r"),
            conn,
        })
    }

    /// A provider on this test's prefix, locking as [`HOLDER`].
    async fn provider(&self) -> RedisLockProvider {
        RedisLockProvider::builder(self.url.as_str())
            .table_name(self.prefix.as_str())
            .locked_by(HOLDER)
            .build()
            .await
            .unwrap()
    }

    /// `shedlock --database-url <redis> --key-prefix <prefix> ARGS`.
    async fn cli(&self, args: &[&str], stdin: &str) -> Out {
        let mut all = vec![
            "--database-url",
            self.url.as_str(),
            "--key-prefix",
            self.prefix.as_str(),
        ];
        all.extend_from_slice(args);
        run(&all, &[], stdin).await
    }

    /// `{<prefix>}:<rest>`.
    fn key(&self, rest: &str) -> String {
        format!("{{{}}}:{rest}", self.prefix)
    }

    /// A Redis command, its answer ignored.
    async fn exec(&self, args: &[&str]) {
        let mut cmd = ::redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async::<::redis::Value>(&mut self.conn.clone())
            .await
            .unwrap();
    }

    /// Every key under this test's prefix.
    async fn keys(&self) -> Vec<String> {
        let mut conn = self.conn.clone();
        let pattern = format!("{{{}}}:*", self.prefix);
        let mut keys = Vec::new();
        let mut cursor = 0_u64;
        loop {
            let (next, found): (u64, Vec<String>) = ::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            keys.extend(found);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys
    }

    /// Deletes every key under this test's prefix.
    async fn teardown(&self) {
        for key in self.keys().await {
            self.exec(&["DEL", &key]).await;
        }
    }
}

#[tokio::test]
async fn list_shows_held_and_free_locks_as_a_table() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let out = redis.cli(&["list"], "").await;
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (
            0,
            format!("no locks under key prefix {} (Redis)\n", redis.prefix).as_str(),
            ""
        )
    );
    let provider = redis.provider().await;
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

    // --table names the key prefix as well as --key-prefix does.
    let out = run(
        &[
            "--database-url",
            &redis.url,
            "--table",
            &redis.prefix,
            "list",
        ],
        &[],
        "",
    )
    .await;
    assert_done(&out);
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
    assert_eq!(f["LOCKED_BY"], HOLDER);
    assert_eq!(f["REMAINING"], "-");
    assert_eq!(f["TOKEN"], free_token.to_string());
    assert_eq!(f["LAST_TICK"], secs(tick(1)));
    assert_eq!(f["LOCKED_UNTIL"], secs(free_state.locked_until));

    // The prefix comes from SHEDLOCK_TABLE too.
    let out = run(
        &["list"],
        &[
            ("DATABASE_URL", &redis.url),
            ("SHEDLOCK_TABLE", &redis.prefix),
        ],
        "",
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        column(&parse_table(&out.stdout), "NAME"),
        ["free_job", "held_job"]
    );
    assert!(held.unlock().await.unwrap());
    redis.teardown().await;
}

#[tokio::test]
async fn list_json_has_the_fields_of_the_sql_backends() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let out = redis.cli(&["list", "--json"], "").await;
    assert_eq!((out.code, out.json()), (0, vec![]), "{out:#?}");
    let provider = redis.provider().await;
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

    let out = redis.cli(&["list", "--json"], "").await;
    assert_done(&out);
    let locks = out.json();
    assert_eq!(locks.len(), 2, "{}", out.stdout);
    let (f, h) = (&locks[0], &locks[1]);
    let mut fields: Vec<&String> = h.as_object().unwrap().keys().collect();
    fields.sort();
    assert_eq!(
        fields,
        [
            "fencing_token",
            "held",
            "last_tick",
            "locked_at",
            "locked_by",
            "locked_until",
            "name",
            "remaining_ms"
        ]
    );
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
    redis.teardown().await;
}

#[tokio::test]
async fn unlock_with_the_shown_token_releases_and_keeps_token_and_tick() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let provider = redis.provider().await;
    let mut guard = provider
        .lock(&cfg("stuck_job", TEN_MINUTES).for_tick(tick(2)))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();

    // Declined: nothing changes.
    let out = redis.cli(&["unlock", "stuck_job"], "n\n").await;
    assert_eq!(out.code, 4, "{out:#?}");
    assert!(
        out.stdout.starts_with(&format!(
            "lock \"stuck_job\" under key prefix {}:\n",
            redis.prefix
        )),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("fencing_token {token}\n")),
        "{}",
        out.stdout
    );
    assert_eq!(
        out.stderr.lines().last().unwrap(),
        format!(
            "shedlock: not released: lock \"stuck_job\" is still held by {HOLDER} (token {token})"
        )
    );
    assert!(state(&provider, "stuck_job").await.is_held());

    let out = redis.cli(&["unlock", "stuck_job"], "y\n").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        out.stderr.trim_end(),
        format!("Release lock \"stuck_job\" held by {HOLDER} (token {token})? [y/N]")
    );
    // The release is an operator row of the run history, as on the SQL stores.
    let records = provider
        .runs(&RunQuery::latest(10).outcome(RunOutcome::Operator))
        .await
        .unwrap();
    assert!(
        records.iter().any(|r| r.name == "stuck_job"
            && r.fencing_token == Some(token)
            && r.error.as_deref().is_some_and(|e| e.starts_with(&format!(
                "released lock \"stuck_job\" held by {HOLDER} (token {token})"
            )))),
        "{records:#?}"
    );
    for text in [
        format!("released lock \"stuck_job\" (held by {HOLDER}, token {token})"),
        format!("the fencing token stays {token}: the next holder gets a higher one"),
        format!(
            "the last tick stays {}: that tick does not run again",
            secs(tick(2))
        ),
    ] {
        assert!(out.stdout.contains(&text), "{text:?} in {}", out.stdout);
    }
    let after = state(&provider, "stuck_job").await;
    assert!(!after.is_held(), "released: {after:?}");
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
    assert!(next.unlock().await.unwrap());

    // Already free: nothing to do, exit 0.
    let out = redis.cli(&["unlock", "stuck_job", "--yes"], "").await;
    assert_done(&out);
    assert!(
        out.stdout.contains("is already free") && out.stdout.ends_with("nothing to do\n"),
        "{}",
        out.stdout
    );

    // A name with no keys: exit 3.
    let out = redis.cli(&["unlock", "no_such_job", "--yes"], "").await;
    assert_eq!((out.code, out.stdout.as_str()), (3, ""), "{out:#?}");
    assert_eq!(
        out.error_line(),
        format!(
            "shedlock: no lock named \"no_such_job\" under key prefix {}; `shedlock list` shows the locks there",
            redis.prefix
        )
    );
    redis.teardown().await;
}

/// The prompt showed one token; by the time the operator says yes, another holder has the lock:
/// the shown token no longer holds it, and nothing is released.
#[tokio::test]
async fn unlock_with_a_token_that_no_longer_holds_the_lock_refuses() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let provider = redis.provider().await;
    let first = provider
        .lock(&cfg("flaky_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let old = first.fencing_token();
    let mut child = command(&[
        "--database-url",
        &redis.url,
        "--key-prefix",
        &redis.prefix,
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
        assert!(n > 0, "stderr closed before the prompt");
        seen.extend_from_slice(&buf[..n]);
    }
    // Meanwhile the lock changes hands.
    assert!(provider.force_release("flaky_job", old).await.unwrap());
    let second = provider
        .lock(&cfg("flaky_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    assert!(second.fencing_token() > old);
    let mut input = child.stdin.take().unwrap();
    input.write_all(b"y\n").await.unwrap();
    drop(input);
    stderr.read_to_end(&mut seen).await.unwrap();
    let status = child.wait().await.unwrap();
    let stderr = String::from_utf8(seen).unwrap();
    assert_eq!(status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains(&format!("(token {old})? [y/N] ")),
        "{stderr}"
    );
    assert!(
        stderr.lines().last().unwrap().starts_with(&format!(
            "shedlock: not released: lock \"flaky_job\" changed hands or expired since it was read (token {old} no longer holds it)"
        )),
        "{stderr}"
    );
    let after = state(&provider, "flaky_job").await;
    assert!(after.is_held(), "the new holder keeps it: {after:?}");
    assert_eq!(after.fencing_token, second.fencing_token());
    assert!(second.unlock().await.unwrap());
    redis.teardown().await;
}

#[tokio::test]
async fn migrate_says_there_is_nothing_to_migrate_and_creates_nothing() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let expected = format!(
        "nothing to migrate: Redis needs no tables or schema; the server at {} answers, and \
         {{{p}}}:names is a set or absent, as shedlock keeps it (key prefix {p})\n",
        shedlock_suite::host_port(&redis.url, 6379),
        p = redis.prefix
    );
    for _ in 0..2 {
        let out = redis.cli(&["migrate"], "").await;
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (0, expected.as_str(), ""),
        );
        assert_eq!(redis.keys().await, Vec::<String>::new(), "nothing created");
    }
    // With locks under the prefix, the same.
    let provider = redis.provider().await;
    let guard = provider
        .lock(&cfg("some_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let keys = redis.keys().await;
    let out = redis.cli(&["migrate"], "").await;
    assert_eq!((out.code, out.stdout.as_str()), (0, expected.as_str()));
    assert_eq!(redis.keys().await, keys, "nothing created or removed");
    assert!(state(&provider, "some_job").await.is_held());
    assert!(guard.unlock().await.unwrap());
    redis.teardown().await;
}

/// `history` reads the runs kept under the key prefix, as on the SQL stores: the table, a
/// job's rows as JSON, and `--close-abandoned` closing a run whose lock is gone.
#[tokio::test]
async fn history_reads_the_runs_kept_under_the_key_prefix() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let out = redis.cli(&["history"], "").await;
    assert_eq!(
        (out.code, out.stdout.clone()),
        (
            0,
            format!("no runs under key prefix {} (Redis)\n", redis.prefix)
        ),
        "{out:#?}"
    );
    let provider = redis.provider().await;
    let done = NewRun::new("sync", "sync", Some(tick(1)), RunOutcome::Failed)
        .fencing_token(Some(7))
        .error(Some("upstream said 503".into()));
    let done = provider.record_run(&done).await.unwrap();
    // A run whose lock has no keys at all: abandoned.
    let lost =
        NewRun::new("report", "report", Some(tick(2)), RunOutcome::Running).fencing_token(Some(9));
    let lost = provider.record_run(&lost).await.unwrap();
    let out = redis.cli(&["history"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let rows = parse_table(&out.stdout);
    assert_eq!(rows.len(), 2, "{}", out.stdout);
    assert_eq!(
        (rows[0]["LOCK"].as_str(), rows[0]["OUTCOME"].as_str()),
        ("report", "running")
    );
    assert_eq!(
        (rows[1]["LOCK"].as_str(), rows[1]["OUTCOME"].as_str()),
        ("sync", "failed")
    );
    assert_eq!(rows[1]["ERROR"], "upstream said 503");
    let out = redis.cli(&["history", "sync", "--json"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let json: Value = serde_json::from_str(&out.stdout).unwrap();
    let runs = json.as_array().expect("an array of runs");
    assert_eq!(runs.len(), 1, "{json:#}");
    assert_eq!(runs[0]["id"], done, "{json:#}");
    let out = redis.cli(&["history", "--close-abandoned"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let rows = parse_table(&out.stdout);
    assert_eq!(rows[0]["OUTCOME"], "abandoned", "{}", out.stdout);
    let closed = provider
        .runs(&RunQuery::latest(1).name("report"))
        .await
        .unwrap();
    assert_eq!(
        (closed[0].id, closed[0].outcome),
        (lost, RunOutcome::Abandoned)
    );
    redis.teardown().await;
}

#[tokio::test]
async fn an_unreachable_redis_server_is_named_with_exit_1_and_no_password() {
    for command in [&["list"][..], &["migrate"], &["unlock", "job", "--yes"]] {
        for url in [
            "redis://:hunter2@127.0.0.1:1",
            "redis://admin:hunter2@127.0.0.1:1/0",
        ] {
            let out = run(&[&["--database-url", url][..], command].concat(), &[], "").await;
            assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{out:#?}");
            let line = out.error_line();
            assert!(
                line.starts_with("shedlock: error: cannot reach the Redis server at 127.0.0.1:1: "),
                "{line}"
            );
            assert!(!line.contains("hunter2"), "{line}");
        }
    }
    // A live server that refuses the password: named, exit 1, the password not shown.
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let url = redis.url.replacen("redis://", "redis://admin:hunter2@", 1);
    let out = run(&["--database-url", &url, "list"], &[], "").await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{out:#?}");
    let line = out.error_line();
    assert!(
        line.starts_with(&format!(
            "shedlock: error: the Redis server at {} refused the credentials",
            shedlock_suite::host_port(&redis.url, 6379)
        )),
        "{line}"
    );
    assert!(!line.contains("hunter2"), "{line}");
}

#[tokio::test]
async fn redis_usage_errors_exit_2() {
    for (args, expected) in [
        (
            &[
                "--database-url",
                "redis://127.0.0.1:1",
                "--key-prefix",
                "a b",
                "list",
            ][..],
            "shedlock: error: invalid Redis key prefix \"a b\": it contains ' '",
        ),
        (
            &["--database-url", "redis://:hunter2@127.0.0.1:1/x", "list"],
            "shedlock: error: invalid Redis URL \"redis://:***@127.0.0.1:1/x\"",
        ),
    ] {
        let out = run(args, &[], "").await;
        assert_eq!((out.code, out.stdout.as_str()), (2, ""), "{out:#?}");
        assert!(out.error_line().starts_with(expected), "{out:#?}");
        assert!(!out.stderr.contains("hunter2"), "{out:#?}");
    }
}

#[tokio::test]
async fn keys_of_the_wrong_type_are_named() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let address = shedlock_suite::host_port(&redis.url, 6379);
    let wrong = |key: &str, found: &str| {
        format!(
            "shedlock: error: the Redis key {key:?} at {address} holds a {found}, not the hash (or set) \
             shedlock keeps there: another program uses this key prefix; choose another prefix \
             (--key-prefix) or remove the key"
        )
    };
    // A lock's lease key is a string: unlock reads it, list reads it through the set of
    // names. migrate does the same work whatever the number of locks: it checks the set's
    // type, not each lock's keys.
    let lock = redis.key("lock:job");
    redis.exec(&["SET", &lock, "x"]).await;
    let out = redis.cli(&["unlock", "job", "--yes"], "").await;
    assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{out:#?}");
    assert_eq!(out.error_line(), wrong(&lock, "string"));
    redis.exec(&["SADD", &redis.key("names"), "job"]).await;
    for args in [&["list"][..], &["list", "--json"]] {
        let out = redis.cli(args, "").await;
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (1, ""),
            "{args:?}: {out:#?}"
        );
        assert_eq!(out.error_line(), wrong(&lock, "string"), "{args:?}");
    }
    let out = redis.cli(&["migrate"], "").await;
    assert_done(&out);
    // The set of names is a list.
    redis.teardown().await;
    let names = redis.key("names");
    redis.exec(&["RPUSH", &names, "job"]).await;
    for args in [&["list"][..], &["migrate"]] {
        let out = redis.cli(args, "").await;
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (1, ""),
            "{args:?}: {out:#?}"
        );
        assert_eq!(out.error_line(), wrong(&names, "list"), "{args:?}");
    }
    redis.teardown().await;
}

/// `rediss://` to a port that speaks plain Redis: the TLS handshake gets no answer, and the tool
/// gives up within its connect timeout (20 s), naming the server, rather than hanging.
#[tokio::test]
async fn rediss_to_a_plain_port_fails_naming_the_server_in_time() {
    let Some(redis) = Redis::setup().await else {
        return;
    };
    let address = shedlock_suite::host_port(&redis.url, 6379);
    let url = format!("rediss://:hunter2@{address}");
    let out = tokio::time::timeout(
        Duration::from_secs(40),
        run(&["--database-url", &url, "list"], &[], ""),
    )
    .await
    .expect("an answer within 40 s, not a hang");
    assert_eq!((out.code, out.stdout.as_str()), (1, ""), "{out:#?}");
    let line = out.error_line();
    assert!(
        line.starts_with(&format!(
            "shedlock: error: cannot reach the Redis server at {address}: "
        )) && line.contains("TLS"),
        "{line}"
    );
    assert!(!line.contains("hunter2"), "{line}");
}
