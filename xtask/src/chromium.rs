//! `cargo xtask chromium install`: headless Chromium and chromedriver for the inspector's
//! browser tests (docs/reference/inspector.md#tests), from Debian's `chromium` and
//! `chromium-driver` packages.
//!
//! The task is idempotent: when both programs are on the PATH it does nothing. Otherwise it runs
//! `apt-get install -y chromium chromium-driver` (`crate::apt`), and fails saying what to
//! install when there is no apt-get.
//! `cargo xtask test` calls [`install`] and then sets `MNEMON_REQUIRE_BROWSER=1`, so the
//! browser tests fail instead of skipping.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::apt;

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
    if apt::on_path("apt-get").is_none() {
        bail!(
            "the inspector's browser tests need Chromium and chromedriver on the PATH; \
             install them (Debian: apt-get install chromium chromium-driver) or set \
             MNEMON_CHROMIUM and MNEMON_CHROMEDRIVER"
        );
    }
    apt::install(&PACKAGES, "the inspector's browser tests")?;
    find().context("apt-get installed chromium and chromium-driver, but they are not on the PATH")
}

fn find() -> Option<(PathBuf, PathBuf)> {
    Some((apt::on_path("chromium")?, apt::on_path("chromedriver")?))
}
