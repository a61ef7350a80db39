//! One structured log line per request (spec §12.6): method, path, status, latency and the
//! number of bits returned. Never the body, the query string or any header, so tokens and
//! embeddings cannot reach the log.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::response::BitCount;

/// Logs the request at `info` under the target `mnemon_host::access`.
pub(crate) async fn log_request(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    // The path only: a query string may carry a token even though the host ignores it.
    let path = req.uri().path().to_owned();
    let response = next.run(req).await;
    let status = response.status().as_u16();
    let latency_us = started.elapsed().as_micros() as u64;
    match response.extensions().get::<BitCount>() {
        Some(BitCount(bits)) => tracing::info!(
            target: "mnemon_host::access",
            %method, %path, status, latency_us, bits, "request"
        ),
        None => tracing::info!(
            target: "mnemon_host::access",
            %method, %path, status, latency_us, "request"
        ),
    }
    response
}
