//! The `/v1` routes (docs/reference/rest.md): one table, from which both the router and the
//! OpenAPI document are built, so neither can list a route the other lacks.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use mnemon_host::HeldBody;
use mnemon_ops::Service;
use mnemon_ops::artifacts::{
    ArtifactIdInput, ArtifactLatestInput, ArtifactListInput, ArtifactListOutput, ArtifactLoadInput,
    ArtifactLoadOutput, ArtifactOutput, ArtifactQueryInput, ArtifactQueryOutput, ArtifactSaveInput,
    ArtifactScopesInput, ArtifactScopesOutput,
};
use mnemon_ops::assets::{
    AssetBody, AssetContent, AssetGetOutput, AssetIdInput, AssetListInput, AssetListOutput,
    AssetMetaInput, AssetMetaOutput, AssetPutBytesInput, AssetPutInput, AssetPutOutput,
    AssetQueryInput, AssetQueryOutput, AssetResolveInput, AssetResolveOutput, DeleteOutput,
};
use mnemon_ops::expiry::ExpiryInput;
use mnemon_ops::library::{
    LibraryListInput, LibraryListOutput, LibraryQueryInput, LibraryQueryOutput,
};
use mnemon_ops::maintenance::{ForgetInput, ForgetOutput, GcOutput};
use mnemon_ops::memory::{
    AddWith, DeleteMessagesInput, DeleteMessagesOutput, MarkInput, MarkOutput, MarksOutput,
    MemoryAddInput, MemoryAddOutput, MemoryExportInput, MemoryGetInput, MemoryGetOutput,
    MemoryImportInput, MemorySearchAcrossInput, MemorySearchAcrossOutput, MemorySearchInput,
    MemorySearchOutput, MessageInput, ReembedInput, ReembedPassOutput, SessionCreateOutput,
    SessionInput, SessionListInput, SessionListOutput, SessionOrder,
};
use mnemon_ops::refs::{RenderInput, RenderOutput, ResolveParamsInput, ResolveParamsOutput};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::auth::{Principal, Role};
use crate::error::RestError;
use crate::path::PathParams;
use crate::state::{AppState, to_json};
use crate::status::ServerStatus;

/// Makes the JSON Schema of a type, for the OpenAPI document.
pub(crate) type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// How a route's body or answer travels.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Content {
    /// JSON of the schema.
    Json(SchemaFn),
    /// Raw bytes of any media type (or JSON, for non-binary content).
    Raw,
}

/// One route: what the OpenAPI document says of it, and its handler.
pub(crate) struct Route {
    pub(crate) method: Method,
    pub(crate) path: &'static str,
    pub(crate) operation_id: &'static str,
    pub(crate) summary: &'static str,
    pub(crate) tag: &'static str,
    /// The least role it needs; `None`: no authentication.
    pub(crate) role: Option<Role>,
    /// Query parameters: the properties of this schema.
    pub(crate) query: Option<SchemaFn>,
    pub(crate) request: Option<Content>,
    pub(crate) status: StatusCode,
    pub(crate) response: Content,
    /// Whether the answer carries an ETag (and honours If-None-Match).
    pub(crate) etag: bool,
    pub(crate) handler: MethodRouter<AppState>,
}

#[allow(clippy::too_many_arguments)]
fn route(
    method: Method,
    path: &'static str,
    operation_id: &'static str,
    summary: &'static str,
    tag: &'static str,
    role: Option<Role>,
    status: StatusCode,
    response: Content,
    handler: MethodRouter<AppState>,
) -> Route {
    Route {
        etag: method == Method::GET && role.is_some(),
        method,
        path,
        operation_id,
        summary,
        tag,
        role,
        query: None,
        request: None,
        status,
        response,
        handler,
    }
}

impl Route {
    fn query(self, query: SchemaFn) -> Route {
        Route {
            query: Some(query),
            ..self
        }
    }

    fn body(self, request: Content) -> Route {
        Route {
            request: Some(request),
            ..self
        }
    }
}

use Content::{Json, Raw};
const OK: StatusCode = StatusCode::OK;
const CREATED: StatusCode = StatusCode::CREATED;
const R: Option<Role> = Some(Role::Read);
const W: Option<Role> = Some(Role::Write);
const A: Option<Role> = Some(Role::Admin);

