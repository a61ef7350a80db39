//! The key store: create, list, revoke and authenticate, with a small cache in front of the
//! database (docs/reference/keys.md, "Revocation").

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use mnemon_db::{Durability, Namespace};
use serde::{Serialize, Serializer};
use subtle::ConstantTimeEq;

use crate::backend::{Backend, Revoked, Row};
use crate::role::Role;
use crate::sqlite::SqliteBackend;
use crate::token::{self, Generated, KeyHash, Presented};
use crate::{AuthError, KeyError};

/// The longest label, in characters.
pub const MAX_LABEL_CHARS: usize = 200;

/// How often, at most, a key's last-use time is written: the time is accurate to this much, and
/// a busy server writes once per key per interval rather than once per request.
pub const LAST_USED_GRANULARITY: Duration = Duration::from_secs(60);

/// The default of [`KeyStoreOptions::cache_ttl`], and so the default bound on how long a revoke
/// takes to reach other processes sharing the database.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(1);

/// Revokes made by this process, per database (its canonical file or PostgreSQL target),
/// through any handle. A cached entry remembers the count it was read under and is stale once
/// the count moves, so a revoke takes effect on the next request in this process whichever
/// handle made it; a revoke in another database leaves this one's cache alone.
static REVOCATIONS: Mutex<BTreeMap<String, Arc<AtomicU64>>> = Mutex::new(BTreeMap::new());

/// The revocation counter of the database at `location`, shared by its handles in this process.
fn revocations_of(location: String) -> Arc<AtomicU64> {
    let mut all = REVOCATIONS.lock().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(all.entry(location).or_default())
}

/// The digest an unknown id is compared against, so that refusing an unknown id costs the same
/// hashing and comparison as refusing a wrong secret.
const DECOY: KeyHash = [0x5a; 32];

/// How a [`KeyStore`] is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyStoreOptions {
    /// How hard a commit works to survive crashes. Default: [`Durability::Full`].
    pub durability: Durability,
    /// SQLite: how long a write waits for another process's write. Default: 5 s.
    pub busy_timeout: Duration,
    /// PostgreSQL: the most connections the store holds open. Default: 4.
    pub pool_size: usize,
    /// How long a key read from the database is trusted before it is read again: the bound on
    /// how long a revoke made by another process takes to be seen here. Default: 1 s
    /// ([`DEFAULT_CACHE_TTL`]). Zero reads the database on every request.
    pub cache_ttl: Duration,
    /// The most keys cached at once; when full the cache is emptied. Default: 10,000.
    pub cache_capacity: usize,
}

impl Default for KeyStoreOptions {
    fn default() -> Self {
        let shared = mnemon_db::sqlite::Settings::default();
        KeyStoreOptions {
            durability: shared.durability,
            busy_timeout: shared.busy_timeout,
            pool_size: 4,
            cache_ttl: DEFAULT_CACHE_TTL,
            cache_capacity: 10_000,
        }
    }
}

/// A time on a key: UTC, to the millisecond; RFC 3339 in JSON.
pub type KeyTime = DateTime<Utc>;

/// A stored key, without its secret: what `mnemon keys list` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyInfo {
    /// The key's id: the 16 hex digits after `mnk_`. Not secret.
    pub id: String,
    /// The label given at creation (may be empty).
    pub label: String,
    /// The namespace the key is bound to.
    #[serde(serialize_with = "namespace_str")]
    pub namespace: Namespace,
    /// What the key may do there.
    pub role: Role,
    /// When it was created.
    pub created: KeyTime,
    /// When it last authenticated a request, to within [`LAST_USED_GRANULARITY`]; `None` if
    /// never.
    pub last_used: Option<KeyTime>,
    /// When it was revoked; `None` while it is valid.
    pub revoked: Option<KeyTime>,
}

fn namespace_str<S: Serializer>(namespace: &Namespace, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(namespace.as_str())
}

impl KeyInfo {
    /// Whether the key was revoked.
    pub fn is_revoked(&self) -> bool {
        self.revoked.is_some()
    }

