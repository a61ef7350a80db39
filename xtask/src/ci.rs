//! `cargo xtask ci`: the CI gate. Keep it in step with `.ci/run`.

use anyhow::Result;

use crate::cargo::{run_in, workspace_root};

/// Runs formatting, lints and every test, stopping at the first failure.
pub(crate) fn run() -> Result<()> {
    let root = workspace_root();
    run_in(&root, &["fmt", "--all", "--check"])?;
    run_in(
        &root,
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
    )?;
    run_in(&root, &["xtask", "codegen", "--check"])?;
    run_in(&root, &["test", "--workspace"])?;
    Ok(())
}
