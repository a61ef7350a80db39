//! `cargo xtask ci`: the CI gate, which is `.ci/run` itself, so that the two can never drift
//! apart (formatting, lints, the schema check, the docs build, every test, the examples, the
//! original clients in `tests/clients/` and a release rehearsal).

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cargo::workspace_root;

/// Runs `.ci/run` from the workspace root, stopping at its first failure.
pub(crate) fn run() -> Result<()> {
    let root = workspace_root();
    let status = Command::new("bash")
        .arg(root.join(".ci/run"))
        .current_dir(&root)
        .status()
        .context("could not start bash to run .ci/run")?;
    if !status.success() {
        bail!(".ci/run failed ({status})");
    }
    Ok(())
}