    fn from_row(row: &Row) -> Result<KeyInfo, KeyError> {
        let time = |ms: i64| {
            DateTime::from_timestamp_millis(ms).ok_or_else(|| KeyError::Damaged {
                id: row.id.clone(),
                detail: format!("the time {ms} ms is out of range"),
            })
        };
        Ok(KeyInfo {
            id: row.id.clone(),
            label: row.label.clone(),
            namespace: row.namespace.clone(),
            role: row.role,
            created: time(row.created_ms)?,
            last_used: row.last_used_ms.map(time).transpose()?,
            revoked: row.revoked_ms.map(time).transpose()?,
        })
    }
}

/// A key just created: the only time its secret exists outside the client. Its Debug shows the
/// id and hides the secret; there is no Display, so the key is printed only on purpose
/// ([`CreatedKey::key`]).
#[derive(Clone)]
pub struct CreatedKey {
    key: String,
    /// The key's record, as [`KeyStore::list`] will show it.
    pub info: KeyInfo,
}

impl CreatedKey {
    /// The whole key (`mnk_<id>_<secret>`) to hand to the client. It cannot be shown again:
    /// only its hash is stored.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Debug for CreatedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CreatedKey")
            .field(
                "key",
                &format_args!("{}{}_<redacted>", token::PREFIX, self.info.id),
            )
            .field("info", &self.info)
            .finish()
    }
}

/// What an authenticated request may do: act in `namespace`, as far as `role` allows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The id of the key that authenticated (for logs; not secret).
    pub key_id: String,
    /// The only namespace the request may touch.
    pub namespace: Namespace,
    /// What it may do there.
    pub role: Role,
}

impl Grant {
    /// Whether the grant allows an operation that requires `required`.
    pub fn allows(&self, required: Role) -> bool {
        self.role.allows(required)
    }
}

/// What [`KeyStore::revoke`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revocation {
    /// The key was valid and is now revoked.
    Revoked,
    /// The key had been revoked before; nothing changed.
    AlreadyRevoked,
}

/// A key as the cache holds it: its digest and grant, never its secret.
#[derive(Clone)]
struct Cached {
    hash: KeyHash,
    grant: Grant,
    revoked: bool,
    last_used_ms: Option<i64>,
    read_at: Instant,
    revocations: u64,
}

/// The API keys of one database (see the crate docs). Cheap to share: wrap it in an `Arc`.
pub struct KeyStore {
    backend: Box<dyn Backend>,
    /// This database's revocations in this process ([`REVOCATIONS`]).
    revocations: Arc<AtomicU64>,
    cache: RwLock<HashMap<String, Cached>>,
    options: KeyStoreOptions,
}

