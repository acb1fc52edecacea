//! Text that came from outside the program (a name, a `locked_by`, an error text or a source
//! stored in the database; a path or a line of a repository; a server's message), made safe to
//! print on a terminal: [`shown`] escapes the characters a terminal would act on instead of
//! showing, so a row holding `ESC[2J` or `\r` cannot clear the operator's screen or overwrite a
//! line.
//!
//! Lines are printed with [`say!`] and [`tell!`], which drop what a closed stdout or stderr
//! cannot take instead of panicking.
//!
//! Escaped: every control character (C0, DEL and C1, `\u{9b}` being a one-character `ESC[` to
//! many terminals) as `\n`, `\r`, `\t`, `\x1b`, `\x7f` or `\u{9b}`, and the Unicode
//! bidirectional controls (`\u{202e}` and its kin, which reorder what follows them) as
//! `\u{…}`. Everything else, non-ASCII letters included, is printed as it is.

use std::borrow::Cow;
use std::fmt::Write as _;

/// `println!` that never panics: when stdout is closed (`repo_sync status | head -1`, a log
/// collector gone) the line is dropped and the program goes on.
#[allow(
    unused_macros,
    reason = "tests/repo_sync.rs includes, without features, no module that prints to stdout"
)]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics, as [`say!`] for stderr.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

#[allow(
    unused_imports,
    reason = "tests/repo_sync.rs includes some users of one but not the other"
)]
pub(crate) use {say, tell};

/// `text` with its control characters escaped (see the [module](self)); borrowed when there
/// is nothing to escape.
pub(crate) fn shown(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The last line a `run` process prints: what was still going at Ctrl-C (syncs; with `--role
/// scheduler`, hand-offs to the queue, as it syncs nothing), one or many.
pub(crate) fn stopped_line(hands_off: bool, finished: usize, cancelled: usize) -> String {
    let (one, many) = if hands_off {
        ("hand-off", "hand-offs")
    } else {
        ("sync", "syncs")
    };
    let what = |n: usize| if n == 1 { one } else { many };
    format!(
        "stopped ({finished} running {} finished, {cancelled} cancelled)",
        what(finished)
    )
}

/// Whether a terminal could act on `c`: a control character or a bidirectional control.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert!(matches!(shown("plain 한국어 — ok"), Cow::Borrowed(_)));
        assert_eq!(shown("a\x1b[31mred\x1b[0m"), r"a\x1b[31mred\x1b[0m");
        assert_eq!(shown("over\rwrite\n\ttab"), r"over\rwrite\n\ttab");
        assert_eq!(shown("bell\x07 del\x7f nul\0"), r"bell\x07 del\x7f nul\x00");
        assert_eq!(shown("csi\u{9b}2J"), r"csi\u{9b}2J");
        assert_eq!(shown("abc\u{202e}fed\u{2066}"), r"abc\u{202e}fed\u{2066}");
    }

    #[test]
    fn the_stop_line_names_what_the_process_runs() {
        assert_eq!(
            stopped_line(false, 1, 0),
            "stopped (1 running sync finished, 0 cancelled)"
        );
        assert_eq!(
            stopped_line(false, 2, 1),
            "stopped (2 running syncs finished, 1 cancelled)"
        );
        // A scheduler that hands ticks to a queue never syncs.
        assert_eq!(
            stopped_line(true, 1, 0),
            "stopped (1 running hand-off finished, 0 cancelled)"
        );
    }
}
