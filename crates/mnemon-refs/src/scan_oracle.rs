//! The scanner as it was before it was made linear (searching to the end of the text for `|>`
//! at every `<|`, and to the paragraph's end at every unclosed backtick run). Test-only: it is
//! the oracle the property tests compare [`crate::scan::scan`] against, so the faster scanner
//! provably finds the same markers with the same spans, forms and errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ops::Range;

use mnemon_types::AssetRef;

use crate::detect::{Detected, from_object};
use crate::error::RefsError;
use crate::scan::{Marker, MarkerForm};

const OPEN: &[u8] = b"<|";
const CLOSE: &[u8] = b"|>";

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')
}

/// The old [`crate::scan::scan`].
pub(crate) fn scan(text: &str) -> Vec<Marker> {
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
            b'\n' if crate::scan::fence_opening(bytes, k + 1).is_some() => break,
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