impl fmt::Debug for KeyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyStore")
            .field("backend", &self.backend)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl KeyStore {
    /// Opens (creating if needed) the key tables in the SQLite database at `path`, normally the
    /// data directory's `mnemon.sqlite3`, shared with the other stores. The parent directory
    /// must exist.
    pub fn open_sqlite(path: impl AsRef<Path>, options: KeyStoreOptions) -> Result<Self, KeyError> {
        let backend = SqliteBackend::open(path.as_ref(), &options)?;
        Ok(Self::with_backend(Box::new(backend), options))
    }

    /// Opens the SQLite database at `path` for reading only: nothing is created or written (a
    /// missing file or missing tables read as no keys), last-use times are not recorded, and
    /// [`KeyStore::create`] and [`KeyStore::revoke`] fail with [`KeyError::ReadOnly`].
    pub fn open_sqlite_read_only(
        path: impl AsRef<Path>,
        options: KeyStoreOptions,
    ) -> Result<Self, KeyError> {
        let backend = SqliteBackend::open_read_only(path.as_ref(), &options)?;
        Ok(Self::with_backend(Box::new(backend), options))
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://USER[:PASSWORD]@HOST[:PORT]/
    /// DATABASE`) and brings the key tables to the current version under the migration lock.
    /// Every server using the database sees the same keys.
    #[cfg(feature = "postgres")]
    pub fn open_postgres(url: &str, options: KeyStoreOptions) -> Result<Self, KeyError> {
        let backend = crate::postgres::PostgresBackend::open(url, &options)?;
        Ok(Self::with_backend(Box::new(backend), options))
    }

    fn with_backend(backend: Box<dyn Backend>, options: KeyStoreOptions) -> Self {
        KeyStore {
            revocations: revocations_of(backend.location()),
            backend,
            cache: RwLock::new(HashMap::new()),
            options,
        }
    }

    /// The bound on how long a revoke made by another process sharing the database takes to
    /// be refused here ([`KeyStoreOptions::cache_ttl`]). A revoke made by this process is
    /// refused on the next request.
    pub fn revocation_bound(&self) -> Duration {
        self.options.cache_ttl
    }

    /// Creates a key for `namespace` with `role`. The returned [`CreatedKey::key`] is the only
    /// copy of the secret: the store keeps its SHA-256 digest.
    pub fn create(
        &self,
        namespace: &Namespace,
        role: Role,
        label: &str,
    ) -> Result<CreatedKey, KeyError> {
        check_label(label)?;
        // A 64-bit id drawn twice is astronomically unlikely; drawing again is still cheaper
        // than explaining a failure.
        for _ in 0..4 {
            let generated = Generated::new()?;
            let row = Row {
                id: generated.id.clone(),
                hash: generated.hash,
                namespace: namespace.clone(),
                role,
                label: label.to_owned(),
                created_ms: now_ms(),
                last_used_ms: None,
                revoked_ms: None,
            };
            if self.backend.insert(&row)? {
                return Ok(CreatedKey {
                    key: generated.key,
                    info: KeyInfo::from_row(&row)?,
                });
            }
        }
        Err(KeyError::Random {
            detail: "four fresh key ids in a row were already taken".to_owned(),
        })
    }

    /// The keys of `namespace`, or of every namespace (`None`), ordered by namespace, creation
    /// time and id. Revoked keys are included (see [`KeyInfo::revoked`]).
    pub fn list(&self, namespace: Option<&Namespace>) -> Result<Vec<KeyInfo>, KeyError> {
        self.backend
            .list(namespace)?
            .iter()
            .map(KeyInfo::from_row)
            .collect()
    }

    /// Revokes the key with `id` (the 16 hex digits after `mnk_`). From the next request on
    /// this process, and within [`KeyStore::revocation_bound`] on other processes sharing the
    /// database, the key is refused with [`AuthError::Revoked`]. Revoking twice is not an
    /// error ([`Revocation::AlreadyRevoked`]); an unknown id is [`KeyError::NotFound`]. The
    /// whole key is taken too (what an operator holding a leaked key has at hand): its id is
    /// revoked, and no message repeats its secret.
    pub fn revoke(&self, id: &str) -> Result<Revocation, KeyError> {
        let not_found = || KeyError::not_found(id);
        let id = token::Presented::parse(id).map_or(id, |key| key.id);
        if !token::is_id(id) {
            return Err(not_found());
        }
        let outcome = self.backend.revoke(id, now_ms())?;
        // Committed: make every cached entry of this database in this process stale, in every
        // handle.
        self.revocations.fetch_add(1, Ordering::AcqRel);
        self.cache
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id);
        match outcome {
            Revoked::Now => Ok(Revocation::Revoked),
            Revoked::Already => Ok(Revocation::AlreadyRevoked),
            Revoked::Missing => Err(not_found()),
        }
    }

    /// Whether any key is valid (created and not revoked).
    pub fn any_keys(&self) -> Result<bool, KeyError> {
        self.backend.any_key(true)
    }

    /// Whether a server over this store must require a key on every request: whether any key
    /// was ever created, revoked ones included (docs/reference/keys.md#running-open). Revoking
    /// the last key must lock a server, never open it: a deployment that had keys may be
    /// reachable by others (a reverse proxy on the same machine) however it binds.
    pub fn requires_keys(&self) -> Result<bool, KeyError> {
        self.backend.any_key(false)
    }

    /// Checks a presented key: the grant of its namespace and role, or why it is refused. A
    /// malformed string is refused before any database work; the secret's digest is compared
    /// with the stored one in constant time, and an unknown id costs the same hashing and
    /// comparison as a wrong secret. A cache miss reads one row (blocking); see
    /// [`KeyStore::authenticate_cached`] for async callers.
    pub fn authenticate(&self, presented: &str) -> Result<Grant, AuthError> {
        let Some(key) = Presented::parse(presented) else {
            return Err(AuthError::Malformed);
        };
        let digest = key.digest();
        let revocations = self.revocations.load(Ordering::Acquire);
        let entry = match self.cached(key.id, revocations) {
            Some(entry) => entry,
            None => {
                let Some(row) = self.backend.fetch(key.id).map_err(AuthError::Unavailable)? else {
                    // Discarded (but not optimised away): only its cost matters.
                    std::hint::black_box(bool::from(DECOY.ct_eq(&digest)));
                    return Err(AuthError::Unknown {
                        key_id: key.id.to_owned(),
                    });
                };
                let entry = Cached {
                    hash: row.hash,
                    grant: Grant {
                        key_id: row.id,
                        namespace: row.namespace,
                        role: row.role,
                    },
                    revoked: row.revoked_ms.is_some(),
                    last_used_ms: row.last_used_ms,
                    read_at: Instant::now(),
                    revocations,
                };
                self.remember(entry.clone());
                entry
            }
        };
        let grant = check(&entry, &digest)?;
        let now = now_ms();
        if touch_due(entry.last_used_ms, now) && self.claim_touch(key.id, now) {
            // Best effort: a failed or skipped write only leaves the last-use time older.
            let _ = self.backend.touch(key.id, now);
        }
        Ok(grant)
    }

    /// [`KeyStore::authenticate`] without touching the database: `Some` with the answer when
    /// it can be given from memory (a malformed key, or a key read within the cache's time to
    /// live), `None` when the database must be asked. An async server calls this on its own
    /// thread and moves only the `None` case to a blocking thread.
    pub fn authenticate_cached(&self, presented: &str) -> Option<Result<Grant, AuthError>> {
        let Some(key) = Presented::parse(presented) else {
            return Some(Err(AuthError::Malformed));
        };
        let entry = self.cached(key.id, self.revocations.load(Ordering::Acquire))?;
        let digest = key.digest();
        match check(&entry, &digest) {
            // A last-use write is due: that is database work.
            Ok(_) if touch_due(entry.last_used_ms, now_ms()) => None,
            answer => Some(answer),
        }
    }

    /// Whether this request should record the use of `id` at `now`: of the requests that find
    /// a write due at once, only the first, which marks the cached entry, writes.
    fn claim_touch(&self, id: &str, now: i64) -> bool {
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        match cache.get_mut(id) {
            Some(cached) if touch_due(cached.last_used_ms, now) => {
                cached.last_used_ms = Some(now);
                true
            }
            Some(_) => false,
            // Not cached (a zero time to live): every check writes when due.
            None => true,
        }
    }

    /// The cached entry for `id` if it is still fresh.
    fn cached(&self, id: &str, revocations: u64) -> Option<Cached> {
        let cache = self.cache.read().unwrap_or_else(PoisonError::into_inner);
        let entry = cache.get(id)?;
        let fresh =
            entry.revocations == revocations && entry.read_at.elapsed() < self.options.cache_ttl;
        fresh.then(|| entry.clone())
    }

    fn remember(&self, entry: Cached) {
        if self.options.cache_ttl.is_zero() || self.options.cache_capacity == 0 {
            return;
        }
        let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= self.options.cache_capacity {
            cache.clear();
        }
        cache.insert(entry.grant.key_id.clone(), entry);
    }
}

