//! Memory operations: sessions, add, get, search, marks, export and import
//! (docs/reference/rest.md#memory, docs/reference/memory.md).
//!
//! Keyword and hybrid search, forgetting and garbage collection come with issue 14: they are
//! new variants of [`SearchQuery`] and new operations here, beside the ones below.

use std::borrow::Cow;
use std::sync::Arc;

use mnemon_memory::{
    AddOptions, BudgetOptions, ExportFormat, ExportOptions, ExportTarget, Exported, HybridWeights,
    LoadSource, Memory, MemoryError, MemoryQuery, Metric, MsgInput, RetrievalQuery,
    RetrieveOptions, Scope, ScopeFilter, SearchMode, SearchRequest, ThreadSummary,
};
use mnemon_types::{Embedder, Msg};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use crate::assets::DeleteOutput;
use crate::error::OpsError;
use crate::expiry::ExpiryInput;
use crate::page;
use crate::service::Service;

/// A message as it travels: the object of docs/reference/memory.md#messages (AgentScope 0.0.x
/// layout; extras kept in order). Embeddings are left out unless asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct MessageBody(pub serde_json::Value);

impl JsonSchema for MessageBody {
    fn schema_name() -> Cow<'static, str> {
        "Msg".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        Msg::json_schema(generator)
    }
}

impl MessageBody {
    fn of(message: &Msg, include_embedding: bool) -> MessageBody {
        let mut json = message.to_json();
        if !include_embedding && let Some(object) = json.as_object_mut() {
            object.shift_remove("embedding");
        }
        MessageBody(json)
    }
}

/// A memory thread's scope, with its message count and last activity when the store reports
/// them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionBody {
    /// The session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The user id, for threads created with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The agent id, for threads created with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// How many messages the thread holds (a count the store keeps per thread). Absent when the
    /// store cannot say (a SQLite file opened read-only from before thread summaries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<u64>,
    /// When a write last changed the thread, in milliseconds since the Unix epoch. Absent as
    /// `messages` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active_ms: Option<i64>,
    /// `last_active_ms` as an RFC 3339 UTC time (`2026-11-24T00:41:07.123Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active: Option<String>,
}

impl SessionBody {
    fn of(scope: Scope, summary: Option<&ThreadSummary>) -> SessionBody {
        SessionBody {
            session_id: scope.session_id,
            user_id: scope.user_id,
            agent_id: scope.agent_id,
            messages: summary.map(|s| s.messages),
            last_active_ms: summary.map(|s| s.last_active_ms),
            last_active: summary.map(ThreadSummary::last_active_rfc3339),
        }
    }
}

/// The order of a sessions listing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionOrder {
    /// Oldest thread first ([`Service::memory_sessions_with_counts`]).
    #[default]
    Created,
    /// Most recently written first ([`Service::memory_sessions_by_activity`]).
    Activity,
}

/// Input of [`Service::memory_sessions`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionListInput {
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many sessions (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Output of [`Service::memory_sessions`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionListOutput {
    /// The namespace's threads, oldest first (by last activity, newest first, for
    /// [`Service::memory_sessions_by_activity`]).
    pub sessions: Vec<SessionBody>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Input of the operations on one session as a whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionInput {
    /// The session id.
    pub session: String,
}

/// Output of [`Service::memory_session_create`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionCreateOutput {
    /// The session id.
    pub session: String,
    /// False when the session already existed (creating is idempotent).
    pub created: bool,
}

/// Input of [`Service::memory_add`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryAddInput {
    /// The session (created by the first add). Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// The messages, in order: objects with at least `name` and `content`; `id`, `timestamp`
    /// and `role` are filled in when missing.
    pub messages: Vec<MessageBody>,
    /// Marks (tags) every added message gets.
    #[serde(default)]
    pub marks: Vec<String>,
}

/// How [`Service::memory_add_with`] adds, beyond [`MemoryAddInput`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddWith {
    /// Give every message without an `embedding` one from the service's embedder first.
    pub embed: bool,
    /// When the added messages expire.
    pub expiry: ExpiryInput,
}

/// Output of [`Service::memory_add`] and [`Service::memory_import`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryAddOutput {
    /// How many messages were appended (atomically: all of them, or an error and none).
    pub added: usize,
    /// Ids skipped because they were already stored or came earlier in the batch.
    pub skipped_duplicates: Vec<String>,
}

/// Input of [`Service::memory_get`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryGetInput {
    /// The session. Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// Only the last N messages.
    #[serde(default)]
    pub recent: Option<usize>,
    /// Only messages carrying this mark.
    #[serde(default)]
    pub mark: Option<String>,
    /// Only messages not carrying this mark.
    #[serde(default)]
    pub exclude_mark: Option<String>,
    /// Only the most recent messages that fit in this many cl100k_base tokens.
    #[serde(default)]
    pub tokens: Option<usize>,
    /// Include each message's embedding.
    #[serde(default)]
    pub include_embeddings: bool,
}

/// Output of [`Service::memory_get`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryGetOutput {
    /// The messages, oldest first.
    pub messages: Vec<MessageBody>,
    /// With `tokens`: the tokens the messages take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_count: Option<usize>,
}

/// What to search memory with. Keyword and hybrid search come with issue 14 as new variants.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SearchQuery {
    /// A query vector, used as given.
    Vector(Vec<f32>),
    /// A text, embedded by the service's embedder.
    Text(String),
}

/// How a search scores a message's embedding against the query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MetricName {
    /// Cosine similarity.
    #[default]
    Cosine,
    /// Dot product.
    Dot,
    /// Negative Euclidean distance.
    L2,
}

/// Input of [`Service::memory_search`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemorySearchInput {
    /// The session. Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// The query: `{"vector": [..]}` or `{"text": "…"}`.
    pub query: SearchQuery,
    /// How many results (default 5, at most [`MAX_TOP_K`]).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// The metric.
    #[serde(default)]
    pub metric: MetricName,
    /// Only messages carrying this mark.
    #[serde(default)]
    pub mark: Option<String>,
    /// Scan every message exactly, never through a large session's approximate recall index
    /// (docs/reference/memory.md#the-recall-index). Default false.
    #[serde(default)]
    pub exact: bool,
    /// Include each message's embedding.
    #[serde(default)]
    pub include_embeddings: bool,
}

/// One search hit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchHit {
    /// The score (larger is closer).
    pub score: f64,
    /// The message's position in the session.
    pub index: usize,
    /// The message.
    pub message: MessageBody,
}

/// Output of [`Service::memory_search`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemorySearchOutput {
    /// The hits, best first.
    pub hits: Vec<SearchHit>,
}

/// The most hits one search returns (`top_k` above it is refused: the answer would be too
/// large for one response).
pub const MAX_TOP_K: usize = 1_000;

/// Input of [`Service::memory_search_across`]: which threads, and the query.
///
/// Each scope field given must equal the thread's; a field left out matches any value (an
/// absent one included). No field at all searches every thread of the namespace. Fields are
/// compared whole (`u1` never selects `u10`'s threads). A search never leaves the namespace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemorySearchAcrossInput {
    /// Only threads of this user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Only threads of this agent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Only threads of this session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The query: `{"vector": [..]}` or `{"text": "…"}` (embedded by the service's embedder).
    pub query: SearchQuery,
    /// How many results (default 5, at most 1,000).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Only messages this metadata filter selects (docs/reference/filters.md over the fields
    /// of docs/reference/memory.md#filters: `id`, `marks`, `name`, `role`, `content`,
    /// `timestamp`, `metadata`, extra fields), applied before the top-k cut, e.g.
    /// `{"contains": {"path": "marks", "value": "pin"}}`.
    #[serde(default)]
    pub filter: Option<serde_json::Value>,
    /// `vector` (default), `keyword` or `hybrid`.
    #[serde(default)]
    pub mode: SearchModeName,
    /// The words of a keyword or hybrid search; absent: the query's text.
    #[serde(default)]
    pub keywords: Option<String>,
    /// The fusion of a hybrid search.
    #[serde(default)]
    pub hybrid: Option<HybridInput>,
    /// Include each message's embedding.
    #[serde(default)]
    pub include_embeddings: bool,
    /// Scan every selected message exactly, never through a large session's approximate recall
    /// index (docs/reference/memory.md#the-recall-index). Default false.
    #[serde(default)]
    pub exact: bool,
}

