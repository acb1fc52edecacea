-- shedlock: where fencing tokens come from. Every acquisition takes its token from this sequence,
-- which lives apart from the table's rows: deleting a row or truncating the table by hand never
-- makes a token repeat or go back. It starts above every token already handed out, and above the
-- current time in microseconds (what version 1 seeded new rows with).
CREATE SEQUENCE IF NOT EXISTS shedlock_tokens AS BIGINT;
SELECT setval('shedlock_tokens', GREATEST(
    (SELECT COALESCE(MAX(fencing_token), 0) FROM shedlock),
    (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT,
    (SELECT last_value FROM shedlock_tokens)));
