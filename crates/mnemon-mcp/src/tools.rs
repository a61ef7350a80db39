//! The MCP tools (docs/reference/mcp.md#tools): each one a thin adapter over `mnemon-ops`.
//!
//! A tool's input type is its JSON Schema; its output type is its output schema. Success is
//! `structuredContent` (the output) plus one text block: a one-line summary followed by the
//! same JSON, because clients that ignore `structuredContent` (the MCP specification asks
//! servers to keep them working) hand the model only the text. A failure is a tool error
//! (`isError: true`) whose text is `{"error": {"code", "message"}}`: the operation's stable code
//! and a message naming the tool or input that fixes it. Protocol errors are left to rmcp
//! (unknown tool, arguments that do not match the schema).

use std::sync::Arc;

use axum::http::request::Parts;
use mnemon_ops::artifacts::{
    ArtifactLoadInput, ArtifactLoadOutput, ArtifactOutput, ArtifactQueryInput, ArtifactQueryOutput,
    ArtifactSaveInput,
};
use mnemon_ops::assets::{
    AssetBody, AssetListOutput, AssetMetaInput, AssetMetaOutput, AssetPutInput, AssetQueryInput,
    AssetResolveInput, AssetResolveOutput,
};
use mnemon_ops::expiry::ExpiryInput;
use mnemon_ops::library::{LibraryQueryInput, LibraryQueryOutput};
use mnemon_ops::memory::{
    AddWith, DeleteMessagesInput, MemoryAddInput, MemoryAddOutput, MemoryGetInput,
    MemorySearchAcrossInput, MemorySearchInput, MessageBody, MetricName, SearchModeName,
    SearchQuery, SessionInput, SessionListInput, SessionListOutput,
};
use mnemon_ops::{ErrorKind, OpsError, Service};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::schema_for_output;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Access, Call, Denied, LibrarySource, ServiceResolver};

/// What the server tells a client about itself at initialization.
const INSTRUCTIONS: &str = "Mnemon keeps an agent's memory. Conversation memory: `remember` \
adds messages to a session, `recall` finds them again (by meaning with a query, or the latest \
ones), `list_sessions` lists sessions, `forget` deletes messages or a whole session. Assets hold \
large or binary data that you refer to as asset://<id>/<field>/... without ever seeing the \
payload: `put_asset` stores one, `describe_asset` shows its shape (meta), `resolve_asset` fetches \
one referenced part, `list_assets` lists ids. Artifacts are named results of work saved under a \
key in a scope: `save_artifact` saves one, `load_artifacts` renders the newest of some keys as a \
block for your prompt, `list_artifacts` lists saved records (without content). `search_library` searches the served document library by meaning.";

// ---------------------------------------------------------------------------------------------
// Inputs and outputs of the tools that are not one operation's own types.

/// Input of `remember`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RememberInput {
    /// The session (conversation) to add to, e.g. `chat-42`. It is created by the first add.
    pub session: String,
    /// The messages, oldest first. Each is an object with at least `name` (who spoke, e.g.
    /// `user`) and `content` (the text); `role` (`user`, `assistant` or `system`), `id` and
    /// `timestamp` are filled in when missing.
    pub messages: Vec<MessageBody>,
    /// Marks (tags) every added message gets, e.g. `["important"]`; `recall` can filter by one.
    #[serde(default)]
    pub marks: Vec<String>,
    /// Forget these messages this many seconds from now (e.g. 3600 for an hour); leave it out
    /// for the server's default (kept until deleted, unless the server forgets writes after a
    /// default time).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Keep these messages until deleted, even on a server that forgets writes after a
    /// default time. Not with `ttl_seconds`.
    #[serde(default)]
    pub never_expires: bool,
}

/// Input of `recall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecallInput {
    /// The session to recall from. Leave it out to search every session (needs `query`).
    #[serde(default)]
    pub session: Option<String>,
    /// With `query`: only the sessions of this user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// With `query`: only the sessions of this agent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// With `query`: only messages this filter selects, e.g.
    /// `{"eq": {"path": "role", "value": "user"}}` or
    /// `{"gte": {"path": "timestamp", "value": "2026-01-01"}}`; operators `eq`, `ne`, `in`,
    /// `nin`, `gt`, `gte`, `lt`, `lte`, `contains`, `exists`, `and`, `or`, `not` over `id`,
    /// `marks`, `name`, `role`, `content`, `timestamp`, `metadata.…` and extra fields.
    #[serde(default)]
    pub filter: Option<serde_json::Value>,
    /// With `query`: `vector` (by meaning, the default), `keyword` (by the query's exact
    /// words: names, ids, codes) or `hybrid` (both rankings fused).
    #[serde(default)]
    pub mode: Option<SearchModeName>,
    /// What to look for, in words: the messages closest in meaning come back, best first.
    /// Leave it out to get the latest messages of `session` instead.
    #[serde(default)]
    pub query: Option<String>,
    /// With `query`: how many messages to return (default 5).
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Without `query`: how many of the latest messages to return (default 20).
    #[serde(default)]
    pub recent: Option<usize>,
    /// Only messages carrying this mark.
    #[serde(default)]
    pub mark: Option<String>,
}

