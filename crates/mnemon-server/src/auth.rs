//! Who a request is (docs/reference/rest.md#authentication): an [`Authenticator`] turns the
//! request's headers into a [`Principal`] — one namespace and a role — and every operation runs
//! inside that namespace only. [`OpenAccess`] is the authenticator without keys: every request
//! is the admin of one namespace, which `mnemon serve` only allows on a loopback address.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::{Duration, Instant};

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
///
/// Made with [`OpenAccess::until_keys`], it also watches the key store: a server started open
/// (no key had ever been created) must not stay open once one is, since "once a key has been
/// created, every request needs a valid key, for good" (docs/reference/keys.md#running-open).
/// The open server's tenants serve its one namespace only, so it cannot switch to checking
/// keys: from the first check that finds a key on, it refuses every request (401) until it is
/// restarted, when it starts with the keys.
#[derive(Clone)]
pub struct OpenAccess {
    namespace: Namespace,
    watch: Option<Arc<KeyWatch>>,
}

impl std::fmt::Debug for OpenAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAccess")
            .field("namespace", &self.namespace)
            .field("watches_keys", &self.watch.is_some())
            .finish()
    }
}

/// Whether any API key has ever been created (a revoked one counts, as in
/// `mnemon_keys::KeyStore::requires_keys`). May block: it reads the key store.
pub type KeysProbe = Box<dyn Fn() -> Result<bool, mnemon_keys::KeyError> + Send + Sync>;

/// How often an open server asks its [`KeysProbe`]: the same second as the key cache's
/// revocation delay between processes (`mnemon_keys::KeyStoreOptions::cache_ttl`).
pub const KEYS_PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The key store watch of an open server ([`OpenAccess::until_keys`]).
struct KeyWatch {
    probe: KeysProbe,
    /// Set, for good, by the first check that finds a key.
    keys_seen: AtomicBool,
    /// When the next check is due, in milliseconds since `epoch`; 0: at once.
    next_check_ms: AtomicU64,
    epoch: Instant,
    /// Held by the one request that checks; the others meanwhile go by the last answer.
    checking: Mutex<()>,
    /// The last check could not read the key store: the requests that come while the next
    /// one runs are refused too, as that check's own request was.
    failing: AtomicBool,
}

impl KeyWatch {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn due(&self) -> bool {
        self.now_ms() >= self.next_check_ms.load(Ordering::Acquire)
    }

    /// Asks the probe (blocking) unless another request is asking it now. `Ok(())` while no
    /// key exists.
    fn check(&self) -> Result<(), RestError> {
        if self.keys_seen.load(Ordering::Acquire) {
            return Err(keys_created());
        }
        // A check under way answers for this request too; a check that panicked (poisoning
        // the lock) must not turn the watch off.
        let _turn = match self.checking.try_lock() {
            Ok(turn) => turn,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // The last answer: "no key" lets the request by; a failed read refuses it (a
            // deployment with keys never runs open).
            Err(TryLockError::WouldBlock) if self.failing.load(Ordering::Acquire) => {
                return Err(key_store_unavailable());
            }
            Err(TryLockError::WouldBlock) => return Ok(()),
        };
        if !self.due() {
            return Ok(());
        }
        match (self.probe)() {
            Ok(false) => {
                let next = self
                    .now_ms()
                    .saturating_add(KEYS_PROBE_INTERVAL.as_millis() as u64);
                self.next_check_ms.store(next, Ordering::Release);
                self.failing.store(false, Ordering::Release);
                Ok(())
            }
            Ok(true) => {
                if !self.keys_seen.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        "an API key was created while this server ran open (it started before \
                         any key existed): the requests that need a key are refused from now \
                         on; restart the server so that it checks the keys"
                    );
                }
                Err(keys_created())
            }
            // Not knowing whether keys exist, the request is refused (a deployment with keys
            // never runs open); the next request asks again.
            Err(error) => {
                tracing::warn!(%error, "the key store could not be read");
                self.failing.store(true, Ordering::Release);
                Err(key_store_unavailable())
            }
        }
    }
}

