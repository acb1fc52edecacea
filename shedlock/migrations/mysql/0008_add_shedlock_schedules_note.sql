-- shedlock: the operator's note on a schedule's pause (`shedlock pause JOB --note TEXT`, the
-- dashboard's pause form, the API's `note`), shown beside the pause; NULL when none. An
-- instance of an earlier version reads and writes the table as before and leaves it alone.
-- MySQL has no ADD COLUMN IF NOT EXISTS: migrate() leaves this statement out where the column
-- is there already.
ALTER TABLE shedlock_schedules ADD COLUMN note TEXT NULL;
