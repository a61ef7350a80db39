//! `GET /v1/status` (docs/reference/rest.md#status): the server's version, its backend (no
//! secrets), the caller's namespace sizes, the configured limits, and the recent error
//! responses — a bounded ring in memory, so an operator sees what went wrong without the logs.
//!
//! The ring keeps, per error response, its time, method, route *pattern* (as `/metrics` labels
//! it: never the concrete path, which may hold ids), status, code and message; never a request
//! body or a header, so no key. Each entry remembers the namespace of the request's key: a
//! caller sees its own namespace's errors, and only an admin key also sees the errors of
//! requests that had no accepted key (401s, unknown routes).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use mnemon_db::Namespace;
use mnemon_host::HostOptions;
use mnemon_ops::status::{BackendStatus, Sizes};
use schemars::JsonSchema;
use serde::Serialize;

use crate::auth::{Principal, Role};

/// How many error responses the ring keeps (the oldest goes first).
pub(crate) const RECENT_ERRORS: usize = 50;

/// The longest message kept, in characters; longer ones are cut with `…`.
const MESSAGE_CHARS: usize = 500;

/// What a [`RestError`](crate::RestError) response says, put in its extensions for the ring.
#[derive(Debug, Clone)]
pub(crate) struct ErrorNote {
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

/// The namespace of the key a response answered, put in its extensions by the authorizer.
#[derive(Debug, Clone)]
pub(crate) struct AnsweredNamespace(pub(crate) Namespace);

/// One error response the server gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RecentError {
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The request's method.
    pub method: String,
    /// The route pattern (`/v1/assets/{asset_id}`), `unmatched` for paths no route serves.
    pub route: String,
    /// The HTTP status.
    pub status: u16,
    /// The error code (`http` when the answer had no Mnemon error body, e.g. from MCP).
    pub code: String,
    /// The error message (at most 500 characters).
    pub message: String,
    #[serde(skip)]
    #[schemars(skip)]
    namespace: Option<Namespace>,
}

/// The rings of recent error responses, one per namespace (and one for the answers of no
/// namespace: refused keys, unknown routes); shared by every request. One ring for all let a
/// caller of one namespace push another's errors out of its status with 50 failed requests.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    rings: Mutex<Rings>,
}

#[derive(Debug, Default)]
struct Rings {
    by_namespace: HashMap<Namespace, VecDeque<(u64, RecentError)>>,
    /// The answers of no namespace: never evicted as a whole.
    unattributed: VecDeque<(u64, RecentError)>,
    /// Numbers the entries in the order they were pushed: the order shown, whatever the
    /// clock did (two errors of one millisecond, a clock stepped back).
    next: u64,
}

/// How many namespaces' rings are kept at most: past it, the ring whose newest error is the
/// oldest goes (as many as the namespaces a server holds open by default).
const RING_NAMESPACES: usize = 256;

impl ErrorLog {
    fn push(&self, error: RecentError) {
        let mut rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
        let number = rings.next;
        rings.next += 1;
        let ring = match &error.namespace {
            Some(namespace) => rings.by_namespace.entry(namespace.clone()).or_default(),
            None => &mut rings.unattributed,
        };
        if ring.len() >= RECENT_ERRORS {
            ring.pop_front();
        }
        ring.push_back((number, error));
        if rings.by_namespace.len() > RING_NAMESPACES {
            let stalest = rings
                .by_namespace
                .iter()
                .min_by_key(|(_, ring)| ring.back().map_or(0, |(n, _)| *n))
                .map(|(namespace, _)| namespace.clone());
            if let Some(stalest) = stalest {
                rings.by_namespace.remove(&stalest);
            }
        }
    }

