//! What the commands share in their output: stdout, aligned tables, times, durations, JSON.

use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;
use shedlock::history::LockState;
use shedlock::settings::is_hidden_char;

use crate::failure::one_line;

pub(crate) use shedlock_web::json::time as json_time;

/// The longest error text shown in `history`'s table (`--json` has it whole, and so has the
/// table for an abandoned run's reason).
const ERROR_WIDTH: usize = 60;

/// Writes to stdout; a closed pipe (`shedlock list | head -1`) is not an error. Control
/// characters other than line ends are escaped ([`escape`]): a name, holder or error text
/// read from the store never drives the operator's terminal.
pub(crate) fn print(text: &str) {
    let text = escape(text, true);
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// A JSON value as `--json` prints it.
pub(crate) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}

/// `text` with every control character (the escape that starts a terminal sequence, a carriage
/// return, a backspace, …) written as Rust writes it in a string literal (`\u{1b}`, `\r`), and
/// line ends too unless `keep_newlines`; and every character that changes how a name looks
/// without being seen ([`is_hidden_char`]: a bidirectional control, a zero-width character)
/// written as `\u{202e}`, so `report\u{202e}txt.exe` is not shown as `reportexe.txt`. What the
/// store holds was written by someone else: a lock name, a holder or an error text may carry
/// anything.
pub(crate) fn escape(text: &str, keep_newlines: bool) -> String {
    let escaped = |c: char| c.is_control() || is_hidden_char(c);
    if !text.chars().any(escaped) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c == '\n' && keep_newlines {
            out.push(c);
        } else if c.is_control() {
            out.extend(c.escape_debug());
        } else if is_hidden_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Columns padded to their widest cell, two spaces apart, no trailing spaces; each cell on one
/// line, its control characters escaped ([`escape`]).
pub(crate) fn render_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| escape(cell, false)).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header = header.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A time in the table: RFC 3339, UTC, whole seconds.
pub(crate) fn time(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A lock's time remaining, or `-` when it is free.
pub(crate) fn remaining(lock: &LockState) -> String {
    if lock.is_held() {
        human(lock.remaining(), false)
    } else {
        "-".to_owned()
    }
}

/// A duration the way humantime writes it (`4m 12s`, `350ms`): whole seconds from a minute
/// up, or from a second up unless `precise`; milliseconds below.
pub(crate) fn human(duration: Duration, precise: bool) -> String {
    const SECOND: Duration = Duration::from_secs(1);
    let shown = if duration >= 60 * SECOND || (!precise && duration >= SECOND) {
        Duration::from_secs(duration.as_secs())
    } else if duration >= Duration::from_millis(1) {
        Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    } else {
        Duration::from_micros(u64::try_from(duration.as_micros()).unwrap_or(u64::MAX))
    };
    humantime::format_duration(shown).to_string()
}

/// An error text on one line, cut to [`ERROR_WIDTH`] characters.
pub(crate) fn truncate(error: &str) -> String {
    let error = one_line(error);
    if error.chars().count() <= ERROR_WIDTH {
        return error;
    }
    let mut cut: String = error.chars().take(ERROR_WIDTH - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_humantime() {
        assert_eq!(human(Duration::from_millis(252_400), false), "4m 12s");
        assert_eq!(human(Duration::from_millis(1_500), false), "1s");
        assert_eq!(human(Duration::from_millis(1_500), true), "1s 500ms");
        assert_eq!(human(Duration::from_micros(350_700), true), "350ms");
    }

    #[test]
    fn tables_are_aligned_without_trailing_spaces() {
        let out = render_table(
            &["A", "LONG_HEADER"],
            &[vec!["wide cell".into(), "x".into()]],
        );
        assert_eq!(out, "A          LONG_HEADER\nwide cell  x\n");
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let text = escape("job\u{1b}[31m red\r\u{8}x\nnext", true);
        assert_eq!(text, "job\\u{1b}[31m red\\r\\u{8}x\nnext");
        assert!(!escape("a\nb", false).contains('\n'));
        let table = render_table(&["NAME"], &[vec!["a\u{1b}]0;title\u{7}".into()]]);
        assert!(
            !table.chars().any(|c| c.is_control() && c != '\n'),
            "{table:?}"
        );
        assert_eq!(escape("plain é ✓", false), "plain é ✓");
    }

    #[test]
    fn long_errors_are_cut_in_the_table() {
        let cut = truncate(&"e".repeat(100));
        assert_eq!(cut.chars().count(), ERROR_WIDTH);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("a\nb"), "a b");
    }
}
