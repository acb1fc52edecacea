//! The fleet's code-defined jobs as the store knows them: each instance registers the jobs its
//! code defines ([`Registration`], written whole at start and again when its jobs change) and
//! stays seen with a heartbeat; [`ScheduleStore::fleet_jobs`](super::ScheduleStore::fleet_jobs)
//! lists every job with the instances that carry it ([`FleetJob`], [`Carrier`]).
//!
//! An instance seen less recently than its [`forget_after`](Registration::forget_after) is
//! forgotten: it is left out of the list, and its registration is deleted by the next instance
//! that registers. A job that no remaining instance carries is no longer listed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::RetryPolicy;
use crate::error::{Error, Result};

/// The shortest [`Registration::forget_after`]: 2 seconds.
pub const MIN_FORGET_AFTER: Duration = Duration::from_secs(2);

/// The default [`Registration::forget_after`]: 10 minutes.
pub const DEFAULT_FORGET_AFTER: Duration = Duration::from_secs(600);

/// The longest interval between two heartbeats of an instance: 30 seconds (shorter when its
/// [`forget_after`](Registration::forget_after) is under 2 minutes: a quarter of it).
pub const MAX_HEARTBEAT: Duration = Duration::from_secs(30);

/// About how long a part of a registration is, in bytes of JSON: a part ends with the job that
/// takes it past this (a store keeps each part as a value of its own, so no copy a
/// registration makes is larger; one document of 100,000 jobs, 5 MB, left about 20 MB in the
/// allocator of the process that wrote it).
pub const PART_BYTES: usize = 32 * 1024;

/// Where a registration's jobs come from when it does not hold them: the scheduler's, which
/// renders each job from its own job list as the store writes the parts, so no copy of every
/// job (100,000 jobs are about 5 MB of JSON) is ever held.
pub(crate) trait JobSource: Send + Sync {
    /// How many jobs it registers.
    fn len(&self) -> usize;
    /// How many positions [`read`](Self::read) goes through (the jobs, and any it leaves out).
    fn positions(&self) -> usize;
    /// Passes the jobs from position `from` on to `take`, in the source's order, until `take`
    /// returns `false`; returns the position after the last one passed (or
    /// [`positions`](Self::positions) at the end).
    fn read(&self, from: usize, take: &mut dyn FnMut(&RegisteredJob) -> bool) -> usize;
}

/// A registration's jobs as JSON arrays of about [`PART_BYTES`] each, each rendered when it is
/// asked for ([`Registration::parts`]).
#[derive(Debug)]
pub struct Parts<'a> {
    registration: &'a Registration,
    next: usize,
}

impl Iterator for Parts<'_> {
    type Item = String;

    fn next(&mut self) -> Option<String> {
        let mut part = Vec::with_capacity(PART_BYTES + 1024);
        part.push(b'[');
        let mut take = |job: &RegisteredJob| {
            let before = part.len();
            if before > 1 {
                part.push(b',');
            }
            if serde_json::to_writer(&mut part, job).is_err() {
                // A job that cannot be written is left out, with its separator.
                part.truncate(before);
            }
            part.len() < PART_BYTES
        };
        match &self.registration.source {
            Some(source) => {
                if self.next < source.positions() {
                    self.next = source.read(self.next, &mut take);
                }
            }
            None => {
                while let Some(job) = self.registration.jobs.get(self.next) {
                    self.next += 1;
                    if !take(job) {
                        break;
                    }
                }
            }
        }
        if part.len() == 1 {
            return None;
        }
        part.push(b']');
        // serde_json writes UTF-8.
        String::from_utf8(part).ok()
    }
}

/// One JSON array of the jobs of `parts` (each a JSON array).
pub fn join_parts<S: AsRef<str>>(parts: &[S]) -> String {
    let mut joined =
        String::with_capacity(parts.iter().map(|p| p.as_ref().len()).sum::<usize>() + 2);
    joined.push('[');
    for part in parts {
        let inner = part.as_ref().trim();
        let inner = inner
            .strip_prefix('[')
            .and_then(|rest| rest.strip_suffix(']'))
            .unwrap_or(inner)
            .trim();
        if inner.is_empty() {
            continue;
        }
        if joined.len() > 1 {
            joined.push(',');
        }
        joined.push_str(inner);
    }
    joined.push(']');
    joined
}

/// How often an instance that forgets after `forget_after` sends its heartbeat: a quarter of
/// `forget_after`, at most [`MAX_HEARTBEAT`].
pub fn heartbeat_every(forget_after: Duration) -> Duration {
    (forget_after / 4).min(MAX_HEARTBEAT)
}

