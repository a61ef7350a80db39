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
