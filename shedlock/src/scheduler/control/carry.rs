//! The store knows this instance's jobs: at start the scheduler registers its code-defined
//! jobs in the store (one write of them all, [`ScheduleStore::register`]), again soon after a
//! job is added or removed, and sends a heartbeat ([`ScheduleStore::heartbeat`], one
//! statement) every [`heartbeat_every`] of the watch's `forget_after`, until shutdown.
//!
//! [`ScheduleStore::register`]: crate::schedules::ScheduleStore::register
//! [`ScheduleStore::heartbeat`]: crate::schedules::ScheduleStore::heartbeat

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use super::super::control::Control;
use super::super::job::MisfirePolicy;
use super::super::state::Inner;
use crate::schedules::fleet::{JobSource, heartbeat_every};
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
    // After a failed registration, the next try comes after this (doubling from 1 s up to the
    // heartbeat's period): a store that refused once (a deadlock, a failover) is tried again
    // soon, one that stays down is not pressed.
    let mut retry_after: Option<Duration> = None;
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
            // A change already noted (the jobs added before start, one by one) is in the
            // registration about to be read: taking its notice now keeps it from causing a
            // second registration of the same jobs. A change from here on notes itself again.
            let _ = control.jobs_changed.notified().now_or_never();
            let registration = registration(&inner, control, &instance);
            let jobs = registration.len();
            match control.store.register(&registration).await {
                Ok(()) => {
                    registered = true;
                    retry_after = None;
                    tracing::debug!(jobs, "schedules: this instance's jobs are registered");
                }
                Err(error) => {
                    let wait = retry_after.map_or(Duration::from_secs(1), |d| (d * 2).min(every));
                    retry_after = Some(wait);
                    tracing::warn!(%error, jobs, "schedules: could not register this instance's jobs: trying again in {}", humantime::format_duration(wait));
                }
            }
        }
        let changed = tokio::select! {
            () = tokio::time::sleep(retry_after.unwrap_or(every)) => false,
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
/// the store holds those already), each with the code's schedule. Nothing is collected here:
/// each part (of about [`PART_BYTES`](crate::schedules::fleet::PART_BYTES): 100,000 jobs are
/// about 160 parts) is rendered from the job list when the store writes it, so no copy of the
/// jobs, nor of their names, is held, nor any large block allocated (a list of 100,000 names,
/// 1.6 MB, stayed in the allocator: 2 MB of the process's memory).
fn registration(inner: &Arc<Inner>, control: &Control, instance: &str) -> Registration {
    let (dynamic, code) = {
        let state = control.state();
        (state.dynamic.clone(), state.code_schedules.clone())
    };
    let (positions, len) = {
        let jobs = inner.jobs();
        let positions = jobs.by_name.len();
        let left_out = jobs
            .by_name
            .iter()
            .filter(|job| dynamic.contains(job.0.job.name()))
            .count();
        (positions, positions - left_out)
    };
    let source = CodeJobs {
        inner: Arc::clone(inner),
        dynamic,
        code,
        positions,
        len,
    };
    Registration::from_source(
        instance,
        inner.fleet.name(),
        Arc::new(source),
        control.watch.forget_after,
    )
}

/// The scheduler's jobs as a registration reads them, a part at a time, in the order of its
/// job list. A job added or removed between two parts can shift the order, so one job may be
/// written twice (the fleet's list carries it once: [`merge`](crate::schedules::fleet::merge))
/// or left out; the change notes itself, and the jobs are registered again 200 ms later.
struct CodeJobs {
    inner: Arc<Inner>,
    /// The run-time jobs, left out.
    dynamic: HashSet<String>,
    /// The code's schedule of each job whose schedule an operator's override replaced.
    code: HashMap<String, crate::Schedule>,
    positions: usize,
    len: usize,
}

impl JobSource for CodeJobs {
    fn len(&self) -> usize {
        self.len
    }

    fn positions(&self) -> usize {
        self.positions
    }

    fn read(&self, from: usize, take: &mut dyn FnMut(&RegisteredJob) -> bool) -> usize {
        let jobs = self.inner.jobs();
        for (position, job) in jobs.by_name.iter().enumerate().skip(from) {
            let job = &job.0.job;
            if self.dynamic.contains(job.name()) {
                continue;
            }
            if !take(&entry(job, self.code.get(job.name()))) {
                return position + 1;
            }
        }
        self.positions.max(from)
    }
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
    let overlap = job.overlap_policy();
    entry.overlap = overlap.in_store().then(|| overlap.to_string());
    entry.rules = job.time_rules.as_deref().cloned();
    entry.deadlines = job.deadlines.as_deref().copied().filter(|d| !d.is_empty());
    if let Some(tuning) = &job.tuning {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        entry.jitter_ms = tuning.jitter.map(ms);
        entry.retry = tuning
            .retry
            .map(|r| (r.max_attempts, ms(r.base), ms(r.cap), r.past_next_tick));
    }
    entry
}