/// Every `/v1` route and `/readyz`, in the order the document lists them.
pub(crate) fn table() -> Vec<Route> {
    vec![
        // Assets.
        route(
            Method::GET,
            "/v1/assets",
            "listAssets",
            "List asset ids (ascending), a page at a time",
            "assets",
            R,
            OK,
            Json(schema::<AssetListOutput>),
            get(asset_list),
        )
        .query(schema::<AssetListInput>),
        route(
            Method::POST,
            "/v1/assets",
            "putAsset",
            "Store an asset (a fresh id when it has none)",
            "assets",
            W,
            CREATED,
            Json(schema::<AssetPutOutput>),
            post(asset_put),
        )
        .query(schema::<ExpiryInput>)
        .body(Json(schema::<AssetBody>)),
        route(
            Method::GET,
            "/v1/assets/{asset_id}",
            "getAsset",
            "Read an asset (binary content as base64)",
            "assets",
            R,
            OK,
            Json(schema::<AssetGetOutput>),
            get(asset_get),
        ),
        route(
            Method::PUT,
            "/v1/assets/{asset_id}",
            "putAssetAt",
            "Store an asset under this id, replacing any",
            "assets",
            W,
            OK,
            Json(schema::<AssetPutOutput>),
            put(asset_put_at),
        )
        .query(schema::<ExpiryInput>)
        .body(Json(schema::<AssetBody>)),
        route(
            Method::DELETE,
            "/v1/assets/{asset_id}",
            "deleteAsset",
            "Remove an asset",
            "assets",
            W,
            OK,
            Json(schema::<DeleteOutput>),
            delete(asset_delete),
        ),
        route(
            Method::GET,
            "/v1/assets/{asset_id}/meta",
            "getAssetMeta",
            "An asset's meta: what a model is shown",
            "assets",
            R,
            OK,
            Json(schema::<AssetMetaOutput>),
            get(asset_meta),
        )
        .query(schema::<MetaQuery>),
        route(
            Method::GET,
            "/v1/assets/{asset_id}/content",
            "getAssetContent",
            "An asset's content: bytes raw with their media type, else JSON",
            "assets",
            R,
            OK,
            Raw,
            get(asset_content),
        ),
        route(
            Method::PUT,
            "/v1/assets/{asset_id}/content",
            "putAssetContent",
            "Store the raw body (with its Content-Type) as an asset's whole content",
            "assets",
            W,
            OK,
            Json(schema::<AssetPutOutput>),
            put(asset_put_content),
        )
        .query(schema::<ExpiryInput>)
        .body(Raw),
        route(
            Method::GET,
            "/v1/resolve",
            "resolveReference",
            "The value an asset:// reference points at",
            "references",
            R,
            OK,
            Json(schema::<AssetResolveOutput>),
            get(resolve),
        )
        .query(schema::<AssetResolveInput>),
        route(
            Method::POST,
            "/v1/query/assets",
            "queryAssets",
            "List the live assets a metadata filter selects (ids ascending, with their expiry), \
             a page at a time",
            "assets",
            R,
            OK,
            Json(schema::<AssetQueryOutput>),
            post(asset_query),
        )
        .body(Json(schema::<AssetQueryInput>)),
        // References.
        route(
            Method::POST,
            "/v1/refs/params",
            "resolveParams",
            "Substitute references in tool-call parameters, as a command spec allows",
            "references",
            R,
            OK,
            Json(schema::<ResolveParamsOutput>),
            post(refs_params),
        )
        .body(Json(schema::<ResolveParamsInput>)),
        route(
            Method::POST,
            "/v1/refs/render",
            "renderText",
            "Replace <|asset://…|> markers in text by their values",
            "references",
            R,
            OK,
            Json(schema::<RenderOutput>),
            post(refs_render),
        )
        .body(Json(schema::<RenderInput>)),
        // Artifacts.
        route(
            Method::POST,
            "/v1/artifacts",
            "saveArtifact",
            "Save an artifact (content first, then the record)",
            "artifacts",
            W,
            CREATED,
            Json(schema::<ArtifactOutput>),
            post(artifact_save),
        )
        .query(schema::<ExpiryInput>)
        .body(Json(schema::<ArtifactSaveInput>)),
        route(
            Method::GET,
            "/v1/artifacts",
            "listArtifacts",
            "A scope's artifact records in save order, a page at a time",
            "artifacts",
            R,
            OK,
            Json(schema::<ArtifactListOutput>),
            get(artifact_list),
        )
        .query(schema::<ArtifactListInput>),
        route(
            Method::GET,
            "/v1/artifacts/scopes",
            "listArtifactScopes",
            "The scopes that hold artifact records (ascending), a page at a time",
            "artifacts",
            R,
            OK,
            Json(schema::<ArtifactScopesOutput>),
            get(artifact_scopes),
        )
        .query(schema::<ArtifactScopesInput>),
        route(
            Method::GET,
            "/v1/artifacts/latest",
            "latestArtifact",
            "The newest artifact of a key in a scope, with its content",
            "artifacts",
            R,
            OK,
            Json(schema::<ArtifactOutput>),
            get(artifact_latest),
        )
        .query(schema::<ArtifactLatestInput>),
        route(
            Method::POST,
            "/v1/artifacts/load",
            "loadArtifacts",
            "Render the newest artifacts of keys as a prompt block",
            "artifacts",
            R,
            OK,
            Json(schema::<ArtifactLoadOutput>),
            post(artifact_load),
        )
        .body(Json(schema::<ArtifactLoadInput>)),
        route(
            Method::GET,
            "/v1/artifacts/{id}",
            "getArtifact",
            "One artifact record with its content",
            "artifacts",
            R,
            OK,
            Json(schema::<ArtifactOutput>),
            get(artifact_get),
        ),
        route(
            Method::DELETE,
            "/v1/artifacts/{id}",
            "deleteArtifact",
            "Remove an artifact record",
            "artifacts",
            W,
            OK,
            Json(schema::<DeleteOutput>),
            delete(artifact_delete),
        ),
        route(
            Method::POST,
            "/v1/query/artifacts",
            "queryArtifacts",
            "List the live artifact records a metadata filter selects (in one scope or all, in \
             save order, with their expiry), a page at a time",
            "artifacts",
            R,
            OK,
            Json(schema::<ArtifactQueryOutput>),
            post(artifact_query),
        )
        .body(Json(schema::<ArtifactQueryInput>)),
        // Memory.
        route(
            Method::GET,
            "/v1/memory/sessions",
            "listSessions",
            "The namespace's memory sessions with message counts and last activity, oldest \
             first or most recently active first, a page at a time",
            "memory",
            R,
            OK,
            Json(schema::<SessionListOutput>),
            get(sessions),
        )
        .query(schema::<SessionsQuery>),
        route(
            Method::PUT,
            "/v1/memory/sessions/{session}",
            "createSession",
            "Create a session (201), or find it there (200)",
            "memory",
            W,
            CREATED,
            Json(schema::<SessionCreateOutput>),
            put(session_create),
        ),
        route(
            Method::DELETE,
            "/v1/memory/sessions/{session}",
            "deleteSession",
            "Delete a session with its messages and marks",
            "memory",
            W,
            OK,
            Json(schema::<DeleteOutput>),
            delete(session_delete),
        ),
        route(
            Method::POST,
            "/v1/memory/sessions/{session}/messages",
            "addMessages",
            "Append messages to a session (created if needed), atomically",
            "memory",
            W,
            OK,
            Json(schema::<MemoryAddOutput>),
            post(memory_add),
        )
        .query(schema::<AddQuery>)
        .body(Json(schema::<MemoryAddInput>)),
        route(
            Method::GET,
            "/v1/memory/sessions/{session}/messages",
            "getMessages",
            "A session's messages: all, the last N, by mark, or within a token budget",
            "memory",
            R,
            OK,
            Json(schema::<MemoryGetOutput>),
            get(memory_get),
        )
        .query(schema::<MemoryGetInput>),
        route(
            Method::DELETE,
            "/v1/memory/sessions/{session}/messages/{id}",
            "deleteMessage",
            "Remove one message",
            "memory",
            W,
            OK,
            Json(schema::<DeleteMessagesOutput>),
            delete(memory_delete_message),
        ),
        route(
            Method::GET,
            "/v1/memory/sessions/{session}/messages/{id}/marks",
            "getMarks",
            "A message's marks",
            "memory",
            R,
            OK,
            Json(schema::<MarksOutput>),
            get(memory_marks_of),
        ),
        route(
            Method::POST,
            "/v1/memory/sessions/{session}/search",
            "searchMemory",
            "The messages closest to a vector or a text, by embedding",
            "memory",
            R,
            OK,
            Json(schema::<MemorySearchOutput>),
            post(memory_search),
        )
        .body(Json(schema::<MemorySearchInput>)),
        route(
            Method::POST,
            "/v1/memory/search",
            "searchMemoryAcross",
            "The messages closest to a vector or a text across every session a user, agent or \
             session scope selects (the whole namespace without one)",
            "memory",
            R,
            OK,
            Json(schema::<MemorySearchAcrossOutput>),
            post(memory_search_across),
        )
        .body(Json(schema::<MemorySearchAcrossInput>)),
        route(
            Method::POST,
            "/v1/memory/sessions/{session}/mark",
            "markMessages",
            "Put a mark on messages",
            "memory",
            W,
            OK,
            Json(schema::<MarkOutput>),
            post(memory_mark),
        )
        .body(Json(schema::<MarkInput>)),
        route(
            Method::POST,
            "/v1/memory/sessions/{session}/unmark",
            "unmarkMessages",
            "Take a mark off messages (all, without ids)",
            "memory",
            W,
            OK,
            Json(schema::<MarkOutput>),
            post(memory_unmark),
        )
        .body(Json(schema::<MarkInput>)),
        route(
            Method::GET,
            "/v1/memory/sessions/{session}/export",
            "exportSession",
            "A session as an AgentScope export document, byte for byte",
            "memory",
            R,
            OK,
            Raw,
            get(memory_export),
        )
        .query(schema::<ExportQuery>),
        route(
            Method::POST,
            "/v1/memory/sessions/{session}/import",
            "importSession",
            "Load an AgentScope export document into a session, atomically",
            "memory",
            W,
            OK,
            Json(schema::<MemoryAddOutput>),
            post(memory_import),
        )
        .body(Json(schema::<MemoryImportInput>)),
        route(
            Method::POST,
            "/v1/memory/reembed",
            "reembedMemory",
            "Re-embed, with the server's embedder, the messages of the namespace (or of a user, \
             agent or session) whose embedding another model (or none) made: at most 10,000 per \
             call, resumable (call again while `complete` is false, or run `mnemon memory \
             reembed`)",
            "memory",
            A,
            OK,
            Json(schema::<ReembedPassOutput>),
            post(memory_reembed),
        )
        .body(Json(schema::<ReembedInput>)),
        // Maintenance.
        route(
            Method::POST,
            "/v1/gc",
            "collectGarbage",
            "Remove what has expired in the namespace: assets, artifact records and their files",
            "maintenance",
            A,
            OK,
            Json(schema::<GcOutput>),
            post(gc),
        ),
        route(
            Method::POST,
            "/v1/forget",
            "forget",
            "Delete a subject (memory scope, asset id prefix, artifact scope prefix, or the whole \
             namespace by name) from every store, one transaction per store",
            "maintenance",
            A,
            OK,
            Json(schema::<ForgetOutput>),
            post(forget),
        )
        .body(Json(schema::<ForgetInput>)),
        // Library.
        route(
            Method::GET,
            "/v1/library/bits",
            "listBits",
            "The served library's untagged bits, a page at a time",
            "library",
            R,
            OK,
            Json(schema::<LibraryListOutput>),
            get(library_bits),
        )
        .query(schema::<LibraryListInput>),
        route(
            Method::POST,
            "/v1/library/query",
            "queryLibrary",
            "The served library's bits nearest a vector or a text",
            "library",
            R,
            OK,
            Json(schema::<LibraryQueryOutput>),
            post(library_query),
        )
        .body(Json(schema::<LibraryQueryInput>)),
        // Service.
        route(
            Method::GET,
            "/v1/status",
            "getStatus",
            "Version, backend, the namespace's sizes, limits and recent errors",
            "service",
            R,
            OK,
            Json(schema::<ServerStatus>),
            get(status),
        ),
        route(
            Method::GET,
            "/v1/openapi.json",
            "openapi",
            "This document",
            "service",
            None,
            OK,
            Raw,
            get(openapi),
        ),
        route(
            Method::GET,
            "/readyz",
            "ready",
            "Readiness: 200 when the database answers, else 503",
            "service",
            None,
            OK,
            Json(schema::<Ready>),
            get(readyz),
        ),
    ]
}

