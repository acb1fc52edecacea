//! The provider suite against Postgres.
#![allow(missing_docs)]

shedlock_suite::provider_suite!(shedlock_suite::Postgres);
