//! The state shared by every request: the current snapshot, swapped atomically on reload.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::batch::ScanBatcher;
use crate::error::HostError;
use crate::limits::Limits;
use crate::options::HostOptions;
use crate::page::RecentErrors;
use crate::source::{Snapshot, Sources};

/// Shared by all requests and the reload triggers.
pub(crate) struct HostState {
    /// The snapshot new requests use. The lock is held only to clone or replace the `Arc`, never
    /// during a query, so a reload never waits for queries and queries never wait for a load.
    current: RwLock<Arc<Snapshot>>,
    sources: Sources,
    pub(crate) options: HostOptions,
    /// The seeded stream that random queries draw their seeds from (`--random-seed`).
    rng: Option<Mutex<ChaCha8Rng>>,
    /// Serialises reloads, so two triggers at once do not load twice in parallel.
    reload_lock: tokio::sync::Mutex<()>,
    /// Shares exact scans between concurrent queries on large libraries; `None` if its thread
    /// could not start (every query then scans on its own).
    pub(crate) batcher: Option<ScanBatcher>,
    /// The memory ceilings shared by all requests (`docs/limits.md`).
    pub(crate) limits: Arc<Limits>,
    /// Recent query errors, for the Polymath client's discovery request (see `crate::page`).
    pub(crate) recent_errors: RecentErrors,
}

/// The outcome of a successful reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    /// The number of bits now served.
    pub bits: usize,
}

impl HostState {
    pub(crate) fn new(snapshot: Snapshot, sources: Sources, options: HostOptions) -> Self {
        let limits = Arc::new(Limits::new(&options));
        let rng = options
            .random_seed
            .map(|seed| Mutex::new(ChaCha8Rng::seed_from_u64(seed)));
        HostState {
            current: RwLock::new(Arc::new(snapshot)),
            sources,
            options,
            rng,
            limits,
            recent_errors: RecentErrors::default(),
            reload_lock: tokio::sync::Mutex::new(()),
            batcher: ScanBatcher::start()
                .inspect_err(|error| {
                    tracing::warn!(%error, "cannot start the scan thread; queries scan alone");
                })
                .ok(),
        }
    }

    /// The snapshot to run a request against.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        // A poisoned lock only means a thread panicked while holding it; the Arc inside is intact.
        Arc::clone(&self.current.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// The seed for one random query vector, when the host was given `--random-seed`.
    pub(crate) fn next_seed(&self) -> Option<u64> {
        let rng = self.rng.as_ref()?;
        Some(
            rng.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .next_u64(),
        )
    }

    /// Loads the sources again and swaps the new snapshot in. On failure the previous snapshot
    /// stays in service. Requests already running finish on the snapshot they started with.
    ///
    /// The reload runs to its end in a task of its own, whatever happens to the caller: a
    /// caller that goes away (a client closing its connection to `/admin/reload`, a timeout)
    /// used to drop the lock while its load went on in the blocking pool, so the next trigger
    /// started a second full load beside it, and a burst of aborted requests ran that many
    /// loads at once (as many library copies in memory).
    pub(crate) async fn reload(self: &Arc<Self>) -> Result<Reloaded, HostError> {
        let state = Arc::clone(self);
        tokio::spawn(async move { state.reload_now().await })
            .await
            .map_err(|_| HostError::LoaderPanicked)?
    }

    /// [`reload`](Self::reload)'s work, one at a time.
    async fn reload_now(&self) -> Result<Reloaded, HostError> {
        let _one_at_a_time = self.reload_lock.lock().await;
        let sources = self.sources.clone();
        let started = std::time::Instant::now();
        let index = self.options.index;
        let snapshot = tokio::task::spawn_blocking(move || sources.load_serving(&index))
            .await
            .map_err(|_| HostError::LoaderPanicked)??;
        let bits = snapshot.library.len();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(snapshot);
        tracing::info!(
            library = %self.sources.library,
            config = %self.sources.config,
            bits,
            load_ms = started.elapsed().as_millis() as u64,
            "reloaded"
        );
        Ok(Reloaded { bits })
    }
}