/// The query of `GET /v1/assets/{asset_id}/meta`.
#[derive(Debug, serde::Deserialize, JsonSchema)]
struct MetaQuery {
    /// Abbreviate strings longer than this many characters.
    #[serde(default)]
    max_string_len: Option<usize>,
}

/// The query of `GET /v1/memory/sessions/{session}/export`.
#[derive(Debug, serde::Deserialize, JsonSchema)]
struct ExportQuery {
    /// `agentscope-0.0` (default) or `agentscope-0.1`.
    #[serde(default)]
    format: mnemon_ops::memory::ExportFormatName,
    /// Also write each message's marks, as `"__marks"`.
    #[serde(default)]
    include_marks: bool,
}

/// The query of `POST /v1/memory/sessions/{session}/messages`.
#[derive(Debug, serde::Deserialize, JsonSchema)]
struct AddQuery {
    /// Give every message without an `embedding` one from the server's embedder before it is
    /// stored (the default), so that `POST /v1/memory/search` (which never embeds stored
    /// messages) finds it; the embedder's model is recorded. `false` stores the messages as
    /// they are. Without an embedder configured, nothing is embedded.
    #[serde(default = "embed_by_default")]
    embed: bool,
    /// The added messages expire this many seconds (at least 1) after the add.
    #[serde(default)]
    ttl_seconds: Option<u64>,
    /// The added messages expire at this instant (milliseconds since the Unix epoch, in the
    /// future).
    #[serde(default)]
    expires_at_ms: Option<i64>,
    /// The added messages never expire, whatever the namespace's default time-to-live.
    #[serde(default)]
    never_expires: bool,
}

