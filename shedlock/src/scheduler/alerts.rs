//! Alerts: a broken promise of a job ([`Deadlines`](crate::schedules::Deadlines)), a missed
//! tick, a job no running instance carries, each raised once fleet-wide and recovered once.
//!
//! The ledger's sweep (one instance per sweep, claimed like a tick: see [`ledger`](super::ledger))
//! checks every job it accounted for after writing the missed ticks. An alert is a row of the
//! run history ([`RunOutcome::Alert`]): `job` the job, `name` its kind, `error` its text
//! (`raised: …` or `recovered: …`). Whether an alert is open is read from those rows, so the
//! sweep that follows a killed one raises nothing twice. Each raise and recovery is counted
//! ([`metric_names::ALERTS`](crate::metric_names::ALERTS), and the gauge
//! [`metric_names::OPEN_ALERTS`](crate::metric_names::OPEN_ALERTS) per job), told to the
//! listeners ([`SchedulerListener::on_alert`](crate::scheduler::SchedulerListener::on_alert)) on
//! the sweeping instance, and, with a [`Webhook`](super::webhook::Webhook), delivered: the row
//! stays `alert` until delivered (`alert-sent`) or given up after its retries
//! (`alert-undelivered`, the dead letter), and a sweep delivers every row still `alert`, so a
//! sender killed mid-delivery is made good by the next sweep (delivered at least once; the
//! receiver drops a repeat by its `webhook-id`, the row's id).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::Inner;
use super::ledger::Swept;
use crate::error::Result;
use crate::history::{NewRun, RunOutcome, RunQuery, RunRecord};
use crate::metric_names;
use crate::provider::RunStore;

/// What an alert is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AlertKind {
    /// Due ticks that no instance claimed (the ledger wrote them `missed`).
    Missed,
    /// No running instance carries the job (its handler is gone from the fleet).
    NoCarrier,
    /// No successful run within `expect_success_within`.
    NoSuccess,
    /// A run going longer than `max_runtime`.
    Overrun,
    /// The newest run started later than `late_after` past its tick.
    Late,
    /// The newest runs failed, as many in a row as `failures_in_a_row`.
    Failing,
    /// The job (or the fleet) paused longer than `paused_longer_than`.
    Paused,
}

impl AlertKind {
    /// Every kind.
    pub const ALL: [AlertKind; 7] = [
        AlertKind::Missed,
        AlertKind::NoCarrier,
        AlertKind::NoSuccess,
        AlertKind::Overrun,
        AlertKind::Late,
        AlertKind::Failing,
        AlertKind::Paused,
    ];

    /// Its name: `missed`, `no-carrier`, `no-success`, `overrun`, `late`, `failing`, `paused`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertKind::Missed => "missed",
            AlertKind::NoCarrier => "no-carrier",
            AlertKind::NoSuccess => "no-success",
            AlertKind::Overrun => "overrun",
            AlertKind::Late => "late",
            AlertKind::Failing => "failing",
            AlertKind::Paused => "paused",
        }
    }

    /// The kind named `text`, if one is.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == text)
    }
}

impl fmt::Display for AlertKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One alert raised or recovered, as listeners and the webhook get it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Alert {
    /// Its history row's id: the webhook's `webhook-id` (`alert-<id>`), an idempotency key.
    pub id: i64,
    /// The job.
    pub job: String,
    /// What it is about.
    pub kind: AlertKind,
    /// `true` when raised, `false` when recovered.
    pub raised: bool,
    /// What was found, in words.
    pub detail: String,
    /// When it was written (by the database's clock).
    pub at: DateTime<Utc>,
    /// The instant it is about, when there is one (the newest missed tick, the late run's
    /// tick).
    pub tick: Option<DateTime<Utc>>,
}

impl Alert {
    /// The alert a history row records, if it records one.
    pub fn from_row(row: &RunRecord) -> Option<Alert> {
        if !row.outcome.is_alert() {
            return None;
        }
        let kind = AlertKind::parse(&row.name)?;
        let text = row.error.as_deref().unwrap_or("");
        let (raised, detail) = match text.split_once(": ") {
            Some(("raised", detail)) => (true, detail),
            Some(("recovered", detail)) => (false, detail),
            _ => return None,
        };
        let detail = detail
            .split_once("\n[delivery] ")
            .map_or(detail, |(detail, _)| detail);
        Some(Alert {
            id: row.id,
            job: row.job.clone(),
            kind,
            raised,
            detail: detail.to_owned(),
            at: row.started_at,
            tick: row.tick,
        })
    }

