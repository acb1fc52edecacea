//! The timeline of a job's runs: an SVG chart, one row per instance (its name without the
//! process id, so a restarted pod keeps its row), each run a bar from its start to its end
//! coloured by outcome; a tick skipped on an instance is a thin mark on its row, a retried
//! attempt a bar with a dashed border, an operator's action a diamond on a row of its own.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use shedlock::history::{RunOutcome, RunRecord};

use crate::pages::{shown, took, when};

/// The most runs a timeline reads.
pub(crate) const MAX_RUNS: u32 = 2_000;

const WIDTH: f64 = 1_000.0;
const LABEL: f64 = 170.0;
const ROW: f64 = 26.0;
const AXIS: f64 = 22.0;
/// Up to this many runs, each is a mark of its own; beyond, marks of one row and one outcome
/// closer than [`MERGE_PX`] are merged (the page stays light: a mark is ~250 bytes).
const DETAIL_LIMIT: usize = 300;
/// How close (in the chart's units, 1,000 wide) merged marks are at first; doubled until the
/// chart has at most [`MAX_MARKS`] marks.
const MERGE_PX: f64 = 3.0;
/// The most marks a chart draws (a mark is ~250 bytes: the page stays under 200 KB).
const MAX_MARKS: usize = 400;
/// The row of operators' actions.
const OPERATORS: &str = "operator actions";

/// The row a run is drawn in: its instance's name without the process id that the default
/// `locked_by` ends with (`pod-a:15705` → `pod-a`), so a pod keeps one row across restarts. A
/// name with no `:<digits>` ending is its own row. The tooltip still names the process.
fn lane(locked_by: &str) -> &str {
    match locked_by.rsplit_once(':') {
        Some((pod, pid))
            if !pod.is_empty() && !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) =>
        {
            pod
        }
        _ => locked_by,
    }
}

/// The chart of `runs` between `from` and `to`.
pub(crate) fn chart(runs: &[RunRecord], from: DateTime<Utc>, to: DateTime<Utc>) -> Markup {
    let span = (to - from).num_milliseconds().max(1) as f64;
    let x = |at: DateTime<Utc>| -> f64 {
        let offset = (at - from).num_milliseconds() as f64;
        LABEL + (offset / span).clamp(0.0, 1.0) * (WIDTH - LABEL - 10.0)
    };
    let rows: BTreeSet<&str> = runs
        .iter()
        .filter(|r| r.outcome != RunOutcome::Operator)
        .map(|r| lane(&r.locked_by))
        .collect();
    let operators = runs.iter().any(|r| r.outcome == RunOutcome::Operator);
    // The instances by name, then the operators' row.
    let mut rows: Vec<&str> = rows.into_iter().collect();
    if operators {
        rows.push(OPERATORS);
    }
    let row_of = |run: &RunRecord| -> usize {
        let key = if run.outcome == RunOutcome::Operator {
            OPERATORS
        } else {
            lane(&run.locked_by)
        };
        rows.iter().position(|r| *r == key).unwrap_or(0)
    };
    let height = AXIS + ROW * rows.len().max(1) as f64 + 6.0;
    let mut merge_px = MERGE_PX;
    let mut marks = marks(runs, &x, to, &row_of, merge_px);
    while marks.len() > MAX_MARKS && merge_px < WIDTH {
        merge_px *= 2.0;
        marks = self::marks(runs, &x, to, &row_of, merge_px);
    }
    let ticks: Vec<(f64, String)> = (0..=5)
        .map(|i| {
            let at = from + chrono::Duration::milliseconds((span * f64::from(i) / 5.0) as i64);
            (x(at), at.format("%H:%M:%S").to_string())
        })
        .collect();
    html! {
        svg #timeline xmlns="http://www.w3.org/2000/svg" viewBox={"0 0 " (WIDTH) " " (height)} width="100%" role="img"
            aria-label={"runs from " (when(from)) " to " (when(to))} data-runs=(runs.len()) {
            @for (i, (tx, label)) in ticks.iter().enumerate() {
                @let anchor = if i == ticks.len() - 1 { "end" } else { "middle" };
                line.grid x1=(tx) x2=(tx) y1=(AXIS - 4.0) y2=(height) {}
                text.axis x=(tx) y="14" text-anchor=(anchor) { (label) }
            }
            @if rows.is_empty() {
                text.empty x=(LABEL) y=(AXIS + 17.0) { "No runs in this window." }
            }
            @for (i, row) in rows.iter().enumerate() {
                @let y = AXIS + ROW * i as f64;
                rect.lane x="0" y=(y) width=(WIDTH) height=(ROW) {}
                text.instance x="6" y=(y + 17.0) { (shown(row)) }
            }
            // Skipped ticks first, so the runs' bars are drawn over them.
            @for mark in marks.iter().filter(|m| !m.run.outcome.ran()).chain(marks.iter().filter(|m| m.run.outcome.ran())) {
                @let run = mark.run;
                @let y = AXIS + ROW * row_of(run) as f64;
                @let (start, end) = (mark.start, mark.end);
                @let tip = if mark.count > 1 {
                    format!("{} runs, {} on {}, {} to {}", mark.count, run.outcome, run.locked_by, when(run.started_at), when(mark.last))
                } else {
                    tooltip(run)
                };
                @match run.outcome {
                    RunOutcome::Operator => {
                        @let (cx, cy) = (start, y + ROW / 2.0);
                        path class="operator outcome-operator" data-id=(run.id) data-count=(mark.count) d={"M" (cx) " " (cy - 7.0) " l7 7 l-7 7 l-7 -7 z"} { title { (shown(&tip)) } }
                    }
                    outcome if !outcome.ran() => {
                        line class={"skip outcome-" (outcome.as_str())} data-id=(run.id) data-count=(mark.count) data-instance=(run.locked_by)
                            x1=(start) x2=(start) y1=(y + 4.0) y2=(y + ROW - 4.0) { title { (shown(&tip)) } }
                    }
                    outcome => {
                        rect class={"run outcome-" (outcome.as_str()) @if run.attempt.unwrap_or(1) > 1 { " retried" }}
                            data-id=(run.id) data-count=(mark.count) data-instance=(run.locked_by) data-outcome=(outcome.as_str())
                            x=(start) y=(y + 5.0) width=((end - start).max(3.0)) height=(ROW - 10.0) rx="2" { title { (shown(&tip)) } }
                    }
                }
            }
        }
        @if runs.len() > DETAIL_LIMIT {
            p.muted #timeline-merged { (runs.len()) " runs in this window: runs of one instance with the same outcome less than "
                (merge_px) " px apart are drawn as one mark (its tooltip counts them); a shorter window shows each."
                @if runs.len() >= MAX_RUNS as usize { " Only the newest " (MAX_RUNS) " runs of the window are read: the chart's left part may lack runs." } }
        }
        p.legend {
            @for (class, label) in [("executed", "executed"), ("failed", "failed / panicked / error"), ("running", "running"), ("cancelled-lost-lock", "cancelled / abandoned"), ("cancelled-by-next", "cancelled by the next tick"), ("skipped-held", "skipped tick"), ("buffered", "tick waited (buffered)"), ("retried", "retried attempt (dashed)"), ("operator", "operator action")] {
                span { i class={"swatch outcome-" (class)} {} (label) }
            }
        }
    }
}