/// A job defined in an instance's code, as that instance registers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RegisteredJob {
    /// The job's name: what `pause`, `trigger` and the others take.
    #[serde(rename = "n")]
    pub name: String,
    /// The lock its runs take, when the scheduler knows it (a `#[scheduled]` function with a
    /// `#[scheduler_lock]`, the name filled in with the job's arguments; [`Job::with_lock`]
    /// or [`Job::locked`]).
    ///
    /// [`Job::with_lock`]: crate::Job::with_lock
    /// [`Job::locked`]: crate::Job::locked
    #[serde(rename = "l", default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// The code's cron expression (an operator's override is in the job's schedule).
    #[serde(rename = "c")]
    pub cron: String,
    /// The IANA time zone the cron is read in.
    #[serde(rename = "z")]
    pub time_zone: String,
    /// Its misfire policy (`skip`, `latest`, `all`), or `None`: the scheduler's.
    #[serde(rename = "m", default, skip_serializing_if = "Option::is_none")]
    pub misfire: Option<String>,
    /// Its own jitter, in whole milliseconds.
    #[serde(rename = "j", default, skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u64>,
    /// Its own retry policy: attempts, base and cap in milliseconds, past the next tick.
    #[serde(rename = "r", default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<(u32, u64, u64, bool)>,
    /// Its overlap policy as [`Overlap`](crate::Overlap)'s `Display` writes it
    /// (`buffer_all:5`, `allow_all:3`), or `None`: `skip`, the default.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub overlap: Option<String>,
    /// Its own time rules ([`Job::exclude`](crate::Job::exclude) and the methods beside it):
    /// what an operator's view shows and [`Operator::upcoming`](crate::operator::Operator::upcoming)
    /// walks by when the store holds none of its own.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<super::TimeRules>,
    /// What it promises ([`Deadlines`](super::Deadlines)), checked fleet-wide by the ledger.
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub deadlines: Option<super::Deadlines>,
}

impl RegisteredJob {
    /// A job `name` on `cron` in `time_zone`, with no lock known and no policy of its own.
    pub fn new(
        name: impl Into<String>,
        cron: impl Into<String>,
        time_zone: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            lock: None,
            cron: cron.into(),
            time_zone: time_zone.into(),
            misfire: None,
            jitter_ms: None,
            retry: None,
            overlap: None,
            rules: None,
            deadlines: None,
        }
    }

    /// Its jitter as a duration.
    pub fn jitter(&self) -> Option<Duration> {
        self.jitter_ms.map(Duration::from_millis)
    }

    /// Its retry policy.
    pub fn retry_policy(&self) -> Option<RetryPolicy> {
        self.retry.map(|(attempts, base, cap, past)| {
            RetryPolicy::new(
                attempts,
                Duration::from_millis(base),
                Duration::from_millis(cap),
            )
            .past_next_tick(past)
        })
    }
}

/// What one instance registers: who it is, its fleet, its code-defined jobs, and after how
/// long without a heartbeat it is forgotten.
#[derive(Clone)]
#[non_exhaustive]
pub struct Registration {
    /// The instance: its provider's `locked_by`.
    pub instance: String,
    /// Its fleet ([`SchedulerBuilder::fleet`](crate::scheduler::SchedulerBuilder::fleet)).
    pub fleet: String,
    /// Its code-defined jobs (empty for the scheduler's own registration, which renders each
    /// job from its job list as the store writes it: [`parts`](Self::parts)).
    pub jobs: Vec<RegisteredJob>,
    /// Seen less recently than this, it is forgotten.
    pub forget_after: Duration,
    /// Where the jobs come from when `jobs` does not hold them.
    source: Option<std::sync::Arc<dyn JobSource>>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("instance", &self.instance)
            .field("fleet", &self.fleet)
            .field("jobs", &self.len())
            .field("forget_after", &self.forget_after)
            .finish()
    }
}

impl PartialEq for Registration {
    /// The same instance, fleet and `forget_after`, and the same jobs in the same order.
    fn eq(&self, other: &Self) -> bool {
        self.instance == other.instance
            && self.fleet == other.fleet
            && self.forget_after == other.forget_after
            && self.parts().eq(other.parts())
    }
}

impl Eq for Registration {}