    /// The alert as the webhook's JSON body.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "type": if self.raised { "shedlock.alert.raised" } else { "shedlock.alert.recovered" },
            "timestamp": self.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "data": {
                "id": self.id,
                "job": self.job,
                "kind": self.kind.as_str(),
                "raised": self.raised,
                "detail": self.detail,
                "tick": self.tick.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
            }
        })
        .to_string()
    }
}

/// How many alert rows of each outcome are read to find the open ones.
const ALERT_ROWS: u32 = 10_000;

/// The open alerts the history records: the newest row of each (job, kind) says raised.
pub async fn open_alerts(store: &dyn RunStore) -> Result<Vec<Alert>> {
    let mut rows = Vec::new();
    for outcome in [
        RunOutcome::Alert,
        RunOutcome::AlertSent,
        RunOutcome::AlertUndelivered,
    ] {
        rows.extend(
            store
                .runs(&RunQuery::latest(ALERT_ROWS).outcome(outcome))
                .await?,
        );
    }
    rows.sort_by_key(|row| row.id);
    let mut newest: BTreeMap<(String, AlertKind), Alert> = BTreeMap::new();
    for alert in rows.iter().filter_map(Alert::from_row) {
        newest.insert((alert.job.clone(), alert.kind), alert);
    }
    Ok(newest.into_values().filter(|a| a.raised).collect())
}

/// After a sweep, under the ledger's lock: raises what is broken and not yet open, and
/// recovers what is open and holds again. Failures are logged, never returned.
pub(super) async fn after_sweep(inner: &Inner, store: &dyn RunStore, swept: &Swept) {
    if let Err(error) = check(inner, store, swept).await {
        tracing::warn!(%error, "the alerts could not be checked; the next sweep tries again");
        metrics::counter!(metric_names::HISTORY_ERRORS, "job" => "").increment(1);
    }
}

/// Delivers the alerts still pending (see [`deliver`]): after the ledger's lock is released,
/// since a delivery's retries may outlast its lease.
pub(super) async fn deliver_pending(inner: &Inner, store: &dyn RunStore) {
    deliver(inner, store).await;
}

/// What holds broken now, by (job, kind): its detail and its instant.
type Broken = HashMap<(String, AlertKind), (String, Option<DateTime<Utc>>)>;