    /// The errors `principal` may see, newest first: the last [`RECENT_ERRORS`] of its
    /// namespace, and for an admin also the last [`RECENT_ERRORS`] of no namespace (each ring
    /// cut on its own, so neither pushes the other's out).
    pub(crate) fn visible_to(&self, principal: &Principal) -> Vec<RecentError> {
        let rings = self.rings.lock().unwrap_or_else(PoisonError::into_inner);
        let own = rings.by_namespace.get(&principal.namespace);
        let unattributed = (principal.role >= Role::Admin).then_some(&rings.unattributed);
        let mut visible: Vec<&(u64, RecentError)> = own
            .into_iter()
            .chain(unattributed)
            .flat_map(|ring| ring.iter())
            .collect();
        visible.sort_by_key(|entry| std::cmp::Reverse(entry.0));
        visible.into_iter().map(|(_, e)| e.clone()).collect()
    }
}

/// Middleware: records every response with a status of 400 or more in the ring.
pub(crate) async fn record_errors(
    State(log): State<std::sync::Arc<ErrorLog>>,
    request: Request,
    next: Next,
) -> Response {
    let method = crate::metrics::method_label(request.method());
    let route = crate::metrics::route_label(&request);
    let response = next.run(request).await;
    let status = response.status();
    if status.as_u16() >= 400 {
        let namespace = response
            .extensions()
            .get::<AnsweredNamespace>()
            .map(|n| n.0.clone());
        let reason = || status.canonical_reason().unwrap_or("error").to_owned();
        let (code, message) = match response.extensions().get::<ErrorNote>() {
            // An answer of no namespace is shown to the admins of every namespace: its message
            // can quote the request (the path of a 404 or 405, an id in it), so only its code
            // and status are kept.
            Some(note) if namespace.is_none() => (note.code.to_owned(), reason()),
            Some(note) => (note.code.to_owned(), cut(&note.message)),
            None => ("http".to_owned(), reason()),
        };
        log.push(RecentError {
            at_ms: now_ms(),
            method: method.to_owned(),
            route,
            status: status.as_u16(),
            code,
            message,
            namespace,
        });
    }
    response
}

