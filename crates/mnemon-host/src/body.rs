//! Turning a request body into query arguments (docs/reference/host.md#requests).

use std::future::poll_fn;
use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, HttpBody};
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{HeaderMap, header};
use serde_json::{Map, Value};

use crate::limits::BodyReservation;
use crate::response::ApiError;

/// How a body is read, from its media type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Json,
    Form,
    Multipart,
    /// Any other or no media type: the body is ignored.
    Ignored,
}

fn body_kind(headers: &HeaderMap) -> BodyKind {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return BodyKind::Ignored;
    };
    // Parameters (charset, boundary) do not choose the parser.
    let essence = value.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        BodyKind::Json
    } else if essence.eq_ignore_ascii_case("application/x-www-form-urlencoded") {
        BodyKind::Form
    } else if essence.eq_ignore_ascii_case("multipart/form-data") {
        BodyKind::Multipart
    } else {
        BodyKind::Ignored
    }
}

/// The declared body length, when the client sent a valid `Content-Length`.
pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads the query arguments of a `POST /`. Bodies over `max_bytes` fail with 413, refused on
/// their `Content-Length` before any byte is read when the client declared one; bodies that take
/// longer than `timeout` to arrive fail with 408. The memory the body takes is held against the
/// host's shared body budget through `reservation` (503 when there is no room in time), which
/// the caller keeps until the request is answered.
pub(crate) async fn read_args(
    req: Request,
    max_bytes: usize,
    timeout: Duration,
    reservation: &mut BodyReservation<'_>,
) -> Result<Map<String, Value>, ApiError> {
    let declared = content_length(req.headers());
    if declared.is_some_and(|n| n > max_bytes as u64) {
        linger(req.into_body(), timeout);
        return Err(ApiError::too_large());
    }
    let kind = body_kind(req.headers());
    if kind == BodyKind::Ignored {
        linger(req.into_body(), timeout);
        return Ok(Map::new());
    }
    let (parts, body) = req.into_parts();
    let bytes = tokio::time::timeout(
        timeout,
        read_limited(body, max_bytes, declared, reservation, timeout),
    )
    .await
    .map_err(|_| ApiError::body_timeout())??;
    match kind {
        BodyKind::Json => json_args(&bytes),
        BodyKind::Form => Ok(form_args(&bytes)),
        BodyKind::Multipart => multipart_args(Request::from_parts(parts, Body::from(bytes))).await,
        BodyKind::Ignored => Ok(Map::new()),
    }
}

/// Collects the body, failing with 413 as soon as it grows past `max_bytes` (for chunked
/// bodies, or a `Content-Length` that understates the body). Nothing is allocated before the
/// first byte arrives, so a client that declares 2 MiB and sends nothing holds nothing; then
/// the buffer grows with what arrives, doubling from [`FIRST_BUFFER`] up to the declared length
/// (never past it, nor past `max_bytes`), and each allocation is covered by `reservation`
/// first. So a client trickling a large declared body holds about twice what it sent, not the
/// whole declared length (which let a few slow clients take the shared budget from every
/// other body). A body refused part-way (too large, or no room in the budget) is left to
/// [`linger`].
pub(crate) async fn read_limited(
    mut body: Body,
    max_bytes: usize,
    declared: Option<u64>,
    reservation: &mut BodyReservation<'_>,
    timeout: Duration,
) -> Result<Vec<u8>, ApiError> {
    let declared = declared.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut buf = Vec::new();
    while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("could not read the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            let len = buf.len() + data.len();
            if len > max_bytes {
                linger(body, timeout);
                return Err(ApiError::too_large());
            }
            if len > buf.capacity() {
                // Doubling keeps the copies few (five for 2 MiB); the budget covers the whole
                // allocation. The declared length caps the growth, it is not taken at once.
                let doubled = buf.capacity().saturating_mul(2).max(FIRST_BUFFER);
                let cap = if declared > 0 {
                    declared.max(len)
                } else {
                    max_bytes
                };
                let capacity = len.max(doubled.min(cap)).min(max_bytes);
                if let Err(full) = reservation.cover(capacity).await {
                    linger(body, timeout);
                    return Err(full);
                }
                buf.reserve_exact(capacity - buf.len());
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

/// The first allocation of a body's buffer (or its declared length, when smaller).
const FIRST_BUFFER: usize = 64 * 1024;

/// How many bytes of a refused or ignored body are read and thrown away after the answer.
const LINGER_BYTES: usize = 16 << 20;

/// Reads and discards what is left of a body the host will not use (over the limit, or of a
/// media type it ignores), for at most `timeout` and [`LINGER_BYTES`], on a task of its own.
///
/// Why: the answer (413, or the result) is sent at once, but a client is often still writing
/// its body. Closing the connection with the body unread makes the kernel reset it, and the
/// client then sees a broken pipe or a reset instead of the answer already sent to it
/// (docs/limits.md). Reading on keeps the connection orderly; nothing read is kept, so the
/// memory held is one frame, and the bounds stop a client that never finishes.
pub(crate) fn linger(mut body: Body, timeout: Duration) {
    if body.is_end_stream() {
        return;
    }
    let drain = async move {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            if let Ok(data) = frame.into_data() {
                seen = seen.saturating_add(data.len());
                if seen > LINGER_BYTES {
                    break;
                }
            }
        }
    };
    tokio::spawn(async move {
        // Running out of time only ends the draining; the connection then closes.
        let _ = tokio::time::timeout(timeout, drain).await;
    });
}

fn json_args(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("Failed to decode JSON object: {e}")))?;
    match value {
        Value::Object(map) if !map.is_empty() => Ok(map),
        Value::Object(_) | Value::Null => Err(ApiError::bad_request("No arguments provided")),
        _ => Err(ApiError::bad_request("JSON body must be an object")),
    }
}

