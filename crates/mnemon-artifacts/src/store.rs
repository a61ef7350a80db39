//! The `ArtifactStore` trait: the narrow interface every artifact store implements.

use mnemon_db::Expiry;
use mnemon_filter::{ColumnKind, Filter, Source};
use mnemon_types::{Artifact, StorageLocation};
use uuid::Uuid;

use crate::{ArtifactError, BackendRegistry, Storage};

/// Keeps artifact records (docs/reference/artifacts.md#artifact-store).
///
/// Implementations must agree on these rules, which the shared conformance suite checks:
///
/// - `save` refuses a record whose `key`, `type` or `name` is empty
///   ([`ArtifactError::MissingAttributes`]) and a record whose id is already stored
///   ([`ArtifactError::DuplicateId`]); records are immutable.
/// - Every successful `save` takes the next value of a per-store monotonic sequence and returns
///   it. Sequence values are never reused, even after a delete.
/// - `latest(scope, key)` is the record with the highest sequence among that scope's records
///   with that key: most recent wins by save order, never by `created_at`, so two saves in the
///   same microsecond still have an order.
/// - `list` returns a scope's records in save order.
/// - `scopes` names every scope holding at least one record, each once, in ascending byte
///   order; a scope whose records were all deleted is gone from it.
/// - `list_page` walks what `list` and `list_where` return, a page at a time, after a record
///   that still holds its place while it is stored (expired but not swept included).
/// - An expired record (docs/reference/artifacts.md#expiry) is invisible to every read at once
///   (`get`, `latest`, `list`, `list_where`, `count_where`, `scopes`): `latest` is then the
///   most recent live record of the key. [`gc`](Self::gc) removes expired records and
///   [`forget`](Self::forget) a scope prefix's, each with the backend content no remaining
///   record points at.
/// - When `save` returns, the record is as durable as the implementation can make it (for
///   SQLite: committed and synced in WAL mode).
///
/// The trait is synchronous and object-safe (`Box<dyn ArtifactStore>` works), and it takes and
/// returns owned data only, so the PostgreSQL implementation (feature `postgres`: a `BIGSERIAL`
/// for the sequence, an id unique within its namespace) fits without changes.
pub trait ArtifactStore: Send + Sync {
    /// Stores `artifact` and returns the sequence value it was given.
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError>;

    /// Runs `write_content` (which writes the content a record points at, in a storage
    /// backend), then stores `artifact`, with no other save of this store in between: two saves
    /// to the same storage id can then never leave the newest record pointing at the other
    /// save's content. A failed `write_content` stores nothing and is returned as is.
    ///
    /// The default runs the two steps one after the other without exclusion; stores shared by
    /// several threads or processes override it (SQLite holds its write lock across both;
    /// PostgreSQL an advisory lock on the record's storage id until the record is committed).
    fn save_with_content(
        &self,
        artifact: &Artifact,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        write_content()?;
        self.save(artifact)
    }

    /// As [`save_with_content`](Self::save_with_content), the record expiring as `expiry`
    /// says (`save` and `save_with_content` use [`Expiry::Default`], the handle's default
    /// time-to-live).
    fn save_expiring(
        &self,
        artifact: &Artifact,
        expiry: Expiry,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError>;

    /// When the record expires (milliseconds since the Unix epoch): `Ok(None)` when it is not
    /// stored (or has expired), `Ok(Some(None))` when it never expires.
    fn expires_at(&self, id: Uuid) -> Result<Option<Option<i64>>, ArtifactError>;

    /// The live records of `scope` (of every scope for `None`) whose filterable document
    /// matches `filter` (all for `None`), in save order, at most `limit`: the filter applies
    /// before the cut. The document is [`document`]'s (docs/reference/artifacts.md#filters); a
    /// path that starts with another field is [`ArtifactError::Filter`].
    fn list_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<Artifact>, ArtifactError>;

    /// How many live records of `scope` (of every scope for `None`) match `filter`.
    fn count_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
    ) -> Result<u64, ArtifactError>;

    /// Removes every expired record of the namespace in one transaction, then the content
    /// they kept in `backends` that no remaining record (of any namespace) points at.
    fn gc(&self, backends: &BackendRegistry) -> Result<ArtifactSweep, ArtifactError>;

    /// Removes every record of the namespace whose scope starts with `scope_prefix` (all of
    /// the namespace's for `""`), expired or not, in one transaction, then their content as
    /// [`gc`](Self::gc) does.
    fn forget(
        &self,
        scope_prefix: &str,
        backends: &BackendRegistry,
    ) -> Result<ArtifactSweep, ArtifactError>;

