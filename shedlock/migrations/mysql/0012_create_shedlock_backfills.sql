-- shedlock: backfills (ScheduleStore::create_backfill): a job's ticks over a past range,
-- (from_tick, to_tick], run once each fleet-wide. One row per backfill, its id from
-- AUTO_INCREMENT: what was asked (max_running ticks at once, at most rate_per_min a minute or
-- NULL for no bound, rerun ticks that already ran, total ticks in the range, who asked), where
-- it is (state: running, paused, cancelled or done), its counts (done: ticks run, failed among
-- them; skipped: ticks that already ran), and its last change. Times as in the lock table:
-- DATETIME(6) holding UTC. The ticks themselves are claimed in the lock table.
CREATE TABLE IF NOT EXISTS shedlock_backfills (
    id           BIGINT       NOT NULL AUTO_INCREMENT,
    job          VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    from_tick    DATETIME(6)  NOT NULL,
    to_tick      DATETIME(6)  NOT NULL,
    max_running  INT          NOT NULL,
    rate_per_min BIGINT       NULL,
    rerun        BOOLEAN      NOT NULL,
    total        BIGINT       NOT NULL,
    requested_by VARCHAR(255) NOT NULL,
    state        VARCHAR(16)  NOT NULL,
    done         BIGINT       NOT NULL DEFAULT 0,
    skipped      BIGINT       NOT NULL DEFAULT 0,
    failed       BIGINT       NOT NULL DEFAULT 0,
    created_at   DATETIME(6)  NOT NULL,
    updated_at   DATETIME(6)  NOT NULL,
    updated_by   VARCHAR(255) NOT NULL,
    PRIMARY KEY (id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4;
