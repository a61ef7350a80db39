//! The `Memory` trait and the values its methods take and return (spec/memory.md §5).

use std::fmt;
use std::path::PathBuf;

use mnemon_types::{Embedder, Msg};
use serde::Serialize;
use serde_json::Value;

use crate::error::MemoryError;
use crate::retrieval::{RetrievalQuery, RetrieveOptions, Retrieved};
use crate::tokens::{BudgetOptions, BudgetRecall, Tokenizer, recall_tail};

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

/// One item for [`Memory::add`]: a built message, or a JSON object in any accepted form (plain,
/// `__type`, 0.1.x; a `List` adds several).
// Items are moved into the memory; boxing messages would add an allocation per message.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum MsgInput {
    /// A message.
    Msg(Msg),
    /// A JSON message object.
    Json(Value),
}

impl From<Msg> for MsgInput {
    fn from(msg: Msg) -> Self {
        MsgInput::Msg(msg)
    }
}

impl From<Value> for MsgInput {
    fn from(value: Value) -> Self {
        MsgInput::Json(value)
    }
}

/// Options of [`Memory::add_with`].
#[derive(Debug, Clone, Default)]
pub struct AddOptions {
    /// Marks given to every newly added message.
    pub marks: Vec<String>,
}

/// What an add or load did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AddReport {
    /// How many messages were appended.
    pub added: usize,
    /// Ids skipped because they were already stored or came earlier in the batch.
    pub skipped_duplicates: Vec<String>,
}

/// What [`Memory::delete`] did. All lists are ascending and unique.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// The indices removed.
    pub deleted: Vec<usize>,
    /// The ids of the removed messages, aligned with `deleted`.
    pub deleted_ids: Vec<String>,
    /// Indices that did not name a message.
    pub skipped_invalid: Vec<usize>,
}

/// What [`Memory::delete_by_id`] and [`Memory::delete_by_mark`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeleteByIdReport {
    /// The ids removed, in memory order.
    pub deleted: Vec<String>,
    /// Requested ids that were not stored, in input order, without repeats.
    pub not_found: Vec<String>,
}

/// Where [`Memory::load`] reads messages from.
#[derive(Debug, Clone)]
pub enum LoadSource {
    /// A UTF-8 file (a leading BOM is skipped).
    Path(PathBuf),
    /// JSON text.
    Json(String),
    /// Messages.
    Messages(Vec<Msg>),
}

/// Where [`Memory::export`] writes.
#[derive(Debug, Clone)]
pub enum ExportTarget {
    /// Return clones of the messages.
    Messages,
    /// Return the export document as text.
    Json,
    /// Write the document to a file, atomically (temporary file, fsync, rename).
    File(PathBuf),
}

/// Options of [`Memory::export`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions {
    /// Write each message's marks as a last `"__marks"` key (only when it has any).
    pub include_marks: bool,
    /// The document's layout.
    pub format: ExportFormat,
}

/// The layout of an export document. [`Memory::load`] reads both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportFormat {
    /// AgentScope 0.0.x (`TemporaryMemory.export` of 0.0.4): an array of plain message
    /// objects in Python's `json.dumps(…, indent=4)` layout, non-ASCII escaped.
    #[default]
    AgentScope00,
    /// AgentScope 0.1.x (`TemporaryMemory.export` of 0.1.6, which its `TemporaryMemory.load`
    /// reads): one line of `Msg.to_dict()` objects (`__module__`, `__name__`, `id`, `name`,
    /// `role`, `content`, `metadata`, `timestamp`), non-ASCII written as is. The embedding goes
    /// into `metadata`, where 0.1.x keeps it; a `url` is written only when set; other extras
    /// follow `timestamp` (0.1.6 ignores them). Loading such a file and exporting it again in
    /// this format gives the same bytes. 0.1.6 itself accepts only the roles `system`, `user`
    /// and `assistant` and string or block-list contents; other messages are written as they
    /// are, and 0.1.6 refuses them.
    AgentScope01,
}

/// What [`Memory::export`] produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Exported {
    /// The messages.
    Messages(Vec<Msg>),
    /// The document.
    Json(String),
    /// The document was written to this file.
    File {
        /// The file.
        path: PathBuf,
        /// How many messages it holds.
        count: usize,
    },
}

/// A conversation memory: an ordered list of messages with marks, semantic recall and
/// token-budgeted recall.
///
/// Object-safe and `Send + Sync`: every method takes `&self` and locks internally. An *index* is
/// a message's 0-based position in insertion order at the time of the call. Every message
/// returned is a clone. A method that fails leaves the memory as it was.
pub trait Memory: Send + Sync {
    /// The messages selected by `query` (§5.1).
    fn get_memory(&self, query: &MemoryQuery<'_>) -> Result<Vec<Msg>, MemoryError>;

    /// The [`Msg::to_str`] lines of [`get_memory`](Self::get_memory), joined by `\n`.
    fn render(&self, query: &MemoryQuery<'_>) -> Result<String, MemoryError> {
        Ok(mnemon_types::msg::render(&self.get_memory(query)?))
    }

    /// Adds messages atomically, skipping duplicate ids (§5.2).
    fn add(&self, items: Vec<MsgInput>) -> Result<AddReport, MemoryError> {
        self.add_with(items, &AddOptions::default())
    }

    /// Adds messages atomically with marks, skipping duplicate ids.
    fn add_with(
        &self,
        items: Vec<MsgInput>,
        options: &AddOptions,
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

    /// Scores messages against `query` by embedding and returns the best (§6.2).
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

    /// The most recent messages whose [`Msg::to_str`] fits in `budget` tokens (§8).
    fn recall_within_budget(
        &self,
        budget: usize,
        tokenizer: &dyn Tokenizer,
        options: &BudgetOptions,
    ) -> Result<BudgetRecall, MemoryError> {
        let candidates = self.get_memory(&MemoryQuery {
            mark: options.mark.as_deref(),
            exclude_mark: options.exclude_mark.as_deref(),
            ..MemoryQuery::default()
        })?;
        Ok(recall_tail(
            candidates,
            budget,
            tokenizer,
            options.per_message_overhead,
        ))
    }
}
