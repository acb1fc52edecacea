//! Issue 50: the ledger of due ticks and its alerts, in one test binary (one link instead of
//! three): `fleet_down.rs` (a fleet killed, down and started again, a deploy that drops a job),
//! `alerts.rs` (each deadline raised once fleet-wide, recovered, dead-lettered),
//! `alert_kills.rs` (an alert delivered through a `kill -9` of its sender), `overrides.rs` (a
//! job's promises set by an operator in the store, applied fleet-wide). On every store that
//! keeps a run history (PostgreSQL, MariaDB, SQLite).
#![allow(missing_docs)]

mod alert_kills;
mod alerts;
mod fleet_down;
mod overrides;
