-- shedlock: backfills (ScheduleStore::create_backfill): a job's ticks over a past range,
-- (from_tick, to_tick], run once each fleet-wide. One row per backfill, its id an INTEGER
-- PRIMARY KEY with AUTOINCREMENT, so an id is never given twice, not even after the newest
-- row is deleted by hand (a backfill's run places are lock rows named after its id): what was
-- asked (max_running ticks at once, at most rate_per_min a minute or NULL for no bound, rerun
-- ticks that already ran, total ticks in the range, who asked), where it is (state: running,
-- paused, cancelled or done), its counts (done: ticks run, failed among them; skipped: ticks
-- that already ran), and its last change. Times as in the lock table: INTEGER milliseconds
-- since the Unix epoch, UTC; booleans 0 or 1. The ticks themselves are claimed in the lock
-- table.
CREATE TABLE IF NOT EXISTS shedlock_backfills (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job          TEXT    NOT NULL,
    from_tick    INTEGER NOT NULL,
    to_tick      INTEGER NOT NULL,
    max_running  INTEGER NOT NULL,
    rate_per_min INTEGER NULL,
    rerun        INTEGER NOT NULL,
    total        INTEGER NOT NULL,
    requested_by TEXT    NOT NULL,
    state        TEXT    NOT NULL,
    done         INTEGER NOT NULL DEFAULT 0,
    skipped      INTEGER NOT NULL DEFAULT 0,
    failed       INTEGER NOT NULL DEFAULT 0,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    updated_by   TEXT    NOT NULL
) STRICT;
