//! Finding `<|…|>` markers in message text (docs/reference/assets.md#markers-in-text).
//!
//! Decisions where the spec is silent:
//! - Code is recognised as CommonMark does: a fence is a line indented by at most three spaces
//!   that starts with at least three backticks or tildes, and runs to a closing line of the same
//!   character at least as long (or to the end of the text); an inline code span is a run of N
//!   backticks closed by the next run of exactly N backticks in the same paragraph (an unclosed
//!   run is literal text). A paragraph ends at a blank line or at a line that opens a fence
//!   (a fence interrupts a paragraph): a backtick run before a fence is not closed inside it.
//! - A malformed marker is reported with the span from its `<|` to the `|>` that ends it; when
//!   no `|>` ends it before the next `<|` (markers do not nest), only the `<|` is reported and
//!   scanning goes on from the next `<|`, so one typo never hides a later marker.
//!
//! The scan takes time linear in the text's length, whatever the text (it reads model output
//! and user input, so it must not be a denial-of-service lever):
//! - a marker looks for its `|>` only up to the next `<|` (where scanning resumes anyway if it
//!   is unterminated), so no byte is searched twice for `<|<|<|…` without any `|>`;
//! - the first backtick run of a paragraph indexes the paragraph's runs by length, so a run
//!   that is never closed is recognised at once instead of by rescanning the paragraph (the
//!   remedy CommonMark implementations use);
//! - the JSON form's parser stops at the first byte that cannot continue the value; a byte is
//!   read by at most two of those parses, because a `<` is only valid inside a JSON string
//!   and two parses that both read on past a later `<|{"` disagree about which bytes are inside
//!   strings from then on, so one of them stops at the next `<`.

use std::collections::HashMap;
use std::ops::Range;

use mnemon_types::AssetRef;

use crate::detect::{Detected, from_object};
use crate::error::RefsError;

/// Which of the two forms a marker is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerForm {
    /// `<|asset://…|>`
    Url,
    /// `<|{"asset_id": …, "field_path": […]}|>`
    Json,
}

/// One marker found in a text.
#[derive(Debug)]
pub struct Marker {
    /// The marker's bytes in the text, from `<|` to `|>` inclusive.
    pub span: Range<usize>,
    /// The form it is written in, when that could be told.
    pub form: MarkerForm,
    /// The reference, or why the marker is malformed.
    pub reference: Result<AssetRef, RefsError>,
}

const OPEN: &[u8] = b"<|";
const CLOSE: &[u8] = b"|>";

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

/// Every marker in `text`, in order, each with its byte span and parsed reference (or the
/// reason it is malformed). Markers inside fenced code blocks and inline code spans are
/// skipped. Never panics, and takes time linear in the text's length (module docs).
///
/// ```
/// use mnemon_refs::scan;
///
/// let text = "![cat](<|asset://a1/content/image|>) and `<|asset://not/this|>`";
/// let markers = scan(text);
/// assert_eq!(markers.len(), 1);
/// assert_eq!(&text[markers[0].span.clone()], "<|asset://a1/content/image|>");
/// assert_eq!(markers[0].reference.as_ref().unwrap().asset_id, "a1");
/// ```
pub fn scan(text: &str) -> Vec<Marker> {
    scan_at_most(text, usize::MAX)
}

/// [`scan`], stopping after `limit + 1` markers: a caller that refuses more than `limit` learns
/// it without building every marker of a text made of little else.
pub(crate) fn scan_at_most(text: &str, limit: usize) -> Vec<Marker> {
    let bytes = text.as_bytes();
    let mut markers = Vec::new();
    let mut runs = BacktickRuns::default();
    let mut i = 0;
    let mut line_start = true;
    while i < bytes.len() {
        if line_start {
            line_start = false;
            if let Some(end) = fenced_block_end(bytes, i) {
                i = end;
                line_start = true;
                continue;
            }
        }
        let Some(offset) = bytes
            .get(i..)
            .and_then(|rest| rest.iter().position(|&b| matches!(b, b'<' | b'`' | b'\n')))
        else {
            break;
        };
        let j = i + offset;
        match bytes.get(j) {
            Some(b'\n') => {
                i = j + 1;
                line_start = true;
            }
            Some(b'`') => i = runs.code_span_end(bytes, j),
            _ if bytes.get(j..j + 2) == Some(OPEN) => {
                let (marker, next) = parse_marker(text, j);
                markers.push(marker);
                if markers.len() > limit {
                    break;
                }
                i = next;
            }
            _ => i = j + 1,
        }
    }
    markers
}

