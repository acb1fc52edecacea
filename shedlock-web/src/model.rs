//! What the pages and the API read from the store, once per request: the schedules, the lock
//! rows, the fleet's seats, and (where the store keeps a history) the runs.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use shedlock::Schedule;
use shedlock::history::{LockState, RunQuery, RunRecord, UnreadableRow};
use shedlock::scheduler::{FLEET_SCHEDULE, share_owner};
use shedlock::schedules::{FleetJob, StoredSchedule};

use crate::json;
use crate::{App, CodeJob};

/// Lock and schedule names starting with this are the library's own (fleet seats, the fleet's
/// pause), never a job.
pub(crate) const RESERVED: &str = "shedlock.";

/// Whether the dashboard offers, and does, the release of lock `name`: a job's lock, never one
/// of the library's own (a fleet seat, a share marker), which the schedulers take and renew
/// themselves. The pages' buttons and the actions (forms and API) ask this one rule.
pub(crate) fn releasable(name: &str) -> bool {
    !name.starts_with(RESERVED)
}
/// The prefix of a fleet seat's lock: `shedlock.fleet/<fleet>/<seat>`.
const SEAT_PREFIX: &str = "shedlock.fleet/";

/// The store's live schedules as last read, and the version they were read at: a request
/// reads the store's version (one statement), and only the changes since when it moved, as a
/// watching scheduler does (ADR 0014's versions: a reader that has seen `v` finds every later
/// change, deletes included, with `version > v`).
#[derive(Default)]
pub(crate) struct ScheduleCache(
    tokio::sync::Mutex<Option<(i64, BTreeMap<String, StoredSchedule>)>>,
);

impl ScheduleCache {
    pub(crate) async fn read(&self, app: &App) -> shedlock::Result<Vec<StoredSchedule>> {
        let store = &app.source.store;
        let mut cache = self.0.lock().await;
        let version = store.schedules_version().await?;
        let fresh = match cache.as_mut() {
            Some((seen, _)) if *seen == version => false,
            Some((seen, map)) if *seen < version => {
                for schedule in store.schedules_since(*seen).await? {
                    *seen = (*seen).max(schedule.version);
                    if schedule.deleted {
                        map.remove(&schedule.name);
                    } else {
                        map.insert(schedule.name.clone(), schedule);
                    }
                }
                *seen = (*seen).max(version);
                false
            }
            // First read, or a store whose version went back (emptied by hand): all of it.
            _ => true,
        };
        if fresh {
            let mut map = BTreeMap::new();
            let mut seen = version;
            for schedule in store.schedules_since(0).await? {
                seen = seen.max(schedule.version);
                if !schedule.deleted {
                    map.insert(schedule.name.clone(), schedule);
                }
            }
            *cache = Some((seen, map));
        }
        Ok(cache
            .as_ref()
            .map(|(_, map)| map.values().cloned().collect())
            .unwrap_or_default())
    }
}

/// The store as one request reads it.
pub(crate) struct Snapshot {
    /// The database's now (the clock that rules the locks).
    pub(crate) now: DateTime<Utc>,
    /// Every live schedule but the fleet's, by name.
    pub(crate) schedules: Vec<StoredSchedule>,
    /// The fleet's pause schedule, when stored.
    pub(crate) fleet: Option<StoredSchedule>,
    /// Every lock row, by name.
    pub(crate) locks: Vec<LockState>,
    /// Lock rows that could not be read, each with what is wrong.
    pub(crate) unreadable: Vec<UnreadableRow>,
    /// The code-defined jobs the instances registered, each with its carriers.
    pub(crate) registered: Vec<FleetJob>,
}

/// An instance holding a fleet seat.
pub(crate) struct Seat {
    pub(crate) fleet: String,
    pub(crate) seat: u32,
    pub(crate) instance: String,
    pub(crate) renewed_at: DateTime<Utc>,
    pub(crate) until: DateTime<Utc>,
}

/// How the jobs due at the next tick are shared among a fleet's instances.
pub(crate) struct NextShares {
    /// The soonest next tick of the jobs not paused.
    pub(crate) tick: DateTime<Utc>,
    /// How many jobs are due then.
    pub(crate) due: usize,
    /// Per seat (by fleet and seat, as [`Snapshot::seats`]), how many of them it owns.
    pub(crate) owned: Vec<usize>,
}

/// One job of the jobs page: what the store has of it.
pub(crate) struct JobRow {
    pub(crate) name: String,
    pub(crate) schedule: Option<StoredSchedule>,
    /// The job's schedule in code, when the dashboard was told it.
    pub(crate) code: Option<CodeJob>,
    pub(crate) next: Option<DateTime<Utc>>,
    pub(crate) lock: Option<LockState>,
    /// The last run, filled for the rows shown.
    pub(crate) last: Option<RunRecord>,
    /// The job as the instances registered it, with the instances that carry it.
    pub(crate) registered: Option<FleetJob>,
    /// Its overlap policy (an operator's override in the store, else as its carriers
    /// registered it), with how many runs hold it now and how many ticks wait (read from the
    /// rows beside its lock); `None` for `skip`.
    pub(crate) overlap: Option<(shedlock::Overlap, usize, usize)>,
}

