//! JSON responses and the `{"error": …}` shape every failure uses
//! (docs/reference/host.md#responses).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// A failed request: its status and the message for `{"error": message}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    /// Seconds for a `Retry-After` header (503 when the host is busy).
    pub(crate) retry_after: Option<u32>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 503 with `Retry-After`: a limit of the host is reached for now (`docs/limits.md`).
    pub(crate) fn busy(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(crate::limits::RETRY_AFTER_SECS),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, message)
        }
    }

    /// 400: the caller's arguments or body are wrong.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 413: the body is over the limit.
    pub(crate) fn too_large() -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "request body too large")
    }

    /// 408: the body did not arrive in time.
    pub(crate) fn body_timeout() -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "request body not received in time",
        )
    }

    /// 500: a fault of the host. The details go to the log, never to the client.
    pub(crate) fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({ "error": self.message }).to_string();
        let mut response = json_response(self.status, body.into_bytes());
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// A response with an `application/json` body that is already serialised.
pub(crate) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The number of bits a query returned, attached to its response for the access log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BitCount(pub(crate) usize);
