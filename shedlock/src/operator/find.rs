//! Finding a job by its name, with the closest known name as a hint when there is none.

use crate::cron::rules::edit_distance;
use crate::error::{Error, Result};
use crate::history::RunQuery;
use crate::provider::RunStore;
use crate::scheduler::FLEET_SCHEDULE;

use super::{Job, Steerable};

/// How many of the newest history rows are read for job names when a name is not found.
const HISTORY_NAMES: u32 = 500;

/// The job `name`: its live schedule if the store holds one, else known as a job an instance
/// registered (its code's jobs), by a lock or by a run of that name;
/// [`Error::NoSuchSchedule`] with the closest known name as its hint otherwise.
pub(super) async fn find<S: Steerable + ?Sized>(
    store: &S,
    runs: Option<&dyn RunStore>,
    name: &str,
) -> Result<Job> {
    if let Some(schedule) = store.schedule(name).await?
        && !schedule.deleted
        && !name.starts_with(crate::schedules::calendar::CALENDAR_PREFIX)
    {
        return Ok(Job::new(name, Some(schedule)));
    }
    if crate::schedules::fleet::fleet_job(store, name)
        .await?
        .is_some()
    {
        return Ok(Job::new(name, None));
    }
    if store.lock_state(name).await?.is_some() {
        return Ok(Job::new(name, None));
    }
    if let Some(runs) = runs
        && !runs.runs(&RunQuery::latest(1).name(name)).await?.is_empty()
    {
        return Ok(Job::new(name, None));
    }
    Err(no_such_job(store, runs, name, "").await)
}

/// [`Error::NoSuchSchedule`] for `name`, its hint the closest known name (of the schedules,
/// the registered jobs, the locks and the jobs of the newest history rows), then `more`.
pub(super) async fn no_such_job<S: Steerable + ?Sized>(
    store: &S,
    runs: Option<&dyn RunStore>,
    name: &str,
    more: &str,
) -> Error {
    let mut known: Vec<String> = Vec::new();
    match store.schedules_since(0).await {
        Ok(schedules) => known.extend(
            schedules
                .into_iter()
                .filter(|s| {
                    !s.deleted
                        && s.name != FLEET_SCHEDULE
                        && !s
                            .name
                            .starts_with(crate::schedules::calendar::CALENDAR_PREFIX)
                })
                .map(|s| s.name),
        ),
        Err(error) => return error,
    }
    match store.fleet_jobs().await {
        Ok(jobs) => known.extend(jobs.into_iter().map(|j| j.job.name)),
        Err(error) => return error,
    }
    match store.lock_rows().await {
        Ok(rows) => known.extend(rows.locks.into_iter().map(|l| l.name)),
        Err(error) => return error,
    }
    if let Some(runs) = runs
        && let Ok(rows) = runs.runs(&RunQuery::latest(HISTORY_NAMES)).await
    {
        known.extend(rows.into_iter().map(|r| r.job));
    }
    let suggestion = closest(name, &known)
        .map(|c| format!("; did you mean {c:?}?"))
        .unwrap_or_default();
    Error::NoSuchSchedule {
        name: name.to_owned(),
        hint: format!("{suggestion}{more}"),
    }
}

/// The name of `known` closest to `name` (case-insensitive edit distance, at most a third of
/// its length, between 1 and 4), if one is that close; `name` itself is never suggested.
pub fn closest<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    let wanted = name.to_lowercase();
    let limit = (wanted.chars().count() / 3).clamp(1, 4);
    known
        .iter()
        .filter(|k| k.as_str() != name)
        .map(|k| (edit_distance(&wanted, &k.to_lowercase()), k.as_str()))
        .filter(|&(distance, _)| distance <= limit)
        .min_by_key(|&(distance, k)| (distance, k))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closest_name_is_suggested_only_when_close() {
        let known = vec![
            "nightly-report".to_owned(),
            "hourly-sync".to_owned(),
            "a".to_owned(),
        ];
        assert_eq!(closest("nightly-reprot", &known), Some("nightly-report"));
        assert_eq!(closest("Hourly-Sync", &known), Some("hourly-sync"));
        assert_eq!(closest("weekly-cleanup", &known), None);
        assert_eq!(closest("b", &known), Some("a"));
        assert_eq!(closest("a", &known), None);
    }
}
