//! One test binary for the cross-crate, conformance and fixture tests: each module was a
//! binary of its own, and linking the workspace once instead of sixteen times is most of the
//! test build (docs/ARCHITECTURE.md, "Tests"). `host_logging` stays apart because it installs
//! the process-wide tracing subscriber, and `host_signals` because it signals its process.

mod artifacts_backends;
mod artifacts_memory;
mod artifacts_save;
mod artifacts_store;
mod asset_crash;
mod asset_sqlite;
mod asset_store;
mod backup;
mod db_postgres;
mod filter_sql;
mod host_protocol;
mod host_queries;
mod host_support;
mod keys;
mod library_conformance;
mod memory_conformance;
mod memory_msg_fixtures;
mod memory_postgres;
mod memory_processes;
mod memory_sqlite;
mod ops_memory;
mod postgres_server;
mod refs_store;
mod sqlite_writers;
mod store_sweeps;

/// The name the test harness gives the test `name` of the module at `module_path`
/// (`module_path!()`): the path without this binary's crate name, as `--exact` wants it. The
/// crash tests re-run this binary to run one test as their child process.
fn harness_name(module_path: &str, name: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{name}"),
        None => name.to_owned(),
    }
}