impl Registration {
    /// The registration of `instance` in `fleet`, carrying `jobs`, forgotten after
    /// `forget_after` without a heartbeat.
    pub fn new(
        instance: impl Into<String>,
        fleet: impl Into<String>,
        jobs: Vec<RegisteredJob>,
        forget_after: Duration,
    ) -> Self {
        Self {
            instance: instance.into(),
            fleet: fleet.into(),
            jobs,
            forget_after,
            source: None,
        }
    }

    /// A registration whose jobs `source` renders as they are written.
    pub(crate) fn from_source(
        instance: impl Into<String>,
        fleet: impl Into<String>,
        source: std::sync::Arc<dyn JobSource>,
        forget_after: Duration,
    ) -> Self {
        Self {
            source: Some(source),
            ..Self::new(instance, fleet, Vec::new(), forget_after)
        }
    }

    /// How many jobs it registers (for the scheduler's, as many as it had when the
    /// registration was made).
    pub fn len(&self) -> usize {
        self.source.as_ref().map_or(self.jobs.len(), |s| s.len())
    }

    /// Whether it registers no job.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The jobs as the SQL stores keep them: JSON arrays (compact field names) of about
    /// [`PART_BYTES`] each, in order, each rendered when the iterator reaches it; none for no
    /// job. A store writes each before it asks for the next, so only one is held at a time.
    pub fn parts(&self) -> Parts<'_> {
        Parts {
            registration: self,
            next: 0,
        }
    }

    /// The jobs as one JSON document (compact field names): the [`parts`](Self::parts) joined.
    pub fn jobs_json(&self) -> String {
        join_parts(&self.parts().collect::<Vec<_>>())
    }
}

/// An instance's registration as a store read it: what it registered and when it was last
/// seen, by the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoredRegistration {
    /// The instance.
    pub instance: String,
    /// Its fleet.
    pub fleet: String,
    /// Its jobs as the JSON document [`Registration::jobs_json`] wrote.
    pub jobs_json: String,
    /// When it registered or sent its last heartbeat.
    pub last_seen: DateTime<Utc>,
    /// After how long without a heartbeat it is forgotten.
    pub forget_after: Duration,
}

impl StoredRegistration {
    /// A registration read from a store outside this crate.
    pub fn new(
        instance: impl Into<String>,
        fleet: impl Into<String>,
        jobs_json: impl Into<String>,
        last_seen: DateTime<Utc>,
        forget_after: Duration,
    ) -> Self {
        Self {
            instance: instance.into(),
            fleet: fleet.into(),
            jobs_json: jobs_json.into(),
            last_seen,
            forget_after,
        }
    }

    /// Whether it is forgotten at `now`.
    pub fn forgotten(&self, now: DateTime<Utc>) -> bool {
        now - self.last_seen > chrono::TimeDelta::from_std(self.forget_after).unwrap_or_default()
    }
}

/// An instance that carries a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Carrier {
    /// The instance (its `locked_by`).
    pub instance: String,
    /// Its fleet.
    pub fleet: String,
    /// When it was last seen, by the store's clock.
    pub last_seen: DateTime<Utc>,
    /// Whether it runs now: seen within three of its heartbeats (it registered, or sent a
    /// heartbeat, recently enough). One that stopped stays listed, not running, until it is
    /// forgotten.
    pub running: bool,
}

/// A code-defined job of the fleet, with every instance that carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetJob {
    /// The job as the most recently seen of its carriers defines it.
    pub job: RegisteredJob,
    /// The instances that carry it, most recently seen first.
    pub carriers: Vec<Carrier>,
}

impl FleetJob {
    /// Whether any instance that runs now carries it.
    pub fn carried(&self) -> bool {
        self.carriers.iter().any(|c| c.running)
    }
}

/// Every job of `registrations` not forgotten at `now`, by name, each with its carriers: what
/// a store's [`fleet_jobs`](super::ScheduleStore::fleet_jobs) answers. A registration whose
/// jobs cannot be read is logged and left out.
pub fn merge(registrations: &[StoredRegistration], now: DateTime<Utc>) -> Vec<FleetJob> {
    let mut live: Vec<&StoredRegistration> =
        registrations.iter().filter(|r| !r.forgotten(now)).collect();
    live.sort_by_key(|r| std::cmp::Reverse(r.last_seen));
    let mut jobs: std::collections::BTreeMap<String, FleetJob> = Default::default();
    for registration in live {
        let parsed: Vec<RegisteredJob> = match serde_json::from_str(&registration.jobs_json) {
            Ok(parsed) => parsed,
            Err(error) => {
                tracing::warn!(instance = registration.instance, %error,
                    "the store holds a registration of jobs that cannot be read: left out");
                continue;
            }
        };
        let beats = chrono::TimeDelta::from_std(3 * heartbeat_every(registration.forget_after))
            .unwrap_or_default();
        let carrier = Carrier {
            instance: registration.instance.clone(),
            fleet: registration.fleet.clone(),
            last_seen: registration.last_seen,
            running: now - registration.last_seen <= beats,
        };
        for job in parsed {
            let carriers = &mut jobs
                .entry(job.name.clone())
                .or_insert_with(|| FleetJob {
                    job,
                    carriers: Vec::new(),
                })
                .carriers;
            // A job written twice in one registration (its instance's job list changed while
            // the parts were written) is carried once.
            if !carriers.iter().any(|c| c.instance == carrier.instance) {
                carriers.push(carrier.clone());
            }
        }
    }
    jobs.into_values().collect()
}

