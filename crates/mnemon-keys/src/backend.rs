//! What a database backend does for the key store: store rows, read them back. The semantics
//! (formats, hashing, the cache, revocation) are written once in `store`; `sqlite` and
//! `postgres` only move rows.

use mnemon_db::Namespace;

use crate::KeyError;
use crate::role::Role;
use crate::token::KeyHash;

/// One key as stored: everything but the secret.
#[derive(Clone)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) hash: KeyHash,
    pub(crate) namespace: Namespace,
    pub(crate) role: Role,
    pub(crate) label: String,
    /// Unix time in milliseconds.
    pub(crate) created_ms: i64,
    pub(crate) last_used_ms: Option<i64>,
    pub(crate) revoked_ms: Option<i64>,
}

/// The columns of a row as a backend reads them, before they are checked.
pub(crate) struct RawRow {
    pub(crate) id: String,
    pub(crate) hash: Vec<u8>,
    pub(crate) namespace: String,
    pub(crate) role: String,
    pub(crate) label: String,
    pub(crate) created_ms: i64,
    pub(crate) last_used_ms: Option<i64>,
    pub(crate) revoked_ms: Option<i64>,
}

impl RawRow {
    /// Checks the columns: a row edited by hand is reported as damaged, never trusted.
    pub(crate) fn check(self) -> Result<Row, KeyError> {
        let damaged = |detail: String| KeyError::Damaged {
            id: self.id.clone(),
            detail,
        };
        let hash: KeyHash = self
            .hash
            .as_slice()
            .try_into()
            .map_err(|_| damaged(format!("its hash has {} bytes, not 32", self.hash.len())))?;
        let namespace: Namespace = self
            .namespace
            .parse()
            .map_err(|e| damaged(format!("its namespace: {e}")))?;
        let role: Role = self
            .role
            .parse()
            .map_err(|e| damaged(format!("its role: {e}")))?;
        Ok(Row {
            id: self.id,
            hash,
            namespace,
            role,
            label: self.label,
            created_ms: self.created_ms,
            last_used_ms: self.last_used_ms,
            revoked_ms: self.revoked_ms,
        })
    }
}

/// What a revoke found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoked {
    /// This call revoked the key.
    Now,
    /// The key had been revoked before.
    Already,
    /// No key has the id.
    Missing,
}

/// A database holding the key rows.
pub(crate) trait Backend: Send + Sync + std::fmt::Debug {
    /// Inserts `row` unless its id is taken; `false` when it was (the caller draws a new id).
    fn insert(&self, row: &Row) -> Result<bool, KeyError>;
    /// The row with `id`, if any.
    fn fetch(&self, id: &str) -> Result<Option<Row>, KeyError>;
    /// Every row, or the rows of one namespace, ordered by namespace, creation time and id.
    fn list(&self, namespace: Option<&Namespace>) -> Result<Vec<Row>, KeyError>;
    /// Sets the revocation time of `id` unless it is set already.
    fn revoke(&self, id: &str, now_ms: i64) -> Result<Revoked, KeyError>;
    /// Records a use of `id` at `now_ms`. Best effort: the caller ignores a failure, and a
    /// backend may skip it rather than wait for another writer.
    fn touch(&self, id: &str, now_ms: i64) -> Result<(), KeyError>;
    /// Whether any key is not revoked (`active_only`), or whether any key was ever created
    /// (revoked ones count).
    fn any_key(&self, active_only: bool) -> Result<bool, KeyError>;
    /// The database, as a name that every handle on it in this process agrees on.
    fn location(&self) -> String;
}
