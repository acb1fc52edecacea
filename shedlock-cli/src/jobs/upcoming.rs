//! `shedlock jobs NAME [--next N]`: a job's next runs, after its time zone, the store's
//! override, its pause, the fleet's pause and its jitter, and each tick its cron gives between
//! them that will not run, with why ([`Operator::upcoming`](shedlock::operator::Operator::upcoming)).
//!
//! `--json` prints the API's form (`GET /api/v1/jobs/{name}/upcoming`): `name`, `cron`,
//! `time_zone`, `source`, `jitter_ms`, `time_rules` and `ticks` (`tick`, `local`, `runs_at`,
//! `left_out`).

use shedlock::RunStore;
use shedlock::operator::{LeftOut, Source};

use super::{desk, failure, find};
use crate::db::Steered;
use crate::failure::Failure;
use crate::output::{human, pretty, print, render_table, time};

/// How many runs `jobs NAME` shows without `--next`.
const SHOWN: usize = 5;

pub(crate) async fn upcoming(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    name: &str,
    next: Option<u64>,
    json: bool,
) -> Result<(), Failure> {
    let count = next.map_or(SHOWN, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let job = find(store, runs, name).await?;
    let now = store.now().await?;
    let upcoming = desk(store, runs)
        .upcoming(&job, count, now)
        .await
        .map_err(failure)?;
    if json {
        print(&format!(
            "{}\n",
            pretty(&shedlock_web::json::upcoming(&upcoming))
        ));
        return Ok(());
    }
    let zone: Option<chrono_tz::Tz> = upcoming.time_zone.parse().ok();
    let jitter = upcoming.jitter.map_or_else(String::new, |j| {
        format!(", jitter up to {}", human(j, true))
    });
    let source = match upcoming.source {
        Source::Code => "the code's",
        Source::Store => "the store's override",
        _ => "a job created at run time",
    };
    let mut text = format!(
        "{}: {:?} in {} ({source}){jitter}\n",
        upcoming.name, upcoming.cron, upcoming.time_zone,
    );
    if let Some(rules) = upcoming.rules.as_ref().filter(|r| !r.is_empty()) {
        let whose = if job.schedule.as_ref().is_some_and(|s| s.rules.is_some()) {
            "the store's"
        } else {
            "the code's"
        };
        text.push_str(&format!(
            "time rules ({whose}): {}\n",
            crate::calendar::rules_text(Some(rules))
        ));
    }
    let rows: Vec<Vec<String>> = upcoming
        .ticks
        .iter()
        .map(|tick| {
            let local = zone.map_or_else(String::new, |zone| {
                tick.tick
                    .with_timezone(&zone)
                    .format("%Y-%m-%d %H:%M:%S %Z")
                    .to_string()
            });
            let what = match (&tick.runs_at, &tick.left_out) {
                (Some(at), _) if *at == tick.tick => "runs".to_owned(),
                (Some(at), _) => format!("runs at {}", time(*at)),
                (
                    None,
                    Some(LeftOut::Calendar {
                        why,
                        moved_to: Some(at),
                    }),
                ) => {
                    let local = zone.map_or_else(String::new, |zone| {
                        at.with_timezone(&zone)
                            .format(" (%Y-%m-%d %H:%M:%S %Z)")
                            .to_string()
                    });
                    format!("moved to {}{local}: excluded by {why}", time(*at))
                }
                (None, Some(why)) => format!("does not run: {why}"),
                (None, None) => "does not run".to_owned(),
            };
            vec![time(tick.tick), local, what]
        })
        .collect();
    let runs_shown = upcoming.runs().count();
    if rows.is_empty() {
        text.push_str("  no tick from now on: its cron never fires again\n");
    } else {
        text.push_str(&render_table(&["TICK", "LOCAL", "RUN"], &rows));
    }
    let left_out = upcoming.ticks.len() - runs_shown;
    if runs_shown < count && left_out >= count {
        text.push_str(&format!(
            "{runs_shown} of the {count} runs asked for: the list stops after {left_out} ticks \
             that do not run\n"
        ));
    }
    print(&text);
    Ok(())
}
