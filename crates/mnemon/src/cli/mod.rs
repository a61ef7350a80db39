//! Command-line parsing and dispatch. One module per command group.
//!
//! Conventions for every command: results as JSON (or text) on stdout, messages on stderr; exit
//! code 0 on success, 1 on a failure, 2 on a usage or input error.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mnemon::db::Namespace;

mod artifact;
mod asset;
mod backup;
mod config_file;
mod format;
mod keys;
mod library;
mod library_import;
mod maintenance;
mod mcp;
mod memory;
mod migrate;
mod prompt;
mod reference;
mod serve;

/// Mnemon: a memory LLM agents can trust.
#[derive(Debug, Parser)]
#[command(name = "mnemon", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// Directory holding Mnemon's stores (SQLite database, artifact files, libraries).
    #[arg(
        long,
        global = true,
        env = "MNEMON_DATA_DIR",
        default_value = "mnemon-data",
        value_name = "DIR"
    )]
    pub(crate) data_dir: PathBuf,

    /// Keep assets, artifacts and memory in this PostgreSQL database
    /// (`postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`) instead of the SQLite file in
    /// --data-dir. Artifact content then goes into the database (`inline`); see
    /// docs/postgres.md, "Choosing the backend".
    #[arg(
        long,
        global = true,
        env = "MNEMON_DATABASE_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub(crate) database_url: Option<String>,

    /// The root of the `write_to_file` artifact backend (default: `artifacts/` in --data-dir,
    /// and none with --database-url, where content then goes into the database). With
    /// --database-url it must be one folder shared by every machine using the database.
    #[arg(long, global = true, env = "MNEMON_ARTIFACT_FILES", value_name = "DIR")]
    pub(crate) artifact_files: Option<PathBuf>,

    /// How long assets, artifact records and messages written without an expiry of their own
    /// live: a whole number and a unit, s, m, h, d or w (e.g. `30d`); the namespace's default
    /// time-to-live. Without it they never expire.
    #[arg(long, global = true, env = "MNEMON_DEFAULT_TTL", value_name = "DURATION",
          value_parser = parse_default_ttl)]
    pub(crate) default_ttl: Option<std::time::Duration>,

    /// How hard the stores' writes work to survive crashes: `full` (the default; an
    /// acknowledged write survives a killed process, an OS crash and a power loss) or `normal`
    /// (it survives a killed process, but an OS crash or power loss, or with PostgreSQL a crash
    /// of its server, may lose the last writes; commits do not wait for the disk)
    /// (docs/reference/config.md#durability).
    #[arg(long, global = true, env = "MNEMON_DURABILITY", value_enum,
          default_value_t = DurabilityArg::Full, value_name = "LEVEL")]
    pub(crate) durability: DurabilityArg,

    /// The namespace (tenant) whose assets, artifacts and memory the commands see.
    #[arg(
        long,
        global = true,
        env = "MNEMON_NAMESPACE",
        default_value = "default",
        value_name = "NAME"
    )]
    pub(crate) namespace: Namespace,

    /// Print nothing on stderr but errors.
    #[arg(long, short, global = true)]
    pub(crate) quiet: bool,

    /// Settings file (default: ./mnemon.toml when it exists): top-level keys are these global
    /// options, `[serve]` holds `mnemon serve`'s flags; flags and environment variables override
    /// it (docs/reference/config.md).
    #[arg(long, global = true, env = "MNEMON_CONFIG_FILE", value_name = "FILE")]
    pub(crate) config_file: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Parse and format asset references; render markers in text; substitute tool parameters.
    #[command(subcommand)]
    Ref(reference::RefCommand),
    /// Store, inspect, list, remove and resolve assets.
    #[command(subcommand)]
    Asset(asset::AssetCommand),
    /// Validate, inspect, query and pack embedding library files.
    #[command(subcommand)]
    Library(library::LibraryCommand),
    /// Save artifacts, load them into prompts, and inspect the artifact store.
    #[command(subcommand)]
    Artifact(artifact::ArtifactCommand),
    /// Render prompt templates.
    #[command(subcommand)]
    Prompt(prompt::PromptCommand),
    /// Import, export, show and search conversation memory.
    #[command(subcommand)]
    Memory(memory::MemoryCommand),
    /// Copy a namespace's assets, artifacts and memory between a data directory (SQLite) and a
    /// PostgreSQL database, losing nothing (same ids, order, timestamps, marks, embeddings).
    Migrate(migrate::MigrateArgs),
    /// Write the namespace (or part of it) to one portable backup file: assets with their
    /// bytes, artifacts with their content, memory with embeddings and marks
    /// (docs/reference/backup.md).
    Export(backup::ExportArgs),
    /// Import a backup file written by `mnemon export` into the namespace (checked whole first;
    /// records that already exist are refused).
    Import(backup::ImportArgs),
    /// Remove what has expired in the namespace: assets, artifact records with their files
    /// (docs/reference/rest.md#gc-and-forget).
    Gc(maintenance::GcArgs),
    /// Delete a subject from every store, one transaction per store: a user's, agent's or
    /// session's memory, assets under an id prefix, artifacts under a scope prefix, or the
    /// whole namespace (--all --yes).
    Forget(maintenance::ForgetArgs),
    /// Serve memory, assets, artifacts and a library as MCP tools, over stdio (or streamable
    /// HTTP with --http) (docs/reference/mcp.md).
    Mcp(mcp::McpArgs),
    /// Create, list and revoke the server's API keys (docs/reference/keys.md).
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Serve the REST API over the stores (/v1/…) and embedding libraries (POST /) over HTTP.
    Serve(serve::ServeArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to generate completions for.
        shell: clap_complete::Shell,
    },
}

