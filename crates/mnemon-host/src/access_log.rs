//! One structured log line per request (docs/reference/host.md#operation): method, path, status,
//! latency and the number of bits returned. Never the body, the query string or any header, so
//! tokens and embeddings cannot reach the log.

use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;

use crate::response::BitCount;

/// Logs the request at `info` under the target `mnemon_host::access`.
pub(crate) async fn log_request(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = req.method().clone();
    // The path only: a query string may carry a token even though the host ignores it. Long
    // paths are cut, so a client cannot make one log line as large as its request.
    let full_path = req.uri().path();
    let path = capped(full_path);
    let path_len = full_path.len();
    let response = next.run(req).await;
    let status = response.status().as_u16();
    let latency_us = started.elapsed().as_micros() as u64;
    match response.extensions().get::<BitCount>() {
        Some(BitCount(bits)) => tracing::info!(
            target: "mnemon_host::access",
            %method, %path, path_len, status, latency_us, bits, "request"
        ),
        None => tracing::info!(
            target: "mnemon_host::access",
            %method, %path, path_len, status, latency_us, "request"
        ),
    }
    response
}

/// The most bytes of a path an access-log line records.
pub(crate) const MAX_LOGGED_PATH: usize = 256;

/// `path` cut to [`MAX_LOGGED_PATH`] bytes on a character boundary, marked with `…` when cut.
fn capped(path: &str) -> String {
    if path.len() <= MAX_LOGGED_PATH {
        return path.to_owned();
    }
    let mut end = MAX_LOGGED_PATH;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn logged_paths_are_capped(path in ".{0,400}") {
            let logged = capped(&path);
            prop_assert!(logged.len() <= MAX_LOGGED_PATH + '…'.len_utf8());
            if path.len() <= MAX_LOGGED_PATH {
                prop_assert_eq!(logged, path);
            } else {
                prop_assert!(path.starts_with(logged.trim_end_matches('…')));
            }
        }
    }
}
