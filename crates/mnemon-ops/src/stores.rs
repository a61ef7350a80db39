//! [`Stores`]: one handle over a data directory, and optionally a PostgreSQL database. The
//! facade re-exports it as `mnemon::Mnemon`; it is the one place that picks a backend.
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
//!
//! With [`Backend::Postgres`] (feature `postgres`) the assets, artifact records and memory live
//! in a PostgreSQL database instead, so agents on several machines share them; `<dir>` then only
//! holds the libraries (docs/postgres.md, "Choosing the backend").
//!
//! Every handle is opened for one namespace (tenant, [`OpenOptions::namespace`]); the default
//! namespace keeps the files above. A non-default namespace's `write_to_file` content goes under
//! `<root>/.namespaces/<namespace>/`, so two tenants never overwrite each other's files; the
//! default namespace may not write there.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mnemon_artifacts::{
    ArtifactError, ArtifactStore, BackendRegistry, SqliteArtifactOptions, SqliteArtifactStore,
    StorageBackend, WRITE_TO_FILE, WriteToFile,
};
use mnemon_db::{Durability, Namespace};
use mnemon_library::{Library, LibraryError};
use mnemon_memory::{
    Memory, MemoryError, Scope, ScopeFilter, SearchRequest, SearchResults, SqliteMemoryOptions,
    SqliteMemoryStore,
};
use mnemon_store::{AssetStore, SqliteAssetOptions, SqliteAssetStore, StoreError};
use mnemon_types::Embedder;
use serde_json::Value;

/// The database file inside a data directory.
pub const DATABASE_FILE: &str = "mnemon.sqlite3";
/// The folder for artifact content inside a data directory.
pub const ARTIFACTS_DIR: &str = "artifacts";
/// The folder for embedding libraries inside a data directory.
pub const LIBRARIES_DIR: &str = "libraries";
/// The folder, inside a `write_to_file` root, that holds one folder per non-default namespace.
pub const NAMESPACES_DIR: &str = ".namespaces";

/// Where a handle keeps its assets, artifact records and memory.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// One SQLite file in the data directory (`<dir>/mnemon.sqlite3`): the embedded default.
    #[default]
    Sqlite,
    /// A PostgreSQL database (feature `postgres`), shared by every process that opens it.
    #[cfg(feature = "postgres")]
    Postgres {
        /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
        url: String,
    },
}

impl std::fmt::Debug for Backend {
    /// Never prints the URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Sqlite => f.write_str("Sqlite"),
            #[cfg(feature = "postgres")]
            Backend::Postgres { .. } => f.write_str("Postgres { .. }"),
        }
    }
}

/// How [`Stores::open_with`] opens a handle. `OpenOptions::default()` is what
/// [`Stores::open`] does: SQLite, the default namespace, `write_to_file` under
/// `<dir>/artifacts/`.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Where the stores live.
    pub backend: Backend,
    /// The tenant the handle is opened for: no call through it reads or changes another
    /// namespace's assets, artifacts or memory.
    pub namespace: Namespace,
    /// The root of the `write_to_file` artifact backend. `None`: `<dir>/artifacts/` with
    /// SQLite; with PostgreSQL no `write_to_file` backend at all, so artifact content is kept in
    /// the database (`inline`). A root given with PostgreSQL must be one folder shared by every
    /// machine that opens the database (a network file system): a record saved on one machine
    /// names a file that the others must be able to read.
    pub write_to_file_root: Option<PathBuf>,
    /// How long an asset, artifact record or message lives when its write sets no expiry of its
    /// own (docs/reference/rest.md#expiry-and-filters): the namespace's default time-to-live.
    /// `None` (the default): such records never expire.
    pub default_ttl: Option<std::time::Duration>,
    /// How the memory store serves recall over large threads: the most bytes of stored vectors
    /// it keeps in memory (`None`: the store's default, 256 MiB) and when a thread's recall uses
    /// the approximate index (docs/reference/memory.md#the-recall-index). With PostgreSQL,
    /// pgvector's HNSW index serves recall: only `index.ef` is used there, as its shortlist
    /// (`hnsw.ef_search`; `None`: the store's default, 40).
    pub recall: RecallOptions,
    /// How hard every store's commits work to survive crashes. `Full` (the default): an
    /// acknowledged write survives a killed process, an operating-system crash and a power
    /// loss. `Normal`: commits skip their wait for the disk, and an acknowledged write survives
    /// a killed process, but an OS crash or power loss (SQLite `synchronous = NORMAL`), or a
    /// crash of the PostgreSQL server (`synchronous_commit = off`), may lose the last writes
    /// (docs/reference/config.md#durability).
    pub durability: Durability,
    /// The PostgreSQL connections that the handles opened with these options, or a clone of
    /// them, share: one pool for the stores of every namespace and one for the memory
    /// stores' background indexers, per database and durability, opened by the first handle
    /// (docs/postgres.md#one-pool-per-database). A server that opens a handle per tenant
    /// from clones of one `OpenOptions` so holds a fixed number of connections however many
    /// tenants it serves. Give two `OpenOptions` the same value to make them share too.
    #[cfg(feature = "postgres")]
    pub postgres_pools: crate::PostgresPools,
}

