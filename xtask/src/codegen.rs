//! `cargo xtask codegen [--check]`: JSON Schemas of every on-disk and wire format, written to
//! `docs/schemas/`, and the REST API's OpenAPI 3.1 document, written to `docs/openapi.json`
//! (docs/reference/rest.md). With `--check`, fails when a committed file differs from the
//! generated one, so CI catches a format or API change whose document was not regenerated.

use std::fs;

use anyhow::{Context, Result, bail};
use schemars::{JsonSchema, schema_for};

use crate::cargo::workspace_root;

/// One generated file: its path under `docs/` and its JSON text.
fn schema<T: JsonSchema>(file: &str) -> Result<(String, String)> {
    let mut text = serde_json::to_string_pretty(&schema_for!(T))?;
    text.push('\n');
    Ok((format!("schemas/{file}"), text))
}

fn generate() -> Result<Vec<(String, String)>> {
    use mnemon_library::schema::{HostConfig, LibraryFile, QueryArgs, QueryResultJson};
    use mnemon_types::artifact::Artifact;
    use mnemon_types::msg::Msg;
    use mnemon_types::{Asset, AssetRef};
    Ok(vec![
        schema::<Asset>("asset.schema.json")?,
        schema::<AssetRef>("asset-reference.schema.json")?,
        schema::<Artifact>("artifact.schema.json")?,
        schema::<Msg>("message.schema.json")?,
        schema::<LibraryFile>("library.schema.json")?,
        schema::<QueryArgs>("query-arguments.schema.json")?,
        schema::<QueryResultJson>("query-result.schema.json")?,
        schema::<HostConfig>("host-config.schema.json")?,
        schema::<mnemon_backup::Record>("backup.schema.json")?,
        // The same text the server serves at /v1/openapi.json.
        (
            "openapi.json".to_owned(),
            mnemon_server::openapi::document_text(),
        ),
    ])
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => bail!("usage: cargo xtask codegen [--check]"),
    };
    let dir = workspace_root().join("docs");
    let files = generate()?;
    let mut stale = Vec::new();
    for (name, text) in &files {
        let path = dir.join(name);
        let current = fs::read_to_string(&path).unwrap_or_default();
        if current == *text {
            continue;
        }
        if check {
            stale.push(name.clone());
        } else {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent)?;
            }
            fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
            println!("wrote docs/{name}");
        }
    }
    if !stale.is_empty() {
        bail!(
            "stale generated files in docs/: {}; run `cargo xtask codegen` and commit the result",
            stale.join(", ")
        );
    }
    if check {
        println!(
            "docs/schemas and docs/openapi.json are up to date ({} files)",
            files.len()
        );
    }
    Ok(())
}
