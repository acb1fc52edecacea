//! Chunking: splits a file's text into overlapping windows of at most `size` characters for
//! embedding.
//!
//! Sizes are counted in characters (Unicode scalar values, `char`), never bytes, and chunks are
//! cut only between characters, so a multibyte character (Korean, emoji) is never split. (A
//! grapheme cluster made of several scalars, like a ZWJ emoji sequence, can be cut between its
//! scalars when it straddles a boundary with no line break nearby.)
//!
//! # The algorithm
//!
//! With `n` characters, `size` and `overlap` from [`ChunkConfig`]:
//!
//! - `n == 0`: no chunks. `n <= size`: one chunk holding the whole text.
//! - Otherwise, from `start = 0`, repeatedly:
//!   - if `start + size >= n`, the chunk is `start..n` and it is the last one;
//!   - else the chunk *ends* at the latest line boundary (just after a `\n`) in the last quarter
//!     of the window, i.e. at the largest `p` in `start + size - size / 4 ..= start + size` whose
//!     previous character is `\n`; with no such `p` it ends at `start + size` (mid-line);
//!   - the next chunk *starts* `overlap` characters before this chunk's end (`end - overlap`),
//!     moved to the nearest line start (a position just after a `\n`) within `overlap / 4`
//!     characters either way, the earlier one on a tie, so a chunk usually begins at the start
//!     of a line. The overlap between consecutive chunks is therefore `overlap`, or between
//!     `overlap - overlap / 4` and `overlap + overlap / 4` when snapped to a line start.
//!
//! Every chunk has at most `size` characters, the next start is always after the previous
//! start (the loop advances) and never after the previous end (no character is left out), and
//! the result depends on nothing but the text and the config.

use std::fmt;
use std::ops::Range;

/// Chunk size and overlap, in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkConfig {
    /// The most characters in one chunk (at least 1).
    pub(crate) size: usize,
    /// How many characters consecutive chunks share (less than `size`).
    pub(crate) overlap: usize,
}

/// The default chunk size in characters (about 1,500–2,500 tokens of code).
pub(crate) const DEFAULT_CHUNK_SIZE: usize = 7000;
/// The default overlap in characters.
pub(crate) const DEFAULT_CHUNK_OVERLAP: usize = 1500;

impl Default for ChunkConfig {
    fn default() -> Self {
        ChunkConfig {
            size: DEFAULT_CHUNK_SIZE,
            overlap: DEFAULT_CHUNK_OVERLAP,
        }
    }
}

impl ChunkConfig {
    /// A validated config: `size` must be at least 1 and `overlap` smaller than `size`.
    pub(crate) fn new(size: usize, overlap: usize) -> Result<Self, String> {
        if size == 0 {
            return Err(format!(
                "chunk size must be at least 1 character (got size {size}, overlap {overlap})"
            ));
        }
        if overlap >= size {
            return Err(format!(
                "chunk overlap must be smaller than the chunk size (got size {size}, overlap {overlap})"
            ));
        }
        Ok(ChunkConfig { size, overlap })
    }
}

impl fmt::Display for ChunkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} characters, {} overlapping", self.size, self.overlap)
    }
}

/// One piece of a file's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// 0-based position among the file's chunks.
    pub(crate) index: usize,
    /// The chunk's text, an exact substring of the input.
    pub(crate) text: String,
    /// 1-based line of the chunk's first character.
    pub(crate) start_line: usize,
    /// 1-based line of the chunk's last character (a trailing `\n` belongs to the line it ends).
    pub(crate) end_line: usize,
}

/// Splits `text` into chunks as described in the module docs. The fields of [`ChunkConfig`]
/// are public, so an unvalidated config is tolerated here: a size of 0 is treated as 1 and an
/// overlap of `size` or more as `size - 1`.
pub(crate) fn chunk(text: &str, config: &ChunkConfig) -> Vec<Chunk> {
    let newlines: Vec<usize> = text
        .bytes()
        .enumerate()
        .filter(|&(_, b)| b == b'\n')
        .map(|(i, _)| i)
        .collect();
    // 1-based line of the character starting at byte `b`.
    let line_of = |b: usize| 1 + newlines.partition_point(|&nl| nl < b);
    spans(text, config)
        .into_iter()
        .enumerate()
        .map(|(index, span)| {
            let last_char = text[span.clone()]
                .char_indices()
                .next_back()
                .map_or(span.start, |(i, _)| span.start + i);
            Chunk {
                index,
                start_line: line_of(span.start),
                end_line: line_of(last_char),
                text: text[span].to_owned(),
            }
        })
        .collect()
}

