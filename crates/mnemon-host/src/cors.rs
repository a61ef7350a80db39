//! CORS for any origin (spec §12.3): every response allows `*`, and `OPTIONS /` answers the
//! preflight with 204.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Adds `Access-Control-Allow-Origin: *` to every response, errors included.
pub(crate) async fn allow_any_origin(req: Request, next: Next) -> Response {
    let mut response = next.run(req).await;
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
