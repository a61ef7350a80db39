//! An artifact store that lives in memory: for tests and short-lived agents.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use mnemon_db::expiry::{Clock, Expiry, SystemClock, is_live};
use mnemon_filter::Filter;
use mnemon_types::{Artifact, StorageLocation};
use uuid::Uuid;

use crate::store::{
    ArtifactSweep, ListedArtifact, PageQuery, check_filter, check_required, document,
};
use crate::{ArtifactError, ArtifactStore, BackendRegistry};

/// An [`ArtifactStore`] kept in memory; everything is lost when it is dropped.
///
/// Expiry and filters behave as in the durable stores: the clock and the default
/// time-to-live are chosen with [`InMemoryArtifactStore::with_expiry`]; filters are evaluated
/// on each record's [`document`](crate::document).
#[derive(Debug)]
pub struct InMemoryArtifactStore {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
    default_ttl: Option<Duration>,
}

impl Default for InMemoryArtifactStore {
    fn default() -> Self {
        InMemoryArtifactStore::with_expiry(Arc::new(SystemClock), None)
    }
}

#[derive(Debug, Default)]
struct State {
    /// The last sequence value handed out; 0 before the first save.
    last_sequence: u64,
    /// Records by sequence, so iteration is save order, each with its expiry.
    records: BTreeMap<u64, (Artifact, Option<i64>)>,
    /// Sequence of each stored id.
    by_id: HashMap<Uuid, u64>,
}

impl InMemoryArtifactStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store reading `clock`, whose plain saves expire `default_ttl` after they are
    /// made (never for `None`).
    pub fn with_expiry(clock: Arc<dyn Clock>, default_ttl: Option<Duration>) -> Self {
        InMemoryArtifactStore {
            state: Mutex::new(State::default()),
            clock,
            default_ttl,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock, and every mutation below leaves the state
        // consistent at each step, so a poisoned lock still guards valid data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The live records, in save order.
    fn live<'a>(
        &self,
        state: &'a State,
    ) -> impl DoubleEndedIterator<Item = (&'a Artifact, Option<i64>)> {
        let now = self.clock.now_millis();
        state
            .records
            .values()
            .filter(move |(_, at)| is_live(*at, now))
            .map(|(a, at)| (a, *at))
    }

    /// Removes the records `doomed` selects, then their content that no remaining record
    /// points at; the lock is held throughout, as a save holds it while writing content.
    fn remove_where(
        &self,
        doomed: impl Fn(&Artifact, Option<i64>) -> bool,
        backends: &BackendRegistry,
    ) -> ArtifactSweep {
        let mut state = self.state();
        let mut sweep = ArtifactSweep::default();
        let mut locations: BTreeSet<(String, String)> = BTreeSet::new();
        let gone: Vec<u64> = state
            .records
            .iter()
            .filter(|(_, (a, at))| doomed(a, *at))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in gone {
            if let Some((artifact, _)) = state.records.remove(&seq) {
                state.by_id.remove(&artifact.id);
                sweep.records += 1;
                if let Some(location) = artifact.storage {
                    locations.insert((location.backend, location.id));
                }
            }
        }
        let mut unshared = Vec::new();
        for (backend, id) in locations {
            let location = StorageLocation { backend, id };
            let shared = state
                .records
                .values()
                .any(|(a, _)| a.storage.as_ref() == Some(&location));
            if shared {
                sweep.content_shared += 1;
            } else {
                unshared.push(location);
            }
        }
        sweep.remove_contents(&unshared, backends);
        sweep
    }
}

impl ArtifactStore for InMemoryArtifactStore {
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError> {
        self.save_expiring(artifact, Expiry::Default, &mut || Ok(()))
    }

    fn save_with_content(
        &self,
        artifact: &Artifact,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        self.save_expiring(artifact, Expiry::Default, write_content)
    }

    fn save_expiring(
        &self,
        artifact: &Artifact,
        expiry: Expiry,
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
        let expires_at = expiry.deadline(self.clock.now_millis(), self.default_ttl);
        let sequence = state.last_sequence.saturating_add(1);
        state.last_sequence = sequence;
        state.by_id.insert(artifact.id, sequence);
        state
            .records
            .insert(sequence, (artifact.clone(), expires_at));
        Ok(sequence)
    }