/// If a fence opens at `start` (a line start): its character, length and the index after its
/// run.
pub(crate) fn fence_opening(bytes: &[u8], start: usize) -> Option<(u8, usize, usize)> {
    let (fence_char, fence_len, after) = fence_at(bytes, start)?;
    if fence_char == b'`' {
        // A backtick fence's info string may not contain backticks.
        let line_end = line_end(bytes, after);
        if bytes.get(after..line_end)?.contains(&b'`') {
            return None;
        }
    }
    Some((fence_char, fence_len, after))
}

/// If a fence opens at `start` (a line start), the index just past its block.
fn fenced_block_end(bytes: &[u8], start: usize) -> Option<usize> {
    let (fence_char, fence_len, _) = fence_opening(bytes, start)?;
    let mut line = next_line(bytes, start);
    while line < bytes.len() {
        if let Some((c, n, after)) = fence_at(bytes, line) {
            let end = line_end(bytes, after);
            let rest_blank = bytes
                .get(after..end)
                .is_some_and(|r| r.iter().all(|&b| is_space(b)));
            if c == fence_char && n >= fence_len && rest_blank {
                return Some(next_line(bytes, line));
            }
        }
        line = next_line(bytes, line);
    }
    Some(bytes.len())
}

/// A fence run at line start `start`: (character, length, index after the run).
fn fence_at(bytes: &[u8], start: usize) -> Option<(u8, usize, usize)> {
    let mut k = start;
    while k < start + 3 && bytes.get(k) == Some(&b' ') {
        k += 1;
    }
    let c = *bytes.get(k)?;
    if c != b'`' && c != b'~' {
        return None;
    }
    let n = bytes.get(k..)?.iter().take_while(|&&b| b == c).count();
    (n >= 3).then_some((c, n, k + n))
}

fn line_end(bytes: &[u8], from: usize) -> usize {
    bytes
        .get(from..)
        .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
        .map_or(bytes.len(), |p| from + p)
}

fn next_line(bytes: &[u8], from: usize) -> usize {
    (line_end(bytes, from) + 1).min(bytes.len())
}

/// The length of the backtick run starting at `at` (0 if there is none).
fn backtick_run(bytes: &[u8], at: usize) -> usize {
    bytes
        .get(at..)
        .map_or(0, |r| r.iter().take_while(|&&b| b == b'`').count())
}

/// The backtick runs of one paragraph, indexed by length, so that telling whether a run is
/// closed costs no rescan of the paragraph (without it, runs of many different lengths that
/// are never closed make the scan quadratic).
#[derive(Debug, Default)]
struct BacktickRuns {
    /// The indexed bytes: from just after the run that started the index to the paragraph's
    /// end (the second newline of the first blank line, or the end of the text).
    indexed: Range<usize>,
    /// For each run length, where the last run of that length in `indexed` starts.
    last_of_len: HashMap<usize, usize>,
}

impl BacktickRuns {
    /// The index after the inline code span opening at `start`, or after the backtick run if it
    /// is not closed in the same paragraph.
    fn code_span_end(&mut self, bytes: &[u8], start: usize) -> usize {
        let n = backtick_run(bytes, start);
        let after = start + n;
        if !(self.indexed.start <= start && start < self.indexed.end) {
            self.index_paragraph(bytes, after);
        }
        // A closer is the first later run of exactly `n` backticks; there is one iff the last
        // run of that length lies after this one.
        if self.last_of_len.get(&n).is_none_or(|&last| last <= start) {
            return after;
        }
        let mut k = after;
        while let Some(&b) = bytes.get(k) {
            if b == b'`' {
                let m = backtick_run(bytes, k);
                if m == n {
                    return k + m;
                }
                k += m;
            } else {
                k += 1;
            }
        }
        // Unreachable while the index is right; an unclosed run is the safe reading.
        after
    }

