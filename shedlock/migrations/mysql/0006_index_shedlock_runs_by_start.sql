-- shedlock: indexes for the run history's reads by time and by job name. A page filtered by a
-- time window (since/until) reads the window's rows from a (column, started_at) index, then
-- keeps the newest by id; `by_start` (started_at) of migration 2 serves the unfiltered window,
-- and `by_name_start` comes back for the lock name's (migration 5 dropped `by_name`: the
-- statements now name the index each branch reads). A page filtered by job name reads the
-- rows whose lock name differs from their job (the rows named after the job come by
-- `by_name_id`) through `other_job`, a virtual column that holds the job only for those rows,
-- so a job whose locks carry its name reads none of them twice. One statement: InnoDB changes
-- them all at once, or none.
ALTER TABLE shedlock_runs
    ADD COLUMN other_job VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
        AS (IF(name <> job, job, NULL)) VIRTUAL,
    ADD INDEX by_other_job_id (other_job, id),
    ADD INDEX by_other_job_start (other_job, started_at),
    ADD INDEX by_name_start (name, started_at),
    ADD INDEX by_outcome_start (outcome, started_at),
    ADD INDEX by_locked_by_start (locked_by, started_at);
