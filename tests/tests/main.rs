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

/// Runs the ignored test `name` of the module at `module_path` alone under strace, with `env`
/// set to `dir`, and returns its `fsync`/`fdatasync` calls, each naming its file (`-y`), or
/// `None` after saying why in one `SKIPPED: {what}: …` line (no strace, or tracing refused);
/// with `MNEMON_REQUIRE_STRACE=1` (`cargo xtask test`, CI) it fails instead.
#[allow(clippy::unwrap_used)]
fn syncs_under_strace(
    what: &str,
    module_path: &str,
    name: &str,
    env: &str,
    dir: &std::path::Path,
) -> Option<String> {
    let skip = |why: String| {
        if std::env::var("MNEMON_REQUIRE_STRACE").is_ok_and(|v| v == "1") {
            panic!("MNEMON_REQUIRE_STRACE=1 but {why}");
        }
        eprintln!("SKIPPED: {what}: {why}");
        None
    };
    let trace = dir.join("trace");
    let run = std::process::Command::new("strace")
        .args(["-f", "-qq", "-y", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .arg(harness_name(module_path, name))
        .args(["--exact", "--ignored", "--test-threads=1"])
        .env(env, dir)
        .output();
    let output = match run {
        Ok(output) => output,
        Err(e) => {
            return skip(format!(
                "cannot run strace ({e}); install it (apt-get install strace)"
            ));
        }
    };
    if !output.status.success() {
        return skip(format!(
            "strace failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Some(std::fs::read_to_string(&trace).unwrap())
}
