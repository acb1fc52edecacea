//! The operator's calendars ([`Operator::calendars`](super::Operator::calendars) and the
//! methods after it): create one, add and remove entries (one at a time or a whole `.ics`
//! file's), show, list and delete, each recorded as the other actions are. An edit reads the
//! calendar, changes it and writes it back under a lock of its own
//! (`shedlock.calendar-edit.<name>`), so two operators adding at once both land.

use std::time::Duration;

use super::{Actor, Operator, Outcome, Steerable};
use crate::config::LockConfiguration;
use crate::error::{Error, Result};
use crate::schedules::calendar::{CALENDAR_PREFIX, calendar_of, check_name, row_name};
use crate::schedules::{
    Calendar, CalendarEntry, NewSchedule, ScheduleChange, ScheduleStore, TimeRules,
};

/// How long an edit's lock is held at most.
const EDIT_LOCK: Duration = Duration::from_secs(30);

/// How long an edit waits for another's lock before it gives up.
const EDIT_WAIT: Duration = Duration::from_secs(10);

/// Calendar `name` as the store holds it, if it does.
pub(crate) async fn read<S: ScheduleStore + ?Sized>(
    store: &S,
    name: &str,
) -> Result<Option<Calendar>> {
    let Some(row) = store.schedule(&row_name(name)).await? else {
        return Ok(None);
    };
    match (&row.rules, row.deleted) {
        (Some(json), false) => Calendar::from_json(name, json).map(Some),
        _ => Ok(None),
    }
}

/// [`Error::NoSuchCalendar`] for `name`.
fn no_such(name: &str, known: &[Calendar]) -> Error {
    let closest = known
        .iter()
        .map(|c| (crate::cron::rules::edit_distance(&c.name, name), &c.name))
        .filter(|(d, _)| *d <= 3)
        .min();
    let hint = match closest {
        Some((_, close)) => format!("; did you mean {close:?}?"),
        None => {
            "; `shedlock calendar list` shows the calendars, `shedlock calendar create` makes one"
                .to_owned()
        }
    };
    Error::NoSuchCalendar {
        name: name.to_owned(),
        hint,
    }
}

