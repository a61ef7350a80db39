//! `InMemoryMemory`: the counterpart of AgentScope's `TemporaryMemory`.

use std::sync::{PoisonError, RwLock};

use mnemon_types::MsgFactory;

use crate::clock::default_factory;
use crate::error::MemoryError;
use crate::ops::Backend;
use crate::recall_index::{RecallIndexOptions, RecallIndexStatus};
use crate::thread::{Change, ThreadState};

/// A memory held in process memory, behind a read-write lock.
#[derive(Debug)]
pub struct InMemoryMemory {
    factory: MsgFactory,
    state: RwLock<ThreadState>,
    recall_index: RecallIndexOptions,
}

impl Default for InMemoryMemory {
    fn default() -> Self {
        InMemoryMemory::new()
    }
}

impl InMemoryMemory {
    /// An empty memory with random ids and the local clock.
    pub fn new() -> Self {
        InMemoryMemory::with_factory(default_factory())
    }

    /// An empty memory that fills in missing ids and timestamps with `factory`.
    pub fn with_factory(factory: MsgFactory) -> Self {
        InMemoryMemory {
            factory,
            state: RwLock::new(ThreadState::default()),
            recall_index: RecallIndexOptions::default(),
        }
    }

    /// This memory with `options` deciding when its recall uses the approximate index
    /// (docs/reference/memory.md#the-recall-index; default [`RecallIndexOptions::default`]).
    pub fn with_recall_index(mut self, options: RecallIndexOptions) -> Self {
        self.recall_index = options;
        self
    }

    /// The state of the recall index of the memory's current embeddings.
    pub fn recall_index_status(&self) -> RecallIndexStatus {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        state.index_slot().status(&state.embedding_cache())
    }
}

impl Backend for InMemoryMemory {
    fn factory(&self) -> &MsgFactory {
        &self.factory
    }

    fn recall_index(&self) -> Option<&RecallIndexOptions> {
        Some(&self.recall_index)
    }

    fn read<R>(&self, f: impl FnOnce(&ThreadState) -> R) -> Result<R, MemoryError> {
        // A panic elsewhere cannot leave the state half-changed: changes are applied only
        // after they have been fully planned.
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        Ok(f(&state))
    }

    fn write<R>(
        &self,
        f: impl FnOnce(&ThreadState) -> Result<(Option<Change>, R), MemoryError>,
    ) -> Result<R, MemoryError> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let (change, result) = f(&state)?;
        if let Some(change) = change {
            state.apply(change);
        }
        Ok(result)
    }
}
