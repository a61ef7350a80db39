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
//! * `/healthz` (the host's) and `/readyz` (the database answers).
//! * Each request's [`Principal`] comes from the [`Authenticator`]: one namespace and a role.
//!   Without keys, [`OpenAccess`] makes every request the admin of one namespace.
//!
//! Operations run on tokio's blocking pool (the stores are synchronous), each holding one of
//! the host's request slots.

mod auth;
mod error;
pub mod openapi;
mod routes;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use mnemon_db::Namespace;
use mnemon_host::{Host, HostError, HostOptions, Sources};

pub use auth::{Authenticator, OpenAccess, Principal, Role};
pub use error::{RestError, status_of};
pub use state::{ServiceOpener, Tenants};

use crate::state::AppState;

/// How the REST side of a server runs.
pub struct ServerConfig {
    /// The services of the namespaces requests use.
    pub tenants: Tenants,
    /// Who each request is.
    pub authenticator: Arc<dyn Authenticator>,
    /// The namespace whose database `/readyz` checks.
    pub ready_namespace: Namespace,
}

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
        options: HostOptions,
        config: ServerConfig,
    ) -> Result<Server, HostError> {
        let host = Host::bind(addr, sources, options).await?;
        let state = AppState {
            tenants: Arc::new(config.tenants),
            auth: config.authenticator,
            limits: host.limits(),
            host: host.handle(),
            ready_namespace: config.ready_namespace,
        };
        let host = host.with_routes(router(state));
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

/// The REST routes with their state, and a JSON 404 for every other `/v1/…` path.
fn router(state: AppState) -> Router {
    let mut router = Router::new();
    for route in routes::table() {
        router = router.route(route.path, route.handler);
    }
    router
        .route("/v1", axum::routing::any(routes::not_found))
        .route("/v1/", axum::routing::any(routes::not_found))
        .route("/v1/{*rest}", axum::routing::any(routes::not_found))
        .method_not_allowed_fallback(routes::method_not_allowed)
        .with_state(state)
}
