-- shedlock: indexes for the run history's reads by time and by job name. A page filtered by a
-- time window (since/until) reads the window's rows from a (column, started_at) index, then
-- keeps the newest by id; `by_name` (name, started_at) and `by_start` (started_at) of migration
-- 2 serve the lock-name and unfiltered windows. A page filtered by job name reads the rows
-- whose lock name differs from their job (the rows named after the job come by `by_name_id`)
-- from partial indexes that hold only those rows, so a job whose locks carry its name reads
-- none of them twice.
CREATE INDEX IF NOT EXISTS shedlock_runs_by_other_job_id ON shedlock_runs (job, id) WHERE name <> job;
CREATE INDEX IF NOT EXISTS shedlock_runs_by_other_job_start ON shedlock_runs (job, started_at) WHERE name <> job;
CREATE INDEX IF NOT EXISTS shedlock_runs_by_outcome_start ON shedlock_runs (outcome, started_at);
CREATE INDEX IF NOT EXISTS shedlock_runs_by_locked_by_start ON shedlock_runs (locked_by, started_at);
