-- shedlock: the lock table for MySQL 8 and MariaDB 10.11.
-- Times are DATETIME(6) holding UTC (UTC_TIMESTAMP(6)): not TIMESTAMP, which ends in 2038 and
-- shifts with the session time zone; not plain DATETIME, which rounds to whole seconds.
-- The name compares byte for byte (utf8mb4_bin), so 'Job' and 'job' are two locks.
CREATE TABLE IF NOT EXISTS shedlock (
    name          VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    locked_until  DATETIME(6)  NOT NULL,
    locked_at     DATETIME(6)  NOT NULL,
    locked_by     VARCHAR(255) NOT NULL,
    fencing_token BIGINT       NOT NULL,
    last_tick     DATETIME(6)  NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