impl JobRow {
    /// `override`, `run-time`, or `code` (known only by its lock or its runs).
    pub(crate) fn kind(&self) -> &'static str {
        self.schedule.as_ref().map_or("code", json::kind)
    }

    /// Whether its overlap policy is an operator's override (the store's), not the code's.
    pub(crate) fn overlap_overridden(&self) -> bool {
        self.schedule.as_ref().is_some_and(|s| s.overlap.is_some())
    }

    pub(crate) fn paused(&self) -> bool {
        self.schedule.as_ref().is_some_and(|s| s.paused)
    }

    /// Whether a run holds the job now: its lock, or under an overlap policy one of its run
    /// places.
    pub(crate) fn held(&self) -> bool {
        self.lock.as_ref().is_some_and(LockState::is_held)
            || self.overlap.is_some_and(|(_, running, _)| running > 0)
    }

    /// The cron the job fires on, when known: the stored one, else the code's.
    pub(crate) fn cron(&self) -> Option<&str> {
        self.schedule
            .as_ref()
            .and_then(|s| s.cron.as_deref())
            .or(self.code.as_ref().map(|c| c.cron.as_str()))
    }

    /// The time zone the cron is read in, when known.
    pub(crate) fn zone(&self) -> Option<&str> {
        self.schedule
            .as_ref()
            .and_then(json::known_zone)
            .or(self.code.as_ref().map(|c| c.time_zone.as_str()))
    }

    /// The code's cron when a stored one overrides it (`None` when not overridden or not
    /// known).
    pub(crate) fn overridden_code_cron(&self) -> Option<&str> {
        let stored = self.schedule.as_ref()?.cron.as_deref()?;
        let code = self.code.as_ref()?;
        (code.cron != stored).then_some(code.cron.as_str())
    }
}

impl Snapshot {
    /// Every live schedule (from [`ScheduleCache`]: one read of the store's version when
    /// nothing changed) and every lock row.
    pub(crate) async fn read(app: &App) -> shedlock::Result<Self> {
        let schedules = app.schedules.read(app).await?;
        Self::with(app, schedules, None).await
    }

    /// As [`read`](Self::read), every schedule read from the store now: a pending run-now
    /// request's claim changes no version, so only this read shows it as it is.
    pub(crate) async fn read_fresh(app: &App) -> shedlock::Result<Self> {
        let schedules = app.source.store.schedules_since(0).await?;
        Self::with(app, schedules, None).await
    }

    /// What the page of job `name` needs: its schedule and its lock, read now.
    pub(crate) async fn for_job(app: &App, name: &str) -> shedlock::Result<Self> {
        let schedules = app.source.store.schedule(name).await?.into_iter().collect();
        Self::with(app, schedules, Some(name)).await
    }

    /// The lock rows only (the locks page).
    pub(crate) async fn locks_only(app: &App) -> shedlock::Result<Self> {
        Self::with(app, Vec::new(), None).await
    }

    async fn with(
        app: &App,
        schedules: Vec<StoredSchedule>,
        lock: Option<&str>,
    ) -> shedlock::Result<Self> {
        let store = &app.source.store;
        let now = store.now().await?;
        let mut schedules: Vec<StoredSchedule> =
            schedules.into_iter().filter(|s| !s.deleted).collect();
        schedules.sort_by(|a, b| a.name.cmp(&b.name));
        let fleet = schedules
            .iter()
            .position(|s| s.name == FLEET_SCHEDULE)
            .map(|at| schedules.remove(at));
        let registered = store.fleet_jobs().await?;
        let (locks, unreadable) = match lock {
            Some(name) => {
                let mut locks: Vec<LockState> = store.lock_state(name).await?.into_iter().collect();
                // The rows an overlap policy keeps beside the job's lock, if it has one.
                let policy_rows = registered
                    .iter()
                    .find(|job| job.job.name == name)
                    .and_then(|job| {
                        let policy = job
                            .job
                            .overlap
                            .as_deref()?
                            .parse::<shedlock::Overlap>()
                            .ok()?;
                        let lock = job.job.lock.as_deref().unwrap_or(name);
                        let mut rows = policy.run_rows(lock);
                        rows.extend(policy.wait_rows(lock));
                        Some(rows)
                    })
                    .unwrap_or_default();
                if !policy_rows.is_empty() {
                    locks.extend(store.lock_states(&policy_rows).await?);
                }
                (locks, Vec::new())
            }
            None => {
                let rows = store.lock_rows().await?;
                (rows.locks, rows.unreadable)
            }
        };
        Ok(Self {
            now,
            schedules,
            fleet,
            locks,
            unreadable,
            registered,
        })
    }

