-- shedlock: an operator's override of a job's promises (`shedlock reschedule JOB
-- --expect-success-within 2h --late-after off`, the job page's deadlines form, the API's
-- `deadlines`), as the library writes it (JSON, durations in milliseconds, a zero turning the
-- code's promise off); NULL keeps the code's. An instance of an earlier version reads and
-- writes the table as before and leaves it alone.
-- MySQL has no ADD COLUMN IF NOT EXISTS: migrate() leaves this statement out where the column
-- is there already.
ALTER TABLE shedlock_schedules ADD COLUMN deadlines TEXT NULL;
