//! Running cargo from the workspace root.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The workspace root (the parent of the xtask crate).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A `cargo` command, as the running toolchain's cargo.
pub(crate) fn command(dir: &Path) -> Command {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(dir);
    cmd
}

/// Runs `cargo ARGS` in `dir`, echoing the command, and fails when cargo fails.
pub(crate) fn run_in(dir: &Path, args: &[&str]) -> Result<()> {
    run_in_with_env(dir, args, &[])
}

/// [`run_in`] with extra environment variables.
pub(crate) fn run_in_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
    let shown: String = env.iter().map(|(k, v)| format!("{k}={v:?} ")).collect();
    eprintln!("$ {shown}cargo {}", args.join(" "));
    let status = command(dir)
        .args(args)
        .envs(env.iter().copied())
        .status()
        .context("could not start cargo")?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// Re-runs `cargo xtask bench <name> ARGS` from a release build of xtask when this process is a
/// debug build, so that a benchmark always measures optimised code: `true` when the release run
/// took over (and succeeded), `false` when this process is the release build and should measure.
pub(crate) fn rerun_bench_in_release(name: &str, args: &[String]) -> Result<bool> {
    if !cfg!(debug_assertions) {
        return Ok(false);
    }
    let status = command(&workspace_root())
        .args([
            "run",
            "--release",
            "--quiet",
            "--package",
            "xtask",
            "--",
            "bench",
            name,
        ])
        .args(args)
        .status()
        .context("running the release build of xtask")?;
    if !status.success() {
        bail!("the release benchmark failed ({status})");
    }
    Ok(true)
}

/// The build's target directory: `CARGO_TARGET_DIR` when set, else `target/` in the workspace.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from)
}

/// Builds the `mnemon` binary in release and returns its path, for the benchmarks that measure
/// it as a separate process.
pub(crate) fn release_mnemon() -> Result<PathBuf> {
    run_in(
        &workspace_root(),
        &["build", "--release", "--quiet", "--package", "mnemon"],
    )?;
    Ok(target_dir().join("release").join("mnemon"))
}
