//! The Mnemon server: the REST API over every store (docs/reference/rest.md) beside the
//! Polymath library host of `mnemon-host`, in one process.
//!
//! * `/v1/…`: assets, references, artifacts, memory and the served library, each route one
//!   operation of `mnemon-ops`, JSON in and out, errors as `{"error": {"code", "message"}}`,
//!   cursor pagination, ETags on reads. `/v1/openapi.json` is the OpenAPI 3.1 document
//!   ([`openapi::document`]).
//! * `POST /` and the host's other routes are unchanged; the host's limits (connection count,
//!   header and idle timeouts, body size and time, the shared body budget, the request slots)
//!   apply to every route (`mnemon_host::Host::with_routes`, docs/limits.md).
//! * `/mcp`: the streamable-HTTP MCP endpoint of `mnemon-mcp` (docs/reference/mcp.md), under
//!   the same authenticator: a refused key is a 401 before MCP sees the request, and each tool
//!   call runs in the key's namespace and needs a write key for a writing tool.
//! * `/ui/`: the inspector (docs/reference/inspector.md), linked from the `GET /` page.
//! * `/v1/status`: version, backend (no secrets), the caller's namespace sizes, the limits, and
//!   the recent error responses (a ring of 50 in memory, each namespace seeing its own).
//! * `/healthz` (the host's) and `/readyz` (the database answers); `/metrics` (Prometheus text:
//!   requests by route and status, latency, in flight; an admin key when keys are in use).
//! * Each request's [`Principal`] comes from the [`Authenticator`]: one namespace and a role.
//!   Without keys, [`OpenAccess`] makes every request the admin of one namespace; with keys,
//!   [`KeyAuthenticator`] checks `Authorization: Bearer <key>` (docs/reference/keys.md).
//!
//! Operations run on tokio's blocking pool (the stores are synchronous), each holding one of
//! the host's request slots.

mod auth;
mod error;
mod keys;
mod metrics;
pub mod openapi;
mod path;
mod routes;
mod same_origin;
mod state;
mod status;
mod tenants;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use mnemon_db::Namespace;
use mnemon_host::{Host, HostError, HostOptions, Sources};
use mnemon_mcp::{Access, Call, Denied, HttpOptions, LibraryGuard, MnemonMcp, ResolveWith};
use mnemon_ops::Service;

pub use auth::{Authenticator, KEYS_PROBE_INTERVAL, KeysProbe, OpenAccess, Principal, Role};
pub use error::{RestError, status_of};
pub use keys::KeyAuthenticator;
pub use same_origin::check_allowed_host;
pub use status::{LimitsStatus, RecentError, ServerStatus};
pub use tenants::{MAX_OPEN_NAMESPACES, ServiceOpener, Tenants};

use crate::state::AppState;

/// How the REST side of a server runs.
pub struct ServerConfig {
    /// The services of the namespaces requests use.
    pub tenants: Tenants,
    /// Who each request is.
    pub authenticator: Arc<dyn Authenticator>,
    /// The namespace whose database `/readyz` checks.
    pub ready_namespace: Namespace,
    /// The `Host` header values the server's routes (REST, `/metrics`, `/mcp`, the inspector)
    /// accept, each a name with an optional port: `None` keeps the loopback names only
    /// (DNS-rebinding protection for a server on loopback), `Some(vec![])` accepts any (a
    /// server on another address, where keys or a proxy protect it). The library endpoint
    /// `POST /` is the host's and accepts any (docs/reference/rest.md#browsers).
    pub allowed_hosts: Option<Vec<String>>,
    /// How often the server sweeps expired records ([`Service::gc`]) of the namespaces it has
    /// served since it started, those of the authenticator's keys, and the ready namespace;
    /// zero disables the sweep.
    pub gc_interval: Duration,
}

/// The sweep interval of [`ServerConfig::open`] and `mnemon serve`: ten minutes.
pub const DEFAULT_GC_INTERVAL: Duration = Duration::from_secs(600);

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("ready_namespace", &self.ready_namespace)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    /// One namespace's service, open to every request (no keys): for a loopback address.
    pub fn open(service: mnemon_ops::Service) -> ServerConfig {
        let namespace = service.stores().namespace().clone();
        ServerConfig {
            tenants: Tenants::single(service),
            authenticator: Arc::new(OpenAccess::new(namespace.clone())),
            ready_namespace: namespace,
            allowed_hosts: None,
            gc_interval: DEFAULT_GC_INTERVAL,
        }
    }
}

/// A bound server, ready to run.
#[derive(Debug)]
pub struct Server {
    host: Host,
}