/// The grant of `entry` if `digest` matches it and it is not revoked. The secret is checked
/// first, so that only the key's holder learns that it was revoked.
fn check(entry: &Cached, digest: &KeyHash) -> Result<Grant, AuthError> {
    if !bool::from(entry.hash.ct_eq(digest)) {
        return Err(AuthError::Wrong {
            key_id: entry.grant.key_id.clone(),
        });
    }
    if entry.revoked {
        return Err(AuthError::Revoked {
            key_id: entry.grant.key_id.clone(),
        });
    }
    Ok(entry.grant.clone())
}

fn touch_due(last_used_ms: Option<i64>, now_ms: i64) -> bool {
    let every = i64::try_from(LAST_USED_GRANULARITY.as_millis()).unwrap_or(i64::MAX);
    last_used_ms.is_none_or(|last| now_ms.saturating_sub(last) >= every)
}

fn check_label(label: &str) -> Result<(), KeyError> {
    let chars = label.chars().count();
    if chars > MAX_LABEL_CHARS {
        return Err(KeyError::BadLabel {
            reason: format!("it has {chars} characters"),
        });
    }
    if let Some(c) = label.chars().find(|c| c.is_control()) {
        return Err(KeyError::BadLabel {
            reason: format!("it contains the control character {c:?}"),
        });
    }
    Ok(())
}