/// [`OpenOptions::recall`]: how a SQLite memory store serves recall over large threads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecallOptions {
    /// The most bytes of stored vectors kept in memory for searches across sessions and for
    /// recalls through handles without a current mirror; a thread larger than this is read
    /// from the file at each such search. `None`: 256 MiB (`SqliteMemoryOptions`'s default).
    /// 100,000 vectors of 1,536 dimensions take about 620 MB.
    pub vector_cache_bytes: Option<usize>,
    /// When a large thread's recall uses the approximate index, and its beam.
    pub index: mnemon_memory::RecallIndexOptions,
}

impl OpenOptions {
    /// Options for the PostgreSQL database at `url`, default namespace, content in the database.
    #[cfg(feature = "postgres")]
    pub fn postgres(url: impl Into<String>) -> OpenOptions {
        OpenOptions {
            backend: Backend::Postgres { url: url.into() },
            ..OpenOptions::default()
        }
    }

    /// These options for `namespace`.
    pub fn with_namespace(self, namespace: Namespace) -> OpenOptions {
        OpenOptions { namespace, ..self }
    }

    /// These options with `ttl` as the default time-to-live of every store.
    pub fn with_default_ttl(self, ttl: Option<std::time::Duration>) -> OpenOptions {
        OpenOptions {
            default_ttl: ttl,
            ..self
        }
    }

    /// These options with `recall` for the memory store ([`OpenOptions::recall`]).
    pub fn with_recall(self, recall: RecallOptions) -> OpenOptions {
        OpenOptions { recall, ..self }
    }

    /// These options with `durability` for every store ([`OpenOptions::durability`]).
    pub fn with_durability(self, durability: Durability) -> OpenOptions {
        OpenOptions { durability, ..self }
    }

    /// These options with the `write_to_file` backend rooted at `root`.
    pub fn with_write_to_file_root(self, root: impl Into<PathBuf>) -> OpenOptions {
        OpenOptions {
            write_to_file_root: Some(root.into()),
            ..self
        }
    }
}

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
    /// [`OpenOptions::default_ttl`] is zero: every write would be stored already expired.
    #[error(
        "a default time-to-live of 0 would store every write already expired; leave it out \
         (None) for records that never expire"
    )]
    ZeroDefaultTtl,
    /// The memory store failed to open.
    #[error("cannot open the memory store: {0}")]
    Memory(MemoryError),
    /// The PostgreSQL database could not be reached (a wrong URL, password or database name,
    /// a server that is down).
    #[cfg(feature = "postgres")]
    #[error("cannot connect to the database: {0}")]
    Database(mnemon_db::DbError),
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

