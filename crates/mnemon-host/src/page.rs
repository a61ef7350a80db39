//! `GET /`: the small page where a person runs a query, as the reference host served, and the
//! answer the Polymath TypeScript client gets when it looks for the endpoint after an error.
//!
//! That client (`@polymath-ai/client`, `PolymathEndpoint.ask`) reads nothing of a failed
//! `POST`: on any non-2xx it fetches the same URL with `GET` to discover the endpoint, and when
//! that fetch fails too it throws a `DiscoveryError` whose message is the response's status
//! text and whose `data.text` is its body. So the host remembers each failed query for a few
//! seconds under its client (address and `User-Agent`), and a `GET /` that is not a page
//! navigation (its `Accept` has no `text/html`) from that client within that time gets the
//! error again: same status, the message as the reason phrase and the usual `{"error": …}`
//! body. Browsers navigating to `/` always get the page. See `docs/limits.md`.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::response::ApiError;

/// How long a failed query is kept for the client's discovery request, which follows at once.
const KEEP_ERRORS_FOR: Duration = Duration::from_secs(5);

/// The most errors kept, so a flood of bad requests cannot grow the list.
const MAX_KEPT_ERRORS: usize = 256;

/// The longest reason phrase sent.
const MAX_REASON_BYTES: usize = 512;

/// Who sent a request: a hash of the peer address and `User-Agent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientKey(u64);

impl ClientKey {
    pub(crate) fn new(peer: IpAddr, headers: &HeaderMap) -> ClientKey {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        peer.hash(&mut hasher);
        headers
            .get(header::USER_AGENT)
            .map(HeaderValue::as_bytes)
            .hash(&mut hasher);
        ClientKey(hasher.finish())
    }
}

struct Recent {
    key: ClientKey,
    at: Instant,
    error: ApiError,
}

/// Query errors of the last few seconds, by client.
#[derive(Default)]
pub(crate) struct RecentErrors {
    entries: Mutex<VecDeque<Recent>>,
}

impl RecentErrors {
    fn entries(&self) -> std::sync::MutexGuard<'_, VecDeque<Recent>> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        while entries
            .front()
            .is_some_and(|e| now.duration_since(e.at) > KEEP_ERRORS_FOR)
        {
            entries.pop_front();
        }
        entries
    }

    /// Remembers that `key`'s query failed with `error`.
    pub(crate) fn record(&self, key: ClientKey, error: &ApiError) {
        let mut entries = self.entries();
        if entries.len() >= MAX_KEPT_ERRORS {
            entries.pop_front();
        }
        entries.push_back(Recent {
            key,
            at: Instant::now(),
            error: error.clone(),
        });
    }

    /// The latest error of `key`, forgotten once taken.
    pub(crate) fn take(&self, key: ClientKey) -> Option<ApiError> {
        let mut entries = self.entries();
        let index = entries.iter().rposition(|e| e.key == key)?;
        entries.remove(index).map(|e| e.error)
    }
}

/// Whether a `GET` is a person's browser loading a page rather than a program's fetch.
pub(crate) fn wants_page(headers: &HeaderMap) -> bool {
    let navigates = headers
        .get("sec-fetch-mode")
        .is_some_and(|mode| mode.as_bytes().eq_ignore_ascii_case(b"navigate"));
    let accepts_html = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.to_ascii_lowercase().contains("text/html"));
    navigates || accepts_html
}

/// An earlier query error, answered again with its message as the reason phrase, which the
/// TypeScript client shows as the error's message.
pub(crate) fn replayed_error(error: ApiError) -> Response {
    let reason = reason_phrase(&error.message);
    let mut response = error.into_response();
    if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason.into_bytes()) {
        response.extensions_mut().insert(reason);
    }
    response
}

/// `message` as a reason phrase: printable ASCII only (others become `?`, line breaks spaces),
/// at most [`MAX_REASON_BYTES`] long.
fn reason_phrase(message: &str) -> String {
    let mut reason: String = message
        .chars()
        .map(|c| match c {
            ' '..='~' => c,
            '\n' | '\r' | '\t' => ' ',
            _ => '?',
        })
        .take(MAX_REASON_BYTES)
        .collect();
    if reason.trim().is_empty() {
        reason = "Error".to_owned();
    }
    reason
}

