//! The crate's errors: [`KeyError`] for managing keys, [`AuthError`] for a refused key.

use mnemon_db::DbError;

/// Why a key could not be created, listed or revoked, or the key store opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Opening, setting up or migrating the database failed, or a statement failed on
    /// PostgreSQL (the message names the database and what to fix).
    #[error(transparent)]
    Db(#[from] DbError),
    /// A statement failed on SQLite.
    #[error("the key store could not {action} in {path}: {detail}")]
    Sqlite {
        /// What it was doing, e.g. `read a key`.
        action: &'static str,
        /// The database file.
        path: String,
        /// SQLite's message.
        detail: String,
    },
    /// No key has this id.
    #[error(
        "no API key has the id {id:?}; `mnemon keys list` shows the ids (the 16 hex digits \
         after `mnk_`)"
    )]
    NotFound {
        /// The id given, at most its first 20 characters (or `mnk_` and 16 more): never the
        /// secret of a whole key pasted in its place ([`KeyError::not_found`]).
        id: String,
    },
    /// The label is too long or holds control characters.
    #[error(
        "the key label is not accepted: {reason}; use at most {} characters without control \
         characters",
        crate::MAX_LABEL_CHARS
    )]
    BadLabel {
        /// What is wrong with it.
        reason: String,
    },
    /// The store was opened read-only and the call writes.
    #[error(
        "the key store was opened read-only; open it for writing (with write access to the \
         data directory) to create or revoke keys"
    )]
    ReadOnly,
    /// The operating system's random generator failed.
    #[error("the operating system's random generator failed: {detail}")]
    Random {
        /// Its message.
        detail: String,
    },
    /// A stored row does not read back as a key (edited by hand, or a bug).
    #[error("the stored API key {id:?} is damaged ({detail}); revoke it and create a new one")]
    Damaged {
        /// The key's id.
        id: String,
        /// What is wrong.
        detail: String,
    },
}

impl KeyError {
    /// [`KeyError::NotFound`] for the id `given`, shortened so that a message never repeats a
    /// key's secret: a whole key (`mnk_<id>_<secret>`) pasted where its id was asked for is
    /// shown as `mnk_<id>…`, anything else by its first 20 characters.
    pub fn not_found(given: &str) -> KeyError {
        let keep = if given.starts_with(crate::token::PREFIX) {
            crate::token::PREFIX.len() + crate::token::ID_HEX
        } else {
            crate::token::ID_HEX + 4
        };
        let mut id: String = given.chars().take(keep).collect();
        if given.chars().nth(keep).is_some() {
            id.push('…');
        }
        KeyError::NotFound { id }
    }

    /// Whether the caller's input is at fault (an unknown id, a bad label), as opposed to the
    /// database or the system: a CLI exits with a usage error, a server answers 4xx.
    pub fn is_caller_error(&self) -> bool {
        matches!(self, KeyError::NotFound { .. } | KeyError::BadLabel { .. })
    }
}

/// Why a presented key was refused. Every variant but [`AuthError::Unavailable`] means the
/// request carries no valid key (HTTP 401); `Unavailable` means the store could not be asked
/// (HTTP 503). Messages never quote the presented key: at most its id, which is not secret.
///
/// Tell clients only that the key was refused; the variants are for logs and metrics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The string is not shaped like a key (`mnk_` + 16 hex digits + `_` + 64 hex digits).
    #[error(
        "the API key is malformed: a key is `mnk_`, 16 lowercase hex digits, `_` and 64 \
         lowercase hex digits, as `mnemon keys create` printed it"
    )]
    Malformed,
    /// No key has the presented id.
    #[error("no API key has the id {key_id}; it was never created here (or the database differs)")]
    Unknown {
        /// The presented id.
        key_id: String,
    },
    /// The id exists but the secret is wrong.
    #[error("the API key {key_id} was presented with a wrong secret")]
    Wrong {
        /// The presented id.
        key_id: String,
    },
    /// The key was revoked.
    #[error("the API key {key_id} was revoked; create a new one with `mnemon keys create`")]
    Revoked {
        /// The key's id.
        key_id: String,
    },
    /// The key store could not be read (the database is unreachable, for example).
    #[error("the API key could not be checked: {0}")]
    Unavailable(#[source] KeyError),
}

impl AuthError {
    /// Whether the key itself was refused (HTTP 401), as opposed to the store being
    /// unavailable (HTTP 503).
    pub fn is_refusal(&self) -> bool {
        !matches!(self, AuthError::Unavailable(_))
    }
}
