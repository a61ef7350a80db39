//! CORS for any origin on the query endpoints (docs/reference/host.md#responses): their responses
//! allow `*`, and `OPTIONS /` answers the preflight with 204. Admin routes get no CORS at all and
//! refuse requests from another origin, so no web page can trigger a reload or read its answer.
//! Routes added with [`crate::Host::with_routes`] get no CORS either: they hold data a web page
//! of another origin must not read (docs/reference/rest.md#browsers).

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::response::ApiError;

/// Adds `Access-Control-Allow-Origin: *` to every response of the host's own routes outside
/// `/admin/`, errors included.
pub(crate) async fn allow_any_origin(req: Request, next: Next) -> Response {
    let admin = is_admin_path(req.uri().path());
    let mut response = next.run(req).await;
    if admin {
        return response;
    }
    response.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

/// Answers a CORS preflight: the methods the host serves, the headers the browser asked for, and
/// a one-day cache.
pub(crate) async fn preflight(headers: HeaderMap) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let out = response.headers_mut();
    out.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST, OPTIONS"),
    );
    if let Some(requested) = headers.get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        out.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
    }
    out.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("86400"),
    );
    // The echoed headers differ between preflights, so caches must key on them.
    out.insert(
        header::VARY,
        HeaderValue::from_static("Access-Control-Request-Headers"),
    );
    response
}

/// Whether `path` is an admin route (no CORS there).
fn is_admin_path(path: &str) -> bool {
    path == "/admin" || path.starts_with("/admin/")
}

/// Refuses with 403 a request sent by a web page of another origin: an `Origin` other than
/// this host's own (`http://<Host>`), or a browser's `Sec-Fetch-Site` saying another site.
/// Tools such as curl send neither, so they pass.
pub(crate) async fn refuse_foreign_origin(req: Request, next: Next) -> Response {
    if is_cross_origin(req.headers()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "admin requests from web pages of other origins are refused",
        )
        .into_response();
    }
    next.run(req).await
}

/// Whether a browser sent this request for a web page of another origin: an `Origin` other
/// than this server's own (`http://` or `https://` and the request's `Host`), or
/// `Sec-Fetch-Site` saying another site (or another origin of the same site, such as another
/// port of `localhost`). Clients that are not browsers (curl, SDKs) send neither header, so
/// they pass.
pub fn is_cross_origin(headers: &HeaderMap) -> bool {
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|site| site != "same-origin" && site != "none");
    let Some(origin) = headers.get(header::ORIGIN) else {
        return cross_site;
    };
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
    else {
        return true;
    };
    let own = |scheme: &str| {
        let origin = origin.as_bytes();
        origin.len() == scheme.len() + host.len()
            && origin
                .get(..scheme.len())
                .is_some_and(|s| s.eq_ignore_ascii_case(scheme.as_bytes()))
            && origin
                .get(scheme.len()..)
                .is_some_and(|h| h.eq_ignore_ascii_case(host.as_bytes()))
    };
    cross_site || !(own("http://") || own("https://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn foreign_origins_are_recognised() {
        assert!(!is_cross_origin(&headers(&[("host", "127.0.0.1:8080")])));
        assert!(!is_cross_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])));
        assert!(is_cross_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://evil.example")
        ])));
        assert!(is_cross_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "null")
        ])));
        assert!(is_cross_origin(&headers(&[(
            "origin",
            "http://127.0.0.1:8080"
        )])));
        assert!(is_cross_origin(&headers(&[(
            "sec-fetch-site",
            "cross-site"
        )])));
        assert!(!is_cross_origin(&headers(&[("sec-fetch-site", "none")])));
        // Served over TLS, the page's own origin is https.
        assert!(!is_cross_origin(&headers(&[
            ("host", "mnemon.internal:8443"),
            ("origin", "HTTPS://Mnemon.Internal:8443"),
            ("sec-fetch-site", "same-origin")
        ])));
        // Another port of the same host is another origin (the same site).
        assert!(is_cross_origin(&headers(&[
            ("host", "localhost:8080"),
            ("origin", "http://localhost:3000")
        ])));
        assert!(is_cross_origin(&headers(&[(
            "sec-fetch-site",
            "same-site"
        )])));
        assert!(is_cross_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080.evil.example")
        ])));
        assert!(is_admin_path("/admin/reload"));
        assert!(!is_admin_path("/administrator"));
    }
}
