//! Churn of the control plane across OS processes, on every backend: four `shedlock-harness`
//! processes (`--schedules 200ms`) each scheduling the same jobs, while the test makes one
//! change a second in the store — a reschedule, a pause, a resume or a "run now" (asked twice
//! in a row), on a job picked by a seeded deterministic sequence — and then checks what the
//! processes ran against the schedule in effect at each instant. The short version, in every
//! run: 100 jobs firing every second, 18 changes. The long one (`SHEDLOCK_SOAK=1`): 1,000 jobs
//! firing every 10 s (a tenth of them at each second of the ten, each by a cron of its own
//! in the store), 60 changes. Both make 100 runs a second: 1,000 runs a second
//! (4,000 claims a second, each run writing three rows) is more than four debug-build
//! processes on a loaded 2-core machine keep up with — runs start seconds late and last
//! seconds, so most ticks find the lock still held. The variables `SHEDLOCK_CHURN_JOBS`,
//! `SHEDLOCK_CHURN_PERIOD` (seconds), `SHEDLOCK_CHURN_CHANGES` and `SHEDLOCK_CHURN_SEED` change
//! the load and the sequence.
//!
//! # What is checked
//!
//! Every job starts on the cron `o-59/P` (every P seconds from second `o` of the minute: P =
//! 1 s, or 10 s in the soak, `o` the job's number modulo P), and each reschedule of a job
//! switches it between `o-59/P` and `o-59/2P`: every tick of the latter is in both, so it is
//! due whatever the timing of the changes. For each change the
//! test notes when it was made (`issued`: just before the store was asked) and when the last
//! of the four processes had applied it (`applied`: per process, the first row of
//! `<table>_applied` with that version or a later one). A job's *candidate states* over an
//! interval `[from, to]` (its cron, or whether it is paused) are the state set by its latest
//! change applied by every process at or before `from` (the code's when none), plus the state
//! set by each later change issued at or before `to`: whatever a process can have had in
//! effect then. Changes are compared with tick instants with a 100 ms margin (ticks are due by
//! the database's clock as a process estimates it).
//!
//! For each job and each whole second `T` of the checked window (from a second after the four
//! processes are up and have read the store, to two seconds after the last change was applied
//! everywhere):
//!
//! - **Due**: `T` is a tick of every candidate cron at the instant `T`, and every candidate
//!   pause state over `[T, T + L]` is "running". `L` covers how late a tick may fire (a pause
//!   is read as the tick fires): the largest lateness of any run seen (start minus tick), and
//!   at least 2 s. So around a pause or a resume either outcome is allowed from `L` before it
//!   was asked for until every process applied it; a reschedule allows none for the ticks in
//!   both crons.
//! - **Lost**: a due tick that did not run, unless
//!   - another run of the job still went on at `T` (started by `T` and not finished before
//!     it, 100 ms margin each way): then its lock was held, and the tick was skipped as the
//!     lock says (counted apart; a run that starts late because the machine is loaded can last
//!     past the next tick);
//!   - or a process reported the tick `skipped-held` (each runs with `--report-skips`: the
//!     scheduler's listener hook) while a run of an earlier tick of the job, or a run asked
//!     for, ended at most [`RELEASE_SLACK_MS`] before `T` or later: its lock is taken before
//!     its body starts and released after it ends, both later than the body's own times on
//!     a loaded machine;
//!   - or the process whose share the job was reported it `skipped-shed`: past its capacity,
//!     the tick's deadline (half-way to the next tick) passed before its claim could be sent
//!     (counted apart, as the scheduler's `shed` counter says).
//!
//!   The test wants none lost.
//! - **Stray**: a tick that ran though it is a tick of no candidate cron at `T`.
//! - **Ran paused**: a tick that ran though every candidate pause state over `[T, start of its
//!   run]` is "paused" (every process had applied the pause before `T`, and the resume was not
//!   asked for before the run started). The test wants none of either.
//! - **Duplicates**: no `(job, tick)` ran twice, and no two runs of a job overlapped.
//! - **"Run now"**: each job ran, without a tick, exactly as many times as the store answered
//!   [`TriggerAnswer::Requested`] for it; an [`TriggerAnswer::AlreadyPending`] answer adds no
//!   run.
//!
//! Printed per backend: the changes made, the runs, the checked ticks, duplicates, lost, and
//! the apply latency (issued to applied by all four) p50/p99 of the changes.
#![allow(missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use shedlock::Backend;
use shedlock::schedules::{ScheduleChange, ScheduleStore, TriggerAnswer};
use shedlock_suite::fleet::{Exited, Run, check};
use shedlock_suite::place::Place;

