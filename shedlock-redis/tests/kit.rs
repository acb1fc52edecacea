//! The conformance kit (`shedlock-testkit`) on Redis: every case of the provider suite and of
//! the scheduler suite that does not need SQL, and every case of the schedule suite, each on a key prefix of its own on the server of
//! `SHEDLOCK_REDIS_URL`. Tests are named `redis::…`, so a run can leave the backend out by name
//! (`scripts/test` does, with `--skip redis`, when its server does not answer).
#![allow(missing_docs)]

mod redis {
    shedlock_testkit::provider_suite!(in shedlock_redis::testkit::Redis, without sql);
    shedlock_testkit::scheduler_suite!(in shedlock_redis::testkit::Redis, without sql);
    shedlock_testkit::schedule_suite!(in shedlock_redis::testkit::Redis);
}
