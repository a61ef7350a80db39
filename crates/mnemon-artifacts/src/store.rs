//! The `ArtifactStore` trait: the narrow interface every artifact store implements.

use mnemon_types::Artifact;
use uuid::Uuid;

use crate::ArtifactError;

/// Keeps artifact records (spec/artifacts.md §3).
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
/// - When `save` returns, the record is as durable as the implementation can make it (for
///   SQLite: committed and synced in WAL mode).
///
/// The trait is synchronous and object-safe (`Box<dyn ArtifactStore>` works), and it takes and
/// returns owned data only, so a PostgreSQL implementation (a `BIGSERIAL`/identity column for
/// the sequence, a unique index on `id`) fits without changes.
pub trait ArtifactStore: Send + Sync {
    /// Stores `artifact` and returns the sequence value it was given.
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError>;

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
