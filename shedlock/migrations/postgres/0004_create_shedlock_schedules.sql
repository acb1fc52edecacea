-- shedlock: schedules kept in the store (ScheduleStore), and two columns of the run history.
-- One row per schedule: an operator's override of a job defined in code (handler NULL) or a
-- job created at run time for a registered handler (payload: JSON text). Every change takes
-- the next version from the row named ' version' (not a valid job name), locked by the
-- writer's transaction, and NOTIFYs the channel named after this table. A delete leaves the
-- row as a tombstone (deleted) with its new version. Times are TIMESTAMPTZ by
-- clock_timestamp(); durations whole milliseconds.
CREATE TABLE IF NOT EXISTS shedlock_schedules (
    name                 VARCHAR(255) NOT NULL PRIMARY KEY,
    handler              VARCHAR(255) NULL,
    payload              TEXT         NULL,
    cron                 VARCHAR(255) NULL,
    time_zone            VARCHAR(64)  NULL,
    paused               BOOLEAN      NOT NULL DEFAULT FALSE,
    jitter_ms            BIGINT       NULL,
    retry_max_attempts   INTEGER      NULL,
    retry_base_ms        BIGINT       NULL,
    retry_cap_ms         BIGINT       NULL,
    retry_past_next_tick BOOLEAN      NULL,
    version              BIGINT       NOT NULL,
    deleted              BOOLEAN      NOT NULL DEFAULT FALSE,
    updated_at           TIMESTAMPTZ  NOT NULL,
    updated_by           VARCHAR(255) NOT NULL,
    trigger_id           BIGINT       NULL,
    trigger_by           VARCHAR(255) NULL,
    trigger_at           TIMESTAMPTZ  NULL,
    trigger_claimed_by   VARCHAR(255) NULL,
    trigger_until        TIMESTAMPTZ  NULL,
    trigger_started      BOOLEAN      NOT NULL DEFAULT FALSE
);
CREATE INDEX IF NOT EXISTS shedlock_schedules_by_version ON shedlock_schedules (version);
ALTER TABLE shedlock_runs
    ADD COLUMN IF NOT EXISTS attempt INTEGER NULL,
    ADD COLUMN IF NOT EXISTS requested_by VARCHAR(255) NULL;