    /// Whether the whole fleet is paused.
    pub(crate) fn fleet_paused(&self) -> bool {
        self.fleet.as_ref().is_some_and(|f| f.paused)
    }

    /// The held seats of every fleet, by fleet and seat.
    pub(crate) fn seats(&self) -> Vec<Seat> {
        let mut seats: Vec<Seat> = self
            .locks
            .iter()
            .filter(|l| l.is_held())
            .filter_map(|l| {
                let rest = l.name.strip_prefix(SEAT_PREFIX)?;
                let (fleet, seat) = rest.rsplit_once('/')?;
                Some(Seat {
                    fleet: fleet.to_owned(),
                    seat: seat.parse().ok()?,
                    instance: l.locked_by.clone(),
                    renewed_at: l.locked_at,
                    until: l.locked_until,
                })
            })
            .collect();
        seats.sort_by(|a, b| (&a.fleet, a.seat).cmp(&(&b.fleet, b.seat)));
        seats
    }

    /// The next tick of `jobs` and each seat's share of it: per fleet, the seat at rank `r`
    /// among its held seats owns the jobs whose [`share_owner`] is `r`, as every scheduler of
    /// the fleet computes it. `None` when no job has a known next tick.
    pub(crate) fn next_shares(&self, jobs: &[JobRow], seats: &[Seat]) -> Option<NextShares> {
        let tick = jobs
            .iter()
            .filter(|j| !j.paused())
            .filter_map(|j| j.next)
            .min()?;
        let due: Vec<&JobRow> = jobs
            .iter()
            .filter(|j| !j.paused() && j.next == Some(tick))
            .collect();
        let mut owned = vec![0; seats.len()];
        let mut start = 0;
        while start < seats.len() {
            let fleet = &seats[start].fleet;
            let size = seats[start..]
                .iter()
                .take_while(|s| &s.fleet == fleet)
                .count();
            for job in &due {
                owned[start + share_owner(&job.name, tick, size)] += 1;
            }
            start += size;
        }
        Some(NextShares {
            tick,
            due: due.len(),
            owned,
        })
    }

    /// How many job locks each instance holds now (its runs in progress).
    pub(crate) fn running_by_instance(&self) -> BTreeMap<String, usize> {
        let mut running = BTreeMap::new();
        for lock in self.job_locks().filter(|l| l.is_held()) {
            *running.entry(lock.locked_by.clone()).or_insert(0) += 1;
        }
        running
    }

    /// The lock rows of jobs (not the library's own).
    pub(crate) fn job_locks(&self) -> impl Iterator<Item = &LockState> {
        self.locks.iter().filter(|l| !l.name.starts_with(RESERVED))
    }

