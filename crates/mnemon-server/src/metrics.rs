//! `GET /metrics` (docs/reference/rest.md#metrics): Prometheus text format for every route of
//! the composed app (the Polymath `POST /` and the host's routes, REST, MCP, inspector; paths no
//! route serves as `unmatched`): requests by method, route and status, a latency histogram per
//! route, and the requests in flight. Labels are route *patterns* (`/v1/assets/{asset_id}`),
//! never concrete paths, keys or namespaces, so nothing secret is exposed and the number of
//! series stays bounded.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

/// The latency histogram's upper bounds, in seconds.
const BOUNDS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// One route's latencies.
#[derive(Default)]
struct Histogram {
    /// Counts per bound (not cumulative); the last is above every bound.
    buckets: [u64; BOUNDS.len() + 1],
    sum: f64,
    count: u64,
}

/// The counters; shared by every request.
#[derive(Default)]
pub(crate) struct Metrics {
    in_flight: AtomicI64,
    /// (method, route, status) → requests.
    requests: Mutex<BTreeMap<(&'static str, String, u16), u64>>,
    /// route → latencies.
    latency: Mutex<BTreeMap<String, Histogram>>,
}

/// The method as a label: the standard ones, else `other` (extension methods are unbounded).
pub(crate) fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}

/// The route pattern of a request (`/mcp` for everything under the MCP endpoint).
pub(crate) fn route_label(request: &Request) -> String {
    match request.extensions().get::<MatchedPath>() {
        Some(path) if path.as_str().starts_with("/mcp") => "/mcp".to_owned(),
        Some(path) => path.as_str().to_owned(),
        None => "unmatched".to_owned(),
    }
}

impl Metrics {
    fn record(&self, method: &'static str, route: String, status: u16, seconds: f64) {
        *self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry((method, route.clone(), status))
            .or_default() += 1;
        let mut latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        let histogram = latency.entry(route).or_default();
        let bucket = BOUNDS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(BOUNDS.len());
        if let Some(count) = histogram.buckets.get_mut(bucket) {
            *count += 1;
        }
        histogram.sum += seconds;
        histogram.count += 1;
    }

    /// The Prometheus text exposition (format 0.0.4).
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP mnemon_http_requests_total HTTP requests answered, by method, route pattern and status.\n\
             # TYPE mnemon_http_requests_total counter"
        );
        for ((method, route, status), count) in self
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let _ = writeln!(
                out,
                "mnemon_http_requests_total{{method=\"{method}\",route=\"{}\",status=\"{status}\"}} {count}",
                escape(route)
            );
        }
        let _ = writeln!(
            out,
            "# HELP mnemon_http_request_duration_seconds Time to answer a request (until its headers), by route pattern.\n\
             # TYPE mnemon_http_request_duration_seconds histogram"
        );
        for (route, histogram) in self
            .latency
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            let route = escape(route);
            let mut cumulative = 0;
            for (bound, count) in BOUNDS.iter().zip(histogram.buckets.iter()) {
                cumulative += count;
                let _ = writeln!(
                    out,
                    "mnemon_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{bound}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "mnemon_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}\n\
                 mnemon_http_request_duration_seconds_sum{{route=\"{route}\"}} {}\n\
                 mnemon_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                histogram.count, histogram.sum, histogram.count
            );
        }
        let _ = writeln!(
            out,
            "# HELP mnemon_http_requests_in_flight Requests being answered now.\n\
             # TYPE mnemon_http_requests_in_flight gauge\n\
             mnemon_http_requests_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        out
    }
}

/// A label value with `\`, `"` and line breaks escaped, as the text format requires.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Counts a request and its latency.
pub(crate) async fn track(
    State(metrics): State<Arc<Metrics>>,
    request: Request,
    next: Next,
) -> Response {
    let method = method_label(request.method());
    let route = route_label(&request);
    metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    let started = Instant::now();
    let response = next.run(request).await;
    metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    metrics.record(
        method,
        route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_is_cumulative_and_labels_are_escaped() {
        let metrics = Metrics::default();
        metrics.record("GET", "/v1/a\"b".to_owned(), 200, 0.002);
        metrics.record("GET", "/v1/a\"b".to_owned(), 200, 10.0);
        let text = metrics.render();
        assert!(
            text.contains(
                "mnemon_http_requests_total{method=\"GET\",route=\"/v1/a\\\"b\",status=\"200\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains("le=\"0.001\"} 0\n"), "{text}");
        assert!(text.contains("le=\"0.0025\"} 1\n"), "{text}");
        assert!(text.contains("le=\"5\"} 1\n"), "{text}");
        assert!(text.contains("le=\"+Inf\"} 2\n"), "{text}");
        assert!(
            text.contains("mnemon_http_requests_in_flight 0\n"),
            "{text}"
        );
    }
}