fn cut(message: &str) -> String {
    if message.chars().count() <= MESSAGE_CHARS {
        return message.to_owned();
    }
    let mut cut: String = message.chars().take(MESSAGE_CHARS).collect();
    cut.push('…');
    cut
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The limits the server was started with (docs/limits.md): durations in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct LimitsStatus {
    /// The most body bytes one request may send (`--max-body-bytes`).
    pub max_body_bytes: u64,
    /// The most request-body bytes buffered across all connections.
    pub max_buffered_body_bytes: u64,
    /// The largest serialised library query result.
    pub max_result_bytes: u64,
    /// The most operations and queries running at once (`--max-concurrent-queries`).
    pub max_concurrent_queries: u64,
    /// The most connections open at once (as configured; the server also keeps it below the
    /// process's file-descriptor limit).
    pub max_connections: u64,
    /// How long a request waits for a slot or body budget before 503.
    pub queue_timeout_ms: u64,
    /// How long a client may take to send a body before 408.
    pub body_timeout_ms: u64,
    /// How long a client may take to send a request's headers.
    pub header_read_timeout_ms: u64,
    /// How long an idle keep-alive connection stays open.
    pub idle_timeout_ms: u64,
    /// How long a response may wait for a client that stopped reading it.
    pub send_timeout_ms: u64,
    /// How long in-flight requests may take to finish at shutdown.
    pub drain_timeout_ms: u64,
}

impl LimitsStatus {
    /// The limits of `options`.
    pub(crate) fn of(options: &HostOptions) -> LimitsStatus {
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        LimitsStatus {
            max_body_bytes: n(options.max_body_bytes),
            max_buffered_body_bytes: n(options.max_buffered_body_bytes),
            max_result_bytes: n(options.max_result_bytes),
            max_concurrent_queries: n(options.max_concurrent_queries),
            max_connections: n(options.max_connections),
            queue_timeout_ms: ms(options.queue_timeout),
            body_timeout_ms: ms(options.body_timeout),
            header_read_timeout_ms: ms(options.header_read_timeout),
            idle_timeout_ms: ms(options.idle_timeout),
            send_timeout_ms: ms(options.send_timeout),
            drain_timeout_ms: ms(options.drain_timeout),
        }
    }
}

/// The answer of `GET /v1/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ServerStatus {
    /// The server's version.
    pub version: String,
    /// The caller's namespace (the sizes are of it).
    pub namespace: String,
    /// Where the stores live (never a password).
    pub backend: BackendStatus,
    /// How much the caller's namespace holds.
    pub sizes: Sizes,
    /// The configured limits.
    pub limits: LimitsStatus,
    /// The most recent error responses the caller may see, newest first: at most 50 of its
    /// namespace's requests and, for an admin key, at most 50 of requests with no accepted key.
    pub recent_errors: Vec<RecentError>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(namespace: Option<&str>, n: i64) -> RecentError {
        RecentError {
            at_ms: n,
            method: "GET".into(),
            route: "/v1/assets/{asset_id}".into(),
            status: 404,
            code: "asset_not_found".into(),
            message: "m".into(),
            namespace: namespace.map(|n| n.parse().unwrap()),
        }
    }

    #[test]
    fn the_ring_keeps_the_newest_and_shows_each_namespace_its_own() {
        let log = ErrorLog::default();
        for n in 0..(RECENT_ERRORS as i64 + 10) {
            log.push(error(Some("acme"), n));
        }
        log.push(error(Some("globex"), 1000));
        log.push(error(None, 2000));
        let acme = |role| Principal {
            namespace: "acme".parse().unwrap(),
            role,
        };
        let read = log.visible_to(&acme(Role::Read));
        // 50 kept per namespace: the other namespaces' errors push none of acme's out.
        assert_eq!(read.len(), RECENT_ERRORS);
        assert_eq!(read.first().unwrap().at_ms, RECENT_ERRORS as i64 + 9);
        assert!(read.iter().all(|e| e.at_ms >= 10));
        let admin = log.visible_to(&acme(Role::Admin));
        assert_eq!(admin.len(), RECENT_ERRORS + 1);
        assert_eq!(admin.first().unwrap().at_ms, 2000);
        assert!(admin.iter().all(|e| e.at_ms != 1000));
        assert_eq!(cut(&"x".repeat(600)).chars().count(), MESSAGE_CHARS + 1);
    }

    /// One ring for every namespace let a read key of one namespace push another's errors
    /// out of that namespace's status with 50 failed requests.
    #[test]
    fn one_namespace_cannot_flush_anothers_errors() {
        let log = ErrorLog::default();
        log.push(error(Some("globex"), 1));
        for n in 0..(RECENT_ERRORS as i64 + 10) {
            log.push(error(Some("acme"), 10 + n));
            log.push(error(None, 10 + n));
        }
        let globex = Principal {
            namespace: "globex".parse().unwrap(),
            role: Role::Admin,
        };
        let seen = log.visible_to(&globex);
        assert_eq!(seen.len(), RECENT_ERRORS + 1);
        assert!(seen.iter().any(|e| e.at_ms == 1 && e.namespace.is_some()));
        // Shown in the order pushed, whatever the times say.
        log.push(error(Some("globex"), 0));
        assert_eq!(log.visible_to(&globex).first().unwrap().at_ms, 0);
        // Rings of at most RING_NAMESPACES namespaces: the stalest goes, never the ring of
        // no namespace.
        for n in 0..RING_NAMESPACES as i64 {
            log.push(error(Some(&format!("n{n}")), 1_000 + n));
        }
        let seen = log.visible_to(&globex);
        assert!(seen.iter().all(|e| e.namespace.is_none()));
        assert_eq!(seen.len(), RECENT_ERRORS);
        assert!(
            log.rings.lock().unwrap().by_namespace.len() <= RING_NAMESPACES,
            "the rings are bounded"
        );
    }
}
