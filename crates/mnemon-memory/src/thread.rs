//! One conversation thread's messages and marks, and the planning of every change to them.
//!
//! Both implementations keep a `ThreadState` (the SQLite one as a mirror of the file), so the
//! semantics of
//! docs/reference/memory.md#the-memory-trait–docs/reference/memory.md#recall-by-token-budget are
//! written once here: an operation first *plans* a [`Change`] against the current state (validating
//! everything), the backend persists it, then the state *applies* it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use mnemon_types::Msg;

use crate::embedding_cache::EmbeddingCache;
use crate::entry::Entry;
use crate::recall_index::IndexSlot;
use crate::report::{AddReport, DeleteByIdReport, DeleteReport};

/// A change to a thread, planned against its current state.
#[derive(Debug)]
pub(crate) enum Change {
    /// Append these entries (ids already checked unique).
    Append(Vec<Entry>),
    /// Remove the entries at these indices (ascending, unique, valid).
    Remove(Vec<usize>),
    /// Remove everything, then append these entries.
    Replace(Vec<Entry>),
    /// Give these entries these mark lists.
    SetMarks(Vec<(usize, Vec<String>)>),
    /// Replace these entries' messages (to store embeddings), made by this model.
    SetMessages(Vec<(usize, Msg)>, Option<String>),
}

/// The messages of one thread, in insertion order.
#[derive(Debug, Default)]
pub(crate) struct ThreadState {
    entries: Vec<Entry>,
    positions: HashMap<String, usize>,
    cache: Mutex<Option<Arc<EmbeddingCache>>>,
    /// The approximate index of the cache's rows, when the thread is large enough
    /// (`crate::recall_index`).
    index: Arc<IndexSlot>,
}

impl ThreadState {
    /// A state holding these entries (ids must be unique).
    #[cfg(any(feature = "sqlite", feature = "postgres", test))]
    pub(crate) fn from_entries(entries: Vec<Entry>) -> Self {
        let mut state = ThreadState {
            entries,
            ..ThreadState::default()
        };
        state.reindex();
        state
    }

    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn position(&self, id: &str) -> Option<usize> {
        self.positions.get(id).copied()
    }