    fn expires_at(&self, id: Uuid) -> Result<Option<Option<i64>>, ArtifactError> {
        let now = self.clock.now_millis();
        let state = self.state();
        Ok(state
            .by_id
            .get(&id)
            .and_then(|seq| state.records.get(seq))
            .map(|(_, at)| *at)
            .filter(|at| is_live(*at, now)))
    }

    fn list_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        if let Some(filter) = filter {
            check_filter(filter)?;
        }
        let state = self.state();
        Ok(self
            .live(&state)
            .filter(|(a, _)| scope.is_none_or(|s| a.scope == s))
            .filter(|(a, at)| filter.is_none_or(|f| f.matches(&document(a, *at))))
            .take(limit.unwrap_or(usize::MAX))
            .map(|(a, _)| a.clone())
            .collect())
    }

    fn count_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
    ) -> Result<u64, ArtifactError> {
        if let Some(filter) = filter {
            check_filter(filter)?;
        }
        let state = self.state();
        Ok(self
            .live(&state)
            .filter(|(a, _)| scope.is_none_or(|s| a.scope == s))
            .filter(|(a, at)| filter.is_none_or(|f| f.matches(&document(a, *at))))
            .count() as u64)
    }

    fn gc(&self, backends: &BackendRegistry) -> Result<ArtifactSweep, ArtifactError> {
        let now = self.clock.now_millis();
        Ok(self.remove_where(|_, at| !is_live(at, now), backends))
    }

    fn forget(
        &self,
        scope_prefix: &str,
        backends: &BackendRegistry,
    ) -> Result<ArtifactSweep, ArtifactError> {
        Ok(self.remove_where(|a, _| a.scope.starts_with(scope_prefix), backends))
    }

    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        let now = self.clock.now_millis();
        let state = self.state();
        Ok(state
            .by_id
            .get(&id)
            .and_then(|seq| state.records.get(seq))
            .filter(|(_, at)| is_live(*at, now))
            .map(|(a, _)| a.clone()))
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        let state = self.state();
        Ok(self
            .live(&state)
            .rev()
            .find(|(a, _)| a.scope == scope && a.key == key)
            .map(|(a, _)| a.clone()))
    }

    fn list(
        &self,
        scope: &str,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        let state = self.state();
        Ok(self
            .live(&state)
            .filter(|(a, _)| a.scope == scope && artifact_type.is_none_or(|t| a.artifact_type == t))
            .map(|(a, _)| a.clone())
            .collect())
    }

    fn scopes(&self) -> Result<Vec<String>, ArtifactError> {
        let state = self.state();
        let scopes: BTreeSet<&str> = self.live(&state).map(|(a, _)| a.scope.as_str()).collect();
        Ok(scopes.into_iter().map(str::to_owned).collect())
    }

    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        let now = self.clock.now_millis();
        let mut state = self.state();
        match state.by_id.remove(&id) {
            Some(seq) => {
                // An expired record is removed too, but reported absent, as reads report it.
                let removed = state.records.remove(&seq);
                Ok(removed.is_some_and(|(_, at)| is_live(at, now)))
            }
            None => Ok(false),
        }
    }

    fn list_page(
        &self,
        query: &PageQuery<'_>,
    ) -> Result<Option<Vec<ListedArtifact>>, ArtifactError> {
        if let Some(filter) = query.filter {
            check_filter(filter)?;
        }
        let now = self.clock.now_millis();
        let state = self.state();
        let from = match query.after {
            None => Bound::Unbounded,
            Some(after) => match state.by_id.get(&after) {
                Some(seq) => Bound::Excluded(*seq),
                None => return Ok(None),
            },
        };
        Ok(Some(
            state
                .records
                .range((from, Bound::Unbounded))
                .map(|(_, (a, at))| (a, *at))
                .filter(|(_, at)| is_live(*at, now))
                .filter(|(a, _)| query.scope.is_none_or(|s| a.scope == s))
                .filter(|(a, _)| query.artifact_type.is_none_or(|t| a.artifact_type == t))
                .filter(|(a, at)| query.filter.is_none_or(|f| f.matches(&document(a, *at))))
                .take(query.limit)
                .map(|(a, at)| ListedArtifact {
                    artifact: Artifact {
                        data: None,
                        ..a.clone()
                    },
                    expires_at: at,
                })
                .collect(),
        ))
    }
}
