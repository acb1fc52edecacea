//! Attribute macros for [`shedlock`](https://docs.rs/shedlock).
//!
//! This crate is an empty shell for now: `#[scheduler_lock]` and `#[scheduled]` arrive with the
//! macro issue. It exists so the workspace layout, the facade's `macros` feature and the exact
//! version pin are in place from the start.
