//! The Mnemon inspector (docs/reference/inspector.md): a web page to see and search what agents
//! remember — sessions and their messages, assets and their references, artifacts and the prompt
//! block they load into, library answers, the server's status.
//!
//! It is three hand-written files (HTML, CSS, vanilla JavaScript) compiled into the binary with
//! `include_str!`: no framework, no CDN, no front-end build step, so it works offline and what
//! ships is what is in `assets/`. The page talks only to the `/v1` REST API
//! (docs/reference/rest.md) with `fetch`, so it runs the same operations under the same keys as
//! every other client: an API key entered once per browser session is kept in `sessionStorage`
//! and sent as `Authorization: Bearer`, and a read key cannot change anything because the API
//! refuses it.
//!
//! [`router`] serves the files under `/ui/`; the server merges it beside its REST routes. Every
//! response under `/ui` carries [`CONTENT_SECURITY_POLICY`] and `X-Content-Type-Options:
//! nosniff`, and the script inserts every value it shows with `textContent` or
//! `createElement`, never as markup: a stored `<script>` in a message renders as text.

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

/// The Content-Security-Policy of every `/ui` response: only the inspector's own script and
/// style, `fetch` to its own origin, images from itself or from `data:`/`blob:` URLs (asset
/// previews are blob URLs), no frames, forms, plugins or base URL changes.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The path prefix the inspector is served under.
pub const PREFIX: &str = "/ui/";

/// The page: markup only, no inline script or style (the policy forbids both).
const INDEX_HTML: &str = include_str!("../assets/index.html");
/// The whole application.
const APP_JS: &str = include_str!("../assets/app.js");
/// Its styles.
const APP_CSS: &str = include_str!("../assets/app.css");

/// The inspector's routes: `GET /ui` (redirects to `/ui/`), `GET /ui/` (the page),
/// `GET /ui/app.js`, `GET /ui/app.css`, and a 404 for any other path under `/ui/`, all with the
/// security headers. It sets no fallback, so it can be merged into the host's router
/// (`mnemon_host::Host::with_routes`).
pub fn router() -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent(PREFIX) }))
        .route(
            "/ui/",
            get(|| async { file(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/index.html",
            get(|| async { file(INDEX_HTML, "text/html; charset=utf-8") }),
        )
        .route(
            "/ui/app.js",
            get(|| async { file(APP_JS, "text/javascript; charset=utf-8") }),
        )
        .route(
            "/ui/app.css",
            get(|| async { file(APP_CSS, "text/css; charset=utf-8") }),
        )
        .route("/ui/{*rest}", get(not_found))
        .layer(axum::middleware::map_response(secure))
}

/// One of the compiled-in files.
fn file(body: &'static str, content_type: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // The files change only with the binary; `no-cache` makes a browser revalidate, so an
    // upgraded server is never shown with an old script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Any other path under `/ui/`.
async fn not_found() -> Response {
    let mut response = (
        StatusCode::NOT_FOUND,
        "there is no such inspector file; open /ui/",
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Adds the security headers to every inspector response, errors included.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inline script or style would be refused by the policy, and event handler attributes are
    /// inline script: the page must have none, so everything it does is in `app.js`.
    #[test]
    fn the_page_has_no_inline_script_or_style() {
        let html = INDEX_HTML.to_ascii_lowercase();
        assert!(html.contains("<script src=\"app.js\""));
        assert_eq!(html.matches("<script").count(), 1);
        assert!(!html.contains("<style"));
        assert!(!html.contains(" style="));
        let handler = html.split(" on").skip(1).any(|after| {
            let name: String = after
                .chars()
                .take_while(char::is_ascii_alphabetic)
                .collect();
            !name.is_empty() && after[name.len()..].starts_with('=')
        });
        assert!(!handler, "an on… attribute is inline script");
        assert!(!html.contains("http://") && !html.contains("https://"));
    }

    /// Data reaches the page only through `textContent` and `createElement`: the script never
    /// assigns markup.
    #[test]
    fn the_script_never_inserts_markup() {
        for forbidden in [
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
            "setAttribute('on",
            "http://",
            "https://",
        ] {
            assert!(!APP_JS.contains(forbidden), "app.js uses {forbidden}");
        }
    }

    #[test]
    fn the_policy_is_strict() {
        for part in [
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
        ] {
            assert!(CONTENT_SECURITY_POLICY.contains(part));
        }
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
