//! `mnemon asset …`: assets and their meta.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Subcommand;
use mnemon_store::{
    AssetStore, InMemoryStore, PostgresAssetOptions, PostgresAssetStore, SqliteAssetOptions,
    SqliteAssetStore, StoreError,
};
use mnemon_types::{Asset, AssetRef, MetaOptions, flatten, meta_with};

use super::{CliError, CliResult, Target, print_json};
// The data directory's layout is the `Mnemon` handle's (src/handle.rs).
use mnemon::DATABASE_FILE;

/// Commands on assets.
#[derive(Debug, Subcommand)]
pub(crate) enum AssetCommand {
    /// Print an asset's meta: its shape, with bytes and objects replaced by type strings.
    Meta {
        /// A JSON file holding one asset.
        file: PathBuf,
        /// Print the flattened meta: one entry per path, in order.
        #[arg(long)]
        flatten: bool,
        /// Path separator for `--flatten`.
        #[arg(long, default_value = "/", requires = "flatten")]
        sep: String,
        /// With `--flatten`, emit only leaves, not an entry per map or list.
        #[arg(long, requires = "flatten")]
        no_container_types: bool,
        /// Abbreviate strings longer than this many characters.
        #[arg(long, value_name = "CHARS")]
        max_string_len: Option<usize>,
    },
    /// Store asset JSON files; prints each asset's id on its own line once it is durable.
    ///
    /// Every file is read and checked before the first is stored, so a bad file stores nothing.
    Put {
        /// JSON files, each holding one asset (a missing `asset_id` gets a fresh UUID).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print a stored asset as JSON (bytes as `data:` URLs).
    Get {
        /// The asset's id.
        id: String,
    },
    /// Print the ids of stored assets, one per line, in ascending order.
    List {
        /// Only assets of this `asset_type`.
        #[arg(long = "type", value_name = "TYPE")]
        asset_type: Option<String>,
    },
    /// Remove a stored asset.
    Rm {
        /// The asset's id.
        id: String,
    },
    /// Print the value an `asset://` URL references, as JSON.
    Resolve {
        /// The reference, e.g. `asset://a1/content/labels/0`.
        url: String,
    },
}

/// Opens the asset store for writing: the PostgreSQL database of `--database-url`, or the
/// SQLite store in the data directory, created with the directory if needed.
pub(crate) fn open_store(target: &Target<'_>) -> Result<Box<dyn AssetStore>, CliError> {
    if let Some(url) = target.database_url {
        return open_postgres(url, target);
    }
    let data_dir = target.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))
        .map_err(CliError::failure)?;
    let options = SqliteAssetOptions {
        namespace: target.namespace.clone(),
        ..SqliteAssetOptions::default()
    };
    Ok(Box::new(
        SqliteAssetStore::open_with(data_dir.join(DATABASE_FILE), options).map_err(store_error)?,
    ))
}

/// The PostgreSQL asset store at `url`, for the target's namespace.
fn open_postgres(url: &str, target: &Target<'_>) -> Result<Box<dyn AssetStore>, CliError> {
    let options = PostgresAssetOptions {
        namespace: target.namespace.clone(),
        ..PostgresAssetOptions::default()
    };
    let store = PostgresAssetStore::open(url, options)
        .context("cannot open the asset store in the --database-url database")
        .map_err(CliError::failure)?;
    Ok(Box::new(store))
}

/// The store for a command that only reads: the SQLite store opened read-only when the database
/// exists, else an empty in-memory store, so that reading never creates a data directory or a
/// database (and a typo in `--data-dir` reads as "no such asset" rather than leaving a stray
/// file behind). Read-only, it never waits for another process's write and works on a
/// read-only data directory or mount.
///
/// With `--database-url`, the PostgreSQL store (its tables are created if missing).
pub(crate) fn open_store_for_reading(target: &Target<'_>) -> Result<Box<dyn AssetStore>, CliError> {
    if let Some(url) = target.database_url {
        return open_postgres(url, target);
    }
    let database = target.data_dir.join(DATABASE_FILE);
    if database.exists() {
        let options = SqliteAssetOptions {
            namespace: target.namespace.clone(),
            ..SqliteAssetOptions::default()
        };
        let store = SqliteAssetStore::open_read_only(database, options).map_err(store_error)?;
        Ok(Box::new(store))
    } else {
        Ok(Box::new(InMemoryStore::new()))
    }
}

/// Maps a store error to its exit code: the caller's mistakes are input errors (2).
pub(crate) fn store_error(error: StoreError) -> CliError {
    if error.is_caller_error() {
        CliError::input(error)
    } else {
        CliError::failure(error)
    }
}

/// Runs an `asset` command.
pub(crate) fn run(command: AssetCommand, target: &Target<'_>) -> CliResult {
    match command {
        AssetCommand::Meta {
            file,
            flatten: flat,
            sep,
            no_container_types,
            max_string_len,
        } => {
            let asset = read_asset(&file)?;
            let meta = meta_with(&asset, &MetaOptions { max_string_len });
            if flat {
                let flat = flatten(&meta, &sep, !no_container_types).map_err(CliError::input)?;
                print_json(&flat)
            } else {
                print_json(&meta)
            }
        }
        AssetCommand::Put { files } => {
            let assets = files
                .iter()
                .map(|f| read_asset(f))
                .collect::<Result<Vec<_>, _>>()?;
            let store = open_store(target)?;
            let mut out = std::io::stdout().lock();
            for asset in &assets {
                store.put(asset).map_err(store_error)?;
                // The put has committed: announce it at once, so a caller (or a crash) never
                // sees an id that is not stored.
                writeln!(out, "{}", asset.asset_id)
                    .and_then(|()| out.flush())
                    .map_err(CliError::failure)?;
            }
            Ok(())
        }
        AssetCommand::Get { id } => {
            let store = open_store_for_reading(target)?;
            let asset = store
                .get(&id)
                .map_err(store_error)?
                .ok_or_else(|| not_found(&id))?;
            print_json(&asset)
        }
        AssetCommand::List { asset_type } => {
            let store = open_store_for_reading(target)?;
            let ids = store.list_ids(asset_type.as_deref()).map_err(store_error)?;
            let mut out = std::io::stdout().lock();
            ids.iter()
                .try_for_each(|id| writeln!(out, "{id}"))
                .and_then(|()| out.flush())
                .map_err(CliError::failure)
        }
        AssetCommand::Rm { id } => {
            let store = open_store(target)?;
            if store.delete(&id).map_err(store_error)? {
                Ok(())
            } else {
                Err(not_found(&id))
            }
        }
        AssetCommand::Resolve { url } => {
            let reference = AssetRef::parse_url(&url).map_err(CliError::input)?;
            let store = open_store_for_reading(target)?;
            let value = store.resolve(&reference).map_err(store_error)?;
            print_json(&value)
        }
    }
}

fn not_found(id: &str) -> CliError {
    CliError::input(anyhow::anyhow!(
        "there is no asset with id {id:?}; `mnemon asset list` shows the stored ids"
    ))
}

/// Reads one asset from a JSON file; a missing file or bad JSON is an input error.
pub(crate) fn read_asset(file: &Path) -> Result<Asset, CliError> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read asset file {}", file.display()))
        .map_err(CliError::input)?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON", file.display()))
        .map_err(CliError::input)?;
    Asset::from_json(json)
        .with_context(|| format!("{} is not a valid asset", file.display()))
        .map_err(CliError::input)
}
