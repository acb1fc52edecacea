//! The control plane's suite (`shedlock_testkit::control_suite`) on every backend: schedules
//! kept in the store and changed while two schedulers run (an override, a run-time job for a
//! handler, a pause, "run now", retries, jitter). The same across processes:
//! `tests/control_fleet.rs`.
#![allow(missing_docs)]

shedlock_suite::backend_tests!([postgres, mysql, sqlite]: control suite);
