//! `shedlock calendar …`: the calendars kept in the store (named sets of days and time ranges
//! read in one time zone, whose ticks the jobs that exclude them do not run), through the
//! library's operator layer ([`Operator::create_calendar`](shedlock::operator::Operator::create_calendar)
//! and the methods beside it), each change recorded as the other commands' are.
//!
//! - `create NAME --zone ZONE [ENTRY…] [--label TEXT] [--ics FILE [--until T]]`;
//! - `add NAME ENTRY… [--label TEXT]`, `remove NAME ENTRY…`;
//! - `import NAME FILE.ics [--until T]`: the file's events, read by
//!   [`entries_from_ics`](shedlock::schedules::calendar::entries_from_ics), added;
//! - `list`, `show NAME` (its entries one a line with their labels, and the jobs that name
//!   it), `delete NAME` (refused while a job names it: exit 4, naming the jobs).
//!
//! A calendar the store does not hold exits 3 with the closest name; a bad entry, zone,
//! label or file exits 2 naming it. `--json` prints the API's forms
//! ([`shedlock_web::json::calendar`]): `list` an array of calendars, the others one object
//! (`name`, `result`, and `calendar`; `added` or `removed` counts where they apply).

use std::path::Path;

use serde_json::{Value, json};
use shedlock::schedules::calendar::DEFAULT_ICS_HORIZON;
use shedlock::schedules::{Calendar, CalendarEntry};
use shedlock::{Error, RunStore};

use crate::args::{
    CalendarCommand, CalendarCreateArgs, CalendarEntriesArgs, CalendarImportArgs, CalendarNameArgs,
};
use crate::db::Steered;
use crate::failure::Failure;
use crate::jobs::{actor, desk, report};
use crate::output::{escape, pretty, print, render_table};

/// `shedlock calendar …`.
pub(crate) async fn calendar(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    command: &CalendarCommand,
) -> Result<(), Failure> {
    match command {
        CalendarCommand::Create(args) => create(store, runs, args).await,
        CalendarCommand::Add(args) => add(store, runs, args).await,
        CalendarCommand::Import(args) => import(store, runs, args).await,
        CalendarCommand::Remove(args) => remove(store, runs, args).await,
        CalendarCommand::List { json } => list(store, runs, *json).await,
        CalendarCommand::Show(args) => show(store, runs, args).await,
        CalendarCommand::Delete(args) => delete(store, runs, args).await,
    }
}

/// The library's error about calendar `name`: an entry read alone names no calendar, so it
/// is named here; a schedule row of that name already there is "calendar … already exists".
fn calendar_failure(name: &str, error: Error) -> Failure {
    match error {
        Error::InvalidCalendar {
            name: unnamed,
            reason,
        } if unnamed.is_empty() => Error::InvalidCalendar {
            name: name.to_owned(),
            reason,
        }
        .into(),
        Error::ScheduleExists { .. } => Failure::NotDone(format!(
            "calendar {name:?} already exists: nothing was created (`shedlock calendar add \
             {name} ENTRY…` adds to it, `shedlock calendar show {name}` shows it)"
        )),
        other => other.into(),
    }
}

/// The entries given on the command line, with `label` when given.
fn entries(
    name: &str,
    given: &[String],
    label: Option<&str>,
) -> Result<Vec<CalendarEntry>, Failure> {
    given
        .iter()
        .map(|text| {
            let entry: CalendarEntry = text.parse().map_err(|e| calendar_failure(name, e))?;
            Ok(match label {
                Some(label) => entry.labelled(label),
                None => entry,
            })
        })
        .collect()
}

/// The text of `path` (`-`: standard input).
fn read_file(path: &Path) -> Result<String, Failure> {
    let shown = path.display();
    let read = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read(path).and_then(|bytes| {
            String::from_utf8(bytes).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "not UTF-8 text, as an iCalendar file is",
                )
            })
        })
    };
    read.map_err(|error| Failure::Usage(format!("cannot read {shown}: {error}")))
}

