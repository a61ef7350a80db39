//! An artifact store that lives in memory: for tests and short-lived agents.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use mnemon_types::Artifact;
use uuid::Uuid;

use crate::store::check_required;
use crate::{ArtifactError, ArtifactStore};

/// An [`ArtifactStore`] kept in memory; everything is lost when it is dropped.
#[derive(Debug, Default)]
pub struct InMemoryArtifactStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The last sequence value handed out; 0 before the first save.
    last_sequence: u64,
    /// Records by sequence, so iteration is save order.
    records: BTreeMap<u64, Artifact>,
    /// Sequence of each stored id.
    by_id: HashMap<Uuid, u64>,
}

impl InMemoryArtifactStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock, and every mutation below leaves the state
        // consistent at each step, so a poisoned lock still guards valid data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ArtifactStore for InMemoryArtifactStore {
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError> {
        self.save_with_content(artifact, &mut || Ok(()))
    }

    fn save_with_content(
        &self,
        artifact: &Artifact,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        check_required(artifact)?;
        // The lock is held while the content is written, so saves to one storage id from
        // several threads cannot interleave (the trait's rule).
        let mut state = self.state();
        write_content()?;
        if state.by_id.contains_key(&artifact.id) {
            return Err(ArtifactError::DuplicateId { id: artifact.id });
        }
        let sequence = state.last_sequence.saturating_add(1);
        state.last_sequence = sequence;
        state.by_id.insert(artifact.id, sequence);
        state.records.insert(sequence, artifact.clone());
        Ok(sequence)
    }

    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        let state = self.state();
        Ok(state
            .by_id
            .get(&id)
            .and_then(|seq| state.records.get(seq))
            .cloned())
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        Ok(self
            .state()
            .records
            .values()
            .rev()
            .find(|a| a.scope == scope && a.key == key)
            .cloned())
    }

    fn list(
        &self,
        scope: &str,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        Ok(self
            .state()
            .records
            .values()
            .filter(|a| a.scope == scope && artifact_type.is_none_or(|t| a.artifact_type == t))
            .cloned()
            .collect())
    }

    fn scopes(&self) -> Result<Vec<String>, ArtifactError> {
        let state = self.state();
        let scopes: BTreeSet<&str> = state.records.values().map(|a| a.scope.as_str()).collect();
        Ok(scopes.into_iter().map(str::to_owned).collect())
    }

    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        let mut state = self.state();
        match state.by_id.remove(&id) {
            Some(seq) => {
                state.records.remove(&seq);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}
