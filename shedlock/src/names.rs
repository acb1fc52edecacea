//! The rules a name made now is held to beyond its length and control characters, written
//! once for both places that make one: the runtime ([`LockConfiguration::new`], the schedule
//! checks) and the macros at compile time (`#[scheduler_lock(name = …)]`); and the rule of a
//! calendar's name (`shedlock::schedules::calendar::check_name`, `#[scheduled(exclude = …)]`).
//! This file is `shedlock/src/names.rs`; `shedlock-macros/src/names.rs` is a link to it, so the
//! two cannot disagree. It names no type of either crate.
//!
//! [`LockConfiguration::new`]: crate::LockConfiguration::new
// Each crate uses what it needs of these.
#![allow(dead_code)]

/// Whether `c` is a character that changes how a name looks without being seen: the
/// bidirectional controls (U+061C, U+200E, U+200F, U+202A to U+202E, U+2066 to U+2069), which
/// reorder what follows (`report\u{202e}txt.exe` shows as `reportexe.txt`), and the zero-width
/// characters (U+200B to U+200D, U+2060, U+FEFF), which make two different names look the same.
pub(crate) fn hidden(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// Why a name made now is refused by these rules, or `None`: it holds a hidden character
/// ([`hidden`]), or it is `.` or `..`, which a browser collapses in a link (`/jobs/..` is
/// `/`), so the dashboard could neither open nor act on it.
pub(crate) fn refusal(name: &str) -> Option<&'static str> {
    if name.chars().any(hidden) {
        Some(
            "contains a bidirectional control or zero-width character (shown escaped), which \
             changes how the name looks without being seen",
        )
    } else if name == "." || name == ".." {
        Some("is `.` or `..`, a path segment a browser collapses in a link")
    } else {
        None
    }
}

/// The longest calendar name, in bytes (`shedlock::schedules::calendar::MAX_CALENDAR_NAME_BYTES`).
pub(crate) const CALENDAR_NAME_MAX_BYTES: usize = 100;

/// Why `name` is not a calendar's name, or `None`: a calendar's name is 1 to
/// [`CALENDAR_NAME_MAX_BYTES`] bytes of ASCII letters, digits, `-`, `_` and `.`, since it is
/// written in a macro's `exclude = "…"`, on a command line and in a URL.
pub(crate) fn calendar_name_refusal(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= CALENDAR_NAME_MAX_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    (!ok).then(|| {
        format!(
            "a calendar's name is 1 to {CALENDAR_NAME_MAX_BYTES} letters, digits, '-', '_' or \
             '.', such as \"kr-holidays\""
        )
    })
}
