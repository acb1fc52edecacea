-- shedlock: what a row deleted from the lock table knew, its fencing token and its last claimed
-- tick, so that the row the next acquire recreates never hands out a lower token and never runs
-- a claimed tick again. SQLite has no TRUNCATE: every DELETE, with or without WHERE, fires the
-- trigger for each row.
CREATE TABLE IF NOT EXISTS shedlock_retired (
    name          TEXT    NOT NULL PRIMARY KEY,
    fencing_token INTEGER NOT NULL,
    last_tick     INTEGER NULL
) STRICT;
CREATE TRIGGER IF NOT EXISTS shedlock_retire AFTER DELETE ON shedlock
BEGIN
    INSERT INTO shedlock_retired (name, fencing_token, last_tick)
    VALUES (OLD.name, OLD.fencing_token, OLD.last_tick)
    ON CONFLICT (name) DO UPDATE SET
        fencing_token = MAX(fencing_token, excluded.fencing_token),
        last_tick = MAX(COALESCE(last_tick, excluded.last_tick), COALESCE(excluded.last_tick, last_tick));
END;
