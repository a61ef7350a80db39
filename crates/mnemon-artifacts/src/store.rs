//! The `ArtifactStore` trait: the narrow interface every artifact store implements.

use mnemon_types::Artifact;
use uuid::Uuid;

use crate::ArtifactError;

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