/// Adds embed unless asked not to: an agent that adds over REST and searches across sessions
/// must find what it added (docs/reference/rest.md, "Search across sessions").
fn embed_by_default() -> bool {
    true
}

/// The query of `GET /v1/memory/sessions`.
#[derive(Debug, serde::Deserialize, JsonSchema)]
struct SessionsQuery {
    /// The `next_cursor` of the previous page (of the same `order`).
    #[serde(default)]
    cursor: Option<String>,
    /// At most this many sessions (default 100, at most 1,000).
    #[serde(default)]
    limit: Option<usize>,
    /// `created` (default: oldest first) or `activity` (most recently written first).
    #[serde(default)]
    order: SessionOrder,
}

/// The answer of `/readyz`.
#[derive(Debug, Serialize, JsonSchema)]
struct Ready {
    /// `ready`.
    status: &'static str,
}

// ---- Helpers ---------------------------------------------------------------------------------

/// The query string as `T`; 400 with what to fix otherwise.
fn query<T: DeserializeOwned>(uri: &Uri) -> Result<T, RestError> {
    Query::<T>::try_from_uri(uri)
        .map(|Query(q)| q)
        .map_err(|e| RestError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))
}

/// The body, read under the host's limits, as JSON `T`.
async fn json_body<T: DeserializeOwned>(
    state: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(T, HeldBody), RestError> {
    refuse_form_types(headers)?;
    let held = state.limits.read_body(headers, body).await?;
    let value = serde_json::from_slice(&held.bytes).map_err(|e| {
        RestError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!(
                "the body is not the JSON this route takes: {e}; /v1/openapi.json has its schema"
            ),
        )
    })?;
    Ok((value, held))
}

