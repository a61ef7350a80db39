//! Splitting documents into bit-sized chunks at sentence ends (used by `mnemon library import`).
//!
//! Lengths are counted in Unicode scalar values (Python's `len`), on the chunk's text with its
//! surrounding whitespace removed.

use std::ops::Range;

/// The chunk lengths the importer aims for, in characters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkBounds {
    /// A chunk ends at the first paragraph break after this many characters, and is only
    /// shorter when the next sentence would not fit under `max` (or at the end of the text).
    pub min: usize,
    /// No chunk is longer. A sentence longer than this is cut at its last whitespace that fits,
    /// or, for a longer run without whitespace, after `max` characters.
    pub max: usize,
}

impl Default for ChunkBounds {
    /// 1,000 to 2,000 characters.
    fn default() -> Self {
        ChunkBounds {
            min: 1000,
            max: 2000,
        }
    }
}

/// A stretch of text that is never split unless it alone exceeds `max`.
#[derive(Debug, Clone, Copy)]
struct Unit {
    /// Byte range of the content, without surrounding whitespace.
    start: usize,
    end: usize,
    /// Character offsets of `start` and `end`.
    start_char: usize,
    end_char: usize,
    /// A blank line follows.
    paragraph_end: bool,
}

/// Characters that end a sentence.
fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？')
}

/// Characters that may follow a terminator and still belong to its sentence.
fn is_closer(c: char) -> bool {
    matches!(
        c,
        '"' | '\'' | ')' | ']' | '}' | '»' | '”' | '’' | '*' | '_' | '`'
    )
}

/// Splits `text` into sentences and paragraphs: the content ranges (whitespace excluded) of the
/// pieces between sentence ends (a terminator, optional closers, then whitespace) and blank
/// lines.
fn sentences(text: &str) -> Vec<Unit> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut units = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        // Skip whitespace before the unit, noting blank lines for the previous unit.
        let mut newlines = 0;
        while let Some(&(_, c)) = chars.get(i) {
            if !c.is_whitespace() {
                break;
            }
            if c == '\n' {
                newlines += 1;
            }
            i += 1;
        }
        if newlines >= 2
            && let Some(last) = units.last_mut()
        {
            let last: &mut Unit = last;
            last.paragraph_end = true;
        }
        let Some(&(start, _)) = chars.get(i) else {
            break;
        };
        let start_char = i;
        // Scan to the end of the sentence.
        let mut end_char = i;
        while let Some(&(_, c)) = chars.get(i) {
            if c == '\n' {
                // A blank line ends the unit even without a terminator.
                let mut j = i + 1;
                while let Some(&(_, c)) = chars.get(j) {
                    if c == '\n' || !c.is_whitespace() {
                        break;
                    }
                    j += 1;
                }
                if matches!(chars.get(j), Some(&(_, '\n'))) {
                    break;
                }
            }
            i += 1;
            if !c.is_whitespace() {
                end_char = i;
            }
            if is_terminator(c) {
                while let Some(&(_, c)) = chars.get(i) {
                    if !(is_terminator(c) || is_closer(c)) {
                        break;
                    }
                    i += 1;
                    end_char = i;
                }
                if chars.get(i).is_none_or(|&(_, c)| c.is_whitespace()) {
                    break;
                }
            }
        }
        let end = chars.get(end_char).map_or(text.len(), |&(b, _)| b);
        units.push(Unit {
            start,
            end,
            start_char,
            end_char,
            paragraph_end: false,
        });
    }
    units
}

/// Cuts a unit longer than `max` characters into pieces of at most `max`, at whitespace where
/// possible.
fn split_long(text: &str, unit: Unit, max: usize, out: &mut Vec<Unit>) {
    let chars: Vec<(usize, char)> = text[unit.start..unit.end].char_indices().collect();
    let mut from = 0;
    while chars.len() - from > max {
        // The last whitespace at or before position from + max.
        let window = &chars[from..=from + max];
        let cut = window
            .iter()
            .rposition(|&(_, c)| c.is_whitespace())
            .filter(|&p| p > 0);
        let (piece_end, next) = match cut {
            Some(p) => {
                // Trim whitespace at the cut on both sides.
                let mut end = from + p;
                while end > from && chars[end - 1].1.is_whitespace() {
                    end -= 1;
                }
                let mut next = from + p;
                while next < chars.len() && chars[next].1.is_whitespace() {
                    next += 1;
                }
                (end, next)
            }
            None => (from + max, from + max),
        };
        out.push(piece(unit, &chars, from, piece_end, false));
        from = next;
    }
    if from < chars.len() {
        out.push(piece(unit, &chars, from, chars.len(), unit.paragraph_end));
    }
}