/// The chunks' byte ranges in `text` (always on character boundaries), in order.
fn spans(text: &str, config: &ChunkConfig) -> Vec<Range<usize>> {
    let size = config.size.max(1);
    let overlap = config.overlap.min(size - 1);

    // Byte offset of every character, plus the end: char index -> byte index.
    let offsets: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect();
    let n = offsets.len() - 1;
    if n == 0 {
        return Vec::new();
    }
    let bytes = text.as_bytes();
    // True when the character before char position `p` is '\n' (a UTF-8 continuation byte is
    // never 0x0A, so looking at the previous byte is enough).
    let after_newline = |p: usize| p > 0 && bytes[offsets[p] - 1] == b'\n';

    let mut spans = Vec::new();
    let mut start = 0;
    loop {
        let limit = start + size;
        if limit >= n {
            spans.push(offsets[start]..offsets[n]);
            break;
        }
        let earliest_end = (limit - size / 4).max(start + 1);
        let end = (earliest_end..=limit)
            .rev()
            .find(|&p| after_newline(p))
            .unwrap_or(limit);
        spans.push(offsets[start]..offsets[end]);

        // The next start: `overlap` before the end, snapped to a nearby line start; always in
        // (start, end], and before `end` whenever there is an overlap to keep.
        let lowest = start + 1;
        let highest = if overlap > 0 { end - 1 } else { end };
        let nominal = end.saturating_sub(overlap).clamp(lowest, highest);
        let slack = overlap / 4;
        let snapped = (0..=slack).find_map(|d| {
            [nominal.checked_sub(d), Some(nominal + d)]
                .into_iter()
                .flatten()
                .find(|&q| (lowest..=highest).contains(&q) && after_newline(q))
        });
        start = snapped.unwrap_or(nominal);
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(size: usize, overlap: usize) -> ChunkConfig {
        ChunkConfig::new(size, overlap).unwrap()
    }

    fn texts(chunks: &[Chunk]) -> Vec<&str> {
        chunks.iter().map(|c| c.text.as_str()).collect()
    }

    /// Char offset of each chunk's start in `text`.
    fn char_starts(text: &str, config: &ChunkConfig) -> Vec<usize> {
        spans(text, config)
            .into_iter()
            .map(|s| text[..s.start].chars().count())
            .collect()
    }

    /// The properties every chunking must have, whatever the text and config.
    fn check_invariants(text: &str, config: &ChunkConfig, chunks: &[Chunk]) {
        let n = text.chars().count();
        if n == 0 {
            assert!(chunks.is_empty());
            return;
        }
        assert!(!chunks.is_empty());
        let spans = spans(text, config);
        assert_eq!(spans.len(), chunks.len());
        let starts = char_starts(text, config);
        assert_eq!(starts[0], 0, "the first chunk starts at the beginning");
        let mut covered_to = 0;
        for (i, (c, &s)) in chunks.iter().zip(&starts).enumerate() {
            let len = c.text.chars().count();
            assert_eq!(c.index, i);
            assert_eq!(c.text, text[spans[i].clone()]);
            assert!(
                len >= 1 && len <= config.size.max(1),
                "chunk {i} has {len} chars"
            );
            assert!(
                s <= covered_to,
                "gap before chunk {i}: starts {s}, covered {covered_to}"
            );
            if i > 0 {
                assert!(s > starts[i - 1], "chunk {i} does not advance");
            }
            covered_to = covered_to.max(s + len);
            // Line numbers agree with the text before the chunk.
            assert_eq!(
                c.start_line,
                1 + text[..spans[i].start].matches('\n').count()
            );
            let (last, _) = c.text.char_indices().next_back().unwrap();
            assert_eq!(
                c.end_line,
                c.start_line + c.text[..last].matches('\n').count()
            );
        }
        assert_eq!(covered_to, n, "every character is in a chunk");
    }

    #[test]
    fn config_validation_names_both_values() {
        assert_eq!(
            ChunkConfig::default(),
            ChunkConfig {
                size: 7000,
                overlap: 1500
            }
        );
        assert_eq!(
            cfg(10, 3),
            ChunkConfig {
                size: 10,
                overlap: 3
            }
        );
        assert!(ChunkConfig::new(1, 0).is_ok());
        let e = ChunkConfig::new(0, 0).unwrap_err();
        assert!(e.contains("size 0") && e.contains("overlap 0"), "{e}");
        let e = ChunkConfig::new(10, 10).unwrap_err();
        assert!(e.contains("size 10") && e.contains("overlap 10"), "{e}");
        let e = ChunkConfig::new(10, 11).unwrap_err();
        assert!(e.contains("size 10") && e.contains("overlap 11"), "{e}");
        assert_eq!(cfg(10, 3).to_string(), "10 characters, 3 overlapping");
    }

    #[test]
    fn empty_text_has_no_chunks() {
        assert!(chunk("", &cfg(10, 3)).is_empty());
        assert!(chunk("", &ChunkConfig::default()).is_empty());
    }

    #[test]
    fn short_and_exactly_size_texts_are_one_chunk() {
        let one = chunk("hi\n", &cfg(10, 3));
        assert_eq!(
            one,
            vec![Chunk {
                index: 0,
                text: "hi\n".into(),
                start_line: 1,
                end_line: 1
            }]
        );
        let exact = "0123\n5678\n"; // 10 chars
        let chunks = chunk(exact, &cfg(10, 3));
        assert_eq!(texts(&chunks), vec![exact]);
        assert_eq!((chunks[0].start_line, chunks[0].end_line), (1, 2));
        // One more character: two chunks.
        let chunks = chunk("0123456789A", &cfg(10, 3));
        assert_eq!(texts(&chunks), vec!["0123456789", "789A"]);
    }

    #[test]
    fn no_newlines_steps_by_size_minus_overlap() {
        let text = "abcdefghijklmnopqrstuvwxyz";
        let chunks = chunk(text, &cfg(10, 3));
        assert_eq!(
            texts(&chunks),
            vec!["abcdefghij", "hijklmnopq", "opqrstuvwx", "vwxyz"]
        );
        assert_eq!(char_starts(text, &cfg(10, 3)), vec![0, 7, 14, 21]);
        for c in &chunks {
            assert_eq!((c.start_line, c.end_line), (1, 1));
        }
        check_invariants(text, &cfg(10, 3), &chunks);
        // No overlap: a plain partition.
        let chunks = chunk(text, &cfg(10, 0));
        assert_eq!(texts(&chunks), vec!["abcdefghij", "klmnopqrst", "uvwxyz"]);
    }

    #[test]
    fn chunks_end_at_a_line_boundary_in_the_last_quarter() {
        // a:0-3 \n:4 b:5-8 \n:9 c:10-13 \n:14 d:15-18 \n:19
        let text = "aaaa\nbbbb\ncccc\ndddd\n";
        let chunks = chunk(text, &cfg(10, 3));
        assert_eq!(
            chunks,
            vec![
                Chunk {
                    index: 0,
                    text: "aaaa\nbbbb\n".into(),
                    start_line: 1,
                    end_line: 2
                },
                // Window 7..17; the line boundary at 15 is in the last quarter (15..=17).
                Chunk {
                    index: 1,
                    text: "bb\ncccc\n".into(),
                    start_line: 2,
                    end_line: 3
                },
                Chunk {
                    index: 2,
                    text: "cc\ndddd\n".into(),
                    start_line: 3,
                    end_line: 4
                },
            ]
        );
        check_invariants(text, &cfg(10, 3), &chunks);
    }

    #[test]
    fn a_line_boundary_before_the_last_quarter_is_not_used() {
        // The only newline is at 2; size 10's last quarter is 8..=10, so the cut is mid-line.
        let text = "ab\ncdefghijklmnop";
        let chunks = chunk(text, &cfg(10, 3));
        assert_eq!(texts(&chunks), vec!["ab\ncdefghi", "ghijklmnop"]);
        assert_eq!((chunks[1].start_line, chunks[1].end_line), (2, 2));
    }

    #[test]
    fn next_start_snaps_to_a_nearby_line_start() {
        // Lines of 7 chars ("xxxxxx\n"); line starts at 0, 7, 14, 21, 28.
        let text = "aaaaaa\nbbbbbb\ncccccc\ndddddd\neeeeee\n";
        let config = cfg(21, 8); // last quarter 16..=21, snap slack 8 / 4 = 2
        let chunks = chunk(text, &config);
        // First chunk ends at the boundary 21; nominal next start 21 - 8 = 13, snapped to the
        // line start 14: overlap 7 ("cccccc\n"), within 8 ± 2.
        assert_eq!(
            texts(&chunks),
            vec!["aaaaaa\nbbbbbb\ncccccc\n", "cccccc\ndddddd\neeeeee\n"]
        );
        assert_eq!(
            chunks
                .iter()
                .map(|c| (c.start_line, c.end_line))
                .collect::<Vec<_>>(),
            vec![(1, 3), (3, 5)]
        );
        check_invariants(text, &config, &chunks);
    }

    #[test]
    fn overlap_amounts_stay_within_the_documented_range() {
        let mut text = String::new();
        for i in 0..400 {
            text.push_str(&"word ".repeat(i % 13));
            text.push_str(&format!("line {i}\n"));
        }
        for (size, overlap) in [(50, 10), (80, 20), (120, 0), (200, 64), (33, 8)] {
            let config = cfg(size, overlap);
            let chunks = chunk(&text, &config);
            check_invariants(&text, &config, &chunks);
            let starts = char_starts(&text, &config);
            let slack = overlap / 4;
            for i in 1..chunks.len() {
                let prev_end = starts[i - 1] + chunks[i - 1].text.chars().count();
                let shared = prev_end - starts[i];
                assert!(
                    shared + slack >= overlap && shared <= overlap + slack,
                    "size {size} overlap {overlap}: chunks {} and {i} share {shared}",
                    i - 1
                );
            }
        }
    }

    #[test]
    fn multibyte_characters_are_never_split() {
        let text = "안녕하세요 세계 🦀🦀\n한국어 텍스트와 이모지 😀👍🏽 섞인 줄\n".repeat(20);
        for (size, overlap) in [(7, 2), (10, 3), (31, 5), (100, 40)] {
            let config = cfg(size, overlap);
            let chunks = chunk(&text, &config);
            // Slicing at a non-boundary would have panicked; check sizes and coverage.
            check_invariants(&text, &config, &chunks);
        }
        let chunks = chunk("가나다라마바사아자차카타파하", &cfg(5, 1));
        assert_eq!(
            texts(&chunks),
            vec!["가나다라마", "마바사아자", "자차카타파", "파하"]
        );
        let chunks = chunk("🦀😀👍🎉🚀✨", &cfg(4, 2));
        assert_eq!(texts(&chunks), vec!["🦀😀👍🎉", "👍🎉🚀✨"]);
    }

    #[test]
    fn a_single_20000_char_line_with_the_default_config() {
        let text = "x".repeat(20_000);
        let config = ChunkConfig::default();
        let chunks = chunk(&text, &config);
        assert_eq!(char_starts(&text, &config), vec![0, 5500, 11_000, 16_500]);
        let lens: Vec<usize> = chunks.iter().map(|c| c.text.len()).collect();
        assert_eq!(lens, vec![7000, 7000, 7000, 3500]);
        for c in &chunks {
            assert_eq!((c.start_line, c.end_line), (1, 1));
        }
        check_invariants(&text, &config, &chunks);
    }

    #[test]
    fn every_character_is_covered_for_many_texts_and_configs() {
        // A small deterministic generator: lines of varying length, some empty, some long.
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |m: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % m
        };
        let alphabet: Vec<char> = "ab c가🦀\n\n".chars().collect();
        for _ in 0..200 {
            let len = next(300) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[next(alphabet.len() as u64) as usize])
                .collect();
            let size = 1 + next(40) as usize;
            let overlap = next(size as u64) as usize;
            let config = cfg(size, overlap);
            let chunks = chunk(&text, &config);
            check_invariants(&text, &config, &chunks);
            assert_eq!(chunks, chunk(&text, &config), "deterministic");
        }
    }

    #[test]
    fn an_unvalidated_config_is_tolerated() {
        let text = "abcdef";
        let chunks = chunk(
            text,
            &ChunkConfig {
                size: 0,
                overlap: 5,
            },
        );
        assert_eq!(texts(&chunks), vec!["a", "b", "c", "d", "e", "f"]);
        let chunks = chunk(
            text,
            &ChunkConfig {
                size: 3,
                overlap: 9,
            },
        );
        // Overlap clamped to 2: the window advances one character at a time.
        assert_eq!(texts(&chunks), vec!["abc", "bcd", "cde", "def"]);
    }

    #[test]
    fn trailing_newline_belongs_to_the_line_it_ends() {
        let chunks = chunk("one\ntwo\n", &cfg(4, 0));
        assert_eq!(
            chunks
                .iter()
                .map(|c| (c.text.as_str(), c.start_line, c.end_line))
                .collect::<Vec<_>>(),
            vec![("one\n", 1, 1), ("two\n", 2, 2)]
        );
    }
}