/// Refuses a JSON route's body declared as one of the types an HTML form (or a page's
/// request without a preflight) can send: a browser too old to say which site a request comes
/// from (docs/reference/rest.md#browsers) would otherwise let another site's form post JSON
/// in plain text. A body with no type, or any other, is read as JSON.
fn refuse_form_types(headers: &HeaderMap) -> Result<(), RestError> {
    let Some(declared) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    // A value that is not visible ASCII cannot be read as a type: refused as a form's would be
    // (read as empty, it let any bytes after a form type through).
    let Ok(declared) = declared.to_str() else {
        return Err(RestError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "the Content-Type header holds bytes outside visible ASCII; send the body as \
             Content-Type: application/json",
        ));
    };
    let media = declared.split(';').next().unwrap_or_default().trim();
    let form = [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
    ]
    .iter()
    .any(|form| media.eq_ignore_ascii_case(form));
    if form {
        return Err(RestError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!(
                "the body is JSON, so send it as Content-Type: application/json, not {media}; \
                 a form's types are refused so that no web page's form can post here"
            ),
        ));
    }
    Ok(())
}

fn json_response(status: StatusCode, bytes: Vec<u8>) -> Response {
    let mut response = (status, bytes).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON answer.
fn answer(status: StatusCode, value: &impl Serialize) -> Result<Response, RestError> {
    Ok(json_response(status, to_json(value)?))
}

/// The strong ETag of an answer's bytes: its SHA-256, so every server over the same data gives
/// the same tag.
fn etag_of(content_type: &HeaderValue, bytes: &[u8]) -> String {
    // The type is part of what is served: the same bytes stored again as `text/html` instead
    // of `text/plain` must not be answered 304 to a cache holding the old type.
    let mut hasher = Sha256::new();
    hasher.update(content_type.as_bytes());
    hasher.update([0u8]);
    hasher.update(bytes);
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

/// Whether `If-None-Match` names `etag` (or is `*`).
fn matches_etag(headers: &HeaderMap, etag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag == etag || tag.strip_prefix("W/") == Some(etag))
}

/// A read's answer with its ETag: 304 without a body when the client has it already.
fn read_answer(headers: &HeaderMap, content_type: HeaderValue, bytes: Vec<u8>) -> Response {
    let etag = etag_of(&content_type, &bytes);
    let mut response = if matches_etag(headers, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut response = (StatusCode::OK, bytes).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type);
        response
    };
    if let Ok(value) = HeaderValue::from_str(&etag) {
        response.headers_mut().insert(header::ETAG, value);
    }
    response
}

fn read_json(headers: &HeaderMap, value: &impl Serialize) -> Result<Response, RestError> {
    Ok(read_answer(
        headers,
        HeaderValue::from_static("application/json"),
        to_json(value)?,
    ))
}

type Answer = Result<Response, RestError>;

// ---- Assets ----------------------------------------------------------------------------------

async fn asset_list(State(s): State<AppState>, p: Principal, uri: Uri, h: HeaderMap) -> Answer {
    let input: AssetListInput = query(&uri)?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.asset_list(input))
        .await?;
    read_json(&h, &out)
}

async fn asset_put(
    State(s): State<AppState>,
    p: Principal,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let expiry: ExpiryInput = query(&uri)?;
    let (asset, _held): (AssetBody, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.asset_put_expiring(AssetPutInput { asset }, expiry)
        })
        .await?;
    answer(CREATED, &out)
}

async fn asset_query(State(s): State<AppState>, p: Principal, h: HeaderMap, body: Body) -> Answer {
    let (input, _held): (AssetQueryInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.asset_query(input))
        .await?;
    answer(OK, &out)
}

async fn asset_get(
    State(s): State<AppState>,
    p: Principal,
    PathParams(asset_id): PathParams<String>,
    h: HeaderMap,
) -> Answer {
    let out = s
        .call(&p, Role::Read, move |svc| {
            svc.asset_get(AssetIdInput { asset_id })
        })
        .await?;
    read_json(&h, &out)
}

async fn asset_put_at(
    State(s): State<AppState>,
    p: Principal,
    PathParams(asset_id): PathParams<String>,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let expiry: ExpiryInput = query(&uri)?;
    let (asset, _held): (AssetBody, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.asset_put_at_expiring(&asset_id, asset, expiry)
        })
        .await?;
    answer(OK, &out)
}

