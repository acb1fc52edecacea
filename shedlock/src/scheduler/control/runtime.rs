//! Jobs created at run time: a handler registered once per instance ([`Scheduler::handler`]),
//! and the schedules any instance, the CLI or an API call creates for it in the store, added
//! to this scheduler's jobs where the handler is registered.

use std::future::Future;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::super::Scheduler;
use super::super::control::Control;
use super::super::control::handler::{Handler, HandlerLock, runtime_job, runtime_schedule};
use super::super::job::JobOutput;
use super::super::state::Inner;
use crate::config::LockConfiguration;
use crate::context::LockContext;
use crate::error::{Error, Result};
use crate::schedules::StoredSchedule;

impl Scheduler {
    /// Registers `handler` under `name`: every schedule the store holds for it (created by
    /// any instance, the `shedlock` tool or an API call, each with a payload and a cron of its
    /// own) is a job of this instance, run with its payload read as a `T` (a payload that is
    /// not one fails the run, naming what is wrong) and the run's lock. An instance without
    /// the handler leaves those jobs to the instances that have it.
    ///
    /// Needs the schedules kept in the store
    /// ([`SchedulerBuilder::schedules`](crate::scheduler::SchedulerBuilder::schedules)), else
    /// [`Error::InvalidSetting`]; a name registered twice is [`Error::DuplicateJob`].
    ///
    /// ```no_run
    /// # async fn demo(scheduler: shedlock::Scheduler) -> shedlock::Result<()> {
    /// #[derive(serde::Deserialize)]
    /// struct Repo { repository_id: i64 }
    ///
    /// scheduler.handler("repo_sync", |repo: Repo, lock: shedlock::LockContext| async move {
    ///     println!("syncing {} under token {}", repo.repository_id, lock.fencing_token());
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn handler<T, F, Fut, O>(&self, name: &str, handler: F) -> Result<()>
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(T, LockContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: JobOutput,
    {
        self.handler_with_lock(name, HandlerLock::default(), handler)
    }

    /// [`handler`](Self::handler), each run holding its lock as `lock` says.
    pub fn handler_with_lock<T, F, Fut, O>(
        &self,
        name: &str,
        lock: HandlerLock,
        handler: F,
    ) -> Result<()>
    where
        T: DeserializeOwned + Send + 'static,
        F: Fn(T, LockContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = O> + Send + 'static,
        O: JobOutput,
    {
        let Some(control) = self.inner.control.as_ref() else {
            return Err(Error::InvalidSetting {
                backend: self.inner.provider.backend(),
                setting: "handler",
                reason: "a handler's jobs are schedules kept in the store: the scheduler was built with .without_schedules(), or over a provider that keeps none (etcd): build it without .without_schedules() on one that keeps them".into(),
            });
        };
        LockConfiguration::new(name, lock.lock_at_most_for, lock.lock_at_least_for)?;
        let registered = Arc::new(Handler::new(lock, handler));
        let rows: Vec<StoredSchedule> = {
            let mut state = control.state();
            if state.handlers.contains_key(name) {
                return Err(Error::DuplicateJob {
                    name: name.to_owned(),
                });
            }
            state.handlers.insert(name.to_owned(), registered);
            state
                .rows
                .values()
                .filter(|row| row.handler.as_deref() == Some(name))
                .cloned()
                .collect()
        };
        for row in rows {
            apply_runtime_job(&self.inner, control, &row, name, None);
        }
        Ok(())
    }
}

/// A schedule for a handler, as read from the store: added, changed or removed here when this
/// instance has the handler.
pub(super) fn apply_runtime_job(
    inner: &Arc<Inner>,
    control: &Control,
    row: &StoredSchedule,
    handler: &str,
    old: Option<&StoredSchedule>,
) {
    let name = row.name.as_str();
    let ours = control.state().dynamic.contains(name);
    if row.deleted {
        if ours {
            control.state().dynamic.remove(name);
            inner.remove_job(name);
            tracing::info!(job = name, "schedules: run-time job deleted");
        }
        return;
    }
    let Some(registered) = control.state().handlers.get(handler).cloned() else {
        return; // another instance's handler
    };
    let unchanged = old.is_some_and(|old| {
        old.cron == row.cron
            && old.time_zone == row.time_zone
            && old.payload == row.payload
            && old.handler == row.handler
    });
    if ours && unchanged {
        return;
    }
    // Two statements: the state's guard of the first is dropped before `resolve` takes it.
    let schedule = runtime_schedule(row, &mut control.state().parsed);
    let schedule = schedule.map(|schedule| control.resolve(name, None, schedule));
    let job = match schedule.and_then(|schedule| runtime_job(row, &registered, schedule)) {
        Ok(job) => job,
        Err(error) => {
            tracing::error!(job = name, %error, "schedules: this run-time job cannot run here");
            return;
        }
    };
    if ours {
        inner.replace_job(job);
        tracing::info!(job = name, "schedules: run-time job changed");
    } else if inner.add_job(job).is_ok() {
        control.state().dynamic.insert(name.to_owned());
        tracing::info!(job = name, handler, "schedules: run-time job added");
    } else {
        tracing::error!(
            job = name,
            handler,
            "schedules: a job of this instance already has this name: the run-time job is not run here"
        );
    }
}
