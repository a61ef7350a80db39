//! `cargo xtask test`: every test, on a fresh machine, with one command (the README's test
//! command, and what `.ci/run` runs).
//!
//! 1. Installs the PostgreSQL 16 + pgvector binaries the PostgreSQL suites start
//!    (`cargo xtask postgres install`, docs/postgres.md) and sets `MNEMON_REQUIRE_POSTGRES=1`,
//!    so those suites fail instead of skipping when the server cannot start.
//! 2. Installs headless Chromium and chromedriver for the inspector's browser tests
//!    (`cargo xtask chromium install`, Debian packages) and sets `MNEMON_REQUIRE_BROWSER=1`, so
//!    those tests fail instead of skipping when the browser cannot start. Installs `strace`
//!    (Debian package) for the check that the bundled SQLite syncs with `fdatasync`
//!    (`mnemon-db`, docs/reference/config.md#durability) and sets `MNEMON_REQUIRE_STRACE=1`.
//!    Then runs `cargo test --workspace`.
//! 3. Runs the original clients against what Mnemon serves and writes (`tests/clients/`):
//!    Polymath's TypeScript client against `mnemon serve` (after `npm ci`), and AgentScope 0.1.6
//!    loading a `memory export --format agentscope-0.1` file (in a virtual environment under
//!    `target/client-venv`, created on first use), and the official MCP Python SDK driving
//!    every `mnemon mcp` tool over stdio and streamable HTTP (`tests/clients/mcp.sh`, its own
//!    virtual environment under `target/mcp-venv`). Node.js with npm and python3 with `venv`
//!    are installed first (Debian packages `nodejs`, `npm`, `python3-venv`) when missing. The
//!    package registries (Debian, npm, PyPI) are the only network used.
//!
//! `--no-clients` skips step 3 (for machines without node or python3, and no apt-get).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::cargo::{run_in, run_in_with_env, workspace_root};
use crate::{apt, chromium, postgres};

const USAGE: &str = "usage: cargo xtask test [--no-clients]";

/// The AgentScope release whose loader the memory export must satisfy.
const AGENTSCOPE: &str = "agentscope==0.1.6";

/// Runs the whole test suite; see the module docs.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let clients = match args {
        [] => true,
        [flag] if flag == "--no-clients" => false,
        _ => bail!("{USAGE}"),
    };
    let root = workspace_root();
    let bin = postgres::install(&root)?;
    eprintln!("PostgreSQL for the tests: {}", bin.display());
    let (browser, driver) = chromium::install()?;
    eprintln!(
        "Browser for the tests: {} (driver {})",
        browser.display(),
        driver.display()
    );
    let strace = apt::ensure("strace", "the check of the bundled SQLite's sync calls")?;
    eprintln!("strace for the tests: {}", strace.display());
    run_in_with_env(
        &root,
        // Every test binary runs even when one fails, so one failure never hides the others
        // (or skips the client checks' diagnosis).
        &["test", "--workspace", "--no-fail-fast"],
        &[
            ("MNEMON_REQUIRE_POSTGRES", "1"),
            ("MNEMON_REQUIRE_BROWSER", "1"),
            ("MNEMON_REQUIRE_STRACE", "1"),
        ],
    )?;
    if clients {
        client_checks(&root)?;
    }
    Ok(())
}

/// Step 3: the original clients.
fn client_checks(root: &Path) -> Result<()> {
    run_in(
        root,
        &["build", "--quiet", "--package", "mnemon", "--bin", "mnemon"],
    )?;
    let mnemon = root.join("target/debug/mnemon");
    let clients = root.join("tests/clients");

    // A fresh machine may have neither: installed as the other test dependencies are.
    if apt::on_path("npm").is_none() {
        apt::install(
            &["nodejs", "npm"],
            "the client checks (Polymath's TypeScript client, the MCP Python SDK's server)",
        )?;
    }
    need(
        "npm",
        "node 18 or later with npm (Debian: apt install nodejs npm)",
    )?;
    exec(
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&clients),
    )?;
    exec(Command::new("sh").arg(clients.join("run.sh")).arg(&mnemon))?;

    // Debian's python3 comes without `venv`'s pip bootstrap (package python3-venv).
    let has_venv = Command::new("python3")
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_venv {
        apt::install(
            &["python3", "python3-venv"],
            "the client checks (AgentScope 0.1.6, the MCP Python SDK)",
        )?;
    }
    need(
        "python3",
        "python3 with the venv module (Debian: apt install python3-venv)",
    )?;
    let venv = root.join("target/client-venv");
    let python = venv.join("bin/python");
    // A venv made with other constraints (or none) is made again.
    let constraints = clients.join("agentscope-constraints.txt");
    let stamp = venv.join("constraints.txt");
    let pinned = matches!(
        (std::fs::read(&constraints), std::fs::read(&stamp)),
        (Ok(wanted), Ok(made)) if wanted == made
    );
    let ready = pinned
        && python.exists()
        && Command::new(&python)
            .args(["-c", "import agentscope"])
            .status()
            .is_ok_and(|s| s.success());
    if !ready {
        if venv.exists() {
            std::fs::remove_dir_all(&venv)
                .with_context(|| format!("removing {}", venv.display()))?;
        }
        exec(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        exec(
            Command::new(venv.join("bin/pip"))
                .args([
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    // A slow or flaky registry: retried rather than failing the run.
                    "--retries",
                    "10",
                    "--timeout",
                    "60",
                    // Every dependency at the version the check last passed with: a new
                    // release of one (AgentScope 0.1.6 pins few) cannot change the check.
                    "-c",
                ])
                .arg(&constraints)
                // 0.1.6 imports tqdm without declaring it.
                .args([AGENTSCOPE, "tqdm"]),
        )?;
        std::fs::copy(&constraints, &stamp)
            .with_context(|| format!("writing {}", stamp.display()))?;
    }
    exec(
        Command::new("sh")
            .arg(clients.join("agentscope.sh"))
            .arg(&python)
            .arg(&mnemon),
    )?;
    exec(Command::new("sh").arg(clients.join("mcp.sh")).arg(&mnemon))
}

/// Fails with what to install when `program` is not on the PATH.
fn need(program: &str, install: &str) -> Result<()> {
    let found = Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        bail!("the client checks need {install}; or run `cargo xtask test --no-clients`");
    }
    Ok(())
}

/// Runs a command, echoing it, and fails when it fails.
fn exec(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    eprintln!("$ {shown}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}
