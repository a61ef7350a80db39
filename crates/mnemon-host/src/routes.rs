//! The endpoints (docs/reference/host.md#endpoints) and the middleware stack around them.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mnemon_library::wire::{self, RenderError};
use mnemon_library::{QueryOptions, QueryResult};
use serde_json::json;
use tower_http::compression::CompressionLayer;
use tower_http::compression::predicate::SizeAbove;

use crate::access_log;
use crate::body;
use crate::cors;
use crate::limits::result_too_large;
use crate::options::DEFAULT_COUNT;
use crate::page::{self, ClientKey};
use crate::response::{ApiError, BitCount, json_response};
use crate::state::HostState;

/// Responses smaller than this are sent uncompressed (the reference's Flask-Compress threshold).
const GZIP_MIN_BYTES: u16 = 500;

/// The host's router: endpoints, then (innermost first) gzip, CORS and the access log.
#[cfg(test)]
pub(crate) fn router(state: Arc<HostState>) -> Router {
    router_with(state, Router::new())
}

/// The host's router with `extra` routes merged in beside the endpoints (before the fallback
/// and the middleware, so gzip and the access log apply to them too; CORS does not). `extra`
/// must not set a fallback of its own.
pub(crate) fn router_with(state: Arc<HostState>, extra: Router) -> Router {
    let mut app = Router::new()
        .route("/", post(query).options(cors::preflight).get(index))
        .route("/healthz", get(healthz))
        .route("/health", get(healthz))
        .route("/_ah/warmup", get(warmup));
    if state.options.admin_reload {
        app = app.route(
            "/admin/reload",
            post(admin_reload).layer(middleware::from_fn(cors::refuse_foreign_origin)),
        );
    }
    app.fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        // Any origin may read the host's own answers (the Polymath protocol's browser clients),
        // not those of the `extra` routes, which hold a server's private data.
        .layer(middleware::from_fn(cors::allow_any_origin))
        .merge(extra)
        // The query handler enforces the configured limit itself (413 with a JSON body).
        .layer(DefaultBodyLimit::disable())
        .layer(
            CompressionLayer::new()
                .gzip(true)
                .compress_when(SizeAbove::new(GZIP_MIN_BYTES)),
        )
        .layer(middleware::from_fn(access_log::log_request))
}

/// `POST /`: one query.
async fn query(State(state): State<Arc<HostState>>, req: Request) -> Response {
    let client = client_key(&req);
    let mut response = match run_query(&state, req).await {
        Ok((body, bits)) => {
            let mut response = json_response(StatusCode::OK, body);
            response.extensions_mut().insert(BitCount(bits));
            response
        }
        Err(error) => {
            if let Some(client) = client {
                state.recent_errors.record(client, &error);
            }
            error.into_response()
        }
    };
    // Whether or not this response was compressed, another client's could be.
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    response
}