/// The sub-unit of `unit` from character `from` to `to` (indices into `chars`).
fn piece(unit: Unit, chars: &[(usize, char)], from: usize, to: usize, paragraph_end: bool) -> Unit {
    let byte = |i: usize| chars.get(i).map_or(unit.end, |&(b, _)| unit.start + b);
    Unit {
        start: byte(from),
        end: byte(to),
        start_char: unit.start_char + from,
        end_char: unit.start_char + to,
        paragraph_end,
    }
}

/// Splits `text` into chunks within `bounds`, returning each chunk's byte range (surrounding
/// whitespace excluded) in order.
///
/// Guarantees, for any input: chunks are non-empty, in order and non-overlapping; only
/// whitespace lies between, before and after them; none is longer than `bounds.max` characters;
/// and a chunk shorter than `bounds.min` is the last one or could not take the next sentence
/// without passing `max`. A short last chunk joins the one before it when both fit in `max`,
/// or else takes sentences from its end while that one stays at least `min` long. Chunks end at sentence ends, preferring paragraph breaks once `min`
/// is reached, except where a single sentence is longer than `max`. A `max` of 0 counts as 1
/// and a `min` above `max` as `max`.
///
/// ```
/// use mnemon_library::{ChunkBounds, chunk_ranges};
///
/// let text = "One sentence. Two sentences! Three?";
/// let chunks: Vec<&str> = chunk_ranges(text, ChunkBounds { min: 10, max: 30 })
///     .into_iter()
///     .map(|r| &text[r])
///     .collect();
/// // "Three?" alone would be too short, so it takes the sentence before it.
/// assert_eq!(chunks, ["One sentence.", "Two sentences! Three?"]);
/// ```
pub fn chunk_ranges(text: &str, bounds: ChunkBounds) -> Vec<Range<usize>> {
    let max = bounds.max.max(1);
    let min = bounds.min.min(max);
    let mut units = Vec::new();
    for unit in sentences(text) {
        if unit.end_char - unit.start_char > max {
            split_long(text, unit, max, &mut units);
        } else {
            units.push(unit);
        }
    }
    // Greedy packing into chunks of units `first..=last` (indices into `units`).
    let span = |first: usize, last: usize| match (units.get(first), units.get(last)) {
        (Some(a), Some(b)) => b.end_char - a.start_char,
        _ => 0,
    };
    let mut chunks: Vec<(usize, usize)> = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for (index, unit) in units.iter().enumerate() {
        current = match current {
            None => Some((index, index)),
            Some((first, last)) => {
                let full =
                    span(first, last) >= min && units.get(last).is_some_and(|u| u.paragraph_end);
                if full || unit.end_char - units.get(first).map_or(0, |u| u.start_char) > max {
                    chunks.push((first, last));
                    Some((index, index))
                } else {
                    Some((first, index))
                }
            }
        };
    }
    if let Some((mut first, last)) = current {
        match chunks.last_mut() {
            // A short tail joins the previous chunk when both fit …
            Some(previous) if span(first, last) < min && span(previous.0, last) <= max => {
                previous.1 = last;
            }
            Some(previous) => {
                // … or takes sentences from its end while that one stays at least `min` long.
                while span(first, last) < min
                    && previous.1 > previous.0
                    && span(previous.0, previous.1 - 1) >= min
                    && span(previous.1, last) <= max
                {
                    previous.1 -= 1;
                    first -= 1;
                }
                chunks.push((first, last));
            }
            None => chunks.push((first, last)),
        }
    }
    chunks
        .into_iter()
        .filter_map(|(first, last)| Some(units.get(first)?.start..units.get(last)?.end))
        .collect()
}