/// One recalled message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Recalled {
    /// The session it belongs to (empty for a user or agent thread without a session).
    pub session: String,
    /// The user of its thread, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// The agent of its thread, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// With a query: how close it is (larger is closer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// The message (`id`, `name`, `role`, `content`, `timestamp`, …).
    pub message: MessageBody,
}

/// Output of `recall`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecallOutput {
    /// With a query: the closest messages, best first; without: the latest, oldest first.
    pub messages: Vec<Recalled>,
    /// `false` when a keyword or hybrid recall found its words in more messages than the
    /// 10,000 newest it ranks, so an older one might have ranked higher: narrow the session,
    /// user or agent, or use rarer words. Always `true` otherwise.
    #[serde(default = "complete_by_default")]
    pub complete: bool,
}

/// An answer without `complete` ranked every match.
fn complete_by_default() -> bool {
    true
}

/// Input of `forget`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForgetInput {
    /// The session.
    pub session: String,
    /// The ids of the messages to delete. Leave it out to delete the whole session.
    #[serde(default)]
    pub message_ids: Option<Vec<String>>,
}

/// Output of `forget`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForgetOutput {
    /// The session.
    pub session: String,
    /// True when the whole session (every message and mark) was deleted.
    pub session_deleted: bool,
    /// The ids of the messages deleted (empty when the whole session was).
    pub deleted_message_ids: Vec<String>,
    /// Requested ids that were not in the session.
    pub not_found: Vec<String>,
}

/// Input of `put_asset`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PutAssetInput {
    /// The asset: `asset_id` (optional: a fresh one is made), `asset_type`, `asset_name`,
    /// `description`, and `content` (JSON) or `content_base64` with `content_type`.
    pub asset: AssetBody,
    /// Forget the asset this many seconds from now (e.g. 86400 for a day); leave it out for the
    /// server's default (kept until deleted, unless the server forgets writes after a default
    /// time).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Keep the asset until deleted, even on a server that forgets writes after a default
    /// time. Not with `ttl_seconds`.
    #[serde(default)]
    pub never_expires: bool,
}

/// Input of `save_artifact`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SaveArtifactInput {
    /// The artifact.
    #[serde(flatten)]
    pub artifact: ArtifactSaveInput,
    /// Forget the artifact this many seconds from now; leave it out for the server's default
    /// (kept until deleted, unless the server forgets writes after a default time).
    #[serde(default)]
    pub ttl_seconds: Option<u64>,
    /// Keep the artifact until deleted, even on a server that forgets writes after a default
    /// time. Not with `ttl_seconds`.
    #[serde(default)]
    pub never_expires: bool,
}