/// `--durability`: [`mnemon::db::Durability`] on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum DurabilityArg {
    /// Every acknowledged write is on stable storage.
    Full,
    /// Every acknowledged write survives a killed process, not an OS crash or power loss.
    Normal,
}

impl From<DurabilityArg> for mnemon::db::Durability {
    fn from(arg: DurabilityArg) -> Self {
        match arg {
            DurabilityArg::Full => mnemon::db::Durability::Full,
            DurabilityArg::Normal => mnemon::db::Durability::Normal,
        }
    }
}

/// Where the store commands (`asset`, `artifact`, `memory`, `ref`) read and write.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Target<'a> {
    /// `--data-dir`: the SQLite file and artifact files (without a database URL).
    pub(crate) data_dir: &'a std::path::Path,
    /// `--database-url`: PostgreSQL instead of SQLite.
    pub(crate) database_url: Option<&'a str>,
    /// `--namespace`.
    pub(crate) namespace: &'a Namespace,
    /// `--artifact-files`: the `write_to_file` root, if given.
    pub(crate) artifact_files: Option<&'a std::path::Path>,
    /// `--default-ttl`: the namespace's default time-to-live, if given.
    pub(crate) default_ttl: Option<std::time::Duration>,
    /// `--durability`.
    pub(crate) durability: mnemon::db::Durability,
}

impl Target<'_> {
    /// How the global options open the stores: `--database-url`, `--namespace`,
    /// `--artifact-files`, `--default-ttl`, `--durability`.
    pub(crate) fn open_options(&self) -> mnemon_ops::OpenOptions {
        let options = match self.database_url {
            Some(url) => mnemon_ops::OpenOptions::postgres(url),
            None => mnemon_ops::OpenOptions::default(),
        }
        .with_namespace(self.namespace.clone())
        .with_default_ttl(self.default_ttl)
        .with_durability(self.durability);
        match self.artifact_files {
            Some(root) => options.with_write_to_file_root(root),
            None => options,
        }
    }
}

/// A command's failure, carrying the exit code it maps to.
#[derive(Debug)]
pub(crate) enum CliError {
    /// Bad input or usage: exit code 2.
    Input(anyhow::Error),
    /// Anything else that went wrong: exit code 1.
    Failure(anyhow::Error),
}

impl CliError {
    /// Wraps an input error (exit code 2).
    pub(crate) fn input(error: impl Into<anyhow::Error>) -> Self {
        CliError::Input(error.into())
    }

