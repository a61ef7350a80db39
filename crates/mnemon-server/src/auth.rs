//! Who a request is (docs/reference/rest.md#authentication): an [`Authenticator`] turns the
//! request's headers into a [`Principal`] — one namespace and a role — and every operation runs
//! inside that namespace only. [`OpenAccess`] is the authenticator without keys: every request
//! is the admin of one namespace, which `mnemon serve` only allows on a loopback address.

use axum::extract::FromRequestParts;
use axum::http::StatusCode;
use axum::http::request::Parts;
use mnemon_db::Namespace;

use crate::error::RestError;
use crate::state::AppState;

/// What a principal may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Read routes (GET, and searches and renders that change nothing).
    Read,
    /// Read and write routes.
    Write,
    /// Everything, including the namespace-wide operations (gc, forget, re-embedding) and the
    /// metrics (docs/reference/keys.md#roles).
    Admin,
}

impl Role {
    /// The role's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

/// The caller of one request: the namespace it works in and its role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Every operation of the request runs in this namespace.
    pub namespace: Namespace,
    /// What the caller may do.
    pub role: Role,
}

impl Principal {
    /// `Ok` when the principal's role includes `needed`, else 403.
    pub fn require(&self, needed: Role) -> Result<(), RestError> {
        if self.role >= needed {
            Ok(())
        } else {
            Err(RestError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "this route needs a {} key; the key used is a {} key",
                    needed.as_str(),
                    self.role.as_str()
                ),
            ))
        }
    }
}

/// Turns a request's headers into its principal, or refuses it (401: no or a bad credential).
/// Blocking lookups (a key store) are fine: unless [`blocks`](Authenticator::blocks) says
/// otherwise, it is called on the blocking pool.
pub trait Authenticator: Send + Sync + 'static {
    /// The request's principal.
    fn authenticate(&self, headers: &axum::http::HeaderMap) -> Result<Principal, RestError>;

    /// The namespaces requests may work in, as far as the authenticator knows (the namespaces
    /// of its valid keys), for the periodic expiry sweep to cover namespaces not served since
    /// start; empty when it cannot list them. May block.
    fn namespaces(&self) -> Vec<Namespace> {
        Vec::new()
    }

    /// Whether [`authenticate`](Authenticator::authenticate) may block (read a database);
    /// `false` lets the server call it on the async thread and save a hop to the blocking pool.
    fn blocks(&self) -> bool {
        true
    }

    /// The answer when it can be given without blocking (from a cache), else `None` and the
    /// server calls [`authenticate`](Authenticator::authenticate) on the blocking pool.
    fn authenticate_now(
        &self,
        _headers: &axum::http::HeaderMap,
    ) -> Option<Result<Principal, RestError>> {
        None
    }
}

/// `auth`'s principal for `headers`: on this thread when it does not block or can answer from
/// memory, else on the blocking pool.
pub(crate) async fn authenticate(
    auth: &std::sync::Arc<dyn Authenticator>,
    headers: &axum::http::HeaderMap,
) -> Result<Principal, RestError> {
    if !auth.blocks() {
        return auth.authenticate(headers);
    }
    if let Some(answer) = auth.authenticate_now(headers) {
        return answer;
    }
    let auth = std::sync::Arc::clone(auth);
    let headers = headers.clone();
    tokio::task::spawn_blocking(move || auth.authenticate(&headers))
        .await
        .map_err(|e| RestError::internal(&e))?
}

/// No keys: every request is the admin of one namespace.
#[derive(Debug, Clone)]
pub struct OpenAccess {
    namespace: Namespace,
}

impl OpenAccess {
    /// Open access to `namespace`.
    pub fn new(namespace: Namespace) -> OpenAccess {
        OpenAccess { namespace }
    }
}

impl Authenticator for OpenAccess {
    fn authenticate(&self, _headers: &axum::http::HeaderMap) -> Result<Principal, RestError> {
        Ok(Principal {
            namespace: self.namespace.clone(),
            role: Role::Admin,
        })
    }

    fn blocks(&self) -> bool {
        false
    }
}

impl FromRequestParts<AppState> for Principal {
    type Rejection = RestError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        // Authenticated already by the route's `authorize` layer.
        if let Some(principal) = parts.extensions.get::<Principal>() {
            return Ok(principal.clone());
        }
        authenticate(&state.auth, &parts.headers).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_include_the_ones_below() {
        let reader = Principal {
            namespace: Namespace::default(),
            role: Role::Read,
        };
        assert!(reader.require(Role::Read).is_ok());
        let refused = reader.require(Role::Write).unwrap_err();
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert!(refused.message.contains("write"));
        let admin = Principal {
            role: Role::Admin,
            ..reader
        };
        assert!(admin.require(Role::Write).is_ok() && admin.require(Role::Admin).is_ok());
    }
}