async fn asset_delete(
    State(s): State<AppState>,
    p: Principal,
    PathParams(asset_id): PathParams<String>,
) -> Answer {
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.asset_delete(AssetIdInput { asset_id })
        })
        .await?;
    answer(OK, &out)
}

async fn asset_meta(
    State(s): State<AppState>,
    p: Principal,
    PathParams(asset_id): PathParams<String>,
    uri: Uri,
    h: HeaderMap,
) -> Answer {
    let q: MetaQuery = query(&uri)?;
    let out = s
        .call(&p, Role::Read, move |svc| {
            svc.asset_meta(AssetMetaInput {
                asset_id,
                max_string_len: q.max_string_len,
            })
        })
        .await?;
    read_json(&h, &out)
}

async fn asset_content(
    State(s): State<AppState>,
    p: Principal,
    PathParams(asset_id): PathParams<String>,
    h: HeaderMap,
) -> Answer {
    let content = s
        .call(&p, Role::Read, move |svc| {
            svc.asset_content(AssetIdInput { asset_id })
        })
        .await?;
    Ok(match content {
        AssetContent::Bytes { data, content_type } => {
            let media = content_type
                .and_then(|m| HeaderValue::from_str(&m).ok())
                .unwrap_or(HeaderValue::from_static("application/octet-stream"));
            let mut response = read_answer(&h, media, data);
            // The bytes are whatever a client stored (a web page an agent fetched, say), served
            // from the server's own origin, where the inspector holds a key: opened in a
            // browser, an HTML or SVG asset must not run scripts as that origin. `sandbox`
            // gives the document an origin of its own and no scripts; images still show.
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox"),
            );
            headers.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            response
        }
        AssetContent::Json(json) => read_json(&h, &json)?,
    })
}

async fn asset_put_content(
    State(s): State<AppState>,
    p: Principal,
    PathParams(asset_id): PathParams<String>,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let expiry: ExpiryInput = query(&uri)?;
    let held = s.limits.read_body(&h, body).await?;
    let content_type = h
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.asset_put_bytes_expiring(
                AssetPutBytesInput {
                    asset_id,
                    content_type,
                    data: held.bytes,
                },
                expiry,
            )
        })
        .await?;
    answer(OK, &out)
}

async fn resolve(State(s): State<AppState>, p: Principal, uri: Uri, h: HeaderMap) -> Answer {
    let input: AssetResolveInput = query(&uri)?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.asset_resolve(input))
        .await?;
    read_json(&h, &out)
}

// ---- References ------------------------------------------------------------------------------

async fn refs_params(State(s): State<AppState>, p: Principal, h: HeaderMap, body: Body) -> Answer {
    let (input, _held): (ResolveParamsInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.refs_resolve_params(input))
        .await?;
    answer(OK, &out)
}

async fn refs_render(State(s): State<AppState>, p: Principal, h: HeaderMap, body: Body) -> Answer {
    let (input, _held): (RenderInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.refs_render(input))
        .await?;
    answer(OK, &out)
}

// ---- Artifacts -------------------------------------------------------------------------------

async fn artifact_save(
    State(s): State<AppState>,
    p: Principal,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let expiry: ExpiryInput = query(&uri)?;
    let (input, _held): (ArtifactSaveInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.artifact_save_expiring(input, expiry)
        })
        .await?;
    answer(CREATED, &out)
}

async fn artifact_query(
    State(s): State<AppState>,
    p: Principal,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (input, _held): (ArtifactQueryInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.artifact_query(input))
        .await?;
    answer(OK, &out)
}

async fn artifact_list(State(s): State<AppState>, p: Principal, uri: Uri, h: HeaderMap) -> Answer {
    let input: ArtifactListInput = query(&uri)?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.artifact_list(input))
        .await?;
    read_json(&h, &out)
}

async fn artifact_scopes(
    State(s): State<AppState>,
    p: Principal,
    uri: Uri,
    h: HeaderMap,
) -> Answer {
    let input: ArtifactScopesInput = query(&uri)?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.artifact_scopes(input))
        .await?;
    read_json(&h, &out)
}

async fn artifact_latest(
    State(s): State<AppState>,
    p: Principal,
    uri: Uri,
    h: HeaderMap,
) -> Answer {
    let input: ArtifactLatestInput = query(&uri)?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.artifact_latest(input))
        .await?;
    read_json(&h, &out)
}

async fn artifact_load(
    State(s): State<AppState>,
    p: Principal,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (input, _held): (ArtifactLoadInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.artifact_load(input))
        .await?;
    answer(OK, &out)
}

async fn artifact_get(
    State(s): State<AppState>,
    p: Principal,
    PathParams(id): PathParams<String>,
    h: HeaderMap,
) -> Answer {
    let out = s
        .call(&p, Role::Read, move |svc| {
            svc.artifact_get(ArtifactIdInput { id })
        })
        .await?;
    read_json(&h, &out)
}

