//! Routes composed beside the library endpoint ([`Host::with_routes`](crate::Host::with_routes)),
//! such as the REST API of `mnemon-server`. They are served by the same listener (connection
//! limit, header-read and idle timeouts), behind the same middleware (gzip, CORS, access log),
//! and share the host's request-body budget and request slots through [`RequestLimits`], so the
//! limits of docs/limits.md hold for the whole process, not per router.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use tokio::sync::OwnedSemaphorePermit;

use crate::body::{content_length, linger, read_limited};
use crate::limits::Limits;
use crate::response::ApiError;
use crate::source::Snapshot;

/// The host's shared limits, for handlers of composed routes: read a body under the body limit,
/// the body timeout and the shared body budget; hold one of the request slots while working.
#[derive(Clone)]
pub struct RequestLimits {
    pub(crate) limits: Arc<Limits>,
    pub(crate) max_body_bytes: usize,
    pub(crate) body_timeout: Duration,
}

impl std::fmt::Debug for RequestLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestLimits")
            .field("max_body_bytes", &self.max_body_bytes)
            .field("body_timeout", &self.body_timeout)
            .finish_non_exhaustive()
    }
}

/// Why a limit refused a request: the status (408, 413, 400 or 503), a message saying what to
/// do, and for 503 the seconds for `Retry-After`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRejection {
    /// The HTTP status.
    pub status: StatusCode,
    /// What happened and what to do.
    pub message: String,
    /// Seconds to wait before retrying (503 only).
    pub retry_after: Option<u32>,
}

impl From<ApiError> for LimitRejection {
    fn from(error: ApiError) -> Self {
        LimitRejection {
            status: error.status,
            message: error.message,
            retry_after: error.retry_after,
        }
    }
}

/// A request body read under the limits; its bytes stay counted against the shared body budget
/// until this is dropped.
#[derive(Debug)]
pub struct HeldBody {
    /// The body.
    pub bytes: Vec<u8>,
    _budget: Option<OwnedSemaphorePermit>,
}

/// One of the host's request slots (`--max-concurrent-queries`), held while a request works.
#[derive(Debug)]
pub struct RequestSlot(#[allow(dead_code)] OwnedSemaphorePermit);

impl RequestLimits {
    /// The most body bytes a request may send.
    pub fn max_body_bytes(&self) -> usize {
        self.max_body_bytes
    }

    /// Reads a whole body: 413 over the body limit (refused on `Content-Length` before any
    /// byte is read), 408 when it does not arrive within the body timeout, 503 when the shared
    /// body budget has no room in time.
    pub async fn read_body(
        &self,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<HeldBody, LimitRejection> {
        let declared = content_length(headers);
        if declared.is_some_and(|n| n > self.max_body_bytes as u64) {
            linger(body, self.body_timeout);
            return Err(ApiError::too_large().into());
        }
        let mut reservation = self.limits.body_reservation();
        let bytes = tokio::time::timeout(
            self.body_timeout,
            read_limited(
                body,
                self.max_body_bytes,
                declared,
                &mut reservation,
                self.body_timeout,
            ),
        )
        .await
        .map_err(|_| ApiError::body_timeout())??;
        self.limits.note_large(reservation.bytes());
        Ok(HeldBody {
            bytes,
            _budget: reservation.into_permit(),
        })
    }

    /// A request slot, waiting up to the queue timeout; 503 with `Retry-After` when none frees.
    pub async fn slot(&self) -> Result<RequestSlot, LimitRejection> {
        Ok(RequestSlot(self.limits.query_slot().await?))
    }
}

/// The library a host serves at one moment: requests keep the snapshot they started with while
/// a reload swaps in the next.
#[derive(Clone)]
pub struct ServedLibrary(pub(crate) Arc<Snapshot>);

impl std::fmt::Debug for ServedLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServedLibrary")
            .field("model", &self.0.library.model())
            .field("bits", &self.0.library.len())
            .finish()
    }
}

impl std::ops::Deref for ServedLibrary {
    type Target = mnemon_library::Library;

    fn deref(&self) -> &Self::Target {
        &self.0.library
    }
}
