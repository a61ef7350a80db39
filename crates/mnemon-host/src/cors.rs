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
///
/// Also refuses one whose `Host` is not a loopback name: admin routes answer loopback clients
/// only, and a page reaching the host through DNS rebinding (a name of its own resolving to
/// `127.0.0.1`, so its requests are same-origin) names its own host there.
pub(crate) async fn refuse_foreign_origin(req: Request, next: Next) -> Response {
    if is_cross_origin(req.headers()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "admin requests from web pages of other origins are refused",
        )
        .into_response();
    }
    if names_another_host(req.headers()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "admin requests must name the host localhost, 127.0.0.1 or [::1]",
        )
        .into_response();
    }
    next.run(req).await
}

/// Whether the request names a host other than `localhost`, `127.0.0.1` or `[::1]` (any
/// port). A request without `Host` names none: browsers always send one.
fn names_another_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST) else {
        return false;
    };
    let Ok(host) = host.to_str() else {
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    !is_loopback_name(name)
}

/// Whether `name` (a host without port or brackets) is one of the names a loopback server is
/// reached by: `localhost`, `127.0.0.1` or `::1`, in any case. A page reaching the server
/// through DNS rebinding names its own host instead.
pub fn is_loopback_name(name: &str) -> bool {
    ["localhost", "127.0.0.1", "::1"]
        .iter()
        .any(|loopback| name.eq_ignore_ascii_case(loopback))
}

/// Whether a browser sent this request for a web page of another origin. A browser that sends
/// `Sec-Fetch-Site` (every current one; pages cannot set it) is believed: anything but
/// `same-origin` (or `none`, typed by the user) is another origin, including another port of
/// the same host. Without it, an `Origin` other than this server's own (`http://` or
/// `https://` and the request's `Host`) is. The `Origin` is not compared when `Sec-Fetch-Site`
/// says `same-origin`: behind a reverse proxy the page's origin is the proxy's name while
/// `Host` may be the server's own address. Clients that are not browsers (curl, SDKs) send
/// neither header, so they pass.
pub fn is_cross_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site != "same-origin" && site != "none";
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
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
    !(own("http://") || own("https://"))
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
        ])));
        // Behind a proxy that does not forward its name: the browser's word decides.
        assert!(!is_cross_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "https://mnemon.example.com"),
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(is_cross_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "cross-site")
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
        for host in ["127.0.0.1:8080", "localhost", "LocalHost:1", "[::1]:8080"] {
            assert!(!names_another_host(&headers(&[("host", host)])), "{host}");
        }
        for host in [
            "rebind.evil.example:8080",
            "127.0.0.1.evil.example",
            "[::2]:1",
            "",
        ] {
            assert!(names_another_host(&headers(&[("host", host)])), "{host}");
        }
        assert!(!names_another_host(&HeaderMap::new()));
        assert!(is_admin_path("/admin/reload"));
        assert!(!is_admin_path("/administrator"));
    }
}