/// The entries of the .ics file at `path` for calendar `calendar`, recurring events expanded
/// up to `until` (two years from `now` by default).
fn ics_entries(
    calendar: &Calendar,
    path: &Path,
    until: Option<chrono::DateTime<chrono::Utc>>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<CalendarEntry>, Failure> {
    let text = read_file(path)?;
    let until = until.unwrap_or(now + DEFAULT_ICS_HORIZON);
    calendar
        .entries_from_ics(&text, until)
        .map_err(|error| match error {
            Error::InvalidCalendar { name, reason } => Error::InvalidCalendar {
                name,
                reason: format!("{}: {reason}", path.display()),
            }
            .into(),
            other => other.into(),
        })
}

/// `create NAME --zone ZONE [ENTRY…] [--ics FILE]`.
async fn create(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CalendarCreateArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    // The name and the zone are checked before a file is read.
    let empty = Calendar::new(name, &args.zone).map_err(|e| calendar_failure(name, e))?;
    let mut all = entries(name, &args.entries, args.label.as_deref())?;
    if let Some(path) = &args.ics {
        let now = store.now().await?;
        all.extend(ics_entries(&empty, path, args.until, now)?);
    }
    let done = desk(store, runs)
        .create_calendar(name, &args.zone, all, &actor())
        .await
        .map_err(|e| calendar_failure(name, e))?;
    report(&done, runs);
    let calendar = &done.value;
    if args.json {
        return print_json(json!({
            "name": name, "result": "created",
            "calendar": shedlock_web::json::calendar(calendar, &[]),
        }));
    }
    print(&format!(
        "created calendar {name:?} in {} with {}; a job excludes it with `shedlock \
         reschedule JOB --exclude {name}`\n",
        calendar.time_zone,
        entries_text(calendar.entries.len())
    ));
    Ok(())
}

/// `add NAME ENTRY… [--label TEXT]`.
async fn add(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CalendarEntriesArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    let given = entries(name, &args.entries, args.label.as_deref())?;
    let count = given.len();
    let done = desk(store, runs)
        .add_to_calendar(name, given, &actor())
        .await
        .map_err(|e| calendar_failure(name, e))?;
    report(&done, runs);
    let (calendar, added) = &done.value;
    let jobs = if args.json {
        desk(store, runs).calendar_users(name).await?
    } else {
        Vec::new()
    };
    changed(name, "added", *added, count, calendar, &jobs, args.json)
}

/// `import NAME FILE.ics [--until T]`.
async fn import(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CalendarImportArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    let desk = desk(store, runs);
    let calendar = desk
        .calendar(name)
        .await
        .map_err(|e| calendar_failure(name, e))?;
    let now = store.now().await?;
    let read = ics_entries(&calendar, &args.file, args.until, now)?;
    let count = read.len();
    let done = desk
        .add_to_calendar(name, read, &actor())
        .await
        .map_err(|e| calendar_failure(name, e))?;
    report(&done, runs);
    let (calendar, added) = &done.value;
    let jobs = if args.json {
        desk.calendar_users(name).await?
    } else {
        Vec::new()
    };
    changed(name, "imported", *added, count, calendar, &jobs, args.json)
}

/// `remove NAME ENTRY…`.
async fn remove(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CalendarEntriesArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    if args.label.is_some() {
        return Err(Failure::Usage(
            "--label is for `calendar add`: an entry is removed by its span alone".into(),
        ));
    }
    let given = entries(name, &args.entries, None)?;
    let count = given.len();
    let done = desk(store, runs)
        .remove_from_calendar(name, given, &actor())
        .await
        .map_err(|e| calendar_failure(name, e))?;
    report(&done, runs);
    let (calendar, removed) = &done.value;
    let jobs = if args.json {
        desk(store, runs).calendar_users(name).await?
    } else {
        Vec::new()
    };
    changed(name, "removed", *removed, count, calendar, &jobs, args.json)
}

/// What `add`, `import` and `remove` print: how many of the entries given changed it.
fn changed(
    name: &str,
    result: &str,
    changed: usize,
    given: usize,
    calendar: &Calendar,
    jobs: &[String],
    json: bool,
) -> Result<(), Failure> {
    if json {
        let count = if result == "removed" {
            "removed"
        } else {
            "added"
        };
        return print_json(json!({
            "name": name, "result": result, count: changed, "given": given,
            "calendar": shedlock_web::json::calendar(calendar, jobs),
        }));
    }
    let text = match result {
        "removed" => format!(
            "removed {changed} of the {} given from calendar {name:?}{}; it has {}\n",
            entries_text(given),
            if changed < given {
                " (the others were not in it)"
            } else {
                ""
            },
            entries_text(calendar.entries.len())
        ),
        _ => format!(
            "{result} {} into calendar {name:?}: {changed} new{}; it has {}\n",
            entries_text(given),
            if changed < given {
                ", the others already there (their labels updated)"
            } else {
                ""
            },
            entries_text(calendar.entries.len())
        ),
    };
    print(&text);
    Ok(())
}

/// `1 entry`, `3 entries`.
fn entries_text(count: usize) -> String {
    if count == 1 {
        "1 entry".to_owned()
    } else {
        format!("{count} entries")
    }
}

/// `list [--json]`.
async fn list(store: &dyn Steered, runs: Option<&dyn RunStore>, json: bool) -> Result<(), Failure> {
    let desk = desk(store, runs);
    let calendars = desk.calendars().await?;
    let mut users = Vec::with_capacity(calendars.len());
    for calendar in &calendars {
        users.push(desk.calendar_users(&calendar.name).await?);
    }
    if json {
        let all: Vec<Value> = calendars
            .iter()
            .zip(&users)
            .map(|(calendar, jobs)| shedlock_web::json::calendar(calendar, jobs))
            .collect();
        return print_json(Value::Array(all));
    }
    if calendars.is_empty() {
        print(
            "no calendar in the store: `shedlock calendar create NAME --zone ZONE [ENTRY…]` makes one\n",
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = calendars
        .iter()
        .zip(&users)
        .map(|(calendar, jobs)| {
            vec![
                calendar.name.clone(),
                calendar.time_zone.clone(),
                calendar.entries.len().to_string(),
                jobs_text(jobs),
            ]
        })
        .collect();
    print(&render_table(
        &["NAME", "TIME_ZONE", "ENTRIES", "JOBS"],
        &rows,
    ));
    Ok(())
}

/// The jobs that name a calendar, or `-`.
fn jobs_text(jobs: &[String]) -> String {
    if jobs.is_empty() {
        "-".to_owned()
    } else {
        jobs.join(", ")
    }
}

/// `show NAME [--json]`.
async fn show(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CalendarNameArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    let desk = desk(store, runs);
    let calendar = desk
        .calendar(name)
        .await
        .map_err(|e| calendar_failure(name, e))?;
    let jobs = desk.calendar_users(name).await?;
    if args.json {
        return print_json(shedlock_web::json::calendar(&calendar, &jobs));
    }
    let mut text = format!(
        "calendar {name:?}: {} on the wall clock of {}\n",
        entries_text(calendar.entries.len()),
        calendar.time_zone
    );
    if calendar.entries.is_empty() {
        text.push_str(&format!(
            "  no entry: `shedlock calendar add {name} ENTRY…` adds some\n"
        ));
    } else {
        let rows: Vec<Vec<String>> = calendar
            .entries
            .iter()
            .map(|entry| {
                vec![
                    entry.to_string(),
                    entry.label.clone().unwrap_or_else(|| "-".to_owned()),
                ]
            })
            .collect();
        text.push_str(&render_table(&["ENTRY", "LABEL"], &rows));
    }
    if jobs.is_empty() {
        text.push_str("no job excludes it\n");
    } else {
        text.push_str(&format!("excluded by the jobs: {}\n", jobs.join(", ")));
    }
    print(&text);
    Ok(())
}

/// `delete NAME`: refused (exit 4) while a job names it.
async fn delete(
    store: &dyn Steered,
    runs: Option<&dyn RunStore>,
    args: &CalendarNameArgs,
) -> Result<(), Failure> {
    let name = args.name.as_str();
    let desk = desk(store, runs);
    let calendar = desk
        .calendar(name)
        .await
        .map_err(|e| calendar_failure(name, e))?;
    let jobs = desk.calendar_users(name).await?;
    if !jobs.is_empty() {
        let who = match jobs.as_slice() {
            [one] => format!("the job {one} excludes it"),
            more => format!("the jobs {} exclude it", more.join(", ")),
        };
        return Err(Failure::NotDone(format!(
            "calendar {name:?} was not deleted: {who} (every tick would be excluded without \
             it); change the rules first (`shedlock reschedule JOB --exclude …`, or \
             `--rules-default` for the code's) or the code"
        )));
    }
    let done = desk
        .delete_calendar(name, &actor())
        .await
        .map_err(|e| calendar_failure(name, e))?;
    report(&done, runs);
    if args.json {
        return print_json(json!({
            "name": name, "result": "deleted",
            "calendar": shedlock_web::json::calendar(&calendar, &[]),
        }));
    }
    print(&format!(
        "deleted calendar {name:?} ({} in {})\n",
        entries_text(calendar.entries.len()),
        calendar.time_zone
    ));
    Ok(())
}

fn print_json(value: Value) -> Result<(), Failure> {
    print(&format!("{}\n", pretty(&value)));
    Ok(())
}

/// The jobs' time rules as the tables show them: `exclude kr-holidays, freeze (next); from
/// 2026-12-01T00:00:00Z; until …; at most 10 runs`, or `-`.
pub(crate) fn rules_text(rules: Option<&shedlock::schedules::TimeRules>) -> String {
    let Some(rules) = rules.filter(|r| !r.is_empty()) else {
        return "-".to_owned();
    };
    let mut parts = Vec::new();
    if !rules.exclude.is_empty() {
        parts.push(format!(
            "exclude {} ({})",
            rules.exclude.join(", "),
            rules.on_excluded
        ));
    }
    if let Some(start) = rules.start {
        parts.push(format!("from {}", crate::output::time(start)));
    }
    if let Some(end) = rules.end {
        parts.push(format!("until {}", crate::output::time(end)));
    }
    if let Some(runs) = rules.max_runs {
        parts.push(format!("at most {runs} runs"));
    }
    escape(&parts.join("; "), false)
}
