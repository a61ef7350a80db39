//! `mnemon asset …`: assets and their meta.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Subcommand;
use mnemon_store::{
    AssetStore, Expiry, InMemoryStore, PostgresAssetOptions, PostgresAssetStore,
    SqliteAssetOptions, SqliteAssetStore, StoreError,
};
use mnemon_types::{Asset, AssetRef, MetaOptions, flatten, meta_with};

use mnemon_ops::assets::{
    AssetBody, AssetContent, AssetIdInput, AssetMetaInput, AssetPutBytesInput, AssetPutInput,
    AssetQueryInput,
};

use super::format::{
    OutputFormat, Table, emit, ops_error, service_for_reading, service_for_writing,
};
use super::{CliError, CliResult, Target, print_json};
// The data directory's layout is the `Mnemon` handle's (src/handle.rs).
use mnemon::DATABASE_FILE;

/// Commands on assets.
#[derive(Debug, Subcommand)]
pub(crate) enum AssetCommand {
    /// Print an asset's meta: its shape, with bytes and objects replaced by type strings.
    Meta {
        /// A JSON file holding one asset, or (when no such file exists, or with --stored) the
        /// id of a stored asset.
        file: PathBuf,
        /// Read the stored asset with this id, even if a file of that name exists.
        #[arg(long)]
        stored: bool,
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
    ///
    /// With --id, stores binary content instead: the bytes of --file, or of a base64 `data:` URL
    /// given with --data-url.
    Put {
        /// JSON files, each holding one asset (a missing `asset_id` gets a fresh UUID).
        #[arg(required_unless_present = "id", conflicts_with = "id")]
        files: Vec<PathBuf>,
        /// The id of the asset whose whole content is the bytes of --file or --data-url.
        #[arg(long, requires = "bytes")]
        id: Option<String>,
        /// A file whose bytes are the content (any file: an image, a PDF…).
        #[arg(long = "file", value_name = "F", group = "bytes", requires = "id")]
        bytes_file: Option<PathBuf>,
        /// The content as a `data:[<media type>];base64,<data>` URL.
        #[arg(long, value_name = "URL", group = "bytes", requires = "id")]
        data_url: Option<String>,
        /// The media type of the bytes (for --data-url, overrides the URL's).
        #[arg(long, value_name = "TYPE")]
        content_type: Option<String>,
        /// Forget the assets this long after the put: a whole number and a unit, s, m, h, d or
        /// w (e.g. `90s`, `30d`, `1h30m`); or `never`, to keep them until deleted whatever
        /// --default-ttl says.
        #[arg(long, value_name = "DURATION", value_parser = super::artifact::parse_ttl)]
        ttl: Option<super::artifact::Ttl>,
    },
    /// Print a stored asset as JSON (bytes as `data:` URLs), or write its content to a file.
    /// With --format, also show when it expires.
    Get {
        /// The asset's id.
        id: String,
        /// Write the asset's content to this file instead: binary content byte for byte, any
        /// other content as JSON.
        #[arg(long, value_name = "F", conflicts_with = "format")]
        out: Option<PathBuf>,
        /// Print the asset with its expiry: `json` as `{"asset": …, "expires_at_ms": …}`
        /// (`expires_at_ms` absent when it never expires), `table` as one row of id, type,
        /// name, content type and `expires_at_ms` (or `never`). Without it, the asset's JSON
        /// alone.
        #[arg(long, value_enum, value_name = "FORMAT")]
        format: Option<OutputFormat>,
    },
    /// Print the ids of stored assets, one per line, in ascending order.
    List {
        /// Only assets of this `asset_type`.
        #[arg(long = "type", value_name = "TYPE")]
        asset_type: Option<String>,
        /// Only assets a filter (docs/reference/filters.md) selects, as JSON, e.g.
        /// `{"exists": "expires_at"}`.
        #[arg(long, value_name = "JSON")]
        filter: Option<String>,
        /// Print each id with its expiry: `<id>\t<expires_at_ms>` (or `never`).
        #[arg(long)]
        expiry: bool,
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
        default_ttl: target.default_ttl,
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
        default_ttl: target.default_ttl,
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
            default_ttl: target.default_ttl,
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
            stored,
            flatten: flat,
            sep,
            no_container_types,
            max_string_len,
        } => {
            let meta = if stored || !file.exists() {
                // The stored asset's meta, through the operation REST and MCP also use.
                let service = service_for_reading(target)?;
                service
                    .asset_meta(AssetMetaInput {
                        asset_id: file.to_string_lossy().into_owned(),
                        max_string_len,
                    })
                    .map_err(ops_error)?
                    .meta
            } else {
                let asset = read_asset(&file)?;
                meta_with(&asset, &MetaOptions { max_string_len })
            };
            if flat {
                let flat = flatten(&meta, &sep, !no_container_types).map_err(CliError::input)?;
                print_json(&flat)
            } else {
                print_json(&meta)
            }
        }
        AssetCommand::Put {
            id: Some(asset_id),
            bytes_file,
            data_url,
            content_type,
            ttl,
            ..
        } => {
            let expiry = ttl.map(super::artifact::Ttl::input).unwrap_or_default();
            let output = match (bytes_file, data_url) {
                (Some(file), _) => {
                    let data = std::fs::read(&file)
                        .with_context(|| format!("cannot read {}", file.display()))
                        .map_err(CliError::input)?;
                    service_for_writing(target)?.asset_put_bytes_expiring(
                        AssetPutBytesInput {
                            asset_id,
                            content_type,
                            data,
                        },
                        expiry,
                    )
                }
                (None, Some(url)) => {
                    let (media, base64) = split_data_url(&url).map_err(CliError::input)?;
                    // The operation decodes the base64, as it does for REST's content_base64.
                    let body = AssetBody {
                        asset_id: Some(asset_id),
                        asset_type: None,
                        asset_name: None,
                        description: None,
                        content_type: content_type.or(media),
                        content: None,
                        content_base64: Some(base64.to_owned()),
                        extra: serde_json::Map::new(),
                    };
                    service_for_writing(target)?
                        .asset_put_expiring(AssetPutInput { asset: body }, expiry)
                }
                (None, None) => {
                    return Err(CliError::input(anyhow::anyhow!(
                        "--id needs the content: --file F or --data-url URL"
                    )));
                }
            }
            .map_err(ops_error)?;
            let mut out = std::io::stdout().lock();
            writeln!(out, "{}", output.asset_id)
                .and_then(|()| out.flush())
                .map_err(CliError::failure)
        }
        AssetCommand::Put { files, ttl, .. } => {
            let expiry = ttl.map_or(Expiry::Default, super::artifact::Ttl::expiry);
            let assets = files
                .iter()
                .map(|f| read_asset(f))
                .collect::<Result<Vec<_>, _>>()?;
            let store = open_store(target)?;
            let mut out = std::io::stdout().lock();
            for asset in &assets {
                store.put_expiring(asset, expiry).map_err(store_error)?;
                // The put has committed: announce it at once, so a caller (or a crash) never
                // sees an id that is not stored.
                writeln!(out, "{}", asset.asset_id)
                    .and_then(|()| out.flush())
                    .map_err(CliError::failure)?;
            }
            Ok(())
        }
        AssetCommand::Get {
            id,
            format: Some(format),
            ..
        } => {
            let service = service_for_reading(target)?;
            let got = service
                .asset_get(AssetIdInput { asset_id: id })
                .map_err(ops_error)?;
            emit(format, &got, |g| {
                let mut table = Table::new(&[
                    "asset_id",
                    "asset_type",
                    "asset_name",
                    "content_type",
                    "expires_at_ms",
                ]);
                let text = |v: &Option<String>| v.clone().unwrap_or_default();
                table.row(vec![
                    text(&g.asset.asset_id),
                    text(&g.asset.asset_type),
                    text(&g.asset.asset_name),
                    text(&g.asset.content_type),
                    g.expires_at_ms
                        .map_or_else(|| "never".to_owned(), |at| at.to_string()),
                ]);
                table
            })
        }
        AssetCommand::Get {
            id, out: Some(out), ..
        } => {
            let service = service_for_reading(target)?;
            let content = service
                .asset_content(AssetIdInput { asset_id: id })
                .map_err(ops_error)?;
            let data = match content {
                AssetContent::Bytes { data, .. } => data,
                AssetContent::Json(json) => {
                    serde_json::to_vec_pretty(&json).map_err(CliError::failure)?
                }
            };
            mnemon::db::atomic_file::write_atomic(&out, |w| w.write_all(&data))
                .map_err(std::io::Error::from)
                .with_context(|| format!("cannot write {}", out.display()))
                .map_err(CliError::failure)
        }
        AssetCommand::Get {
            id,
            out: None,
            format: None,
        } => {
            let store = open_store_for_reading(target)?;
            let asset = store
                .get(&id)
                .map_err(store_error)?
                .ok_or_else(|| not_found(&id))?;
            print_json(&asset)
        }
        AssetCommand::List {
            asset_type,
            filter,
            expiry,
        } if filter.is_some() || expiry => {
            let filter = filter
                .map(|f| serde_json::from_str::<serde_json::Value>(&f))
                .transpose()
                .context("--filter is not JSON")
                .map_err(CliError::input)?;
            let service = service_for_reading(target)?;
            let mut input = AssetQueryInput {
                filter,
                asset_type,
                cursor: None,
                limit: Some(mnemon_ops::page::MAX_LIMIT),
            };
            let mut out = std::io::stdout().lock();
            loop {
                let page = service.asset_query(input.clone()).map_err(ops_error)?;
                for listed in &page.assets {
                    let line = match (expiry, listed.expires_at_ms) {
                        (false, _) => listed.asset_id.clone(),
                        (true, Some(at)) => format!("{}\t{at}", listed.asset_id),
                        (true, None) => format!("{}\tnever", listed.asset_id),
                    };
                    writeln!(out, "{line}").map_err(CliError::failure)?;
                }
                match page.next_cursor {
                    Some(next) => input.cursor = Some(next),
                    None => break,
                }
            }
            out.flush().map_err(CliError::failure)
        }
        AssetCommand::List { asset_type, .. } => {
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

/// Splits a `data:[<media type>][;params];base64,<data>` URL into its media type and its
/// base64 text (not decoded: the operation decodes it). Only base64 URLs carry arbitrary bytes,
/// so others are refused with a message saying so.
fn split_data_url(url: &str) -> Result<(Option<String>, &str), anyhow::Error> {
    let rest = url
        .strip_prefix("data:")
        .ok_or_else(|| anyhow::anyhow!("--data-url must start with `data:`"))?;
    let (header, data) = rest
        .split_once(',')
        .ok_or_else(|| anyhow::anyhow!("--data-url has no `,` before its data"))?;
    let mut params = header.split(';');
    let media = params.next().unwrap_or("").trim();
    if !params.any(|p| p.trim().eq_ignore_ascii_case("base64")) {
        return Err(anyhow::anyhow!(
            "--data-url must be base64 (`data:<type>;base64,<data>`); encode the bytes with base64"
        ));
    }
    let media = (!media.is_empty()).then(|| media.to_owned());
    Ok((media, data))
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn data_urls_split_into_type_and_base64() {
        assert_eq!(
            split_data_url("data:image/png;base64,AAEC").unwrap(),
            (Some("image/png".to_owned()), "AAEC")
        );
        assert_eq!(split_data_url("data:;base64,").unwrap(), (None, ""));
        assert!(split_data_url("data:text/plain,hello").is_err());
        assert!(split_data_url("http://x").is_err());
        assert!(split_data_url("data:image/png;base64").is_err());
    }

    proptest! {
        #[test]
        fn data_url_split_round_trips(media in "[a-z]{1,8}/[a-z0-9.+-]{1,12}", data in "[A-Za-z0-9+/=]{0,40}") {
            let url = format!("data:{media};base64,{data}");
            let (m, d) = split_data_url(&url).unwrap();
            prop_assert_eq!(m.as_deref(), Some(media.as_str()));
            prop_assert_eq!(d, data.as_str());
        }

        #[test]
        fn data_url_split_never_panics(s in "\\PC{0,60}") {
            let _ = split_data_url(&s);
        }
    }
}
