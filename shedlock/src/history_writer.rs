//! The scheduler's writes to its run history, grouped: the rows asked for while the store
//! was writing the last group go in the next one, with one [`RunStore::record_runs`] (or
//! [`RunStore::finish_runs`]): one statement per 1,000 rows on the SQL stores, where one row a
//! statement made the history the fleet's limit at 10,000 jobs a second (each row a
//! transaction of its own, waiting for its commit's log flush).
//!
//! Nothing waits on a timer: a row asked for while nothing is being written goes at once, alone.
//! Each caller awaits its own row's answer, so what a row's writer knows (its id, its failure)
//! and what a crash can lose are as they were with one statement a row: a run's `running` row
//! is in the store, or known to have failed, before the run's end is written.

use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::history::{NewRun, RunEnd};
use crate::provider::RunStore;

/// The most rows one group holds.
const GROUP: usize = 1_000;

type Insert = (NewRun, oneshot::Sender<Result<i64>>);
type Finish = (RunEnd, oneshot::Sender<Result<()>>);

/// Groups the writes of one scheduler's history (see the module docs). Its two writer tasks
/// (one for new rows, one for ends) start with the first write, on that write's runtime, and
/// stop when the writer is dropped.
pub(crate) struct HistoryWriter {
    store: Arc<dyn RunStore>,
    queues: OnceLock<Queues>,
}

struct Queues {
    inserts: mpsc::UnboundedSender<Insert>,
    finishes: mpsc::UnboundedSender<Finish>,
}

impl HistoryWriter {
    pub(crate) fn new(store: Arc<dyn RunStore>) -> Self {
        Self {
            store,
            queues: OnceLock::new(),
        }
    }

    fn queues(&self) -> &Queues {
        self.queues.get_or_init(|| {
            let (inserts, rx) = mpsc::unbounded_channel();
            tokio::spawn(write_inserts(Arc::clone(&self.store), rx));
            let (finishes, rx) = mpsc::unbounded_channel();
            tokio::spawn(write_finishes(Arc::clone(&self.store), rx));
            Queues { inserts, finishes }
        })
    }

    /// Adds `run` to the history with the next group; answers its id.
    pub(crate) async fn record(&self, run: NewRun) -> Result<i64> {
        let (tx, rx) = oneshot::channel();
        match self.queues().inserts.send((run, tx)) {
            Ok(()) => rx.await.unwrap_or_else(|_| Err(self.stopped())),
            // The writer task is gone (its runtime ended): write it here.
            Err(mpsc::error::SendError((run, _))) => self.store.record_run(&run).await,
        }
    }

    /// Finishes row `end.id` with the next group.
    pub(crate) async fn finish(&self, end: RunEnd) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        match self.queues().finishes.send((end, tx)) {
            Ok(()) => rx.await.unwrap_or_else(|_| Err(self.stopped())),
            Err(mpsc::error::SendError((end, _))) => {
                let error = end.error.as_deref();
                self.store.finish_run(end.id, end.outcome, error).await
            }
        }
    }

    /// The error of a write whose group was dropped before it was answered.
    fn stopped(&self) -> Error {
        Error::Database {
            backend: self.store.backend(),
            operation: "write the run history".into(),
            location: match self.store.backend() {
                crate::Backend::Redis => format!("key prefix {}", self.store.table_name()),
                _ => format!("table `{}_runs`", self.store.table_name()),
            },
            source: "the history's writer stopped before it answered (its runtime shut down); \
                     the row may or may not have been written"
                .into(),
        }
    }
}

/// Writes the new rows, a group at a time, until every sender is gone.
async fn write_inserts(store: Arc<dyn RunStore>, mut queue: mpsc::UnboundedReceiver<Insert>) {
    let mut group = Vec::with_capacity(GROUP);
    while queue.recv_many(&mut group, GROUP).await > 0 {
        let (runs, answers): (Vec<NewRun>, Vec<_>) = group.drain(..).unzip();
        let results = match runs.as_slice() {
            [run] => vec![store.record_run(run).await],
            runs => store.record_runs(runs).await,
        };
        // A store that answers fewer rows than asked leaves the rest to `stopped`.
        for (answer, result) in answers.into_iter().zip(results) {
            let _ = answer.send(result);
        }
    }
}

/// Writes the rows' ends, a group at a time, until every sender is gone.
async fn write_finishes(store: Arc<dyn RunStore>, mut queue: mpsc::UnboundedReceiver<Finish>) {
    let mut group = Vec::with_capacity(GROUP);
    while queue.recv_many(&mut group, GROUP).await > 0 {
        let (ends, answers): (Vec<RunEnd>, Vec<_>) = group.drain(..).unzip();
        let results = match ends.as_slice() {
            [end] => vec![
                store
                    .finish_run(end.id, end.outcome, end.error.as_deref())
                    .await,
            ],
            ends => store.finish_runs(ends).await,
        };
        for (answer, result) in answers.into_iter().zip(results) {
            let _ = answer.send(result);
        }
    }
}