/// One handle over a Mnemon data directory (and, with [`Backend::Postgres`], a PostgreSQL
/// database): it hands out the asset store, the artifact store and its storage backends, memory
/// threads, and libraries, all for one namespace.
///
/// ```
/// use mnemon_ops::Stores;
/// use mnemon_store::AssetStore;
/// use mnemon_types::Asset;
///
/// let dir = std::env::temp_dir().join(format!("mnemon-doc-{}", std::process::id()));
/// let mnemon = Stores::open(&dir)?;
/// mnemon.assets().put(&Asset::new("hello").with_id("a1"))?;
/// let value = mnemon.assets().resolve(&"asset://a1/content".parse()?)?;
/// assert_eq!(value.as_str(), Some("hello"));
/// # drop(mnemon);
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Stores {
    dir: PathBuf,
    backend: Backend,
    namespace: Namespace,
    assets: Arc<dyn AssetStore>,
    artifacts: Arc<dyn ArtifactStore>,
    backends: BackendRegistry,
    memory: MemoryStore,
}

/// The memory store of either backend.
#[derive(Clone)]
enum MemoryStore {
    Sqlite(Arc<SqliteMemoryStore>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<mnemon_memory::PostgresMemoryStore>),
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores")
            .field("dir", &self.dir)
            .field("backend", &self.backend)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Stores {
    /// Opens the data directory at `dir`, creating it and its database if needed: SQLite, the
    /// default namespace. The same as [`open_with`](Self::open_with) and
    /// `OpenOptions::default()`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Stores, OpenError> {
        Stores::open_with(dir, &OpenOptions::default())
    }

