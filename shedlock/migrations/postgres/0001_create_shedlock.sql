-- shedlock: the lock table for PostgreSQL.
-- Times are TIMESTAMPTZ and are compared against clock_timestamp() (the server's current time,
-- not the transaction's start time that now() would give).
CREATE TABLE IF NOT EXISTS shedlock (
    name          VARCHAR(64)  NOT NULL PRIMARY KEY,
    locked_until  TIMESTAMPTZ  NOT NULL,
    locked_at     TIMESTAMPTZ  NOT NULL,
    locked_by     VARCHAR(255) NOT NULL,
    fencing_token BIGINT       NOT NULL,
    last_tick     TIMESTAMPTZ  NULL
);