async fn check(inner: &Inner, store: &dyn RunStore, swept: &Swept) -> Result<()> {
    let now = inner.provider.now().await?;
    let open = open_alerts(store).await?;
    let locks: Vec<String> = swept.jobs.iter().map(|j| j.lock.clone()).collect();
    let latest: HashMap<String, RunRecord> = store
        .latest_runs(&locks)
        .await?
        .into_iter()
        .map(|row| (row.name.clone(), row))
        .collect();
    let mut broken: Broken = HashMap::new();
    for (job, ticks) in &swept.missed {
        let newest = ticks.last().copied();
        let detail = format!(
            "{} due tick{} claimed by no instance, the newest at {}",
            ticks.len(),
            if ticks.len() == 1 { "" } else { "s" },
            newest.map_or_else(String::new, |t| t.to_rfc3339())
        );
        broken.insert((job.clone(), AlertKind::Missed), (detail, newest));
    }
    for job in &swept.no_carrier {
        broken.insert(
            (job.clone(), AlertKind::NoCarrier),
            ("no running instance carries the job: its handler is gone from the fleet (a deploy that dropped it?)".to_owned(), None),
        );
    }
    // A missed alert stays open until the job runs a tick after its newest missed one.
    for alert in open.iter().filter(|a| a.kind == AlertKind::Missed) {
        let key = (alert.job.clone(), AlertKind::Missed);
        if broken.contains_key(&key) {
            continue;
        }
        let lock = swept
            .jobs
            .iter()
            .find(|j| j.name == alert.job)
            .map_or(alert.job.as_str(), |j| j.lock.as_str());
        let ran_after = latest.get(lock).is_some_and(|row| {
            row.outcome.ran()
                && row
                    .tick
                    .zip(alert.tick)
                    .is_some_and(|(ran, missed)| ran > missed)
        });
        if !ran_after {
            broken.insert(key, (alert.detail.clone(), alert.tick));
        }
    }
    for job in &swept.jobs {
        let Some(deadlines) = &job.deadlines else {
            continue;
        };
        let last = latest.get(&job.lock);
        if let (Some(limit), Some(row)) = (deadlines.late_after, last)
            && let Some(tick) = row.tick.filter(|_| row.outcome.ran())
        {
            let late = row.started_at - tick;
            {
                if late > delta(limit) {
                    let detail = format!(
                        "its run of {tick} started {} after its tick (late_after {})",
                        human(late),
                        humantime::format_duration(limit)
                    );
                    broken.insert((job.name.clone(), AlertKind::Late), (detail, Some(tick)));
                }
            }
        }
        if let (Some(limit), Some(row)) = (deadlines.max_runtime, last)
            && row.outcome == RunOutcome::Running
            && now - row.started_at > delta(limit)
        {
            {
                let detail = format!(
                    "a run started at {} by {} has run {} (max_runtime {})",
                    row.started_at,
                    row.locked_by,
                    human(now - row.started_at),
                    humantime::format_duration(limit)
                );
                broken.insert((job.name.clone(), AlertKind::Overrun), (detail, row.tick));
            }
        }
        if let Some(period) = deadlines.expect_success_within {
            let query = RunQuery::latest(1)
                .name(job.lock.as_str())
                .outcome(RunOutcome::Executed);
            let success = store.runs(&query).await?.into_iter().next();
            let since = success
                .as_ref()
                .map(|row| row.finished_at.unwrap_or(row.started_at));
            // No success within the period, and the job is older than it (a record of it
            // started before the period: a new job is not stale yet).
            let stale = match since {
                Some(at) => now - at > delta(period),
                None => {
                    let older = RunQuery::latest(1)
                        .name(job.lock.as_str())
                        .until(now - delta(period))
                        .runs_only();
                    !store.runs(&older).await?.is_empty()
                }
            };
            if stale {
                let detail = match since {
                    Some(at) => format!(
                        "no successful run for {} (expect_success_within {})",
                        human(now - at),
                        humantime::format_duration(period)
                    ),
                    None => format!(
                        "no successful run on record (expect_success_within {})",
                        humantime::format_duration(period)
                    ),
                };
                broken.insert((job.name.clone(), AlertKind::NoSuccess), (detail, None));
            }
        }
        if let Some(count) = deadlines.failures {
            let query = RunQuery::latest(count.saturating_mul(4).max(8))
                .name(job.lock.as_str())
                .runs_only();
            let runs: Vec<RunRecord> = store
                .runs(&query)
                .await?
                .into_iter()
                .filter(|row| row.outcome.ran() && row.outcome != RunOutcome::Running)
                .take(count as usize)
                .collect();
            let failed = |row: &RunRecord| {
                matches!(
                    row.outcome,
                    RunOutcome::Failed | RunOutcome::Panicked | RunOutcome::CancelledLostLock
                )
            };
            if runs.len() == count as usize && runs.iter().all(failed) {
                let detail = format!(
                    "its last {count} runs failed, the newest: {}",
                    runs[0].error.as_deref().unwrap_or(runs[0].outcome.as_str())
                );
                broken.insert(
                    (job.name.clone(), AlertKind::Failing),
                    (detail, runs[0].tick),
                );
            }
        }
        if let (Some(limit), Some(since)) = (deadlines.paused_longer_than, job.paused_since)
            && now - since > delta(limit)
        {
            {
                let detail = format!(
                    "paused since {since}, {} (paused_longer_than {})",
                    human(now - since),
                    humantime::format_duration(limit)
                );
                broken.insert((job.name.clone(), AlertKind::Paused), (detail, None));
            }
        }
    }
    let checked: HashSet<&str> = swept.jobs.iter().map(|j| j.name.as_str()).collect();
    let open_keys: HashSet<(String, AlertKind)> =
        open.iter().map(|a| (a.job.clone(), a.kind)).collect();
    let mut by_job: HashMap<String, i64> = HashMap::new();
    for ((job, kind), (detail, tick)) in &broken {
        *by_job.entry(job.clone()).or_default() += 1;
        if !open_keys.contains(&(job.clone(), *kind)) {
            write(inner, store, job, *kind, true, detail, *tick).await?;
        }
    }
    for alert in &open {
        let key = (alert.job.clone(), alert.kind);
        // A job the sweep no longer knows keeps its alerts open (a no-carrier one above all).
        if broken.contains_key(&key) || !checked.contains(alert.job.as_str()) {
            if !broken.contains_key(&key) {
                *by_job.entry(alert.job.clone()).or_default() += 1;
            }
            continue;
        }
        let detail = format!("no longer holds: {}", alert.detail);
        write(
            inner, store, &alert.job, alert.kind, false, &detail, alert.tick,
        )
        .await?;
    }
    for job in &swept.jobs {
        let open = by_job.get(&job.name).copied().unwrap_or(0);
        metrics::gauge!(metric_names::OPEN_ALERTS, "job" => job.name.clone()).set(open as f64);
    }
    Ok(())
}

