//! `shedlock calendar …` and a job's time rules from the command line: the whole path written
//! once over a URL and a table (or key prefix), run on PostgreSQL, MariaDB and SQLite
//! (`backend_tests!`) and on Redis (under a key prefix of its own, its keys deleted after):
//! create, add with a label, import an .ics file, show, list, remove, `reschedule --exclude`
//! and the excluded tick in `jobs NAME --next 5` with its reason, `delete` refused while a job
//! excludes the calendar and done after `--rules-default`; and bad input, each with its exit
//! code and the line that names the problem.

use chrono::{TimeDelta, Utc};
use serde_json::Value;
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::schedules::ScheduleStore;
use shedlock::{Backend, RunStore};
use shedlock_redis::RedisLockProvider;
use shedlock_suite::unique_name;

use crate::common::{CliDb, HOLDER, Out, assert_done, parse_table, provider};
use crate::jobs::{at, object};

/// The calendar's and the job's zone: Seoul keeps no daylight saving time, so a day there is
/// always 24 hours from 15:00 UTC.
const ZONE: &str = "Asia/Seoul";

/// A holiday feed as a public calendar exports it: an all-day event, a yearly one by RRULE and
/// a timed one with a TZID. `{FIRST}` is a day of the next weeks, `{AFTER}` the day after it.
const ICS: &str = "BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//Example Holidays//KR//EN\r
X-WR-CALNAME:Holidays\r
X-WR-TIMEZONE:Asia/Seoul\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:{FIRST}\r
DTEND;VALUE=DATE:{AFTER}\r
UID:first@example.com\r
SUMMARY:Company day\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;VALUE=DATE:20301225\r
UID:christmas@example.com\r
RRULE:FREQ=YEARLY;COUNT=3\r
SUMMARY:Christmas Day\r
END:VEVENT\r
BEGIN:VEVENT\r
DTSTART;TZID=Europe/Berlin:{FIRST}T060000\r
DTEND;TZID=Europe/Berlin:{FIRST}T070000\r
UID:sync@example.com\r
SUMMARY:Partner sync\r
END:VEVENT\r
END:VCALENDAR\r
";

/// The day `days` from now on Seoul's wall clock.
fn seoul_day(days: i64) -> chrono::NaiveDate {
    let zone: chrono_tz::Tz = ZONE.parse().unwrap();
    (Utc::now() + TimeDelta::days(days))
        .with_timezone(&zone)
        .date_naive()
}

/// `20261225`.
fn compact(day: chrono::NaiveDate) -> String {
    day.format("%Y%m%d").to_string()
}

/// The one line on stderr of a command that failed with `code`.
fn refused(out: &Out, code: i32) -> String {
    assert_eq!(out.code, code, "{out:#?}");
    assert_eq!(out.stdout, "", "{out:#?}");
    out.error_line().to_owned()
}

/// The entries of a calendar's JSON as `entry label`.
fn entries(calendar: &Value) -> Vec<String> {
    calendar["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["entry"].as_str().unwrap(),
                e["label"].as_str().unwrap_or("-")
            )
        })
        .collect()
}

