//! Mnemon's Model Context Protocol server (docs/reference/mcp.md): conversation memory, assets,
//! artifacts and the served library as MCP tools an agent can use without reading our docs.
//!
//! * Every tool calls one or more operations of `mnemon-ops` ([`mnemon_ops::Service`]); there
//!   is no second implementation. Inputs are typed (serde + schemars: the tools' JSON Schemas),
//!   results come back as `structuredContent` (with its output schema) plus a text block, and
//!   failures are tool errors (`isError: true`) carrying the operation's error code and a
//!   message that says what to do ([`tools`]).
//! * Two transports: stdio ([`serve_stdio`], what `mnemon mcp` runs) and streamable HTTP
//!   ([`http_service`] / [`router`], an axum-compatible service the server mounts at `/mcp`).
//! * Which namespace a request runs in is a [`ServiceResolver`]'s choice: over HTTP it sees the
//!   request's head (its headers, e.g. an API key), over stdio nothing. A plain
//!   [`Service`] is a resolver that serves its one namespace.
//! * The library tool searches what a [`LibrarySource`] hands out at the moment of the call, so
//!   a server that reloads its library serves the new one at once.
//!
//! The stores are synchronous, so every tool runs its operation on tokio's blocking pool.

mod error;
pub mod tools;
mod transport;

pub use error::McpError;
pub use mnemon_ops;
pub use tools::{INTERNAL_MESSAGE, MnemonMcp};
pub use transport::{HttpOptions, http_service, router, serve_http, serve_stdio};

use std::ops::Deref;
use std::sync::Arc;

use axum::http::request::Parts;
use mnemon_library::Library;
use mnemon_ops::Service;

/// Why a request may not run: a tool error with this code and message (for example
/// `forbidden`, "this key may only read").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    /// A stable code, like the operations' error codes.
    pub code: String,
    /// What the caller should do about it.
    pub message: String,
}

/// Whether a tool only reads or also writes: what a key's role is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The tool only reads (recall, list_sessions, describe_asset, …).
    Read,
    /// The tool writes or deletes (remember, forget, put_asset, save_artifact).
    Write,
}

/// One tool call, as a [`ServiceResolver`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The HTTP request's head over streamable HTTP (its headers carry the caller's key);
    /// `None` over stdio.
    pub request: Option<&'a Parts>,
    /// The tool's name.
    pub tool: &'a str,
    /// Whether the tool writes.
    pub access: Access,
}

/// Picks the [`Service`] (the namespace's stores) a tool call runs against, or refuses it: the
/// hook through which API keys choose the namespace and check the role
/// (docs/reference/mcp.md#namespaces-and-keys).
///
/// Called on the blocking pool once per tool call, so it may open stores.
pub trait ServiceResolver: Send + Sync + 'static {
    /// The service for `call`, or why it may not run.
    fn resolve(&self, call: &Call<'_>) -> Result<Service, Denied>;
}

/// One namespace for every call: what `mnemon mcp` and a server without keys use.
impl ServiceResolver for Service {
    fn resolve(&self, _call: &Call<'_>) -> Result<Service, Denied> {
        Ok(self.clone())
    }
}

/// A resolver from a function, e.g. a server's key check and tenant lookup:
/// `ResolveWith(move |call: &Call<'_>| …)`.
#[derive(Debug, Clone)]
pub struct ResolveWith<F>(pub F);

impl<F> ServiceResolver for ResolveWith<F>
where
    F: Fn(&Call<'_>) -> Result<Service, Denied> + Send + Sync + 'static,
{
    fn resolve(&self, call: &Call<'_>) -> Result<Service, Denied> {
        (self.0)(call)
    }
}

/// A borrowed view of a library, held for the length of one call.
pub type LibraryGuard = Box<dyn Deref<Target = Library> + Send>;

/// Hands out the library the `search_library` tool searches, at the moment of each call.
pub trait LibrarySource: Send + Sync + 'static {
    /// The library now, or `None` when none is served.
    fn current(&self) -> Option<LibraryGuard>;
}

/// A fixed library (loaded once, as `mnemon mcp --library` does).
impl LibrarySource for Arc<Library> {
    fn current(&self) -> Option<LibraryGuard> {
        Some(Box::new(Arc::clone(self)))
    }
}

/// Any function returning the current library, e.g. the host's snapshot:
/// `move || Some(Box::new(handle.library()) as LibraryGuard)`.
impl<F> LibrarySource for F
where
    F: Fn() -> Option<LibraryGuard> + Send + Sync + 'static,
{
    fn current(&self) -> Option<LibraryGuard> {
        self()
    }
}
