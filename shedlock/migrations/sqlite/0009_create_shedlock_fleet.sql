-- shedlock: the fleet's code-defined jobs (ScheduleStore::register). One row per instance (its
-- locked_by): its fleet, its jobs as one JSON document written whole at its start, when it
-- was last seen (its registration or its last heartbeat; INTEGER milliseconds since the Unix
-- epoch, UTC), and after how many milliseconds without one it is forgotten.
CREATE TABLE IF NOT EXISTS shedlock_fleet (
    instance        TEXT    NOT NULL PRIMARY KEY,
    fleet           TEXT    NOT NULL,
    jobs            TEXT    NOT NULL,
    last_seen       INTEGER NOT NULL,
    forget_after_ms INTEGER NOT NULL
);
