-- shedlock: an instance's registered jobs in parts (ScheduleStore::register): JSON arrays of
-- about 32 KiB each (MEDIUMTEXT: a part ends after the job that passes 32 KiB), numbered from
-- 0, beside the instance's row of shedlock_fleet (whose jobs column then holds '[]'). Small
-- parts keep each copy a registration makes small: one document of 100,000 jobs (5 MB) left
-- about 20 MB in the allocator of the process that wrote it.
CREATE TABLE IF NOT EXISTS shedlock_fleet_parts (
    instance VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    part     INT          NOT NULL,
    jobs     MEDIUMTEXT   NOT NULL,
    PRIMARY KEY (instance, part)
);
