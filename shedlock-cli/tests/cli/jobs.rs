//! The schedule commands (`jobs`, `pause`, `resume`, `trigger`, `reschedule`, `reset`,
//! `create`, `delete`): the main path written once over a URL and a key prefix or table, so it
//! runs on the SQL backends (`backend_tests!`) and on Redis; the rest on the SQL backends.

use serde_json::Value;
use shedlock::history::{NewRun, RunOutcome};
use shedlock::schedules::ScheduleStore;
use shedlock::{LockAdmin, LockProvider, RunStore};

use crate::common::{
    CliDb, HOLDER, Out, TEN_MINUTES, assert_done, cfg, millis, parse_table, provider, run, state,
    tick,
};

/// `shedlock --database-url URL --table TABLE ARGS`.
pub(crate) async fn at(url: &str, table: &str, args: &[&str]) -> Out {
    let mut all = vec!["--database-url", url, "--table", table];
    all.extend_from_slice(args);
    run(&all, &[("USER", "ops-ann")], "").await
}

/// The JSON object a command printed.
pub(crate) fn object(out: &Out) -> Value {
    match serde_json::from_str(&out.stdout) {
        Ok(value @ Value::Object(_)) => value,
        other => panic!("a JSON object expected: {other:?} from {out:#?}"),
    }
}

/// The one job of `jobs --json` named `name`.
fn job<'a>(jobs: &'a Value, name: &str) -> &'a Value {
    jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {jobs:#}"))
}

/// What the tool records as the author: `cli:ops-ann@<host>`.
fn operator() -> String {
    format!(
        "cli:ops-ann@{}",
        gethostname::gethostname().to_string_lossy()
    )
}

