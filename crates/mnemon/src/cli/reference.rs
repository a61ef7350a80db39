//! `mnemon ref …`: asset references.

use clap::Subcommand;
use mnemon_types::AssetRef;

use super::{CliError, CliResult, print_json};

/// Commands on asset references.
#[derive(Debug, Subcommand)]
pub(crate) enum RefCommand {
    /// Parse an `asset://` URL and print its object form as JSON.
    Parse {
        /// The URL, e.g. `asset://a1/content/labels/0`.
        url: String,
    },
    /// Print the canonical URL of an object-form reference.
    Format {
        /// The reference as JSON, e.g. `{"asset_id":"a1","field_path":["content",0]}`.
        json: String,
    },
}

/// Runs a `ref` command.
pub(crate) fn run(command: RefCommand) -> CliResult {
    match command {
        RefCommand::Parse { url } => {
            let reference = AssetRef::parse_url(&url).map_err(CliError::input)?;
            print_json(&reference)
        }
        RefCommand::Format { json } => {
            let reference: AssetRef = serde_json::from_str(&json).map_err(|e| {
                CliError::input(anyhow::anyhow!(
                    "not an object-form reference ({e}); expected {{\"asset_id\": \"…\", \"field_path\": [\"content\", 0]}}"
                ))
            })?;
            println!("{reference}");
            Ok(())
        }
    }
}
