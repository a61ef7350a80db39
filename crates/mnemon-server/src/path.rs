//! Path parameters (`/v1/assets/{asset_id}`, …) whose refusal has the REST error shape
//! (docs/reference/rest.md#errors): axum's own `Path` answers a segment that is not UTF-8
//! after percent-decoding (`/v1/assets/%FF`) with a plain-text 400, where every failure of
//! every `/v1` route is `{"error": {"code", "message"}}`.

use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::RestError;

/// The route's path parameters, as axum's `Path` reads them; refused as 400 `invalid_input`.
pub(crate) struct PathParams<T>(pub T);

impl<S, T> FromRequestParts<S> for PathParams<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = RestError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(params)) => Ok(PathParams(params)),
            Err(rejection) => Err(RestError::new(
                StatusCode::BAD_REQUEST,
                "invalid_input",
                format!(
                    "{}; ids in a path are UTF-8 text, percent-encoded where needed",
                    rejection.body_text()
                ),
            )),
        }
    }
}