/// One mark of the chart: a run, or runs merged.
struct Mark<'a> {
    /// The first run (oldest) of the mark.
    run: &'a RunRecord,
    count: usize,
    start: f64,
    end: f64,
    /// When the last run of the mark started.
    last: DateTime<Utc>,
}

/// The marks of `runs` (newest first, as read): one per run, or merged per row, outcome and
/// `merge_px` when there are more than [`DETAIL_LIMIT`].
fn marks<'a>(
    runs: &'a [RunRecord],
    x: &dyn Fn(DateTime<Utc>) -> f64,
    to: DateTime<Utc>,
    row_of: &dyn Fn(&RunRecord) -> usize,
    merge_px: f64,
) -> Vec<Mark<'a>> {
    let mut marks: Vec<Mark<'a>> = Vec::new();
    let merge = runs.len() > DETAIL_LIMIT;
    // Oldest first, so a mark grows to the right.
    let mut open: std::collections::HashMap<(usize, &str, bool), usize> =
        std::collections::HashMap::new();
    for run in runs.iter().rev() {
        let start = x(run.started_at);
        let end = x(run.finished_at.unwrap_or(to));
        let key = (
            row_of(run),
            run.outcome.as_str(),
            run.attempt.unwrap_or(1) > 1,
        );
        if merge
            && let Some(&at) = open.get(&key)
            && start - marks[at].end.max(marks[at].start) < merge_px
        {
            let mark = &mut marks[at];
            mark.count += 1;
            mark.end = mark.end.max(end);
            mark.last = run.started_at;
            continue;
        }
        open.insert(key, marks.len());
        marks.push(Mark {
            run,
            count: 1,
            start,
            end,
            last: run.started_at,
        });
    }
    marks
}

fn tooltip(run: &RunRecord) -> String {
    let mut tip = format!(
        "#{} {} on {} at {}",
        run.id,
        run.outcome,
        run.locked_by,
        when(run.started_at)
    );
    if let Some(d) = run.duration() {
        tip.push_str(&format!(", took {}", took(d)));
    }
    if let Some(tick) = run.tick {
        tip.push_str(&format!(", tick {}", when(tick)));
    }
    if let Some(attempt) = run.attempt.filter(|a| *a > 1) {
        tip.push_str(&format!(", attempt {attempt}"));
    }
    if let Some(by) = &run.requested_by {
        tip.push_str(&format!(", by {by}"));
    }
    if let Some(error) = &run.error {
        tip.push_str(&format!(": {error}"));
    }
    tip
}

#[cfg(test)]
mod tests {
    use super::lane;

    #[test]
    fn a_pod_keeps_one_row_across_restarts() {
        assert_eq!(lane("pod-a:15705"), "pod-a");
        assert_eq!(lane("pod-a:17225"), "pod-a");
        assert_eq!(lane("pod-a"), "pod-a");
        assert_eq!(lane("host:with:colons:42"), "host:with:colons");
        assert_eq!(lane("pod-a:web"), "pod-a:web");
        assert_eq!(lane(":42"), ":42");
        assert_eq!(lane("pod-a:"), "pod-a:");
    }
}
