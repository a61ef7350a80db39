//! Storage backends and the registry that names them
//! (docs/reference/artifacts.md#storage-backends).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use mnemon_types::{Artifact, StorageLocation};
use serde_json::Value;

use crate::{ArtifactError, WriteToFile};

/// The name of the built-in backend that keeps content in the record's `data`.
pub const INLINE: &str = "inline";

/// The name under which [`BackendRegistry::with_defaults`] registers [`WriteToFile`].
pub const WRITE_TO_FILE: &str = "write_to_file";

/// Keeps artifact content outside the record, by storage id.
///
/// Implement it to add a backend (an object store, say) and register it under a name with
/// [`BackendRegistry::register`]; SaveArtifact configs then refer to it by that name.
pub trait StorageBackend: Send + Sync {
    /// Stores `content` under `storage_id`, replacing what was there. Must be atomic: after a
    /// crash, the old content or the new, never a mix.
    fn write(&self, storage_id: &str, content: &Value) -> Result<(), ArtifactError>;

    /// The content under `storage_id`; [`ArtifactError::ContentNotFound`] if there is none.
    fn read(&self, storage_id: &str) -> Result<Value, ArtifactError>;

    /// Removes the content under `storage_id`; `false` if there was none.
    fn delete(&self, storage_id: &str) -> Result<bool, ArtifactError>;

    /// The one spelling of `storage_id` that records keep, for a backend under which several
    /// spellings name the same content ([`WriteToFile`] ignores `.` and empty path
    /// components): a save stores it, so that a sweep's "does another record still point at
    /// this content?" compares like with like and never removes content a live record names
    /// another way (docs/reference/artifacts.md#file-backend). Refuses an id the backend
    /// would refuse to write. The default is the id as given.
    fn canonical_id(&self, storage_id: &str) -> Result<String, ArtifactError> {
        Ok(storage_id.to_owned())
    }

    /// Removes the content under each of `storage_ids`, one result per id in order (what
    /// [`delete`](Self::delete) would return). The default deletes one by one; a backend that
    /// can share the cost of making removals durable overrides it ([`WriteToFile`] syncs each
    /// directory once per call, not once per file), which is what makes a sweep of thousands of
    /// files take seconds (docs/reference/artifacts.md#sweeps).
    fn delete_many(&self, storage_ids: &[&str]) -> Vec<Result<bool, ArtifactError>> {
        storage_ids.iter().map(|id| self.delete(id)).collect()
    }
}

/// Where a backend name leads.
#[derive(Clone)]
pub enum Storage {
    /// The `inline` backend: content goes into the record's `data`.
    Inline,
    /// A registered backend that keeps content outside the record.
    External {
        /// The name it is registered under (what records store).
        name: String,
        /// The backend.
        backend: Arc<dyn StorageBackend>,
    },
}

/// Storage backends by name. `inline` is always there; others are registered.
#[derive(Clone, Default)]
pub struct BackendRegistry {
    backends: BTreeMap<String, Arc<dyn StorageBackend>>,
    /// Whether every backend keeps this namespace's content apart from every other namespace's
    /// ([`BackendRegistry::private_to_namespace`]).
    private: bool,
}

impl std::fmt::Debug for BackendRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendRegistry")
            .field("names", &self.names())
            .finish()
    }
}

impl BackendRegistry {
    /// A registry with only `inline`.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry with `inline` and `write_to_file`, the latter writing under `file_root`.
    pub fn with_defaults(file_root: impl Into<PathBuf>) -> Self {
        let mut registry = Self::new();
        registry.backends.insert(
            WRITE_TO_FILE.to_owned(),
            Arc::new(WriteToFile::new(file_root)),
        );
        registry
    }

    /// This registry, declared private to the namespace of the store it serves: each of its
    /// backends keeps that namespace's content where no other namespace's backend reaches (its
    /// own directory, bucket or key prefix), so the same storage id in two namespaces names two
    /// different contents. A sweep (`gc`, `forget`) then removes content when no record *of its
    /// namespace* still points at it; without the declaration it keeps content while a record of
    /// any namespace names the same location, since a shared backend would hold one content for
    /// both (docs/reference/artifacts.md#expiry-gc-and-forget).
    pub fn private_to_namespace(mut self) -> Self {
        self.private = true;
        self
    }

    /// Whether [`private_to_namespace`](Self::private_to_namespace) declared it.
    pub fn is_private_to_namespace(&self) -> bool {
        self.private
    }

    /// Registers `backend` under `name`, returning the backend it replaces, if any.
    ///
    /// `inline` is reserved, and names must be non-empty without surrounding white space.
    pub fn register(
        &mut self,
        name: impl Into<String>,
        backend: Arc<dyn StorageBackend>,
    ) -> Result<Option<Arc<dyn StorageBackend>>, ArtifactError> {
        let name = name.into();
        let reason = if name == INLINE {
            Some("\"inline\" is built in and keeps content in the record; choose another name")
        } else if name.trim().is_empty() {
            Some("the name is empty")
        } else if name.trim() != name {
            Some("the name has leading or trailing white space")
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(ArtifactError::InvalidBackendName { name, reason });
        }
        Ok(self.backends.insert(name, backend))
    }

    /// Every usable name, `inline` first, then the registered ones in sorted order.
    pub fn names(&self) -> Vec<&str> {
        std::iter::once(INLINE)
            .chain(self.backends.keys().map(String::as_str))
            .collect()
    }

    /// The storage a backend name leads to.
    pub fn resolve(&self, name: &str) -> Result<Storage, ArtifactError> {
        if name == INLINE {
            return Ok(Storage::Inline);
        }
        match self.backends.get(name) {
            Some(backend) => Ok(Storage::External {
                name: name.to_owned(),
                backend: Arc::clone(backend),
            }),
            None => Err(ArtifactError::UnknownBackend {
                name: name.to_owned(),
                known: self.names().join(", "),
            }),
        }
    }

    /// An artifact's content: read through its backend when it has one, else its inline data
    /// (`None` when it has neither).
    pub fn read_content(&self, artifact: &Artifact) -> Result<Option<Value>, ArtifactError> {
        match &artifact.storage {
            Some(StorageLocation { backend, id }) => match self.resolve(backend)? {
                Storage::Inline => Ok(artifact.data.clone()),
                Storage::External { backend, .. } => backend.read(id).map(Some),
            },
            None => Ok(artifact.data.clone()),
        }
    }
}
