//! [`Mnemon`]: one handle over a data directory.
//!
//! The layout is fixed so that the CLI, the host and embedding programs agree on it:
//!
//! ```text
//! <dir>/mnemon.sqlite3   assets, artifact records and memory threads (WAL mode)
//! <dir>/artifacts/       artifact content saved with the `write_to_file` backend
//! <dir>/libraries/       embedding libraries (`*.json`), served by `mnemon serve`
//! ```
//!
//! Every component opens its own connection to the one database file; its tables carry the
//! component's prefix (`asset_`, `artifact_`, `memory_`), so they never collide.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mnemon_artifacts::{ArtifactError, ArtifactStore, BackendRegistry, SqliteArtifactStore};
use mnemon_library::{Library, LibraryError};
use mnemon_memory::{MemoryError, Scope, SqliteMemory};
use mnemon_store::{AssetStore, SqliteAssetStore, StoreError};

/// The database file inside a data directory.
pub const DATABASE_FILE: &str = "mnemon.sqlite3";
/// The folder for artifact content inside a data directory.
pub const ARTIFACTS_DIR: &str = "artifacts";
/// The folder for embedding libraries inside a data directory.
pub const LIBRARIES_DIR: &str = "libraries";

/// Why a data directory or one of its parts could not be opened.
///
/// Each message is complete on its own (it includes the underlying error's text), so the inner
/// errors are not also exposed as `source()`: reporters that walk the chain (`anyhow`'s `{:#}`)
/// would print them twice.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The directory could not be created.
    #[error(
        "cannot create the data directory {}: {error}; check the path and its permissions",
        .path.display()
    )]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        error: std::io::Error,
    },
    /// The asset store failed to open.
    #[error("cannot open the asset store: {0}")]
    Assets(StoreError),
    /// The artifact store failed to open.
    #[error("cannot open the artifact store: {0}")]
    Artifacts(ArtifactError),
    /// The memory store failed to open.
    #[error("cannot open the memory store: {0}")]
    Memory(MemoryError),
    /// A library failed to load.
    #[error("cannot open library {name:?}: {error}")]
    Library {
        /// The library's name (its file name without `.json`).
        name: String,
        /// The underlying error.
        error: LibraryError,
    },
    /// A library name that would leave the libraries folder.
    #[error("{name:?} is not a library name: use a plain file name without '/', '\\\\' or '..'")]
    BadLibraryName {
        /// The name given.
        name: String,
    },
}

/// One handle over a Mnemon data directory: it hands out the asset store, the artifact store and
/// its storage backends, memory threads, and libraries.
///
/// ```
/// use mnemon::Mnemon;
/// use mnemon::assets::AssetStore;
/// use mnemon::types::Asset;
///
/// let dir = std::env::temp_dir().join(format!("mnemon-doc-{}", std::process::id()));
/// let mnemon = Mnemon::open(&dir)?;
/// mnemon.assets().put(&Asset::new("hello").with_id("a1"))?;
/// let value = mnemon.assets().resolve(&"asset://a1/content".parse()?)?;
/// assert_eq!(value.as_str(), Some("hello"));
/// # drop(mnemon);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Mnemon {
    dir: PathBuf,
    assets: Arc<SqliteAssetStore>,
    artifacts: Arc<SqliteArtifactStore>,
    backends: BackendRegistry,
    memory: Arc<mnemon_memory::SqliteMemoryStore>,
}

