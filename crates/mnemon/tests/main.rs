//! One test binary for the facade and the `mnemon` command line: each module was a binary of
//! its own (docs/ARCHITECTURE.md, "Tests").

mod agent_turn;
mod cli_asset_store;
mod cli_keys;
mod cli_library;
mod cli_library_import;
mod cli_library_text;
mod cli_mcp;
mod cli_memory;
mod cli_ops;
mod cli_postgres;
mod cli_ref;
mod cli_serve;
mod migrate;