/// The job `name` of the fleet, if an instance not forgotten carries it.
pub async fn fleet_job<S: super::ScheduleStore + ?Sized>(
    store: &S,
    name: &str,
) -> Result<Option<FleetJob>> {
    Ok(store
        .fleet_jobs()
        .await?
        .into_iter()
        .find(|job| job.job.name == name))
}

/// Why a change to job `name` (a pause, a resume, a new cron, a "run now") would be applied
/// by no instance, if so: no running instance that watches the store carries it (none
/// registered it, or those that did stopped). `None` when one does, or when `name` is a job
/// created at run time (run by the instances that registered its handler, which the store
/// does not list) and some instance watches the store. For the fleet's own schedule
/// ([`FLEET_SCHEDULE`](crate::scheduler::FLEET_SCHEDULE)): whether any instance watches.
///
/// What `shedlock` and the dashboard say instead of "done" when the answer is `Some`.
pub async fn unapplied<S: super::ScheduleStore + ?Sized>(
    store: &S,
    name: &str,
) -> Result<Option<String>> {
    let jobs = store.fleet_jobs().await?;
    let watching = jobs.iter().any(FleetJob::carried);
    let run_time = name == crate::scheduler::FLEET_SCHEDULE
        || store
            .schedule(name)
            .await?
            .is_some_and(|s| s.handler.is_some() && !s.deleted);
    if run_time {
        return Ok((!watching).then(|| {
            "no running instance watches the store (none registered its jobs within three heartbeats): nothing applies this until one starts with the schedule watch on (the default)".to_owned()
        }));
    }
    Ok(match jobs.iter().find(|job| job.job.name == name) {
        Some(job) if job.carried() => None,
        Some(job) => Some(format!(
            "no running instance carries {name:?}: the instances that carried it ({}) have not been seen for more than three heartbeats; nothing applies this until one that carries it starts",
            job.carriers
                .iter()
                .map(|c| format!(
                    "{}, last seen {}",
                    c.instance,
                    c.last_seen
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ))
                .collect::<Vec<_>>()
                .join("; ")
        )),
        None => Some(format!(
            "no running instance that watches the store carries {name:?} (it is not among the jobs the instances registered): nothing applies this until one that carries it starts with the schedule watch on (the default)"
        )),
    })
}

