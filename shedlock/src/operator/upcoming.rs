//! What a job will do next ([`Operator::upcoming`](super::Operator::upcoming)): its next fire
//! times after its time zone, the store's override, its pause and its jitter are applied, and
//! each tick the cron gives that will not run, with the reason.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::cron::Schedule;
use crate::error::{Error, Result};
use crate::scheduler::FLEET_SCHEDULE;
use crate::scheduler::control::spread::jitter_delay;
use crate::schedules::{Calendar, Fate, ScheduleStore, StoredSchedule, TimeRules};

/// Where a job's schedule comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// The code that defines it, as its instances registered it.
    Code,
    /// An operator's override in the store (a new cron or time zone).
    Store,
    /// A job created at run time, kept in the store.
    RunTime,
}

impl Source {
    /// `code`, `store` or `run-time`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Code => "code",
            Self::Store => "store",
            Self::RunTime => "run-time",
        }
    }
}

/// Why a tick the cron gives will not run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeftOut {
    /// The job is paused (by `by`, with the operator's `note`): no tick runs until it is
    /// resumed.
    Paused {
        /// Who paused it.
        by: String,
        /// The operator's note on the pause.
        note: Option<String>,
    },
    /// The whole fleet is paused (by `by`, with `note`).
    FleetPaused {
        /// Who paused the fleet.
        by: String,
        /// The operator's note on the pause.
        note: Option<String>,
    },
    /// A tick of the code's cron that the store's override replaced (`cron` in `time_zone`).
    Overridden {
        /// The cron that runs instead.
        cron: String,
        /// Its time zone.
        time_zone: String,
    },
    /// A calendar the job excludes holds the tick: it is skipped (`skipped-calendar`), or it
    /// runs at `moved_to` instead.
    Calendar {
        /// The calendar and its entry (`kr-holidays: 2026-12-25 "Christmas"`), or why every
        /// tick is excluded (a calendar the store does not hold).
        why: String,
        /// Where the tick's run goes instead, when the job moves excluded ticks.
        moved_to: Option<DateTime<Utc>>,
    },
    /// The tick comes before the job's start instant.
    BeforeStart {
        /// The job's start.
        start: DateTime<Utc>,
    },
    /// The tick comes after the job's end (its end instant, or its last run under
    /// `max_runs`).
    AfterEnd {
        /// The job's last instant.
        end: DateTime<Utc>,
    },
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let note = |note: &Option<String>| match note {
            Some(note) => format!(": {note}"),
            None => String::new(),
        };
        match self {
            Self::Paused { by, note: n } => write!(f, "paused by {by}{}", note(n)),
            Self::FleetPaused { by, note: n } => write!(f, "fleet paused by {by}{}", note(n)),
            Self::Overridden { cron, time_zone } => write!(
                f,
                "the code's cron; the store's override {cron:?} in {time_zone} runs instead"
            ),
            Self::Calendar {
                why,
                moved_to: None,
            } => write!(f, "excluded by {why}"),
            Self::Calendar {
                why,
                moved_to: Some(at),
            } => write!(f, "moved to {} by {why}", at.to_rfc3339()),
            Self::BeforeStart { start } => {
                write!(f, "before the job's start {}", start.to_rfc3339())
            }
            Self::AfterEnd { end } => write!(
                f,
                "after the job's end {} (its end instant, or its last run under max_runs)",
                end.to_rfc3339()
            ),
        }
    }
}

/// One tick of a job's cron from now on, and what becomes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tick {
    /// The tick, as the cron gives it.
    pub tick: DateTime<Utc>,
    /// When its run starts (the tick plus its jitter); `None` when it does not run.
    pub runs_at: Option<DateTime<Utc>>,
    /// Why it does not run; `None` when it runs.
    pub left_out: Option<LeftOut>,
}

/// A job's next ticks ([`Operator::upcoming`](super::Operator::upcoming)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Upcoming {
    /// The job.
    pub name: String,
    /// The cron its ticks follow.
    pub cron: String,
    /// The time zone the cron is read in.
    pub time_zone: String,
    /// Where the cron comes from.
    pub source: Source,
    /// Its jitter: each tick's run starts up to this much later (the same delay on every
    /// instance for a job and tick).
    pub jitter: Option<Duration>,
    /// Its time rules (the store's, else its code's), if any.
    pub rules: Option<TimeRules>,
    /// Its ticks in order, from the first after `now`: those that run (up to the count asked
    /// for) and those between them that will not, each with its reason (as many at most).
    pub ticks: Vec<Tick>,
}

