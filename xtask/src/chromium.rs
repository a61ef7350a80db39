//! `cargo xtask chromium install`: headless Chromium and chromedriver for the inspector's
//! browser tests (docs/reference/inspector.md#tests), from Debian's `chromium` and
//! `chromium-driver` packages.
//!
//! The task is idempotent: when both programs are on the PATH it does nothing. Otherwise it runs
//! `apt-get install -y chromium chromium-driver` (after `apt-get update`), through `sudo` when
//! not running as root, and fails saying what to install when there is no apt-get.
//! `cargo xtask test` calls [`install`] and then sets `MNEMON_REQUIRE_BROWSER=1`, so the
//! browser tests fail instead of skipping.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

const USAGE: &str = "usage: cargo xtask chromium install";

/// The Debian packages.
const PACKAGES: [&str; 2] = ["chromium", "chromium-driver"];

/// Runs the task.
pub(crate) fn run(args: &[String]) -> Result<()> {
    match args {
        [task] if task == "install" => {
            let (browser, driver) = install()?;
            println!("{}\n{}", browser.display(), driver.display());
            Ok(())
        }
        _ => bail!("{USAGE}"),
    }
}

/// Makes sure `chromium` and `chromedriver` are on the PATH, installing them if needed; answers
/// their paths.
pub(crate) fn install() -> Result<(PathBuf, PathBuf)> {
    if let Some(found) = find() {
        return Ok(found);
    }
    let Some(apt) = on_path("apt-get") else {
        bail!(
            "the inspector's browser tests need Chromium and chromedriver on the PATH; \
             install them (Debian: apt-get install chromium chromium-driver) or set \
             MNEMON_CHROMIUM and MNEMON_CHROMEDRIVER"
        );
    };
    let root = is_root();
    for args in [
        vec!["update", "-qq"],
        [&["install", "-y", "-qq"][..], &PACKAGES[..]].concat(),
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
    find().context("apt-get installed chromium and chromium-driver, but they are not on the PATH")
}

fn find() -> Option<(PathBuf, PathBuf)> {
    Some((on_path("chromium")?, on_path("chromedriver")?))
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
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
