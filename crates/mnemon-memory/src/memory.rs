//! The `Memory` trait, with the selection query and add options only it takes
//! (docs/reference/memory.md#the-memory-trait).
//!
//! The values its other methods take and return belong to the concern they describe: documents
//! ([`crate::document`]: inputs, load sources, export targets), reports ([`crate::report`]),
//! retrieval ([`crate::retrieval`]) and budgets ([`crate::tokens`]). This module sits on top:
//! nothing else in the crate imports it except the implementation in [`crate::ops`].

use std::fmt;

use mnemon_types::{Embedder, Msg, Tokenizer};

use crate::document::{ExportOptions, ExportTarget, Exported, LoadSource, MsgInput};
use crate::error::MemoryError;
use crate::report::{AddReport, DeleteByIdReport, DeleteReport};
use crate::retrieval::{RetrievalQuery, RetrieveOptions, Retrieved};
use crate::tokens::{BudgetOptions, BudgetRecall, recall_tail};

/// A `get_memory` filter: `(position within the recent_n slice, message) -> keep?`.
pub type MsgFilter<'a> = dyn Fn(usize, &Msg) -> bool + 'a;

/// What [`Memory::get_memory`] returns: all messages, filtered by marks, then the most recent
/// `recent_n`, then by `filter`. Every field defaults to `None`.
#[derive(Clone, Copy, Default)]
pub struct MemoryQuery<'a> {
    /// Keep only the last `n` (after the mark filters); `Some(0)` keeps nothing.
    pub recent_n: Option<usize>,
    /// Keep messages for which `filter(i, msg)` is true, `i` being the position within the
    /// `recent_n` slice. It runs outside any lock.
    pub filter: Option<&'a MsgFilter<'a>>,
    /// Keep only messages carrying this mark.
    pub mark: Option<&'a str>,
    /// Drop messages carrying this mark.
    pub exclude_mark: Option<&'a str>,
}

impl fmt::Debug for MemoryQuery<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryQuery")
            .field("recent_n", &self.recent_n)
            .field("filter", &self.filter.map(|_| "<fn>"))
            .field("mark", &self.mark)
            .field("exclude_mark", &self.exclude_mark)
            .finish()
    }
}

/// Options of [`Memory::add_with`].
#[derive(Debug, Clone, Default)]
pub struct AddOptions {
    /// Marks given to every newly added message. A mark given more than once is kept once
    /// (a message's marks are a set), in the order first given.
    pub marks: Vec<String>,
    /// When the added messages expire (docs/reference/memory.md#expiry): the default,
    /// [`Expiry::Default`](mnemon_db::Expiry::Default), is the store's `default_ttl`, which is
    /// none (never) unless the store was opened with one. A durable store hides an expired
    /// message from every read from its expiry instant on, and its `gc` removes it;
    /// [`InMemoryMemory`](crate::InMemoryMemory) keeps no clock and refuses any expiry but
    /// never ([`MemoryError::ExpiryUnsupported`](crate::MemoryError::ExpiryUnsupported)).
    pub expiry: mnemon_db::Expiry,
}

/// A conversation memory: an ordered list of messages with marks, semantic recall and
/// token-budgeted recall.
///
/// Implemented by [`InMemoryMemory`](crate::InMemoryMemory) and (feature `sqlite`)
/// `SqliteMemory`, both through one generic implementation over the crate's storage backends,
/// so their semantics cannot drift apart; other types may implement it too.
///
/// Object-safe and `Send + Sync`: every method takes `&self` and locks internally. An *index* is
/// a message's 0-based position in insertion order at the time of the call. Every message
/// returned is a clone. A method that fails leaves the memory as it was.
pub trait Memory: Send + Sync {
    /// The messages selected by `query` (docs/reference/memory.md#reading-messages).
    fn get_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<Msg>, MemoryError>;

    /// Calls `f` with each message [`get_memory`](Self::get_memory) returns for `query`, in
    /// order, until `f` returns `false`; returns how many `f` was given. Without
    /// `query.recent_n` a durable memory reads its rows as it goes, from one consistent
    /// snapshot, and decodes none past the stop, so a caller that stops at a bound (a server's
    /// result limit) never holds the whole thread; by default (and with `recent_n`) it is
    /// `get_memory`'s result. Unlike `get_memory`'s, `query.filter` and `f` run during the read
    /// (under the memory's locks, with its snapshot open): they must not call this memory.
    fn for_each_message(
        &self,
        query: &MemoryQuery<'_>,
        f: &mut dyn FnMut(Msg) -> bool,
    ) -> Result<usize, MemoryError> {
        let mut given = 0;
        for message in self.get_memory(query)? {
            given += 1;
            if !f(message) {
                break;
            }
        }
        Ok(given)
    }