impl Server {
    /// Loads the library (as the host does) and binds `addr`; port 0 picks a free port.
    pub async fn bind(
        addr: SocketAddr,
        sources: Sources,
        mut options: HostOptions,
        config: ServerConfig,
    ) -> Result<Server, HostError> {
        options.page_links.push((
            mnemon_inspector::PREFIX.to_owned(),
            "Open the Mnemon inspector: see and search what agents remember".to_owned(),
        ));
        let limits_status = status::LimitsStatus::of(&options);
        let host = Host::bind(addr, sources, options).await?;
        let state = AppState {
            tenants: Arc::new(config.tenants),
            auth: config.authenticator,
            limits: host.limits(),
            host: host.handle(),
            ready_namespace: config.ready_namespace,
            metrics: Arc::default(),
            errors: Arc::default(),
            limits_status,
        };
        spawn_sweeper(
            Arc::clone(&state.tenants),
            Arc::clone(&state.auth),
            state.ready_namespace.clone(),
            config.gc_interval,
        );
        let mcp = mcp_router(&state, config.allowed_hosts.clone());
        let metrics = Arc::clone(&state.metrics);
        let errors = Arc::clone(&state.errors);
        let routes = router(state)
            .merge(mcp)
            .merge(mnemon_inspector::router())
            .layer(middleware::from_fn_with_state(
                errors,
                status::record_errors,
            ))
            // Outermost: a web page of another site gets nothing from any of them, its
            // requests not even a line in the recent errors.
            .layer(middleware::from_fn_with_state(
                same_origin::HostCheck::of(config.allowed_hosts),
                same_origin::refuse_cross_site,
            ));
        // Metrics wrap the whole app, so the Polymath endpoint `POST /` (the host's) is counted
        // like the /v1 routes (docs/reference/rest.md#status).
        let host = host.with_routes(routes).with_layer_around(move |app| {
            app.layer(middleware::from_fn(mcp_uncompressed))
                .layer(middleware::from_fn_with_state(metrics, metrics::track))
        });
        Ok(Server { host })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, HostError> {
        self.host.local_addr()
    }

    /// The library host underneath (its bits, model and reload handle).
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Serves until `shutdown` completes, then drains in-flight requests.
    pub async fn run<F>(self, shutdown: F) -> Result<(), HostError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.host.run(shutdown).await
    }

    /// Serves until SIGINT or SIGTERM; SIGHUP reloads the library.
    pub async fn run_until_signal(self) -> Result<(), HostError> {
        self.host.run_until_signal().await
    }
}

/// Sweeps expired records every `every` (not at once: the first sweep is one interval after
/// start) on the blocking pool, one sweep at a time; zero spawns nothing. The task ends with
/// the runtime.
fn spawn_sweeper(
    tenants: Arc<Tenants>,
    auth: Arc<dyn Authenticator>,
    ready: Namespace,
    every: Duration,
) {
    if every.is_zero() {
        return;
    }
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(every);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        loop {
            ticker.tick().await;
            let tenants = Arc::clone(&tenants);
            let auth = Arc::clone(&auth);
            let ready = ready.clone();
            if let Err(error) =
                tokio::task::spawn_blocking(move || sweep_all(&tenants, auth.as_ref(), &ready))
                    .await
            {
                tracing::error!(%error, "the expiry sweep panicked");
            }
        }
    });
}

/// One sweep of every namespace served since start, every namespace of a valid key, and the
/// ready namespace: each store's `gc`, logged when it removed something or failed (the next
/// sweep tries again).
fn sweep_all(tenants: &Tenants, auth: &dyn Authenticator, ready: &Namespace) {
    let namespaces: std::collections::BTreeSet<Namespace> = tenants
        .served_namespaces()
        .into_iter()
        .chain(auth.namespaces())
        .chain([ready.clone()])
        .collect();
    for namespace in namespaces {
        match tenants
            .get_transient(&namespace)
            .and_then(|service| service.gc())
        {
            Ok(swept) if swept.messages > 0 || swept.assets > 0 || swept.artifacts.records > 0 => {
                tracing::info!(
                    namespace = namespace.as_str(),
                    messages = swept.messages,
                    assets = swept.assets,
                    artifacts = swept.artifacts.records,
                    artifact_files = swept.artifacts.content_removed,
                    "expired records swept"
                );
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(namespace = namespace.as_str(), %error, "the expiry sweep failed");
            }
        }
    }
}

/// The REST routes with their state, and a JSON 404 for every other `/v1/…` path. A route
/// that needs a role is behind [`authorize`]: 401 and 403 come before its body is read.
fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for route in routes::table() {
        let handler = match route.role {
            Some(role) => route.handler.route_layer(middleware::from_fn_with_state(
                (state.clone(), role),
                authorize,
            )),
            None => route.handler,
        };
        router = router.route(route.path, handler);
    }
    // Traffic of every namespace: for administrators.
    let metrics = axum::routing::get(metrics_text).route_layer(middleware::from_fn_with_state(
        (state.clone(), Role::Admin),
        authorize,
    ));
    router
        .route("/metrics", metrics)
        .route("/v1", axum::routing::any(routes::not_found))
        .route("/v1/", axum::routing::any(routes::not_found))
        .route("/v1/{*rest}", axum::routing::any(routes::not_found))
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(state)
}

