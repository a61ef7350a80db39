//! `mnemon asset …`: assets and their meta.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Subcommand;
use mnemon_types::{Asset, MetaOptions, flatten, meta_with};

use super::{CliError, CliResult, print_json};

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
}

/// Runs an `asset` command.
pub(crate) fn run(command: AssetCommand, _data_dir: &Path) -> CliResult {
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
    }
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