/// The whole path on the store at `url` under `table` (its records in the run history are
/// checked by [`calendar_records`]).
pub(crate) async fn calendar_path(url: &str, table: &str) {
    let name = "kr-holidays";
    let excluded = seoul_day(2);
    let other = seoul_day(20);
    let ics_day = seoul_day(30);

    // create, with a label: one entry, the day after tomorrow in Seoul.
    let out = at(
        url,
        table,
        &[
            "calendar",
            "create",
            name,
            "--zone",
            ZONE,
            &excluded.to_string(),
            "--label",
            "Founding Day",
            "--json",
        ],
    )
    .await;
    assert_done(&out);
    let created = object(&out);
    assert_eq!(created["result"], "created");
    assert_eq!(created["calendar"]["name"], name);
    assert_eq!(created["calendar"]["time_zone"], ZONE);
    assert_eq!(
        entries(&created["calendar"]),
        [format!("{excluded} Founding Day")]
    );

    // add, with a label: a day and a time range.
    let range = format!("{other}T12:00..{other}T18:00");
    let out = at(
        url,
        table,
        &[
            "calendar",
            "add",
            name,
            &other.to_string(),
            &range,
            "--label",
            "Half day",
        ],
    )
    .await;
    assert_done(&out);
    assert_eq!(
        out.stdout,
        format!("added 2 entries into calendar {name:?}: 2 new; it has 3 entries\n")
    );

    // import an .ics file: a day, a yearly event of 3 occurrences and a timed event in
    // Berlin's zone, written on Seoul's clock.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("holidays.ics");
    let text = ICS
        .replace("{FIRST}", &compact(ics_day))
        .replace("{AFTER}", &compact(ics_day.succ_opt().unwrap()));
    std::fs::write(&file, text).unwrap();
    let out = at(
        url,
        table,
        &[
            "calendar",
            "import",
            name,
            file.to_str().unwrap(),
            "--until",
            "2033-12-31",
        ],
    )
    .await;
    assert_done(&out);
    assert_eq!(
        out.stdout,
        format!("imported 5 entries into calendar {name:?}: 5 new; it has 8 entries\n"),
        "{out:#?}"
    );
    // Importing it again adds nothing new.
    let out = at(
        url,
        table,
        &[
            "calendar",
            "import",
            name,
            file.to_str().unwrap(),
            "--until",
            "2033-12-31",
            "--json",
        ],
    )
    .await;
    assert_done(&out);
    let again = object(&out);
    assert_eq!(
        (again["result"].as_str(), again["added"].as_u64()),
        (Some("imported"), Some(0))
    );

    // show: every entry with its label, in order; no job excludes it yet.
    let out = at(url, table, &["calendar", "show", name, "--json"]).await;
    assert_done(&out);
    let shown = object(&out);
    let zone: chrono_tz::Tz = ZONE.parse().unwrap();
    let berlin: chrono_tz::Tz = "Europe/Berlin".parse().unwrap();
    let sync_from =
        chrono::TimeZone::from_local_datetime(&berlin, &ics_day.and_hms_opt(6, 0, 0).unwrap())
            .unwrap()
            .with_timezone(&zone)
            .naive_local();
    let sync = format!(
        "{}..{}",
        sync_from.format("%Y-%m-%dT%H:%M"),
        (sync_from + TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M")
    );
    let mut expected = vec![
        format!("{excluded} Founding Day"),
        format!("{other} Half day"),
        format!("{range} Half day"),
        format!("{ics_day} Company day"),
        format!("{sync} Partner sync"),
        "2030-12-25 Christmas Day".to_owned(),
        "2031-12-25 Christmas Day".to_owned(),
        "2032-12-25 Christmas Day".to_owned(),
    ];
    expected.sort();
    let mut got = entries(&shown);
    got.sort();
    assert_eq!(got, expected, "{shown:#}");
    assert_eq!(shown["jobs"], Value::Array(Vec::new()));
    let out = at(url, table, &["calendar", "show", name]).await;
    assert_done(&out);
    let (head, table_text) = out.stdout.split_once('\n').unwrap();
    assert_eq!(
        head,
        format!("calendar {name:?}: 8 entries on the wall clock of {ZONE}")
    );
    let (rows_text, tail) = table_text.rsplit_once("no job").unwrap();
    let rows = parse_table(rows_text);
    assert_eq!(rows.len(), 8, "{}", out.stdout);
    assert!(
        rows.iter()
            .any(|r| r["ENTRY"] == excluded.to_string() && r["LABEL"] == "Founding Day"),
        "{}",
        out.stdout
    );
    assert_eq!(tail, " excludes it\n");

    // remove: one entry there, one not.
    let out = at(
        url,
        table,
        &["calendar", "remove", name, "2031-12-25", "2030-01-01"],
    )
    .await;
    assert_done(&out);
    assert_eq!(
        out.stdout,
        format!(
            "removed 1 of the 2 entries given from calendar {name:?} (the others were not in it); it has 7 entries\n"
        )
    );

    // A job excludes it: its tick on the excluded day does not run, and says why.
    let job = "nightly_report";
    let out = at(
        url,
        table,
        &[
            "create",
            job,
            "--handler",
            "report",
            "--cron",
            "0 0 3 * * *",
            "--time-zone",
            ZONE,
        ],
    )
    .await;
    assert_done(&out);
    let out = at(
        url,
        table,
        &["reschedule", job, "--exclude", name, "--json"],
    )
    .await;
    assert_done(&out);
    let rescheduled = object(&out);
    assert_eq!(rescheduled["old"]["time_rules"], Value::Null);
    assert_eq!(rescheduled["new"]["time_rules"]["exclude"][0], name);
    assert_eq!(rescheduled["new"]["time_rules"]["on_excluded"], "skip");
    let out = at(url, table, &["jobs", job, "--next", "5"]).await;
    assert_done(&out);
    let (head, rest) = out.stdout.split_once('\n').unwrap();
    assert!(
        head.starts_with(&format!("{job}: \"0 0 3 * * *\" in {ZONE}")),
        "{}",
        out.stdout
    );
    let (rules_line, table_text) = rest.split_once('\n').unwrap();
    assert_eq!(
        rules_line,
        format!("time rules (the store's): exclude {name} (skip)")
    );
    let rows = parse_table(table_text);
    let day = rows
        .iter()
        .find(|r| r["LOCAL"] == format!("{excluded} 03:00:00 KST"))
        .unwrap_or_else(|| panic!("the excluded day's tick: {}", out.stdout));
    assert_eq!(
        day["RUN"],
        format!("does not run: excluded by {name}: {excluded} \"Founding Day\""),
        "{}",
        out.stdout
    );
    assert_eq!(
        rows.iter().filter(|r| r["RUN"] == "runs").count(),
        5,
        "{}",
        out.stdout
    );
    let upcoming = object(&at(url, table, &["jobs", job, "--next", "5", "--json"]).await);
    let left_out: Vec<&Value> = upcoming["ticks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["left_out"].is_null())
        .collect();
    assert_eq!(left_out.len(), 1, "{upcoming:#}");
    assert_eq!(left_out[0]["left_out"]["reason"], "calendar");
    assert_eq!(left_out[0]["runs_at"], Value::Null);
    assert_eq!(upcoming["time_rules"]["exclude"][0], name);
    // `jobs --json` shows the rules, the store's.
    let jobs = object(&at(url, table, &["jobs", "--json"]).await);
    let listed = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == job)
        .unwrap();
    assert_eq!(listed["time_rules"]["exclude"][0], name, "{listed:#}");
    assert_eq!(listed["time_rules"]["source"], "store");
    // The calendar is not a job.
    assert!(
        !jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|j| j["name"].as_str().unwrap().contains("calendar")),
        "{jobs:#}"
    );
    // With `next`, the tick runs at the end of the day instead.
    let out = at(
        url,
        table,
        &[
            "reschedule",
            job,
            "--exclude",
            name,
            "--on-excluded",
            "next",
        ],
    )
    .await;
    assert_done(&out);
    let out = at(url, table, &["jobs", job, "--next", "5"]).await;
    let next_midnight = format!("{} 00:00:00 KST", excluded.succ_opt().unwrap());
    assert!(
        out.stdout.contains("moved to ")
            && out
                .stdout
                .contains(&format!("({next_midnight}): excluded by {name}")),
        "{}",
        out.stdout
    );

    // list: the calendar, its zone, its entries and the job that excludes it.
    let out = at(url, table, &["calendar", "list"]).await;
    assert_done(&out);
    let rows = parse_table(&out.stdout);
    assert_eq!(rows.len(), 1, "{}", out.stdout);
    assert_eq!(
        (
            rows[0]["NAME"].as_str(),
            rows[0]["TIME_ZONE"].as_str(),
            rows[0]["ENTRIES"].as_str(),
            rows[0]["JOBS"].as_str()
        ),
        (name, ZONE, "7", job)
    );
    let out = at(url, table, &["calendar", "list", "--json"]).await;
    let listed = out.json();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["jobs"][0], job);

    // delete: refused while the job excludes it (exit 4, naming the job), done after
    // `--rules-default`.
    let line = refused(&at(url, table, &["calendar", "delete", name]).await, 4);
    assert!(
        line.starts_with(&format!(
            "shedlock: calendar {name:?} was not deleted: the job {job} excludes it"
        )),
        "{line}"
    );
    let out = at(url, table, &["reschedule", job, "--rules-default"]).await;
    assert_done(&out);
    assert!(
        out.stdout
            .contains("time rules exclude kr-holidays (next) → the code's"),
        "{}",
        out.stdout
    );
    let out = at(url, table, &["calendar", "delete", name]).await;
    assert_done(&out);
    assert_eq!(
        out.stdout,
        format!("deleted calendar {name:?} (7 entries in {ZONE})\n")
    );
    let line = refused(&at(url, table, &["calendar", "show", name]).await, 3);
    assert!(
        line.contains(&format!("no calendar named {name:?}")),
        "{line}"
    );
    let out = at(url, table, &["calendar", "list"]).await;
    assert!(
        out.stdout.starts_with("no calendar in the store"),
        "{out:#?}"
    );
    let out = at(url, table, &["delete", job]).await;
    assert_done(&out);
}