    /// Opens the stores `options` name, for its namespace. With SQLite, `dir` is created if
    /// needed and holds the database and (by default) the artifact files; with PostgreSQL it is
    /// not created and only holds the libraries.
    ///
    /// ```no_run
    /// use mnemon_ops::{Stores, OpenOptions};
    ///
    /// let options = OpenOptions::postgres("postgres://mnemon:secret@db.internal/mnemon")
    ///     .with_namespace("acme".parse()?);
    /// let mnemon = Stores::open_with("mnemon-data", &options)?;
    /// let session = mnemon.session("chat-1")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_with(dir: impl AsRef<Path>, options: &OpenOptions) -> Result<Stores, OpenError> {
        if options.default_ttl.is_some_and(|ttl| ttl.is_zero()) {
            return Err(OpenError::ZeroDefaultTtl);
        }
        let dir = dir.as_ref().to_path_buf();
        let namespace = options.namespace.clone();
        let (assets, artifacts, memory, default_root): (
            Arc<dyn AssetStore>,
            Arc<dyn ArtifactStore>,
            MemoryStore,
            Option<PathBuf>,
        ) = match &options.backend {
            Backend::Sqlite => {
                std::fs::create_dir_all(&dir).map_err(|error| OpenError::CreateDir {
                    path: dir.clone(),
                    error,
                })?;
                let database = dir.join(DATABASE_FILE);
                let assets = SqliteAssetStore::open_with(
                    &database,
                    SqliteAssetOptions {
                        namespace: namespace.clone(),
                        default_ttl: options.default_ttl,
                        durability: options.durability,
                        ..SqliteAssetOptions::default()
                    },
                )
                .map_err(OpenError::Assets)?;
                let artifacts = SqliteArtifactStore::open_with(
                    &database,
                    SqliteArtifactOptions {
                        namespace: namespace.clone(),
                        default_ttl: options.default_ttl,
                        durability: options.durability,
                        ..SqliteArtifactOptions::default()
                    },
                )
                .map_err(OpenError::Artifacts)?;
                let memory = SqliteMemoryStore::open(&database, {
                    let defaults = SqliteMemoryOptions::default();
                    SqliteMemoryOptions {
                        namespace: namespace.clone(),
                        default_ttl: options.default_ttl,
                        recall_index: options.recall.index.clone(),
                        durability: options.durability,
                        vector_cache_bytes: options
                            .recall
                            .vector_cache_bytes
                            .unwrap_or(defaults.vector_cache_bytes),
                        ..defaults
                    }
                })
                .map_err(OpenError::Memory)?;
                (
                    Arc::new(assets),
                    Arc::new(artifacts),
                    MemoryStore::Sqlite(memory),
                    Some(dir.join(ARTIFACTS_DIR)),
                )
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres { url } => {
                // One pool for every namespace's stores (`pools.rs`): the stores' own options
                // for durability and pool size are the pool's.
                let (pool, indexer_pool) = options
                    .postgres_pools
                    .get(url, options.durability)
                    .map_err(OpenError::Database)?;
                let assets = mnemon_store::PostgresAssetStore::open_on(
                    &pool,
                    mnemon_store::PostgresAssetOptions {
                        namespace: namespace.clone(),
                        default_ttl: options.default_ttl,
                        ..Default::default()
                    },
                )
                .map_err(OpenError::Assets)?;
                let artifacts = mnemon_artifacts::PostgresArtifactStore::open_on(
                    &pool,
                    mnemon_artifacts::PostgresArtifactOptions {
                        namespace: namespace.clone(),
                        default_ttl: options.default_ttl,
                        ..Default::default()
                    },
                )
                .map_err(OpenError::Artifacts)?;
                let defaults = mnemon_memory::PostgresMemoryOptions::default();
                let memory = mnemon_memory::PostgresMemoryStore::open_on(
                    &pool,
                    mnemon_memory::PostgresMemoryOptions {
                        namespace: namespace.clone(),
                        default_ttl: options.default_ttl,
                        hnsw_ef_search: options.recall.index.ef.unwrap_or(defaults.hnsw_ef_search),
                        indexer_pool: Some(indexer_pool),
                        ..defaults
                    },
                )
                .map_err(OpenError::Memory)?;
                (
                    Arc::new(assets),
                    Arc::new(artifacts),
                    MemoryStore::Postgres(memory),
                    None,
                )
            }
        };
        let root = options.write_to_file_root.clone().or(default_root);
        let backends = artifact_backends(root, &namespace);
        Ok(Stores {
            dir,
            backend: options.backend.clone(),
            namespace,
            assets,
            artifacts,
            backends,
            memory,
        })
    }

    /// Opens the data directory at `dir` for reading only: nothing is created (a missing
    /// directory or database reads as empty), no store waits for another process's write, and a
    /// read-only directory or mount works. Writes through the stores fail. SQLite, default
    /// namespace.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Stores, OpenError> {
        let dir = dir.as_ref().to_path_buf();
        let database = dir.join(DATABASE_FILE);
        let assets = SqliteAssetStore::open_read_only(&database, Default::default())
            .map_err(OpenError::Assets)?;
        let artifacts =
            SqliteArtifactStore::open_read_only(&database).map_err(OpenError::Artifacts)?;
        let memory = SqliteMemoryStore::open_read_only(&database, Default::default())
            .map_err(OpenError::Memory)?;
        let namespace = Namespace::default();
        let backends = artifact_backends(Some(dir.join(ARTIFACTS_DIR)), &namespace);
        Ok(Stores {
            dir,
            backend: Backend::Sqlite,
            namespace,
            assets: Arc::new(assets),
            artifacts: Arc::new(artifacts),
            backends,
            memory: MemoryStore::Sqlite(memory),
        })
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the stores live.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// The namespace (tenant) the handle was opened for.
    pub fn namespace(&self) -> &Namespace {
        &self.namespace
    }

    /// The SQLite database file of the data directory (used by the stores with
    /// [`Backend::Sqlite`] only).
    pub fn database_path(&self) -> PathBuf {
        self.dir.join(DATABASE_FILE)
    }

    /// The asset store.
    pub fn assets(&self) -> &dyn AssetStore {
        self.assets.as_ref()
    }

