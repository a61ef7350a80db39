//! `mnemon migrate`: copy a namespace's assets, artifacts and memory between a SQLite data
//! directory and a PostgreSQL database (either way, or between two of one kind).

use std::path::{Path, PathBuf};

use clap::Args;
use mnemon::migrate::{CopyError, copy};
use mnemon::{Mnemon, OpenOptions};

use super::{CliError, CliResult, Target, print_json};

/// Arguments of `mnemon migrate`.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Copy from: a data directory (its mnemon.sqlite3 and artifacts/) or a postgres:// URL.
    #[arg(long, value_name = "DIR|URL")]
    from: String,
    /// Copy to: a data directory (created if needed) or a postgres:// URL.
    #[arg(long, value_name = "DIR|URL")]
    to: String,
    /// The write_to_file root of --from: needed for a PostgreSQL --from whose artifacts keep
    /// content in files, and for a data directory whose files are not in its artifacts/ folder
    /// (kept elsewhere with --artifact-files or MNEMON_ARTIFACT_FILES).
    #[arg(long, value_name = "DIR")]
    from_files: Option<PathBuf>,
    /// The write_to_file root for --to: for a PostgreSQL --to, one folder every machine shares
    /// (without it, artifacts whose content is in files cannot be copied there); for a data
    /// directory, where its files go instead of its artifacts/ folder.
    #[arg(long, value_name = "DIR")]
    to_files: Option<PathBuf>,
}

fn is_url(endpoint: &str) -> bool {
    endpoint.starts_with("postgres://") || endpoint.starts_with("postgresql://")
}

/// Opens one end, with `files` as its write_to_file root when given (a data directory's is its
/// artifacts/ folder otherwise); `must_exist` refuses a data directory without a database (a
/// mistyped `--from` would otherwise copy nothing, successfully).
fn open(
    endpoint: &str,
    files: Option<&Path>,
    target: &Target<'_>,
    must_exist: bool,
    flag: &str,
) -> Result<Mnemon, CliError> {
    let mut options = if is_url(endpoint) {
        OpenOptions::postgres(endpoint)
    } else {
        let database = Path::new(endpoint).join(mnemon::DATABASE_FILE);
        if must_exist && !database.is_file() {
            return Err(CliError::input(anyhow::anyhow!(
                "{flag} {endpoint:?} is neither a data directory with {} nor a postgres:// URL",
                mnemon::DATABASE_FILE
            )));
        }
        OpenOptions::default()
    };
    options = options.with_namespace(target.namespace.clone());
    if let Some(files) = files {
        options = options.with_write_to_file_root(files);
    }
    // A PostgreSQL end has no data directory of its own: its libraries are not copied.
    let dir = if is_url(endpoint) {
        target.data_dir
    } else {
        Path::new(endpoint)
    };
    Mnemon::open_with(dir, &options).map_err(|e| {
        CliError::failure(anyhow::Error::new(e).context(format!("cannot open {flag}")))
    })
}

/// Runs `mnemon migrate`.
pub(crate) fn run(args: MigrateArgs, target: &Target<'_>) -> CliResult {
    let from = open(
        &args.from,
        args.from_files.as_deref(),
        target,
        true,
        "--from",
    )?;
    let to = open(&args.to, args.to_files.as_deref(), target, false, "--to")?;
    let report = copy(&from, &to).map_err(|error| match error {
        CopyError::NoBackend { .. } | CopyError::SourceNoBackend { .. } => CliError::input(error),
        other => CliError::failure(other),
    })?;
    print_json(&report)
}
