//! API keys (docs/reference/keys.md, docs/reference/rest.md#authentication): every request
//! carries `Authorization: Bearer <key>`, and the key's namespace and role become the request's
//! [`Principal`].
//!
//! Every refusal of the key itself is one 401 with one message (docs/reference/keys.md:
//! clients learn only that the key was refused); the reason, with the key's id but never its
//! secret, goes to the log. A key store that cannot be read is a 503.

use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode, header};
use mnemon_keys::{AuthError, Grant, KeyStore, Namespace};

use crate::auth::{Authenticator, Principal, Role};
use crate::error::RestError;

/// Authenticates requests with the keys of a [`KeyStore`]. Dropping it on an async worker
/// thread (where the server drops its routes when it stops) is safe: a PostgreSQL key store's
/// pool closes its connections on a thread of its own there (`mnemon_db::postgres::Pool`).
#[derive(Debug, Clone)]
pub struct KeyAuthenticator {
    store: Arc<KeyStore>,
}

impl KeyAuthenticator {
    /// Checks keys against `store`.
    pub fn new(store: Arc<KeyStore>) -> KeyAuthenticator {
        KeyAuthenticator { store }
    }
}

/// The key of `Authorization: Bearer <key>` (the scheme is case-insensitive, RFC 7235), or the
/// 401 saying how to send one.
fn bearer(headers: &HeaderMap) -> Result<&str, RestError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized(
            "this server requires an API key: send `Authorization: Bearer <key>` (an \
             administrator creates keys with `mnemon keys create`)",
        ));
    };
    let value = value.to_str().unwrap_or_default().trim();
    match value.split_once(' ') {
        Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => Ok(key.trim()),
        _ => Err(unauthorized(
            "the Authorization header must be `Bearer <key>`, with the key `mnemon keys \
             create` printed",
        )),
    }
}

/// A 401 (the response carries `WWW-Authenticate: Bearer`).
pub(crate) fn unauthorized(message: &str) -> RestError {
    RestError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

/// The principal of a grant.
fn principal(grant: Grant) -> Principal {
    let role = match grant.role {
        mnemon_keys::Role::Read => Role::Read,
        mnemon_keys::Role::Write => Role::Write,
        mnemon_keys::Role::Admin => Role::Admin,
    };
    Principal {
        namespace: grant.namespace,
        role,
    }
}

/// The REST answer to a key check.
fn answer(outcome: Result<Grant, AuthError>) -> Result<Principal, RestError> {
    match outcome {
        Ok(grant) => Ok(principal(grant)),
        Err(error) if error.is_refusal() => {
            // The error names at most the key's id, never its secret.
            tracing::info!(%error, "API key refused");
            Err(unauthorized(
                "the API key was refused: it is malformed, unknown, wrong or revoked; check \
                 the key, or ask an administrator for a new one",
            ))
        }
        Err(error) => {
            tracing::warn!(%error, "the key store could not be read");
            Err(RestError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "the API key could not be checked: the key store is unavailable; retry later",
            ))
        }
    }
}

impl Authenticator for KeyAuthenticator {
    fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, RestError> {
        answer(self.store.authenticate(bearer(headers)?))
    }

    fn authenticate_now(&self, headers: &HeaderMap) -> Option<Result<Principal, RestError>> {
        let key = match bearer(headers) {
            Ok(key) => key,
            Err(refused) => return Some(Err(refused)),
        };
        self.store.authenticate_cached(key).map(answer)
    }

    /// The namespaces of the valid (unrevoked) keys, each once; empty when the key store
    /// cannot be read (the sweep then covers the namespaces served since start).
    fn namespaces(&self) -> Vec<Namespace> {
        match self.store.list(None) {
            Ok(keys) => {
                let mut namespaces: Vec<Namespace> = keys
                    .into_iter()
                    .filter(|k| k.revoked.is_none())
                    .map(|k| k.namespace)
                    .collect();
                namespaces.sort_by(|a, b| a.as_str().cmp(b.as_str()));
                namespaces.dedup();
                namespaces
            }
            Err(error) => {
                tracing::warn!(%error, "the key store could not be listed for the expiry sweep");
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn keys_authenticate_by_bearer_and_refusals_are_one_401() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            KeyStore::open_sqlite(dir.path().join("keys.sqlite3"), Default::default()).unwrap(),
        );
        let acme: mnemon_keys::Namespace = "acme".parse().unwrap();
        let created = store
            .create(&acme, mnemon_keys::Role::Read, "test")
            .unwrap();
        let auth = KeyAuthenticator::new(Arc::clone(&store));
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let p = auth
                .authenticate(&headers(&format!("{scheme} {}", created.key())))
                .unwrap();
            assert_eq!((p.namespace.as_str(), p.role), ("acme", Role::Read));
        }
        // Read within the cache's time to live: answered without the database.
        let cached = auth.authenticate_now(&headers(&format!("Bearer {}", created.key())));
        assert!(matches!(cached, Some(Ok(_)) | None));
        let missing = auth.authenticate(&HeaderMap::new()).unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        let basic = auth.authenticate(&headers("Basic abc")).unwrap_err();
        assert_eq!(basic.status, StatusCode::UNAUTHORIZED);
        let key = created.key();
        let last = if key.ends_with('0') { '1' } else { '0' };
        let wrong = format!("{}{last}", &key[..key.len() - 1]);
        let refused = auth
            .authenticate(&headers(&format!("Bearer {wrong}")))
            .unwrap_err();
        let malformed = auth.authenticate(&headers("Bearer nope")).unwrap_err();
        assert_eq!(refused, malformed, "one answer for every refused key");
        assert!(!refused.message.contains(created.key()));
    }
}
