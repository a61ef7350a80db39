//! `mnemon export` and `mnemon import`: a namespace (or part of it) to one portable backup
//! file and back, on either backend (docs/reference/backup.md).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use mnemon::artifacts::{ArtifactStore, BackendRegistry};
use mnemon::assets::AssetStore;
use mnemon::memory::{Memory, MemoryError, Scope};
use mnemon::{Backend, Mnemon};
use mnemon_backup::{
    BackupError, ExportOptions, ImportOptions, NamespaceStores, Selection, ThreadFilter,
};

use super::{CliError, CliResult, Target, print_json};

/// Arguments of `mnemon export`.
#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    /// The backup file to write (gzip-compressed when it ends in `.gz`). An existing file is
    /// replaced only once the backup is complete.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Export only part of the namespace: the assets whose id starts with PREFIX ("" for all).
    #[arg(long, value_name = "PREFIX")]
    assets: Option<String>,
    /// Export only part of the namespace: the artifact records whose scope starts with PREFIX
    /// ("" for all).
    #[arg(long, value_name = "PREFIX")]
    artifact_scope: Option<String>,
    /// Export only part of the namespace: the memory threads of this user.
    #[arg(long, value_name = "ID")]
    user: Option<String>,
    /// Export only part of the namespace: the memory threads of this agent.
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
    /// Export only part of the namespace: the memory thread(s) of this session.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// With other selections: every memory thread too.
    #[arg(long)]
    memory: bool,
}

/// Arguments of `mnemon import`.
#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The backup file to read (gzip-compressed when it ends in `.gz`). It is checked whole
    /// before anything is written.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Only check the file (header, every record, counts and checksum); write nothing.
    #[arg(long)]
    check: bool,
}

/// The handle as the backup crate sees it.
struct Handle {
    mnemon: Mnemon,
    artifacts: Arc<dyn ArtifactStore>,
}

impl NamespaceStores for Handle {
    fn namespace(&self) -> String {
        self.mnemon.namespace().to_string()
    }

    fn source(&self) -> String {
        match self.mnemon.backend() {
            Backend::Sqlite => "sqlite".to_owned(),
            _ => "postgres".to_owned(),
        }
    }

    fn assets(&self) -> &dyn AssetStore {
        self.mnemon.assets()
    }

    fn artifacts(&self) -> &dyn ArtifactStore {
        self.artifacts.as_ref()
    }

    fn backends(&self) -> &BackendRegistry {
        self.mnemon.backends()
    }

    fn threads(&self) -> Result<Vec<Scope>, MemoryError> {
        self.mnemon.threads()
    }

    fn memory(&self, scope: Scope) -> Result<Box<dyn Memory>, MemoryError> {
        self.mnemon.memory(scope)
    }

    fn existing_memory(&self, scope: Scope) -> Result<Option<Box<dyn Memory>>, MemoryError> {
        self.mnemon.existing_memory(scope)
    }
}

/// Opens the stores the global options name.
fn open(target: &Target<'_>) -> Result<Handle, CliError> {
    let mnemon = Mnemon::open_with(target.data_dir, &target.open_options())
        .map_err(|e| CliError::failure(anyhow::Error::new(e).context("cannot open the stores")))?;
    Ok(Handle {
        artifacts: mnemon.artifacts(),
        mnemon,
    })
}

/// A backup error as a CLI error: a file or target problem the user fixes is an input error.
fn cli_error(error: BackupError) -> CliError {
    match error {
        BackupError::Io { .. } | BackupError::Assets(_) | BackupError::Artifacts(_) => {
            CliError::failure(error)
        }
        BackupError::Memory { .. } | BackupError::Encode(_) => CliError::failure(error),
        other => CliError::input(other),
    }
}

/// Runs `mnemon export`.
pub(crate) fn run_export(args: ExportArgs, target: &Target<'_>) -> CliResult {
    let memory =
        (args.memory || args.user.is_some() || args.agent.is_some() || args.session.is_some())
            .then_some(ThreadFilter {
                user_id: args.user,
                agent_id: args.agent,
                session_id: args.session,
            });
    let options = ExportOptions {
        selection: Selection {
            asset_id_prefix: args.assets,
            artifact_scope_prefix: args.artifact_scope,
            memory,
        },
        temp_dir: None,
    };
    let handle = open(target)?;
    let report = mnemon_backup::export(&handle, &args.file, &options).map_err(cli_error)?;
    print_json(&report)
}

/// Runs `mnemon import`.
pub(crate) fn run_import(args: ImportArgs, target: &Target<'_>) -> CliResult {
    if args.check {
        let verified = mnemon_backup::verify(&args.file).map_err(cli_error)?;
        return print_json(&serde_json::json!({
            "header": verified.header,
            "trailer": verified.trailer,
        }));
    }
    let handle = open(target)?;
    // Each thread passes through a scratch file as large as the thread: in the data directory,
    // on the disk that holds the stores, rather than the system's temporary folder (often
    // memory-backed, docs/reference/backup.md#importing).
    let options = ImportOptions {
        temp_dir: target
            .data_dir
            .is_dir()
            .then(|| target.data_dir.to_path_buf()),
    };
    let report = mnemon_backup::import(&handle, &args.file, &options).map_err(cli_error)?;
    print_json(&report)
}