/// Writes an alert's row, counts it and tells the listeners.
async fn write(
    inner: &Inner,
    store: &dyn RunStore,
    job: &str,
    kind: AlertKind,
    raised: bool,
    detail: &str,
    tick: Option<DateTime<Utc>>,
) -> Result<()> {
    let event = if raised { "raised" } else { "recovered" };
    let row = NewRun::new(job, kind.as_str(), tick, RunOutcome::Alert)
        .error(Some(format!("{event}: {detail}")));
    let id = store.record_run(&row).await?;
    metrics::counter!(metric_names::ALERTS, "kind" => kind.as_str(), "event" => event).increment(1);
    if raised {
        tracing::warn!(job, kind = kind.as_str(), detail, "alert raised");
    } else {
        tracing::info!(job, kind = kind.as_str(), "alert recovered");
    }
    let alert = Alert {
        id,
        job: job.to_owned(),
        kind,
        raised,
        detail: detail.to_owned(),
        at: Utc::now(),
        tick,
    };
    for listener in &inner.observer.listeners {
        listener.on_alert(&alert);
    }
    Ok(())
}

/// Delivers every alert row not yet delivered, oldest first.
async fn deliver(inner: &Inner, store: &dyn RunStore) {
    let pending = match store
        .runs(&RunQuery::latest(ALERT_ROWS).outcome(RunOutcome::Alert))
        .await
    {
        Ok(mut rows) => {
            rows.sort_by_key(|row| row.id);
            rows
        }
        Err(error) => {
            tracing::warn!(%error, "could not read the alerts to deliver");
            return;
        }
    };
    for row in pending {
        let Some(alert) = Alert::from_row(&row) else {
            continue;
        };
        let text = row.error.as_deref().unwrap_or_default();
        let (outcome, text) = match send(inner, &alert).await {
            None => (RunOutcome::AlertSent, text.to_owned()),
            Some(delivered) => match delivered {
                Ok(()) => (RunOutcome::AlertSent, text.to_owned()),
                Err(failure) => {
                    metrics::counter!(metric_names::ALERTS_UNDELIVERED).increment(1);
                    tracing::error!(alert = alert.id, job = %alert.job, %failure,
                        "an alert could not be delivered to the webhook: kept as a dead letter (outcome alert-undelivered)");
                    (
                        RunOutcome::AlertUndelivered,
                        format!("{text}\n[delivery] {failure}"),
                    )
                }
            },
        };
        if let Err(error) = store.finish_run(row.id, outcome, Some(&text)).await {
            tracing::warn!(%error, alert = row.id, "could not record an alert's delivery");
        }
    }
}

/// `alert` delivered to the webhook, when there is one (feature `webhook`).
#[cfg(feature = "webhook")]
async fn send(inner: &Inner, alert: &Alert) -> Option<std::result::Result<(), String>> {
    match &inner.observer.webhook {
        Some(webhook) => Some(webhook.deliver(alert).await),
        None => None,
    }
}

/// Without the feature `webhook` there is no webhook: an alert is told to the listeners only.
#[cfg(not(feature = "webhook"))]
async fn send(_: &Inner, _: &Alert) -> Option<std::result::Result<(), String>> {
    None
}

fn delta(duration: Duration) -> TimeDelta {
    TimeDelta::from_std(duration).unwrap_or(TimeDelta::MAX)
}

fn human(delta: TimeDelta) -> String {
    let ms = delta.to_std().unwrap_or_default().as_millis();
    humantime::format_duration(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
        .to_string()
}