/// `text` with the characters that are special in HTML escaped.
pub(crate) fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// The page: a form that posts a query to `/`, prefilled with the served library's model. It
/// needs nothing but itself (no scripts, styles or images from elsewhere); the browser shows
/// the JSON result. `<link rel="polymath">` names `/` as the endpoint for discovering clients.
/// `links` (`HostOptions::page_links`) are listed under the heading.
pub(crate) fn index(model: &str, bits: usize, links: &[(String, String)]) -> Response {
    let model = escape_html(model);
    let links: String = links
        .iter()
        .map(|(href, text)| {
            format!(
                "<p><a href=\"{}\">{}</a></p>\n",
                escape_html(href),
                escape_html(text)
            )
        })
        .collect();
    let body = format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Polymath host</title>
<link rel="polymath" href="/">
<style>
body {{ font-family: sans-serif; max-width: 44rem; margin: 2rem auto; padding: 0 1rem; }}
label {{ display: block; margin-top: 0.8rem; }}
input, select, textarea {{ width: 100%; box-sizing: border-box; }}
button {{ margin-top: 1rem; }}
</style>
</head>
<body>
<h1>Polymath host</h1>
{links}<p>Serving {bits} bits embedded with <code>{model}</code>. Run a query: the result opens as
JSON. Leave the embedding empty for a random query vector.</p>
<form method="post" action="/" enctype="application/x-www-form-urlencoded">
<input type="hidden" name="version" value="1">
<label>Embedding model <input name="query_embedding_model" value="{model}"></label>
<label>Query embedding (base64 of little-endian float32)
<textarea name="query_embedding" rows="4"></textarea></label>
<label>Count <input name="count" type="number" value="5"></label>
<label>Count type <select name="count_type">
<option value="bit" selected>bit</option>
<option value="token">token</option>
</select></label>
<label>Omit <input name="omit" value="embedding"></label>
<label>Access token <input name="access_token" type="password" value=""></label>
<button type="submit">Query</button>
</form>
</body>
</html>
"#
    );
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(ip: [u8; 4], agent: &str) -> ClientKey {
        let mut headers = HeaderMap::new();
        headers.insert(header::USER_AGENT, HeaderValue::from_str(agent).unwrap());
        ClientKey::new(IpAddr::from(ip), &headers)
    }

    #[test]
    fn errors_are_kept_per_client_and_taken_once() {
        let recent = RecentErrors::default();
        let node = key([127, 0, 0, 1], "node");
        recent.record(node, &ApiError::bad_request("first"));
        recent.record(node, &ApiError::bad_request("second"));
        recent.record(
            key([127, 0, 0, 1], "curl"),
            &ApiError::bad_request("curl's"),
        );
        assert_eq!(recent.take(key([10, 0, 0, 1], "node")), None);
        assert_eq!(recent.take(node).unwrap().message, "second");
        assert_eq!(recent.take(node).unwrap().message, "first");
        assert_eq!(recent.take(node), None);
        for i in 0..2 * MAX_KEPT_ERRORS {
            recent.record(node, &ApiError::bad_request(i.to_string()));
        }
        assert_eq!(recent.entries().len(), MAX_KEPT_ERRORS);
    }

    #[test]
    fn pages_for_browsers_only() {
        let mut headers = HeaderMap::new();
        assert!(!wants_page(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("*/*"));
        assert!(!wants_page(&headers));
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("Text/HTML,application/xhtml+xml;q=0.9"),
        );
        assert!(wants_page(&headers));
        let mut navigation = HeaderMap::new();
        navigation.insert("sec-fetch-mode", HeaderValue::from_static("navigate"));
        assert!(wants_page(&navigation));
    }

    #[test]
    fn the_page_escapes_the_model() {
        let response = index("<script>alert('x')</script>&", 3, &[]);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
        assert_eq!(
            escape_html("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    proptest! {
        #[test]
        fn reason_phrases_are_always_valid(message in ".{0,700}") {
            let reason = reason_phrase(&message);
            prop_assert!(reason.len() <= MAX_REASON_BYTES);
            prop_assert!(hyper::ext::ReasonPhrase::try_from(reason.into_bytes()).is_ok());
        }

        #[test]
        fn escaped_text_has_no_markup(text in ".{0,200}") {
            let escaped = escape_html(&text);
            prop_assert!(!escaped.contains(['<', '>', '"', '\'']));
        }
    }
}
