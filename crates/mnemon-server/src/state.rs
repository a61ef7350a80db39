//! The state every REST request shares: the services per namespace, the authenticator, the
//! host's limits and its served library.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use mnemon_db::Namespace;
use mnemon_host::{HostHandle, RequestLimits};
use mnemon_ops::{OpsError, Service};
use serde::Serialize;

use crate::auth::{Authenticator, Principal, Role};
use crate::error::RestError;

/// Opens the [`Service`] of a namespace (blocking: it may connect to a database).
pub type ServiceOpener = dyn Fn(&Namespace) -> Result<Service, OpsError> + Send + Sync;

/// The services of the namespaces requests have used, opened on first use and kept.
pub struct Tenants {
    open: Box<ServiceOpener>,
    open_services: Mutex<HashMap<Namespace, Service>>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenants").finish_non_exhaustive()
    }
}

impl Tenants {
    /// Services opened by `open`, one per namespace.
    pub fn new(
        open: impl Fn(&Namespace) -> Result<Service, OpsError> + Send + Sync + 'static,
    ) -> Tenants {
        Tenants {
            open: Box::new(open),
            open_services: Mutex::new(HashMap::new()),
        }
    }

    /// Only `service`'s namespace: any other is refused.
    pub fn single(service: Service) -> Tenants {
        let namespace = service.stores().namespace().clone();
        let tenants = Tenants::new(move |asked: &Namespace| {
            Err(OpsError::invalid(format!(
                "this server serves namespace {:?} only, not {:?}",
                namespace.as_str(),
                asked.as_str()
            )))
        });
        tenants
            .open_services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(service.stores().namespace().clone(), service);
        tenants
    }

    /// The namespaces whose services are open (served since start), in no particular order.
    pub fn open_namespaces(&self) -> Vec<Namespace> {
        self.open_services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    /// The service of `namespace`, opened now if it was not yet (blocking).
    pub fn get(&self, namespace: &Namespace) -> Result<Service, OpsError> {
        if let Some(service) = self
            .open_services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(namespace)
        {
            return Ok(service.clone());
        }
        // Opened outside the lock: opening may wait on a database, and other namespaces'
        // requests must not wait for it. Two first requests may both open; one is kept.
        let service = (self.open)(namespace)?;
        Ok(self
            .open_services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(namespace.clone())
            .or_insert(service)
            .clone())
    }
}

impl Drop for Tenants {
    /// Drops the services on a thread of their own: a service may hold what must not be
    /// dropped on an async worker thread (where the server drops its routes when it stops),
    /// such as an OpenAI-compatible embedder's blocking HTTP client. (PostgreSQL pools close
    /// their connections safely there by themselves: `mnemon_db::postgres::Pool`.)
    fn drop(&mut self) {
        let services = std::mem::take(
            &mut *self
                .open_services
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if services.is_empty() {
            return;
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            // Joined, so the connections are closed when the server's run returns.
            let _ = std::thread::spawn(move || drop(services)).join();
        } else {
            drop(services);
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_tenant_serves_its_namespace_only_and_others_open_once() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(mnemon_ops::Stores::open(dir.path()).unwrap());
        let single = Tenants::single(service);
        assert!(single.get(&Namespace::default()).is_ok());
        let acme: Namespace = "acme".parse().unwrap();
        let refused = single.get(&acme).unwrap_err();
        assert!(refused.to_string().contains("acme"), "{refused}");

        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&opened);
        let root = dir.path().to_path_buf();
        let many = Tenants::new(move |namespace: &Namespace| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let options = mnemon_ops::OpenOptions::default().with_namespace(namespace.clone());
            Ok(Service::new(
                mnemon_ops::Stores::open_with(&root, &options)
                    .map_err(|e| OpsError::invalid(e.to_string()))?,
            ))
        });
        assert_eq!(many.get(&acme).unwrap().stores().namespace(), &acme);
        many.get(&acme).unwrap();
        many.get(&Namespace::default()).unwrap();
        assert_eq!(opened.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