/// Input of `list_assets`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListAssetsInput {
    /// Only assets whose `asset_type` equals this.
    #[serde(default)]
    pub asset_type: Option<String>,
    /// Only assets this filter selects, e.g. `{"eq": {"path": "asset_type", "value": "image"}}`
    /// or `{"contains": {"path": "asset_name", "value": "report"}}`; operators `eq`, `ne`, `in`,
    /// `nin`, `gt`, `gte`, `lt`, `lte`, `contains`, `exists`, `and`, `or`, `not` over the
    /// asset's meta fields and `created_at`, `updated_at`, `expires_at`.
    #[serde(default)]
    pub filter: Option<serde_json::Value>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many ids (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Input of `list_artifacts`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListArtifactsInput {
    /// Only the records of this scope (the task or chat they were saved in); leave it out to
    /// list every scope.
    #[serde(default)]
    pub scope: Option<String>,
    /// Only the records this filter selects, e.g. `{"eq": {"path": "type", "value": "plan"}}`
    /// or `{"contains": {"path": "name", "value": "draft"}}`; operators `eq`, `ne`, `in`,
    /// `nin`, `gt`, `gte`, `lt`, `lte`, `contains`, `exists`, `and`, `or`, `not` over `id`,
    /// `key`, `type`, `name`, `description`, `scope`, `created_at` (RFC 3339 text, e.g.
    /// `{"gte": {"path": "created_at", "value": "2026-03"}}`), `data` (inline JSON content,
    /// e.g. `data.lang`) and `expires_at` (milliseconds since the Unix epoch).
    #[serde(default)]
    pub filter: Option<serde_json::Value>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many records (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Output of `put_asset`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PutAssetOutput {
    /// The stored asset's id: refer to its parts as `asset://<asset_id>/<field>/…`.
    pub asset_id: String,
    /// The stored asset's meta (its shape, payloads replaced by type names).
    pub meta: serde_json::Map<String, serde_json::Value>,
}

/// Input of `search_library`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SearchLibraryInput {
    /// The question or topic, in words.
    pub text: String,
    /// How many passages ("bits") to return (default 10; below zero, all of them). A result
    /// larger than the server's limit (32 MiB by default) is refused: ask for fewer.
    #[serde(default)]
    pub count: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// The server.

/// Why a call failed, before it becomes a tool error.
enum Failure {
    Ops(OpsError),
    Denied(Denied),
}

impl From<OpsError> for Failure {
    fn from(error: OpsError) -> Self {
        Failure::Ops(error)
    }
}

impl Failure {
    fn code(&self) -> String {
        match self {
            Failure::Ops(e) => e.code().to_owned(),
            Failure::Denied(d) => d.code.clone(),
        }
    }

    /// The message, pointing at the tools that fix it where the operation's own message names
    /// REST routes.
    fn message(&self) -> String {
        let error = match self {
            Failure::Denied(d) => return d.message.clone(),
            Failure::Ops(e) => e,
        };
        if error.kind() == ErrorKind::Internal {
            // As REST answers a 500 (docs/reference/mcp.md#errors): the details (paths, hosts,
            // schema versions) are for the operator's log, not for every key's holder.
            tracing::error!(%error, "an MCP tool call failed");
            return INTERNAL_MESSAGE.to_owned();
        }
        if let Some(withheld) = error.withheld_message() {
            // As REST answers a 503: the storage's or embedder's details are the log's.
            tracing::warn!(%error, "an MCP tool call found a store or the embedder unavailable");
            return withheld.to_owned();
        }
        match error {
            OpsError::AssetNotFound { asset_id } => format!(
                "there is no asset with id {asset_id:?}; call list_assets to see the stored ids, \
                 or put_asset to store one"
            ),
            OpsError::SessionNotFound { session } => format!(
                "there is no memory session {session:?}; call list_sessions to see the \
                 sessions, or remember to start this one"
            ),
            OpsError::ArtifactNotFound { what } => {
                format!("{what}; save_artifact saves one under a key")
            }
            OpsError::InvalidCursor => "the cursor is not one this list handed out (or the item \
                 it points after was removed); call again without a cursor"
                .to_owned(),
            OpsError::NoLibrary => "no library is served; start the server with one \
                 (`mnemon mcp --library FILE|DIR`, or `mnemon serve` with its library)"
                .to_owned(),
            OpsError::NoEmbedder => "searching by text needs an embedder, and none is \
                 configured; start the server with --embedding-model: for search_library the \
                 library's own model (its file's embedding_model), for memory any model \
                 (for example mnemon:hashing-v1-256); or call recall without a query for the \
                 latest messages"
                .to_owned(),
            // The operation's message names `omit`, which search_library does not take.
            OpsError::ResultTooLarge { max } => format!(
                "the result is larger than the server's limit of {max} bytes; call \
                 search_library again with a lower count"
            ),
            other => other.to_string(),
        }
    }
}

/// What a tool error says of a fault of the service; the log has the details.
pub const INTERNAL_MESSAGE: &str = "internal error: the server failed while running this tool; \
    retrying may work, and the server's log has the details";

/// The tool result of a failure: `isError` with `{"error": {"code", "message"}}` as text.
fn tool_error(code: &str, message: &str) -> CallToolResult {
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    CallToolResult::error(vec![ContentBlock::text(body.to_string())])
}

/// The MCP server: the tools over one [`ServiceResolver`] and, optionally, a library.
///
/// Cheap to clone (the streamable-HTTP transport makes one per request).
#[derive(Clone)]
pub struct MnemonMcp {
    resolver: Arc<dyn ServiceResolver>,
    library: Option<Arc<dyn LibrarySource>>,
    /// Shared, not copied: the streamable-HTTP transport clones the server for every request,
    /// and a copied router copies every tool's definition (names, descriptions, schemas).
    tool_router: Arc<ToolRouter<MnemonMcp>>,
}

impl std::fmt::Debug for MnemonMcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MnemonMcp")
            .field("library", &self.library.is_some())
            .finish_non_exhaustive()
    }
}

impl MnemonMcp {
    /// The tools over the services `resolver` picks (a [`Service`] serves its one namespace).
    pub fn new(resolver: impl ServiceResolver) -> MnemonMcp {
        MnemonMcp {
            resolver: Arc::new(resolver),
            library: None,
            tool_router: Arc::new(MnemonMcp::tool_router()),
        }
    }

    /// Lets `search_library` search the library `source` hands out.
    pub fn with_library(self, source: impl LibrarySource) -> MnemonMcp {
        MnemonMcp {
            library: Some(Arc::new(source)),
            ..self
        }
    }

    /// The tools' definitions (names, descriptions, input and output schemas), as
    /// `tools/list` answers.
    pub fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.tool_router.list_all()
    }

    /// Runs `op` on the blocking pool against the call's service and turns its outcome into a
    /// tool result: `summary` and the output on success, a tool error on failure.
    async fn run<T, F>(
        &self,
        mut context: RequestContext<RoleServer>,
        (tool, access): (&'static str, Access),
        op: F,
        summary: fn(&T) -> String,
    ) -> Result<CallToolResult, ErrorData>
    where
        T: Serialize + Send + 'static,
        F: FnOnce(&Service) -> Result<T, Failure> + Send + 'static,
    {
        // Taken, not cloned: the call is its last user, and a clone copies every header.
        let request = context.extensions.remove::<Parts>();
        let resolver = Arc::clone(&self.resolver);
        let joined = tokio::task::spawn_blocking(move || {
            let call = Call {
                request: request.as_ref(),
                tool,
                access,
            };
            let service = resolver.resolve(&call).map_err(Failure::Denied)?;
            op(&service)
        })
        .await;
        let output = match joined {
            Ok(Ok(output)) => output,
            Ok(Err(failure)) => return Ok(tool_error(&failure.code(), &failure.message())),
            Err(e) => {
                tracing::error!(error = %e, "an MCP tool call panicked");
                return Ok(tool_error("internal", INTERNAL_MESSAGE));
            }
        };
        let json = serde_json::to_value(&output).map_err(|e| {
            ErrorData::internal_error(format!("cannot write the tool's result as JSON: {e}"), None)
        })?;
        let text = format!("{}\n{json}", summary(&output));
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(json);
        Ok(result)
    }
}

fn plural(n: usize, one: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {one}s")
    }
}

