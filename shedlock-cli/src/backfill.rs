//! `shedlock backfill NAME --from T1 --to T2` and `shedlock backfills`: a job's past ticks over
//! a range, run once each fleet-wide, oldest first, at a bounded pace, by the instances that
//! carry the job ([`Operator::backfill`](shedlock::operator::Operator::backfill)); listed with
//! their progress, followed with a progress bar (`--watch`), paused, resumed and cancelled.
//!
//! `--json` prints the API's forms ([`shedlock_web::json::backfill`]): `backfill` one object
//! (`--dry-run`: `job`, `cron`, `time_zone`, `total`, `ticks`), `backfills` an array.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::json;
use shedlock::RunStore;
use shedlock::operator::BackfillOptions;
use shedlock::schedules::{BackfillState, StoredBackfill};

use crate::args::{BackfillArgs, BackfillsArgs};
use crate::db::Steered;
use crate::failure::Failure;
use crate::jobs::{actor, desk, failure, find, report};

/// The tool's failure for an error about backfill `id`: "no backfill #7; the store keeps …"
/// for one it does not keep.
fn backfill_failure(id: i64, error: shedlock::Error) -> Failure {
    match error {
        shedlock::Error::NoSuchSchedule { hint, .. } => Failure::NoSuchBackfill { id, hint },
        other => failure(other),
    }
}
use crate::output::{pretty, print, render_table, time};

/// How many ticks `--dry-run` lists.
const LISTED: usize = 1_000;

/// `shedlock backfill NAME --from T1 --to T2 …`.
pub(crate) async fn backfill(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &BackfillArgs,
) -> Result<(), Failure> {
    let job = find(store, runs, &args.name).await?;
    let now = store.now().await?;
    let desk = desk(store, runs);
    if args.dry_run {
        let plan = desk
            .plan_backfill(&job, args.from, args.to, LISTED, now)
            .await
            .map_err(failure)?;
        if args.json {
            let ticks: Vec<String> = plan.first.iter().copied().map(time).collect();
            print(&format!(
                "{}\n",
                pretty(&json!({
                    "job": plan.job, "cron": plan.cron, "time_zone": plan.time_zone,
                    "total": plan.total, "ticks": ticks,
                }))
            ));
            return Ok(());
        }
        let mut text = format!(
            "a backfill of {:?} over ({}, {}] would run {} ticks of {:?} in {} (nothing was run):\n",
            plan.job,
            time(args.from),
            time(args.to),
            plan.total,
            plan.cron,
            plan.time_zone
        );
        for tick in &plan.first {
            text.push_str(&format!("  {}\n", time(*tick)));
        }
        if plan.total > plan.first.len() as u64 {
            text.push_str(&format!(
                "  … and {} more\n",
                plan.total - plan.first.len() as u64
            ));
        }
        print(&text);
        return Ok(());
    }
    let options = BackfillOptions::new()
        .max_running(args.max_running)
        .rate_per_min(args.rate)
        .rerun(args.rerun);
    let done = desk
        .backfill(&job, args.from, args.to, options, &actor(), now)
        .await
        .map_err(failure)?;
    report(&done, runs);
    let stored = done.value.clone();
    if args.json {
        let mut value = shedlock_web::json::backfill(&stored);
        if let Some(warning) = &done.unapplied {
            value["warning"] = json!(warning);
        }
        print(&format!("{}\n", pretty(&value)));
    } else {
        let pace = match stored.spec.rate_per_min {
            Some(rate) => format!("at most {rate} a minute"),
            None => "as fast as they run".to_owned(),
        };
        let mut text = format!(
            "started backfill #{} of {:?}: {} ticks over ({}, {}], {} at once, {pace}{}\n",
            stored.id,
            stored.spec.job,
            stored.spec.total,
            time(stored.spec.from),
            time(stored.spec.to),
            stored.spec.max_running,
            if stored.spec.rerun {
                ", ticks that already ran run again"
            } else {
                ", ticks that already ran skipped"
            },
        );
        if let Some(warning) = &done.unapplied {
            text.push_str(&format!("WARNING: {warning}\n"));
        }
        text.push_str(&format!(
            "follow it with `shedlock backfills {} --watch`; pause, resume or cancel it with \
             `shedlock backfills {} --pause | --resume | --cancel`\n",
            stored.id, stored.id
        ));
        print(&text);
    }
    if args.watch {
        watch(store, runs, stored.id).await?;
    }
    Ok(())
}

