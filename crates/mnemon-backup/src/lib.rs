//! Portable backups of a Mnemon namespace: [`export`] writes a namespace's assets (with their
//! bytes), artifact records (with the content their storage backend holds), and memory threads
//! (messages with ids, timestamps, marks, embeddings, expiries and embedding models) to one
//! file, and [`import`] writes such a file into a namespace, on either backend
//! (docs/reference/backup.md).
//!
//! Both stream: an export holds one asset, one artifact record or one message at a time (a
//! memory thread goes through the memory's own streamed export to a temporary file), and an
//! import reads the file twice, checking it whole before it writes anything, then writing
//! assets in batches and each thread in one transaction. Peak memory depends on the largest
//! record, never on the size of the namespace.
//!
//! The stores come through [`NamespaceStores`], which the `mnemon` facade's handle implements,
//! so this crate does not depend on how a handle is opened.

mod error;
mod export;
pub mod format;
mod import;
mod io;

pub use error::BackupError;
pub use export::{ExportOptions, ExportReport, export};
pub use format::{Record, Selection, ThreadFilter};
pub use import::{ImportOptions, ImportReport, Verified, import, verify};

use mnemon_artifacts::{ArtifactStore, BackendRegistry};
use mnemon_memory::{Memory, MemoryError, Scope};
use mnemon_store::AssetStore;

/// The stores of one namespace, as an export reads them and an import writes them.
pub trait NamespaceStores {
    /// The namespace's name, written into a backup's header.
    fn namespace(&self) -> String;
    /// The backend's name (`"sqlite"`, `"postgres"`), written into a backup's header.
    fn source(&self) -> String;
    /// The asset store.
    fn assets(&self) -> &dyn AssetStore;
    /// The artifact store.
    fn artifacts(&self) -> &dyn ArtifactStore;
    /// The storage backends artifact content is read from and written to.
    fn backends(&self) -> &BackendRegistry;
    /// The scopes of every memory thread.
    fn threads(&self) -> Result<Vec<Scope>, MemoryError>;
    /// The memory thread of `scope`, created if needed (an import writes through it).
    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>, MemoryError>;
    /// The memory thread of `scope` if it exists, never creating it (an export reads through
    /// it: a thread deleted since [`threads`](Self::threads) listed it is left out, not
    /// recreated empty).
    fn existing_memory(&self, scope: Scope) -> Result<Option<Box<dyn Memory>>, MemoryError>;
}