/// Form fields as strings; the first value of a repeated key wins. Invalid UTF-8 after
/// percent-decoding is replaced by U+FFFD.
fn form_args(bytes: &[u8]) -> Map<String, Value> {
    mnemon_library::wire::arguments_from_pairs(form_urlencoded::parse(bytes))
}

/// Multipart fields as strings; parts with a filename (uploads) are ignored, and the first value
/// of a repeated name wins.
async fn multipart_args(req: Request) -> Result<Map<String, Value>, ApiError> {
    let bad = |e: &dyn std::fmt::Display| {
        ApiError::bad_request(format!("invalid multipart/form-data body: {e}"))
    };
    let mut multipart = Multipart::from_request(req, &())
        .await
        .map_err(|e| bad(&e.body_text()))?;
    let mut args = Map::new();
    while let Some(field) = multipart
        .next_field()
        .await
        .map_err(|e| bad(&e.body_text()))?
    {
        if field.file_name().is_some() {
            continue;
        }
        let Some(name) = field.name().map(str::to_owned) else {
            continue;
        };
        let value = field.text().await.map_err(|e| bad(&e.body_text()))?;
        if !args.contains_key(&name) {
            args.insert(name, Value::String(value));
        }
    }
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use proptest::prelude::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_str(content_type).unwrap(),
        );
        h
    }

    #[test]
    fn media_types_match_case_insensitively_and_ignore_parameters() {
        assert_eq!(body_kind(&headers("application/json")), BodyKind::Json);
        assert_eq!(
            body_kind(&headers("Application/JSON; charset=utf-8")),
            BodyKind::Json
        );
        assert_eq!(
            body_kind(&headers("application/x-www-form-urlencoded;charset=UTF-8")),
            BodyKind::Form
        );
        assert_eq!(
            body_kind(&headers("multipart/form-data; boundary=x")),
            BodyKind::Multipart
        );
        assert_eq!(body_kind(&headers("text/plain")), BodyKind::Ignored);
        assert_eq!(body_kind(&headers("application/jsonx")), BodyKind::Ignored);
        assert_eq!(body_kind(&HeaderMap::new()), BodyKind::Ignored);
    }

    #[test]
    fn form_first_value_wins_and_plus_is_a_space() {
        let args = form_args(b"count=2&count=3&q=a+b%2Bc&empty=");
        assert_eq!(args["count"], "2");
        assert_eq!(args["q"], "a b+c");
        assert_eq!(args["empty"], "");
        let keys: Vec<&String> = args.keys().collect();
        assert_eq!(keys, ["count", "q", "empty"]);
    }

    #[test]
    fn json_bodies() {
        assert_eq!(json_args(br#"{"count": 3}"#).unwrap()["count"], 3);
        let msg = |b: &[u8]| json_args(b).unwrap_err().message;
        assert_eq!(msg(b"null"), "No arguments provided");
        assert_eq!(msg(b"{}"), "No arguments provided");
        assert_eq!(msg(b"[1]"), "JSON body must be an object");
        assert_eq!(msg(b"\"x\""), "JSON body must be an object");
        assert!(msg(b"{").starts_with("Failed to decode JSON object: "));
        assert!(msg(b"").starts_with("Failed to decode JSON object: "));
    }

    proptest! {
        #[test]
        fn form_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let args = form_args(&bytes);
            prop_assert!(args.values().all(Value::is_string));
        }

        #[test]
        fn json_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = json_args(&bytes);
        }
    }
}
