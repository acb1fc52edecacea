//! Text extraction: decides whether a file's bytes are indexable text and, if so, returns the
//! text normalized for chunking (no BOM, LF line endings).
//!
//! The checks run in a fixed order, so a file gets exactly one verdict:
//! 1. larger than the limit → [`Extracted::TooLarge`] (the bytes are not inspected further);
//! 2. a NUL byte in the first [`BINARY_SNIFF_BYTES`] bytes → [`Extracted::Binary`] (git's own
//!    heuristic, so the sync agrees with `git diff` about what is binary; UTF-16 text counts as
//!    binary here, as it does for git);
//! 3. after stripping a UTF-8 byte order mark, not valid UTF-8 → [`Extracted::NotUtf8`];
//! 4. a NUL byte further in → [`Extracted::Nul`]: valid text for git, but no database text
//!    column stores it (PostgreSQL refuses `0x00` in `TEXT`), so it is skipped and counted;
//! 5. otherwise [`Extracted::Text`], with every CRLF turned into LF (a lone CR is kept).

/// Files larger than this many bytes are not indexed unless configured otherwise.
pub(crate) const DEFAULT_MAX_FILE_BYTES: u64 = 1_000_000;

/// How many leading bytes are searched for a NUL byte (the figure git uses).
pub(crate) const BINARY_SNIFF_BYTES: usize = 8000;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// The verdict on one file's bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Extracted {
    /// Indexable text: valid UTF-8, BOM removed, CRLF normalized to LF.
    Text(String),
    /// A NUL byte in the first [`BINARY_SNIFF_BYTES`] bytes.
    Binary,
    /// Larger than the limit; `bytes` is the file's size, `limit` the limit applied.
    TooLarge {
        /// The file's size in bytes.
        bytes: u64,
        /// The limit it exceeded.
        limit: u64,
    },
    /// Not binary by the NUL heuristic, but not valid UTF-8 either (e.g. Latin-1).
    NotUtf8,
    /// Valid UTF-8 with a NUL byte past the first [`BINARY_SNIFF_BYTES`] bytes, at `offset`.
    Nul {
        /// Where the first NUL byte is.
        offset: usize,
    },
}

/// Classifies `bytes` and returns the normalized text when it is indexable (see the module docs
/// for the order of the checks). `max_bytes` is inclusive: a file of exactly `max_bytes` bytes
/// is accepted.
pub(crate) fn extract(bytes: &[u8], max_bytes: u64) -> Extracted {
    let len = bytes.len() as u64;
    if len > max_bytes {
        return Extracted::TooLarge {
            bytes: len,
            limit: max_bytes,
        };
    }
    let sniff = &bytes[..bytes.len().min(BINARY_SNIFF_BYTES)];
    if sniff.contains(&0) {
        return Extracted::Binary;
    }
    let body = bytes.strip_prefix(UTF8_BOM).unwrap_or(bytes);
    let Ok(text) = std::str::from_utf8(body) else {
        return Extracted::NotUtf8;
    };
    if let Some(offset) = bytes.iter().position(|&b| b == 0) {
        return Extracted::Nul { offset };
    }
    if text.contains("\r\n") {
        Extracted::Text(text.replace("\r\n", "\n"))
    } else {
        Extracted::Text(text.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Extracted {
        Extracted::Text(s.to_owned())
    }

    #[test]
    fn plain_text_is_returned_unchanged() {
        assert_eq!(
            extract(b"fn main() {}\n", DEFAULT_MAX_FILE_BYTES),
            text("fn main() {}\n")
        );
        assert_eq!(extract(b"", DEFAULT_MAX_FILE_BYTES), text(""));
        assert_eq!(
            extract("한국어 텍스트 🦀\n".as_bytes(), DEFAULT_MAX_FILE_BYTES),
            text("한국어 텍스트 🦀\n")
        );
    }

    #[test]
    fn utf8_bom_is_stripped() {
        assert_eq!(extract(b"\xEF\xBB\xBFhello\n", 100), text("hello\n"));
        // Only a leading BOM is a BOM.
        assert_eq!(
            extract(b"a\xEF\xBB\xBFb", 100),
            text("a\u{FEFF}b"),
            "a BOM in the middle is an ordinary character"
        );
        assert_eq!(extract(b"\xEF\xBB\xBF", 100), text(""));
    }

    #[test]
    fn crlf_becomes_lf_and_lone_cr_stays() {
        assert_eq!(extract(b"a\r\nb\r\n", 100), text("a\nb\n"));
        assert_eq!(extract(b"a\rb\r\r\n", 100), text("a\rb\r\n"));
        assert_eq!(extract(b"\xEF\xBB\xBFx\r\ny", 100), text("x\ny"));
    }

    #[test]
    fn nul_in_the_first_8000_bytes_is_binary() {
        assert_eq!(extract(b"abc\0def", 100), Extracted::Binary);
        assert_eq!(
            extract(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 100),
            Extracted::Binary
        );
        let mut late = vec![b'a'; BINARY_SNIFF_BYTES - 1];
        late.push(0);
        assert_eq!(extract(&late, 100_000), Extracted::Binary);
        // A NUL after the sniffed prefix is text to git, but no text column stores it.
        let mut later = vec![b'a'; BINARY_SNIFF_BYTES];
        later.push(0);
        assert_eq!(
            extract(&later, 100_000),
            Extracted::Nul {
                offset: BINARY_SNIFF_BYTES
            }
        );
        // UTF-16 with its BOM has NULs: binary, as for git.
        assert_eq!(extract(b"\xFF\xFEa\0b\0", 100), Extracted::Binary);
    }

    #[test]
    fn invalid_utf8_is_not_utf8() {
        assert_eq!(extract(b"caf\xE9\n", 100), Extracted::NotUtf8);
        assert_eq!(extract(b"\xEF\xBB\xBF\xFF", 100), Extracted::NotUtf8);
        // A multibyte character cut at the end.
        assert_eq!(extract(&"한".as_bytes()[..2], 100), Extracted::NotUtf8);
    }

    #[test]
    fn over_the_limit_is_too_large_and_the_limit_is_inclusive() {
        assert_eq!(
            extract(b"0123456789", 9),
            Extracted::TooLarge {
                bytes: 10,
                limit: 9
            }
        );
        assert_eq!(extract(b"0123456789", 10), text("0123456789"));
        // Size wins over content: a large binary file is reported as too large.
        assert_eq!(
            extract(&[0u8; 20], 10),
            Extracted::TooLarge {
                bytes: 20,
                limit: 10
            }
        );
    }

    #[test]
    fn a_nul_byte_past_the_sniffed_prefix_is_unstorable_not_text() {
        let mut bytes = vec![b'a'; BINARY_SNIFF_BYTES + 10];
        bytes[BINARY_SNIFF_BYTES + 5] = 0;
        assert_eq!(
            extract(&bytes, DEFAULT_MAX_FILE_BYTES),
            Extracted::Nul {
                offset: BINARY_SNIFF_BYTES + 5
            }
        );
        // In the prefix it is binary, as for git.
        bytes[10] = 0;
        assert_eq!(extract(&bytes, DEFAULT_MAX_FILE_BYTES), Extracted::Binary);
    }
}
