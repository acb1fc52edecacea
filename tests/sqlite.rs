//! The provider suite against Sqlite.
#![allow(missing_docs)]

shedlock_suite::provider_suite!(shedlock_suite::Sqlite);