    /// Indexes the runs from `from` to the end of its paragraph: a line holding only white
    /// space, a line opening a fence, or the end of the text.
    fn index_paragraph(&mut self, bytes: &[u8], from: usize) {
        self.last_of_len.clear();
        let mut k = from;
        let mut blank_candidate = false;
        while let Some(&b) = bytes.get(k) {
            match b {
                b'`' => {
                    let m = backtick_run(bytes, k);
                    self.last_of_len.insert(m, k);
                    k += m;
                    blank_candidate = false;
                }
                b'\n' if blank_candidate => break,
                // A fence interrupts the paragraph (its line is read by the fence's own scan).
                b'\n' if fence_opening(bytes, k + 1).is_some() => break,
                b'\n' => {
                    blank_candidate = true;
                    k += 1;
                }
                b' ' | b'\t' | b'\r' => k += 1,
                _ => {
                    blank_candidate = false;
                    k += 1;
                }
            }
        }
        self.indexed = from..k.min(bytes.len());
    }
}

/// The first `<|` or `|>` in a text from some position on.
#[derive(Debug, Clone, Copy)]
enum Delimiter {
    /// A `<|` starting at this index.
    Open(usize),
    /// A `|>` starting at this index.
    Close(usize),
}

/// The first `<|` or `|>` starting at or after `from`, or `None` at the end of the text.
///
/// Searching for whichever comes first, rather than for a `|>` to the end of the text, is what
/// keeps the scan linear: scanning resumes at or after the delimiter found.
fn next_delimiter(bytes: &[u8], from: usize) -> Option<Delimiter> {
    let rest = bytes.get(from..)?;
    let mut p = 0;
    loop {
        let at = p + rest
            .get(p..)?
            .iter()
            .position(|&b| b == b'<' || b == b'|')?;
        match (rest.get(at), rest.get(at + 1)) {
            (Some(b'<'), Some(b'|')) => return Some(Delimiter::Open(from + at)),
            (Some(b'|'), Some(b'>')) => return Some(Delimiter::Close(from + at)),
            _ => p = at + 1,
        }
    }
}

fn malformed(span: Range<usize>, form: MarkerForm, detail: String) -> Marker {
    Marker {
        span,
        form,
        reference: Err(RefsError::MalformedMarker { detail }),
    }
}

/// Where a marker without a usable content ends: at the first `|>` if it comes before the next
/// `<|` (reported with `detail`); otherwise only its `<|` is reported, as unterminated. Its
/// content was read up to `from` (which, for the JSON form, may lie past the next `<|`, inside
/// a JSON string). Returns the marker and where to resume.
fn bad_marker(
    text: &str,
    open: usize,
    from: usize,
    form: MarkerForm,
    detail: String,
) -> (Marker, usize) {
    let bytes = text.as_bytes();
    // A `<|` starting before `from` comes before any `|>` at or after it. This searches only
    // bytes the marker's parse has already read.
    let reopen_before = bytes
        .get(open + 2..(from + 1).min(bytes.len()))
        .and_then(|read| read.windows(OPEN.len()).position(|w| w == OPEN))
        .map(|p| Delimiter::Open(open + 2 + p));
    match reopen_before.or_else(|| next_delimiter(bytes, from)) {
        Some(Delimiter::Close(c)) => (malformed(open..c + 2, form, detail), c + 2),
        Some(Delimiter::Open(r)) => unterminated(open, form, Some(r), bytes.len()),
        None => unterminated(open, form, None, bytes.len()),
    }
}

/// The `<|` at `open`, reported alone because no `|>` closes it before the next `<|` at
/// `reopen` (or the end of the text, at `len`); scanning resumes there.
fn unterminated(
    open: usize,
    form: MarkerForm,
    reopen: Option<usize>,
    len: usize,
) -> (Marker, usize) {
    let before = if reopen.is_some() {
        "the next \"<|\""
    } else {
        "the end of the text"
    };
    (
        Marker {
            span: open..open + 2,
            form,
            reference: Err(RefsError::UnterminatedMarker { before }),
        },
        reopen.unwrap_or(len),
    )
}