    /// The record with `id`, if stored.
    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError>;

    /// The most recently saved record with `key` in `scope`.
    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError>;

    /// The records of `scope`, in save order; with `artifact_type`, only records of that type.
    fn list(
        &self,
        scope: &str,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Artifact>, ArtifactError>;

    /// The scopes that hold records, each once, in ascending byte order (the order of Rust's
    /// `str`): with [`list`](Self::list) per scope, everything the store holds, as
    /// `mnemon migrate` copies it. A store opened for a namespace names only that namespace's
    /// scopes.
    fn scopes(&self) -> Result<Vec<String>, ArtifactError>;

    /// Removes the record with `id`; `false` if there was none. Content kept by a storage
    /// backend is not touched (another record may point at the same storage id).
    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError>;

    /// One page of the live records `query` selects, in save order, each without its inline
    /// content and with its expiry: what a listing hands out, read without the records before
    /// the page or the content of any (docs/reference/artifacts.md#listing-in-pages).
    /// `Ok(None)` when [`PageQuery::after`] names no record stored in the namespace (deleted or
    /// swept since it was handed out).
    fn list_page(
        &self,
        query: &PageQuery<'_>,
    ) -> Result<Option<Vec<ListedArtifact>>, ArtifactError>;
}

/// What [`ArtifactStore::list_page`] lists: the live records of `scope` (every scope for
/// `None`) of type `artifact_type` (any for `None`) that `filter` selects (all for `None`),
/// after the record with id `after` in save order (from the first for `None`), at most `limit`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageQuery<'a> {
    /// The scope listed; `None` lists every scope of the namespace.
    pub scope: Option<&'a str>,
    /// Only records of this type.
    pub artifact_type: Option<&'a str>,
    /// Only records whose document matches ([`list_where`](ArtifactStore::list_where)'s).
    pub filter: Option<&'a Filter>,
    /// The last record of the previous page: the page starts after it in save order. It
    /// need not be live, or match, to hold its place.
    pub after: Option<Uuid>,
    /// The most records in the page.
    pub limit: usize,
}

/// What narrows a durable store's listing beyond scope and filter: a type, and the sequence
/// value a page starts after.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Narrow<'a> {
    pub(crate) artifact_type: Option<&'a str>,
    pub(crate) after_seq: Option<i64>,
}

impl<'a> Narrow<'a> {
    /// A page's: its type, after the cursor's record at sequence value `after_seq`.
    pub(crate) fn of_page(query: &PageQuery<'a>, after_seq: Option<i64>) -> Narrow<'a> {
        Narrow {
            artifact_type: query.artifact_type,
            after_seq,
        }
    }
}

/// One record of a page ([`ArtifactStore::list_page`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ListedArtifact {
    /// The record without its inline content (`data` is `None`; a `get` reads it).
    pub artifact: Artifact,
    /// When it expires, in milliseconds since the Unix epoch; `None` never.
    pub expires_at: Option<i64>,
}

/// Refuses records that lack `key`, `type` or `name`; shared by every implementation.
pub(crate) fn check_required(artifact: &Artifact) -> Result<(), ArtifactError> {
    let missing = artifact.missing_required();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ArtifactError::MissingAttributes {
            missing: missing.into_iter().map(str::to_owned).collect(),
        })
    }
}

/// What a [`gc`](ArtifactStore::gc) or [`forget`](ArtifactStore::forget) removed.
///
/// Records go first, in one transaction; then each storage location they pointed at is
/// removed from its backend under the same exclusion as a save to it (so a concurrent save of
/// that storage id cannot lose its new content), unless a remaining record still points at it.
/// A location that cannot be removed is reported, never an error of the whole call: its
/// records are already gone, and a file no record points at is only garbage.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArtifactSweep {
    /// Records removed.
    pub records: u64,
    /// Storage locations whose content was removed from their backend.
    pub content_removed: u64,
    /// Storage locations left alone because another record still points at them.
    pub content_shared: u64,
    /// Storage locations the backend no longer had.
    pub content_missing: u64,
    /// Storage locations that could not be removed, each with why (an unregistered backend,
    /// an I/O error).
    pub content_errors: Vec<String>,
}

