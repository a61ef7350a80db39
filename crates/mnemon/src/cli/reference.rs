//! `mnemon ref …`: asset references.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Subcommand;
use mnemon_refs::{CommandSpec, Mode, RefsError, render_default, resolve_params};
use mnemon_types::AssetRef;

use super::asset::open_store_for_reading;
use super::{CliError, CliResult, Target, print_json};

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
    /// Read text on stdin and print it with every resolvable `<|…|>` marker replaced by the
    /// value it references; markers left as written are listed on stderr.
    Render,
    /// Substitute references in tool-call parameters, as a command spec allows, and print the
    /// resulting parameters as JSON.
    Params {
        /// The command spec (`.yaml`/`.yml` or `.json`).
        #[arg(long, value_name = "SPEC")]
        spec: PathBuf,
        /// A JSON file holding the parameters object.
        params: PathBuf,
        /// Fail on a reference in a parameter that does not accept references, instead of
        /// passing it through.
        #[arg(long)]
        strict: bool,
    },
}

fn refs_error(error: RefsError) -> CliError {
    if error.is_caller_error() {
        CliError::input(error)
    } else {
        CliError::failure(error)
    }
}

/// Runs a `ref` command.
pub(crate) fn run(command: RefCommand, target: &Target<'_>) -> CliResult {
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
        RefCommand::Render => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("cannot read stdin as UTF-8 text")
                .map_err(CliError::input)?;
            let store = open_store_for_reading(target)?;
            let rendered = render_default(&text, store.as_ref());
            let mut out = std::io::stdout().lock();
            out.write_all(rendered.text.as_bytes())
                .and_then(|()| out.flush())
                .map_err(CliError::failure)?;
            let mut err = std::io::stderr().lock();
            for u in &rendered.unresolved {
                // Best effort: a closed stderr must not fail a render that succeeded.
                let _ = writeln!(
                    err,
                    "unresolved marker at bytes {}..{}: {}: {}",
                    u.span.start, u.span.end, u.marker, u.error
                );
            }
            Ok(())
        }
        RefCommand::Params {
            spec,
            params,
            strict,
        } => {
            // An unreadable file's error names the path already; the others need it added.
            let spec = CommandSpec::load(&spec).map_err(|e| match e {
                RefsError::SpecUnreadable { .. } => CliError::input(e),
                other => CliError::input(
                    anyhow::Error::new(other)
                        .context(format!("cannot use the command spec {}", spec.display())),
                ),
            })?;
            let text = std::fs::read_to_string(&params)
                .with_context(|| format!("cannot read the parameters file {}", params.display()))
                .map_err(CliError::input)?;
            let json: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not valid JSON", params.display()))
                .map_err(CliError::input)?;
            let store = open_store_for_reading(target)?;
            let mode = if strict { Mode::Strict } else { Mode::Lenient };
            let resolved =
                resolve_params(&spec, &json, store.as_ref(), mode).map_err(refs_error)?;
            print_json(&resolved)
        }
    }
}