/// `GET /metrics`: the Prometheus text format.
async fn metrics_text(State(state): State<AppState>) -> Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}

/// Authenticates a request and checks its role before the route reads anything: 401 without
/// an accepted key, 403 when the key's role is below `role`. The principal is kept in the
/// request's extensions, so the handler does not authenticate again.
async fn authorize(
    State((state, role)): State<(AppState, Role)>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = match auth::authenticate(&state.auth, request.headers()).await {
        Ok(principal) => principal,
        Err(refused) => return refused.into_response(),
    };
    // The answer's namespace, so the ring of recent errors shows it to that namespace only.
    let answered = status::AnsweredNamespace(principal.namespace.clone());
    let mut response = match principal.require(role) {
        Err(refused) => refused.into_response(),
        Ok(()) => {
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
    };
    response.extensions_mut().insert(answered);
    response
}

/// `/mcp`: the MCP endpoint over the same tenants and authenticator as the REST routes, and
/// the host's library for `search_library`.
fn mcp_router(state: &AppState, allowed_hosts: Option<Vec<String>>) -> Router {
    let tenants = Arc::clone(&state.tenants);
    let auth = Arc::clone(&state.auth);
    // Called on the blocking pool once per tool call: the key check may read the key store.
    let resolver = ResolveWith(move |call: &Call<'_>| -> Result<Service, Denied> {
        let none = HeaderMap::new();
        let headers = call.request.map_or(&none, |parts| &parts.headers);
        let principal = auth.authenticate(headers).map_err(denied)?;
        let needed = match call.access {
            Access::Read => Role::Read,
            Access::Write => Role::Write,
        };
        principal.require(needed).map_err(denied)?;
        tenants.get(&principal.namespace).map_err(|e| {
            let message = if e.kind() == mnemon_ops::ErrorKind::Internal {
                // The details (paths, hosts) go to the log, as REST's 500s and 503s do.
                tracing::error!(error = %e, "cannot open the namespace's stores");
                mnemon_mcp::INTERNAL_MESSAGE.to_owned()
            } else if let Some(withheld) = e.withheld_message() {
                tracing::warn!(error = %e, "cannot open the namespace's stores");
                withheld.to_owned()
            } else {
                e.to_string()
            };
            Denied {
                code: e.code().to_owned(),
                message,
            }
        })
    });
    let handle = state.host.clone();
    let server = MnemonMcp::new(resolver)
        .with_library(move || Some(Box::new(handle.library()) as LibraryGuard));
    // The host's body limit (`--max-body-bytes`), which `mcp_gate` applies first: rmcp's own
    // 4 MiB refused larger calls the gate had let through (docs/limits.md).
    let mut options = HttpOptions::default().with_max_body_bytes(state.limits.max_body_bytes());
    if let Some(hosts) = allowed_hosts {
        options = options.with_allowed_hosts(hosts);
    }
    mnemon_mcp::router(server, options)
        .layer(middleware::from_fn_with_state(state.clone(), mcp_gate))
}

/// Answers `/mcp` uncompressed: drops the request's `Accept-Encoding` before the host's
/// compression layer (inside this one) reads it. A tool result is small (a few KB), and
/// inflating it cost the MCP TypeScript SDK's `fetch` about 0.5 ms a call on loopback, more
/// than the recall itself (docs/reference/mcp.md#http).
async fn mcp_uncompressed(mut request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/mcp") {
        request
            .headers_mut()
            .remove(axum::http::header::ACCEPT_ENCODING);
    }
    next.run(request).await
}

/// A tool error from a REST refusal (its code and message).
fn denied(error: RestError) -> Denied {
    Denied {
        code: error.code.to_owned(),
        message: error.message,
    }
}

/// Refuses an MCP request whose key is refused with the REST 401 (or 503) before MCP reads
/// it, so an HTTP client learns at once that its key is wrong; the role is checked per tool.
///
/// Then puts the request under the host's limits, as a REST route is (docs/limits.md): its
/// body is read here, under `--max-body-bytes`, the body timeout and the shared body budget
/// (left to the MCP transport, it was read under that crate's own 4 MiB, with no timeout and
/// outside the budget), and the call holds one of the request slots while it runs (the
/// answer is one JSON body, so the tool has finished when `next` returns).
async fn mcp_gate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if let Err(refused) = auth::authenticate(&state.auth, request.headers()).await {
        return refused.into_response();
    }
    let (parts, body) = request.into_parts();
    let mut held = match state.limits.read_body(&parts.headers, body).await {
        Ok(held) => held,
        Err(rejected) => return RestError::from(rejected).into_response(),
    };
    let slot = match state.limits.slot().await {
        Ok(slot) => slot,
        Err(rejected) => return RestError::from(rejected).into_response(),
    };
    let body = axum::body::Body::from(std::mem::take(&mut held.bytes));
    let response = next.run(Request::from_parts(parts, body)).await;
    // The budget and the slot are given back only once the call has answered.
    drop((held, slot));
    response
}