const HARNESS: &str = env!("CARGO_BIN_EXE_shedlock-harness");

/// Harness processes, each scheduling every job.
const PROCESSES: usize = 4;

/// The seed of the sequence of changes (`SHEDLOCK_CHURN_SEED` overrides it).
const SEED: u64 = 36;

/// Margin between a change's times and a tick instant (the database's clock as estimated).
const MARGIN_MS: i64 = 100;

/// The least lateness of a tick's fire allowed for around a pause or a resume.
const LATE_MIN_MS: i64 = 2000;

/// How long after a run's body ended its lock may still be held (the release is a statement
/// of its own, late on a loaded machine).
const RELEASE_SLACK_MS: i64 = 1000;

/// A generous deadline for what takes a poll interval or a few ticks.
const DEADLINE: Duration = Duration::from_secs(60);

/// One churn at a time in this test binary: four processes of many jobs each are the load
/// being measured, not four backends' at once.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One run of the churn.
#[derive(Debug, Clone, Copy)]
struct Churn {
    jobs: usize,
    /// Every job's code cron fires every `period` seconds; reschedules switch between it and
    /// twice it.
    period: i64,
    /// Changes, one a second.
    changes: usize,
}

/// The short version: what four debug-build processes keep up with on a loaded 2-core
/// machine, in well under a minute per backend.
fn short() -> Churn {
    Churn {
        jobs: 100,
        period: 1,
        changes: 18,
    }
}

/// The soak: 1,000 jobs, each firing every 10 s (100 runs a second, as the short version),
/// 60 changes. `SHEDLOCK_CHURN_PERIOD=1` makes it 1,000 runs a second.
fn long() -> Churn {
    Churn {
        jobs: 1000,
        period: 10,
        changes: 60,
    }
}

/// The cron firing every `period` seconds from second `offset` of each minute (`o-59/P`).
fn cron(period: i64, offset: i64) -> String {
    if period == 1 {
        "* * * * * *".into()
    } else {
        format!("{offset}-59/{period} * * * * *")
    }
}

