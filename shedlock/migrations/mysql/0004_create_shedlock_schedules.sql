-- shedlock: schedules kept in the store (ScheduleStore), and two columns of the run history.
-- One row per schedule: an operator's override of a job defined in code (handler NULL) or a
-- job created at run time for a registered handler (payload: JSON text). Every change takes
-- the next version from the row named ' version' (not a valid job name), locked by the
-- writer's transaction. A delete leaves the row as a tombstone (deleted) with its new version.
-- Times as in the lock table: DATETIME(6) holding UTC; durations whole milliseconds. The
-- history's two columns come last, in one statement, so a migration cut short runs again.
CREATE TABLE IF NOT EXISTS shedlock_schedules (
    name                 VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    handler              VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
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
    updated_at           DATETIME(6)  NOT NULL,
    updated_by           VARCHAR(255) NOT NULL,
    trigger_id           BIGINT       NULL,
    trigger_by           VARCHAR(255) NULL,
    trigger_at           DATETIME(6)  NULL,
    trigger_claimed_by   VARCHAR(255) NULL,
    trigger_until        DATETIME(6)  NULL,
    trigger_started      BOOLEAN      NOT NULL DEFAULT FALSE,
    PRIMARY KEY (name),
    INDEX by_version (version)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
ALTER TABLE shedlock_runs
    ADD COLUMN attempt INTEGER NULL,
    ADD COLUMN requested_by VARCHAR(255) NULL;