/// create → jobs → pause → jobs (paused) → resume → a bad reschedule refused with the hint and
/// nothing written → reschedule → trigger twice (the second exits 4) → reset refused → delete,
/// each with `--json` checked field by field.
pub(crate) async fn main_path<S: ScheduleStore + ?Sized>(url: &str, table: &str, store: &S) {
    let name = "repo_sync_42";
    let by = operator();
    let out = at(
        url,
        table,
        &[
            "create",
            name,
            "--handler",
            "repo_sync",
            "--cron",
            "0 0 3 * * *",
            "--time-zone",
            "Europe/Berlin",
            "--payload",
            r#"{"repository_id": 42}"#,
            "--json",
        ],
    )
    .await;
    assert_done(&out);
    let created = object(&out);
    assert_eq!(created["result"], "created");
    let s = &created["schedule"];
    assert_eq!(s["name"], name);
    assert_eq!(s["kind"], "run-time");
    assert_eq!(s["handler"], "repo_sync");
    assert_eq!(s["payload"]["repository_id"], 42);
    assert_eq!(s["cron"], "0 0 3 * * *");
    assert_eq!(s["time_zone"], "Europe/Berlin");
    assert_eq!(s["paused"], false);
    assert_eq!(s["updated_by"], by);
    assert_eq!(s["trigger"], Value::Null);
    assert_eq!(created["next_ticks"].as_array().unwrap().len(), 3);
    // 03:00 in Berlin is 01:00 or 02:00 UTC.
    let first = created["next_ticks"][0].as_str().unwrap();
    assert!(
        first.ends_with("T02:00:00.000Z") || first.ends_with("T01:00:00.000Z"),
        "{first}"
    );
    assert_eq!(s["next_tick"], first);
    let stored = store.schedule(name).await.unwrap().unwrap();
    assert_eq!(stored.payload.as_deref(), Some(r#"{"repository_id": 42}"#));
    assert_eq!(s["version"], stored.version);

    // A second create changes nothing: exit 4.
    let out = at(
        url,
        table,
        &[
            "create",
            name,
            "--handler",
            "other",
            "--cron",
            "0 0 * * * *",
        ],
    )
    .await;
    assert_eq!(out.code, 4, "{out:#?}");
    assert!(
        out.error_line().contains("already holds a schedule"),
        "{out:#?}"
    );

    let out = at(url, table, &["jobs", "--json"]).await;
    assert_done(&out);
    let jobs = object(&out);
    assert_eq!(jobs["history"], true);
    assert_eq!(jobs["fleet"]["paused"], false);
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs:#}");
    let j = job(&jobs, name);
    assert_eq!(j["kind"], "run-time");
    assert_eq!(j["cron"], "0 0 3 * * *");
    assert_eq!(j["paused"], false);
    assert_eq!(j["next_tick"], first);
    assert_eq!(j["last_run"], Value::Null);
    assert_eq!(j["lock"], Value::Null);
    let out = at(url, table, &["jobs"]).await;
    let rows = parse_table(&out.stdout);
    assert_eq!(rows.len(), 1, "{}", out.stdout);
    assert_eq!(rows[0]["NAME"], name);
    assert_eq!(rows[0]["KIND"], "run-time (repo_sync)");
    assert_eq!(rows[0]["TIME_ZONE"], "Europe/Berlin");
    assert_eq!(rows[0]["PAUSED"], "no");
    // Issue 49, point 4: the job's next runs, in UTC and on its zone's clock.
    let out = at(url, table, &["jobs", name, "--next", "3", "--json"]).await;
    assert_done(&out);
    let upcoming = object(&out);
    assert_eq!(upcoming["source"], "run-time");
    assert_eq!(upcoming["time_zone"], "Europe/Berlin");
    let ticks = upcoming["ticks"].as_array().unwrap();
    assert_eq!(ticks.len(), 3, "{upcoming:#}");
    assert_eq!(ticks[0]["tick"], first);
    for tick in ticks {
        assert_eq!(tick["runs_at"], tick["tick"], "no jitter: {upcoming:#}");
        assert_eq!(tick["left_out"], Value::Null);
        let local = tick["local"].as_str().unwrap();
        assert!(local.contains("T03:00:00+0"), "{local}");
    }
    let out = at(url, table, &["jobs", name, "--next", "2"]).await;
    assert_done(&out);
    let rows = parse_table(out.stdout.split_once('\n').unwrap().1);
    assert_eq!(rows.len(), 2, "{}", out.stdout);
    assert_eq!(rows[0]["RUN"], "runs", "{}", out.stdout);
    assert!(
        out.stdout.starts_with(&format!(
            "{name}: \"0 0 3 * * *\" in Europe/Berlin (a job created at run time)"
        )),
        "{}",
        out.stdout
    );
    let out = at(url, table, &["jobs", "repo_sync_4", "--next", "2"]).await;
    assert_eq!(out.code, 3, "{out:#?}");
    assert!(out.error_line().contains("did you mean"), "{out:#?}");

    let out = at(url, table, &["pause", name, "--json"]).await;
    assert_done(&out);
    let paused = object(&out);
    assert_eq!(paused["result"], "paused");
    assert_eq!(paused["was_paused"], false);
    assert_eq!(paused["cancel_running"], Value::Null);
    assert_eq!(paused["schedule"]["paused"], true);
    assert!(store.schedule(name).await.unwrap().unwrap().paused);
    let jobs = object(&at(url, table, &["jobs", "--json"]).await);
    assert_eq!(job(&jobs, name)["paused"], true);
    // A paused job's ticks do not run, and say why.
    let upcoming = object(&at(url, table, &["jobs", name, "--next", "2", "--json"]).await);
    let ticks = upcoming["ticks"].as_array().unwrap();
    assert_eq!(ticks.len(), 2, "{upcoming:#}");
    for tick in ticks {
        assert_eq!(tick["runs_at"], Value::Null, "{upcoming:#}");
        assert_eq!(tick["left_out"]["reason"], "paused", "{upcoming:#}");
        assert_eq!(tick["left_out"]["by"], by.as_str(), "{upcoming:#}");
    }
    let out = at(url, table, &["jobs", name, "--next", "1"]).await;
    assert!(
        out.stdout
            .contains(&format!("does not run: paused by {by}")),
        "{}",
        out.stdout
    );
    let out = at(url, table, &["jobs"]).await;
    assert_eq!(
        parse_table(&out.stdout)[0]["PAUSED"],
        "yes",
        "{}",
        out.stdout
    );

    let out = at(url, table, &["resume", name, "--json"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    let resumed = object(&out);
    assert_eq!(
        (&resumed["result"], &resumed["was_paused"]),
        (&Value::from("resumed"), &Value::from(true))
    );
    assert!(!store.schedule(name).await.unwrap().unwrap().paused);

    // A bad cron is refused with the macros' hint, and nothing is written.
    let version = store.schedules_version().await.unwrap();
    let out = at(
        url,
        table,
        &["reschedule", name, "--cron", "0 */61 * * * *"],
    )
    .await;
    assert_eq!(out.code, 2, "{out:#?}");
    let line = out.error_line();
    assert!(
        line.starts_with("shedlock: error: invalid cron expression \"0 */61 * * * *\"")
            && line.contains("larger than its largest value")
            && line.contains("such as"),
        "{line}"
    );
    let out = at(
        url,
        table,
        &[
            "reschedule",
            name,
            "--cron",
            "0 0 4 * * *",
            "--time-zone",
            "Europe/Berln",
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(out.error_line().contains("Europe/Berlin"), "{out:#?}");
    assert_eq!(store.schedules_version().await.unwrap(), version);
    assert_eq!(
        store.schedule(name).await.unwrap().unwrap().cron.as_deref(),
        Some("0 0 3 * * *")
    );

    let out = at(
        url,
        table,
        &[
            "reschedule",
            name,
            "--cron",
            "0 30 4 * * *",
            "--time-zone",
            "UTC",
            "--json",
        ],
    )
    .await;
    assert_done(&out);
    let moved = object(&out);
    assert_eq!(moved["old"]["cron"], "0 0 3 * * *");
    assert_eq!(moved["old"]["time_zone"], "Europe/Berlin");
    assert_eq!(moved["new"]["cron"], "0 30 4 * * *");
    assert_eq!(moved["new"]["time_zone"], "UTC");
    assert_eq!(moved["time_zone_assumed"], false);
    let ticks: Vec<&str> = moved["next_ticks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(ticks.len(), 3);
    assert!(
        ticks.iter().all(|t| t.ends_with("T04:30:00.000Z")),
        "{ticks:?}"
    );
    assert!(ticks.windows(2).all(|w| w[0] < w[1]), "{ticks:?}");
    let stored = store.schedule(name).await.unwrap().unwrap();
    assert_eq!(
        (stored.cron.as_deref(), stored.time_zone.as_deref()),
        (Some("0 30 4 * * *"), Some("UTC"))
    );
    assert!(stored.version > version);

    let out = at(url, table, &["trigger", name, "--json"]).await;
    assert_done(&out);
    let asked = object(&out);
    assert_eq!(asked["result"], "requested");
    assert_eq!(asked["requested_by"], by);
    let id = asked["id"].as_i64().unwrap();
    let out = at(url, table, &["trigger", name, "--json"]).await;
    assert_eq!(out.code, 4, "{out:#?}");
    let again = object(&out);
    assert_eq!(again["result"], "already_pending");
    assert_eq!(again["trigger"]["id"], id);
    assert_eq!(again["trigger"]["requested_by"], by);
    assert_eq!(again["trigger"]["started"], false);
    assert!(
        out.error_line()
            .starts_with(&format!("shedlock: already pending (asked by {by} at ")),
        "{out:#?}"
    );
    let out = at(url, table, &["trigger", name]).await;
    assert_eq!((out.code, out.stdout.as_str()), (4, ""), "{out:#?}");
    let jobs = object(&at(url, table, &["jobs", "--json"]).await);
    let j = job(&jobs, name);
    assert_eq!(j["trigger"]["id"], id);
    assert_eq!(j["trigger"]["claimed_by"], Value::Null);

    // reset is for overrides; delete removes a run-time job.
    let out = at(url, table, &["reset", name]).await;
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(
        out.error_line().contains("use `shedlock delete"),
        "{out:#?}"
    );
    assert!(!store.schedule(name).await.unwrap().unwrap().deleted);
    let out = at(url, table, &["delete", name, "--json"]).await;
    assert_done(&out);
    let deleted = object(&out);
    assert_eq!(
        (&deleted["result"], &deleted["kind"]),
        (&Value::from("deleted"), &Value::from("run-time"))
    );
    assert!(
        store
            .schedule(name)
            .await
            .unwrap()
            .is_none_or(|s| s.deleted)
    );
    let jobs = object(&at(url, table, &["jobs", "--json"]).await);
    assert_eq!(jobs["jobs"], Value::Array(vec![]));
    let out = at(url, table, &["delete", name]).await;
    assert_eq!(out.code, 3, "{out:#?}");
}

pub(crate) async fn schedule_commands_main_path<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let store = provider(db).await;
    main_path(&db.url(), &db.table(), &store).await;
}

/// An override of a code-defined job (known by its lock): pause with --cancel-running releases
/// the running holder's lock by its token; jobs shows the code's defaults; reset clears it.
pub(crate) async fn pause_cancel_running_and_reset_of_an_override<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let store = provider(db).await;
    failed_nightly(&store).await;
    override_path(&db.url(), &db.table(), &store).await;
}

/// A finished run of `nightly` (failed, at `tick(1)`): `jobs` shows it as the last run.
pub(crate) async fn failed_nightly(store: &impl RunStore) {
    let id = store
        .record_run(
            &NewRun::new("nightly", "nightly", Some(tick(1)), RunOutcome::Running)
                .fencing_token(Some(1)),
        )
        .await
        .unwrap();
    store
        .finish_run(id, RunOutcome::Failed, Some("upstream 503"))
        .await
        .unwrap();
}

/// The override case on any store (a run of `nightly` was recorded, failed, at `tick(1)`).
pub(crate) async fn override_path<S: ScheduleStore + LockAdmin>(url: &str, table: &str, store: &S) {
    let (url, table) = (url.to_owned(), table.to_owned());
    let guard = store
        .lock(&cfg("nightly", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();

    let out = at(&url, &table, &["jobs", "--json"]).await;
    assert_eq!(object(&out)["jobs"], Value::Array(vec![]), "{out:#?}");
    // Resuming what is not paused writes nothing (no empty override).
    let version = store.schedules_version().await.unwrap();
    for args in [
        &["resume", "nightly", "--json"][..],
        &["resume", "--fleet", "--json"],
    ] {
        let out = at(&url, &table, args).await;
        assert_done(&out);
        assert_eq!(object(&out)["result"], "not_paused", "{args:?}");
    }
    assert_eq!(store.schedules_version().await.unwrap(), version);
    assert!(store.schedule("nightly").await.unwrap().is_none());

    let out = at(
        &url,
        &table,
        &["pause", "nightly", "--cancel-running", "--json"],
    )
    .await;
    assert_done(&out);
    let paused = object(&out);
    assert_eq!(paused["schedule"]["kind"], "override");
    assert_eq!(paused["schedule"]["paused"], true);
    let cancel = &paused["cancel_running"];
    assert_eq!(cancel["held"], true);
    assert_eq!(cancel["released"], true);
    assert_eq!(cancel["holder"], HOLDER);
    assert_eq!(cancel["fencing_token"], token);
    let lock = state(&store, "nightly").await;
    assert!(!lock.is_held(), "{lock:?}");
    assert_eq!(lock.fencing_token, token);
    assert!(!store.is_held("nightly", token).await.unwrap());

    // Paused again: the lock is free now, nothing to release.
    let out = at(&url, &table, &["pause", "nightly", "--cancel-running"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stdout.contains("it was paused already"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("is free"), "{}", out.stdout);

    let jobs = object(&at(&url, &table, &["jobs", "--json"]).await);
    let j = job(&jobs, "nightly");
    assert_eq!(j["kind"], "override");
    assert_eq!(j["handler"], Value::Null);
    assert_eq!(j["cron"], Value::Null);
    assert_eq!(j["next_tick"], Value::Null);
    assert_eq!(j["lock"]["held"], false);
    assert_eq!(j["lock"]["fencing_token"], token);
    assert_eq!(j["lock"]["locked_by"], HOLDER);
    let run = &j["last_run"];
    assert_eq!(run["outcome"], "failed", "{j:#}");
    assert_eq!(run["tick"], millis(tick(1)));
    assert_eq!(run["instance"], HOLDER);
    assert!(run["duration_ms"].as_u64().is_some(), "{run}");
    let out = at(&url, &table, &["jobs"]).await;
    let rows = parse_table(&out.stdout);
    assert_eq!(rows[0]["CRON"], "code default", "{}", out.stdout);
    assert_eq!(rows[0]["TIME_ZONE"], "code default");
    assert_eq!(rows[0]["LOCK"], format!("free (token {token})"));
    assert!(
        rows[0]["LAST_RUN"].starts_with("failed at "),
        "{}",
        out.stdout
    );
    assert_eq!(rows[0]["INSTANCE"], HOLDER);

    // An override without a time zone: the ticks are shown in UTC, said so.
    let out = at(
        &url,
        &table,
        &["reschedule", "nightly", "--cron", "0 15 2 * * *", "--json"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let moved = object(&out);
    assert_eq!(moved["old"]["cron"], Value::Null);
    assert_eq!(moved["new"]["time_zone"], Value::Null);
    assert_eq!(moved["time_zone_assumed"], true);
    assert_eq!(moved["schedule"]["paused"], true);

    let out = at(&url, &table, &["reset", "nightly", "--json"]).await;
    assert_done(&out);
    let reset = object(&out);
    assert_eq!(reset["result"], "reset");
    assert_eq!(reset["cleared"]["cron"], "0 15 2 * * *");
    assert!(
        store
            .schedule("nightly")
            .await
            .unwrap()
            .is_none_or(|s| s.deleted)
    );
    // Known by its lock, without an override: nothing to do.
    let out = at(&url, &table, &["reset", "nightly"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(out.stdout.contains("nothing to do"), "{}", out.stdout);
    // Nothing to delete either: it is defined in code.
    let out = at(&url, &table, &["delete", "nightly"]).await;
    assert_eq!(out.code, 3, "{out:#?}");
    assert!(out.error_line().contains("defined in code"), "{out:#?}");
    drop(guard);
}

/// A name the store does not know: exit 3 with the closest name, and nothing written; the
/// fleet's pause; bad payloads.
pub(crate) async fn unknown_names_fleet_pause_and_bad_input<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let store = provider(db).await;
    unknown_names_path(&db.url(), &db.table(), &store).await;
}

/// The unknown-name case on any store.
pub(crate) async fn unknown_names_path<S: ScheduleStore + ?Sized>(
    url: &str,
    table: &str,
    store: &S,
) {
    let (url, table) = (url.to_owned(), table.to_owned());
    let out = at(
        &url,
        &table,
        &[
            "create",
            "nightly-report",
            "--handler",
            "report",
            "--cron",
            "0 0 3 * * *",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let version = store.schedules_version().await.unwrap();
    for args in [
        &["pause", "nightly-reprot"][..],
        &["pause", "nightly-reprot", "--cancel-running"],
        &["resume", "nightly-reprot"],
        &["trigger", "nightly-reprot"],
        &["reschedule", "nightly-reprot", "--cron", "0 0 4 * * *"],
        &["reset", "nightly-reprot"],
        &["delete", "nightly-reprot"],
    ] {
        let out = at(&url, &table, args).await;
        assert_eq!(out.code, 3, "{args:?}: {out:#?}");
        assert_eq!(
            out.error_line(),
            "shedlock: the store holds no schedule named \"nightly-reprot\"; did you mean \
             \"nightly-report\"? (`shedlock jobs` lists the schedules, `shedlock list` the locks)",
            "{args:?}"
        );
    }
    let out = at(&url, &table, &["trigger", "weekly-cleanup"]).await;
    assert_eq!(out.code, 3, "{out:#?}");
    assert!(!out.error_line().contains("did you mean"), "{out:#?}");
    assert!(store.schedule("nightly-reprot").await.unwrap().is_none());
    assert_eq!(store.schedules_version().await.unwrap(), version);

    for (payload, code) in [("{\"id\": 4", 2), ("not json", 2)] {
        let out = at(
            &url,
            &table,
            &[
                "create",
                "j",
                "--handler",
                "h",
                "--cron",
                "0 0 3 * * *",
                "--payload",
                payload,
            ],
        )
        .await;
        assert_eq!(out.code, code, "{out:#?}");
        assert!(out.error_line().contains("is not JSON"), "{out:#?}");
    }
    let out = at(
        &url,
        &table,
        &[
            "create",
            "j",
            "--handler",
            "h",
            "--cron",
            "0 0 3 * * *",
            "--time-zone",
            "Mars/Base",
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(
        out.error_line().contains("unknown time zone \"Mars/Base\""),
        "{out:#?}"
    );
    assert_eq!(store.schedules_version().await.unwrap(), version);

    let out = at(&url, &table, &["pause", "--fleet", "--json"]).await;
    assert_done(&out);
    let paused = object(&out);
    assert_eq!(paused["name"], "shedlock.fleet");
    assert_eq!(paused["fleet"], true);
    assert!(
        store
            .schedule("shedlock.fleet")
            .await
            .unwrap()
            .unwrap()
            .paused
    );
    let jobs = object(&at(&url, &table, &["jobs", "--json"]).await);
    assert_eq!(jobs["fleet"]["paused"], true);
    assert_eq!(jobs["fleet"]["updated_by"], operator());
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs:#}");
    let out = at(&url, &table, &["jobs"]).await;
    let (first, table_text) = out.stdout.split_once('\n').unwrap();
    assert!(
        first.starts_with("the whole fleet is PAUSED"),
        "{}",
        out.stdout
    );
    assert_eq!(parse_table(table_text)[0]["NAME"], "nightly-report");
    let out = at(&url, &table, &["resume", "--fleet"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    let jobs = object(&at(&url, &table, &["jobs", "--json"]).await);
    assert_eq!(jobs["fleet"]["paused"], false);
    let out = at(&url, &table, &["pause", "nightly-report", "--fleet"]).await;
    assert_eq!(out.code, 2, "{out:#?}");
}

/// The row of `jobs` (text) named `name`.
fn row(out: &Out, name: &str) -> std::collections::BTreeMap<String, String> {
    parse_table(&out.stdout)
        .into_iter()
        .find(|r| r["NAME"] == name)
        .unwrap_or_else(|| panic!("{name} in {}", out.stdout))
}

/// `--jitter`, `--retry …` and `--no-retry` on `reschedule` (without `--cron`) and `create`:
/// each stored as given (read back through the store), shown by `jobs` (text and JSON); bad
/// values refused (exit 2) naming the flag, with nothing written.
pub(crate) async fn tuning_path<S: ScheduleStore + LockAdmin>(url: &str, table: &str, store: &S) {
    use std::time::Duration;

    use shedlock::schedules::RetryPolicy;
    let (url, table) = (url.to_owned(), table.to_owned());
    let sec = Duration::from_secs(1);
    // A code-defined job, known to the store by its lock.
    drop(
        store
            .lock(&cfg("nightly", TEN_MINUTES))
            .await
            .unwrap()
            .unwrap(),
    );

    // Nothing to change: refused, naming the flags.
    let version = store.schedules_version().await.unwrap();
    let out = at(&url, &table, &["reschedule", "nightly"]).await;
    assert_eq!(out.code, 2, "{out:#?}");
    let line = out.error_line();
    for flag in ["--cron", "--jitter", "--retry", "--no-retry"] {
        assert!(line.contains(flag), "{flag} in {line}");
    }

    // Bad values: exit 2, the flag named, nothing written.
    for (args, flag) in [
        (&["--jitter", "soon"][..], "--jitter"),
        (&["--jitter", "-5s"], "--jitter"),
        (&["--retry", "-1"], "--retry"),
        (&["--retry", "3", "--retry-cap", "-1m"], "--retry-cap"),
        (&["--retry", "0"], "--retry"),
        (&["--retry", "1001"], "--retry"),
        (&["--retry", "many"], "--retry"),
        (
            &["--retry", "3", "--retry-backoff", "0s"],
            "--retry-backoff",
        ),
        (
            &["--retry", "3", "--retry-backoff", "fast"],
            "--retry-backoff",
        ),
        (
            &[
                "--retry",
                "3",
                "--retry-backoff",
                "10s",
                "--retry-cap",
                "5s",
            ],
            "--retry-cap",
        ),
        (&["--retry", "3", "--retry-cap", "2000y"], "--retry-cap"),
        (&["--retry-backoff", "5s"], "--retry"),
        (&["--retry-past-next-tick"], "--retry"),
        (&["--retry", "3", "--no-retry"], "--no-retry"),
        (
            &["--retry", "default", "--retry-cap", "5m"],
            "--retry default",
        ),
        (&["--time-zone", "UTC"], "--cron"),
    ] {
        let mut all = vec!["reschedule", "nightly"];
        all.extend_from_slice(args);
        let out = at(&url, &table, &all).await;
        assert_eq!(out.code, 2, "{args:?}: {out:#?}");
        assert!(
            out.error_line().contains(flag),
            "{flag} for {args:?}: {out:#?}"
        );
    }
    assert_eq!(store.schedules_version().await.unwrap(), version);
    assert!(store.schedule("nightly").await.unwrap().is_none());

    // Only jitter and retry: the cron stays the code's.
    let out = at(
        &url,
        &table,
        &[
            "reschedule",
            "nightly",
            "--jitter",
            "90s",
            "--retry",
            "4",
            "--retry-backoff",
            "2s",
            "--retry-cap",
            "30s",
            "--retry-past-next-tick",
            "--json",
        ],
    )
    .await;
    assert_done(&out);
    let moved = object(&out);
    assert_eq!(moved["result"], "rescheduled");
    assert_eq!(moved["old"]["jitter_ms"], Value::Null);
    assert_eq!(moved["old"]["retry"], Value::Null);
    assert_eq!(moved["new"]["jitter_ms"], 90_000);
    assert_eq!(moved["new"]["retry"]["max_attempts"], 4);
    assert_eq!(moved["new"]["retry"]["base_ms"], 2_000);
    assert_eq!(moved["new"]["retry"]["cap_ms"], 30_000);
    assert_eq!(moved["new"]["retry"]["past_next_tick"], true);
    assert_eq!(moved["new"]["cron"], Value::Null);
    assert_eq!(moved["next_ticks"], Value::Array(vec![]));
    assert_eq!(moved["schedule"]["kind"], "override");
    let stored = store.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(stored.jitter, Some(90 * sec));
    assert_eq!(
        stored.retry,
        Some(RetryPolicy::new(4, 2 * sec, 30 * sec).past_next_tick(true))
    );
    assert_eq!((stored.cron, stored.paused), (None, false));
    let jobs = object(&at(&url, &table, &["jobs", "--json"]).await);
    let j = job(&jobs, "nightly");
    assert_eq!(j["jitter_ms"], 90_000);
    assert_eq!(j["retry"], moved["new"]["retry"]);
    let out = at(&url, &table, &["jobs"]).await;
    let r = row(&out, "nightly");
    assert_eq!(r["JITTER"], "1m 30s", "{}", out.stdout);
    assert_eq!(r["RETRY"], "4 attempts, 2s..30s, past next tick");
    assert_eq!(r["CRON"], "code default");

    // --retry alone: the defaults (1s, 1m, not past the next tick); the jitter stays.
    let out = at(&url, &table, &["reschedule", "nightly", "--retry", "3"]).await;
    assert_done(&out);
    assert!(
        out.stdout
            .contains("  retry      4 attempts, 2s..30s, past next tick → 3 attempts, 1s..1m\n"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("jitter"), "{}", out.stdout);
    assert!(!out.stdout.contains("cron"), "{}", out.stdout);
    let stored = store.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(stored.retry, Some(RetryPolicy::new(3, sec, 60 * sec)));
    assert_eq!(stored.jitter, Some(90 * sec));
    // A backoff longer than the default cap: the cap is the backoff.
    let out = at(
        &url,
        &table,
        &[
            "reschedule",
            "nightly",
            "--retry",
            "2",
            "--retry-backoff",
            "5m",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let stored = store.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(
        stored.retry,
        Some(RetryPolicy::new(2, 300 * sec, 300 * sec))
    );

    // No jitter and no retry, whatever the code says.
    let out = at(
        &url,
        &table,
        &["reschedule", "nightly", "--jitter", "none", "--no-retry"],
    )
    .await;
    assert_done(&out);
    assert!(
        out.stdout.contains("  jitter     1m 30s → none\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("  retry      2 attempts, 5m..5m → no retry\n"),
        "{}",
        out.stdout
    );
    let stored = store.schedule("nightly").await.unwrap().unwrap();
    assert_eq!(stored.jitter, Some(Duration::ZERO));
    assert_eq!(stored.retry.map(|r| r.max_attempts), Some(1));
    let out = at(&url, &table, &["jobs"]).await;
    let r = row(&out, "nightly");
    assert_eq!(
        (r["JITTER"].as_str(), r["RETRY"].as_str()),
        ("none", "no retry")
    );
    let jobs = object(&at(&url, &table, &["jobs", "--json"]).await);
    assert_eq!(job(&jobs, "nightly")["jitter_ms"], 0);
    assert_eq!(job(&jobs, "nightly")["retry"]["max_attempts"], 1);
    // `0` is no jitter too.
    let out = at(&url, &table, &["reschedule", "nightly", "--jitter", "0"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(
        store.schedule("nightly").await.unwrap().unwrap().jitter,
        Some(Duration::ZERO)
    );

    // `default`: the stored values cleared, the code's apply again.
    let out = at(
        &url,
        &table,
        &[
            "reschedule",
            "nightly",
            "--jitter",
            "default",
            "--retry",
            "default",
        ],
    )
    .await;
    assert_done(&out);
    let stored = store.schedule("nightly").await.unwrap().unwrap();
    assert_eq!((stored.jitter, stored.retry), (None, None));
    let r = row(&at(&url, &table, &["jobs"]).await, "nightly");
    assert_eq!(
        (r["JITTER"].as_str(), r["RETRY"].as_str()),
        ("default", "default")
    );

    // create with them; `default` means nothing for a run-time job.
    let out = at(
        &url,
        &table,
        &[
            "create",
            "report",
            "--handler",
            "report",
            "--cron",
            "0 0 3 * * *",
            "--jitter",
            "5m",
            "--retry",
            "2",
            "--retry-cap",
            "10s",
        ],
    )
    .await;
    assert_done(&out);
    assert!(out.stdout.contains("\n  jitter  5m\n"), "{}", out.stdout);
    assert!(
        out.stdout.contains("\n  retry   2 attempts, 1s..10s\n"),
        "{}",
        out.stdout
    );
    let stored = store.schedule("report").await.unwrap().unwrap();
    assert_eq!(stored.jitter, Some(300 * sec));
    assert_eq!(stored.retry, Some(RetryPolicy::new(2, sec, 10 * sec)));
    // A new cron keeps them.
    let out = at(
        &url,
        &table,
        &["reschedule", "report", "--cron", "0 0 4 * * *"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let stored = store.schedule("report").await.unwrap().unwrap();
    assert_eq!(stored.cron.as_deref(), Some("0 0 4 * * *"));
    assert_eq!(stored.jitter, Some(300 * sec));
    assert_eq!(stored.retry, Some(RetryPolicy::new(2, sec, 10 * sec)));
    let version = store.schedules_version().await.unwrap();
    for flag in ["--jitter", "--retry"] {
        let out = at(
            &url,
            &table,
            &[
                "create",
                "other",
                "--handler",
                "h",
                "--cron",
                "0 0 3 * * *",
                flag,
                "default",
            ],
        )
        .await;
        assert_eq!(out.code, 2, "{out:#?}");
        assert!(out.error_line().contains(flag), "{out:#?}");
    }
    assert_eq!(store.schedules_version().await.unwrap(), version);
    assert!(store.schedule("other").await.unwrap().is_none());
}

pub(crate) async fn jitter_and_retry_from_the_command_line<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let store = provider(db).await;
    tuning_path(&db.url(), &db.table(), &store).await;
}

/// `pause --cancel-running` of a job whose lock is named otherwise (`steered`, lock
/// `steered_lock`, held with `token`): found through the run history when it records a run of
/// the job (`recorded`: a run going on, as the scheduler records it), else given with
/// `--lock`; a run-time job's lock is its name.
pub(crate) async fn cancel_named_lock_path<S: ScheduleStore + LockAdmin>(
    url: &str,
    table: &str,
    store: &S,
    token: i64,
    recorded: bool,
) {
    let (url, table) = (url.to_owned(), table.to_owned());
    // --lock only goes with --cancel-running.
    let out = at(
        &url,
        &table,
        &["pause", "steered", "--lock", "steered_lock"],
    )
    .await;
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(out.error_line().contains("--cancel-running"), "{out:#?}");
    if recorded {
        let out = at(
            &url,
            &table,
            &["pause", "steered", "--cancel-running", "--json"],
        )
        .await;
        assert_done(&out);
        let cancel = &object(&out)["cancel_running"];
        assert_eq!(cancel["lock_name"], "steered_lock", "{cancel:#}");
        assert_eq!(cancel["lock_found_by"], "run_history");
        assert_eq!(cancel["released"], true);
        assert_eq!(cancel["holder"], HOLDER);
        assert_eq!(cancel["fencing_token"], token);
    } else {
        // Nothing in the store names the job: its lock must be given.
        let out = at(&url, &table, &["pause", "steered", "--cancel-running"]).await;
        assert_eq!(out.code, 3, "{out:#?}");
        assert!(state(store, "steered_lock").await.is_held());
        let out = at(
            &url,
            &table,
            &[
                "pause",
                "steered",
                "--cancel-running",
                "--lock",
                "steered_lock",
                "--json",
            ],
        )
        .await;
        assert_done(&out);
        let cancel = &object(&out)["cancel_running"];
        assert_eq!(cancel["lock_name"], "steered_lock", "{cancel:#}");
        assert_eq!(cancel["lock_found_by"], "option");
        assert_eq!(cancel["released"], true);
        assert_eq!(cancel["fencing_token"], token);
    }
    let lock = state(store, "steered_lock").await;
    assert!(!lock.is_held(), "{lock:?}");
    assert!(!store.is_held("steered_lock", token).await.unwrap());
    assert!(store.schedule("steered").await.unwrap().unwrap().paused);
    assert!(store.lock_state("steered").await.unwrap().is_none());

    // Held again: --lock names it, and the text says which lock and why.
    let guard = store
        .lock(&cfg("steered_lock", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let out = at(
        &url,
        &table,
        &[
            "pause",
            "steered",
            "--cancel-running",
            "--lock",
            "steered_lock",
        ],
    )
    .await;
    assert_done(&out);
    assert!(
        out.stdout.contains(&format!(
            "--cancel-running: released the lock \"steered_lock\" (given with --lock) held by {HOLDER} (token {})",
            guard.fencing_token()
        )),
        "{}",
        out.stdout
    );
    assert!(!state(store, "steered_lock").await.is_held());
    drop(guard);

    // A run-time job's lock is its name.
    let out = at(
        &url,
        &table,
        &["create", "rt", "--handler", "h", "--cron", "0 0 3 * * *"],
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    let guard = store.lock(&cfg("rt", TEN_MINUTES)).await.unwrap().unwrap();
    let out = at(&url, &table, &["pause", "rt", "--cancel-running", "--json"]).await;
    assert_done(&out);
    let cancel = &object(&out)["cancel_running"];
    assert_eq!(cancel["lock_name"], "rt", "{cancel:#}");
    assert_eq!(cancel["lock_found_by"], "run_time_job");
    assert_eq!(cancel["released"], true);
    assert_eq!(cancel["fencing_token"], guard.fencing_token());
    drop(guard);

    // A job with neither a lock of its name nor runs: the text says to give --lock.
    let out = at(
        &url,
        &table,
        &[
            "pause",
            "ghost",
            "--cancel-running",
            "--lock",
            "steered_lock",
        ],
    )
    .await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stdout.contains("(given with --lock) is free"),
        "{}",
        out.stdout
    );
    let out = at(&url, &table, &["pause", "ghost", "--cancel-running"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stdout.contains(
            "no lock named \"ghost\" and no run of the job in a run history: no run to cancel \
             (if the job's lock is named otherwise, give it with --lock LOCK)"
        ),
        "{}",
        out.stdout
    );
}

/// On an SQL store: a run of `steered` going on under `steered_lock`, recorded as the scheduler
/// records it.
pub(crate) async fn pause_cancel_running_finds_a_lock_named_otherwise<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let store = provider(db).await;
    let guard = store
        .lock(&cfg("steered_lock", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    store
        .record_run(
            &NewRun::new(
                "steered",
                "steered_lock",
                Some(tick(2)),
                RunOutcome::Running,
            )
            .fencing_token(Some(token)),
        )
        .await
        .unwrap();
    cancel_named_lock_path(&db.url(), &db.table(), &store, token, true).await;
    drop(guard);
}

/// The jobs an instance registered (issue 47): `jobs` lists them with the instance that carries
/// them; `pause` and `trigger` find them by name, a job whose lock is named otherwise and a
/// yearly one that never ran included, and report them done; a change to a job known only by
/// its lock, which no running instance carries, is stored with a warning that says so.
pub(crate) async fn registered_jobs_path<S: ScheduleStore + LockAdmin>(
    url: &str,
    table: &str,
    store: &S,
) {
    use shedlock::schedules::{RegisteredJob, Registration};
    let mut beat = RegisteredJob::new("beat_0", "* * * * * *", "UTC");
    beat.lock = Some("heartbeat_0".to_owned());
    let mut rare = RegisteredJob::new("rare", "0 0 0 1 1 *", "UTC");
    rare.lock = Some("rare".to_owned());
    rare.overlap = Some("buffer_all:2".to_owned());
    rare.deadlines = Some(
        shedlock::schedules::Deadlines::default().late_after(std::time::Duration::from_secs(30)),
    );
    // A job whose lock is taken in its body: no lock registered.
    let loose = RegisteredJob::new("loose", "0 0 0 1 1 *", "UTC");
    let registration = Registration::new(
        "pod-a",
        "default",
        vec![beat, rare, loose],
        std::time::Duration::from_secs(600),
    );
    store.register(&registration).await.unwrap();

    let out = at(url, table, &["jobs", "--json"]).await;
    assert_done(&out);
    let jobs = object(&out);
    let beat = job(&jobs, "beat_0");
    assert_eq!(beat["kind"], "code", "{beat:#}");
    assert_eq!(beat["cron"], "* * * * * *", "{beat:#}");
    assert_eq!(beat["code"]["lock"], "heartbeat_0", "{beat:#}");
    assert_eq!(beat["carriers"][0]["instance"], "pod-a", "{beat:#}");
    assert_eq!(beat["carriers"][0]["running"], true, "{beat:#}");
    assert_eq!(beat["overlap"], Value::Null, "skip: {beat:#}");
    // `rare` buffers all (two at most): a run holds its place, a tick waits (issue 48).
    let minute = std::time::Duration::from_secs(60);
    let place =
        shedlock::LockConfiguration::new("rare:run1", minute, std::time::Duration::ZERO).unwrap();
    let waiting = shedlock::LockConfiguration::new("rare:wait1", minute, std::time::Duration::ZERO)
        .unwrap()
        .for_tick(chrono::Utc::now());
    let _place = store
        .lock(&place)
        .await
        .unwrap()
        .expect("the place is free");
    let _waiting = store
        .lock(&waiting)
        .await
        .unwrap()
        .expect("the wait row is free");
    let out = at(url, table, &["jobs", "--json"]).await;
    assert_done(&out);
    let jobs = object(&out);
    let rare = job(&jobs, "rare");
    assert_eq!(
        rare["overlap"],
        serde_json::json!({ "policy": "buffer_all:2", "running": 1, "waiting": 1, "source": "code" }),
        "{rare:#}"
    );
    assert_eq!(rare["code"]["overlap"], "buffer_all:2", "{rare:#}");
    let out = at(url, table, &["jobs"]).await;
    assert_done(&out);
    assert!(out.stdout.contains("CARRIED_BY"), "{out:#?}");
    assert!(out.stdout.contains("OVERLAP"), "{out:#?}");
    assert!(
        out.stdout.contains("buffer_all:2 (1 running, 1 waiting)"),
        "{}",
        out.stdout
    );

    // An operator's overlap policy (`reschedule --overlap`, issue 48): checked against the lock
    // the instance registered, stored, and listed as the policy the job fires under, marked
    // as an override; the code's policy's rows still count.
    let out = at(
        url,
        table,
        &["reschedule", "rare", "--overlap", "allow-all:3"],
    )
    .await;
    assert_done(&out);
    assert!(
        out.stdout.contains("overlap    code default → allow_all:3"),
        "{}",
        out.stdout
    );
    let out = at(url, table, &["jobs", "--json"]).await;
    assert_done(&out);
    let listed = object(&out);
    let rare = job(&listed, "rare");
    assert_eq!(
        rare["overlap"],
        serde_json::json!({ "policy": "allow_all:3", "running": 1, "waiting": 1, "source": "store" }),
        "{rare:#}"
    );
    assert_eq!(rare["code"]["overlap"], "buffer_all:2", "{rare:#}");
    let out = at(url, table, &["jobs"]).await;
    assert!(
        out.stdout
            .contains("allow_all:3 (store) (1 running, 1 waiting)"),
        "{}",
        out.stdout
    );
    // Refused where it is written, naming why, nothing stored: a bound out of range (by the
    // command line's parser), a job whose instances registered no lock.
    let out = at(
        url,
        table,
        &["reschedule", "rare", "--overlap", "buffer-all:0"],
    )
    .await;
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(
        out.stderr
            .contains("buffer_limit is 0: it must be 1 to 100"),
        "{out:#?}"
    );
    let out = at(
        url,
        table,
        &["reschedule", "loose", "--overlap", "buffer-one"],
    )
    .await;
    assert_ne!(out.code, 0, "{out:#?}");
    assert!(
        out.stderr
            .contains("overlap buffer_one needs the job's lock declared"),
        "{out:#?}"
    );
    assert_eq!(store.schedule("loose").await.unwrap(), None);
    // `default`: the code's policy again.
    let out = at(url, table, &["reschedule", "rare", "--overlap", "default"]).await;
    assert_done(&out);
    let out = at(url, table, &["jobs", "--json"]).await;
    let listed = object(&out);
    let rare = job(&listed, "rare");
    assert_eq!(rare["overlap"]["policy"], "buffer_all:2", "{rare:#}");
    assert_eq!(rare["overlap"]["source"], "code", "{rare:#}");

    // An operator's deadlines (`reschedule --late-after …`, issue 50): a bad value is refused,
    // naming it; each one given is set over the code's, the others kept; `off` turns the
    // code's off, `default` gives it back; `jobs --json` lists them as they apply.
    let out = at(url, table, &["reschedule", "rare", "--late-after", "soon"]).await;
    assert_ne!(out.code, 0, "{out:#?}");
    assert!(
        out.stderr.contains("late_after \"soon\" is not a duration"),
        "{out:#?}"
    );
    let out = at(
        url,
        table,
        &[
            "reschedule",
            "rare",
            "--expect-success-within",
            "2h",
            "--late-after",
            "off",
        ],
    )
    .await;
    assert_done(&out);
    assert!(
        out.stdout.contains(
            "deadlines  the code's → expect_success_within 2h, late_after off (over the code's"
        ),
        "{}",
        out.stdout
    );
    let out = at(url, table, &["jobs", "--json"]).await;
    let listed = object(&out);
    let rare = job(&listed, "rare");
    assert_eq!(
        rare["deadlines"],
        serde_json::json!({
            "applied": ["expect_success_within 2h"],
            "code": ["late_after 30s"],
            "store": ["expect_success_within 2h", "late_after off"],
        }),
        "{rare:#}"
    );
    let out = at(
        url,
        table,
        &["reschedule", "rare", "--late-after", "default", "--json"],
    )
    .await;
    assert_done(&out);
    let done = object(&out);
    assert_eq!(
        done["new"]["deadlines"],
        serde_json::json!(["expect_success_within 2h"]),
        "{done:#}"
    );
    let out = at(url, table, &["jobs", "--json"]).await;
    let rare = job(&object(&out), "rare").clone();
    assert_eq!(
        rare["deadlines"]["applied"],
        serde_json::json!(["expect_success_within 2h", "late_after 30s"]),
        "{rare:#}"
    );

    let out = at(url, table, &["pause", "beat_0", "--json"]).await;
    assert_done(&out);
    let paused = object(&out);
    assert_eq!(paused["result"], "paused");
    assert_eq!(paused["warning"], Value::Null, "{paused:#}");
    let out = at(url, table, &["trigger", "rare", "--json"]).await;
    assert_done(&out);
    let asked = object(&out);
    assert_eq!(asked["result"], "requested");
    assert_eq!(asked["warning"], Value::Null, "{asked:#}");

    // Known only by its lock: no running instance carries it.
    let guard = store
        .lock(&cfg("lonely", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let out = at(url, table, &["pause", "lonely"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        out.stdout.contains("WARNING: no running instance")
            && !out.stdout.contains("fires nowhere"),
        "{out:#?}"
    );
    let out = at(url, table, &["trigger", "lonely", "--json"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    let asked = object(&out);
    assert!(
        asked["warning"]
            .as_str()
            .is_some_and(|w| w.contains("no running instance")),
        "{asked:#}"
    );
    guard.unlock().await.unwrap();
}

pub(crate) async fn registered_jobs_are_listed_and_found<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let store = provider(db).await;
    registered_jobs_path(&db.url(), &db.table(), &store).await;
}
