-- shedlock: schedules kept in the store (ScheduleStore), and two columns of the run history.
-- One row per schedule: an operator's override of a job defined in code (handler NULL) or a
-- job created at run time for a registered handler (payload: JSON text). Every change takes
-- the next version from the row named ' version' (not a valid job name); SQLite runs one
-- writer at a time. A delete leaves the row as a tombstone (deleted) with its new version.
-- Times as in the lock table: INTEGER milliseconds since the Unix epoch, UTC; booleans 0 or 1.
CREATE TABLE IF NOT EXISTS shedlock_schedules (
    name                 TEXT    NOT NULL PRIMARY KEY,
    handler              TEXT    NULL,
    payload              TEXT    NULL,
    cron                 TEXT    NULL,
    time_zone            TEXT    NULL,
    paused               INTEGER NOT NULL DEFAULT 0,
    jitter_ms            INTEGER NULL,
    retry_max_attempts   INTEGER NULL,
    retry_base_ms        INTEGER NULL,
    retry_cap_ms         INTEGER NULL,
    retry_past_next_tick INTEGER NULL,
    version              INTEGER NOT NULL,
    deleted              INTEGER NOT NULL DEFAULT 0,
    updated_at           INTEGER NOT NULL,
    updated_by           TEXT    NOT NULL,
    trigger_id           INTEGER NULL,
    trigger_by           TEXT    NULL,
    trigger_at           INTEGER NULL,
    trigger_claimed_by   TEXT    NULL,
    trigger_until        INTEGER NULL,
    trigger_started      INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX IF NOT EXISTS shedlock_schedules_by_version ON shedlock_schedules (version);
ALTER TABLE shedlock_runs ADD COLUMN attempt INTEGER NULL;
ALTER TABLE shedlock_runs ADD COLUMN requested_by TEXT NULL;