/// Parses the marker whose `<|` is at `open`; returns it and where scanning resumes.
fn parse_marker(text: &str, open: usize) -> (Marker, usize) {
    let bytes = text.as_bytes();
    let mut k = open + 2;
    while bytes.get(k).is_some_and(|&b| is_space(b)) {
        k += 1;
    }
    if bytes.get(k) == Some(&b'{') {
        return parse_json_marker(text, open, k);
    }
    let close = match next_delimiter(bytes, k) {
        Some(Delimiter::Close(c)) => c,
        Some(Delimiter::Open(r)) => {
            return unterminated(open, MarkerForm::Url, Some(r), bytes.len());
        }
        None => return unterminated(open, MarkerForm::Url, None, bytes.len()),
    };
    let inner = text.get(k..close).unwrap_or_default().trim();
    let reference = if inner.is_empty() {
        Err(RefsError::MalformedMarker {
            detail: "the marker is empty; write <|asset://ASSET_ID/FIELD/...|>".to_owned(),
        })
    } else {
        AssetRef::parse_url(inner).map_err(|e| RefsError::MalformedMarker {
            detail: format!("{inner:?} is not an asset URL: {e}"),
        })
    };
    (
        Marker {
            span: open..close + 2,
            form: MarkerForm::Url,
            reference,
        },
        close + 2,
    )
}