    /// The asset store as a shared trait object, for APIs that take one.
    pub fn asset_store(&self) -> Arc<dyn AssetStore> {
        self.assets.clone()
    }

    /// The artifact store as a shared trait object.
    pub fn artifacts(&self) -> Arc<dyn ArtifactStore> {
        self.artifacts.clone()
    }

    /// The artifact storage backends: `inline`, and `write_to_file` when it has a root
    /// (`<dir>/artifacts/` with SQLite unless [`OpenOptions::write_to_file_root`] says
    /// otherwise; with PostgreSQL only when that option is set). A non-default namespace's
    /// files go under `<root>/.namespaces/<namespace>/`.
    pub fn backends(&self) -> &BackendRegistry {
        &self.backends
    }

    /// The memory thread of `scope` (user, agent and session ids).
    pub fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>, MemoryError> {
        Ok(match &self.memory {
            MemoryStore::Sqlite(store) => Box::new(store.memory(scope)?),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => Box::new(store.memory(scope)?),
        })
    }

    /// The memory thread of one session.
    pub fn session(&self, session_id: &str) -> Result<Box<dyn Memory>, MemoryError> {
        self.memory(Scope::session(session_id))
    }

    /// The scopes of every memory thread of the namespace.
    pub fn threads(&self) -> Result<Vec<Scope>, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) => store.threads(),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.threads(),
        }
    }

    /// Search across sessions (docs/reference/memory.md#search-across-sessions): the
    /// `request.top_k` messages closest to its query among the namespace's threads that
    /// `request.within` selects and its filter (if any) matches, best first. Messages without
    /// an embedding are skipped. A keyword ranking reads at most
    /// [`MAX_KEYWORD_MATCHES`](mnemon_memory::MAX_KEYWORD_MATCHES) matching messages, the newest;
    /// [`SearchResults::complete`] says whether more matched.
    pub fn search_memory(
        &self,
        request: &SearchRequest,
        embedder: Option<&dyn Embedder>,
    ) -> Result<SearchResults, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) => store.search_with(request, embedder),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.search_with(request, embedder),
        }
    }

    /// Re-embeds with `embedder` every live message of the threads `within` selects whose
    /// embedding was not made by its model, `batch` at a time, each batch stored (with the
    /// model) in one transaction; `progress(done, total)` follows every batch. Resumable: a run
    /// cut short keeps its stored batches. Returns how many messages were re-embedded.
    pub fn reembed_memory(
        &self,
        within: &ScopeFilter,
        embedder: &dyn Embedder,
        batch: usize,
        progress: impl FnMut(u64, u64),
    ) -> Result<u64, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) => store.reembed(within, embedder, batch, progress),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.reembed(within, embedder, batch, progress),
        }
    }

    /// Removes every expired message of the namespace (rows and marks), in one transaction;
    /// returns how many.
    pub fn gc_memory(&self) -> Result<u64, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) => store.gc(),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.gc(),
        }
    }

    /// Deletes every memory thread of the namespace that `within` selects (all of them for
    /// [`ScopeFilter::all`]), with their messages and marks, in one transaction.
    pub fn forget_memory(
        &self,
        within: &ScopeFilter,
    ) -> Result<mnemon_memory::Forgotten, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) => store.forget(within),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.forget(within),
        }
    }

    /// How memory search scores embeddings: exactly with SQLite; with PostgreSQL, through
    /// pgvector when the database has it (the memory store's vector mode).
    pub fn vector_search(&self) -> crate::status::VectorSearch {
        match &self.memory {
            MemoryStore::Sqlite(_) => crate::status::VectorSearch {
                mode: "exact".to_owned(),
                pgvector_version: None,
                reason: Some("SQLite scores every embedding exactly".to_owned()),
                ef_search: None,
            },
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => match store.vector_mode() {
                mnemon_memory::VectorMode::Pgvector { version } => crate::status::VectorSearch {
                    mode: "pgvector".to_owned(),
                    pgvector_version: Some(version.clone()),
                    reason: None,
                    ef_search: Some(store.hnsw_ef_search()),
                },
                mnemon_memory::VectorMode::Exact { reason } => crate::status::VectorSearch {
                    mode: "exact".to_owned(),
                    pgvector_version: None,
                    reason: Some(reason.clone()),
                    ef_search: None,
                },
                other => crate::status::VectorSearch {
                    mode: "exact".to_owned(),
                    pgvector_version: None,
                    reason: Some(format!("{other:?}")),
                    ef_search: None,
                },
            },
        }
    }

    /// One page of the namespace's threads with their live message counts and last activity,
    /// the most recently written first, after the thread the cursor `after` (a previous page's
    /// `next`) points at (docs/reference/memory.md#thread-summaries).
    pub fn thread_summaries(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<mnemon_memory::ThreadPage, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) => store.thread_summaries(limit, after),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.thread_summaries(limit, after),
        }
    }

    /// One page of the namespace's threads in creation order (oldest first, as
    /// [`threads`](Self::threads)), each with its summary, after the thread `after` (a previous
    /// page's `next`) names: one index range read a page. `None` when the store keeps no
    /// summaries (a SQLite file opened read-only from before them).
    pub fn threads_page(
        &self,
        limit: usize,
        after: Option<&str>,
    ) -> Result<Option<mnemon_memory::ThreadPage>, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) if !store.keeps_thread_summaries() => Ok(None),
            MemoryStore::Sqlite(store) => store.threads_page(limit, after).map(Some),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.threads_page(limit, after).map(Some),
        }
    }

    /// The memory thread of `scope` if it exists, without creating it: for readers, so that a
    /// mistyped session id is reported instead of becoming an empty session.
    pub fn existing_memory(&self, scope: Scope) -> Result<Option<Box<dyn Memory>>, MemoryError> {
        Ok(match &self.memory {
            MemoryStore::Sqlite(store) => store
                .existing_memory(scope)?
                .map(|m| Box::new(m) as Box<dyn Memory>),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store
                .existing_memory(scope)?
                .map(|m| Box::new(m) as Box<dyn Memory>),
        })
    }

    /// The memory thread of `scope`, created by its first write (in that write's transaction),
    /// so a write that fails leaves no empty thread behind.
    pub fn memory_created_on_write(&self, scope: Scope) -> Result<Box<dyn Memory>, MemoryError> {
        Ok(match &self.memory {
            MemoryStore::Sqlite(store) => Box::new(store.memory_created_on_write(scope)?),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => Box::new(store.memory_created_on_write(scope)?),
        })
    }

    /// Deletes the thread of `scope` with its messages and marks; whether it existed.
    pub fn drop_thread(&self, scope: &Scope) -> Result<bool, MemoryError> {
        match &self.memory {
            MemoryStore::Sqlite(store) => store.drop_thread(scope),
            #[cfg(feature = "postgres")]
            MemoryStore::Postgres(store) => store.drop_thread(scope),
        }
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

/// The artifact storage backends of `namespace`: `inline`, and `write_to_file` under `root` when
/// there is one. A non-default namespace writes under `<root>/.namespaces/<namespace>/`; the
/// default namespace writes at `root` itself but may not touch `.namespaces/`, so two tenants
/// never overwrite each other's files. This is what [`Stores::backends`] holds.
pub fn artifact_backends(root: Option<PathBuf>, namespace: &Namespace) -> BackendRegistry {
    let Some(root) = root else {
        return BackendRegistry::new();
    };
    // Each namespace's files live apart (the default's under the root, guarded from the
    // others' folder), so a sweep of one namespace may remove a file whose storage id another
    // namespace also uses: that id names another file there.
    if !namespace.is_default() {
        return BackendRegistry::with_defaults(root.join(NAMESPACES_DIR).join(namespace.as_str()))
            .private_to_namespace();
    }
    let mut registry = BackendRegistry::new();
    let guarded = DefaultNamespaceFiles(WriteToFile::new(root));
    // `write_to_file` is not `inline`, so registering it cannot fail.
    if registry.register(WRITE_TO_FILE, Arc::new(guarded)).is_err() {
        return BackendRegistry::new();
    }
    registry.private_to_namespace()
}

/// The default namespace's `write_to_file`: the root itself (today's files), except the folder
/// the other namespaces' files live in, so the default tenant cannot overwrite theirs.
struct DefaultNamespaceFiles(WriteToFile);

impl DefaultNamespaceFiles {
    fn check(storage_id: &str) -> Result<(), ArtifactError> {
        let first = storage_id
            .split(['/', '\\'])
            .find(|part| !part.is_empty() && *part != ".");
        if first.is_some_and(names_the_namespaces_dir) {
            return Err(ArtifactError::UnsafeStorageId {
                id: storage_id.chars().take(300).collect(),
                reason: format!(
                    "{NAMESPACES_DIR}/ holds the other namespaces' files; choose another folder"
                ),
            });
        }
        Ok(())
    }
}

/// Whether the file system may take `part` for [`NAMESPACES_DIR`]: the name itself, and on file
/// systems that ignore case (macOS, Windows) or drop trailing dots and spaces or read a stream
/// name after `:` (Windows) any spelling they read as it, Unicode case included (`ſ`
/// upper-cases to `S`), and Windows' short (8.3) alias of it (`NAMESP~1`). Refused on every
/// system, so a data directory copied to another keeps its tenants apart.
fn names_the_namespaces_dir(part: &str) -> bool {
    let name = part
        .split(':')
        .next()
        .unwrap_or_default()
        .trim_end_matches(['.', ' ']);
    let short_alias = name
        .get(..6)
        .is_some_and(|head| head.eq_ignore_ascii_case("namesp"))
        && name.contains('~');
    let folded = |fold: fn(&str) -> String| fold(name) == fold(NAMESPACES_DIR);
    folded(str::to_uppercase) || folded(str::to_lowercase) || short_alias
}

impl StorageBackend for DefaultNamespaceFiles {
    fn write(&self, storage_id: &str, content: &Value) -> Result<(), ArtifactError> {
        Self::check(storage_id)?;
        self.0.write(storage_id, content)
    }

    fn read(&self, storage_id: &str) -> Result<Value, ArtifactError> {
        Self::check(storage_id)?;
        self.0.read(storage_id)
    }

    fn delete(&self, storage_id: &str) -> Result<bool, ArtifactError> {
        Self::check(storage_id)?;
        self.0.delete(storage_id)
    }

    fn canonical_id(&self, storage_id: &str) -> Result<String, ArtifactError> {
        Self::check(storage_id)?;
        self.0.canonical_id(storage_id)
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
        let error = Stores::open(&file).unwrap_err();
        assert!(matches!(error, OpenError::CreateDir { .. }), "{error}");
        assert!(error.to_string().contains("taken"), "{error}");
        assert!(error.source().is_none());

        // A database file that is not one.
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join(DATABASE_FILE), vec![b'x'; 4096]).unwrap();
        let error = Stores::open(&data).unwrap_err();
        assert!(matches!(error, OpenError::Assets(_)), "{error}");
        assert!(error.to_string().contains("not a database"), "{error}");
        assert!(error.source().is_none());

        let mnemon = Stores::open(dir.path().join("fresh")).unwrap();
        let error = mnemon.library("missing").unwrap_err();
        assert!(error.to_string().contains("missing"), "{error}");
        assert!(error.source().is_none());
    }

    /// A zero default time-to-live would store every write already expired (a put answered,
    /// then never found): refused at open, before anything is created.
    #[test]
    fn a_zero_default_ttl_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let options = OpenOptions::default().with_default_ttl(Some(std::time::Duration::ZERO));
        let error = Stores::open_with(&data, &options).unwrap_err();
        assert!(matches!(error, OpenError::ZeroDefaultTtl), "{error}");
        assert!(!data.exists());
        let options = options.with_default_ttl(Some(std::time::Duration::from_millis(1)));
        Stores::open_with(&data, &options).unwrap();
    }

    #[test]
    fn read_only_handles_read_what_was_written_and_create_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let absent = dir.path().join("absent");
        let empty = Stores::open_read_only(&absent).unwrap();
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
        let mnemon = Stores::open(&data).unwrap();
        mnemon
            .assets()
            .put(&mnemon_types::Asset::new("hello").with_id("a1"))
            .unwrap();
        drop(mnemon);
        let reader = Stores::open_read_only(&data).unwrap();
        assert_eq!(reader.assets().list_ids(None).unwrap(), ["a1"]);
    }

    #[test]
    fn namespaces_share_a_directory_without_sharing_data_or_files() {
        let dir = tempfile::tempdir().unwrap();
        let default = Stores::open(dir.path()).unwrap();
        let acme = Stores::open_with(
            dir.path(),
            &OpenOptions::default().with_namespace("acme".parse().unwrap()),
        )
        .unwrap();
        assert_eq!(acme.namespace().as_str(), "acme");

        default
            .assets()
            .put(&mnemon_types::Asset::new("mine").with_id("a1"))
            .unwrap();
        assert!(acme.assets().get("a1").unwrap().is_none());
        acme.session("s1")
            .unwrap()
            .add(vec![
                serde_json::json!({"name": "u", "content": "hi", "role": "user"}).into(),
            ])
            .unwrap();
        assert_eq!(default.session("s1").unwrap().size().unwrap(), 0);
        assert_eq!(acme.threads().unwrap().len(), 1);

        // The same storage id lands in two files: the default's where it always did.
        let write = |m: &Stores, text: &str| {
            let Ok(mnemon_artifacts::Storage::External { backend, .. }) =
                m.backends().resolve(WRITE_TO_FILE)
            else {
                panic!("write_to_file is registered");
            };
            backend
                .write("plans/p.json", &serde_json::json!(text))
                .unwrap();
            backend
        };
        let default_files = write(&default, "default");
        let acme_files = write(&acme, "acme");
        assert!(dir.path().join("artifacts/plans/p.json").is_file());
        assert!(
            dir.path()
                .join("artifacts/.namespaces/acme/plans/p.json")
                .is_file()
        );
        assert_eq!(
            default_files.read("plans/p.json").unwrap(),
            serde_json::json!("default")
        );
        assert_eq!(
            acme_files.read("plans/p.json").unwrap(),
            serde_json::json!("acme")
        );
        // The default namespace cannot reach into the others' folder.
        // Nor through another spelling that a case-insensitive file system (macOS, Windows)
        // or Windows' name rules read as the same folder.
        for id in [
            ".namespaces/acme/plans/p.json",
            "./.namespaces/acme/x",
            ".NAMESPACES/acme/plans/p.json",
            ".Namespaces\\acme\\x",
            ".namespaces./acme/x",
            ".namespaces /acme/x",
            "NAMESP~1/acme/x",
            ".nameſpaces/acme/x",
            ".namespaces::$INDEX_ALLOCATION/acme/x",
        ] {
            let error = default_files
                .write(id, &serde_json::json!("x"))
                .unwrap_err();
            assert!(
                matches!(error, ArtifactError::UnsafeStorageId { .. }),
                "{error}"
            );
            assert!(default_files.read(id).is_err());
            assert!(default_files.delete(id).is_err());
        }
        assert_eq!(
            acme_files.read("plans/p.json").unwrap(),
            serde_json::json!("acme")
        );
        // Folders that only resemble it stay the default namespace's.
        for part in ["namespaces", ".namespaces-old", "notes", "namesp"] {
            assert!(!names_the_namespaces_dir(part), "{part}");
        }
    }
}