    fn reindex(&mut self) {
        self.positions = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.id().to_owned(), i))
            .collect();
    }

    /// Applies a planned change.
    pub(crate) fn apply(&mut self, change: Change) {
        self.update_cache(&change);
        match change {
            Change::Append(new) => {
                let start = self.entries.len();
                self.positions.reserve(new.len());
                for (i, entry) in new.iter().enumerate() {
                    self.positions.insert(entry.id().to_owned(), start + i);
                }
                if self.entries.is_empty() {
                    // Takes the batch's buffer instead of copying every entry.
                    self.entries = new;
                } else {
                    self.entries.extend(new);
                }
            }
            Change::Remove(indices) => {
                let mut doomed = indices.iter().peekable();
                let mut i = 0;
                self.entries.retain(|_| {
                    let remove = doomed.peek() == Some(&&i);
                    if remove {
                        doomed.next();
                    }
                    i += 1;
                    !remove
                });
                self.reindex();
            }
            Change::Replace(new) => {
                self.entries = new;
                self.reindex();
            }
            Change::SetMarks(updates) => {
                for (i, marks) in updates {
                    if let Some(entry) = self.entries.get_mut(i) {
                        entry.marks = marks;
                    }
                }
            }
            Change::SetMessages(updates, model) => {
                for (i, msg) in updates {
                    if let Some(entry) = self.entries.get_mut(i) {
                        *entry = Entry::new(msg, std::mem::take(&mut entry.marks))
                            .expiring(entry.expires_at)
                            .embedded_by(model.clone());
                    }
                }
            }
        }
    }

    /// Brings the embedding cache in step with `change` (before it is applied), appending rows
    /// where that is enough and dropping the cache, to be rebuilt on next use, otherwise.
    fn update_cache(&mut self, change: &Change) {
        let slot = self.cache.get_mut().unwrap_or_else(PoisonError::into_inner);
        // No reader can hold the cache while the state is borrowed mutably, so `get_mut`
        // succeeds; if it ever did not, rebuilding is still correct.
        let Some(cache) = slot
            .as_mut()
            .and_then(Arc::get_mut)
            .filter(|c| c.len() == self.entries.len())
        else {
            *slot = None;
            return;
        };
        let in_step = match change {
            Change::Append(new) => {
                cache.append(new);
                true
            }
            Change::SetMarks(_) => true,
            Change::SetMessages(updates, _) => {
                updates
                    .iter()
                    .all(|(i, msg)| match (cache.has(*i), msg.embedding()) {
                        (false, None) => true,
                        (false, Some(vector)) => cache.fill(*i, vector),
                        (true, _) => false,
                    })
            }
            Change::Remove(_) | Change::Replace(_) => false,
        };
        if !in_step {
            *slot = None;
        }
    }

    /// The embedding matrix of the current state, built on first use after a change.
    pub(crate) fn embedding_cache(&self) -> Arc<EmbeddingCache> {
        let mut slot = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert_with(|| Arc::new(EmbeddingCache::build(&self.entries)))
            .clone()
    }

    /// The thread's recall index slot.
    pub(crate) fn index_slot(&self) -> &Arc<IndexSlot> {
        &self.index
    }

    /// Indices of the messages passing the mark filters, in order.
    pub(crate) fn marked(&self, mark: Option<&str>, exclude_mark: Option<&str>) -> Vec<usize> {
        let has = |e: &Entry, m: &str| e.marks.iter().any(|x| x == m);
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| mark.is_none_or(|m| has(e, m)))
            .filter(|(_, e)| exclude_mark.is_none_or(|m| !has(e, m)))
            .map(|(i, _)| i)
            .collect()
    }

    /// Steps 1 and 2 of docs/reference/memory.md#reading-messages: clones of the mark-filtered
    /// messages, cut to the last `recent_n`.
    pub(crate) fn select(
        &self,
        mark: Option<&str>,
        exclude_mark: Option<&str>,
        recent_n: Option<usize>,
    ) -> Vec<Msg> {
        let (mark_filtered, all);
        let chosen: &[usize] = if mark.is_some() || exclude_mark.is_some() {
            mark_filtered = self.marked(mark, exclude_mark);
            &mark_filtered
        } else {
            all = (0..self.entries.len()).collect::<Vec<_>>();
            &all
        };
        let skip = recent_n.map_or(0, |n| chosen.len().saturating_sub(n));
        chosen[skip..]
            .iter()
            .filter_map(|&i| self.entries.get(i).map(Entry::message))
            .collect()
    }

    /// Plans appending `batch`, skipping ids already stored or seen earlier in the batch.
    /// With `replace`, the current messages are dropped first (so only in-batch repeats count).
    pub(crate) fn plan_add(&self, batch: Vec<Entry>, replace: bool) -> (Option<Change>, AddReport) {
        let mut seen: HashSet<&str> = HashSet::with_capacity(batch.len());
        let mut keep = vec![true; batch.len()];
        let mut skipped = Vec::new();
        for (k, entry) in batch.iter().enumerate() {
            let id = entry.id();
            let stored = !replace && self.positions.contains_key(id);
            if stored || !seen.insert(id) {
                keep[k] = false;
                skipped.push(id.to_owned());
            }
        }
        // Filtering in place (retain visits in order) avoids copying a large batch.
        let mut keep = keep.into_iter();
        let mut fresh = batch;
        fresh.retain(|_| keep.next().unwrap_or(false));
        let report = AddReport {
            added: fresh.len(),
            skipped_duplicates: skipped,
        };
        let change = if replace {
            Some(Change::Replace(fresh))
        } else {
            (!fresh.is_empty()).then_some(Change::Append(fresh))
        };
        (change, report)
    }

    /// Plans deleting by index (docs/reference/memory.md#deleting-messages).
    pub(crate) fn plan_delete(&self, indices: &[usize]) -> (Option<Change>, DeleteReport) {
        let mut sorted = indices.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let (deleted, skipped_invalid): (Vec<usize>, Vec<usize>) =
            sorted.into_iter().partition(|&i| i < self.entries.len());
        let deleted_ids = deleted
            .iter()
            .filter_map(|&i| self.entries.get(i).map(|e| e.id().to_owned()))
            .collect();
        let change = (!deleted.is_empty()).then(|| Change::Remove(deleted.clone()));
        let report = DeleteReport {
            deleted,
            deleted_ids,
            skipped_invalid,
        };
        (change, report)
    }

    /// Plans deleting by id.
    pub(crate) fn plan_delete_ids(&self, ids: &[&str]) -> (Option<Change>, DeleteByIdReport) {
        let mut indices = Vec::new();
        let mut not_found: Vec<String> = Vec::new();
        let mut seen = HashSet::new();
        for &id in ids {
            if !seen.insert(id) {
                continue;
            }
            match self.position(id) {
                Some(i) => indices.push(i),
                None => not_found.push(id.to_owned()),
            }
        }
        indices.sort_unstable();
        self.removal(indices, not_found)
    }

    /// Plans deleting every message carrying `mark`.
    pub(crate) fn plan_delete_by_mark(&self, mark: &str) -> (Option<Change>, DeleteByIdReport) {
        self.removal(self.marked(Some(mark), None), Vec::new())
    }

    fn removal(
        &self,
        indices: Vec<usize>,
        not_found: Vec<String>,
    ) -> (Option<Change>, DeleteByIdReport) {
        let deleted = indices
            .iter()
            .filter_map(|&i| self.entries.get(i).map(|e| e.id().to_owned()))
            .collect();
        let change = (!indices.is_empty()).then_some(Change::Remove(indices));
        (change, DeleteByIdReport { deleted, not_found })
    }

    /// Plans giving `mark` to these ids; the count is how many gained it.
    pub(crate) fn plan_mark(&self, ids: &[&str], mark: &str) -> (Option<Change>, usize) {
        let mut updates: Vec<(usize, Vec<String>)> = Vec::new();
        let mut seen = HashSet::new();
        for &id in ids {
            let Some(i) = self.position(id) else { continue };
            let Some(entry) = self.entries.get(i) else {
                continue;
            };
            if seen.insert(i) && !entry.marks.iter().any(|m| m == mark) {
                let mut marks = entry.marks.clone();
                marks.push(mark.to_owned());
                updates.push((i, marks));
            }
        }
        let count = updates.len();
        (
            (!updates.is_empty()).then_some(Change::SetMarks(updates)),
            count,
        )
    }

    /// Plans removing `mark` from these ids (`None`: all messages).
    pub(crate) fn plan_unmark(&self, ids: Option<&[&str]>, mark: &str) -> (Option<Change>, usize) {
        let indices: Vec<usize> = match ids {
            None => (0..self.entries.len()).collect(),
            Some(ids) => {
                let set: HashSet<usize> = ids.iter().filter_map(|id| self.position(id)).collect();
                let mut v: Vec<usize> = set.into_iter().collect();
                v.sort_unstable();
                v
            }
        };
        let updates: Vec<(usize, Vec<String>)> = indices
            .into_iter()
            .filter_map(|i| {
                let entry = self.entries.get(i)?;
                entry.marks.iter().any(|m| m == mark).then(|| {
                    let marks = entry.marks.iter().filter(|m| *m != mark).cloned();
                    (i, marks.collect())
                })
            })
            .collect();
        let count = updates.len();
        (
            (!updates.is_empty()).then_some(Change::SetMarks(updates)),
            count,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::test_factory;

    fn state(n: usize) -> ThreadState {
        let f = test_factory();
        ThreadState::from_entries(
            (0..n)
                .map(|i| Entry::new(f.msg("n", i).build().unwrap(), vec![]))
                .collect(),
        )
    }

    #[test]
    fn remove_keeps_order_and_index() {
        let mut s = state(6);
        let (change, report) = s.plan_delete(&[9, 4, 0, 4]);
        assert_eq!(report.deleted, vec![0, 4]);
        assert_eq!(report.skipped_invalid, vec![9]);
        s.apply(change.unwrap());
        let contents: Vec<_> = s
            .entries()
            .iter()
            .map(|e| e.msg_without_embedding().content().clone())
            .collect();
        assert_eq!(contents, vec![1, 2, 3, 5]);
        let id = s.entries()[3].id().to_owned();
        assert_eq!(s.position(&id), Some(3));
    }

    #[test]
    fn cache_follows_appends_and_rebuilds_after_removals() {
        let f = test_factory();
        let with = |i: usize| {
            let msg = f.msg("n", i).embedding(vec![i as f32, 1.0]).build();
            Entry::new(msg.unwrap(), vec![])
        };
        let mut s = ThreadState::from_entries(vec![with(0), with(1)]);
        let built = Arc::as_ptr(&s.embedding_cache());
        let (change, _) = s.plan_add(vec![with(2)], false);
        s.apply(change.unwrap());
        let (change, _) = s.plan_mark(&[s.entries()[0].id()], "m");
        s.apply(change.unwrap());
        let cache = s.embedding_cache();
        assert!(
            std::ptr::eq(Arc::as_ptr(&cache), built),
            "appending kept the cache"
        );
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.row(2), Some(&[2.0f32, 1.0][..]));
        drop(cache);
        let (change, _) = s.plan_delete(&[0]);
        s.apply(change.unwrap());
        let cache = s.embedding_cache();
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.row(0), Some(&[1.0f32, 1.0][..]));
        assert_eq!(cache.matrix().rows(), 2);
    }

    #[test]
    fn select_recent() {
        let s = state(5);
        assert_eq!(s.select(None, None, Some(0)).len(), 0);
        assert_eq!(s.select(None, None, Some(2)).len(), 2);
        assert_eq!(s.select(None, None, Some(9)).len(), 5);
        assert_eq!(s.select(None, None, None).len(), 5);
    }
}
