//! `run` (`--role all` and `--role scheduler`): the scheduler with the handler `repo_sync`
//! registered, until Ctrl-C or `--run-for`.

use std::sync::Arc;
use std::time::Duration;

use shedlock::Scheduler;
use shedlock::handoff::TickQueue;
use shedlock::scheduler::HandlerLock;

use crate::schedules::{self, Mode};
use crate::show::{self, say, shown, tell};
use crate::sync::Ctx;
use crate::{AnyError, Locks};

/// How often a running scheduler closes runs left `running` by a stopped instance.
const ABANDONED_SWEEP: Duration = Duration::from_secs(10);

/// The scheduler: the handler `repo_sync` registered (`schedules.rs`), so every repository's
/// schedule in the store is a job here, and closing runs left `running` by a stopped instance
/// every [`ABANDONED_SWEEP`]; its run history goes to `shedlock_runs` (read it with `shedlock
/// history`). With `--role scheduler`, `hand_off` is the queue each run is handed to.
pub(crate) async fn run_scheduler(
    ctx: Arc<Ctx>,
    provider: Arc<dyn Locks>,
    scheduler: Scheduler,
    hand_off: Option<Arc<dyn TickQueue>>,
    run_for: Option<Duration>,
) -> Result<(), AnyError> {
    let handing_off = hand_off.is_some();
    let (mode, lock) = match hand_off {
        // The run only enqueues: a short lock, the worker's sync takes it again.
        Some(queue) => (
            Mode::HandOff(queue),
            HandlerLock {
                lock_at_most_for: Duration::from_secs(60),
                lock_at_least_for: Duration::ZERO,
            },
        ),
        None => (
            Mode::Sync,
            HandlerLock {
                lock_at_most_for: ctx.lock_at_most_for,
                lock_at_least_for: ctx.lock_at_least_for,
            },
        ),
    };
    schedules::register(
        &scheduler,
        Arc::clone(&ctx),
        Arc::clone(&provider),
        mode,
        lock,
    )?;
    scheduler.start();
    // The store answers and holds the tables, or the error says why (once, not every tick).
    scheduler.ready().await?;
    say!(
        "repo_sync scheduler running as {}{} (Ctrl-C to stop)",
        shown(provider.locked_by()),
        if handing_off {
            ", handing the ticks to the queue for `run --role worker` processes"
        } else {
            ""
        }
    );
    let stop = async {
        match run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            () = tokio::time::sleep(ABANDONED_SWEEP) => {}
        }
        match ctx.db.close_abandoned().await {
            Ok(0) => {}
            Ok(n) => {
                say!("closed {n} run(s) left `running` by a stopped instance as abandoned")
            }
            Err(e) => tell!("repo_sync: cannot close abandoned runs: {e}"),
        }
    }
    let report = scheduler.shutdown().await;
    ctx.pending.wait().await; // the records of syncs the shutdown cancelled
    say!(
        "{}",
        show::stopped_line(handing_off, report.finished, report.cancelled)
    );
    Ok(())
}
