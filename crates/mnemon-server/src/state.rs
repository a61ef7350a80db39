//! The state every REST request shares: the services per namespace, the authenticator, the
//! host's limits and its served library.

use std::sync::Arc;

use axum::http::StatusCode;
use mnemon_db::Namespace;
use mnemon_host::{HostHandle, RequestLimits};
use mnemon_ops::{OpsError, Service};
use serde::Serialize;

use crate::auth::{Authenticator, Principal, Role};
use crate::error::RestError;
use crate::tenants::Tenants;

/// Shared by every REST request.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) tenants: Arc<Tenants>,
    pub(crate) auth: Arc<dyn Authenticator>,
    pub(crate) limits: RequestLimits,
    pub(crate) host: HostHandle,
    /// The namespace `/readyz` checks.
    pub(crate) ready_namespace: Namespace,
    /// What `/metrics` reports.
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// The recent error responses `GET /v1/status` shows.
    pub(crate) errors: Arc<crate::status::ErrorLog>,
    /// The limits the server was started with, as `GET /v1/status` shows them.
    pub(crate) limits_status: crate::status::LimitsStatus,
}

impl AppState {
    /// Runs `op` on the principal's service on the blocking pool, holding a request slot, after
    /// checking the principal's role.
    pub(crate) async fn call<T, F>(
        &self,
        principal: &Principal,
        role: Role,
        op: F,
    ) -> Result<T, RestError>
    where
        T: Send + 'static,
        F: FnOnce(&Service) -> Result<T, OpsError> + Send + 'static,
    {
        principal.require(role)?;
        let _slot = self.limits.slot().await?;
        let tenants = Arc::clone(&self.tenants);
        let namespace = principal.namespace.clone();
        tokio::task::spawn_blocking(move || {
            let service = tenants.get(&namespace)?;
            op(&service)
        })
        .await
        .map_err(|e| RestError::internal(&e))?
        .map_err(RestError::from)
    }
}

/// A JSON body, serialised.
pub(crate) fn to_json(value: &impl Serialize) -> Result<Vec<u8>, RestError> {
    serde_json::to_vec(value).map_err(|e| {
        RestError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("cannot write the answer as JSON: {e}"),
        )
    })
}
