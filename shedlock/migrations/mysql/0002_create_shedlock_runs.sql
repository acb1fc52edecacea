-- shedlock: the run history for MySQL 8 and MariaDB 10.11, written by the scheduler when history
-- is enabled (SchedulerBuilder::history). One row per run or skipped tick of this instance;
-- pruned by age. `name` is the lock name; `job` the scheduler's job name. Times as in the lock
-- table: DATETIME(6) holding UTC.
CREATE TABLE IF NOT EXISTS shedlock_runs (
    id            BIGINT       NOT NULL AUTO_INCREMENT,
    job           VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    name          VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    tick          DATETIME(6)  NULL,
    started_at    DATETIME(6)  NOT NULL,
    finished_at   DATETIME(6)  NULL,
    outcome       VARCHAR(32)  NOT NULL,
    locked_by     VARCHAR(255) NOT NULL,
    fencing_token BIGINT       NULL,
    error         TEXT         NULL,
    PRIMARY KEY (id),
    INDEX by_name (name, started_at),
    INDEX by_job (job, started_at),
    INDEX by_start (started_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
