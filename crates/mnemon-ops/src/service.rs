//! [`Service`]: the stores of one namespace plus the models the operations use (an embedder
//! for text search, the cl100k tokenizer for token budgets).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use mnemon_memory::{Memory, MemoryError, Scope};
use mnemon_types::{Embedder, Tokenizer};

use crate::error::OpsError;
use crate::stores::Stores;

/// What every operation runs against: one namespace's stores, the embedder (if any) that turns
/// search text into vectors, and the tokenizer of token budgets.
///
/// Cheap to clone (handles behind `Arc`s) and `Send + Sync`, so a server shares one. The stores
/// are synchronous: an async caller runs operations on its blocking pool.
#[derive(Clone)]
pub struct Service {
    stores: Stores,
    embedder: Option<Arc<dyn Embedder>>,
    tokenizer: Arc<dyn Tokenizer>,
    writers: Arc<Mutex<Writers>>,
    /// When library queries search a library's ANN index (docs/reference/library.md#ann-index).
    index: mnemon_library::IndexUse,
    /// The most bytes of output a render, a parameter substitution or a library query builds.
    max_result_bytes: usize,
}

/// The default of [`Service::max_result_bytes`]: 32 MiB, the same as the library host's
/// `--max-result-bytes` (`mnemon_host::DEFAULT_MAX_RESULT_BYTES`) and the reference crate's
/// [`DEFAULT_MAX_OUTPUT_BYTES`](mnemon_refs::DEFAULT_MAX_OUTPUT_BYTES), which it is.
pub const DEFAULT_MAX_RESULT_BYTES: usize = mnemon_refs::DEFAULT_MAX_OUTPUT_BYTES;

/// How many sessions keep a write handle open ([`Service::writer`]).
const WRITERS: usize = 64;

/// The most messages a kept write handle's thread may hold: a kept handle holds its thread in
/// memory, so larger threads are written through fresh handles, which bounds what the kept
/// handles hold together (64 × 10,000 messages).
pub(crate) const KEPT_THREAD_MESSAGES: usize = 10_000;

/// The memory handles writes go through, by scope, with the tick of their last use: a handle
/// keeps its thread's mirror, which its own writes keep current, so an add reads no stored
/// message; a handle opened per add loads (and parses) the whole thread first, which made an
/// add cost time in proportion to the session's size.
#[derive(Default)]
struct Writers {
    handles: HashMap<Scope, (Arc<dyn Memory>, u64)>,
    tick: u64,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("stores", &self.stores)
            .field(
                "embedder",
                &self.embedder.as_ref().map(|e| e.model().to_owned()),
            )
            .finish_non_exhaustive()
    }
}

impl Service {
    /// A service over `stores`, with no embedder and the cl100k_base tokenizer.
    pub fn new(stores: Stores) -> Service {
        Service {
            stores,
            embedder: None,
            tokenizer: Arc::new(mnemon_embed::Cl100kTokenizer),
            writers: Arc::default(),
            index: mnemon_library::IndexUse::default(),
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
        }
    }

    /// This service with `max_bytes` as the most output one operation builds for its caller
    /// (default [`DEFAULT_MAX_RESULT_BYTES`], 32 MiB): the rendered text of
    /// [`refs_render`](Service::refs_render), the substituted parameters of
    /// [`refs_resolve_params`](Service::refs_resolve_params) and the result JSON of
    /// [`library_query`](Service::library_query), and the messages of
    /// [`memory_get`](Service::memory_get) and [`memory_export`](Service::memory_export) as
    /// JSON. Past it they fail with a 400-kind error (`result_too_large`) instead of building
    /// or sending the output; a server passes its `--max-result-bytes` so that `/v1` answers
    /// are bounded as the library host's are, and the CLI `usize::MAX` (no limit: its output is
    /// its own user's).
    pub fn with_max_result_bytes(self, max_bytes: usize) -> Service {
        Service {
            max_result_bytes: max_bytes,
            ..self
        }
    }

    /// The most output one operation builds ([`Service::with_max_result_bytes`]).
    pub fn max_result_bytes(&self) -> usize {
        self.max_result_bytes
    }

    /// This service with `index` deciding when a library query searches the library's ANN
    /// index (default [`IndexUse::default`](mnemon_library::IndexUse): from 50,000 bits), as
    /// `mnemon serve --index-min-bits` sets it for the Polymath endpoint too.
    pub fn with_index(self, index: mnemon_library::IndexUse) -> Service {
        Service { index, ..self }
    }

    /// When library queries search a library's ANN index.
    pub fn index(&self) -> mnemon_library::IndexUse {
        self.index
    }

