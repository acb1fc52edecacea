//! The schedules kept in Redis (`ScheduleStore for RedisLockProvider`), against the server of
//! `SHEDLOCK_REDIS_URL`, each test on a key prefix of its own whose keys it deletes afterwards
//! (found with `SCAN`); the feed's end and the ACL rules on private servers. Tests are named
//! `redis::…`, so a run can leave the backend out by name. The cases follow the conformance
//! kit's schedule topic, so they can be swapped for it.
#![allow(missing_docs)]

mod redis;