impl Upcoming {
    /// The ticks that run, with when each starts.
    pub fn runs(&self) -> impl Iterator<Item = (DateTime<Utc>, DateTime<Utc>)> + '_ {
        self.ticks
            .iter()
            .filter_map(|tick| tick.runs_at.map(|at| (tick.tick, at)))
    }
}

/// What the store and the fleet say of a job: its stored schedule, the code's definition (cron,
/// time zone, jitter) when an instance registered it, and the fleet's pause.
pub(crate) struct Known {
    pub(crate) stored: Option<StoredSchedule>,
    pub(crate) code: Option<(String, String, Option<Duration>)>,
    pub(crate) fleet: Option<StoredSchedule>,
    /// The time rules it goes by (the store's, else the code's), and the calendars they name
    /// that the store holds.
    pub(crate) rules: Option<TimeRules>,
    pub(crate) calendars: Vec<Arc<Calendar>>,
}

/// Reads what [`plan`] needs of job `name` from `store`.
pub(super) async fn known<S: ScheduleStore + ?Sized>(store: &S, name: &str) -> Result<Known> {
    let stored = store.schedule(name).await?.filter(|s| !s.deleted);
    let mut code_rules = None;
    let code = crate::schedules::fleet::fleet_job(store, name)
        .await?
        .map(|fleet| {
            let jitter = fleet.job.jitter();
            code_rules = fleet.job.rules;
            (fleet.job.cron, fleet.job.time_zone, jitter)
        });
    let fleet = store.schedule(FLEET_SCHEDULE).await?.filter(|s| !s.deleted);
    let rules = match stored.as_ref().and_then(|s| s.rules.as_deref()) {
        Some(text) => Some(TimeRules::from_json(name, text)?),
        None => code_rules,
    };
    let mut calendars = Vec::new();
    for calendar in rules.iter().flat_map(|rules| rules.exclude.iter()) {
        if let Some(found) = super::calendars::read(store, calendar).await? {
            calendars.push(Arc::new(found));
        }
    }
    Ok(Known {
        stored,
        code,
        fleet,
        rules,
        calendars,
    })
}

/// One job as [`known_all`] found it: what the store and the fleet say of it, and whether an
/// instance that runs now carries it (a job created at run time counts as carried: the store
/// does not list the instances that registered its handler).
pub(crate) struct KnownJob {
    pub(crate) name: String,
    pub(crate) known: Known,
    pub(crate) carried: bool,
    /// The lock its runs take, when its registration says (else its name).
    pub(crate) lock: Option<String>,
    /// What its code promises.
    pub(crate) deadlines: Option<crate::schedules::Deadlines>,
}

/// What job `name` promises: its code's (`code`, as the fleet registered it) as the store's
/// override (on its row, `stored`) changes them ([`Deadlines::overridden`]). An override this
/// version cannot read is logged and left out: the code's apply.
///
/// [`Deadlines::overridden`]: crate::schedules::Deadlines::overridden
pub(crate) fn deadlines_of(
    name: &str,
    code: Option<&crate::schedules::FleetJob>,
    stored: Option<&StoredSchedule>,
) -> Option<crate::schedules::Deadlines> {
    use crate::schedules::Deadlines;
    let code = code.and_then(|c| c.job.deadlines);
    let over = stored.and_then(|s| match s.deadlines_override() {
        Ok(over) => over,
        Err(error) => {
            tracing::warn!(job = %name, %error, "a job's stored deadlines cannot be read: the code's apply");
            None
        }
    });
    Deadlines::overridden(code.as_ref(), over.as_ref())
}