fn parse_json_marker(text: &str, open: usize, start: usize) -> (Marker, usize) {
    let bytes = text.as_bytes();
    let rest = text.get(start..).unwrap_or_default();
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<serde_json::Value>();
    let json = match stream.next() {
        Some(Ok(json)) => json,
        Some(Err(e)) => {
            let detail = format!("the JSON reference does not parse: {e}");
            return bad_marker(text, open, start, MarkerForm::Json, detail);
        }
        None => {
            let detail = "the JSON reference is missing".to_owned();
            return bad_marker(text, open, start, MarkerForm::Json, detail);
        }
    };
    let mut k = start + stream.byte_offset();
    while bytes.get(k).is_some_and(|&b| is_space(b)) {
        k += 1;
    }
    if bytes.get(k..k + 2) != Some(CLOSE) {
        let detail = "expected \"|>\" right after the JSON reference".to_owned();
        return bad_marker(text, open, k, MarkerForm::Json, detail);
    }
    let reference = match from_object(json) {
        Detected::Reference(r) => Ok(r),
        Detected::Invalid(detail) => Err(RefsError::MalformedMarker { detail }),
        Detected::Plain => Err(RefsError::MalformedMarker {
            detail: "the JSON is not a reference".to_owned(),
        }),
    };
    (
        Marker {
            span: open..k + 2,
            form: MarkerForm::Json,
            reference,
        },
        k + 2,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_types::PathSegment;
    use proptest::prelude::*;

    fn spans(text: &str) -> Vec<(&str, bool)> {
        scan(text)
            .into_iter()
            .map(|m| (&text[m.span.clone()], m.reference.is_ok()))
            .collect()
    }

    #[test]
    fn a_limited_scan_stops_one_marker_past_its_limit() {
        let text = "<||> <|asset://a/content|> ".repeat(1_000);
        let some = scan_at_most(&text, 5);
        assert_eq!(some.len(), 6);
        let spans = |markers: &[Marker]| markers.iter().map(|m| m.span.clone()).collect::<Vec<_>>();
        assert_eq!(spans(&some), spans(&scan(&text)[..6]));
        assert_eq!(scan_at_most(&text, 5_000).len(), 2_000);
    }

    #[test]
    fn both_spec_forms_are_found() {
        let text = "![a cat](<|asset://a1/content/image|>)\n![a cat](<|{\"asset_id\":\"a1\",\"field_path\":[\"content\",\"image\"]}|>)";
        let markers = scan(text);
        assert_eq!(markers.len(), 2);
        let want = AssetRef::new("a1").child("content").child("image");
        for m in &markers {
            assert_eq!(m.reference.as_ref().unwrap(), &want);
        }
        assert_eq!(
            (markers[0].form, markers[1].form),
            (MarkerForm::Url, MarkerForm::Json)
        );
        assert_eq!(
            &text[markers[0].span.clone()],
            "<|asset://a1/content/image|>"
        );
    }

    #[test]
    fn json_strings_with_braces_bars_and_escapes() {
        let text = r#"x <| {"asset_id": "a|>b", "field_path": ["}", "q\"|>", 3]} |> y"#;
        let markers = scan(text);
        assert_eq!(markers.len(), 1);
        let r = markers[0].reference.as_ref().unwrap();
        assert_eq!(r.asset_id, "a|>b");
        assert_eq!(
            r.field_path,
            vec!["}".into(), "q\"|>".into(), PathSegment::Index(3)]
        );
        assert_eq!(markers[0].span.end, text.len() - 2);
    }

    #[test]
    fn white_space_inside_is_allowed_and_outside_kept() {
        assert_eq!(
            spans("a <|  asset://a1/x \n|> b"),
            [("<|  asset://a1/x \n|>", true)]
        );
    }

    #[test]
    fn code_is_skipped() {
        let text = "```\n<|asset://in/fence|>\n```\n`<|asset://in/span|>` ``a ` <|asset://in/double|> `` <|asset://out/x|>\n~~~~ rust\n<|asset://in/tilde|>\n~~~\n~~~~\nafter <|asset://out/y|>";
        let found: Vec<_> = spans(text).into_iter().map(|(s, _)| s).collect();
        assert_eq!(found, ["<|asset://out/x|>", "<|asset://out/y|>"]);
        // An unclosed fence runs to the end; an unclosed backtick is literal.
        assert!(scan("```\n<|asset://a/b|>").is_empty());
        assert_eq!(spans("a ` <|asset://a/b|>").len(), 1);
        // A backtick run is not closed across a blank line.
        assert_eq!(spans("`a\n\n<|asset://a/b|> `").len(), 1);
        // Indented by four spaces: not a fence.
        assert_eq!(spans("    ```\n<|asset://a/b|>").len(), 1);
        // A fence interrupts a paragraph: a backtick run before it is not closed by the fence,
        // so the fenced marker is skipped and the one after the block is found (the run used
        // to close at the opening fence, the closing fence then opened a block to the end).
        let found: Vec<_> =
            spans("Use ``` to open a block:\n```\n<|asset://a/x|>\n```\nSee <|asset://a/y|>")
                .into_iter()
                .map(|(s, _)| s)
                .collect();
        assert_eq!(found, ["<|asset://a/y|>"]);
    }

    #[test]
    fn malformed_markers_are_reported_not_swallowing_later_ones() {
        let got =
            spans("<|nope|> <|asset://a1?x|> <| {\"asset_id\": 1} |> <|{bad json|> <|asset://ok|>");
        assert_eq!(
            got,
            [
                ("<|nope|>", false),
                ("<|asset://a1?x|>", false),
                ("<| {\"asset_id\": 1} |>", false),
                ("<|{bad json|>", false),
                ("<|asset://ok|>", true),
            ]
        );
        assert_eq!(
            spans("<|asset://a <|asset://b|>"),
            [("<|", false), ("<|asset://b|>", true)]
        );
        assert_eq!(spans("tail <|asset://a"), [("<|", false)]);
        assert_eq!(
            spans("<|{\"asset_id\":\"a\",\"field_path\":[]} oops"),
            [("<|", false)]
        );
        assert_eq!(spans("<||>"), [("<||>", false)]);
        let m = scan("<|asset://a");
        assert!(matches!(
            m[0].reference,
            Err(RefsError::UnterminatedMarker { .. })
        ));
    }

    #[test]
    fn no_nesting() {
        // The JSON form ends at its |>; a "<|" inside a JSON string is just text.
        let got = spans(r#"<|{"asset_id":"<|x","field_path":[]}|>"#);
        assert_eq!(got.len(), 1);
        assert!(got[0].1);
    }

    /// Markers as comparable facts: span, form and the reference or error, spelled out.
    fn facts(markers: Vec<Marker>) -> Vec<(Range<usize>, MarkerForm, String)> {
        markers
            .into_iter()
            .map(|m| (m.span, m.form, format!("{:?}", m.reference)))
            .collect()
    }

    /// Checks that every `<|` in `text` (`opens` of them, two bytes each from the start) is
    /// reported alone as unterminated, before the next one or the end of the text.
    fn assert_all_unterminated(text: &str, opens: &[usize]) {
        let markers = scan(text);
        assert_eq!(markers.len(), opens.len());
        for (i, (m, &open)) in markers.iter().zip(opens).enumerate() {
            assert_eq!(m.span, open..open + 2, "marker {i}");
            let before = if i + 1 == opens.len() {
                "the end of the text"
            } else {
                "the next \"<|\""
            };
            assert!(
                matches!(m.reference, Err(RefsError::UnterminatedMarker { before: b }) if b == before),
                "marker {i}: {:?}",
                m.reference
            );
        }
    }

    // The adversarial inputs below took seconds to minutes under the former scanner, which
    // searched to the end of the text for "|>" at every "<|" (see `scan_oracle`); they assert
    // behaviour only, and stay fast because the scan is linear.

    #[test]
    fn many_openers_without_a_closer() {
        let n = 100_000;
        let text = "<|".repeat(n);
        let opens: Vec<usize> = (0..n).map(|i| 2 * i).collect();
        assert_all_unterminated(&text, &opens);
        // A closer at the very end belongs to the last opener only.
        let text = format!("{}asset://a/b|>", "<|".repeat(n));
        let markers = scan(&text);
        assert_eq!(markers.len(), n);
        assert_eq!(&text[markers[n - 1].span.clone()], "<|asset://a/b|>");
        assert!(markers[n - 1].reference.is_ok());
        assert!(markers[..n - 1].iter().all(|m| m.span.len() == 2));
    }

    #[test]
    fn many_json_openers_without_a_closer() {
        let n = 60_000;
        let text = "<|{".repeat(n);
        let opens: Vec<usize> = (0..n).map(|i| 3 * i).collect();
        assert_all_unterminated(&text, &opens);
    }

    #[test]
    fn openers_inside_a_long_json_string() {
        // The first marker's JSON value reads past every later "<|" (they are inside its
        // string), then lacks its "|>"; each later "<|" is then unterminated in turn.
        let n = 60_000;
        let text = format!("<|{{\"k\":\"{}\"}} oops", "<|".repeat(n));
        let mut opens = vec![0];
        opens.extend((0..n).map(|i| 8 + 2 * i));
        assert_all_unterminated(&text, &opens);
    }

    #[test]
    fn many_unclosed_backtick_runs_of_different_lengths() {
        // Runs of 1, 2, …, 1000 backticks in one paragraph: none is closed (no two have the
        // same length), so all are literal text and the marker after them is found.
        let mut text: String = (1..=1000).map(|n| "`".repeat(n) + " ").collect();
        text.push_str("<|asset://a/b|>\n\n`closed <|asset://x|>` <|asset://c|>");
        let found: Vec<_> = spans(&text).into_iter().map(|(s, _)| s).collect();
        assert_eq!(found, ["<|asset://a/b|>", "<|asset://c|>"]);
        // The same runs, each closed by its twin after the paragraph's end, stay unclosed.
        let twins: String = (1..=300).map(|n| "`".repeat(n) + " ").collect();
        let text = format!("{twins}<|asset://a|>\n\n{twins}<|asset://b|>");
        assert_eq!(spans(&text).len(), 2);
    }

    /// Marker soup: every token that can start, end or hide a marker.
    const SOUP: &str = "(<\\||\\|>|\\{|\\}|\"|:|,|\\[|\\]|\\\\|`|``|```|~~~|\n|\n\n| |\t|a|0|asset://a/b|asset_id|field_path|\\{\"asset_id\":\"a\",\"field_path\":\\[\\]\\})";

    proptest! {
        #[test]
        fn same_markers_as_the_former_scanner(
            text in proptest::string::string_regex(&format!("{SOUP}{{0,80}}")).unwrap()
        ) {
            prop_assert_eq!(facts(scan(&text)), facts(crate::scan_oracle::scan(&text)));
        }

        #[test]
        fn same_markers_as_the_former_scanner_on_any_text(text in ".{0,200}") {
            prop_assert_eq!(facts(scan(&text)), facts(crate::scan_oracle::scan(&text)));
        }

        #[test]
        fn never_panics(text in ".{0,200}") {
            for m in scan(&text) {
                prop_assert!(text.get(m.span.clone()).is_some());
            }
        }

        #[test]
        fn never_panics_on_marker_soup(text in "([<|>`{}\"~ \na:/\\\\]|asset://){0,60}") {
            let markers = scan(&text);
            let mut last = 0;
            for m in markers {
                prop_assert!(m.span.start >= last, "spans overlap");
                prop_assert!(text.get(m.span.clone()).is_some());
                last = m.span.end;
            }
        }

        #[test]
        fn text_without_markers_has_none(text in "[^<]{0,200}") {
            prop_assert!(scan(&text).is_empty());
        }
    }
}