/// The 503 of an open server that could not read its key store.
fn key_store_unavailable() -> RestError {
    RestError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "this server runs without keys and could not check that none has been created since \
         it started: the key store is unavailable; retry later",
    )
}

/// The 401 of an open server that has seen a key created.
fn keys_created() -> RestError {
    crate::keys::unauthorized(
        "this server started without API keys and one has been created since: it refuses \
         these requests until it is restarted, then requires a key (`Authorization: Bearer \
         <key>`)",
    )
}

impl OpenAccess {
    /// Open access to `namespace`, for good (an embedding program with no key store).
    pub fn new(namespace: Namespace) -> OpenAccess {
        OpenAccess {
            namespace,
            watch: None,
        }
    }

    /// Open access to `namespace` until `probe` finds an API key, checked at most every
    /// [`KEYS_PROBE_INTERVAL`] (on the blocking pool, by the first request that finds a check
    /// due; requests meanwhile go by the last answer): from then on every authenticated request
    /// is refused with 401 until the server is restarted (see [`OpenAccess`]). A request whose
    /// check fails to read the key store is refused with 503, and the next one checks again.
    pub fn until_keys(namespace: Namespace, probe: KeysProbe) -> OpenAccess {
        OpenAccess {
            namespace,
            watch: Some(Arc::new(KeyWatch {
                probe,
                keys_seen: AtomicBool::new(false),
                next_check_ms: AtomicU64::new(0),
                epoch: Instant::now(),
                checking: Mutex::new(()),
                failing: AtomicBool::new(false),
            })),
        }
    }

    /// The one principal of open access, or the refusal once keys exist (see
    /// [`OpenAccess::until_keys`]); blocks when the key store is due for a check. For servers
    /// without request headers to authenticate (`mnemon mcp --http` checks it per tool call).
    pub fn admit(&self) -> Result<Principal, RestError> {
        if let Some(watch) = &self.watch {
            watch.check()?;
        }
        Ok(self.principal())
    }

    fn principal(&self) -> Principal {
        Principal {
            namespace: self.namespace.clone(),
            role: Role::Admin,
        }
    }
}

impl Authenticator for OpenAccess {
    fn authenticate(&self, _headers: &axum::http::HeaderMap) -> Result<Principal, RestError> {
        self.admit()
    }

    fn blocks(&self) -> bool {
        self.watch.is_some()
    }

    fn authenticate_now(
        &self,
        _headers: &axum::http::HeaderMap,
    ) -> Option<Result<Principal, RestError>> {
        match &self.watch {
            None => Some(Ok(self.principal())),
            Some(watch) if watch.keys_seen.load(Ordering::Acquire) => Some(Err(keys_created())),
            Some(watch) if watch.due() => None,
            Some(_) => Some(Ok(self.principal())),
        }
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

    /// While the key store cannot be read, an open server refuses the requests that come
    /// during a check as it refuses the check's own: they were let by ("a check under way
    /// answers for this request too", with the answer of a server that had seen no key), as
    /// the admin of its namespace. Found by a review.
    #[test]
    fn requests_during_a_check_are_refused_while_the_key_store_fails() {
        let (entered, probing) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let (entered, released) = (Mutex::new(entered), Mutex::new(released));
        let calls = std::sync::atomic::AtomicUsize::new(0);
        let probe: KeysProbe = Box::new(move || {
            if calls.fetch_add(1, Ordering::SeqCst) == 1 {
                let _ = entered.lock().map(|e| e.send(()));
                let _ = released.lock().map(|r| r.recv());
            }
            Err(mnemon_keys::KeyError::not_found("probe"))
        });
        let access = Arc::new(OpenAccess::until_keys(Namespace::default(), probe));
        assert_eq!(
            access.admit().unwrap_err().status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        let checking = {
            let access = Arc::clone(&access);
            std::thread::spawn(move || access.admit().map(|_| ()))
        };
        probing.recv().unwrap();
        let meanwhile = access.admit().map(|p| p.role);
        release.send(()).unwrap();
        assert!(checking.join().unwrap().is_err());
        assert_eq!(
            meanwhile.unwrap_err().status,
            StatusCode::SERVICE_UNAVAILABLE,
            "a request during a failing check was let by"
        );
    }

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