/// The second of the minute job `job`'s ticks start from: the jobs are spread evenly over the
/// period, so as many fire each second.
fn offset(churn: Churn, job: usize) -> i64 {
    job as i64 % churn.period
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// SplitMix64: a small deterministic sequence, the same on every machine.
struct Sequence(u64);

impl Sequence {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// The job's cron now fires every this many seconds.
    Cron(i64),
    Pause,
    Resume,
    /// "Run now": whether the store answered `Requested`.
    Trigger(bool),
}

/// One change made, and when.
#[derive(Debug, Clone)]
struct Change {
    job: usize,
    kind: Kind,
    /// Just before the store was asked (ms).
    issued: i64,
    /// The schedule version it made (none for an `AlreadyPending` answer).
    version: Option<i64>,
    /// When the last process had applied it (ms), filled in at the end.
    applied: i64,
}

/// The states any process can have had in effect over `[from, to]`: the one set by the latest
/// change applied everywhere at or before `from` (`initial` when none), and the one set by
/// each later change issued at or before `to`. `changes`: (issued, applied, state) in order.
fn candidates<S: Copy>(initial: S, changes: &[(i64, i64, S)], from: i64, to: i64) -> Vec<S> {
    let settled = changes
        .iter()
        .rposition(|(_, applied, _)| applied + MARGIN_MS <= from);
    let mut states = vec![settled.map_or(initial, |i| changes[i].2)];
    let later = settled.map_or(0, |i| i + 1);
    states.extend(
        changes[later..]
            .iter()
            .filter(|(issued, _, _)| issued - MARGIN_MS <= to)
            .map(|(_, _, state)| *state),
    );
    states
}

/// What the checks found.
#[derive(Debug, Default)]
struct Findings {
    due: usize,
    /// Due ticks not run because another run of the job still held its lock at the tick.
    held: Vec<(String, i64)>,
    /// Due ticks not run because the process whose share they were was past its capacity.
    shed: Vec<(String, i64)>,
    lost: Vec<(String, i64)>,
    /// Ticks of a job paused everywhere at the tick.
    paused: usize,
    stray: Vec<(String, i64)>,
    ran_paused: Vec<(String, i64)>,
    /// Jobs whose runs without a tick differ from their accepted requests: (job, asked, ran).
    triggers_off: Vec<(String, usize, usize)>,
}

/// Whether another run of `job` still went on at `tick` (it started by then and had not
/// finished), holding the job's lock.
fn held(runs: &[Run], job: &str, tick: i64) -> bool {
    runs.iter().any(|run| {
        run.job == job
            && run.tick_ms != Some(tick)
            && run.started_ms <= tick + MARGIN_MS
            && run.finished_ms.is_none_or(|end| end >= tick - MARGIN_MS)
    })
}

/// Whether a process reported `job`'s `tick` skipped as held, and a run of an earlier tick of
/// the job (or a run asked for) ended at most [`RELEASE_SLACK_MS`] before it or later: its
/// lock, released after its body ended, can have been held at the tick.
fn reported_held(runs: &[Run], skips: &Skips, job: &str, tick: i64) -> bool {
    skips
        .get(&(job.to_owned(), tick))
        .is_some_and(|said| said.contains("skipped-held"))
        && runs.iter().any(|run| {
            run.job == job
                // An earlier tick was claimed by its deadline, before this one; a run asked
                // for, by when its body started.
                && run
                    .tick_ms
                    .map_or(run.started_ms <= tick + MARGIN_MS, |t| t < tick)
                && run
                    .finished_ms
                    .is_none_or(|end| end >= tick - RELEASE_SLACK_MS)
        })
}

/// What the processes reported of the ticks they did not run: (job, tick) → outcomes.
type Skips = BTreeMap<(String, i64), BTreeSet<String>>;

/// Checks the runs of ticks in `[from, to]` against the changes (see the module's doc).
fn findings(
    churn: Churn,
    changes: &[Change],
    (runs, skips): (&[Run], &Skips),
    from: i64,
    to: i64,
    late: i64,
) -> Findings {
    let mut found = Findings::default();
    let mut ran: BTreeMap<(&str, i64), i64> = BTreeMap::new();
    for run in runs {
        if let Some(tick) = run.tick_ms {
            ran.entry((run.job.as_str(), tick))
                .or_insert(run.started_ms);
        }
    }
    for job in 0..churn.jobs {
        let name = format!("job_{job}");
        let mine = changes.iter().filter(|c| c.job == job);
        let crons: Vec<(i64, i64, i64)> = mine
            .clone()
            .filter_map(|c| match c.kind {
                Kind::Cron(period) => Some((c.issued, c.applied, period)),
                _ => None,
            })
            .collect();
        let pauses: Vec<(i64, i64, bool)> = mine
            .filter_map(|c| match c.kind {
                Kind::Pause => Some((c.issued, c.applied, true)),
                Kind::Resume => Some((c.issued, c.applied, false)),
                _ => None,
            })
            .collect();
        let first = (from + 999).div_euclid(1000) * 1000;
        for tick in (first..=to).step_by(1000) {
            let periods = candidates(churn.period, &crons, tick, tick);
            let from_offset = tick / 1000 - offset(churn, job);
            let of = |period: &i64| from_offset.rem_euclid(*period) == 0;
            let started = ran.get(&(name.as_str(), tick)).copied();
            let due = periods.iter().all(of)
                && candidates(false, &pauses, tick, tick + late)
                    .iter()
                    .all(|paused| !paused);
            if due {
                found.due += 1;
                if started.is_none() {
                    let said = skips.get(&(name.clone(), tick));
                    if held(runs, &name, tick) || reported_held(runs, skips, &name, tick) {
                        found.held.push((name.clone(), tick));
                    } else if said.is_some_and(|said| said.contains("skipped-shed")) {
                        found.shed.push((name.clone(), tick));
                    } else {
                        found.lost.push((name.clone(), tick));
                    }
                }
            }
            if periods.iter().any(of)
                && candidates(false, &pauses, tick, tick)
                    .iter()
                    .all(|paused| *paused)
            {
                found.paused += 1;
            }
            if let Some(started) = started {
                if !periods.iter().any(of) {
                    found.stray.push((name.clone(), tick));
                }
                if candidates(false, &pauses, tick, started)
                    .iter()
                    .all(|paused| *paused)
                {
                    found.ran_paused.push((name.clone(), tick));
                }
            }
        }
    }
    let mut asked: BTreeMap<String, usize> = BTreeMap::new();
    for change in changes {
        if change.kind == Kind::Trigger(true) {
            *asked.entry(format!("job_{}", change.job)).or_default() += 1;
        }
    }
    let mut manual: BTreeMap<String, usize> = BTreeMap::new();
    for run in runs.iter().filter(|run| run.tick_ms.is_none()) {
        *manual.entry(run.job.clone()).or_default() += 1;
    }
    let names: BTreeSet<&String> = asked.keys().chain(manual.keys()).collect();
    for name in names {
        let (a, m) = (
            asked.get(name).copied().unwrap_or(0),
            manual.get(name).copied().unwrap_or(0),
        );
        if a != m {
            found.triggers_off.push((name.clone(), a, m));
        }
    }
    found
}

/// The `q`-th quantile of sorted values.
fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at]
}