/// How a search across sessions ranks messages
/// (docs/reference/memory.md#keyword-and-hybrid-search).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchModeName {
    /// By cosine between the query's vector and each message's stored embedding: meaning, with
    /// a semantic embedder.
    #[default]
    Vector,
    /// By full-text relevance of each message's text to the words (`keywords`, else the
    /// query's text): exact words, names, ids, codes. Needs no embedder.
    Keyword,
    /// Reciprocal rank fusion of the vector and the keyword rankings (`hybrid` sets the
    /// fusion): each message scores `Σ weight / (k + rank)` over the rankings it is in.
    Hybrid,
}

/// The fusion of a hybrid search; absent fields keep their defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HybridInput {
    /// The vector ranking's weight (default 1).
    #[serde(default)]
    pub vector_weight: Option<f64>,
    /// The keyword ranking's weight (default 1).
    #[serde(default)]
    pub keyword_weight: Option<f64>,
    /// The fusion constant `k` (default 60): larger flattens the first ranks' differences.
    #[serde(default)]
    pub k: Option<f64>,
    /// How many hits of each ranking are fused (default 100, at least `top_k`).
    #[serde(default)]
    pub candidates: Option<usize>,
}

/// One hit of a search across sessions: where the message is, and how close.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScopedHit {
    /// The session id of the message's thread (absent for a thread without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The user id of the thread, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The agent id of the thread, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// The cosine with the query (larger is closer).
    pub score: f64,
    /// The message's position in its thread (0-based).
    pub index: usize,
    /// The message.
    pub message: MessageBody,
}

/// Output of [`Service::memory_search_across`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemorySearchAcrossOutput {
    /// The hits, best first (ties: lower index first within a thread, then the threads'
    /// scopes in byte order).
    pub hits: Vec<ScopedHit>,
    /// `false` when a keyword or hybrid search found more messages with its words than the
    /// 10,000 it ranks (the newest: the latest session first, each its latest message first),
    /// so an older message might have ranked higher: narrow the scope (user, agent, session)
    /// or search rarer words (docs/reference/memory.md#keyword-and-hybrid-search). Always `true` for a vector
    /// search.
    #[serde(default = "complete_by_default")]
    pub complete: bool,
}

/// An answer without `complete` (from a server before it) ranked every match.
fn complete_by_default() -> bool {
    true
}

/// Input of [`Service::memory_reembed`]: which threads (every thread of the namespace when no
/// field is given) and the batch size.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReembedInput {
    /// Only threads of this user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Only threads of this agent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Only threads of this session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Messages embedded and stored per transaction (default 256, at least 1).
    #[serde(default)]
    pub batch: Option<usize>,
}

/// Output of [`Service::memory_reembed`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReembedOutput {
    /// The model the messages were embedded with.
    pub model: String,
    /// How many messages were re-embedded (0 when every one already had the model's).
    pub reembedded: u64,
}

/// Output of [`Service::memory_reembed_at_most`]: one bounded pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReembedPassOutput {
    /// The model the messages were embedded with.
    pub model: String,
    /// How many messages this pass re-embedded and stored.
    pub reembedded: u64,
    /// How many selected messages still lack the model's embedding after this pass (0 when
    /// `complete`).
    pub remaining: u64,
    /// Whether every selected message now has the model's embedding; `false`: call again
    /// (each pass resumes where the last stopped) or run `mnemon memory reembed`.
    pub complete: bool,
}

/// An embedder that refuses, once, the batch that would take it past `max` texts: how
/// [`Service::memory_reembed_at_most`] stops the store's re-embedding between two stored
/// batches (the store commits each batch, so what was done stays done).
struct AtMost<'a> {
    inner: &'a dyn Embedder,
    max: u64,
    used: std::sync::atomic::AtomicU64,
    stopped: std::sync::atomic::AtomicBool,
}

impl Embedder for AtMost<'_> {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_types::EmbedError> {
        use std::sync::atomic::Ordering;
        let n = u64::try_from(texts.len()).unwrap_or(u64::MAX);
        let used = self.used.load(Ordering::Relaxed);
        if used.saturating_add(n) > self.max {
            self.stopped.store(true, Ordering::Relaxed);
            return Err(mnemon_types::EmbedError::new(
                self.inner.model(),
                "this pass reached its bound of messages; the rest is left for the next pass",
            ));
        }
        self.used.store(used.saturating_add(n), Ordering::Relaxed);
        self.inner.embed(texts)
    }
}

/// Input of [`Service::memory_mark`] and [`Service::memory_unmark`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MarkInput {
    /// The session. Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// The mark.
    pub mark: String,
    /// The messages' ids. For unmark, absent means every message.
    #[serde(default)]
    pub ids: Option<Vec<String>>,
}

/// Output of [`Service::memory_mark`] and [`Service::memory_unmark`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MarkOutput {
    /// How many messages gained (or lost) the mark.
    pub changed: usize,
}

/// Input of [`Service::memory_marks_of`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MessageInput {
    /// The session. Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// The message id.
    pub id: String,
}

/// Output of [`Service::memory_marks_of`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MarksOutput {
    /// The message's marks.
    pub marks: Vec<String>,
}

/// Input of [`Service::memory_delete_messages`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteMessagesInput {
    /// The session. Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// The ids of the messages to remove.
    pub ids: Vec<String>,
}

/// Output of [`Service::memory_delete_messages`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DeleteMessagesOutput {
    /// The ids removed, in memory order.
    pub deleted: Vec<String>,
    /// Requested ids that were not stored.
    pub not_found: Vec<String>,
}

/// An export layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ExportFormatName {
    /// AgentScope 0.0.x: a 4-space indented array of plain message objects.
    #[default]
    #[serde(rename = "agentscope-0.0")]
    AgentScope00,
    /// AgentScope 0.1.x: one line of `__module__`/`__name__` objects with `metadata`.
    #[serde(rename = "agentscope-0.1")]
    AgentScope01,
}

/// Input of [`Service::memory_export`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryExportInput {
    /// The session. Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// The layout.
    #[serde(default)]
    pub format: ExportFormatName,
    /// Also write each message's marks, as `"__marks"`.
    #[serde(default)]
    pub include_marks: bool,
}

/// Output of [`Service::memory_export`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryExportOutput {
    /// The export document, byte for byte what AgentScope writes.
    pub document: String,
}

/// Input of [`Service::memory_import`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryImportInput {
    /// The session (created by the import). Over HTTP it comes from the path.
    #[serde(default)]
    pub session: String,
    /// The export document (AgentScope 0.0.x array, `List` form or 0.1.x), as JSON.
    pub document: serde_json::Value,
    /// Replace the session's messages instead of appending.
    #[serde(default)]
    pub overwrite: bool,
}

