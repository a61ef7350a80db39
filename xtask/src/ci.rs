//! `cargo xtask ci`: the CI gate. Keep it in step with `.ci/run`.

use anyhow::Result;

use crate::cargo::{run_in, run_in_with_env, workspace_root};

/// The facade's runnable examples (`crates/mnemon/examples/`), each run to completion by CI.
const EXAMPLES: [&str; 3] = ["agent_turn", "library_search", "memory_recall"];

/// Runs formatting, lints, the schema check, the docs build, every test, the examples and a
/// release rehearsal, stopping at the first failure.
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
    run_in_with_env(
        &root,
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    run_in(&root, &["test", "--workspace"])?;
    for example in EXAMPLES {
        run_in(
            &root,
            &[
                "run",
                "--quiet",
                "--package",
                "mnemon",
                "--example",
                example,
            ],
        )?;
    }
    run_in(&root, &["xtask", "release", "0.2.0", "--dry-run"])?;
    Ok(())
}