    /// Every job the store knows: its schedules and its job locks (a job defined in code and
    /// never overridden is known by its lock), with the code's schedules the dashboard was
    /// told. `last` is left empty.
    pub(crate) fn jobs(&self, code: &[CodeJob]) -> Vec<JobRow> {
        let mut rows: BTreeMap<&str, JobRow> = BTreeMap::new();
        let new_row = |name: &str| JobRow {
            name: name.to_owned(),
            schedule: None,
            code: None,
            next: None,
            lock: None,
            last: None,
            registered: None,
            overlap: None,
        };
        for schedule in &self.schedules {
            if schedule
                .name
                .starts_with(shedlock::schedules::calendar::CALENDAR_PREFIX)
            {
                continue; // a calendar, shown on its own page
            }
            rows.entry(&schedule.name)
                .or_insert_with(|| new_row(&schedule.name))
                .schedule = Some(schedule.clone());
        }
        // A registered job's lock goes with the job (its lock may be named otherwise), and so
        // do the rows its overlap policy keeps beside it: (job, whether a run place).
        let mut lock_of: HashMap<&str, &str> = HashMap::new();
        // (job, Some(true): a run place, Some(false): a waiting tick, None: a cancel request)
        let mut overlap_rows: HashMap<String, (&str, Option<bool>)> = HashMap::new();
        for job in &self.registered {
            let row = rows
                .entry(&job.job.name)
                .or_insert_with(|| new_row(&job.job.name));
            row.registered = Some(job.clone());
            row.code = Some(CodeJob::new(
                &job.job.name,
                &job.job.cron,
                &job.job.time_zone,
            ));
            let lock = job.job.lock.as_deref().unwrap_or(&job.job.name);
            lock_of.insert(lock, &job.job.name);
            if let Some(policy) = job
                .job
                .overlap
                .as_deref()
                .and_then(|text| text.parse::<shedlock::Overlap>().ok())
            {
                row.overlap = Some((policy, 0, 0));
                for place in policy.run_rows(lock) {
                    overlap_rows.insert(place, (&job.job.name, Some(true)));
                }
                for waiting in policy.wait_rows(lock) {
                    overlap_rows.insert(waiting, (&job.job.name, Some(false)));
                }
                if let Some(cancel) = policy.cancel_row(lock) {
                    overlap_rows.insert(cancel, (&job.job.name, None));
                }
            }
        }
        // An operator's override (the store's `overlap`) wins over what the code registered,
        // as the scheduler applies it; the rows of both are the job's (runs its code's policy
        // started may still hold theirs).
        for (name, row) in &mut rows {
            let Some(stored) = row
                .schedule
                .as_ref()
                .and_then(|s| s.overlap.as_deref())
                .and_then(|text| text.parse::<shedlock::Overlap>().ok())
            else {
                continue;
            };
            let code = row.overlap.map(|(policy, ..)| policy).unwrap_or_default();
            let policy = code.overridden_by(stored);
            row.overlap = Some((policy, 0, 0)).filter(|_| policy != shedlock::Overlap::Skip);
            let lock = row
                .registered
                .as_ref()
                .and_then(|job| job.job.lock.as_deref())
                .unwrap_or(name);
            for place in policy.run_rows(lock) {
                overlap_rows.entry(place).or_insert((name, Some(true)));
            }
            for waiting in policy.wait_rows(lock) {
                overlap_rows.entry(waiting).or_insert((name, Some(false)));
            }
            if let Some(cancel) = policy.cancel_row(lock) {
                overlap_rows.entry(cancel).or_insert((name, None));
            }
        }
        for lock in self.job_locks() {
            if let Some((job, kind)) = overlap_rows.get(&lock.name) {
                if let Some((_, running, waiting)) =
                    rows.get_mut(*job).and_then(|row| row.overlap.as_mut())
                    && lock.is_held()
                {
                    match kind {
                        Some(true) => *running += 1,
                        Some(false) => *waiting += 1,
                        None => {}
                    }
                }
                continue;
            }
            let name = lock_of
                .get(lock.name.as_str())
                .copied()
                .unwrap_or(&lock.name);
            rows.entry(name).or_insert_with(|| new_row(name)).lock = Some(lock.clone());
        }
        for job in code {
            rows.entry(&job.name)
                .or_insert_with(|| new_row(&job.name))
                .code = Some(job.clone());
        }
        // The next tick after `now` depends only on (cron, zone), and many jobs share one:
        // computed once per pair. `Schedule::next_after` parses its expression again on each
        // call, so calling it once per job cost 10,000 parses for 10,000 jobs (about 250 ms in
        // a release build: `cargo bench --bench dashboard`).
        let mut next: HashMap<(String, String), Option<DateTime<Utc>>> = HashMap::new();
        let mut rows: Vec<JobRow> = rows.into_values().collect();
        for row in &mut rows {
            let (Some(cron), Some(zone)) = (row.cron(), row.zone()) else {
                continue;
            };
            row.next = *next
                .entry((cron.to_owned(), zone.to_owned()))
                .or_insert_with(|| {
                    Schedule::parse(cron, zone)
                        .ok()
                        .and_then(|s| s.next_after(self.now))
                });
        }
        rows
    }
}

/// The last run of each of `rows`, where the store keeps a history.
pub(crate) async fn fill_last_runs(app: &App, rows: &mut [JobRow]) -> shedlock::Result<()> {
    let Some(runs) = &app.source.runs else {
        return Ok(());
    };
    let names: Vec<String> = rows.iter().map(|r| r.name.clone()).collect();
    if names.is_empty() {
        return Ok(());
    }
    let last = runs.latest_runs(&names).await?;
    let mut by_name: HashMap<String, RunRecord> =
        last.into_iter().map(|r| (r.name.clone(), r)).collect();
    for row in rows {
        row.last = by_name.remove(&row.name);
    }
    Ok(())
}

/// The page of history rows `query` selects, newest first, and the cursor of the next page.
pub(crate) async fn history_page(
    app: &App,
    query: &RunQuery,
) -> shedlock::Result<(Vec<RunRecord>, Option<i64>)> {
    let Some(runs) = &app.source.runs else {
        return Ok((Vec::new(), None));
    };
    let mut wider = query.clone();
    wider.limit = query.limit.saturating_add(1);
    let mut rows = runs.runs(&wider).await?;
    let more = rows.len() > query.limit as usize;
    rows.truncate(query.limit as usize);
    let next = if more {
        rows.last().map(|r| r.id)
    } else {
        None
    };
    Ok((rows, next))
}
