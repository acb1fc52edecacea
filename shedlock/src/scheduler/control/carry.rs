//! The store knows this instance's jobs: at start the scheduler registers its code-defined
//! jobs in the store (one write of them all, [`ScheduleStore::register`]), again soon after a
//! job is added or removed, and sends a heartbeat ([`ScheduleStore::heartbeat`], one
//! statement) every [`heartbeat_every`] of the watch's `forget_after`, until shutdown.
//!
//! [`ScheduleStore::register`]: crate::schedules::ScheduleStore::register
//! [`ScheduleStore::heartbeat`]: crate::schedules::ScheduleStore::heartbeat

use std::sync::Arc;
use std::time::Duration;

use super::super::control::Control;
use super::super::job::MisfirePolicy;
use super::super::state::Inner;
use crate::schedules::fleet::{PartWriter, heartbeat_every};
use crate::schedules::{RegisteredJob, Registration};

/// How long after a job is added or removed the jobs are registered again: the adds of one
/// burst (a service adding its jobs one by one after start) make one write.
const SETTLE: Duration = Duration::from_millis(200);

/// Registers this instance's jobs and keeps them fresh, until shutdown.
pub(in crate::scheduler) async fn carry_loop(inner: Arc<Inner>) {
    let Some(control) = inner.control.as_ref() else {
        return;
    };
    let mut stop = inner.stop_firing.subscribe();
    let instance = inner.provider.locked_by().to_owned();
    let every = heartbeat_every(control.watch.forget_after);
    let mut registered = false;
    loop {
        if registered {
            match control.store.heartbeat(&instance).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::info!(
                        "schedules: this instance's jobs were no longer registered: registering them again"
                    );
                    registered = false;
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, "schedules: could not send this instance's heartbeat");
                }
            }
        } else {
            let registration = registration(&inner, control, &instance);
            let jobs = registration.len();
            match control.store.register(&registration).await {
                Ok(()) => {
                    registered = true;
                    tracing::debug!(jobs, "schedules: this instance's jobs are registered");
                }
                Err(error) => {
                    tracing::warn!(%error, jobs, "schedules: could not register this instance's jobs: trying again at the next heartbeat");
                }
            }
        }
        let changed = tokio::select! {
            () = tokio::time::sleep(every) => false,
            () = control.jobs_changed.notified() => true,
            _ = stop.wait_for(|stop| *stop) => return,
        };
        if changed {
            registered = false;
            tokio::select! {
                () = tokio::time::sleep(SETTLE) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}

/// This instance's code-defined jobs (the run-time jobs it runs for a handler left out, as
/// the store holds those already), each with the code's schedule, rendered one by one into the
/// JSON parts the store keeps (of about
/// [`PART_BYTES`](crate::schedules::fleet::PART_BYTES) each: 100,000 jobs are about 160 parts,
/// and no copy of the jobs is held besides, nor any large block allocated).
fn registration(inner: &Inner, control: &Control, instance: &str) -> Registration {
    let (dynamic, code) = {
        let state = control.state();
        (state.dynamic.clone(), state.code_schedules.clone())
    };
    let mut writer = PartWriter::new();
    {
        let jobs = inner.jobs();
        let mut names: Vec<&str> = jobs
            .by_name
            .iter()
            .map(|job| job.0.job.name())
            .filter(|name| !dynamic.contains(*name))
            .collect();
        names.sort_unstable();
        for name in names {
            let Some(job) = jobs.by_name.get(name) else {
                continue;
            };
            writer.push(&entry(&job.0.job, code.get(name)));
        }
    }
    let (count, parts) = writer.finish();
    Registration::rendered(
        instance,
        inner.fleet.name(),
        count,
        parts,
        control.watch.forget_after,
    )
}

/// One job as it is registered: `code`, its code's schedule when an override replaced it.
fn entry(job: &crate::Job, code: Option<&crate::Schedule>) -> RegisteredJob {
    let schedule = code.unwrap_or(&job.schedule);
    let mut entry = RegisteredJob::new(
        job.name(),
        schedule.expression(),
        schedule.time_zone().name(),
    );
    entry.lock = job.lock.as_ref().map(|lock| lock.name().to_owned());
    entry.misfire = job.misfire_policy.map(|policy| {
        match policy {
            MisfirePolicy::Skip => "skip",
            MisfirePolicy::Latest => "latest",
            MisfirePolicy::All => "all",
        }
        .to_owned()
    });
    if let Some(tuning) = &job.tuning {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        entry.jitter_ms = tuning.jitter.map(ms);
        entry.retry = tuning
            .retry
            .map(|r| (r.max_attempts, ms(r.base), ms(r.cap), r.past_next_tick));
    }
    entry
}