/// Recall: a search in one session or across sessions, or the latest messages of one.
fn recall(service: &Service, input: RecallInput) -> Result<RecallOutput, Failure> {
    let Some(query) = input.query else {
        let Some(session) = input.session else {
            return Err(OpsError::invalid(
                "name a session (to get its latest messages) or give a query (to search every \
                 session)",
            )
            .into());
        };
        let got = service.memory_get(MemoryGetInput {
            session: session.clone(),
            recent: Some(input.recent.unwrap_or(20)),
            mark: input.mark,
            exclude_mark: None,
            tokens: None,
            include_embeddings: false,
        })?;
        return Ok(RecallOutput {
            complete: true,
            messages: got
                .messages
                .into_iter()
                .map(|message| Recalled {
                    session: session.clone(),
                    user_id: None,
                    agent_id: None,
                    score: None,
                    message,
                })
                .collect(),
        });
    };
    let top_k = input.top_k.unwrap_or(5);
    if let (Some(session), None, None, None, None) = (
        &input.session,
        &input.filter,
        &input.user_id,
        &input.agent_id,
        &input.mode,
    ) {
        // One session: its own recall, which also embeds its messages still without one.
        let hits = service.memory_search(MemorySearchInput {
            session: session.clone(),
            query: SearchQuery::Text(query),
            top_k: Some(top_k),
            metric: MetricName::Cosine,
            mark: input.mark,
            exact: false,
            include_embeddings: false,
        })?;
        return Ok(RecallOutput {
            complete: true,
            messages: hits
                .hits
                .into_iter()
                .map(|hit| Recalled {
                    session: session.clone(),
                    user_id: None,
                    agent_id: None,
                    score: Some(hit.score),
                    message: hit.message,
                })
                .collect(),
        });
    }
    // Every session (of a user, agent or session when named) in one store query: the store
    // streams the stored vectors through a bounded top-k, the filter (and the mark, as a
    // filter on `marks`) applied before the cut.
    let mark = input
        .mark
        .map(|mark| serde_json::json!({"contains": {"path": "marks", "value": mark}}));
    let filter = match (input.filter, mark) {
        (Some(filter), Some(mark)) => Some(serde_json::json!({"and": [filter, mark]})),
        (filter, mark) => filter.or(mark),
    };
    let found = service.memory_search_across(MemorySearchAcrossInput {
        user_id: input.user_id,
        agent_id: input.agent_id,
        session_id: input.session,
        query: SearchQuery::Text(query),
        top_k: Some(top_k),
        filter,
        mode: input.mode.unwrap_or_default(),
        keywords: None,
        hybrid: None,
        include_embeddings: false,
        exact: false,
    })?;
    Ok(RecallOutput {
        complete: found.complete,
        messages: found
            .hits
            .into_iter()
            .map(|hit| Recalled {
                session: hit.session_id.unwrap_or_default(),
                user_id: hit.user_id,
                agent_id: hit.agent_id,
                score: Some(hit.score),
                message: hit.message,
            })
            .collect(),
    })
}

