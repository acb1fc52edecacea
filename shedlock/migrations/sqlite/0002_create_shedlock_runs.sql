-- shedlock: the run history for SQLite, written by the scheduler when history is enabled
-- (SchedulerBuilder::history). One row per run or skipped tick of this instance; pruned by age.
-- `name` is the lock name; `job` the scheduler's job name. Times as in the lock table: INTEGER
-- milliseconds since the Unix epoch, UTC.
CREATE TABLE IF NOT EXISTS shedlock_runs (
    id            INTEGER PRIMARY KEY,
    job           TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    tick          INTEGER NULL,
    started_at    INTEGER NOT NULL,
    finished_at   INTEGER NULL,
    outcome       TEXT    NOT NULL,
    locked_by     TEXT    NOT NULL,
    fencing_token INTEGER NULL,
    error         TEXT    NULL
) STRICT;
CREATE INDEX IF NOT EXISTS shedlock_runs_by_name ON shedlock_runs (name, started_at);
CREATE INDEX IF NOT EXISTS shedlock_runs_by_job ON shedlock_runs (job, started_at);
CREATE INDEX IF NOT EXISTS shedlock_runs_by_start ON shedlock_runs (started_at);