/// What the store and the fleet say of every job they know, by name: the fleet's code-defined
/// jobs (those of instances not yet forgotten) and the jobs created at run time. Three reads
/// in all, whatever the number of jobs: the fleet's jobs, and every schedule row (calendars
/// and the fleet's own schedule among them).
pub(crate) async fn known_all<S: ScheduleStore + ?Sized>(store: &S) -> Result<Vec<KnownJob>> {
    let fleet_jobs = store.fleet_jobs().await?;
    let rows = store.schedules_since(0).await?;
    let mut calendars = std::collections::HashMap::new();
    let mut stored = std::collections::BTreeMap::new();
    let mut fleet = None;
    for row in rows.into_iter().filter(|row| !row.deleted) {
        if let Some(calendar) = crate::schedules::calendar::calendar_of(&row.name) {
            if let Some(json) = &row.rules {
                match Calendar::from_json(calendar, json) {
                    Ok(found) => {
                        calendars.insert(calendar.to_owned(), Arc::new(found));
                    }
                    Err(error) => {
                        tracing::warn!(calendar, %error, "a stored calendar cannot be read")
                    }
                }
            }
        } else if row.name == FLEET_SCHEDULE {
            fleet = Some(row);
        } else {
            stored.insert(row.name.clone(), row);
        }
    }
    let mut jobs = Vec::with_capacity(fleet_jobs.len());
    let in_fleet: std::collections::HashSet<&str> =
        fleet_jobs.iter().map(|j| j.job.name.as_str()).collect();
    // The stored rows of no code-defined job of the fleet: jobs created at run time, and the
    // overrides of jobs no instance registers any more.
    let rest: Vec<(String, bool)> = stored
        .iter()
        .filter(|(name, _)| !in_fleet.contains(name.as_str()))
        .map(|(name, s)| (name.clone(), s.handler.is_some()))
        .collect();
    drop(in_fleet);
    let mut known_job = |name: String, code: Option<crate::schedules::FleetJob>, carried: bool| {
        let own = stored.remove(&name);
        let code_rules = code.as_ref().and_then(|c| c.job.rules.clone());
        let lock = code.as_ref().and_then(|c| c.job.lock.clone());
        let deadlines = deadlines_of(&name, code.as_ref(), own.as_ref());
        let rules = match own.as_ref().and_then(|s| s.rules.as_deref()) {
            Some(text) => match TimeRules::from_json(&name, text) {
                Ok(rules) => Some(rules),
                Err(error) => {
                    tracing::warn!(job = %name, %error, "a job's stored time rules cannot be read");
                    code_rules
                }
            },
            None => code_rules,
        };
        let used = rules
            .iter()
            .flat_map(|rules| rules.exclude.iter())
            .filter_map(|c| calendars.get(c).cloned())
            .collect();
        let code = code.map(|c| {
            let jitter = c.job.jitter();
            (c.job.cron, c.job.time_zone, jitter)
        });
        jobs.push(KnownJob {
            name,
            known: Known {
                stored: own,
                code,
                fleet: fleet.clone(),
                rules,
                calendars: used,
            },
            carried,
            lock,
            deadlines,
        });
    };
    for job in fleet_jobs {
        let carried = job.carried();
        known_job(job.job.name.clone(), Some(job), carried);
    }
    for (name, run_time) in rest {
        known_job(name, None, run_time);
    }
    Ok(jobs)
}

/// The most ticks [`plan`] examines in all (those that run and those left out), so a schedule
/// whose ticks all fall out ends.
const MOST_EXAMINED: usize = 10_000;

/// A job's schedule as the store and its code say, with its jitter and why it does not run
/// now (its pause or the fleet's), if so.
pub(crate) struct Resolved {
    pub(crate) cron: String,
    pub(crate) time_zone: String,
    pub(crate) schedule: Schedule,
    pub(crate) source: Source,
    pub(crate) jitter: Option<Duration>,
    pub(crate) paused: Option<LeftOut>,
}

/// Job `name`'s schedule from what the store and the fleet say of it ([`Known`]).
pub(crate) fn resolve(name: &str, known: &Known) -> Result<Resolved> {
    let stored = known.stored.as_ref();
    let run_time = stored.is_some_and(|s| s.handler.is_some());
    let code = known.code.as_ref();
    let cron = stored
        .and_then(|s| s.cron.clone())
        .or_else(|| code.map(|c| c.0.clone()));
    let Some(cron) = cron else {
        return Err(Error::InvalidSchedule {
            name: name.to_owned(),
            reason: "its cron is its code's, and no running instance registered the job: start \
                     an instance that carries it, or give it a cron with `reschedule`"
                .to_owned(),
        });
    };
    let time_zone = stored
        .and_then(|s| s.time_zone.clone())
        .or_else(|| (!run_time).then(|| code.map(|c| c.1.clone())).flatten())
        .unwrap_or_else(|| "UTC".to_owned());
    let source = match (run_time, stored) {
        (true, _) => Source::RunTime,
        (false, Some(s)) if s.cron.is_some() || s.time_zone.is_some() => Source::Store,
        _ => Source::Code,
    };
    let schedule = Schedule::parse(&cron, &time_zone).map_err(|error| Error::InvalidSchedule {
        name: name.to_owned(),
        reason: format!("its stored schedule does not parse: {error}"),
    })?;
    let schedule = match &known.rules {
        Some(rules) => schedule.with_rules(Arc::new(rules.clone()), &known.calendars),
        None => schedule,
    };
    let jitter = stored
        .and_then(|s| s.jitter)
        .or_else(|| code.and_then(|c| c.2))
        .filter(|j| !j.is_zero());
    let paused = match (stored, known.fleet.as_ref()) {
        (Some(s), _) if s.paused => Some(LeftOut::Paused {
            by: s.updated_by.clone(),
            note: s.note.clone(),
        }),
        (_, Some(f)) if f.paused => Some(LeftOut::FleetPaused {
            by: f.updated_by.clone(),
            note: f.note.clone(),
        }),
        _ => None,
    };
    Ok(Resolved {
        cron,
        time_zone,
        schedule,
        source,
        jitter,
        paused,
    })
}