impl ArtifactSweep {
    /// Removes the content at each of `locations` from its backend in `backends`, counting
    /// the outcomes; each backend gets one [`delete_many`](crate::StorageBackend::delete_many)
    /// call. The caller holds the store's exclusion for the locations and has checked that no
    /// record points at them.
    pub(crate) fn remove_contents(
        &mut self,
        locations: &[StorageLocation],
        backends: &BackendRegistry,
    ) {
        let mut names: Vec<&str> = locations.iter().map(|l| l.backend.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let ids: Vec<&str> = locations
                .iter()
                .filter(|l| l.backend == name)
                .map(|l| l.id.as_str())
                .collect();
            let results = match backends.resolve(name) {
                Ok(Storage::Inline) => ids.iter().map(|_| Ok(false)).collect(),
                Ok(Storage::External { backend, .. }) => backend.delete_many(&ids),
                Err(e) => {
                    let why = e.to_string();
                    for id in &ids {
                        self.content_errors.push(format!("{name}:{id}: {why}"));
                    }
                    continue;
                }
            };
            for (id, result) in ids.iter().zip(results) {
                match result {
                    Ok(true) => self.content_removed += 1,
                    Ok(false) => self.content_missing += 1,
                    Err(e) => self.content_errors.push(format!("{name}:{id}: {e}")),
                }
            }
        }
    }
}

/// How many storage locations a sweep removes under one hold of the store's exclusion: enough
/// to share a directory sync among many files, few enough that saves are not held up long
/// and that PostgreSQL's lock table holds the advisory locks.
pub(crate) const CONTENT_BATCH: usize = 256;

/// The fields of an artifact's filterable document (docs/reference/artifacts.md#filters).
pub const FILTER_FIELDS: [&str; 11] = [
    "id",
    "key",
    "type",
    "name",
    "description",
    "scope",
    "created_at",
    "storage",
    "storage_id",
    "data",
    "expires_at",
];

/// The document a filter is matched against: the record's fields under their dictionary
/// names (`type`, `storage` for the backend name, `storage_id`), `created_at` as its RFC 3339
/// text, and `expires_at` in milliseconds since the Unix epoch. `storage`, `storage_id`,
/// `data` and `expires_at` are missing when the record has none.
pub fn document(artifact: &Artifact, expires_at: Option<i64>) -> serde_json::Value {
    use serde_json::Value;
    let mut doc = serde_json::Map::new();
    doc.insert("id".into(), Value::String(artifact.id.to_string()));
    doc.insert("key".into(), Value::String(artifact.key.clone()));
    doc.insert("type".into(), Value::String(artifact.artifact_type.clone()));
    doc.insert("name".into(), Value::String(artifact.name.clone()));
    doc.insert(
        "description".into(),
        Value::String(artifact.description.clone()),
    );
    doc.insert("scope".into(), Value::String(artifact.scope.clone()));
    doc.insert(
        "created_at".into(),
        Value::String(artifact.created_at.to_string()),
    );
    if let Some(location) = &artifact.storage {
        doc.insert("storage".into(), Value::String(location.backend.clone()));
        doc.insert("storage_id".into(), Value::String(location.id.clone()));
    }
    if let Some(data) = &artifact.data {
        doc.insert("data".into(), data.clone());
    }
    if let Some(at) = expires_at {
        doc.insert("expires_at".into(), at.into());
    }
    Value::Object(doc)
}

/// Where the SQLite store keeps each field of the document: its own columns (`data` holds
/// JSON text), `expires_at` as `NULL` on a file from before expiry.
pub(crate) fn sqlite_source(field: &str, has_expiry: bool) -> Option<Source> {
    let text = |expr: &str| {
        Some(Source::Column {
            expr: expr.to_owned(),
            kind: ColumnKind::Text,
        })
    };
    match field {
        "id" | "key" | "name" | "description" | "scope" | "created_at" | "storage_id" => {
            text(field)
        }
        "type" => text("artifact_type"),
        "storage" => text("storage_backend"),
        "data" => Some(Source::Json("data".to_owned())),
        "expires_at" => Some(Source::Column {
            expr: if has_expiry { "expires_at" } else { "NULL" }.to_owned(),
            kind: ColumnKind::Integer,
        }),
        _ => None,
    }
}

/// Checks that `filter` names only fields of the document, with the error the durable stores
/// give, for the in-memory store (which evaluates it without SQL).
pub(crate) fn check_filter(filter: &Filter) -> Result<(), ArtifactError> {
    let resolver = |field: &str| sqlite_source(field, true);
    filter.to_sql(mnemon_filter::Dialect::Sqlite, &resolver, &mut Vec::new())?;
    Ok(())
}

pub(crate) use mnemon_db::prefix::prefix_end;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_field_is_filterable() {
        for field in FILTER_FIELDS {
            assert!(sqlite_source(field, true).is_some(), "{field}");
        }
        assert!(sqlite_source("metadata", true).is_none());
    }
}