impl std::fmt::Debug for Mnemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mnemon")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Mnemon {
    /// Opens the data directory at `dir`, creating it and its database if needed.
    pub fn open(dir: impl AsRef<Path>) -> Result<Mnemon, OpenError> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|error| OpenError::CreateDir {
            path: dir.clone(),
            error,
        })?;
        let database = dir.join(DATABASE_FILE);
        let assets = Arc::new(SqliteAssetStore::open(&database).map_err(OpenError::Assets)?);
        let artifacts =
            Arc::new(SqliteArtifactStore::open(&database).map_err(OpenError::Artifacts)?);
        let memory = mnemon_memory::SqliteMemoryStore::open(&database, Default::default())
            .map_err(OpenError::Memory)?;
        let backends = BackendRegistry::with_defaults(dir.join(ARTIFACTS_DIR));
        Ok(Mnemon {
            dir,
            assets,
            artifacts,
            backends,
            memory,
        })
    }

    /// Opens the data directory at `dir` for reading only: nothing is created (a missing
    /// directory or database reads as empty), no store waits for another process's write, and a
    /// read-only directory or mount works. Writes through the stores fail.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Mnemon, OpenError> {
        let dir = dir.as_ref().to_path_buf();
        let database = dir.join(DATABASE_FILE);
        let assets = SqliteAssetStore::open_read_only(&database, Default::default())
            .map_err(OpenError::Assets)?;
        let artifacts =
            SqliteArtifactStore::open_read_only(&database).map_err(OpenError::Artifacts)?;
        let memory =
            mnemon_memory::SqliteMemoryStore::open_read_only(&database, Default::default())
                .map_err(OpenError::Memory)?;
        let backends = BackendRegistry::with_defaults(dir.join(ARTIFACTS_DIR));
        Ok(Mnemon {
            dir,
            assets: Arc::new(assets),
            artifacts: Arc::new(artifacts),
            backends,
            memory,
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The SQLite database file shared by the stores.
    pub fn database_path(&self) -> PathBuf {
        self.dir.join(DATABASE_FILE)
    }

    /// The asset store.
    pub fn assets(&self) -> &SqliteAssetStore {
        &self.assets
    }

    /// The asset store as a shared trait object, for APIs that take one.
    pub fn asset_store(&self) -> Arc<dyn AssetStore> {
        self.assets.clone()
    }

    /// The artifact store as a shared trait object.
    pub fn artifacts(&self) -> Arc<dyn ArtifactStore> {
        self.artifacts.clone()
    }

    /// The artifact storage backends: `inline`, and `write_to_file` rooted at
    /// `<dir>/artifacts/`.
    pub fn backends(&self) -> &BackendRegistry {
        &self.backends
    }

    /// The memory thread of `scope` (user, agent and session ids).
    pub fn memory(&self, scope: Scope) -> Result<SqliteMemory, MemoryError> {
        self.memory.memory(scope)
    }

    /// The memory thread of one session.
    pub fn session(&self, session_id: &str) -> Result<SqliteMemory, MemoryError> {
        self.memory(Scope::session(session_id))
    }

    /// The folder holding this directory's libraries.
    pub fn libraries_dir(&self) -> PathBuf {
        self.dir.join(LIBRARIES_DIR)
    }

    /// Loads the library `<dir>/libraries/<name>.json`.
    pub fn library(&self, name: &str) -> Result<Library, OpenError> {
        let plain =
            !name.is_empty() && !name.contains(['/', '\\', '\0']) && name != "." && name != "..";
        if !plain {
            return Err(OpenError::BadLibraryName {
                name: name.to_owned(),
            });
        }
        let path = self.libraries_dir().join(format!("{name}.json"));
        Library::open(&path).map_err(|error| OpenError::Library {
            name: name.to_owned(),
            error,
        })
    }

    /// Loads every library under `<dir>/libraries/`, merged in path order (as `mnemon serve`
    /// does).
    pub fn libraries(&self) -> Result<Library, OpenError> {
        Library::open_dir(self.libraries_dir()).map_err(|error| OpenError::Library {
            name: LIBRARIES_DIR.to_owned(),
            error,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::error::Error as _;

    use super::*;

    #[test]
    fn open_errors_carry_their_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the data directory should be.
        let file = dir.path().join("taken");
        std::fs::write(&file, b"not a directory").unwrap();
        let error = Mnemon::open(&file).unwrap_err();
        assert!(matches!(error, OpenError::CreateDir { .. }), "{error}");
        assert!(error.to_string().contains("taken"), "{error}");
        assert!(error.source().is_none());

        // A database file that is not one.
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join(DATABASE_FILE), vec![b'x'; 4096]).unwrap();
        let error = Mnemon::open(&data).unwrap_err();
        assert!(matches!(error, OpenError::Assets(_)), "{error}");
        assert!(error.to_string().contains("not a database"), "{error}");
        assert!(error.source().is_none());

        let mnemon = Mnemon::open(dir.path().join("fresh")).unwrap();
        let error = mnemon.library("missing").unwrap_err();
        assert!(error.to_string().contains("missing"), "{error}");
        assert!(error.source().is_none());
    }

    #[test]
    fn read_only_handles_read_what_was_written_and_create_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent");
        let empty = Mnemon::open_read_only(&absent).unwrap();
        assert!(empty.assets().list_ids(None).unwrap().is_empty());
        assert!(empty.artifacts().list("s", None).unwrap().is_empty());
        assert!(
            empty
                .assets()
                .put(&mnemon_types::Asset::new("x").with_id("a"))
                .is_err()
        );
        drop(empty);
        assert!(!absent.exists());

        let data = dir.path().join("data");
        let mnemon = Mnemon::open(&data).unwrap();
        mnemon
            .assets()
            .put(&mnemon_types::Asset::new("hello").with_id("a1"))
            .unwrap();
        drop(mnemon);
        let reader = Mnemon::open_read_only(&data).unwrap();
        assert_eq!(reader.assets().list_ids(None).unwrap(), ["a1"]);
    }
}