/// For each process, its applied versions in order: (version, when). The first time each
/// process had `version` or a later one, the latest of them; `None` if one never had.
fn applied_everywhere(rows: &BTreeMap<String, Vec<(i64, i64)>>, version: i64) -> Option<i64> {
    let mut last = i64::MIN;
    for applied in rows.values() {
        let at = applied.partition_point(|(v, _)| *v < version);
        last = last.max(applied.get(at)?.1);
    }
    Some(last)
}

/// Asks for a run of `job` now: the request's id (a schedule version) when the store took it,
/// `None` when one was already pending.
async fn trigger(store: &dyn ScheduleStore, job: &str) -> Option<i64> {
    match store.request_trigger(job, "churn").await.unwrap() {
        TriggerAnswer::Requested { id } => Some(id),
        TriggerAnswer::AlreadyPending(_) => None,
        other => panic!("an answer this test does not know: {other:?}"),
    }
}

/// At most the first 20 of `items`, and how many there were.
fn some<T: std::fmt::Debug>(items: &[T]) -> String {
    format!(
        "{} in all, first {:?}",
        items.len(),
        &items[..items.len().min(20)]
    )
}

/// For the first few of `ticks`: the changes of their job and its runs within 3 s.
fn around(ticks: &[(String, i64)], changes: &[Change], runs: &[Run]) -> String {
    let mut said = String::new();
    for (job, tick) in ticks.iter().take(5) {
        said += &format!("\n{job} at {tick}: changes:");
        for change in changes.iter().filter(|c| format!("job_{}", c.job) == *job) {
            said += &format!("\n  {change:?}");
        }
        said += "\n  runs:";
        for run in runs
            .iter()
            .filter(|r| r.job == *job && (r.started_ms - tick).abs() < 3000)
        {
            said += &format!("\n  {run:?}");
        }
    }
    said
}