async fn artifact_delete(
    State(s): State<AppState>,
    p: Principal,
    PathParams(id): PathParams<String>,
) -> Answer {
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.artifact_delete(ArtifactIdInput { id })
        })
        .await?;
    answer(OK, &out)
}

// ---- Memory ----------------------------------------------------------------------------------

async fn sessions(State(s): State<AppState>, p: Principal, uri: Uri, h: HeaderMap) -> Answer {
    let q: SessionsQuery = query(&uri)?;
    let input = SessionListInput {
        cursor: q.cursor,
        limit: q.limit,
    };
    let out = s
        .call(&p, Role::Read, move |svc| match q.order {
            SessionOrder::Created => svc.memory_sessions_with_counts(input),
            SessionOrder::Activity => svc.memory_sessions_by_activity(input),
        })
        .await?;
    read_json(&h, &out)
}

async fn session_create(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
) -> Answer {
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.memory_session_create(SessionInput { session })
        })
        .await?;
    answer(if out.created { CREATED } else { OK }, &out)
}

async fn session_delete(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
) -> Answer {
    let out = s
        .call(&p, Role::Write, move |svc| {
            svc.memory_session_delete(SessionInput { session })
        })
        .await?;
    answer(OK, &out)
}

async fn memory_add(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
    uri: Uri,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let q: AddQuery = query(&uri)?;
    let (mut input, _held): (MemoryAddInput, _) = json_body(&s, &h, body).await?;
    input.session = session;
    let out = s
        .call(&p, Role::Write, move |svc| {
            let with = AddWith {
                embed: q.embed,
                expiry: ExpiryInput {
                    ttl_seconds: q.ttl_seconds,
                    expires_at_ms: q.expires_at_ms,
                    never_expires: q.never_expires,
                },
            };
            svc.memory_add_with(input, &with)
        })
        .await?;
    answer(OK, &out)
}

async fn memory_get(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
    uri: Uri,
    h: HeaderMap,
) -> Answer {
    let mut input: MemoryGetInput = query(&uri)?;
    input.session = session;
    let out = s
        .call(&p, Role::Read, move |svc| svc.memory_get(input))
        .await?;
    read_json(&h, &out)
}

async fn memory_delete_message(
    State(s): State<AppState>,
    p: Principal,
    PathParams((session, id)): PathParams<(String, String)>,
) -> Answer {
    let out = s
        .call(&p, Role::Write, move |svc| {
            let report = svc.memory_delete_messages(DeleteMessagesInput {
                session: session.clone(),
                ids: vec![id.clone()],
            })?;
            if report.deleted.is_empty() {
                return Err(mnemon_ops::OpsError::MessageNotFound { session, id });
            }
            Ok(report)
        })
        .await?;
    answer(OK, &out)
}

async fn memory_marks_of(
    State(s): State<AppState>,
    p: Principal,
    PathParams((session, id)): PathParams<(String, String)>,
    h: HeaderMap,
) -> Answer {
    let out = s
        .call(&p, Role::Read, move |svc| {
            svc.memory_marks_of(MessageInput { session, id })
        })
        .await?;
    read_json(&h, &out)
}

async fn memory_search(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (mut input, _held): (MemorySearchInput, _) = json_body(&s, &h, body).await?;
    input.session = session;
    let out = s
        .call(&p, Role::Read, move |svc| svc.memory_search(input))
        .await?;
    answer(OK, &out)
}

async fn memory_search_across(
    State(s): State<AppState>,
    p: Principal,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (input, _held): (MemorySearchAcrossInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Read, move |svc| svc.memory_search_across(input))
        .await?;
    answer(OK, &out)
}

async fn memory_mark(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (mut input, _held): (MarkInput, _) = json_body(&s, &h, body).await?;
    input.session = session;
    let out = s
        .call(&p, Role::Write, move |svc| svc.memory_mark(input))
        .await?;
    answer(OK, &out)
}

async fn memory_unmark(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (mut input, _held): (MarkInput, _) = json_body(&s, &h, body).await?;
    input.session = session;
    let out = s
        .call(&p, Role::Write, move |svc| svc.memory_unmark(input))
        .await?;
    answer(OK, &out)
}

async fn memory_export(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
    uri: Uri,
    h: HeaderMap,
) -> Answer {
    let q: ExportQuery = query(&uri)?;
    let out = s
        .call(&p, Role::Read, move |svc| {
            svc.memory_export(MemoryExportInput {
                session,
                format: q.format,
                include_marks: q.include_marks,
            })
        })
        .await?;
    Ok(read_answer(
        &h,
        HeaderValue::from_static("application/json"),
        out.document.into_bytes(),
    ))
}

async fn memory_import(
    State(s): State<AppState>,
    p: Principal,
    PathParams(session): PathParams<String>,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (mut input, _held): (MemoryImportInput, _) = json_body(&s, &h, body).await?;
    input.session = session;
    let out = s
        .call(&p, Role::Write, move |svc| svc.memory_import(input))
        .await?;
    answer(OK, &out)
}

// ---- Maintenance -----------------------------------------------------------------------------

