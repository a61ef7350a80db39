//! The REST error shape (docs/reference/rest.md#errors): `{"error": {"code", "message"}}` with
//! the status of the error's kind.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use mnemon_host::LimitRejection;
use mnemon_ops::{ErrorKind, OpsError};

/// A failed REST request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable machine code.
    pub code: &'static str,
    /// What went wrong and what to do.
    pub message: String,
    /// Seconds for `Retry-After` (503 from a limit).
    pub retry_after: Option<u32>,
}

impl RestError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> RestError {
        RestError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 500, with the details logged and not sent.
    pub(crate) fn internal(detail: &dyn std::fmt::Display) -> RestError {
        tracing::error!(%detail, "request failed");
        RestError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the server's log has the details",
        )
    }
}

/// The status of an operation error's kind.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<OpsError> for RestError {
    fn from(error: OpsError) -> Self {
        let status = status_of(error.kind());
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            // The code stays (`artifact_content_missing` says what kind of fault it is,
            // docs/reference/rest.md#errors); the details go to the log only.
            let mut refused = RestError::internal(&error);
            refused.code = error.code();
            return refused;
        }
        if let Some(withheld) = error.withheld_message() {
            // Paths, database hosts and users, the embedder's endpoint: the log's, not every
            // key holder's (`OpsError::withheld_message`).
            tracing::warn!(%error, "a store or the embedder is unavailable");
            return RestError::new(status, error.code(), withheld);
        }
        RestError::new(status, error.code(), error.to_string())
    }
}

impl From<LimitRejection> for RestError {
    fn from(rejection: LimitRejection) -> Self {
        let code = match rejection.status {
            StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
            StatusCode::REQUEST_TIMEOUT => "body_timeout",
            StatusCode::SERVICE_UNAVAILABLE => "busy",
            _ => "invalid_body",
        };
        let message = match rejection.status {
            StatusCode::PAYLOAD_TOO_LARGE => {
                "the request body is larger than the server's limit (--max-body-bytes); send \
                 less, or put large binary content with PUT /v1/assets/{id}/content"
                    .to_owned()
            }
            _ => rejection.message,
        };
        RestError {
            status: rejection.status,
            code,
            message,
            retry_after: rejection.retry_after,
        }
    }
}

impl IntoResponse for RestError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, body.to_string()).into_response();
        // For the ring of recent errors (`GET /v1/status`), which cannot read the body.
        response.extensions_mut().insert(crate::status::ErrorNote {
            code: self.code,
            message: self.message,
        });
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.status == StatusCode::UNAUTHORIZED {
            // RFC 6750: a 401 names the scheme the client must use.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mnemon\""),
            );
        }
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
