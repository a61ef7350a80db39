//! Debian packages the tests need (Chromium for the inspector's browser tests, strace for the
//! sync check of the bundled SQLite), installed with `apt-get` when their programs are missing.
//!
//! [`install`] runs `apt-get update` then `apt-get install -y` through `sudo` when not running as
//! root, and fails saying what to install by hand when there is no `apt-get`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Installs the Debian `packages`; `what` names what they are for, in the error without apt-get.
pub(crate) fn install(packages: &[&str], what: &str) -> Result<()> {
    let Some(apt) = on_path("apt-get") else {
        bail!(
            "{what}: no apt-get here; install them yourself (Debian: apt-get install {})",
            packages.join(" ")
        );
    };
    let root = is_root();
    // A freshly booted machine's own apt jobs (apt-daily, unattended upgrades) may hold the
    // lock for a while: wait for it, and retry downloads, rather than fail at once.
    let patient = ["-o", "DPkg::Lock::Timeout=600", "-o", "Acquire::Retries=5"];
    for args in [
        [&patient[..], &["update", "-qq"]].concat(),
        [&patient[..], &["install", "-y", "-qq"], packages].concat(),
    ] {
        let mut cmd = if root {
            Command::new(&apt)
        } else {
            let mut sudo = Command::new("sudo");
            sudo.arg(&apt);
            sudo
        };
        eprintln!(
            "$ {}apt-get {}",
            if root { "" } else { "sudo " },
            args.join(" ")
        );
        let status = cmd
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("could not run apt-get")?;
        if !status.success() {
            bail!("`apt-get {}` failed ({status})", args.join(" "));
        }
    }
    Ok(())
}

/// The program `name` on the PATH, if any.
pub(crate) fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Makes sure the program `name` is on the PATH, installing the Debian package of the same name
/// if needed (`what`: what the tests use it for); answers its path.
pub(crate) fn ensure(name: &str, what: &str) -> Result<PathBuf> {
    if let Some(found) = on_path(name) {
        return Ok(found);
    }
    install(&[name], what)?;
    on_path(name).with_context(|| format!("apt-get installed {name}, but it is not on the PATH"))
}

/// Whether this process runs as root (uid 0), from `/proc/self/status`.
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}
