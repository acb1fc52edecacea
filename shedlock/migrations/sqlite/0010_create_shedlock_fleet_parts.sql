-- shedlock: an instance's registered jobs in parts (ScheduleStore::register): JSON arrays of
-- about 32 KiB each, numbered from 0, beside the instance's row of shedlock_fleet (whose jobs
-- column then holds '[]'). Small parts keep each copy a registration makes small: one document
-- of 100,000 jobs (5 MB) left about 20 MB in the allocator of the process that wrote it.
CREATE TABLE IF NOT EXISTS shedlock_fleet_parts (
    instance TEXT    NOT NULL,
    part     INTEGER NOT NULL,
    jobs     TEXT    NOT NULL,
    PRIMARY KEY (instance, part)
);