/// Bad input: each refused with its exit code and a line naming the problem, nothing written.
pub(crate) async fn calendar_bad_input(url: &str, table: &str) {
    let out = at(
        url,
        table,
        &["calendar", "create", "ops", "--zone", "UTC", "2026-12-25"],
    )
    .await;
    assert_done(&out);
    for (args, code, says) in [
        // A bad entry: exit 2, naming it and the forms.
        (
            vec!["calendar", "add", "ops", "2026-02-30"],
            2,
            "invalid calendar \"ops\": entry \"2026-02-30\": \"2026-02-30\" is not a day; write a day (2026-12-25)",
        ),
        (
            vec!["calendar", "add", "ops", "2026-12-26..2026-12-24"],
            2,
            "its last day 2026-12-24 comes before its first 2026-12-26",
        ),
        // An unknown zone: exit 2, with the closest.
        (
            vec!["calendar", "create", "other", "--zone", "Asia/Seol"],
            2,
            "time zone \"Asia/Seol\": unknown time zone \"Asia/Seol\" (did you mean \"Asia/Seoul\"?)",
        ),
        // A bad name.
        (
            vec!["calendar", "create", "kr holidays", "--zone", "UTC"],
            2,
            "invalid calendar \"kr holidays\"",
        ),
        // A calendar the store does not hold: exit 3, with the closest name.
        (
            vec!["calendar", "show", "opz"],
            3,
            "shedlock: the store holds no calendar named \"opz\"; did you mean \"ops\"?",
        ),
        (
            vec!["calendar", "add", "opz", "2026-12-31"],
            3,
            "did you mean \"ops\"?",
        ),
        (
            vec!["calendar", "delete", "nothing-like-it"],
            3,
            "`shedlock calendar create` makes one",
        ),
        // One that exists: exit 4.
        (
            vec!["calendar", "create", "ops", "--zone", "UTC"],
            4,
            "shedlock: calendar \"ops\" already exists: nothing was created",
        ),
        // A file that is not iCalendar, or that the parser refuses: exit 2, naming the line.
        (
            vec!["calendar", "import", "ops", "{NOT_ICS}"],
            2,
            "not an iCalendar file",
        ),
        (
            vec!["calendar", "import", "ops", "{BAD_ICS}"],
            2,
            "the iCalendar parser refused the file at line 4 (END:VCALENDAR): mismatching end",
        ),
        (
            vec!["calendar", "import", "ops", "/nonexistent/holidays.ics"],
            2,
            "cannot read /nonexistent/holidays.ics",
        ),
        // Time rules: a calendar the store does not hold (exit 3, the closest name), a start
        // after the end, max runs without a start (exit 2).
        (
            vec!["reschedule", "ruled", "--exclude", "opz"],
            3,
            "no calendar named \"opz\"; did you mean \"ops\"?",
        ),
        (
            vec![
                "reschedule",
                "ruled",
                "--start",
                "2027-01-01T00:00:00Z",
                "--end",
                "2026-01-01T00:00:00Z",
            ],
            2,
            "is not before end",
        ),
        (
            vec!["reschedule", "ruled", "--max-runs", "3"],
            2,
            "--start <TIME>",
        ),
        (
            vec![
                "reschedule",
                "ruled",
                "--exclude",
                "ops",
                "--on-excluded",
                "later",
            ],
            2,
            "\"later\" is not what becomes of an excluded tick: write skip, next or previous",
        ),
    ] {
        if args[0] == "reschedule" {
            let out = at(
                url,
                table,
                &["create", "ruled", "--handler", "h", "--cron", "0 0 * * * *"],
            )
            .await;
            assert!(out.code == 0 || out.code == 4, "{out:#?}");
        }
        let dir = tempfile::tempdir().unwrap();
        let not_ics = dir.path().join("notes.ics");
        std::fs::write(&not_ics, "hello, world\n").unwrap();
        let bad_ics = dir.path().join("bad.ics");
        std::fs::write(
            &bad_ics,
            "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nSUMMARY:x\r\nEND:VCALENDAR\r\n",
        )
        .unwrap();
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                a.replace("{NOT_ICS}", not_ics.to_str().unwrap())
                    .replace("{BAD_ICS}", bad_ics.to_str().unwrap())
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let line = refused(&at(url, table, &args).await, code);
        assert!(line.contains(says), "{args:?}: {line}");
        if code != 3 && code != 4 {
            assert!(line.starts_with("shedlock: error: "), "{line}");
        }
    }
    // Nothing was written: the calendar has its one entry, the job no rules.
    let shown = object(&at(url, table, &["calendar", "show", "ops", "--json"]).await);
    assert_eq!(entries(&shown), ["2026-12-25 -"]);
    let jobs = object(&at(url, table, &["jobs", "--json"]).await);
    let ruled = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "ruled")
        .unwrap();
    assert_eq!(ruled["time_rules"], Value::Null, "{ruled:#}");
}

