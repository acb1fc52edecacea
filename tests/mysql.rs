//! The provider suite against MySql.
#![allow(missing_docs)]

shedlock_suite::provider_suite!(shedlock_suite::MySql);
