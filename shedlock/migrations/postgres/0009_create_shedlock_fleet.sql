-- shedlock: the fleet's code-defined jobs (ScheduleStore::register). One row per instance (its
-- locked_by): its fleet, its jobs as one JSON document written whole at its start, when it
-- was last seen (its registration or its last heartbeat, by clock_timestamp()), and after how
-- many milliseconds without one it is forgotten.
CREATE TABLE IF NOT EXISTS shedlock_fleet (
    instance        VARCHAR(255) NOT NULL PRIMARY KEY,
    fleet           VARCHAR(255) NOT NULL,
    jobs            TEXT         NOT NULL,
    last_seen       TIMESTAMPTZ  NOT NULL,
    forget_after_ms BIGINT       NOT NULL
);
