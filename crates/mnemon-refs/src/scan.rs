//! Finding `<|…|>` markers in message text (spec/assets.md §6).
//!
//! Decisions where the spec is silent:
//! - Code is recognised as CommonMark does: a fence is a line indented by at most three spaces
//!   that starts with at least three backticks or tildes, and runs to a closing line of the same
//!   character at least as long (or to the end of the text); an inline code span is a run of N
//!   backticks closed by the next run of exactly N backticks in the same paragraph (an unclosed
//!   run is literal text).
//! - A malformed marker is reported with the span from its `<|` to the `|>` that ends it; when
//!   no `|>` ends it before the next `<|` (markers do not nest), only the `<|` is reported and
//!   scanning goes on from the next `<|`, so one typo never hides a later marker.

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
/// skipped. Never panics.
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
    let bytes = text.as_bytes();
    let mut markers = Vec::new();
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
            Some(b'`') => i = code_span_end(bytes, j),
            _ if bytes.get(j..j + 2) == Some(OPEN) => {
                let (marker, next) = parse_marker(text, j);
                markers.push(marker);
                i = next;
            }
            _ => i = j + 1,
        }
    }
    markers
}

/// If a fence opens at `start` (a line start), the index just past its block.
fn fenced_block_end(bytes: &[u8], start: usize) -> Option<usize> {
    let (fence_char, fence_len, after) = fence_at(bytes, start)?;
    if fence_char == b'`' {
        // A backtick fence's info string may not contain backticks.
        let line_end = line_end(bytes, after);
        if bytes.get(after..line_end)?.contains(&b'`') {
            return None;
        }
    }
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

/// The index after the inline code span opening at `start`, or after the backtick run if it is
/// not closed in the same paragraph.
fn code_span_end(bytes: &[u8], start: usize) -> usize {
    let run = |at: usize| {
        bytes
            .get(at..)
            .map_or(0, |r| r.iter().take_while(|&&b| b == b'`').count())
    };
    let n = run(start);
    let mut k = start + n;
    let mut blank_candidate = false;
    while let Some(&b) = bytes.get(k) {
        match b {
            b'`' => {
                let m = run(k);
                if m == n {
                    return k + m;
                }
                k += m;
                blank_candidate = false;
            }
            b'\n' if blank_candidate => break,
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
    start + n
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

fn malformed(span: Range<usize>, form: MarkerForm, detail: String) -> Marker {
    Marker {
        span,
        form,
        reference: Err(RefsError::MalformedMarker { detail }),
    }
}

/// Where a marker without a usable content ends: at the first `|>` if it comes before the next
/// `<|` (reported with `detail`); otherwise only its `<|` is reported, as unterminated. Returns
/// the marker and where to resume.
fn bad_marker(
    text: &str,
    open: usize,
    from: usize,
    form: MarkerForm,
    detail: String,
) -> (Marker, usize) {
    let bytes = text.as_bytes();
    let close = find(bytes, from, CLOSE);
    let reopen = find(bytes, open + 2, OPEN);
    match (close, reopen) {
        (Some(c), r) if r.is_none_or(|r| c < r) => (malformed(open..c + 2, form, detail), c + 2),
        (_, r) => {
            let before = if r.is_some() {
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
                r.unwrap_or(bytes.len()),
            )
        }
    }
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
    let close = find(bytes, k, CLOSE);
    let reopen = find(bytes, k, OPEN);
    let Some(close) = close.filter(|c| reopen.is_none_or(|r| *c < r)) else {
        return bad_marker(text, open, k, MarkerForm::Url, String::new());
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

    proptest! {
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