/// Refuses a `forget_after` shorter than [`MIN_FORGET_AFTER`].
pub(crate) fn check_forget_after(forget_after: Duration) -> Result<Duration> {
    if forget_after < MIN_FORGET_AFTER {
        return Err(Error::InvalidWorkerSetting {
            setting: "ScheduleWatch::forget_jobs_after",
            reason: format!(
                "{} is shorter than 2s: an instance would be forgotten between two of its heartbeats",
                humantime::format_duration(forget_after)
            ),
        });
    }
    Ok(forget_after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn jobs_are_merged_by_name_with_their_carriers_and_forgotten_instances_left_out() {
        let old = Registration::new(
            "pod-a",
            "default",
            vec![
                RegisteredJob::new("beat_0", "* * * * * *", "UTC"),
                RegisteredJob::new("gone", "* * * * * *", "UTC"),
            ],
            Duration::from_secs(60),
        );
        let new = Registration::new(
            "pod-b",
            "default",
            vec![RegisteredJob::new("beat_0", "*/2 * * * * *", "UTC")],
            Duration::from_secs(60),
        );
        let stored = |r: &Registration, seen| {
            StoredRegistration::new(
                &r.instance,
                &r.fleet,
                r.jobs_json(),
                at(seen),
                r.forget_after,
            )
        };
        let all = [stored(&old, 0), stored(&new, 30)];
        assert_eq!(old.parts().count(), 1, "two jobs: one part");
        let jobs = merge(&all, at(50));
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].job.name, "beat_0");
        assert_eq!(
            jobs[0].job.cron, "*/2 * * * * *",
            "the newest carrier's definition"
        );
        let carriers: Vec<(&str, bool)> = jobs[0]
            .carriers
            .iter()
            .map(|c| (c.instance.as_str(), c.running))
            .collect();
        assert_eq!(carriers, [("pod-b", true), ("pod-a", false)]);
        assert!(!jobs[1].carried());
        let twice = Registration::new(
            "pod-c",
            "default",
            vec![
                RegisteredJob::new("beat_0", "*/2 * * * * *", "UTC"),
                RegisteredJob::new("beat_0", "*/2 * * * * *", "UTC"),
            ],
            Duration::from_secs(60),
        );
        let with_twice = merge(&[stored(&twice, 40)], at(50));
        assert_eq!(
            with_twice[0].carriers.len(),
            1,
            "a job written twice by one instance is carried once"
        );
        let later = merge(&all, at(70));
        assert_eq!(later.len(), 1, "pod-a forgotten, and `gone` with it");
        assert!(check_forget_after(Duration::from_secs(1)).is_err());
    }

    /// A source of 3,000 positions, the job at position 7 left out (as the scheduler leaves out
    /// its run-time jobs).
    struct Numbered;

    impl Numbered {
        fn job(index: usize) -> Option<RegisteredJob> {
            (index != 7).then(|| RegisteredJob::new(format!("job_{index}"), "0 0 * * * *", "UTC"))
        }
    }

    impl JobSource for Numbered {
        fn len(&self) -> usize {
            2_999
        }

        fn positions(&self) -> usize {
            3_000
        }

        fn read(&self, from: usize, take: &mut dyn FnMut(&RegisteredJob) -> bool) -> usize {
            for index in from..3_000 {
                if let Some(job) = Numbered::job(index)
                    && !take(&job)
                {
                    return index + 1;
                }
            }
            3_000
        }
    }

    /// The scheduler's registration renders its parts as they are asked for, from its source:
    /// the same parts as a registration that holds the same jobs.
    #[test]
    fn a_registration_from_a_source_renders_the_same_parts() {
        let source = Registration::from_source(
            "pod-a",
            "default",
            std::sync::Arc::new(Numbered),
            Duration::from_secs(60),
        );
        let held = Registration::new(
            "pod-a",
            "default",
            (0..3_000).filter_map(Numbered::job).collect(),
            Duration::from_secs(60),
        );
        assert_eq!(source.len(), 2_999);
        assert!(source.parts().count() > 1, "more than one part");
        assert_eq!(source, held);
        let read: Vec<RegisteredJob> = serde_json::from_str(&source.jobs_json()).unwrap();
        assert_eq!(read.len(), 2_999);
        assert!(read.iter().all(|job| job.name != "job_7"));
        assert_eq!(
            format!("{source:?}").matches("2999").count(),
            1,
            "{source:?}"
        );
    }

    #[test]
    fn many_jobs_are_written_in_parts_that_join_into_the_same_document() {
        let jobs: Vec<RegisteredJob> = (0..5_000)
            .map(|i| {
                let mut job = RegisteredJob::new(format!("repo_sync_{i}"), "0 */15 * * * *", "UTC");
                job.lock = Some(format!("repo_sync_{i}"));
                job
            })
            .collect();
        let registration =
            Registration::new("pod-a", "default", jobs.clone(), Duration::from_secs(60));
        let parts: Vec<String> = registration.parts().collect();
        assert!(parts.len() > 5, "{} parts", parts.len());
        for part in parts.iter() {
            let read: Vec<RegisteredJob> = serde_json::from_str(part).unwrap();
            assert!(!read.is_empty());
            // A part ends with the job that takes it past PART_BYTES: never more than one job
            // (about 80 bytes here) past it.
            assert!(part.len() < PART_BYTES + 200, "{} bytes", part.len());
        }
        let whole: Vec<RegisteredJob> = serde_json::from_str(&registration.jobs_json()).unwrap();
        assert_eq!(whole, jobs, "the parts joined are every job, in order");
        assert_eq!(join_parts::<&str>(&[]), "[]");
        assert_eq!(join_parts(&["[]", "[1]", "[2,3]"]), "[1,2,3]");
        let none = Registration::new("pod-a", "default", Vec::new(), Duration::from_secs(60));
        assert!(none.parts().next().is_none() && none.jobs_json() == "[]");
    }
}
