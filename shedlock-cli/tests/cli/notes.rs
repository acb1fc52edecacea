//! Issue 47, point 3: the operator's actions go through the library's one layer
//! (`shedlock::operator`). `pause --note TEXT` keeps the note beside the pause, shown by
//! `shedlock jobs` (its `NOTE` column and `--json`) and by `/api/v1/jobs` of `shedlock serve`,
//! recorded in the operator row with who and from where; `resume` clears it; a note that is
//! not one line of text is refused before anything is written. A mistyped name is answered
//! with the closest known name by every command.

use serde_json::Value;
use shedlock::RunStore as _;
use shedlock::history::{RunOutcome, RunQuery};
use shedlock::schedules::{NewSchedule, ScheduleStore};

use crate::common::{CliDb, parse_table, provider};
use crate::jobs::{at, object};
use crate::serve::{get, serve};

/// The host the tool runs on, as it names it.
fn host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

pub(crate) async fn pause_note_is_kept_shown_and_recorded<D: CliDb>(db: &D)
where
    D::Provider: ScheduleStore,
{
    let store = provider(db).await;
    let name = "noted-report";
    store
        .create_schedule(
            &NewSchedule::job(name, "report", "null", "0 0 3 * * *", None),
            "test",
        )
        .await
        .unwrap();
    let (url, table) = (db.url(), db.table().to_owned());

    // A note that is not one line is refused, naming the field; nothing is written.
    let version = store.schedules_version().await.unwrap();
    let out = at(&url, &table, &["pause", name, "--note", "two\nlines"]).await;
    assert_eq!(out.code, 2, "{out:#?}");
    assert!(out.error_line().contains("note:"), "{out:#?}");
    assert_eq!(store.schedules_version().await.unwrap(), version);
    assert!(!store.schedule(name).await.unwrap().unwrap().paused);

    let out = at(
        &url,
        &table,
        &["pause", name, "--note", "upstream incident"],
    )
    .await;
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out:#?}");
    assert!(out.stdout.contains("note: upstream incident"), "{out:#?}");
    let stored = store.schedule(name).await.unwrap().unwrap();
    assert!(stored.paused);
    assert_eq!(stored.note.as_deref(), Some("upstream incident"));

    // `shedlock jobs`: the table's NOTE column and the JSON's `note`.
    let out = at(&url, &table, &["jobs"]).await;
    let rows = parse_table(&out.stdout);
    let row = rows.iter().find(|r| r["NAME"] == name).expect(&out.stdout);
    assert_eq!(
        (row["PAUSED"].as_str(), row["NOTE"].as_str()),
        ("yes", "upstream incident"),
        "{}",
        out.stdout
    );
    let jobs = object(&at(&url, &table, &["jobs", "--json"]).await);
    let job = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == name)
        .unwrap();
    assert_eq!(job["note"], "upstream incident", "{job:#}");

    // The dashboard's API shows the same note.
    let served = serve(&url, &table, &["--no-auth"], &[]).await;
    let (status, body) = get(&served.address, "/api/v1/jobs", None).await;
    assert_eq!(status, 200, "{body}");
    let api: Value = serde_json::from_str(&body).unwrap();
    let job = api["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == name)
        .unwrap();
    assert_eq!(job["note"], "upstream incident", "{job:#}");
    drop(served);

    // The history's operator row: who, what with the note, from where; exactly one.
    let rows = store
        .runs(
            &RunQuery::latest(10)
                .name(name)
                .outcome(RunOutcome::Operator),
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        rows[0].error.as_deref(),
        Some(format!("paused: upstream incident (from {})", host()).as_str())
    );
    assert_eq!(
        rows[0].requested_by.as_deref(),
        Some(format!("cli:ops-ann@{}", host()).as_str())
    );

    // `resume` clears the note.
    let out = at(&url, &table, &["resume", name]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    let stored = store.schedule(name).await.unwrap().unwrap();
    assert!(!stored.paused);
    assert_eq!(stored.note, None);
}
