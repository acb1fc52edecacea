-- shedlock: a job's time rules beyond its cron line, as the library writes them (JSON: the
-- calendars that exclude its ticks, what becomes of an excluded tick, a start, an end, most
-- runs), set by an operator (`shedlock reschedule JOB --exclude kr-holidays`); NULL keeps the
-- code's. On a calendar's row (`shedlock.calendar.<name>`) the calendar itself. An instance of
-- an earlier version reads and writes the table as before and leaves it alone.
-- This dialect has no ADD COLUMN IF NOT EXISTS: migrate() leaves this statement out where the
-- column is there already.
ALTER TABLE shedlock_schedules ADD COLUMN rules MEDIUMTEXT NULL;
