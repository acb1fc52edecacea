-- shedlock: indexes that read the run history newest first (ORDER BY id DESC) by lock name, job
-- name, instance (locked_by) and outcome, so a page of the history, or each job's last run,
-- reads its rows from one index however long the history is.
CREATE INDEX IF NOT EXISTS shedlock_runs_by_name_id ON shedlock_runs (name, id);
CREATE INDEX IF NOT EXISTS shedlock_runs_by_job_id ON shedlock_runs (job, id);
CREATE INDEX IF NOT EXISTS shedlock_runs_by_locked_by_id ON shedlock_runs (locked_by, id);
CREATE INDEX IF NOT EXISTS shedlock_runs_by_outcome_id ON shedlock_runs (outcome, id);