    /// This service with `embedder` for text search (memory search by text, library queries by
    /// text).
    pub fn with_embedder(self, embedder: Arc<dyn Embedder>) -> Service {
        Service {
            embedder: Some(embedder),
            ..self
        }
    }

    /// The stores.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The embedder, if one is configured.
    pub fn embedder(&self) -> Option<&dyn Embedder> {
        self.embedder.as_deref()
    }

    /// The embedder, or the error that says how to configure one.
    pub(crate) fn require_embedder(&self) -> Result<&dyn Embedder, OpsError> {
        self.embedder().ok_or(OpsError::NoEmbedder)
    }

    /// The memory handle writes of `scope` go through. On SQLite a fresh one: the store shares
    /// each thread's mirror between its handles, bounded (docs/reference/memory.md), so a fresh
    /// handle reads no stored message. On PostgreSQL, whose handles each mirror their thread,
    /// one kept open per recently written session (at most 64, the least recently used closed
    /// first; see [`Service::release_if_large`]), created by its first write. A kept handle sees
    /// writes of other handles and processes (its next call reloads the thread), and a thread
    /// deleted meanwhile is started again by the next write, as through a fresh handle.
    pub(crate) fn writer(&self, scope: Scope) -> Result<Arc<dyn Memory>, MemoryError> {
        if matches!(self.stores.backend(), crate::Backend::Sqlite) {
            return Ok(Arc::from(self.stores.memory_created_on_write(scope)?));
        }
        let mut writers = self.writers.lock().unwrap_or_else(PoisonError::into_inner);
        writers.tick += 1;
        let tick = writers.tick;
        if let Some((handle, used)) = writers.handles.get_mut(&scope) {
            *used = tick;
            return Ok(Arc::clone(handle));
        }
        // Opening reads nothing of the thread (its mirror loads at the first call), so it is
        // cheap enough to do under the lock.
        let handle: Arc<dyn Memory> =
            Arc::from(self.stores.memory_created_on_write(scope.clone())?);
        if writers.handles.len() >= WRITERS
            && let Some(oldest) = writers
                .handles
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(scope, _)| scope.clone())
        {
            writers.handles.remove(&oldest);
        }
        writers.handles.insert(scope, (Arc::clone(&handle), tick));
        Ok(handle)
    }

    /// The memory handle reads of `scope` go through, or `None` when the session has no
    /// thread. On PostgreSQL the session's kept write handle when this service keeps one
    /// ([`Service::writer`]): its mirror is current after its own writes, while a fresh handle
    /// loads and parses the whole thread for some reads, which made every recall of a busy
    /// session cost time in proportion to its size (docs/bench-server.md). Otherwise a fresh
    /// handle: reads never open a kept handle, so a large session only read is never mirrored
    /// (the store answers its top-k recall from its vector cache). Whether the thread exists is
    /// asked of the database each time, so a session deleted by another server is reported
    /// missing, as through a fresh handle.
    pub(crate) fn reader(&self, scope: Scope) -> Result<Option<Arc<dyn Memory>>, MemoryError> {
        let Some(fresh) = self.stores.existing_memory(scope.clone())? else {
            return Ok(None);
        };
        let kept = self
            .writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .handles
            .get(&scope)
            .map(|(handle, _)| Arc::clone(handle));
        Ok(Some(kept.unwrap_or_else(|| Arc::from(fresh))))
    }

    /// Closes the kept write handle of `scope` when its thread holds more than
    /// [`KEPT_THREAD_MESSAGES`] messages (`size`, as the handle just saw it), so the kept
    /// handles cannot hold more than 64 such threads in memory together.
    pub(crate) fn release_if_large(&self, scope: &Scope, size: usize) {
        if size > KEPT_THREAD_MESSAGES {
            let mut writers = self.writers.lock().unwrap_or_else(PoisonError::into_inner);
            writers.handles.remove(scope);
        }
    }

    /// How many memory write handles the service keeps open for message adds: on PostgreSQL
    /// at most 64, none for a thread of more than 10,000 messages; none on SQLite, whose store
    /// shares its threads' mirrors among handles.
    pub fn kept_write_handles(&self) -> usize {
        self.writers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .handles
            .len()
    }

    /// The tokenizer of token budgets.
    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.tokenizer.as_ref()
    }

    /// Whether the database answers: one point read of the asset table (an id no asset can
    /// have, so it reads nothing). For readiness probes.
    pub fn ping(&self) -> Result<(), OpsError> {
        self.stores.assets().get(READINESS_PROBE_ID)?;
        Ok(())
    }
}

/// The asset id [`Service::ping`] looks up: it starts with a control character, so no asset
/// put through the CLI or a sane client has it (and not NUL, which PostgreSQL text refuses).
const READINESS_PROBE_ID: &str = "\u{1}mnemon-readiness-probe";
