//! The store's error type. Messages say what went wrong and what to do about it.
//!
//! Each message is complete on its own (it includes the underlying error's text), so inner
//! errors are not also exposed as `source()`: error reporters that walk the chain (anyhow's
//! `{:#}`, which the CLI uses) would print them twice.

use mnemon_types::{AssetRef, PathSegment};

use crate::resolve::ResolveError;

/// Everything that can go wrong in an [`AssetStore`](crate::AssetStore).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A reference did not resolve (including an unknown asset id).
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// A filter cannot be applied: a bad path or type, or a field this store cannot filter
    /// on (the message says where in the filter).
    #[error("bad asset filter: {0} (docs/reference/filters.md)")]
    Filter(mnemon_filter::FilterError),
    /// An asset to store has an empty id.
    #[error("asset_id must not be empty; give the asset an id or let Asset::new generate one")]
    EmptyAssetId,
    /// An asset's `extra` map holds a field named like one of the asset's own
    /// ([`mnemon_types::ASSET_FIELDS`]): stored, it would replace that field (an id, a type or
    /// a content read back other than put), so it is refused when put.
    #[error(
        "cannot store asset {asset_id:?}: its extra fields hold {field:?}, the name of one of the asset's own fields; set the asset's field itself, or rename the extra one"
    )]
    ReservedExtraField {
        /// The asset.
        asset_id: String,
        /// The extra field's name.
        field: String,
    },
    /// An asset nests maps and lists deeper than [`MAX_NESTING`](crate::MAX_NESTING).
    #[error(
        "cannot store asset {asset_id:?}: the map or list at {} is nested deeper than {limit} maps and lists (the asset itself counts as one), the most a stored asset may have; flatten that part, or store it as bytes (serialized JSON, say), and try again",
        location(.asset_id, .field_path)
    )]
    TooDeep {
        /// The asset.
        asset_id: String,
        /// Where the first map or list beyond the limit sits, from the asset's root.
        field_path: Vec<PathSegment>,
        /// The limit, [`MAX_NESTING`](crate::MAX_NESTING).
        limit: usize,
    },
    /// An in-process object has no codec in a durable store.
    #[error(
        "cannot store the object at {} (type {type_name}): no codec is registered for {type_name:?}; register an ObjectCodec for it when opening the store, or store it as JSON or bytes",
        location(.asset_id, .field_path)
    )]
    NoCodec {
        /// The asset holding the object.
        asset_id: String,
        /// Where the object sits, from the asset's root.
        field_path: Vec<PathSegment>,
        /// The object's declared type name.
        type_name: String,
    },
    /// A codec failed to encode or decode an object.
    #[error(
        "the codec for {type_name:?} failed on the object at {}: {detail}",
        location(.asset_id, .field_path)
    )]
    Codec {
        /// The asset holding the object.
        asset_id: String,
        /// Where the object sits, from the asset's root.
        field_path: Vec<PathSegment>,
        /// The object's declared type name.
        type_name: String,
        /// What the codec reported.
        detail: String,
    },
    /// Stored data could not be read back; the database was changed outside Mnemon or is
    /// damaged.
    #[error("stored asset {asset_id:?} is unreadable: {detail}")]
    Corrupt {
        /// The asset's id.
        asset_id: String,
        /// What is wrong with it.
        detail: String,
    },
    /// The database was written by a newer Mnemon.
    #[error(
        "the asset tables in {path} have schema version {found}, but this build knows versions up to {supported}; upgrade Mnemon to open it"
    )]
    SchemaTooNew {
        /// The database file.
        path: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The storage engine failed (including a lock held longer than the busy timeout).
    #[error("asset storage failed while {action}: {error}")]
    Storage {
        /// What the store was doing.
        action: &'static str,
        /// The engine's error. Named `error`, not `source`, because thiserror would make a
        /// field called `source` the error's `source()` and so print it twice (module docs).
        error: Box<dyn std::error::Error + Send + Sync>,
    },
}

// Not `#[from]`: that would also make the filter error the `source()`, printed twice.
impl From<mnemon_filter::FilterError> for StoreError {
    fn from(error: mnemon_filter::FilterError) -> Self {
        StoreError::Filter(error)
    }
}

/// The URL of a place inside an asset, for messages.
fn location(asset_id: &str, field_path: &[PathSegment]) -> AssetRef {
    AssetRef {
        asset_id: asset_id.to_owned(),
        field_path: field_path.to_vec(),
    }
}

impl StoreError {
    /// Whether the caller can fix this by changing the request (a wrong id, a wrong path, an
    /// object without codec), as opposed to a failure of the storage itself.
    pub fn is_caller_error(&self) -> bool {
        matches!(
            self,
            StoreError::Resolve(_)
                | StoreError::Filter(_)
                | StoreError::EmptyAssetId
                | StoreError::ReservedExtraField { .. }
                | StoreError::TooDeep { .. }
                | StoreError::NoCodec { .. }
        )
    }

    pub(crate) fn storage(action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
        move |e| StoreError::Storage {
            action,
            error: Box::new(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn storage_errors_carry_their_cause_once() {
        let e = StoreError::storage("reading an asset")(rusqlite::Error::InvalidQuery);
        assert_eq!(
            e.to_string(),
            format!(
                "asset storage failed while reading an asset: {}",
                rusqlite::Error::InvalidQuery
            )
        );
        // Already in the message: a chain-walking reporter (anyhow's {:#}) must not repeat it.
        assert!(e.source().is_none());
        assert!(!e.is_caller_error());
    }
}