/// Forget: a session's messages by id, or the whole session.
fn forget(service: &Service, input: ForgetInput) -> Result<ForgetOutput, Failure> {
    match input.message_ids {
        Some(ids) => {
            let out = service.memory_delete_messages(DeleteMessagesInput {
                session: input.session.clone(),
                ids,
            })?;
            Ok(ForgetOutput {
                session: input.session,
                session_deleted: false,
                deleted_message_ids: out.deleted,
                not_found: out.not_found,
            })
        }
        None => {
            service.memory_session_delete(SessionInput {
                session: input.session.clone(),
            })?;
            Ok(ForgetOutput {
                session: input.session,
                session_deleted: true,
                deleted_message_ids: Vec::new(),
                not_found: Vec::new(),
            })
        }
    }
}

#[tool_router]
impl MnemonMcp {
    /// Remember: add messages to a conversation session (created on first use). Use it to keep
    /// what was said or learned so that it can be recalled later, in this conversation or
    /// another. Returns how many messages were added and the ids skipped as duplicates.
    #[tool(
        name = "remember",
        output_schema = schema_for_output::<MemoryAddOutput>(),
        annotations(title = "Remember messages", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn remember(
        &self,
        Parameters(input): Parameters<RememberInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("remember", Access::Write),
            move |s| {
                let with = AddWith {
                    embed: true,
                    expiry: ExpiryInput {
                        ttl_seconds: input.ttl_seconds,
                        expires_at_ms: None,
                        never_expires: input.never_expires,
                    },
                };
                let add = MemoryAddInput {
                    session: input.session,
                    messages: input.messages,
                    marks: input.marks,
                };
                Ok(s.memory_add_with(add, &with)?)
            },
            |o: &MemoryAddOutput| {
                format!(
                    "Remembered {}{}.",
                    plural(o.added, "message"),
                    if o.skipped_duplicates.is_empty() {
                        String::new()
                    } else {
                        format!(" ({} skipped as duplicates)", o.skipped_duplicates.len())
                    }
                )
            },
        )
        .await
    }

