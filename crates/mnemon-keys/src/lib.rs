//! API keys for the Mnemon server (docs/reference/keys.md): each key is bound to one
//! namespace and a [`Role`], shown once when it is created, stored as a SHA-256 digest only,
//! checked in constant time, and revocable.
//!
//! - **Format** ([`token`]): `mnk_<16 hex id>_<64 hex secret>`; the id is the lookup key and
//!   is not secret, the secret is 256 bits from the operating system.
//! - **Storage**: the `keys_keys` table in the data directory's SQLite file, beside the other
//!   stores ([`KeyStore::open_sqlite`]), or in a PostgreSQL database shared by several servers
//!   ([`KeyStore::open_postgres`], feature `postgres`), both versioned and migrated through
//!   `mnemon-db`. Keys are global to the database; each grants access to its own namespace only.
//! - **Authentication** ([`KeyStore::authenticate`]): a malformed key is refused before any
//!   database work; otherwise the row is read by id (or taken from a small cache) and the
//!   digests compared with `subtle`. An unknown id, a wrong secret, a revoked key and a
//!   malformed string are distinct [`AuthError`]s for logs; none quotes the secret.
//! - **Revocation** ([`KeyStore::revoke`]): refused from the next request in the same process
//!   (whichever handle revoked), and within [`KeyStoreOptions::cache_ttl`] (1 s by default)
//!   in other processes sharing the database.
//! - **Secrets are never logged**: [`CreatedKey`]'s Debug hides the secret and it has no
//!   Display; the store keeps no secret in memory, only digests.
//!
//! ```
//! use mnemon_keys::{AuthError, KeyStore, KeyStoreOptions, Role};
//!
//! let dir = tempfile::tempdir()?;
//! let keys = KeyStore::open_sqlite(dir.path().join("mnemon.sqlite3"), KeyStoreOptions::default())?;
//! let created = keys.create(&"acme".parse()?, Role::Write, "ci")?;
//! let grant = keys.authenticate(created.key())?;
//! assert_eq!(grant.namespace.as_str(), "acme");
//! assert!(grant.allows(Role::Read) && !grant.allows(Role::Admin));
//!
//! keys.revoke(&created.info.id)?;
//! assert!(matches!(keys.authenticate(created.key()), Err(AuthError::Revoked { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod backend;
mod error;
#[cfg(feature = "postgres")]
mod postgres;
mod role;
mod sqlite;
mod store;
pub mod token;

pub use error::{AuthError, KeyError};
pub use mnemon_db::Namespace;
pub use role::{Role, RoleError};
pub use store::{
    CreatedKey, DEFAULT_CACHE_TTL, Grant, KeyInfo, KeyStore, KeyStoreOptions, KeyTime,
    LAST_USED_GRANULARITY, MAX_LABEL_CHARS, Revocation,
};