/// `shedlock backfills [ID] …`.
pub(crate) async fn backfills(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &BackfillsArgs,
) -> Result<(), Failure> {
    let desk = desk(store, runs);
    let Some(id) = args.id else {
        let all = desk.backfills().await.map_err(failure)?;
        if args.json {
            let all: Vec<_> = all.iter().map(shedlock_web::json::backfill).collect();
            print(&format!("{}\n", pretty(&json!(all))));
            return Ok(());
        }
        if all.is_empty() {
            print("no backfill: start one with `shedlock backfill NAME --from T1 --to T2`\n");
            return Ok(());
        }
        let rows: Vec<Vec<String>> = all.iter().map(row).collect();
        print(&render_table(
            &[
                "ID", "JOB", "STATE", "PROGRESS", "RAN", "SKIPPED", "FAILED", "FROM", "TO", "BY",
            ],
            &rows,
        ));
        return Ok(());
    };
    let state = match (args.pause, args.resume, args.cancel) {
        (true, _, _) => Some(BackfillState::Paused),
        (_, true, _) => Some(BackfillState::Running),
        (_, _, true) => Some(BackfillState::Cancelled),
        _ => None,
    };
    let backfill = match state {
        Some(state) => {
            let done = desk
                .set_backfill(id, state, &actor())
                .await
                .map_err(|e| backfill_failure(id, e))?;
            report(&done, runs);
            if !args.json {
                print(&format!(
                    "{} backfill #{} of {:?} ({})\n",
                    done.value.state,
                    id,
                    done.value.spec.job,
                    progress_text(&done.value)
                ));
            }
            done.value
        }
        None => desk
            .find_backfill(id)
            .await
            .map_err(|e| backfill_failure(id, e))?,
    };
    if args.json {
        print(&format!(
            "{}\n",
            pretty(&shedlock_web::json::backfill(&backfill))
        ));
    } else if state.is_none() && !args.watch {
        print(&render_table(
            &[
                "ID", "JOB", "STATE", "PROGRESS", "RAN", "SKIPPED", "FAILED", "FROM", "TO", "BY",
            ],
            &[row(&backfill)],
        ));
    }
    if args.watch {
        watch(store, runs, id).await?;
    }
    Ok(())
}

/// A row of the table.
fn row(b: &StoredBackfill) -> Vec<String> {
    vec![
        format!("#{}", b.id),
        b.spec.job.clone(),
        b.state.to_string(),
        format!("{}/{}", b.progressed(), b.spec.total),
        b.done.to_string(),
        b.skipped.to_string(),
        b.failed.to_string(),
        time(b.spec.from),
        time(b.spec.to),
        b.spec.requested_by.clone(),
    ]
}

/// `512/1000 ticks (51%): 500 ran, 12 skipped, 3 failed`.
fn progress_text(b: &StoredBackfill) -> String {
    let total = b.spec.total.max(1);
    format!(
        "{}/{} ticks ({}%): {} ran, {} skipped, {} failed",
        b.progressed(),
        b.spec.total,
        b.progressed() * 100 / total,
        b.done,
        b.skipped,
        b.failed
    )
}

/// A bar of `width` cells for `b`'s progress.
fn bar(b: &StoredBackfill, width: usize) -> String {
    let total = b.spec.total.max(1);
    let filled = usize::try_from(b.progressed().min(total) * width as u64 / total).unwrap_or(width);
    format!("[{}{}]", "#".repeat(filled), "-".repeat(width - filled))
}

/// Reads backfill `id` every second and shows its progress until it is over: a bar redrawn in
/// place on a terminal, a line per change elsewhere.
async fn watch(store: &dyn Steered, runs: Option<&dyn RunStore>, id: i64) -> Result<(), Failure> {
    let desk = desk(store, runs);
    let terminal = std::io::stdout().is_terminal();
    let mut shown = String::new();
    loop {
        let b = desk
            .find_backfill(id)
            .await
            .map_err(|e| backfill_failure(id, e))?;
        let line = format!("#{id} {} {} {}", bar(&b, 30), progress_text(&b), b.state);
        if line != shown {
            let mut out = std::io::stdout().lock();
            let _ = if terminal {
                write!(out, "\r\x1b[2K{line}")
            } else {
                writeln!(out, "{line}")
            };
            let _ = out.flush();
            shown = line;
        }
        if b.state.is_over() {
            if terminal {
                println!();
            }
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
