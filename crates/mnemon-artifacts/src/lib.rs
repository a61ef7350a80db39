//! Artifacts: named results of earlier agent steps, saved by key and loaded into prompts
//! (spec/artifacts.md).
//!
//! - [`ArtifactStore`] keeps [`Artifact`] records: [`InMemoryArtifactStore`] and
//!   [`SqliteArtifactStore`] (the embedded default). Within a scope, the most recently saved
//!   artifact with a key wins, decided by a per-store sequence.
//!
//! ```
//! use mnemon_artifacts::{ArtifactStore, InMemoryArtifactStore};
//! use mnemon_types::Artifact;
//!
//! let store = InMemoryArtifactStore::new();
//! store.save(&Artifact::new("chat-1", "plan", "plan", "First plan"))?;
//! store.save(&Artifact::new("chat-1", "plan", "plan", "Second plan"))?;
//! let plan = store.latest("chat-1", "plan")?.expect("saved above");
//! assert_eq!(plan.name, "Second plan");
//! assert!(store.latest("chat-2", "plan")?.is_none());
//! # Ok::<(), mnemon_artifacts::ArtifactError>(())
//! ```

mod artifact_memory;
mod backend;
mod error;
mod file_backend;
mod in_memory;
mod save;
mod selector;
mod sqlite;
mod store;
mod template;

pub use artifact_memory::{
    ARTIFACT_MEMORY_CLASS_PATH, ArtifactMemory, ArtifactMemoryConfig, LoadedArtifacts,
    RELATED_ARTIFACTS_HEADER, render_block, requested_keys,
};
pub use backend::{BackendRegistry, INLINE, Storage, StorageBackend, WRITE_TO_FILE};
pub use error::{ArtifactError, BoxedSource};
pub use file_backend::{MAX_NAME_BYTES, MAX_PATH_BYTES, WriteToFile};
pub use in_memory::InMemoryArtifactStore;
pub use mnemon_types::{Artifact, StorageLocation};
pub use save::{SAVE_ARTIFACT_CLASS_PATH, SaveArtifact, SaveArtifactConfig};
pub use sqlite::SqliteArtifactStore;
pub use store::ArtifactStore;
pub use template::PromptTemplate;
/// The id type of artifact records, re-exported so callers need not depend on `uuid`.
pub use uuid::Uuid;
