//! `cargo xtask codegen [--check]`: JSON Schemas of every on-disk and wire format, written to
//! `docs/schemas/`. With `--check`, fails when a committed schema differs from the generated one,
//! so CI catches a format change whose schema was not regenerated.

use std::fs;

use anyhow::{Context, Result, bail};
use schemars::{JsonSchema, schema_for};

use crate::cargo::workspace_root;

/// One generated file: its name under `docs/schemas/` and its JSON text.
fn schema<T: JsonSchema>(file: &str) -> Result<(String, String)> {
    let mut text = serde_json::to_string_pretty(&schema_for!(T))?;
    text.push('\n');
    Ok((file.to_owned(), text))
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
    ])
}

pub(crate) fn run(args: &[String]) -> Result<()> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => bail!("usage: cargo xtask codegen [--check]"),
    };
    let dir = workspace_root().join("docs/schemas");
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
            fs::create_dir_all(&dir)?;
            fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
            println!("wrote docs/schemas/{name}");
        }
    }
    if !stale.is_empty() {
        bail!(
            "stale schemas in docs/schemas: {}; run `cargo xtask codegen` and commit the result",
            stale.join(", ")
        );
    }
    if check {
        println!("docs/schemas is up to date ({} schemas)", files.len());
    }
    Ok(())
}