    /// Wraps a failure (exit code 1).
    pub(crate) fn failure(error: impl Into<anyhow::Error>) -> Self {
        CliError::Failure(error.into())
    }
}

/// What a command returns.
pub(crate) type CliResult = Result<(), CliError>;

/// Writes `value` as pretty JSON and a newline on stdout.
pub(crate) fn print_json(value: &impl serde::Serialize) -> CliResult {
    let text = serde_json::to_string_pretty(value).map_err(CliError::failure)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(CliError::failure)
}

/// Parses the command line, runs the command and maps the outcome to an exit code.
pub(crate) fn run() -> ExitCode {
    let (argv, settings) = match config_file::apply(std::env::args_os().collect()) {
        Ok(applied) => applied,
        Err(CliError::Input(e) | CliError::Failure(e)) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(error) => {
            // A value the file gave that the flag refuses: clap names the flag, and the
            // user typed none, so say where it came from (docs/reference/config.md#errors).
            if let Some(settings) = &settings
                && error.use_stderr()
                && !settings.keys.is_empty()
            {
                let _ = error.print();
                eprintln!(
                    "note: the config file {} gave: {} (fix it there, or give the flag on \
                     the command line)",
                    settings.path.display(),
                    settings.keys.join(", ")
                );
                return ExitCode::from(2);
            }
            error.exit()
        }
    };
    if let Some(settings) = settings
        && !cli.quiet
        && !settings.keys.is_empty()
    {
        eprintln!(
            "mnemon: settings from {}: {}",
            settings.path.display(),
            settings.keys.join(", ")
        );
    }
    let target = Target {
        data_dir: &cli.data_dir,
        database_url: cli.database_url.as_deref(),
        namespace: &cli.namespace,
        artifact_files: cli.artifact_files.as_deref(),
        default_ttl: cli.default_ttl,
        durability: cli.durability.into(),
    };
    let outcome = match cli.command {
        Command::Ref(cmd) => reference::run(cmd, &target),
        Command::Asset(cmd) => asset::run(cmd, &target),
        Command::Library(cmd) => library::run(cmd, cli.quiet),
        Command::Artifact(cmd) => artifact::run(cmd, &target, cli.quiet),
        Command::Prompt(cmd) => prompt::run(cmd),
        Command::Memory(cmd) => memory::run(cmd, &target),
        Command::Migrate(args) => migrate::run(args, &target),
        Command::Export(args) => backup::run_export(args, &target),
        Command::Import(args) => backup::run_import(args, &target),
        Command::Gc(args) => maintenance::run_gc(args, &target),
        Command::Forget(args) => maintenance::run_forget(args, &target),
        Command::Mcp(args) => mcp::run(args, &target, cli.quiet),
        Command::Keys(cmd) => keys::run(cmd, &target, cli.quiet),
        Command::Serve(args) => serve::run(args, &target, cli.quiet),
        Command::Completions { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            // Generate into memory: clap_complete panics on a write error such as a closed pipe.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, "mnemon", &mut script);
            std::io::stdout()
                .lock()
                .write_all(&script)
                .map_err(CliError::failure)
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Input(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
        Err(CliError::Failure(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// Sends `tracing` events to stderr at `default` level (`RUST_LOG` overrides it), coloured only
/// on a terminal; `timestamps` for long-running commands such as `serve`.
pub(crate) fn log_to_stderr(default: &str, timestamps: bool) {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    // Fails only when a subscriber is already installed, which then keeps logging.
    let _ = if timestamps {
        builder.try_init()
    } else {
        builder.without_time().with_target(false).try_init()
    };
}

/// Parses `--default-ttl` ([`mnemon_ops::expiry::parse_duration`]); zero is refused: every
/// write would be stored already expired, and the next sweep would remove it.
fn parse_default_ttl(text: &str) -> Result<std::time::Duration, String> {
    match mnemon_ops::expiry::parse_duration(text)? {
        ttl if ttl.is_zero() => Err("a default time-to-live of 0 would store every write \
             already expired; leave --default-ttl (MNEMON_DEFAULT_TTL, default-ttl in \
             mnemon.toml) out for records that never expire"
            .to_owned()),
        ttl => Ok(ttl),
    }
}
