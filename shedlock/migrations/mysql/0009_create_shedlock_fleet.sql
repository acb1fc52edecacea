-- shedlock: the fleet's code-defined jobs (ScheduleStore::register). One row per instance (its
-- locked_by): its fleet, its jobs as one JSON document written whole at its start (LONGTEXT:
-- 100,000 jobs take a few MiB), when it was last seen (its registration or its last
-- heartbeat; DATETIME(6) holding UTC), and after how many milliseconds without one it is
-- forgotten.
CREATE TABLE IF NOT EXISTS shedlock_fleet (
    instance        VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    fleet           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    jobs            LONGTEXT     NOT NULL,
    last_seen       DATETIME(6)  NOT NULL,
    forget_after_ms BIGINT       NOT NULL,
    PRIMARY KEY (instance)
);