    /// The [`Msg::to_str`] lines of [`get_memory`](Self::get_memory), joined by `\n`.
    fn render(&self, query: &MemoryQuery<'_>) -> Result<String, MemoryError> {
        Ok(mnemon_types::msg::render(&self.get_memory(query)?))
    }

    /// Adds messages atomically, skipping duplicate ids (docs/reference/memory.md#adding-messages).
    fn add(&self, items: Vec<MsgInput>) -> Result<AddReport, MemoryError> {
        self.add_with(items, &AddOptions::default())
    }

    /// Adds messages atomically with marks, skipping duplicate ids.
    fn add_with(
        &self,
        items: Vec<MsgInput>,
        options: &AddOptions,
    ) -> Result<AddReport, MemoryError>;

    /// [`add_with`](Memory::add_with), recording `embedding_model` as the model that made the
    /// embeddings given with these messages (docs/reference/memory.md#embedding-models): a
    /// later recall with another embedder's model is then refused instead of mixing scores.
    /// Messages added without a model (plain `add_with`) have embeddings of unknown origin,
    /// never checked.
    fn add_with_model(
        &self,
        items: Vec<MsgInput>,
        options: &AddOptions,
        embedding_model: &str,
    ) -> Result<AddReport, MemoryError>;

    /// Removes the messages at these indices in one step; invalid indices are reported.
    fn delete(&self, indices: &[usize]) -> Result<DeleteReport, MemoryError>;

    /// Removes the messages with these ids.
    fn delete_by_id(&self, ids: &[&str]) -> Result<DeleteByIdReport, MemoryError>;

    /// Reads a document and (optionally clearing first) adds its messages atomically: a
    /// document that fails anywhere leaves the memory as it was (and a durable memory's thread
    /// not created). A durable memory streams a file, holding one message at a time.
    fn load(&self, source: LoadSource, overwrite: bool) -> Result<AddReport, MemoryError>;

    /// Exports the messages in the layout of [`ExportOptions::format`] (by default the 0.0.x
    /// array: Python's layout, 4-space indent). A durable memory writes a file or text as it
    /// reads the messages, from one consistent snapshot, without holding them all.
    fn export(
        &self,
        target: ExportTarget,
        options: &ExportOptions,
    ) -> Result<Exported, MemoryError>;

    /// Removes every message and mark.
    fn clear(&self) -> Result<(), MemoryError>;

    /// The number of messages.
    fn size(&self) -> Result<usize, MemoryError>;

    /// Scores messages against `query` by embedding and returns the best
    /// (docs/reference/memory.md#retrieval-steps).
    fn retrieve_by_embedding(
        &self,
        query: RetrievalQuery,
        options: &RetrieveOptions,
        embedder: Option<&dyn Embedder>,
    ) -> Result<Vec<Retrieved>, MemoryError>;

    /// Every message's embedding in memory order, embedding (and storing) missing ones when an
    /// embedder is given.
    fn get_embeddings(&self, embedder: Option<&dyn Embedder>)
    -> Result<Vec<Vec<f32>>, MemoryError>;

    /// Gives `mark` to the messages with these ids; returns how many gained it.
    fn mark(&self, ids: &[&str], mark: &str) -> Result<usize, MemoryError>;

    /// Removes `mark` from these messages (`None`: from all); returns how many lost it.
    fn unmark(&self, ids: Option<&[&str]>, mark: &str) -> Result<usize, MemoryError>;

    /// The marks of one message, or `None` when no message has this id.
    fn marks_of(&self, id: &str) -> Result<Option<Vec<String>>, MemoryError>;

    /// Deletes every message carrying `mark`.
    fn delete_by_mark(&self, mark: &str) -> Result<DeleteByIdReport, MemoryError>;

    /// The most recent messages whose [`Msg::to_str`] fits in `budget` tokens
    /// (docs/reference/memory.md#recall-by-token-budget).
    fn recall_within_budget(
        &self,
        budget: usize,
        tokenizer: &dyn Tokenizer,
        options: &BudgetOptions,
    ) -> Result<BudgetRecall, MemoryError> {
        // Only the tail can fit: read the last `window` candidates, and a window four times
        // larger only while the budget takes every message of the last one. The answer comes
        // from one read (one snapshot), and equals the tail of every candidate: it stops at
        // the first message from the end that does not fit, which the window then holds.
        let mut window = 64usize;
        loop {
            let candidates = self.get_memory(&MemoryQuery {
                recent_n: Some(window),
                mark: options.mark.as_deref(),
                exclude_mark: options.exclude_mark.as_deref(),
                ..MemoryQuery::default()
            })?;
            let read = candidates.len();
            let recall = recall_tail(candidates, budget, tokenizer, options.per_message_overhead);
            if read < window || recall.messages.len() < read {
                return Ok(recall);
            }
            window = window.saturating_mul(4);
        }
    }
}
