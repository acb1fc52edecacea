-- shedlock: an operator's overlap policy for a job (`shedlock reschedule JOB --overlap
-- buffer_one`, the dashboard's schedule form, the API's `overlap`), as the library writes it
-- (`buffer_all:5`, `allow_all:3:buffer_one`); NULL keeps the code's. An instance of an
-- earlier version reads and writes the table as before and leaves it alone.
-- SQLite has no ADD COLUMN IF NOT EXISTS: migrate() leaves this statement out where the
-- column is there already.
ALTER TABLE shedlock_schedules ADD COLUMN overlap TEXT NULL;