/// The whole path and bad input on an SQL store.
pub(crate) async fn calendar_commands_main_path<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let (url, table) = (db.url(), db.table());
    calendar_path(&url, &table).await;
    calendar_bad_input(&url, &table).await;
    calendar_records(&provider(db).await).await;
}

/// Each change of [`calendar_path`] is an `operator` row of the run history under the
/// calendar's row name, by the tool's operator.
async fn calendar_records(store: &impl RunStore) {
    let rows = store
        .runs(
            &RunQuery::latest(100)
                .outcome(RunOutcome::Operator)
                .name("shedlock.calendar.kr-holidays"),
        )
        .await
        .unwrap();
    let said: Vec<&str> = rows
        .iter()
        .rev()
        .filter_map(|r| r.error.as_deref())
        .collect();
    for (k, starts) in [
        "created calendar kr-holidays in Asia/Seoul with 1 entries",
        "added 2 entries to calendar kr-holidays",
        "added 5 entries to calendar kr-holidays",
        "added 0 entries to calendar kr-holidays",
        "removed 1 entries from calendar kr-holidays: 2031-12-25, 2030-01-01",
        "deleted calendar kr-holidays",
    ]
    .iter()
    .enumerate()
    {
        assert!(
            said.get(k).is_some_and(|s| s.starts_with(starts)),
            "record {k} {starts:?}: {said:#?}"
        );
    }
    assert!(
        rows.iter().all(|r| r
            .requested_by
            .as_deref()
            .is_some_and(|by| by.starts_with("cli:ops-ann@"))),
        "{rows:#?}"
    );
}

/// The same on Redis, under a key prefix of its own whose keys are deleted at the end.
#[tokio::test]
async fn redis_calendar_commands_main_path() {
    if shedlock_suite::skipped(Backend::Redis) {
        eprintln!("skipped: Redis was reported unreachable by scripts/test");
        return;
    }
    let url = shedlock_suite::redis_url();
    let prefix = unique_name("cli_cal");
    let store = RedisLockProvider::builder(url.as_str())
        .table_name(prefix.as_str())
        .locked_by(HOLDER)
        .build()
        .await
        .unwrap_or_else(|error| {
            panic!(
                "Redis at {url} is not reachable ({error}).\n  start it with: {}",
                shedlock_suite::how_to_start(Backend::Redis)
            )
        });
    calendar_path(&url, &prefix).await;
    calendar_bad_input(&url, &prefix).await;
    calendar_records(&store).await;
    drop(store);
    crate::jobs_redis::delete_keys(&url, &prefix).await;
}
