//! `shedlock list` and `list --json`, on every backend.

use std::time::Duration;

use serde_json::Value;
use shedlock::{LockAdmin, LockProvider};

use crate::common::{
    CliDb, HOLDER, TEN_MINUTES, cfg, cli, column, millis, parse_table, provider, secs, state, tick,
    time,
};

pub(crate) async fn list_shows_held_and_free_locks<D: CliDb>(db: &D) {
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

/// A row someone wrote with a time that cannot be read is named on stderr and left out; the
/// other locks are listed; `unlock` of it says what is wrong and changes nothing. (Before, a
/// PostgreSQL `infinity` made the tool panic, and one such row on MariaDB or SQLite failed the
/// whole list.)
pub(crate) async fn list_and_unlock_name_a_row_they_cannot_read<D: CliDb>(db: &D) {
    let provider = provider(db).await;
    let held = provider
        .lock(&cfg("held_job", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let problem = shedlock_suite::poison(db, "poisoned_job", false).await;

    for args in [&["list"][..], &["list", "--json"]] {
        let out = cli(db, args, "").await;
        assert_eq!(out.code, 0, "{out:#?}");
        let names: Vec<String> = if args.len() == 2 {
            out.json()
                .iter()
                .map(|lock| lock["name"].as_str().unwrap().to_owned())
                .collect()
        } else {
            column(&parse_table(&out.stdout), "NAME")
        };
        assert_eq!(names, ["held_job"], "{out:#?}");
        let line = out.error_line();
        assert!(
            line.starts_with("shedlock: lock \"poisoned_job\" in table ")
                && line.contains("cannot be read and is left out of the list")
                && line.contains("`locked_until`")
                && line.contains(problem),
            "{line}"
        );
    }

    let out = cli(db, &["unlock", "poisoned_job", "--yes"], "").await;
    assert_eq!(out.code, 1, "{out:#?}");
    let line = out.error_line();
    assert!(
        line.contains("lock \"poisoned_job\"")
            && line.contains("cannot be read")
            && line.contains(problem),
        "{line}"
    );
    let rows = provider.lock_rows().await.unwrap();
    assert_eq!(rows.unreadable.len(), 1, "the row is as it was: {rows:?}");
    assert!(held.unlock().await.unwrap());
}

/// Names, holders and error texts are printed with their control characters escaped: a row
/// cannot drive the operator's terminal.
pub(crate) async fn control_characters_of_a_row_are_escaped<D: CliDb>(db: &D) {
    // Written by hand: the library refuses such a name and such a holder.
    let (name, holder) = ("job\u{1b}]0;title\u{7}", "evil\u{1b}[31m\rholder");
    let (until, now) = match db.url() {
        url if url.starts_with("postgres") => (
            "clock_timestamp() + INTERVAL '10 minutes'",
            "clock_timestamp()",
        ),
        url if url.starts_with("mysql") => {
            ("UTC_TIMESTAMP(6) + INTERVAL 10 MINUTE", "UTC_TIMESTAMP(6)")
        }
        _ => (
            "CAST(unixepoch('subsec') * 1000 AS INTEGER) + 600000",
            "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        ),
    };
    db.exec(&format!(
        "INSERT INTO {} (name, locked_until, locked_at, locked_by, fencing_token, last_tick) \
         VALUES ('{name}', {until}, {now}, '{holder}', 7, NULL)",
        db.table()
    ))
    .await;
    let out = cli(db, &["list"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(
        !out.stdout.chars().any(|c| c.is_control() && c != '\n'),
        "{:?}",
        out.stdout
    );
    assert!(
        out.stdout.contains("evil\\u{1b}[31m\\rholder"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("job\\u{1b}]0;title\\u{7}"),
        "{}",
        out.stdout
    );
    let out = cli(db, &["unlock", name], "n\n").await;
    assert_eq!(out.code, 4, "{out:#?}");
    for text in [&out.stdout, &out.stderr] {
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
    }
    assert!(out.stderr.contains("evil\\u{1b}[31m\\rholder"), "{out:#?}");
}

/// Issue 46: a name with a bidirectional control (`report\u{202e}txt.exe`, which a terminal
/// shows as `reportexe.txt`) or a zero-width character, written by an earlier version or by
/// hand, is printed escaped by `list` and `jobs`, and its lock and schedule can still be
/// released and deleted; `create` of such a name, or of `.`, is refused (exit 2).
pub(crate) async fn hidden_characters_of_a_name_are_shown_escaped_and_its_rows_stay_usable<
    D: CliDb,
>(
    db: &D,
) where
    D::Provider: shedlock::schedules::ScheduleStore,
{
    use shedlock::schedules::{NewSchedule, ScheduleStore};
    let name = "report\u{202e}txt.exe";
    let shown = r"report\u{202e}txt.exe";
    let provider = provider(db).await;
    let guard = provider
        .lock(&cfg("plain_lock", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let token = guard.fencing_token();
    std::mem::forget(guard);
    provider
        .create_schedule(
            &NewSchedule::job("plain_job", "sync", "{}", "0 * * * * *", None),
            "ops",
        )
        .await
        .unwrap();
    for table in [db.table().to_owned(), format!("{}_schedules", db.table())] {
        let plain = if table == db.table() {
            "plain_lock"
        } else {
            "plain_job"
        };
        db.exec(&format!(
            "UPDATE {table} SET name = '{name}' WHERE name = '{plain}'"
        ))
        .await;
    }
    for args in [&["list"][..], &["jobs"]] {
        let out = cli(db, args, "").await;
        assert_eq!(out.code, 0, "{args:?}: {out:#?}");
        assert!(
            !out.stdout.contains('\u{202e}'),
            "{args:?}: {:?}",
            out.stdout
        );
        assert!(out.stdout.contains(shown), "{args:?}: {}", out.stdout);
    }
    let out = cli(db, &["unlock", name, "--yes"], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(!out.stdout.contains('\u{202e}') && !out.stderr.contains('\u{202e}'));
    let state = state(&provider, name).await;
    assert!(!state.is_held(), "released: {state:?}");
    assert_eq!(state.fencing_token, token, "its token stays");
    let out = cli(db, &["delete", name], "").await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(provider.schedule(name).await.unwrap().unwrap().deleted);
    for bad in [name, "a\u{200b}b", ".", ".."] {
        let out = cli(
            db,
            &["create", bad, "--handler", "sync", "--cron", "0 * * * * *"],
            "",
        )
        .await;
        assert_eq!(out.code, 2, "{bad:?}: {out:#?}");
        let line = out.error_line();
        assert!(!line.contains(['\u{202e}', '\u{200b}']), "{line}");
        assert!(
            line.contains("bidirectional control or zero-width") || line.contains("`.` or `..`"),
            "{line}"
        );
    }
}