/// Gives every message object without an `embedding` (absent or `null`) one from `embedder`,
/// embedding the content text as a recall does (a string as is, anything else as compact JSON),
/// in batches of at most 256. Messages that are not objects are left for the add to refuse.
fn embed_missing(embedder: &dyn Embedder, messages: &mut [MessageBody]) -> Result<(), OpsError> {
    let missing: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m.0.as_object()
                .is_some_and(|o| o.get("embedding").is_none_or(serde_json::Value::is_null))
        })
        .map(|(i, _)| i)
        .collect();
    for batch in missing.chunks(256) {
        let texts: Vec<String> = batch
            .iter()
            .filter_map(|&i| messages.get(i))
            .map(|m| match m.0.get("content") {
                Some(serde_json::Value::String(text)) => text.clone(),
                Some(other) => other.to_string(),
                None => "null".to_owned(),
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vectors = embedder.embed(&refs).map_err(|e| MemoryError::Embedder {
            model: embedder.model().to_owned(),
            detail: e.to_string(),
        })?;
        mnemon_types::check_embeddings(embedder.dimension(), refs.len(), &vectors).map_err(
            |e| MemoryError::EmbedderContract {
                model: embedder.model().to_owned(),
                detail: e.to_string(),
            },
        )?;
        for (&i, vector) in batch.iter().zip(vectors) {
            if let Some(object) = messages.get_mut(i).and_then(|m| m.0.as_object_mut()) {
                let numbers = vector
                    .into_iter()
                    .map(|x| serde_json::Value::from(f64::from(x)))
                    .collect();
                object.insert("embedding".to_owned(), serde_json::Value::Array(numbers));
            }
        }
    }
    Ok(())
}

fn check_session(session: &str) -> Result<Scope, OpsError> {
    if session.is_empty() {
        return Err(OpsError::invalid("the session id must not be empty"));
    }
    Ok(Scope::session(session))
}

impl Service {
    /// The memory of an existing session, or [`OpsError::SessionNotFound`].
    fn existing_session(&self, session: &str) -> Result<Arc<dyn Memory>, OpsError> {
        let scope = check_session(session)?;
        self.reader(scope)?
            .ok_or_else(|| OpsError::SessionNotFound {
                session: session.to_owned(),
            })
    }

    /// One page of the namespace's memory threads, oldest first: their scopes only (as the CLI
    /// and the MCP `list_sessions` tool show them; [`memory_sessions_with_counts`] adds the
    /// message counts and last activity).
    ///
    /// [`memory_sessions_with_counts`]: Self::memory_sessions_with_counts
    pub fn memory_sessions(&self, input: SessionListInput) -> Result<SessionListOutput, OpsError> {
        self.sessions_oldest_first(input, false)
    }

    /// [`memory_sessions`](Self::memory_sessions) with each thread's message count and last
    /// activity, from the summaries the store keeps per thread (no message is read or counted).
    pub fn memory_sessions_with_counts(
        &self,
        input: SessionListInput,
    ) -> Result<SessionListOutput, OpsError> {
        self.sessions_oldest_first(input, true)
    }

    /// The creation-order listing: a page of the store's, one index range read; through the
    /// whole list only for a SQLite file opened read-only from before thread summaries (which
    /// then has no counts to give).
    fn sessions_oldest_first(
        &self,
        input: SessionListInput,
        with_counts: bool,
    ) -> Result<SessionListOutput, OpsError> {
        let limit = page::limit(input.limit)?;
        let after = input.cursor.as_deref().map(page::decode).transpose()?;
        let found = self
            .stores()
            .threads_page(limit, after.as_deref())
            .map_err(page_error)?;
        if let Some(found) = found {
            return Ok(sessions_of(found, with_counts));
        }
        let all: Vec<SessionBody> = self
            .stores()
            .threads()?
            .into_iter()
            .map(|scope| SessionBody::of(scope, None))
            .collect();
        // The key of a thread: its three ids, which together are unique.
        let key = |s: &SessionBody| {
            serde_json::to_string(&[&s.user_id, &s.agent_id, &s.session_id]).unwrap_or_default()
        };
        let (sessions, next_cursor) = page::page(all, input.cursor.as_deref(), limit, false, key)?;
        Ok(SessionListOutput {
            sessions,
            next_cursor,
        })
    }

    /// One page of the namespace's threads with their message counts and last activity, the
    /// most recently written first: one index range read per page, never a count of messages
    /// (docs/reference/memory.md#thread-summaries). A thread written while pages are read moves
    /// to the front, so later pages do not list it again.
    pub fn memory_sessions_by_activity(
        &self,
        input: SessionListInput,
    ) -> Result<SessionListOutput, OpsError> {
        let limit = page::limit(input.limit)?;
        let after = input.cursor.as_deref().map(page::decode).transpose()?;
        let found = self
            .stores()
            .thread_summaries(limit, after.as_deref())
            .map_err(page_error)?;
        Ok(sessions_of(found, true))
    }

    /// Creates a session if it does not exist.
    pub fn memory_session_create(
        &self,
        input: SessionInput,
    ) -> Result<SessionCreateOutput, OpsError> {
        let scope = check_session(&input.session)?;
        let existed = self.stores().existing_memory(scope.clone())?.is_some();
        if !existed {
            self.stores().memory(scope)?;
        }
        Ok(SessionCreateOutput {
            session: input.session,
            created: !existed,
        })
    }

    /// Deletes a session with its messages and marks.
    pub fn memory_session_delete(&self, input: SessionInput) -> Result<DeleteOutput, OpsError> {
        let scope = check_session(&input.session)?;
        if self.stores().drop_thread(&scope)? {
            Ok(DeleteOutput { deleted: true })
        } else {
            Err(OpsError::SessionNotFound {
                session: input.session,
            })
        }
    }

    /// Appends messages to a session (creating it), atomically.
    pub fn memory_add(&self, input: MemoryAddInput) -> Result<MemoryAddOutput, OpsError> {
        self.memory_add_with(input, &AddWith::default())
    }

    /// A session's messages: all, the last N, by mark, or the newest within a token budget.
    pub fn memory_get(&self, input: MemoryGetInput) -> Result<MemoryGetOutput, OpsError> {
        let memory = self.existing_session(&input.session)?;
        let (messages, token_count) = match input.tokens {
            Some(budget) => {
                let options = BudgetOptions {
                    mark: input.mark.clone(),
                    exclude_mark: input.exclude_mark.clone(),
                    ..BudgetOptions::default()
                };
                let mut recall = memory.recall_within_budget(budget, self.tokenizer(), &options)?;
                // With `recent` too, only the last `recent` of the budget's messages are
                // returned, and the count is theirs: the total of the whole recall would
                // count messages the answer does not hold.
                if let Some(n) = input.recent {
                    let drop = recall.messages.len().saturating_sub(n);
                    recall.messages.drain(..drop);
                    let drop = recall.counts.len().saturating_sub(n);
                    recall.counts.drain(..drop);
                }
                let total = recall.counts.iter().sum();
                (recall.messages, Some(total))
            }
            None if input.recent.is_none() => {
                // The whole session, read as it streams by and stopped at the result limit:
                // reading it all first held a thread of any size in memory before the
                // answer was found too large.
                let max = self.max_result_bytes();
                let mut counter = crate::json_size::Counter::upto(max);
                let mut messages = Vec::new();
                let query = MemoryQuery {
                    mark: input.mark.as_deref(),
                    exclude_mark: input.exclude_mark.as_deref(),
                    ..MemoryQuery::default()
                };
                memory.for_each_message(&query, &mut |message| {
                    let body = MessageBody::of(&message, input.include_embeddings);
                    // Each body's JSON, a byte for its comma: the array's own size within 2.
                    let fits = max == usize::MAX
                        || (serde_json::to_writer(&mut counter, &body).is_ok()
                            && std::io::Write::write_all(&mut counter, b",").is_ok());
                    if fits {
                        messages.push(body);
                    }
                    fits
                })?;
                if counter.over() {
                    return Err(OpsError::MessagesTooLarge { max });
                }
                self.within_result_limit(&messages)?;
                return Ok(MemoryGetOutput {
                    messages,
                    token_count: None,
                });
            }
            None => (
                memory.get_memory(&MemoryQuery {
                    recent_n: input.recent,
                    mark: input.mark.as_deref(),
                    exclude_mark: input.exclude_mark.as_deref(),
                    ..MemoryQuery::default()
                })?,
                None,
            ),
        };
        let messages: Vec<MessageBody> = messages
            .iter()
            .map(|m| MessageBody::of(m, input.include_embeddings))
            .collect();
        self.within_result_limit(&messages)?;
        Ok(MemoryGetOutput {
            messages,
            token_count,
        })
    }

    /// Refuses `value` when its JSON would take more than the result limit: a session's
    /// messages (with their embeddings, when asked) have no bound of their own, and a transport
    /// writes the whole answer before sending it. Measured by writing it to a counter, which
    /// stops at the limit, so the check holds no copy.
    fn within_result_limit(&self, value: &impl serde::Serialize) -> Result<(), OpsError> {
        self.within_result_limit_or(value, |max| OpsError::MessagesTooLarge { max })
    }

    /// [`within_result_limit`](Self::within_result_limit), refusing with `too_large`'s error.
    fn within_result_limit_or(
        &self,
        value: &impl serde::Serialize,
        too_large: fn(usize) -> OpsError,
    ) -> Result<(), OpsError> {
        let max = self.max_result_bytes();
        if max == usize::MAX {
            return Ok(());
        }
        let mut counter = crate::json_size::Counter::upto(max);
        match serde_json::to_writer(&mut counter, value) {
            Ok(()) => Ok(()),
            Err(_) if counter.over() => Err(too_large(max)),
            Err(e) => Err(OpsError::Unwritable {
                detail: e.to_string(),
            }),
        }
    }

    /// The messages closest to a vector or a text, by embedding.
    ///
    /// A `top_k` above [`MAX_TOP_K`] is refused (`invalid_input`), and an answer whose JSON
    /// would pass [`max_result_bytes`](Service::max_result_bytes) is refused
    /// ([`OpsError::HitsTooLarge`], `result_too_large`), as for
    /// [`memory_get`](Self::memory_get).
    pub fn memory_search(&self, input: MemorySearchInput) -> Result<MemorySearchOutput, OpsError> {
        // The bound of a search across sessions holds here too: a larger top_k is refused
        // before anything is read, rather than built and then found too large.
        let top_k = input.top_k.unwrap_or(5);
        if top_k > MAX_TOP_K {
            return Err(OpsError::invalid(format!(
                "top_k is {top_k}; ask for at most {MAX_TOP_K} hits"
            )));
        }
        let memory = self.existing_session(&input.session)?;
        let query = match input.query {
            SearchQuery::Vector(vector) => RetrievalQuery::Vector(finite(vector)?),
            SearchQuery::Text(text) => {
                self.require_embedder()?;
                RetrievalQuery::Text(text)
            }
        };
        let options = RetrieveOptions {
            metric: match input.metric {
                MetricName::Cosine => Metric::Cosine,
                MetricName::Dot => Metric::Dot,
                MetricName::L2 => Metric::NegEuclidean,
            },
            top_k: Some(top_k),
            preserve_order: false,
            mark: input.mark,
            exact: input.exact,
            // Only asked-for embeddings are rebuilt as JSON (most of a small recall's cost).
            with_embeddings: input.include_embeddings,
        };
        let hits = memory.retrieve_by_embedding(query, &options, self.embedder())?;
        let output = MemorySearchOutput {
            hits: hits
                .into_iter()
                .map(|hit| SearchHit {
                    score: hit.score,
                    index: hit.index,
                    message: MessageBody::of(&hit.message, input.include_embeddings),
                })
                .collect(),
        };
        // Hits are whole messages (with their embeddings, when asked), as `memory_get`'s are:
        // the same limit on the answer's JSON.
        self.within_result_limit_or(&output, |max| OpsError::HitsTooLarge { max })?;
        Ok(output)
    }

    /// [`memory_add`](Self::memory_add), after giving every message without an `embedding` one
    /// made by the service's embedder from its content text (the text a recall embeds), so that
    /// a search across sessions, which never embeds stored messages, finds them. Without an
    /// embedder this is `memory_add`.
    pub fn memory_add_embedded(&self, input: MemoryAddInput) -> Result<MemoryAddOutput, OpsError> {
        self.memory_add_with(
            input,
            &AddWith {
                embed: true,
                expiry: ExpiryInput::default(),
            },
        )
    }

    /// [`memory_add`](Self::memory_add) with embedding on the way in (as
    /// [`memory_add_embedded`](Self::memory_add_embedded)) and an expiry for the added
    /// messages: from their deadline on they are invisible to every read, and [`Service::gc`]
    /// removes them.
    pub fn memory_add_with(
        &self,
        mut input: MemoryAddInput,
        with: &AddWith,
    ) -> Result<MemoryAddOutput, OpsError> {
        let expiry = with.expiry.to_expiry()?;
        // The input is checked before any text is embedded: a remote embedder's calls cost
        // money, and an input error must not wait behind (or hide behind) its failure.
        let scope = check_session(&input.session)?;
        for mark in &input.marks {
            mnemon_memory::validate_mark(mark)?;
        }
        check_embedding_range(&input.messages)?;
        if with.embed && self.embedder().is_some() {
            mnemon_memory::check_messages(input.messages.iter().map(|m| &m.0))?;
        }
        // The model is recorded when every embedding of the add is the embedder's: then a later
        // recall with another model is refused instead of mixing scores.
        let mut model = None;
        if with.embed
            && let Some(embedder) = self.embedder()
        {
            let all_missing = input
                .messages
                .iter()
                .all(|m| m.0.get("embedding").is_none_or(serde_json::Value::is_null));
            embed_missing(embedder, &mut input.messages)?;
            if all_missing {
                model = Some(embedder.model().to_owned());
            }
        }
        let memory = self.writer(scope.clone())?;
        let items = input
            .messages
            .into_iter()
            .map(|m| MsgInput::Json(m.0))
            .collect();
        // The memory store is gaining options (the embedding model): the rest keep their
        // defaults.
        #[allow(clippy::needless_update)]
        let options = AddOptions {
            marks: input.marks,
            expiry,
            ..AddOptions::default()
        };
        let report = match &model {
            Some(model) => memory.add_with_model(items, &options, model)?,
            None => memory.add_with(items, &options)?,
        };
        if !matches!(self.stores().backend(), crate::Backend::Sqlite) {
            // The kept handle's mirror is current after its own add: its size reads only the
            // thread's row.
            self.release_if_large(&scope, memory.size()?);
        }
        Ok(MemoryAddOutput {
            added: report.added,
            skipped_duplicates: report.skipped_duplicates,
        })
    }

    /// Search across sessions (docs/reference/memory.md#search-across-sessions): the messages
    /// closest by cosine to a vector or a text among every thread of the namespace that the
    /// scope fields select, in one store query. Messages without an embedding are skipped.
    pub fn memory_search_across(
        &self,
        input: MemorySearchAcrossInput,
    ) -> Result<MemorySearchAcrossOutput, OpsError> {
        let top_k = input.top_k.unwrap_or(5);
        if top_k > MAX_TOP_K {
            return Err(OpsError::invalid(format!(
                "top_k is {top_k}; ask for at most {MAX_TOP_K} hits"
            )));
        }
        let within = ScopeFilter {
            user_id: input.user_id,
            agent_id: input.agent_id,
            session_id: input.session_id,
        };
        for (field, value) in [
            ("user_id", &within.user_id),
            ("agent_id", &within.agent_id),
            ("session_id", &within.session_id),
        ] {
            if value.as_deref() == Some("") {
                return Err(OpsError::invalid(format!(
                    "{field} must not be empty: leave it out to search every {}",
                    field.trim_end_matches("_id")
                )));
            }
        }
        let words = match (&input.keywords, &input.query) {
            (Some(words), _) => Some(words.clone()),
            (None, SearchQuery::Text(text)) => Some(text.clone()),
            (None, _) => None,
        };
        let mode = match input.mode {
            SearchModeName::Vector => SearchMode::Vector,
            SearchModeName::Keyword | SearchModeName::Hybrid => {
                let Some(text) = words else {
                    return Err(OpsError::invalid(
                        "a keyword or hybrid search needs words: give the query as text, or \
                         keywords",
                    ));
                };
                if input.mode == SearchModeName::Keyword {
                    SearchMode::Keyword { text }
                } else {
                    let fusion = input.hybrid.unwrap_or_default();
                    let defaults = HybridWeights::default();
                    SearchMode::Hybrid {
                        text,
                        weights: HybridWeights {
                            vector: fusion.vector_weight.unwrap_or(defaults.vector),
                            keyword: fusion.keyword_weight.unwrap_or(defaults.keyword),
                            k: fusion.k.unwrap_or(defaults.k),
                            candidates: fusion.candidates.unwrap_or(defaults.candidates),
                        },
                    }
                }
            }
        };
        let query = match input.query {
            SearchQuery::Vector(vector) => RetrievalQuery::Vector(finite(vector)?),
            SearchQuery::Text(text) => {
                // A keyword search never embeds the query, nor a hybrid one whose vector
                // ranking is left out (weight 0).
                let embeds = match &mode {
                    SearchMode::Keyword { .. } => false,
                    SearchMode::Hybrid { weights, .. } => weights.vector > 0.0,
                    _ => true,
                };
                if embeds {
                    self.require_embedder()?;
                }
                RetrievalQuery::Text(text)
            }
        };
        let mut request = SearchRequest::new(within, query, top_k);
        request.mode = mode;
        request.exact = input.exact;
        if let Some(filter) = crate::expiry::parse_filter(input.filter.as_ref())? {
            request = request.with_filter(filter);
        }
        let results = self.stores().search_memory(&request, self.embedder())?;
        let output = MemorySearchAcrossOutput {
            complete: results.complete,
            hits: results
                .hits
                .into_iter()
                .map(|hit| ScopedHit {
                    session_id: hit.scope.session_id,
                    user_id: hit.scope.user_id,
                    agent_id: hit.scope.agent_id,
                    score: hit.score,
                    index: hit.index,
                    message: MessageBody::of(&hit.message, input.include_embeddings),
                })
                .collect(),
        };
        // The same limit on the answer's JSON as a session's search.
        self.within_result_limit_or(&output, |max| OpsError::HitsTooLarge { max })?;
        Ok(output)
    }

    /// Re-embeds, with the service's embedder, every message of the selected threads whose
    /// embedding was not made by its model (none, another model, or one of unknown origin), in
    /// batches; resumable after a kill (the next run picks only what is still missing).
    /// `progress(done, total)` follows every stored batch.
    pub fn memory_reembed(
        &self,
        input: ReembedInput,
        progress: impl FnMut(u64, u64),
    ) -> Result<ReembedOutput, OpsError> {
        let embedder = self.require_embedder()?;
        let batch = input.batch.unwrap_or(256);
        if batch == 0 {
            return Err(OpsError::invalid("batch must be at least 1"));
        }
        let within = ScopeFilter {
            user_id: input.user_id,
            agent_id: input.agent_id,
            session_id: input.session_id,
        };
        let reembedded = self
            .stores()
            .reembed_memory(&within, embedder, batch, progress)?;
        Ok(ReembedOutput {
            model: embedder.model().to_owned(),
            reembedded,
        })
    }

    /// [`memory_reembed`](Self::memory_reembed) that stops after at most `max` messages (at
    /// least 1; the batch shrinks to `max` when larger), between two stored batches: a bounded
    /// pass for a request that must answer in time (`POST /v1/memory/reembed`). The answer says
    /// how many messages are left; another pass resumes there.
    pub fn memory_reembed_at_most(
        &self,
        mut input: ReembedInput,
        max: u64,
    ) -> Result<ReembedPassOutput, OpsError> {
        let embedder = self.require_embedder()?;
        if max == 0 {
            return Err(OpsError::invalid(
                "a re-embedding pass needs a bound of at least 1",
            ));
        }
        let batch = input.batch.unwrap_or(256);
        input.batch = Some(batch.min(usize::try_from(max).unwrap_or(usize::MAX)));
        let bounded = AtMost {
            inner: embedder,
            max,
            used: std::sync::atomic::AtomicU64::new(0),
            stopped: std::sync::atomic::AtomicBool::new(false),
        };
        let mut seen = (0u64, 0u64);
        let within = ScopeFilter {
            user_id: input.user_id,
            agent_id: input.agent_id,
            session_id: input.session_id,
        };
        let batch = input.batch.unwrap_or(1);
        if batch == 0 {
            return Err(OpsError::invalid("batch must be at least 1"));
        }
        let result = self
            .stores()
            .reembed_memory(&within, &bounded, batch, |done, total| seen = (done, total));
        let model = embedder.model().to_owned();
        match result {
            Ok(reembedded) => Ok(ReembedPassOutput {
                model,
                reembedded,
                remaining: 0,
                complete: true,
            }),
            Err(_) if bounded.stopped.load(std::sync::atomic::Ordering::Relaxed) => {
                let (done, total) = seen;
                Ok(ReembedPassOutput {
                    model,
                    reembedded: done,
                    remaining: total.saturating_sub(done),
                    complete: false,
                })
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Puts a mark on messages.
    pub fn memory_mark(&self, input: MarkInput) -> Result<MarkOutput, OpsError> {
        let memory = self.existing_session(&input.session)?;
        let ids = input.ids.unwrap_or_default();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let changed = memory.mark(&ids, &input.mark)?;
        Ok(MarkOutput { changed })
    }

    /// Takes a mark off messages (off every message when no ids are given).
    pub fn memory_unmark(&self, input: MarkInput) -> Result<MarkOutput, OpsError> {
        let memory = self.existing_session(&input.session)?;
        let ids: Option<Vec<&str>> = input
            .ids
            .as_ref()
            .map(|ids| ids.iter().map(String::as_str).collect());
        let changed = memory.unmark(ids.as_deref(), &input.mark)?;
        Ok(MarkOutput { changed })
    }

    /// A message's marks.
    pub fn memory_marks_of(&self, input: MessageInput) -> Result<MarksOutput, OpsError> {
        let memory = self.existing_session(&input.session)?;
        let marks = memory
            .marks_of(&input.id)?
            .ok_or_else(|| OpsError::MessageNotFound {
                session: input.session,
                id: input.id,
            })?;
        Ok(MarksOutput { marks })
    }

    /// Removes messages by id.
    pub fn memory_delete_messages(
        &self,
        input: DeleteMessagesInput,
    ) -> Result<DeleteMessagesOutput, OpsError> {
        let memory = self.existing_session(&input.session)?;
        let ids: Vec<&str> = input.ids.iter().map(String::as_str).collect();
        let report = memory.delete_by_id(&ids)?;
        Ok(DeleteMessagesOutput {
            deleted: report.deleted,
            not_found: report.not_found,
        })
    }

    /// A session as an AgentScope export document.
    pub fn memory_export(&self, input: MemoryExportInput) -> Result<MemoryExportOutput, OpsError> {
        let memory = self.existing_session(&input.session)?;
        let options = ExportOptions {
            include_marks: input.include_marks,
            format: match input.format {
                ExportFormatName::AgentScope00 => ExportFormat::AgentScope00,
                ExportFormatName::AgentScope01 => ExportFormat::AgentScope01,
            },
        };
        match memory.export(ExportTarget::Json, &options)? {
            Exported::Json(document) => {
                self.within_result_limit(&document)?;
                Ok(MemoryExportOutput { document })
            }
            _ => Err(OpsError::invalid(
                "the memory did not export a JSON document",
            )),
        }
    }

    /// Loads an export document into a session (creating it), atomically.
    pub fn memory_import(&self, input: MemoryImportInput) -> Result<MemoryAddOutput, OpsError> {
        let scope = check_session(&input.session)?;
        let memory = self.stores().memory_created_on_write(scope)?;
        let text = serde_json::to_string(&input.document)
            .map_err(|e| OpsError::invalid(format!("the document cannot be read: {e}")))?;
        let report = memory.load(LoadSource::Json(text), input.overwrite)?;
        Ok(MemoryAddOutput {
            added: report.added,
            skipped_duplicates: report.skipped_duplicates,
        })
    }
}

/// Refuses a message whose `embedding` holds a number beyond `f32`'s range (`1e39`): every
/// store scores the embedding as `f32`s, where it would be infinite and score every recall
/// NaN. (Checked here, where messages enter over REST, MCP and the CLI, not when stored
/// messages are read back: a message stored so before stays readable.)
fn check_embedding_range(messages: &[MessageBody]) -> Result<(), OpsError> {
    for (i, message) in messages.iter().enumerate() {
        let Some(serde_json::Value::Array(numbers)) = message.0.get("embedding") else {
            continue;
        };
        let beyond = numbers
            .iter()
            .position(|n| n.as_f64().is_some_and(|x| !(x as f32).is_finite()));
        if let Some(position) = beyond {
            return Err(OpsError::invalid(format!(
                "message {i}: its embedding's number at position {position} is beyond the \
                 range of a 32-bit float (about ±3.4e38); scale the vector (cosine ignores its \
                 length)"
            )));
        }
    }
    Ok(())
}

/// A store's page of threads as a listing's answer, with counts when `with_counts`.
fn sessions_of(found: mnemon_memory::ThreadPage, with_counts: bool) -> SessionListOutput {
    SessionListOutput {
        sessions: found
            .threads
            .into_iter()
            .map(|summary| SessionBody::of(summary.scope.clone(), with_counts.then_some(&summary)))
            .collect(),
        next_cursor: found.next.as_deref().map(page::encode),
    }
}

/// A store's error reading a page of threads: its cursor refusal is the listing's.
fn page_error(error: MemoryError) -> OpsError {
    match error {
        MemoryError::InvalidCursor { .. } => OpsError::InvalidCursor,
        other => other.into(),
    }
}

/// `vector`, if every number of it is finite. A JSON number past `f32`'s range (about
/// 3.4e38) reads as an infinite `f32`, which would score every message NaN.
fn finite(vector: Vec<f32>) -> Result<Vec<f32>, OpsError> {
    match vector.iter().position(|x| !x.is_finite()) {
        None => Ok(vector),
        Some(position) => Err(OpsError::Memory(MemoryError::InvalidQuery {
            reason: format!(
                "the query vector's number at position {position} is beyond the range of a \
                 32-bit float (about ±3.4e38); scale the vector (cosine ignores its length)"
            ),
        })),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::stores::Stores;

    /// Every message of `session`, without embeddings.
    pub(crate) fn every_message(session: &str) -> MemoryGetInput {
        MemoryGetInput {
            session: session.into(),
            recent: None,
            mark: None,
            exclude_mark: None,
            tokens: None,
            include_embeddings: false,
        }
    }

    fn add(service: &Service, session: &str, n: usize) {
        service
            .memory_add(MemoryAddInput {
                session: session.into(),
                messages: (0..n)
                    .map(|i| {
                        MessageBody(serde_json::json!({"name": "u", "content": format!("{i}")}))
                    })
                    .collect(),
                marks: vec![],
            })
            .unwrap();
        // Apart in time, so last activity orders them.
        std::thread::sleep(std::time::Duration::from_millis(5));
    }

    /// A session's messages and its export answer within the result limit, or are refused
    /// with advice, rather than written whole whatever their size.
    #[test]
    fn messages_and_exports_past_the_result_limit_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap()).with_max_result_bytes(2_000);
        add(&service, "s", 100);
        let get = |recent: Option<usize>| {
            service.memory_get(MemoryGetInput {
                recent,
                ..every_message("s")
            })
        };
        let refused = get(None).unwrap_err();
        assert_eq!(refused.code(), "result_too_large", "{refused}");
        assert_eq!(refused.kind(), crate::ErrorKind::BadRequest);
        assert!(refused.to_string().contains("recent"), "{refused}");
        assert_eq!(get(Some(3)).unwrap().messages.len(), 3);
        let export = service.memory_export(MemoryExportInput {
            session: "s".into(),
            include_marks: false,
            format: ExportFormatName::AgentScope01,
        });
        assert_eq!(export.unwrap_err().code(), "result_too_large");
        // Under the default limit the whole session answers.
        let whole = Service::new(Stores::open(dir.path()).unwrap());
        assert_eq!(
            whole.memory_get(every_message("s")).unwrap().messages.len(),
            100
        );
    }

    /// `tokens` with `recent`: the count is the tokens of the messages returned (the last
    /// `recent` of the budget's), not of every message the budget held.
    #[test]
    fn a_token_count_cut_by_recent_counts_only_the_messages_returned() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap());
        let say = |session: &str, texts: &[&str]| {
            service
                .memory_add(MemoryAddInput {
                    session: session.into(),
                    messages: texts
                        .iter()
                        .map(|t| MessageBody(serde_json::json!({"name": "u", "content": t})))
                        .collect(),
                    marks: vec![],
                })
                .unwrap();
        };
        let texts = [
            "a long first message about the harbour and its ferries",
            "the second one, also rather long, about the tides",
            "third",
            "fourth and last",
        ];
        say("all", &texts);
        // The same last two messages alone: what the cut answer must count.
        say("tail", &texts[2..]);
        let get = |session: &str, recent: Option<usize>| {
            service
                .memory_get(MemoryGetInput {
                    recent,
                    tokens: Some(100_000),
                    ..every_message(session)
                })
                .unwrap()
        };
        let whole = get("all", None);
        let cut = get("all", Some(2));
        let tail = get("tail", None);
        let contents = |got: &MemoryGetOutput| -> Vec<serde_json::Value> {
            got.messages
                .iter()
                .map(|m| m.0["content"].clone())
                .collect()
        };
        assert_eq!(contents(&cut), contents(&tail));
        assert_eq!(cut.token_count, tail.token_count);
        assert!(cut.token_count < whole.token_count, "{cut:?} {whole:?}");
        // A cut past the budget's messages leaves them all, and their whole count.
        assert_eq!(get("all", Some(10)), whole);
    }

    /// An embedder that counts its calls (a remote one costs money for each).
    struct CountingEmbedder(std::sync::atomic::AtomicUsize);

    impl mnemon_types::Embedder for CountingEmbedder {
        fn model(&self) -> &str {
            "counting"
        }
        fn dimension(&self) -> usize {
            2
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_types::EmbedError> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(texts.iter().map(|_| vec![1.0, 0.0]).collect())
        }
    }

    /// An add's session and marks are checked before its texts are embedded: an invalid input
    /// used to pay for the embedder's calls first (and an embedder failure hid the input error).
    #[test]
    fn an_add_is_checked_before_anything_is_embedded() {
        let dir = tempfile::tempdir().unwrap();
        let embedder = std::sync::Arc::new(CountingEmbedder(Default::default()));
        let service =
            Service::new(crate::Stores::open(dir.path()).unwrap()).with_embedder(embedder.clone());
        let with = AddWith {
            embed: true,
            ..AddWith::default()
        };
        let message = || MessageBody(serde_json::json!({"name": "u", "content": "hello"}));
        let nameless = || MessageBody(serde_json::json!({"content": "hello"}));
        for (session, messages, marks) in [
            ("", vec![message()], vec![]),
            ("s", vec![message()], vec![String::new()]),
            ("s", vec![message(), nameless()], vec![]),
            (
                "s",
                vec![message(), MessageBody(serde_json::json!(7))],
                vec![],
            ),
        ] {
            let refused = service
                .memory_add_with(
                    MemoryAddInput {
                        session: session.into(),
                        messages,
                        marks,
                    },
                    &with,
                )
                .unwrap_err();
            assert!(refused.kind() != crate::ErrorKind::Unavailable, "{refused}");
        }
        assert_eq!(embedder.0.load(std::sync::atomic::Ordering::SeqCst), 0);
        service
            .memory_add_with(
                MemoryAddInput {
                    session: "s".into(),
                    messages: vec![message()],
                    marks: vec![],
                },
                &with,
            )
            .unwrap();
        assert_eq!(embedder.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// Adds `n` messages with 3-dimensional embeddings to session `s`.
    fn add_embedded(service: &Service, n: u32) {
        service
            .memory_add(MemoryAddInput {
                session: "s".into(),
                messages: (0..n)
                    .map(|i| {
                        MessageBody(serde_json::json!({
                            "name": "u",
                            "content": format!("message {i}"),
                            "embedding": [1.0, f64::from(i) / 100.0, 0.5],
                        }))
                    })
                    .collect(),
                marks: vec![],
            })
            .unwrap();
    }

    /// A session's search is bounded as a search across sessions is (`top_k` at most
    /// [`MAX_TOP_K`]) and its answer as `memory_get`'s is (the result limit).
    #[test]
    fn a_session_search_keeps_the_top_k_and_result_limits() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap()).with_max_result_bytes(2_000);
        add_embedded(&service, 100);
        let search = |service: &Service, top_k: Option<usize>| {
            service.memory_search(MemorySearchInput {
                session: "s".into(),
                query: SearchQuery::Vector(vec![1.0, 0.0, 0.0]),
                top_k,
                metric: MetricName::Cosine,
                mark: None,
                exact: false,
                include_embeddings: true,
            })
        };
        let refused = search(&service, Some(MAX_TOP_K + 1)).unwrap_err();
        assert_eq!(refused.code(), "invalid_input", "{refused}");
        assert!(refused.to_string().contains("at most 1000"), "{refused}");
        let refused = search(&service, Some(100)).unwrap_err();
        assert_eq!(refused.code(), "result_too_large", "{refused}");
        assert_eq!(refused.kind(), crate::ErrorKind::BadRequest);
        // The advice names what a search takes (not `recent` or `tokens`).
        assert!(refused.to_string().contains("top_k"), "{refused}");
        assert_eq!(search(&service, Some(3)).unwrap().hits.len(), 3);
        // Under the default limit the same search answers whole.
        let whole = Service::new(Stores::open(dir.path()).unwrap());
        assert_eq!(search(&whole, Some(100)).unwrap().hits.len(), 100);
        assert_eq!(search(&whole, Some(MAX_TOP_K)).unwrap().hits.len(), 100);
    }

    /// A search across sessions is bounded by the result limit as a session's search is:
    /// before, its answer was built and sent whatever its size.
    #[test]
    fn a_search_across_sessions_keeps_the_result_limit() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap()).with_max_result_bytes(2_000);
        add_embedded(&service, 100);
        let search = |service: &Service, top_k: usize| {
            service.memory_search_across(MemorySearchAcrossInput {
                user_id: None,
                agent_id: None,
                session_id: None,
                query: SearchQuery::Vector(vec![1.0, 0.0, 0.0]),
                top_k: Some(top_k),
                filter: None,
                mode: SearchModeName::Vector,
                keywords: None,
                hybrid: None,
                include_embeddings: true,
                exact: false,
            })
        };
        let refused = search(&service, 100).unwrap_err();
        assert_eq!(refused.code(), "result_too_large", "{refused}");
        assert!(refused.to_string().contains("top_k"), "{refused}");
        assert_eq!(search(&service, 3).unwrap().hits.len(), 3);
    }

    /// An embedding with a number past `f32`'s range is refused when added (it would score
    /// every recall NaN); nothing is stored.
    #[test]
    fn an_embedding_past_f32_range_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap());
        let refused = service
            .memory_add(MemoryAddInput {
                session: "s".into(),
                messages: vec![
                    MessageBody(serde_json::json!({"name": "u", "content": "fine", "embedding": [1.0, 0.5]})),
                    MessageBody(serde_json::json!({"name": "u", "content": "huge", "embedding": [1.0, 1e39]})),
                ],
                marks: vec![],
            })
            .unwrap_err();
        assert_eq!(refused.code(), "invalid_input", "{refused}");
        assert!(
            refused.to_string().contains("message 1") && refused.to_string().contains("position 1"),
            "{refused}"
        );
        assert!(
            service
                .stores()
                .existing_memory(Scope::session("s"))
                .unwrap()
                .is_none()
        );
    }

    /// A JSON number past `f32`'s range reads as an infinite `f32`: such a query scored every
    /// message NaN (`"score": null` in the answer). Both searches refuse it, naming where.
    #[test]
    fn a_query_vector_with_an_infinite_number_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap());
        add(&service, "s", 3);
        let input: MemorySearchInput = serde_json::from_value(serde_json::json!({
            "session": "s",
            "query": {"vector": [1.0, 1e39, 0.5]},
        }))
        .unwrap();
        let refused = service.memory_search(input).unwrap_err();
        assert_eq!(refused.code(), "invalid_query", "{refused}");
        assert!(refused.to_string().contains("position 1"), "{refused}");
        let input: MemorySearchAcrossInput = serde_json::from_value(serde_json::json!({
            "query": {"vector": [-1e39, 1.0, 0.5]},
        }))
        .unwrap();
        let refused = service.memory_search_across(input).unwrap_err();
        assert_eq!(refused.code(), "invalid_query", "{refused}");
        assert!(refused.to_string().contains("position 0"), "{refused}");
    }

    #[test]
    fn a_bounded_reembed_pass_stops_between_batches_and_the_next_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let embedder = mnemon_embed::embedder_for_model("mnemon:hashing-v1-64").unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap())
            .with_embedder(std::sync::Arc::from(embedder));
        // memory_add stores no embedding.
        add(&service, "s", 5);
        let input = ReembedInput {
            batch: Some(2),
            ..ReembedInput::default()
        };
        let first = service.memory_reembed_at_most(input.clone(), 3).unwrap();
        assert_eq!(
            (first.reembedded, first.remaining, first.complete),
            (2, 3, false),
            "{first:?}"
        );
        let second = service.memory_reembed_at_most(input.clone(), 100).unwrap();
        assert_eq!(
            (second.reembedded, second.remaining, second.complete),
            (3, 0, true),
            "{second:?}"
        );
        let third = service.memory_reembed_at_most(input, 100).unwrap();
        assert_eq!((third.reembedded, third.complete), (0, true), "{third:?}");
        assert!(matches!(
            service.memory_reembed_at_most(ReembedInput::default(), 0),
            Err(OpsError::InvalidInput { .. })
        ));
    }

    fn ids(out: &SessionListOutput) -> Vec<&str> {
        out.sessions
            .iter()
            .filter_map(|s| s.session_id.as_deref())
            .collect()
    }

    fn embedded_service(dir: &std::path::Path, namespace: &str) -> Service {
        let options = crate::OpenOptions::default().with_namespace(namespace.parse().unwrap());
        let embedder = mnemon_embed::HashingEmbedder::from_model_name("mnemon:hashing-v1-64")
            .expect("a hashing model");
        Service::new(Stores::open_with(dir, &options).unwrap())
            .with_embedder(std::sync::Arc::new(embedder))
    }

    fn scoped(user: &str, session: &str) -> Scope {
        Scope {
            user_id: Some(user.into()),
            session_id: Some(session.into()),
            ..Scope::default()
        }
    }

    #[test]
    fn search_across_sessions_selects_scopes_and_stays_in_its_namespace() {
        let dir = tempfile::tempdir().unwrap();
        let acme = embedded_service(dir.path(), "acme");
        let globex = embedded_service(dir.path(), "globex");
        let say = |service: &Service, scope: Scope, id: &str, text: &str| {
            let mut messages = vec![MessageBody(
                serde_json::json!({"id": id, "name": "u", "content": text}),
            )];
            embed_missing(service.require_embedder().unwrap(), &mut messages).unwrap();
            service
                .stores()
                .memory_created_on_write(scope)
                .unwrap()
                .add(messages.into_iter().map(|m| m.0.into()).collect())
                .unwrap();
        };
        say(&acme, scoped("u1", "s1"), "a", "the ferry leaves at noon");
        say(&acme, scoped("u1", "s2"), "b", "ferry tickets are sold out");
        say(&acme, scoped("u10", "s3"), "c", "the ferry leaves at noon");
        say(&globex, scoped("u1", "s1"), "g", "the ferry leaves at noon");
        // Added through the operation: embedded on the way in.
        acme.memory_add_embedded(MemoryAddInput {
            session: "plain".into(),
            messages: vec![MessageBody(
                serde_json::json!({"id": "p", "name": "u", "content": "ferry at noon"}),
            )],
            marks: vec![],
        })
        .unwrap();
        let search = |service: &Service, user: Option<&str>| {
            service
                .memory_search_across(MemorySearchAcrossInput {
                    user_id: user.map(str::to_owned),
                    agent_id: None,
                    session_id: None,
                    query: SearchQuery::Text("the ferry leaves at noon".into()),
                    top_k: Some(10),
                    filter: None,
                    mode: SearchModeName::Vector,
                    keywords: None,
                    hybrid: None,
                    include_embeddings: false,
                    exact: false,
                })
                .unwrap()
        };
        let u1 = search(&acme, Some("u1"));
        let ids: Vec<_> = u1.hits.iter().map(|h| h.message.0["id"].clone()).collect();
        assert_eq!(ids, [serde_json::json!("a"), serde_json::json!("b")]);
        assert_eq!(u1.hits[0].session_id.as_deref(), Some("s1"));
        assert_eq!(u1.hits[0].user_id.as_deref(), Some("u1"));
        assert_eq!(u1.hits[0].index, 0);
        assert!(u1.hits[0].score > u1.hits[1].score);
        assert!(u1.hits[0].message.0.get("embedding").is_none());
        // Every thread of acme, none of globex's.
        let all = search(&acme, None);
        let mut ids: Vec<_> = all
            .hits
            .iter()
            .filter_map(|h| h.message.0["id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        assert_eq!(ids, ["a", "b", "c", "p"]);
        // A filter applies before the top-k cut: the one match comes back even at top 1.
        let filtered = |filter: serde_json::Value| {
            acme.memory_search_across(MemorySearchAcrossInput {
                user_id: None,
                agent_id: None,
                session_id: None,
                query: SearchQuery::Text("the ferry leaves at noon".into()),
                top_k: Some(1),
                filter: Some(filter),
                mode: SearchModeName::Vector,
                keywords: None,
                hybrid: None,
                include_embeddings: false,
                exact: false,
            })
        };
        let only_b = filtered(serde_json::json!({"eq": {"path": "id", "value": "b"}})).unwrap();
        assert_eq!(only_b.hits.len(), 1);
        assert_eq!(only_b.hits[0].message.0["id"], "b");
        for bad in [
            serde_json::json!({"eq": {"path": "id"}}),
            serde_json::json!({"exists": "embedding"}),
        ] {
            let error = filtered(bad).unwrap_err();
            assert_eq!(error.code(), "invalid_filter", "{error}");
            assert_eq!(error.kind(), crate::ErrorKind::BadRequest);
        }
        let theirs = search(&globex, None);
        assert_eq!(theirs.hits.len(), 1);
        assert_eq!(theirs.hits[0].message.0["id"], "g");

        // Input errors say what to fix.
        for (input, needle) in [
            (
                MemorySearchAcrossInput {
                    user_id: Some(String::new()),
                    agent_id: None,
                    session_id: None,
                    query: SearchQuery::Vector(vec![1.0; 64]),
                    top_k: None,
                    filter: None,
                    mode: SearchModeName::Vector,
                    keywords: None,
                    hybrid: None,
                    include_embeddings: false,
                    exact: false,
                },
                "user_id must not be empty",
            ),
            (
                MemorySearchAcrossInput {
                    user_id: None,
                    agent_id: None,
                    session_id: None,
                    query: SearchQuery::Vector(vec![1.0; 64]),
                    top_k: Some(MAX_TOP_K + 1),
                    filter: None,
                    mode: SearchModeName::Vector,
                    keywords: None,
                    hybrid: None,
                    include_embeddings: false,
                    exact: false,
                },
                "at most 1000",
            ),
        ] {
            let error = acme.memory_search_across(input).unwrap_err();
            assert_eq!(error.code(), "invalid_input");
            assert!(error.to_string().contains(needle), "{error}");
        }
        // Keyword search needs no embedder; hybrid fuses both rankings.
        let no_embedder = Service::new(acme.stores().clone());
        let words = |service: &Service, mode: SearchModeName, keywords: Option<&str>| {
            service.memory_search_across(MemorySearchAcrossInput {
                user_id: None,
                agent_id: None,
                session_id: None,
                query: SearchQuery::Text("tickets sold out".into()),
                top_k: Some(3),
                filter: None,
                mode,
                keywords: keywords.map(str::to_owned),
                hybrid: None,
                include_embeddings: false,
                exact: false,
            })
        };
        let keyword = words(&no_embedder, SearchModeName::Keyword, None).unwrap();
        assert_eq!(keyword.hits.len(), 1, "{keyword:?}");
        assert_eq!(keyword.hits[0].message.0["id"], "b");
        let by_keywords = words(&no_embedder, SearchModeName::Keyword, Some("noon")).unwrap();
        let mut ids: Vec<_> = by_keywords
            .hits
            .iter()
            .filter_map(|h| h.message.0["id"].as_str())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, ["a", "c", "p"]);
        let hybrid = words(&acme, SearchModeName::Hybrid, None).unwrap();
        assert_eq!(hybrid.hits[0].message.0["id"], "b", "{hybrid:?}");
        assert_eq!(
            words(&no_embedder, SearchModeName::Hybrid, None)
                .unwrap_err()
                .code(),
            "embedder_not_configured"
        );
        // A hybrid search that leaves the vector ranking out needs no embedder either.
        let keyword_only = no_embedder
            .memory_search_across(MemorySearchAcrossInput {
                user_id: None,
                agent_id: None,
                session_id: None,
                query: SearchQuery::Text("tickets sold out".into()),
                top_k: Some(3),
                filter: None,
                mode: SearchModeName::Hybrid,
                keywords: None,
                hybrid: Some(HybridInput {
                    vector_weight: Some(0.0),
                    ..HybridInput::default()
                }),
                include_embeddings: false,
                exact: false,
            })
            .unwrap();
        assert_eq!(keyword_only.hits.len(), 1, "{keyword_only:?}");
        assert_eq!(keyword_only.hits[0].message.0["id"], "b");
        let no_words = no_embedder.memory_search_across(MemorySearchAcrossInput {
            user_id: None,
            agent_id: None,
            session_id: None,
            query: SearchQuery::Vector(vec![1.0; 64]),
            top_k: None,
            filter: None,
            mode: SearchModeName::Keyword,
            keywords: None,
            hybrid: None,
            include_embeddings: false,
            exact: false,
        });
        assert!(no_words.unwrap_err().to_string().contains("needs words"),);
        let error = no_embedder
            .memory_search_across(MemorySearchAcrossInput {
                user_id: None,
                agent_id: None,
                session_id: None,
                query: SearchQuery::Text("ferry".into()),
                top_k: None,
                filter: None,
                mode: SearchModeName::Vector,
                keywords: None,
                hybrid: None,
                include_embeddings: false,
                exact: false,
            })
            .unwrap_err();
        assert_eq!(error.code(), "embedder_not_configured");
    }

    #[test]
    fn reembed_fills_and_replaces_embeddings_and_resumes_with_nothing_left() {
        let dir = tempfile::tempdir().unwrap();
        let service = embedded_service(dir.path(), "default");
        add(&service, "a", 3);
        add(&service, "b", 2);
        let mut seen = Vec::new();
        let out = service
            .memory_reembed(
                ReembedInput {
                    session_id: Some("a".into()),
                    batch: Some(2),
                    ..ReembedInput::default()
                },
                |done, total| seen.push((done, total)),
            )
            .unwrap();
        assert_eq!(out.reembedded, 3);
        assert_eq!(out.model, "mnemon:hashing-v1-64");
        assert_eq!(seen.last(), Some(&(3, 3)));
        // Only session a was embedded: a search across sessions finds a's messages only.
        let found = service
            .memory_search_across(MemorySearchAcrossInput {
                user_id: None,
                agent_id: None,
                session_id: None,
                query: SearchQuery::Text("1".into()),
                top_k: Some(10),
                filter: None,
                mode: SearchModeName::Vector,
                keywords: None,
                hybrid: None,
                include_embeddings: false,
                exact: false,
            })
            .unwrap();
        assert_eq!(found.hits.len(), 3);
        assert!(
            found
                .hits
                .iter()
                .all(|h| h.session_id.as_deref() == Some("a"))
        );
        // A second run has nothing left to do; the rest of the namespace is two messages.
        let again = service
            .memory_reembed(ReembedInput::default(), |_, _| {})
            .unwrap();
        assert_eq!(again.reembedded, 2);
        let none = service
            .memory_reembed(ReembedInput::default(), |_, _| {})
            .unwrap();
        assert_eq!(none.reembedded, 0);
        let refused = service.memory_reembed(
            ReembedInput {
                batch: Some(0),
                ..ReembedInput::default()
            },
            |_, _| {},
        );
        assert_eq!(refused.unwrap_err().code(), "invalid_input");
        let plain = Service::new(service.stores().clone());
        let refused = plain.memory_reembed(ReembedInput::default(), |_, _| {});
        assert_eq!(refused.unwrap_err().code(), "embedder_not_configured");
    }

    #[test]
    fn kept_write_handles_see_deletes_and_other_writers() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap());
        let other = Service::new(Stores::open(dir.path()).unwrap());
        let contents = |service: &Service| -> Vec<String> {
            service
                .memory_get(every_message("s"))
                .unwrap()
                .messages
                .iter()
                .filter_map(|m| m.0["content"].as_str().map(str::to_owned))
                .collect()
        };
        let say = |service: &Service, text: &str| {
            service
                .memory_add(MemoryAddInput {
                    session: "s".into(),
                    messages: vec![MessageBody(
                        serde_json::json!({"name": "u", "content": text}),
                    )],
                    marks: vec![],
                })
                .unwrap();
        };
        say(&service, "one");
        // Another process (another service over the same file) writes in between.
        say(&other, "two");
        say(&service, "three");
        assert_eq!(contents(&other), ["one", "two", "three"]);
        // Deleted through another handle: the kept handle's next add starts the session anew.
        other
            .memory_session_delete(SessionInput {
                session: "s".into(),
            })
            .unwrap();
        say(&service, "four");
        assert_eq!(contents(&other), ["four"]);
        // And after a forget of the whole namespace.
        other
            .forget(crate::maintenance::ForgetInput {
                namespace: Some("default".into()),
                ..Default::default()
            })
            .unwrap();
        say(&service, "five");
        assert_eq!(contents(&service), ["five"]);
        // More sessions than handles kept: the oldest is closed, every add still lands.
        for i in 0..70 {
            service
                .memory_add(MemoryAddInput {
                    session: format!("many-{i}"),
                    messages: vec![MessageBody(
                        serde_json::json!({"name": "u", "content": "x"}),
                    )],
                    marks: vec![],
                })
                .unwrap();
        }
        say(&service, "six");
        assert_eq!(contents(&other), ["five", "six"]);
        // SQLite's store shares each thread's mirror among its handles: nothing is kept here.
        assert_eq!(service.kept_write_handles(), 0);
        assert_eq!(service.stores().threads().unwrap().len(), 71);
    }

    #[test]
    fn sessions_carry_counts_and_last_activity_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(Stores::open(dir.path()).unwrap());
        add(&service, "a", 3);
        add(&service, "b", 1);
        add(&service, "c", 2);
        add(&service, "b", 1);
        let all = |limit| SessionListInput {
            cursor: None,
            limit,
        };

        // The plain listing is unchanged: scopes only, oldest first.
        let plain = service.memory_sessions(all(None)).unwrap();
        assert_eq!(ids(&plain), ["a", "b", "c"]);
        assert!(plain.sessions.iter().all(|s| s.messages.is_none()));

        let counted = service.memory_sessions_with_counts(all(None)).unwrap();
        assert_eq!(ids(&counted), ["a", "b", "c"]);
        let counts: Vec<_> = counted.sessions.iter().map(|s| s.messages).collect();
        assert_eq!(counts, [Some(3), Some(2), Some(2)]);
        let a = &counted.sessions[0];
        assert!(a.last_active_ms.unwrap() > 1_700_000_000_000);
        assert!(a.last_active.as_deref().unwrap().ends_with('Z'));

        // By activity: b (written last), c, a; a page at a time.
        let first = service.memory_sessions_by_activity(all(Some(2))).unwrap();
        assert_eq!(ids(&first), ["b", "c"]);
        assert_eq!(first.sessions[0].messages, Some(2));
        let second = service
            .memory_sessions_by_activity(SessionListInput {
                cursor: first.next_cursor,
                limit: Some(2),
            })
            .unwrap();
        assert_eq!(ids(&second), ["a"]);
        assert!(second.next_cursor.is_none());
        for bad in ["!!", &page::encode("not a cursor")] {
            let refused = service.memory_sessions_by_activity(SessionListInput {
                cursor: Some(bad.to_owned()),
                limit: None,
            });
            assert!(
                matches!(refused, Err(OpsError::InvalidCursor)),
                "{refused:?}"
            );
        }
    }
}
