//! `--schedules`: the harness's part in the control plane. Schedules created in the store for
//! the handler `harness` run the same work as the harness's own jobs (the lock, and so the
//! results row, named after the schedule), and each schedule version this instance applies is
//! written to `<table>_applied` (instance, version, this machine's clock in ms), for the
//! convergence benchmark and the fleet tests.

use std::time::Duration;

use shedlock::{LockContext, Scheduler};

use super::{Bind, RunSpec};

/// Registers the handler `harness`: a schedule's run does the harness's work under its lock.
pub(crate) fn serve(
    scheduler: &Scheduler,
    work: &RunSpec,
) -> Result<(), Box<dyn std::error::Error>> {
    let spec = work.clone();
    scheduler.handler(
        "harness",
        move |_payload: serde_json::Value, lock: LockContext| {
            let spec = spec.clone();
            async move { spec.body(lock.name().to_owned()).await }
        },
    )?;
    Ok(())
}

/// Writes a row to `<table>_applied` each time the applied schedule version moves (looked at
/// every millisecond: the benchmark measures how soon a change is applied).
pub(crate) fn record_applied(scheduler: Scheduler, work: &RunSpec) -> tokio::task::JoinHandle<()> {
    let spec = work.clone();
    tokio::spawn(async move {
        let mut last = 0;
        loop {
            let applied = scheduler.schedules_applied().unwrap_or(0);
            if applied > last {
                last = applied;
                let at = chrono::Utc::now().timestamp_millis();
                let sql = format!(
                    "INSERT INTO {}_applied (instance, version, at_ms) VALUES (?, ?, ?)",
                    spec.table
                );
                let binds = vec![
                    Bind::S(spec.instance.clone()),
                    Bind::I(applied),
                    Bind::I(at),
                ];
                if let Err(error) = spec.results.exec(sql, binds).await {
                    eprintln!(
                        "shedlock-harness: could not record applied version {applied}: {error}"
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
}