/// The chunks of `text` (see [`chunk_ranges`]) as string slices.
pub fn chunk_text(text: &str, bounds: ChunkBounds) -> Vec<&str> {
    chunk_ranges(text, bounds)
        .into_iter()
        .filter_map(|r| text.get(r))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn len(s: &str) -> usize {
        s.chars().count()
    }

    /// Checks every guarantee of `chunk_ranges`.
    fn check(text: &str, bounds: ChunkBounds) {
        let max = bounds.max.max(1);
        let min = bounds.min.min(max);
        let ranges = chunk_ranges(text, bounds);
        let mut at = 0;
        for (i, r) in ranges.iter().enumerate() {
            assert!(r.start >= at && r.start < r.end, "{ranges:?}");
            assert!(
                text[at..r.start].trim().is_empty(),
                "gap {:?}",
                &text[at..r.start]
            );
            let chunk = &text[r.clone()];
            assert_eq!(chunk, chunk.trim(), "untrimmed chunk");
            assert!(len(chunk) <= max, "chunk of {} > {max}", len(chunk));
            if len(chunk) < min
                && let Some(next) = ranges.get(i + 1)
            {
                assert!(
                    len(&text[r.start..next.end]) > max,
                    "short chunk {chunk:?} could have taken more"
                );
            }
            at = r.end;
        }
        assert!(text[at..].trim().is_empty(), "uncovered tail");
    }

    #[test]
    fn sentences_end_at_terminators_followed_by_space() {
        let text = "Dr. Who? Yes! Pi is 3.14 today... \"Quoted.\" Next";
        let units: Vec<&str> = sentences(text)
            .into_iter()
            .map(|u| &text[u.start..u.end])
            .collect();
        assert_eq!(
            units,
            [
                "Dr.",
                "Who?",
                "Yes!",
                "Pi is 3.14 today...",
                "\"Quoted.\"",
                "Next"
            ]
        );
    }

    #[test]
    fn blank_lines_end_units_and_are_preferred_breaks() {
        let para = |w: &str| format!("{} end.", w.repeat(10));
        let text = format!("{}\n\n{}\n  \n{}", para("a "), para("b "), para("c "));
        let chunks = chunk_text(&text, ChunkBounds { min: 20, max: 200 });
        assert_eq!(chunks.len(), 3, "{chunks:?}");
        assert!(chunks[1].starts_with("b b"));
        // A heading without a period still ends at the blank line.
        let units = sentences("# Title\n\nBody text");
        assert_eq!(units.len(), 2);
        assert!(units[0].paragraph_end);
    }

    #[test]
    fn chunks_fill_up_to_max_at_sentence_ends() {
        let sentence = "This sentence is exactly forty chars ok. ";
        assert_eq!(len(sentence.trim()), 40);
        let text = sentence.repeat(100);
        let chunks = chunk_text(&text, ChunkBounds::default());
        for c in &chunks {
            assert!(c.ends_with('.'));
            assert!((1000..=2000).contains(&len(c)), "{}", len(c));
        }
        check(&text, ChunkBounds::default());
    }

    #[test]
    fn long_sentences_are_cut_at_whitespace_or_hard() {
        let words = "word ".repeat(1000);
        let chunks = chunk_text(&words, ChunkBounds { min: 100, max: 333 });
        assert!(
            chunks
                .iter()
                .all(|c| len(c) <= 333 && c.starts_with("word"))
        );
        let run = "x".repeat(1000);
        let chunks = chunk_text(&run, ChunkBounds { min: 100, max: 333 });
        let lengths: Vec<usize> = chunks.iter().map(|c| len(c)).collect();
        assert_eq!(lengths, [333, 333, 333, 1]);
    }

    #[test]
    fn short_tail_joins_the_previous_chunk() {
        let text = format!("{}.\n\n{}. Tail.", "a".repeat(30), "b".repeat(30));
        let chunks = chunk_text(&text, ChunkBounds { min: 20, max: 100 });
        assert_eq!(chunks.len(), 2, "{chunks:?}");
        assert!(chunks[1].ends_with("Tail."));
    }

    #[test]
    fn empty_and_blank_texts_have_no_chunks() {
        assert!(chunk_ranges("", ChunkBounds::default()).is_empty());
        assert!(chunk_ranges(" \n\n\t ", ChunkBounds::default()).is_empty());
        check("x", ChunkBounds { min: 0, max: 0 });
        check("ab. cd", ChunkBounds { min: 9, max: 1 });
    }

    proptest! {
        #[test]
        fn guarantees_hold_for_any_text(
            text in "([a-zé€ .!?\"')\n\t]{0,12}){0,60}",
            min in 0usize..80,
            max in 0usize..120,
        ) {
            check(&text, ChunkBounds { min, max });
        }

        #[test]
        fn never_panics_on_arbitrary_unicode(text in any::<String>(), min in 0usize..50, max in 0usize..50) {
            check(&text, ChunkBounds { min, max });
        }
    }
}