/// Job `name`'s next `count` runs after `now`, and the ticks between that will not run.
pub(super) fn plan(
    name: &str,
    known: &Known,
    count: usize,
    now: DateTime<Utc>,
) -> Result<Upcoming> {
    let Resolved {
        cron,
        time_zone,
        schedule,
        source,
        jitter,
        paused,
    } = resolve(name, known)?;
    let code = known.code.as_ref();
    let mut ticks = Vec::new();
    let (mut runs, mut left_out) = (0, 0);
    let mut cursor = now;
    while runs < count && left_out < count && ticks.len() < MOST_EXAMINED {
        let Some(tick) = schedule.next_after(cursor) else {
            break;
        };
        cursor = tick;
        match &paused {
            Some(why) => {
                left_out += 1;
                ticks.push(Tick {
                    tick,
                    runs_at: None,
                    left_out: Some(why.clone()),
                });
            }
            None => {
                runs += 1;
                let delay = jitter.map_or(TimeDelta::zero(), |j| {
                    TimeDelta::from_std(jitter_delay(name, tick, j)).unwrap_or_default()
                });
                ticks.push(Tick {
                    tick,
                    runs_at: Some(tick + delay),
                    left_out: None,
                });
            }
        }
    }
    // The cron's own ticks the time rules leave out or move, up to the last run shown (or, when
    // the job's runs end, as many as were asked for).
    if known.rules.is_some() {
        let ended = runs < count && paused.is_none();
        let last = ticks.last().map(|t| t.tick);
        let mut shown = 0;
        for tick in schedule.cron_ticks_after(now).take(MOST_EXAMINED) {
            if !ended && last.is_none_or(|last| tick > last) || shown >= count {
                break;
            }
            let why = match schedule.fate(tick) {
                Fate::Runs => continue,
                Fate::Excluded(why) => LeftOut::Calendar {
                    why,
                    moved_to: None,
                },
                Fate::Moved(at, why) => {
                    if at == tick {
                        continue;
                    }
                    LeftOut::Calendar {
                        why,
                        moved_to: Some(at),
                    }
                }
                Fate::BeforeStart(start) => LeftOut::BeforeStart { start },
                Fate::AfterEnd(end) => LeftOut::AfterEnd { end },
            };
            if ticks.iter().any(|t| t.tick == tick) {
                continue;
            }
            shown += 1;
            ticks.push(Tick {
                tick,
                runs_at: None,
                left_out: Some(why),
            });
        }
        ticks.sort_by_key(|t| t.tick);
    }

    // The code's ticks in the same span that the store's override replaced.
    if source == Source::Store
        && let (Some((code_cron, code_zone, _)), Some(last)) = (code, ticks.last().map(|t| t.tick))
        && let Ok(code_schedule) = Schedule::parse(code_cron, code_zone)
    {
        let ours: std::collections::HashSet<_> = ticks.iter().map(|t| t.tick).collect();
        let replaced = code_schedule
            .ticks_between(now, last, count)
            .into_iter()
            .filter(|tick| !ours.contains(tick))
            .map(|tick| Tick {
                tick,
                runs_at: None,
                left_out: Some(LeftOut::Overridden {
                    cron: cron.clone(),
                    time_zone: time_zone.clone(),
                }),
            });
        ticks.extend(replaced.collect::<Vec<_>>());
        ticks.sort_by_key(|t| t.tick);
    }
    Ok(Upcoming {
        name: name.to_owned(),
        cron,
        time_zone,
        source,
        jitter,
        rules: known.rules.clone(),
        ticks,
    })
}
