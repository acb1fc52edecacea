-- shedlock: indexes that read the run history newest first (ORDER BY id DESC) by lock name, job
-- name, instance (locked_by) and outcome, so a page of the history, or each job's last run,
-- reads its rows from one index however long the history is. `by_name` (name, started_at) goes:
-- `by_name_id` serves every lookup by name, and with both MariaDB picked `by_name` for a job's
-- last run and sorted all its rows. One statement: InnoDB changes them all at once, or none.
ALTER TABLE shedlock_runs
    DROP INDEX by_name,
    ADD INDEX by_name_id (name, id),
    ADD INDEX by_job_id (job, id),
    ADD INDEX by_locked_by_id (locked_by, id),
    ADD INDEX by_outcome_id (outcome, id);
