//! The audit (issue 46): every change the tool makes (create, pause, resume, trigger,
//! reschedule, the fleet's pause and resume, pause with `--cancel-running`, reset, unlock,
//! delete) is recorded with who and from where: a row of outcome `operator` in the run
//! history, as the dashboard writes (before, the tool wrote none, although docs/operations.md
//! said that row records every pause, resume and release), on every store (Redis keeps a run
//! history too).

use shedlock::history::{RunOutcome, RunQuery, RunRecord};
use shedlock::schedules::ScheduleStore;
use shedlock::{LockProvider, RunStore};

use crate::common::{CliDb, Out, TEN_MINUTES, cfg, provider};
use crate::jobs::at;

/// The host the tool runs on, as it names it.
fn host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// Every change, in order: the arguments, the name its record carries, and what it says (the
/// locks `nightly` and `stuck` are held by `cli-worker-7`, the tests' `HOLDER`).
fn changes() -> Vec<(Vec<&'static str>, &'static str, &'static str)> {
    vec![
        (
            vec![
                "create",
                "audited",
                "--handler",
                "sync",
                "--cron",
                "0 * * * * *",
            ],
            "audited",
            "created: handler \"sync\", cron 0 * * * * * in UTC",
        ),
        (vec!["pause", "audited"], "audited", "paused"),
        (vec!["resume", "audited"], "audited", "resumed"),
        (
            vec!["trigger", "audited"],
            "audited",
            "asked for a run now (request ",
        ),
        (
            vec!["reschedule", "audited", "--cron", "0 */5 * * * *"],
            "audited",
            "rescheduled to 0 */5 * * * * (UTC)",
        ),
        (
            vec!["pause", "--fleet"],
            "shedlock.fleet",
            "paused the whole fleet",
        ),
        (
            vec!["resume", "--fleet"],
            "shedlock.fleet",
            "resumed the whole fleet",
        ),
        (
            vec!["pause", "nightly", "--cancel-running", "--lock", "nightly"],
            "nightly",
            "released lock \"nightly\" held by cli-worker-7 (token ",
        ),
        (
            vec!["reset", "nightly"],
            "nightly",
            "reset: cleared the override",
        ),
        (
            vec!["unlock", "stuck", "--yes"],
            "stuck",
            "released lock \"stuck\" held by cli-worker-7 (token ",
        ),
        (
            vec!["delete", "audited"],
            "audited",
            "deleted the run-time job of handler \"sync\"",
        ),
    ]
}

/// Takes the locks `nightly` and `stuck` (as `HOLDER`) and leaves them held, for
/// `pause --cancel-running` and `unlock` to release; their fencing tokens.
async fn hold_locks<P: LockProvider + ?Sized>(store: &P) -> [i64; 2] {
    let nightly = store
        .lock(&cfg("nightly", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let stuck = store
        .lock(&cfg("stuck", TEN_MINUTES))
        .await
        .unwrap()
        .unwrap();
    let tokens = [nightly.fencing_token(), stuck.fencing_token()];
    std::mem::forget((nightly, stuck));
    tokens
}

async fn operator_rows<S: RunStore + ?Sized>(store: &S) -> Vec<RunRecord> {
    let mut rows = store
        .runs(&RunQuery::latest(100).outcome(RunOutcome::Operator))
        .await
        .unwrap();
    rows.reverse();
    rows
}

pub(crate) async fn every_change_the_tool_makes_is_recorded_with_who_and_from_where<D: CliDb>(
    db: &D,
) where
    D::Provider: ScheduleStore,
{
    changes_are_recorded(&db.url(), &db.table(), &provider(db).await).await;
}

/// [`every_change_the_tool_makes_is_recorded_with_who_and_from_where`] on the store at `url`
/// under `table`, `store` a provider on it.
pub(crate) async fn changes_are_recorded<S: RunStore>(url: &str, table: &str, store: &S) {
    let tokens = hold_locks(store).await;
    let (url, who) = (url.to_owned(), format!("cli:ops-ann@{}", host()));
    let mut seen = 0;
    for (args, name, says) in changes() {
        let out: Out = at(&url, table, &args).await;
        assert_eq!(
            (out.code, out.stderr.as_str()),
            (0, ""),
            "{args:?}: {out:#?}"
        );
        let rows = operator_rows(store).await;
        assert!(rows.len() > seen, "{args:?} recorded nothing: {rows:#?}");
        let row = rows
            .iter()
            .skip(seen)
            .find(|r| r.error.as_deref().is_some_and(|e| e.starts_with(says)))
            .unwrap_or_else(|| panic!("{args:?}: no row saying {says:?} in {rows:#?}"));
        assert_eq!(
            (row.name.as_str(), row.job.as_str()),
            (name, name),
            "{row:?}"
        );
        assert!(
            row.error
                .as_deref()
                .is_some_and(|e| e.ends_with(&format!(" (from {})", host()))),
            "from where: {row:?}"
        );
        assert_eq!(
            row.requested_by.as_deref(),
            Some(who.as_str()),
            "who: {row:?}"
        );
        assert!(
            row.locked_by.starts_with(&host()),
            "from where (the tool's host and process): {row:?}"
        );
        if says.starts_with("released") {
            assert!(
                row.fencing_token.is_some_and(|t| tokens.contains(&t)),
                "the released token: {row:?}"
            );
        }
        seen = rows.len();
    }
    // `pause --cancel-running` records the pause and the release: one row each.
    let rows = operator_rows(store).await;
    let nightly: Vec<&str> = rows
        .iter()
        .filter(|r| r.name == "nightly")
        .filter_map(|r| r.error.as_deref())
        .collect();
    assert_eq!(nightly.len(), 3, "{nightly:?}");
    assert_eq!(nightly[0], format!("paused (from {})", host()));
    // `history --outcome operator` lists them, as the operations guide says.
    let out = at(&url, table, &["history", "--outcome", "operator", "--json"]).await;
    assert_eq!(out.code, 0, "{out:#?}");
    assert!(out.stdout.contains(&who), "{}", out.stdout);
}