    /// Recall: find remembered messages. With `query`, returns the messages closest in meaning
    /// to it, best first, from `session` or, without a session, from every session (narrowed
    /// to one user or agent with `user_id`/`agent_id`). Without `query`, returns the latest
    /// messages of `session`, oldest first. Each result names its session, its score (searches
    /// only) and the message (`id`, `name`, `role`, `content`, `timestamp`).
    #[tool(
        name = "recall",
        output_schema = schema_for_output::<RecallOutput>(),
        annotations(title = "Recall messages", read_only_hint = true, open_world_hint = false)
    )]
    async fn recall(
        &self,
        Parameters(input): Parameters<RecallInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("recall", Access::Read),
            move |s| recall(s, input),
            |o: &RecallOutput| format!("Recalled {}.", plural(o.messages.len(), "message")),
        )
        .await
    }

    /// Forget: permanently delete conversation memory. With `message_ids`, deletes those
    /// messages from the session; without, deletes the whole session with all its messages and
    /// marks. Assets and artifacts are not affected. Returns what was deleted; an unknown
    /// session is an error (`session_not_found`).
    #[tool(
        name = "forget",
        output_schema = schema_for_output::<ForgetOutput>(),
        annotations(title = "Forget messages or a session", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn forget(
        &self,
        Parameters(input): Parameters<ForgetInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("forget", Access::Write),
            move |s| forget(s, input),
            |o: &ForgetOutput| {
                if o.session_deleted {
                    format!("Deleted session {:?}.", o.session)
                } else {
                    format!(
                        "Deleted {} from session {:?}.",
                        plural(o.deleted_message_ids.len(), "message"),
                        o.session
                    )
                }
            },
        )
        .await
    }

    /// List the conversation sessions, oldest first, a page at a time. Use it to find a session
    /// to recall from. Returns `sessions` (each with its `session_id`) and, when there are more,
    /// a `next_cursor` to pass as `cursor`.
    #[tool(
        name = "list_sessions",
        output_schema = schema_for_output::<SessionListOutput>(),
        annotations(title = "List sessions", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_sessions(
        &self,
        Parameters(input): Parameters<SessionListInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("list_sessions", Access::Read),
            move |s| Ok(s.memory_sessions(input)?),
            |o: &SessionListOutput| {
                format!(
                    "{}{}.",
                    plural(o.sessions.len(), "session"),
                    if o.next_cursor.is_some() {
                        " (more with next_cursor)"
                    } else {
                        ""
                    }
                )
            },
        )
        .await
    }

    /// Store an asset: data (JSON in `content`, or bytes as base64 in `content_base64` with
    /// `content_type`) with a type, name and description, replacing any asset with the same
    /// `asset_id` (a fresh id when none is given). Use it for data too large or too binary to
    /// keep in the conversation; refer to it afterwards as `asset://<asset_id>/<field>/…`.
    /// With `ttl_seconds` it is forgotten that long after. Returns the id and the asset's meta
    /// (its shape, without the payload).
    #[tool(
        name = "put_asset",
        output_schema = schema_for_output::<PutAssetOutput>(),
        annotations(title = "Store an asset", read_only_hint = false, destructive_hint = true, idempotent_hint = true, open_world_hint = false)
    )]
    async fn put_asset(
        &self,
        Parameters(input): Parameters<PutAssetInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("put_asset", Access::Write),
            move |s| {
                let expiry = ExpiryInput {
                    ttl_seconds: input.ttl_seconds,
                    expires_at_ms: None,
                    never_expires: input.never_expires,
                };
                let asset_id = s
                    .asset_put_expiring(AssetPutInput { asset: input.asset }, expiry)?
                    .asset_id;
                let meta = s
                    .asset_meta(AssetMetaInput {
                        asset_id: asset_id.clone(),
                        max_string_len: None,
                    })?
                    .meta;
                Ok(PutAssetOutput { asset_id, meta })
            },
            |o: &PutAssetOutput| format!("Stored asset {:?}.", o.asset_id),
        )
        .await
    }

    /// Describe an asset: its meta, the asset's shape with every payload (bytes, large
    /// objects) replaced by its type, so you can decide which part to use without loading it.
    /// Long strings are cut to `max_string_len` characters when given. To fetch one part, call
    /// resolve_asset with `asset://<asset_id>/<field>/…`.
    #[tool(
        name = "describe_asset",
        output_schema = schema_for_output::<AssetMetaOutput>(),
        annotations(title = "Describe an asset", read_only_hint = true, open_world_hint = false)
    )]
    async fn describe_asset(
        &self,
        Parameters(input): Parameters<AssetMetaInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("describe_asset", Access::Read),
            move |s| Ok(s.asset_meta(input)?),
            |_: &AssetMetaOutput| "The asset's meta.".to_owned(),
        )
        .await
    }

    /// Resolve an asset reference: the value at `asset://<asset_id>/<field>/<key or index>/…`,
    /// for example `asset://report/content/rows/0`. Use it to read the one part of an asset you
    /// need. Returns `value` (bytes come back as a `data:` URL).
    #[tool(
        name = "resolve_asset",
        output_schema = schema_for_output::<AssetResolveOutput>(),
        annotations(title = "Resolve an asset reference", read_only_hint = true, open_world_hint = false)
    )]
    async fn resolve_asset(
        &self,
        Parameters(input): Parameters<AssetResolveInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("resolve_asset", Access::Read),
            move |s| Ok(s.asset_resolve(input)?),
            |_: &AssetResolveOutput| "The referenced value.".to_owned(),
        )
        .await
    }

    /// List stored asset ids in ascending order, a page at a time, optionally only those of
    /// one `asset_type` or those a `filter` selects (on meta fields, `created_at`,
    /// `updated_at`, `expires_at`). Returns `asset_ids` and, when there are more, a
    /// `next_cursor`.
    #[tool(
        name = "list_assets",
        output_schema = schema_for_output::<AssetListOutput>(),
        annotations(title = "List assets", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_assets(
        &self,
        Parameters(input): Parameters<ListAssetsInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("list_assets", Access::Read),
            move |s| {
                let found = s.asset_query(AssetQueryInput {
                    filter: input.filter,
                    asset_type: input.asset_type,
                    cursor: input.cursor,
                    limit: input.limit,
                })?;
                Ok(AssetListOutput {
                    asset_ids: found.assets.into_iter().map(|a| a.asset_id).collect(),
                    next_cursor: found.next_cursor,
                })
            },
            |o: &AssetListOutput| format!("{}.", plural(o.asset_ids.len(), "asset")),
        )
        .await
    }

    /// Save an artifact: a named result of your work (a plan, a draft, a table), saved under
    /// `key` in `scope` (the task or chat it belongs to). Saving again under the same key makes
    /// a new version; the newest one is what load_artifacts returns. With `ttl_seconds` it is
    /// forgotten that long after. Returns the saved record (with its `id`), its content and,
    /// with a ttl, `expires_at_ms`.
    #[tool(
        name = "save_artifact",
        output_schema = schema_for_output::<ArtifactOutput>(),
        annotations(title = "Save an artifact", read_only_hint = false, destructive_hint = false, idempotent_hint = false, open_world_hint = false)
    )]
    async fn save_artifact(
        &self,
        Parameters(input): Parameters<SaveArtifactInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("save_artifact", Access::Write),
            move |s| {
                let expiry = ExpiryInput {
                    ttl_seconds: input.ttl_seconds,
                    expires_at_ms: None,
                    never_expires: input.never_expires,
                };
                Ok(s.artifact_save_expiring(input.artifact, expiry)?)
            },
            |o: &ArtifactOutput| {
                format!(
                    "Saved artifact {:?} as {:?} in scope {:?}.",
                    o.artifact.key,
                    o.artifact.id.to_string(),
                    o.artifact.scope
                )
            },
        )
        .await
    }

    /// Load artifacts into the prompt: the newest artifact of each key in `scope`, rendered as
    /// one `RELATED ARTIFACTS` text block to read or paste into a prompt. Name the keys as a
    /// list (`keys`) or as text mentioning them in braces (`text`, e.g. "use {plan} and
    /// {draft}"), not both. Returns the block, the ids rendered and the keys with no artifact.
    #[tool(
        name = "load_artifacts",
        output_schema = schema_for_output::<ArtifactLoadOutput>(),
        annotations(title = "Load artifacts into the prompt", read_only_hint = true, open_world_hint = false)
    )]
    async fn load_artifacts(
        &self,
        Parameters(input): Parameters<ArtifactLoadInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("load_artifacts", Access::Read),
            move |s| Ok(s.artifact_load(input)?),
            |o: &ArtifactLoadOutput| {
                let mut line = format!("Loaded {}.", plural(o.artifact_ids.len(), "artifact"));
                if !o.missing_keys.is_empty() {
                    line.push_str(&format!(" No artifact for: {}.", o.missing_keys.join(", ")));
                }
                line
            },
        )
        .await
    }

    /// List saved artifact records, a page at a time, in save order: every version of every
    /// key, of one `scope` or of every scope, optionally only those a `filter` selects (on
    /// `key`, `type`, `name`, `description`, `scope`, `created_at`, inline `data`,
    /// `expires_at`). Returns `artifacts` (each `{artifact, expires_at_ms?}`: the record with
    /// its `id`, `key`, `type`, `name`, `scope`, `created_at`; its content is left out,
    /// `data` is null) and, when there
    /// are more, a `next_cursor`. Use it to find what was saved; load_artifacts renders the
    /// newest version of keys for your prompt.
    #[tool(
        name = "list_artifacts",
        output_schema = schema_for_output::<ArtifactQueryOutput>(),
        annotations(title = "List artifacts", read_only_hint = true, open_world_hint = false)
    )]
    async fn list_artifacts(
        &self,
        Parameters(input): Parameters<ListArtifactsInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        self.run(
            context,
            ("list_artifacts", Access::Read),
            move |s| {
                // A listing is for finding records: inline content (which may be large) stays
                // out, as file content does (the operation leaves it out); load_artifacts
                // shows it.
                Ok(s.artifact_query(ArtifactQueryInput {
                    scope: input.scope,
                    filter: input.filter,
                    cursor: input.cursor,
                    limit: input.limit,
                })?)
            },
            |o: &ArtifactQueryOutput| format!("{}.", plural(o.artifacts.len(), "artifact record")),
        )
        .await
    }

    /// Search the library: the passages ("bits") of the served document library closest in
    /// meaning to `text`, best first, each with its text and `info` (source url, title).
    /// Use it to look up documentation or reference material. Returns `bits` and `details`.
    #[tool(
        name = "search_library",
        output_schema = schema_for_output::<LibraryQueryOutput>(),
        annotations(title = "Search the library", read_only_hint = true, open_world_hint = false)
    )]
    async fn search_library(
        &self,
        Parameters(input): Parameters<SearchLibraryInput>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let library = self.library.clone();
        self.run(
            context,
            ("search_library", Access::Read),
            move |s| {
                let guard = library
                    .as_ref()
                    .and_then(|source| source.current())
                    .ok_or(OpsError::NoLibrary)?;
                Ok(s.library_query(
                    &guard,
                    LibraryQueryInput {
                        text: Some(input.text),
                        embedding: None,
                        count: input.count,
                        count_type: None,
                        omit: None,
                        exact: false,
                    },
                )?)
            },
            |o: &LibraryQueryOutput| {
                let n =
                    o.0.get("bits")
                        .and_then(serde_json::Value::as_array)
                        .map_or(0, Vec::len);
                format!("Found {}.", plural(n, "passage"))
            },
        )
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for MnemonMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("mnemon", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;

    const MODEL: &str = "mnemon:hashing-v1-16";

    /// A fault of the service used to reach the model with its details (paths, hosts, schema
    /// versions), which REST keeps for the log: every key's holder could read them.
    #[test]
    fn internal_errors_keep_their_details_for_the_log() {
        let failure = Failure::Ops(OpsError::Unwritable {
            detail: "/srv/secret/mnemon.sqlite3 is damaged".into(),
        });
        assert_eq!(failure.code(), "internal");
        assert_eq!(failure.message(), INTERNAL_MESSAGE);
        // Errors of the caller's input keep their message.
        let failure = Failure::Ops(OpsError::SessionNotFound {
            session: "chat-9".into(),
        });
        assert!(failure.message().contains("chat-9"));
    }

    /// An unavailable part's details (the embedder's endpoint and answer, a database's host and
    /// user, a file's path) reached the model; the log keeps them, as REST's 503s do.
    #[test]
    fn unavailable_errors_keep_their_details_for_the_log() {
        let failure = Failure::Ops(OpsError::from(mnemon_memory::MemoryError::Embedder {
            model: "openai.com:m".into(),
            detail: "http://10.0.0.5:11434/v1/embeddings returned HTTP 500".into(),
        }));
        assert_eq!(failure.code(), "embedder_failed");
        let message = failure.message();
        assert!(!message.contains("10.0.0.5"), "{message}");
        assert!(message.contains("embedder failed"), "{message}");
    }

    /// `search_library` goes through the service's library query, so it is bounded by the
    /// service's result limit; past it, a tool error that asks for a lower count (the tool
    /// has no `omit`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn search_library_is_bounded_by_the_result_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = Vec::new();
        mnemon_library::synthetic::write_synthetic(&mut bytes, MODEL, 20, 16, 3).unwrap();
        let library = Arc::new(mnemon_library::Library::from_bytes(&bytes).unwrap());
        let embedder = mnemon_embed::embedder_for_model(MODEL).unwrap();
        // About 600 bytes a bit without its embedding: two fit in 2,000 bytes, five do not.
        let service = Service::new(mnemon_ops::Stores::open(dir.path()).unwrap())
            .with_embedder(Arc::from(embedder))
            .with_max_result_bytes(2_000);
        let server = MnemonMcp::new(service).with_library(library);
        let (client_end, server_end) = tokio::io::duplex(1 << 16);
        let running = tokio::spawn(async move {
            let served = server.serve(server_end).await.unwrap();
            served.waiting().await.unwrap();
        });
        let client = ().serve(client_end).await.unwrap();
        let search = |count: i64| {
            let mut arguments = serde_json::Map::new();
            arguments.insert("text".into(), "bees".into());
            arguments.insert("count".into(), count.into());
            client.call_tool(CallToolRequestParams::new("search_library").with_arguments(arguments))
        };
        let found = search(2).await.unwrap();
        assert_ne!(found.is_error, Some(true), "{found:?}");
        for count in [5, -1] {
            let refused = search(count).await.unwrap();
            assert_eq!(refused.is_error, Some(true), "{refused:?}");
            let text = refused.content[0].as_text().unwrap().text.clone();
            let error: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(error["error"]["code"], "result_too_large", "{text}");
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains("limit of 2000 bytes"), "{message}");
            assert!(
                message.contains("lower count") && !message.contains("omit"),
                "{message}"
            );
        }
        client.cancel().await.unwrap();
        running.await.unwrap();
    }
}