/// Parses the body, then runs the query and serialises its result on the blocking pool, so a
/// slow scan never holds up the threads that accept and parse other requests. On a large
/// library, the exact scan (or, in fast mode, the int8 pre-scan) is shared with the other
/// queries waiting (see [`crate::batch`]); a query the library's approximate index answers
/// reads only its candidates, so it is not batched (docs/reference/library.md#ann-index).
///
/// The body's bytes stay held against the shared body budget, and the query holds one of the
/// query slots, until the result is serialised (`docs/limits.md`).
async fn run_query(state: &HostState, req: Request) -> Result<(Vec<u8>, usize), ApiError> {
    let limits = &state.limits;
    let mut reservation = limits.body_reservation();
    let args = body::read_args(
        req,
        state.options.max_body_bytes,
        state.options.body_timeout,
        &mut reservation,
    )
    .await?;
    limits.note_large(reservation.bytes());
    let _body_bytes = reservation.into_permit();
    let max_result = state.options.max_result_bytes;
    let snapshot = state.snapshot();
    let library = &snapshot.library;
    let floats = library
        .len()
        .saturating_mul(library.dimension().unwrap_or(0));
    let batcher = state
        .batcher
        .as_ref()
        .filter(|_| floats >= state.options.batch_scans_from);
    let options = QueryOptions {
        seed: None,
        default_count: Some(DEFAULT_COUNT),
        // A shared scan pre-scans exact queries too: the same results (HostOptions).
        fast: state.options.fast || (batcher.is_some() && state.options.prescan_shared_scans),
        exact: false,
        index: state.options.index,
    };
    // The arguments are parsed once, into a typed request: a random query vector (no
    // embedding given) takes its seed from the host's seeded stream. Parsed before the wait
    // for a query slot, with no wait between the body's JSON parse and here: a parsed JSON
    // tree takes up to about 40 times its body's bytes (`[0,0,…]`: one 80-byte value per two
    // bytes), and waiting requests holding theirs could together take gigabytes; the typed
    // request keeps an embedding in 4 bytes a number (docs/limits.md).
    let parsed = wire::parse_query(&snapshot.library, &args, &options).map_err(library_error)?;
    drop(args);
    let _slot = limits.query_slot().await?;
    let grant = parsed.grant(&snapshot.policy);
    let mut request = parsed.request;
    if request.embedding.is_none() {
        request.seed = state.next_seed();
    }
    let outcome = match batcher {
        None => {
            tokio::task::spawn_blocking(move || {
                let result = snapshot.library.query(&request, &grant)?;
                serialise(&result, max_result)
            })
            .await
        }
        Some(batcher) => {
            // Planning checks the request and draws a random vector: cheap, and bounded by the
            // body limit, so it runs here.
            let plan = snapshot
                .library
                .plan(&request, grant)
                .map_err(library_error)?;
            if let Some(vector) = plan.prescan_vector() {
                // Fast mode: the int8 pre-scan is shared; the exact re-rank is the query's own.
                let kind = snapshot.library.prescan_kind(&plan);
                let prescan = batcher
                    .prescan(Arc::clone(&snapshot), vector.to_vec(), kind)
                    .await;
                tokio::task::spawn_blocking(move || {
                    let result = match prescan {
                        Some(prescan) => snapshot.library.run_prescanned(plan, prescan)?,
                        None => snapshot.library.run_planned(plan, None)?,
                    };
                    serialise(&result, max_result)
                })
                .await
            } else {
                let scores = match plan.scan_vector() {
                    Some(vector) => batcher.scores(Arc::clone(&snapshot), vector.to_vec()).await,
                    None => None,
                };
                tokio::task::spawn_blocking(move || {
                    let result = snapshot.library.run_planned(plan, scores.as_deref())?;
                    serialise(&result, max_result)
                })
                .await
            }
        }
    };
    match outcome {
        Ok(Ok(Ok((body, bits)))) => {
            limits.note_large(body.len());
            Ok((body, bits))
        }
        Ok(Err(error)) => Err(library_error(error)),
        Ok(Ok(Err(error))) => {
            // A refused result held up to the cap in memory: give that back too.
            limits.note_large(max_result);
            Err(error)
        }
        Err(error) => {
            tracing::error!(%error, "a query panicked");
            Err(ApiError::internal())
        }
    }
}

/// The result as JSON bytes, with the number of bits it lists for the access log; a 400 as
/// soon as it grows past `max_bytes`. The bytes are written one bit at a time from the
/// library's data, so a query never holds more than `max_bytes` of output beside its typed
/// result (`docs/limits.md`).
fn serialise(
    result: &QueryResult<'_>,
    max_bytes: usize,
) -> Result<Result<(Vec<u8>, usize), ApiError>, mnemon_library::LibraryError> {
    Ok(match wire::render_capped(result, max_bytes) {
        Ok(body) => Ok((body, result.returned_bits())),
        Err(RenderError::TooLarge { .. }) => Err(result_too_large(max_bytes)),
        Err(RenderError::Library(error)) => return Err(error),
        Err(error) => {
            tracing::error!(%error, "serialising a query result failed");
            Err(ApiError::internal())
        }
    })
}

/// The client a request came from, when the connection's address is known.
fn client_key(req: &Request) -> Option<ClientKey> {
    let ConnectInfo(peer) = req.extensions().get::<ConnectInfo<SocketAddr>>()?;
    Some(ClientKey::new(peer.ip(), req.headers()))
}

/// `GET /`: the query page for a browser; for the TypeScript client's discovery request right
/// after its query failed, that failure again (see [`crate::page`]).
async fn index(State(state): State<Arc<HostState>>, req: Request) -> Response {
    if !page::wants_page(req.headers())
        && let Some(error) = client_key(&req).and_then(|key| state.recent_errors.take(key))
    {
        return page::replayed_error(error);
    }
    let snapshot = state.snapshot();
    page::index(
        snapshot.library.model(),
        snapshot.library.len(),
        &state.options.page_links,
    )
}

