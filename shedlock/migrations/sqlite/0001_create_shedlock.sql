-- shedlock: the lock table for SQLite.
-- Times are INTEGER milliseconds since the Unix epoch, UTC: integers compare correctly, where
-- text dates in mixed formats do not. STRICT refuses anything else in those columns.
CREATE TABLE IF NOT EXISTS shedlock (
    name          TEXT    NOT NULL PRIMARY KEY,
    locked_until  INTEGER NOT NULL,
    locked_at     INTEGER NOT NULL,
    locked_by     TEXT    NOT NULL,
    fencing_token INTEGER NOT NULL,
    last_tick     INTEGER NULL
) STRICT;
