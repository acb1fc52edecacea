-- shedlock: a run-time job's payload (JSON text) up to 16 MiB on MySQL/MariaDB. TEXT holds
-- 65,535 bytes, one less than the default cap on a payload (64 KiB,
-- ScheduleLimits::max_payload_bytes), so a payload the cap lets through would not fit; the
-- other databases' TEXT has no such bound. The character set stays the table's (utf8mb4).
ALTER TABLE shedlock_schedules MODIFY payload MEDIUMTEXT NULL;