/// The most messages one `POST /v1/memory/reembed` re-embeds: the call runs synchronously
/// inside the request timeout, so a large namespace takes several calls (each resumes where
/// the last stopped) or `mnemon memory reembed`, which has no bound
/// (docs/reference/rest.md#re-embedding).
const REEMBED_PER_CALL: u64 = 10_000;

async fn memory_reembed(
    State(s): State<AppState>,
    p: Principal,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (input, _held): (ReembedInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Admin, move |svc| {
            svc.memory_reembed_at_most(input, REEMBED_PER_CALL)
        })
        .await?;
    answer(OK, &out)
}

async fn gc(State(s): State<AppState>, p: Principal) -> Answer {
    let out = s.call(&p, Role::Admin, |svc| svc.gc()).await?;
    answer(OK, &out)
}

async fn forget(State(s): State<AppState>, p: Principal, h: HeaderMap, body: Body) -> Answer {
    let (input, _held): (ForgetInput, _) = json_body(&s, &h, body).await?;
    let out = s
        .call(&p, Role::Admin, move |svc| svc.forget(input))
        .await?;
    answer(OK, &out)
}

// ---- Library ---------------------------------------------------------------------------------

async fn library_bits(State(s): State<AppState>, p: Principal, uri: Uri, h: HeaderMap) -> Answer {
    let input: LibraryListInput = query(&uri)?;
    let library = s.host.library();
    let out = s
        .call(&p, Role::Read, move |svc: &Service| {
            svc.library_list(&library, input)
        })
        .await?;
    read_json(&h, &out)
}

async fn library_query(
    State(s): State<AppState>,
    p: Principal,
    h: HeaderMap,
    body: Body,
) -> Answer {
    let (input, _held): (LibraryQueryInput, _) = json_body(&s, &h, body).await?;
    let library = s.host.library();
    let out = s
        .call(&p, Role::Read, move |svc: &Service| {
            svc.library_query(&library, input)
        })
        .await?;
    answer(OK, &out)
}

// ---- Service ---------------------------------------------------------------------------------

async fn openapi(h: HeaderMap) -> Response {
    read_answer(
        &h,
        HeaderValue::from_static("application/json"),
        crate::openapi::document_text().into_bytes(),
    )
}

async fn status(State(s): State<AppState>, p: Principal, h: HeaderMap) -> Answer {
    let out = s.call(&p, Role::Read, |svc| svc.status()).await?;
    let status = ServerStatus {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        namespace: out.namespace,
        backend: out.backend,
        sizes: out.sizes,
        limits: s.limits_status.clone(),
        recent_errors: s.errors.visible_to(&p),
    };
    read_json(&h, &status)
}

async fn readyz(State(s): State<AppState>) -> Answer {
    let tenants = std::sync::Arc::clone(&s.tenants);
    let namespace = s.ready_namespace.clone();
    let outcome = tokio::task::spawn_blocking(move || tenants.get(&namespace)?.ping())
        .await
        .map_err(|e| RestError::internal(&e))?;
    match outcome {
        Ok(()) => answer(OK, &Ready { status: "ready" }),
        // The cause goes to the log only: this route needs no key, and a database error can
        // name hosts, users and files.
        Err(error) => {
            tracing::warn!(%error, "not ready: the database does not answer");
            Err(RestError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "the database does not answer; the server's log has the cause",
            ))
        }
    }
}

/// A `/v1` path served, but not with this method.
pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> RestError {
    RestError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{method} is not served on {}; /v1/openapi.json lists the methods of every route",
            uri.path()
        ),
    )
}

/// `/v1/…` paths no route serves.
pub(crate) async fn not_found(uri: Uri) -> RestError {
    RestError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        format!(
            "no route {}; /v1/openapi.json lists every route",
            uri.path()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_match_plain_weak_and_star() {
        let json = HeaderValue::from_static("application/json");
        let tag = etag_of(&json, b"{}");
        assert!(tag.starts_with('"') && tag.ends_with('"') && tag.len() == 34);
        // The type is part of the tag.
        assert_ne!(tag, etag_of(&HeaderValue::from_static("text/plain"), b"{}"));
        let mut headers = HeaderMap::new();
        assert!(!matches_etag(&headers, &tag));
        headers.insert(
            header::IF_NONE_MATCH,
            HeaderValue::from_str(&format!("\"x\", W/{tag}"))
                .unwrap_or(HeaderValue::from_static("")),
        );
        assert!(matches_etag(&headers, &tag));
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_static("*"));
        assert!(matches_etag(&headers, &tag));
        headers.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"other\""));
        assert!(!matches_etag(&headers, &tag));
    }

    #[test]
    fn every_route_is_unique() {
        let table = table();
        let mut seen = std::collections::HashSet::new();
        for route in &table {
            assert!(
                seen.insert((route.method.clone(), route.path)),
                "{}",
                route.path
            );
        }
        let ids: std::collections::HashSet<_> = table.iter().map(|r| r.operation_id).collect();
        assert_eq!(ids.len(), table.len());
    }
}