/// A failed query: 400 with the message for the caller's mistakes, else a logged 500.
fn library_error(error: mnemon_library::LibraryError) -> ApiError {
    if error.is_client_error() {
        ApiError::bad_request(error.to_string())
    } else {
        tracing::error!(%error, "query failed");
        ApiError::internal()
    }
}

/// `GET /healthz`: liveness, without library details.
async fn healthz() -> Response {
    json_response(StatusCode::OK, br#"{"status":"ok"}"#.to_vec())
}

/// `GET /_ah/warmup`: 204, as the reference answers App Engine's warm-up request.
async fn warmup() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// `POST /admin/reload`: loads the libraries and config again and swaps them in atomically.
/// Only clients connecting from a loopback address may call it.
async fn admin_reload(
    State(state): State<Arc<HostState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
) -> Response {
    if !is_loopback(peer.ip()) {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "reload is only allowed from a loopback address",
        )
        .into_response();
    }
    match state.reload().await {
        Ok(reloaded) => json_response(
            StatusCode::OK,
            json!({"status": "reloaded", "bits": reloaded.bits})
                .to_string()
                .into_bytes(),
        ),
        Err(error) => {
            tracing::error!(%error, "reload failed; still serving the previous libraries");
            // Only loopback callers get here: the operator needs the reason.
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reload failed; still serving the previous libraries: {error}"),
            )
            .into_response()
        }
    }
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
    }
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not found; queries are sent with POST /",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed; queries are sent with POST /",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::HostOptions;
    use crate::source::{ConfigSource, LibrarySource, Sources};
    use axum::body::Body;
    use axum::extract::connect_info::MockConnectInfo;
    use tower::ServiceExt;

    const LIBRARY: &str = r#"{"version": 1, "embedding_model": "m", "bits": [
        {"text": "a", "info": {"url": "u"}, "embedding": "AACAPwAAAAA=", "token_count": 1}]}"#;

    fn app(peer: [u8; 4]) -> Router {
        let sources = Sources {
            library: LibrarySource::bytes("test", LIBRARY.as_bytes()),
            config: ConfigSource::Defaults,
        };
        let snapshot = sources.load().unwrap();
        let state = Arc::new(HostState::new(snapshot, sources, HostOptions::default()));
        router(state).layer(MockConnectInfo(SocketAddr::from((peer, 4000))))
    }

    async fn status(app: Router, method: &str, uri: &str) -> StatusCode {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        app.oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn reload_only_from_loopback() {
        assert_eq!(
            status(app([127, 0, 0, 1]), "POST", "/admin/reload").await,
            StatusCode::OK
        );
        assert_eq!(
            status(app([127, 9, 9, 9]), "POST", "/admin/reload").await,
            StatusCode::OK
        );
        assert_eq!(
            status(app([10, 0, 0, 7]), "POST", "/admin/reload").await,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            status(app([192, 168, 1, 2]), "POST", "/admin/reload").await,
            StatusCode::FORBIDDEN
        );
    }

    /// A reload whose caller went away (a client that closed its connection to
    /// `/admin/reload`) released the one-at-a-time lock while its load went on, so the next
    /// trigger loaded beside it: twenty aborted requests ran up to twenty loads at once. The
    /// loads here wait at a gate until the callers have given up, so none finishes in time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn aborted_reloads_never_load_in_parallel() {
        use crate::source::loads_in_flight;
        let sources = Sources {
            library: LibrarySource::bytes(loads_in_flight::COUNTED, LIBRARY.as_bytes()),
            config: ConfigSource::Defaults,
        };
        // The first snapshot is loaded without the gate (`load`, not `load_serving`).
        let snapshot = sources.load().unwrap();
        let state = Arc::new(HostState::new(snapshot, sources, HostOptions::default()));
        for _ in 0..20 {
            let aborted =
                tokio::time::timeout(std::time::Duration::from_millis(5), state.reload()).await;
            assert!(aborted.is_err(), "a gated load finished");
        }
        // Time for loads that were let through to reach the gate (and be counted).
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        loads_in_flight::open();
        // Queued behind every earlier reload: when it is done, they are.
        state.reload().await.unwrap();
        assert_eq!(
            loads_in_flight::PEAK.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "reloads loaded in parallel"
        );
    }

    #[test]
    fn loopback_includes_mapped_ipv6() {
        assert!(is_loopback("::1".parse().unwrap()));
        assert!(is_loopback("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!is_loopback("::ffff:10.0.0.1".parse().unwrap()));
        assert!(!is_loopback("2001:db8::1".parse().unwrap()));
    }
}