/// Now, in Unix milliseconds (0 for a clock set before 1970).
fn now_ms() -> i64 {
    Utc::now().timestamp_millis().max(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn open(dir: &Path, options: KeyStoreOptions) -> KeyStore {
        KeyStore::open_sqlite(dir.join("mnemon.sqlite3"), options).unwrap()
    }

    fn ns(name: &str) -> Namespace {
        name.parse().unwrap()
    }

    /// `key` with its last secret digit changed.
    fn wrong(key: &str) -> String {
        let (head, last) = key.split_at(key.len() - 1);
        format!("{head}{}", if last == "0" { "1" } else { "0" })
    }

    #[test]
    fn a_created_key_authenticates_to_its_namespace_and_role() {
        let dir = tempfile::tempdir().unwrap();
        let keys = open(dir.path(), KeyStoreOptions::default());
        assert!(!keys.any_keys().unwrap());
        assert!(!keys.requires_keys().unwrap());
        let created = keys.create(&ns("acme"), Role::Read, "reporting").unwrap();
        assert!(keys.any_keys().unwrap());
        assert!(keys.requires_keys().unwrap());
        let grant = keys.authenticate(created.key()).unwrap();
        assert_eq!(
            grant,
            Grant {
                key_id: created.info.id.clone(),
                namespace: ns("acme"),
                role: Role::Read
            }
        );
        assert!(grant.allows(Role::Read) && !grant.allows(Role::Write));
        // Cached now, and the same answer.
        assert_eq!(
            keys.authenticate_cached(created.key()).unwrap().unwrap(),
            grant
        );
    }

    #[test]
    fn wrong_unknown_and_malformed_keys_are_refused_apart() {
        let dir = tempfile::tempdir().unwrap();
        let keys = open(dir.path(), KeyStoreOptions::default());
        let created = keys.create(&ns("acme"), Role::Admin, "").unwrap();
        let id = created.info.id.clone();
        for _ in 0..2 {
            // Twice: the second time the row comes from the cache.
            let err = keys.authenticate(&wrong(created.key())).unwrap_err();
            assert!(
                matches!(&err, AuthError::Wrong { key_id } if *key_id == id),
                "{err:?}"
            );
            assert!(err.is_refusal());
        }
        let unknown = format!("mnk_{}_{}", "0".repeat(16), "0".repeat(64));
        assert!(matches!(
            keys.authenticate(&unknown),
            Err(AuthError::Unknown { .. })
        ));
        for malformed in [
            "",
            "Bearer x",
            &created.key().to_uppercase(),
            &created.key()[1..],
        ] {
            assert!(matches!(
                keys.authenticate(malformed),
                Err(AuthError::Malformed)
            ));
            assert!(matches!(
                keys.authenticate_cached(malformed),
                Some(Err(AuthError::Malformed))
            ));
        }
        // No message quotes the secret.
        let secret = &created.key()[21..];
        let messages = [
            keys.authenticate(&wrong(created.key()))
                .unwrap_err()
                .to_string(),
            format!("{created:?}"),
            format!("{keys:?}"),
        ];
        for text in messages {
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn a_revoke_is_refused_on_the_next_request_through_any_handle() {
        let dir = tempfile::tempdir().unwrap();
        let one = open(dir.path(), KeyStoreOptions::default());
        // A long time to live: only the revoke can make the other handle read again.
        let other = open(
            dir.path(),
            KeyStoreOptions {
                cache_ttl: Duration::from_secs(3600),
                ..KeyStoreOptions::default()
            },
        );
        let created = one.create(&ns("acme"), Role::Write, "").unwrap();
        other.authenticate(created.key()).unwrap();
        one.authenticate(created.key()).unwrap();
        assert_eq!(one.revoke(&created.info.id).unwrap(), Revocation::Revoked);
        for keys in [&one, &other] {
            let err = keys.authenticate(created.key()).unwrap_err();
            assert!(matches!(err, AuthError::Revoked { .. }), "{err:?}");
        }
        assert_eq!(
            other.revoke(&created.info.id).unwrap(),
            Revocation::AlreadyRevoked
        );
        assert!(!one.any_keys().unwrap());
        // Revoked keys still make the store one that requires keys.
        assert!(one.requires_keys().unwrap());
        // Only the key's holder learns that it was revoked.
        assert!(matches!(
            one.authenticate(&wrong(created.key())),
            Err(AuthError::Wrong { .. })
        ));
        for bad in ["", "0123", "ffffffffffffffff", "mnk_x"] {
            assert!(
                matches!(one.revoke(bad), Err(KeyError::NotFound { .. })),
                "{bad}"
            );
        }
    }

    /// `revoke` takes a whole key as well as its id, and its "not found" never repeats a
    /// secret: the message quoted the first 64 characters of what it was given, the id and
    /// 43 of the secret's 64 digits of a pasted key (found by a review).
    #[test]
    fn revoke_takes_a_whole_key_and_never_repeats_its_secret() {
        let dir = tempfile::tempdir().unwrap();
        let one = open(dir.path(), KeyStoreOptions::default());
        let created = one.create(&ns("acme"), Role::Read, "").unwrap();
        assert_eq!(one.revoke(created.key()).unwrap(), Revocation::Revoked);
        assert!(matches!(
            one.authenticate(created.key()),
            Err(AuthError::Revoked { .. })
        ));
        // An unknown key of the right shape: not found, shown without its secret.
        let unknown = format!("mnk_{}_{}", "0".repeat(16), "a".repeat(64));
        let message = one.revoke(&unknown).unwrap_err().to_string();
        assert!(message.contains("\"mnk_0000000000000000…\""), "{message}");
        assert!(!message.contains("aaaa"), "{message}");
        let message = one.revoke(&"b".repeat(64)).unwrap_err().to_string();
        assert!(
            message.contains(&format!("\"{}…\"", "b".repeat(20))),
            "{message}"
        );
    }

    /// A revoke this process did not make (another process's, written straight to the
    /// database here) is seen once the cached entry is older than the time to live.
    #[test]
    fn a_revoke_from_elsewhere_is_seen_within_the_time_to_live() {
        let dir = tempfile::tempdir().unwrap();
        let ttl = Duration::from_secs(2);
        let keys = open(
            dir.path(),
            KeyStoreOptions {
                cache_ttl: ttl,
                ..KeyStoreOptions::default()
            },
        );
        let created = keys.create(&ns("acme"), Role::Write, "").unwrap();
        // The cached entry's age counts from before this first authentication.
        let cached_at = Instant::now();
        keys.authenticate(created.key()).unwrap();
        let conn = rusqlite::Connection::open(dir.path().join("mnemon.sqlite3")).unwrap();
        conn.execute(
            "UPDATE keys_keys SET revoked_ms = 1 WHERE key_id = ?1",
            [&created.info.id],
        )
        .unwrap();
        let revoked_at = Instant::now();
        // Until the time to live passes the cache gives the old answer (the point of the
        // cache); after it, never.
        let first = keys.authenticate(created.key());
        if cached_at.elapsed() < ttl / 2 {
            assert!(first.is_ok(), "{first:?}");
        }
        loop {
            match keys.authenticate(created.key()) {
                Err(AuthError::Revoked { .. }) => break,
                Ok(_) => assert!(
                    revoked_at.elapsed() <= ttl + Duration::from_secs(1),
                    "still accepted {:?} after the revoke",
                    revoked_at.elapsed()
                ),
                Err(other) => panic!("{other:?}"),
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn list_shows_every_key_without_secrets_by_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let keys = open(dir.path(), KeyStoreOptions::default());
        let a = keys.create(&ns("b-team"), Role::Read, "first").unwrap();
        let b = keys.create(&ns("a-team"), Role::Write, "second").unwrap();
        let c = keys.create(&ns("b-team"), Role::Admin, "third").unwrap();
        keys.revoke(&c.info.id).unwrap();
        let all = keys.list(None).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].id, b.info.id);
        assert_eq!(all[0].namespace, ns("a-team"));
        let b_team: Vec<_> = keys.list(Some(&ns("b-team"))).unwrap();
        let ids: Vec<&str> = b_team.iter().map(|k| k.id.as_str()).collect();
        let mut expected = vec![a.info.id.as_str(), c.info.id.as_str()];
        if a.info.created == c.info.created {
            expected.sort_unstable();
        }
        assert_eq!(ids, expected);
        assert!(b_team.iter().any(|k| k.id == c.info.id && k.is_revoked()));
        // Keys created in the same millisecond list by id, so "first" need not lead.
        let first_label = if b_team[0].id == a.info.id {
            "first"
        } else {
            "third"
        };
        assert_eq!(b_team[0].label, first_label);
        assert!(keys.list(Some(&ns("nobody"))).unwrap().is_empty());
        let json = serde_json::to_string(&all).unwrap();
        for created in [&a, &b, &c] {
            assert!(!json.contains(&created.key()[21..]), "{json}");
        }
        assert!(json.contains("\"namespace\":\"a-team\""), "{json}");
        assert!(json.contains("\"role\":\"write\""), "{json}");
    }

    #[test]
    fn use_is_recorded_once_per_interval() {
        let dir = tempfile::tempdir().unwrap();
        let keys = open(dir.path(), KeyStoreOptions::default());
        let created = keys.create(&ns("acme"), Role::Read, "").unwrap();
        assert_eq!(keys.list(None).unwrap()[0].last_used, None);
        let before = Utc::now();
        keys.authenticate(created.key()).unwrap();
        let used = keys.list(None).unwrap()[0].last_used.unwrap();
        assert!(
            used >= before - chrono::Duration::seconds(1),
            "{used} {before}"
        );
        // A second use within the interval writes nothing, and the cache answers alone.
        assert!(keys.authenticate_cached(created.key()).is_some());
        keys.authenticate(created.key()).unwrap();
        assert_eq!(keys.list(None).unwrap()[0].last_used, Some(used));
    }

    #[test]
    fn a_store_is_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<KeyStore>();
        shared::<Grant>();
        shared::<AuthError>();
    }

    #[test]
    fn labels_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let keys = open(dir.path(), KeyStoreOptions::default());
        for bad in ["a\nb".to_owned(), "x".repeat(MAX_LABEL_CHARS + 1)] {
            let err = keys.create(&ns("acme"), Role::Read, &bad).unwrap_err();
            assert!(matches!(err, KeyError::BadLabel { .. }), "{err:?}");
        }
        keys.create(&ns("acme"), Role::Read, &"é".repeat(MAX_LABEL_CHARS))
            .unwrap();
        assert_eq!(keys.list(None).unwrap().len(), 1);
    }

    #[test]
    fn a_read_only_store_reads_and_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mnemon.sqlite3");
        let missing = KeyStore::open_sqlite_read_only(&path, KeyStoreOptions::default()).unwrap();
        assert!(missing.list(None).unwrap().is_empty());
        assert!(!path.exists(), "reading created the database");
        let created = open(dir.path(), KeyStoreOptions::default())
            .create(&ns("acme"), Role::Read, "")
            .unwrap();
        let reader = KeyStore::open_sqlite_read_only(&path, KeyStoreOptions::default()).unwrap();
        assert_eq!(reader.list(None).unwrap().len(), 1);
        assert!(reader.authenticate(created.key()).is_ok());
        assert!(matches!(
            reader.create(&ns("acme"), Role::Read, ""),
            Err(KeyError::ReadOnly)
        ));
        assert!(matches!(
            reader.revoke(&created.info.id),
            Err(KeyError::ReadOnly)
        ));
    }

    #[test]
    fn a_damaged_row_is_reported_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let keys = open(dir.path(), KeyStoreOptions::default());
        let created = keys.create(&ns("acme"), Role::Read, "").unwrap();
        let conn = rusqlite::Connection::open(dir.path().join("mnemon.sqlite3")).unwrap();
        conn.execute("UPDATE keys_keys SET secret_hash = x'00'", [])
            .unwrap();
        let err = keys.list(None).unwrap_err();
        assert!(matches!(err, KeyError::Damaged { .. }), "{err:?}");
        assert!(matches!(
            keys.authenticate(created.key()),
            Err(AuthError::Unavailable(KeyError::Damaged { .. }))
        ));
    }
}