/// `churn`, with `SHEDLOCK_CHURN_JOBS`, `SHEDLOCK_CHURN_PERIOD` (seconds) and
/// `SHEDLOCK_CHURN_CHANGES` overriding its fields when set (to measure other loads).
fn overridden(churn: Churn) -> Churn {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    Churn {
        jobs: var("SHEDLOCK_CHURN_JOBS").unwrap_or(churn.jobs),
        period: var("SHEDLOCK_CHURN_PERIOD").map_or(churn.period, |p| p as i64),
        changes: var("SHEDLOCK_CHURN_CHANGES").unwrap_or(churn.changes),
    }
}

async fn churn(backend: Backend, churn: Churn) {
    let churn = overridden(churn);
    let Some(place) = Place::new(backend, "churn", HARNESS) else {
        return;
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    let seed = std::env::var("SHEDLOCK_CHURN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    assert!(
        churn.period > 0 && 60 % (2 * churn.period) == 0,
        "a period of whole seconds whose double divides a minute, not {}",
        churn.period
    );
    let store = place.target.schedules().await;
    let store: &dyn ScheduleStore = store.as_ref();
    // Jobs firing less often than every second are spread over the seconds of their period,
    // each by a cron of its own in the store (read by the processes before they fire).
    let spread_from = now_ms();
    if churn.period > 1 {
        for job in 0..churn.jobs {
            let spread = ScheduleChange::new().cron(cron(churn.period, offset(churn, job)), None);
            store
                .update_schedule(&format!("job_{job}"), &spread, "churn")
                .await
                .unwrap();
        }
    }
    let spread_in = now_ms() - spread_from;
    let spread_version = store.schedules_version().await.unwrap();
    let (jobs, code_cron) = (churn.jobs.to_string(), cron(churn.period, 0));
    let args = [
        "--schedules",
        "200ms",
        "--jobs",
        &jobs,
        "--cron",
        &code_cron,
        "--declare-lock",
        "--report-skips",
    ];
    let began = now_ms();
    let mut fleet = Vec::new();
    for i in 0..PROCESSES {
        fleet.push(place.spawn(&format!("p{i}"), &args).await);
    }
    let up = now_ms();

    // One change a second, from a second after every process is up and has read the store
    // (a process reports itself ready before its first read; it fires nothing before it).
    if spread_version > 0 {
        place.applied_by_all(PROCESSES, spread_version).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let from = now_ms();
    let mut sequence = Sequence(seed);
    let mut paused: BTreeSet<usize> = BTreeSet::new();
    let mut periods = vec![churn.period; churn.jobs];
    let mut changes: Vec<Change> = Vec::new();
    let start = tokio::time::Instant::now();
    for k in 0..churn.changes {
        tokio::time::sleep_until(start + Duration::from_secs(k as u64)).await;
        let pick = sequence.below(4);
        let mut job = sequence.below(churn.jobs);
        let kind = match pick {
            0 => Kind::Cron(if periods[job] == churn.period {
                2 * churn.period
            } else {
                churn.period
            }),
            1 | 2 if pick == 2 && !paused.is_empty() => {
                job = *paused.iter().nth(sequence.below(paused.len())).unwrap();
                Kind::Resume
            }
            1 | 2 if paused.contains(&job) => Kind::Resume,
            1 | 2 => Kind::Pause,
            _ => Kind::Trigger(false),
        };
        let name = format!("job_{job}");
        let mut issued = now_ms();
        let (kind, version) = match kind {
            Kind::Cron(period) => {
                let change = ScheduleChange::new().cron(cron(period, offset(churn, job)), None);
                let row = store
                    .update_schedule(&name, &change, "churn")
                    .await
                    .unwrap();
                periods[job] = period;
                (kind, Some(row.version))
            }
            Kind::Pause | Kind::Resume => {
                let pause = kind == Kind::Pause;
                let change = ScheduleChange::new().paused(pause);
                let row = store
                    .update_schedule(&name, &change, "churn")
                    .await
                    .unwrap();
                if pause {
                    paused.insert(job);
                } else {
                    paused.remove(&job);
                }
                (kind, Some(row.version))
            }
            Kind::Trigger(_) => {
                // Asked twice in a row: the second is most likely answered "already pending".
                let first = trigger(store, &name).await;
                changes.push(Change {
                    job,
                    kind: Kind::Trigger(first.is_some()),
                    issued,
                    version: first,
                    applied: 0,
                });
                issued = now_ms();
                let second = trigger(store, &name).await;
                (Kind::Trigger(second.is_some()), second)
            }
        };
        changes.push(Change {
            job,
            kind,
            issued,
            version,
            applied: 0,
        });
    }
    let churned = now_ms();

    // Every change applied everywhere; the ticks of two more seconds; every "run now" run.
    let last = changes.iter().filter_map(|c| c.version).max().unwrap();
    let settled = place.applied_by_all(PROCESSES, last).await;
    let to = settled + 2000;
    let asked = changes
        .iter()
        .filter(|c| c.kind == Kind::Trigger(true))
        .count();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let runs = place.target.runs().await;
        let manual = runs.iter().filter(|run| run.tick_ms.is_none()).count();
        let newest = runs.iter().filter_map(|run| run.tick_ms).max();
        if manual >= asked && now_ms() > to + 3000 && newest.is_some_and(|t| t > to) {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            let mut said = String::new();
            for change in changes.iter().filter(|c| c.kind == Kind::Trigger(true)) {
                let name = format!("job_{}", change.job);
                let ran = runs
                    .iter()
                    .filter(|run| run.job == name && run.tick_ms.is_none())
                    .count();
                said += &format!("\n{change:?}: {ran} runs without a tick; the logs say:");
                for i in 0..PROCESSES {
                    let log = std::fs::read_to_string(place.logs.path().join(format!("p{i}.log")))
                        .unwrap_or_default();
                    for line in log.lines().filter(|l| {
                        l.contains(&format!("{name} ")) || l.contains(&format!("{name}\""))
                    }) {
                        said += &format!("\n  p{i}: {line}");
                    }
                }
            }
            panic!("{manual} of {asked} runs asked for ran within {DEADLINE:?}:{said}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for process in &fleet {
        process.signal("TERM");
    }
    let mut exited: Vec<Exited> = Vec::new();
    for process in fleet {
        let process = process.wait().await;
        assert_eq!(process.code, Some(0), "{}: {}", process.name, process.log);
        exited.push(process);
    }
    let ended = now_ms();

    // When each change was applied everywhere.
    let mut applied: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for (instance, version, at) in place.target.applied().await {
        applied.entry(instance).or_default().push((version, at));
    }
    assert_eq!(applied.len(), PROCESSES, "every process applied changes");
    for rows in applied.values_mut() {
        rows.sort_unstable();
    }
    let mut latencies = Vec::new();
    for change in &mut changes {
        change.applied = match change.version {
            Some(version) => {
                let at = applied_everywhere(&applied, version)
                    .unwrap_or_else(|| panic!("{change:?} was applied by every process"));
                latencies.push(at - change.issued);
                at
            }
            None => change.issued,
        };
    }
    latencies.sort_unstable();

    let runs = place.target.runs().await;
    let report = check(&runs, None);
    let lateness: Vec<i64> = runs
        .iter()
        .filter_map(|run| Some(run.started_ms - run.tick_ms?))
        .collect();
    let late = lateness.iter().copied().max().unwrap_or(0).max(LATE_MIN_MS);
    let mut skips = Skips::new();
    for process in &exited {
        for (job, tick, outcome) in &process.skips {
            skips
                .entry((job.clone(), *tick))
                .or_default()
                .insert(outcome.clone());
        }
    }
    let found = findings(churn, &changes, (&runs, &skips), from, to, late);

    let count = |f: fn(&Kind) -> bool| changes.iter().filter(|c| f(&c.kind)).count();
    let stat = |field: &str| exited.iter().map(|e| e.stat(field)).sum::<u64>();
    let in_window = runs
        .iter()
        .filter(|run| run.tick_ms.is_some_and(|t| t >= from && t <= to))
        .count();
    eprintln!(
        "{backend:?} churn: {} jobs every {} s ({} ms spreading them), {} processes, seed {seed}; up in {} ms, churned {} ms, stopped {} ms after",
        churn.jobs,
        churn.period,
        spread_in,
        PROCESSES,
        up - began,
        churned - from,
        ended - churned
    );
    eprintln!(
        "{backend:?} changes: {} ({} reschedules, {} pauses, {} resumes, {} run-now asked twice each: {} requested, {} already pending)",
        churn.changes,
        count(|k| matches!(k, Kind::Cron(_))),
        count(|k| *k == Kind::Pause),
        count(|k| *k == Kind::Resume),
        count(|k| matches!(k, Kind::Trigger(_))) / 2,
        count(|k| *k == Kind::Trigger(true)),
        count(|k| *k == Kind::Trigger(false)),
    );
    eprintln!(
        "{backend:?} runs: {} in all, {} of ticks in the checked {} s window, {} asked for; due ticks checked {}, of which skipped as their lock was held by the run before {}, shed past capacity {}; duplicates {}, overlaps {}, lost {}, stray {}; ticks paused everywhere {}, ran paused {}; run-now mismatches {}",
        runs.len(),
        in_window,
        (to - from) / 1000,
        runs.iter().filter(|run| run.tick_ms.is_none()).count(),
        found.due,
        found.held.len(),
        found.shed.len(),
        report.duplicated.len(),
        report.overlaps.len(),
        found.lost.len(),
        found.stray.len(),
        found.paused,
        found.ran_paused.len(),
        found.triggers_off.len(),
    );
    eprintln!(
        "{backend:?} apply latency (issued to applied by all {PROCESSES}): p50 {} ms, p99 {} ms, max {} ms over {} changes; run start lateness p50 {} ms, max {} ms",
        quantile(&latencies, 0.5),
        quantile(&latencies, 0.99),
        latencies.last().copied().unwrap_or(0),
        latencies.len(),
        {
            let mut l = lateness.clone();
            l.sort_unstable();
            quantile(&l, 0.5)
        },
        lateness.iter().copied().max().unwrap_or(0),
    );
    eprintln!(
        "{backend:?} processes' counters: fired {}, executed {}, failed {}, skipped (held) {}, paused {}, manual {}, misfires skipped {}, lock errors {}",
        stat("fired"),
        stat("executed"),
        stat("failed"),
        stat("skipped_held"),
        stat("paused"),
        stat("manual"),
        stat("misfires_skipped"),
        stat("lock_errors"),
    );

    assert!(
        report.duplicated.is_empty(),
        "ticks ran twice: {}",
        some(&report.duplicated)
    );
    assert!(
        report.overlaps.is_empty(),
        "runs of a job overlapped: {}",
        some(&report.overlaps)
    );
    assert!(found.due > 0, "some ticks were due");
    assert!(
        found.lost.is_empty(),
        "due ticks lost: {}{}",
        some(&found.lost),
        around(&found.lost, &changes, &runs)
    );
    assert!(
        found.stray.is_empty(),
        "ticks ran off their schedule: {}",
        some(&found.stray)
    );
    assert!(
        found.ran_paused.is_empty(),
        "ticks ran while paused everywhere: {}",
        some(&found.ran_paused)
    );
    assert!(
        found.triggers_off.is_empty(),
        "runs asked for, (job, accepted requests, runs without a tick): {}",
        some(&found.triggers_off)
    );
    place.cleanup().await;
}

macro_rules! on_every_backend {
    ($($backend:ident => $variant:expr),*) => {$(
        mod $backend {
            /// The short churn, in every run.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn churn_holds() {
                super::churn($variant, super::short()).await;
            }

            /// The soak: 1,000 jobs, 60 changes (`SHEDLOCK_SOAK=1`).
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn churn_holds_soak() {
                if !shedlock_suite::fleet::soak() {
                    return;
                }
                super::churn($variant, super::long()).await;
            }
        }
    )*};
}

on_every_backend!(
    postgres => shedlock::Backend::Postgres,
    mysql => shedlock::Backend::MySql,
    sqlite => shedlock::Backend::Sqlite,
    redis => shedlock::Backend::Redis
);
