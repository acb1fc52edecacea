//! `shedlock history`: filters, table and JSON, and `--close-abandoned`; on every backend.

use std::time::Duration;

use serde_json::Value;
use shedlock::history::{NewRun, RunOutcome, RunQuery};
use shedlock::{LockProvider, RunStore};

use crate::common::{
    CliDb, HOLDER, TEN_MINUTES, cfg, cli, column, millis, parse_table, provider, secs, state, tick,
    time,
};
use shedlock_suite::Opts;

pub(crate) async fn history_lists_runs_newest_first<D: CliDb>(db: &D) {
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
    assert_eq!(column(&rows, "INSTANCE"), [HOLDER; 5]);
    // Every run that took a lock held it itself; the skipped tick's holder is not on the page.
    assert_eq!(
        column(&rows, "HOLDER"),
        [HOLDER, HOLDER, "?", HOLDER, HOLDER],
        "{}",
        out.stdout
    );
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
pub(crate) async fn history_closes_abandoned_runs_on_request<D: CliDb>(db: &D) {
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

/// A `skipped-held` row is written by the instance that skipped: `INSTANCE` says so, and
/// `HOLDER` names the instance whose run of the same lock and tick took it (from the same page),
/// never the one that skipped (issue 35, point 4). In the JSON too (`holder`).
pub(crate) async fn history_names_the_holder_of_a_skipped_tick<D: CliDb>(db: &D) {
    const RUNNER: &str = "cli-worker-9";
    let skipper = provider(db).await;
    let runner = db.provider_with(Opts::default().locked_by(RUNNER)).await;
    let ran = runner
        .record_run(
            &NewRun::new("job_h", "lock_h", Some(tick(7)), RunOutcome::Executed)
                .fencing_token(Some(31)),
        )
        .await
        .unwrap();
    let skipped = skipper
        .record_run(&NewRun::new(
            "job_h",
            "lock_h",
            Some(tick(7)),
            RunOutcome::SkippedHeld,
        ))
        .await
        .unwrap();
    let out = cli(db, &["history", "lock_h"], "").await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    let rows = parse_table(&out.stdout);
    assert_eq!(
        column(&rows, "ID"),
        [skipped.to_string(), ran.to_string()],
        "{}",
        out.stdout
    );
    assert_eq!(column(&rows, "OUTCOME"), ["skipped-held", "executed"]);
    assert_eq!(column(&rows, "INSTANCE"), [HOLDER, RUNNER]);
    assert_eq!(column(&rows, "HOLDER"), [RUNNER, RUNNER], "{}", out.stdout);

    let out = cli(db, &["history", "lock_h", "--json"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    let runs = out.json();
    assert_eq!(runs[0]["locked_by"], HOLDER);
    assert_eq!(runs[0]["holder"], RUNNER);
    assert_eq!(runs[1]["holder"], RUNNER);
}