impl<S: Steerable + ?Sized> Operator<'_, S> {
    /// Every calendar the store holds, by name.
    pub async fn calendars(&self) -> Result<Vec<Calendar>> {
        let mut found = Vec::new();
        for row in self.store.schedules_since(0).await? {
            if row.deleted {
                continue;
            }
            if let (Some(name), Some(json)) = (calendar_of(&row.name), &row.rules) {
                match Calendar::from_json(name, json) {
                    Ok(calendar) => found.push(calendar),
                    Err(error) => {
                        tracing::warn!(target: "shedlock::operator", calendar = name, %error, "a calendar in the store cannot be read");
                    }
                }
            }
        }
        found.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(found)
    }

    /// Calendar `name`; [`Error::NoSuchCalendar`] (with the closest name) when there is none.
    pub async fn calendar(&self, name: &str) -> Result<Calendar> {
        check_name(name)?;
        match read(self.store, name).await? {
            Some(calendar) => Ok(calendar),
            None => Err(no_such(name, &self.calendars().await?)),
        }
    }

    /// Creates calendar `name` in `time_zone` with `entries`; one of that name already there
    /// is [`Error::ScheduleExists`].
    pub async fn create_calendar(
        &self,
        name: &str,
        time_zone: &str,
        entries: Vec<CalendarEntry>,
        actor: &Actor,
    ) -> Result<Outcome<Calendar>> {
        let mut calendar = Calendar::new(name, time_zone)?;
        calendar.add(entries)?;
        let new =
            NewSchedule::overriding(row_name(name), ScheduleChange::new().calendar(&calendar));
        self.store.create_schedule(&new, &actor.who).await?;
        let what = format!(
            "created calendar {name} in {time_zone} with {} entries",
            calendar.entries.len()
        );
        let mut outcome = Outcome::new(calendar);
        self.record(&mut outcome, &row_name(name), what, None, actor, None)
            .await;
        Ok(outcome)
    }

    /// Reads calendar `name`, changes it with `change` and writes it back, under the
    /// calendar's edit lock; answers the calendar as written and what `change` answered.
    async fn edit<T>(
        &self,
        name: &str,
        change: impl FnOnce(&mut Calendar) -> Result<T>,
    ) -> Result<(Calendar, T)> {
        check_name(name)?;
        let lock = LockConfiguration::new(
            format!("shedlock.calendar-edit.{name}"),
            EDIT_LOCK,
            Duration::ZERO,
        )?;
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(20);
        let guard = loop {
            if let Some(guard) = self.store.lock(&lock).await? {
                break guard;
            }
            if started.elapsed() > EDIT_WAIT {
                return Err(Error::InvalidCalendar {
                    name: name.to_owned(),
                    reason: format!(
                        "another edit of it held its lock ({}) for {}: try again",
                        lock.name(),
                        humantime::format_duration(EDIT_WAIT)
                    ),
                });
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        };
        let result = async {
            let mut calendar = self.calendar(name).await?;
            let answer = change(&mut calendar)?;
            self.store
                .update_schedule(
                    &row_name(name),
                    &ScheduleChange::new().calendar(&calendar),
                    "shedlock-operator",
                )
                .await?;
            Ok((calendar, answer))
        }
        .await;
        if let Err(error) = guard.unlock().await {
            tracing::warn!(target: "shedlock::operator", calendar = name, %error, "could not release a calendar's edit lock (it runs out)");
        }
        result
    }

    /// Adds `entries` to calendar `name` (an entry with the same span takes the new label);
    /// answers the calendar and how many were new.
    pub async fn add_to_calendar(
        &self,
        name: &str,
        entries: Vec<CalendarEntry>,
        actor: &Actor,
    ) -> Result<Outcome<(Calendar, usize)>> {
        let shown: Vec<String> = entries.iter().take(5).map(ToString::to_string).collect();
        let more = entries.len().saturating_sub(shown.len());
        let (calendar, added) = self.edit(name, |c| c.add(entries)).await?;
        let mut what = format!(
            "added {added} entries to calendar {name}: {}",
            shown.join(", ")
        );
        if more > 0 {
            what.push_str(&format!(" and {more} more"));
        }
        let mut outcome = Outcome::new((calendar, added));
        self.record(&mut outcome, &row_name(name), what, None, actor, None)
            .await;
        Ok(outcome)
    }

    /// Removes the entries with `entries`' spans from calendar `name`; answers the calendar
    /// and how many were there.
    pub async fn remove_from_calendar(
        &self,
        name: &str,
        entries: Vec<CalendarEntry>,
        actor: &Actor,
    ) -> Result<Outcome<(Calendar, usize)>> {
        let shown: Vec<String> = entries.iter().map(ToString::to_string).collect();
        let (calendar, removed) = self.edit(name, |c| Ok(c.remove(&entries))).await?;
        let what = format!(
            "removed {removed} entries from calendar {name}: {}",
            shown.join(", ")
        );
        let mut outcome = Outcome::new((calendar, removed));
        self.record(&mut outcome, &row_name(name), what, None, actor, None)
            .await;
        Ok(outcome)
    }

    /// The jobs whose rules (the store's, or their code's as an instance registered them)
    /// name calendar `name`.
    pub async fn calendar_users(&self, name: &str) -> Result<Vec<String>> {
        let mut users = Vec::new();
        let mut stored_rules = std::collections::HashSet::new();
        for row in self.store.schedules_since(0).await? {
            if row.deleted || row.name.starts_with(CALENDAR_PREFIX) {
                continue;
            }
            if let Some(json) = &row.rules {
                stored_rules.insert(row.name.clone());
                if TimeRules::from_json(&row.name, json)
                    .is_ok_and(|r| r.exclude.iter().any(|c| c == name))
                {
                    users.push(row.name);
                }
            }
        }
        for job in self.store.fleet_jobs().await? {
            let job = job.job;
            if !stored_rules.contains(&job.name)
                && job
                    .rules
                    .as_ref()
                    .is_some_and(|r| r.exclude.iter().any(|c| c == name))
            {
                users.push(job.name);
            }
        }
        users.sort();
        users.dedup();
        Ok(users)
    }

    /// Deletes calendar `name`. Refused while a job names it (its ticks would all be
    /// excluded): the error names the jobs.
    pub async fn delete_calendar(&self, name: &str, actor: &Actor) -> Result<Outcome<bool>> {
        self.calendar(name).await?;
        let users = self.calendar_users(name).await?;
        if !users.is_empty() {
            return Err(Error::InvalidCalendar {
                name: name.to_owned(),
                reason: format!(
                    "jobs name it ({}): change their rules first (`shedlock reschedule JOB --exclude …` or their code), or every tick of theirs would be excluded",
                    users.join(", ")
                ),
            });
        }
        let deleted = self
            .store
            .delete_schedule(&row_name(name), &actor.who)
            .await?;
        let mut outcome = Outcome::new(deleted);
        if deleted {
            self.record(
                &mut outcome,
                &row_name(name),
                format!("deleted calendar {name}"),
                None,
                actor,
                None,
            )
            .await;
        }
        Ok(outcome)
    }

    /// Checks that every calendar `rules` names is in the store, before rules naming it are
    /// written.
    pub(super) async fn check_calendars(&self, job: &str, rules: &TimeRules) -> Result<()> {
        rules.check(job)?;
        for name in &rules.exclude {
            if read(self.store, name).await?.is_none() {
                return Err(Error::InvalidCalendar {
                    name: job.to_owned(),
                    reason: format!(
                        "exclude: calendar {name:?} is not in the store: create it first (shedlock calendar create {name} --zone ZONE)"
                    ),
                });
            }
        }
        Ok(())
    }
}
