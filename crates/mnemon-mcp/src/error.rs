//! The errors of running an MCP transport (tool failures are tool results, not these).

/// Why an MCP transport could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The stdio session could not be set up (the client did not initialize, or closed early).
    #[error(
        "the MCP session over stdio could not start: {detail}; check the client's command line"
    )]
    Initialize {
        /// What rmcp reported.
        detail: String,
    },
    /// The session ended with an error.
    #[error("the MCP session ended with an error: {detail}")]
    Session {
        /// What rmcp reported.
        detail: String,
    },
    /// The HTTP listener failed.
    #[error("the MCP HTTP endpoint failed: {0}; check that the address is free and reachable")]
    Io(#[from] std::io::Error),
}
