//! `mnemon serve`: the Mnemon server — the REST API over assets, artifacts and memory
//! (docs/reference/rest.md) beside the library host (docs/reference/host.md#library-host-protocol),
//! on the data directory's SQLite file or the `--database-url` PostgreSQL database.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use std::time::Duration;

use std::sync::Arc;

use mnemon::db::Namespace;
use mnemon::types::Embedder;
use mnemon::{Mnemon, OpenError};
use mnemon_host::{
    ConfigSource, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BUFFERED_BODY_BYTES, DEFAULT_MAX_CONCURRENT_QUERIES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RESULT_BYTES, DEFAULT_QUEUE_TIMEOUT, DEFAULT_SEND_TIMEOUT, HostError, HostOptions,
    LibrarySource, Sources,
};
use mnemon_keys::{KeyStore, KeyStoreOptions};
use mnemon_ops::{OpsError, Service};
use mnemon_server::{KeyAuthenticator, OpenAccess, Server, ServerConfig, Tenants};

use super::{CliError, CliResult, Target};

/// Where the sample library lives in a source checkout (and in the packaged crate, which is why
/// it sits inside this crate; `examples/sample-library` at the top of the repository links
/// here); `serve` reads it from disk there, so a SIGHUP picks up a regenerated file.
const SAMPLE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sample-library/library.json");

/// A `--allowed-host` value: a name with an optional port, as clients put it in `Host`, checked
/// as the server reads it ([`mnemon_server::check_allowed_host`]).
fn host_name(text: &str) -> Result<String, String> {
    mnemon_server::check_allowed_host(text)
}

/// The same sample library compiled in, so `serve` works from anywhere.
const SAMPLE_BYTES: &[u8] = include_bytes!("../../sample-library/library.json");

/// Serve the REST API (assets, artifacts, memory: /v1/…), the MCP endpoint (/mcp), the
/// inspector (/ui/) and embedding libraries (Polymath-compatible POST /) over HTTP.
///
/// When the key store (the data directory's database, or --database-url) has any API key,
/// every /v1 and /mcp request needs `Authorization: Bearer <key>` and runs in that key's
/// namespace only; read keys cannot write (403). Create keys with `mnemon keys create`. Without
/// keys the server runs open (every request is the admin of --namespace), on a loopback
/// address only unless --insecure. Keys are bearer secrets: off this machine, put a TLS
/// reverse proxy in front (docs/reference/keys.md#transport-tls-and-reverse-proxies).
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The embedding model that turns search text into vectors for memory and library search
    /// by text, e.g. `mnemon:hashing-v1-512` (offline) or `openai.com:text-embedding-3-small`
    /// (needs OPENAI_API_KEY). Without it, searches take vectors only.
    #[arg(long, value_name = "MODEL", env = "MNEMON_EMBEDDING_MODEL")]
    embedding_model: Option<String>,

    /// Listen on a non-loopback address without API keys: anyone who can reach the address
    /// can read and change every store of the namespace. Not needed once keys exist.
    #[arg(long)]
    insecure: bool,

    /// The library to serve: a file, or a directory whose `*.json` files are merged in path order
    /// (files under `access/<tag>/` get that access tag). Defaults to $LIBRARY_FILENAME, then
    /// ./libraries if it exists, then <data-dir>/libraries if it exists, then the sample library
    /// shipped with Mnemon.
    #[arg(long, value_name = "FILE|DIR")]
    library: Option<PathBuf>,

    /// Host config with access tokens and restriction details (the host.SECRET.json format).
    /// Defaults to ./host.SECRET.json if it exists, else no tokens.
    #[arg(long, value_name = "CFG.json")]
    config: Option<PathBuf>,

    /// How often to remove expired assets, artifacts (with their files) and messages of the
    /// namespaces served: a whole number and a unit, s, m, h, d or w (e.g. `5m`, `1h`); `0`
    /// disables the sweep (`mnemon gc` still runs one by hand).
    #[arg(long, value_name = "DURATION", default_value = "10m",
          value_parser = mnemon_ops::expiry::parse_duration)]
    gc_interval: std::time::Duration,

    /// Address to listen on. The default accepts connections from this machine only.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,

    /// A name (with an optional port) the server is reached by, besides localhost, 127.0.0.1
    /// and [::1]: that of a reverse proxy forwarding its own `Host`, or the address clients of
    /// a non-loopback server use. Repeat for more. Requests naming any other host get 403,
    /// which stops DNS rebinding (docs/reference/rest.md#browsers). Without it, a loopback
    /// server accepts the loopback names only and any other address accepts any name.
    #[arg(long = "allowed-host", value_name = "NAME[:PORT]", action = clap::ArgAction::Append,
          value_parser = host_name)]
    allowed_hosts: Vec<String>,

    /// Requests with a larger body are refused with 413.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,

    /// Draw every random query vector from one RNG seeded with N, for reproducible runs.
    #[arg(long, value_name = "N")]
    random_seed: Option<u64>,

    /// Rank with the int8 pre-scan (docs/reference/library.md#fast-mode): the same results as the
    /// exact scan, several times faster on large libraries, for a quarter more memory.
    #[arg(long)]
    fast: bool,

    /// Score concurrent exact queries of large libraries in f32 only, without the int8
    /// pre-scan that shared scans use by default (docs/reference/host.md#operation): the
    /// results are the same either way; this saves the int8 copy's memory (a quarter of the
    /// embeddings), but every concurrent exact query then reads the f32 rows, four times the
    /// int8 copy's bytes, and is scored in full, so fewer are answered per second.
    #[arg(long)]
    no_shared_prescan: bool,

    /// Do not serve POST /admin/reload (use this behind a reverse proxy on the same machine,
    /// whose requests would count as loopback). SIGHUP still reloads.
    #[arg(long)]
    no_admin_reload: bool,

    /// The most connections open at once (kept 64 below the file-descriptor limit). Beyond it a
    /// new connection closes the one idle the longest, or gets 503 if every one is busy.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,

    /// Seconds a client may take to send a request's headers; slower connections are closed.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_HEADER_READ_TIMEOUT.as_secs_f64(),
          value_parser = seconds)]
    header_read_timeout: f64,

    /// Seconds a keep-alive connection may wait for its next request before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs_f64(),
          value_parser = seconds)]
    idle_timeout: f64,

    /// Seconds a response may wait for a client that stopped reading it (no write making
    /// progress); the connection is then closed.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_SEND_TIMEOUT.as_secs_f64(),
          value_parser = seconds)]
    send_timeout: f64,

    /// The most request-body bytes buffered across all connections; beyond it requests wait
    /// (see --queue-timeout), then get 503 with Retry-After.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_BUFFERED_BODY_BYTES)]
    max_buffered_body_bytes: usize,

    /// The most queries run at once; others wait (see --queue-timeout), then get 503 with
    /// Retry-After.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_CONCURRENT_QUERIES)]
    max_concurrent_queries: usize,

    /// Seconds a request waits for a query slot or body buffer room before it gets 503.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_QUEUE_TIMEOUT.as_secs_f64(),
          value_parser = seconds)]
    queue_timeout: f64,

    /// The largest serialised result of a library query (`POST /`, `/v1/library/query`, MCP
    /// `search_library`) or a reference render (`/v1/refs/…`); larger ones get 400 asking for
    /// less (a lower count, omit, fewer markers).
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_RESULT_BYTES)]
    max_result_bytes: usize,

    /// Libraries of at least this many bits are searched through their ANN index (built by
    /// `mnemon library pack --index`) when it is current; smaller ones, and queries asking
    /// `exact: true`, scan exactly. `0` uses every index (docs/reference/library.md#ann-index).
    #[arg(long, value_name = "BITS", default_value_t = mnemon::library::DEFAULT_INDEX_MIN_BITS)]
    index_min_bits: usize,

    /// The ANN index's search beam: the candidates the walk keeps, the best of which are
    /// re-ranked with their exact scores. Larger is slower and finds more of the true nearest
    /// bits. Default: by library size, 128 up to 100,000 bits and 128 · √(bits / 100,000)
    /// above (416 at 1,000,000), about 99% of the true nearest bits
    /// (docs/reference/library.md#ann-index).
    #[arg(long, value_name = "EF", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    index_ef: Option<u32>,

    /// The most namespaces (tenants) whose stores stay open: past it, the least recently used
    /// is closed, and opened again on its next request (docs/limits.md#namespaces-held-open).
    #[arg(long, value_name = "N", default_value_t = mnemon_server::MAX_OPEN_NAMESPACES,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    max_open_namespaces: usize,

    /// The most MiB of stored embedding vectors the memory store keeps in memory for searches
    /// across sessions and recalls of threads without a current mirror; a larger thread is read
    /// from the database file at each such search. SQLite only; every namespace served shares
    /// one. 100,000 vectors of 1,536 dimensions take about 590 MiB
    /// (docs/reference/memory.md#the-recall-index).
    #[arg(long, value_name = "MIB", default_value_t = default_memory_cache_mib(),
          value_parser = clap::value_parser!(u32).range(0..=1_048_576))]
    memory_cache_mib: u32,

    /// Threads with at least this many embeddings are recalled through an approximate index
    /// (built in the background; the exact scan answers until it is ready); `0` indexes every
    /// thread. SQLite only: PostgreSQL uses pgvector (docs/reference/memory.md#the-recall-index).
    #[arg(long, value_name = "MESSAGES", default_value_t = mnemon::memory::RecallIndexOptions::default().min_messages)]
    recall_index_min_messages: usize,

    /// Turn the recall index off: every recall scans its thread exactly.
    #[arg(long, conflicts_with = "recall_index_min_messages")]
    no_recall_index: bool,

    /// The recall index's search beam: wider finds more of the exact top k and costs latency.
    /// SQLite default: by thread size, as for libraries (128 up to 100,000 embeddings, 416 at
    /// 1,000,000). PostgreSQL: pgvector's `hnsw.ef_search` (default 40, at most 1,000;
    /// docs/postgres.md#the-hnsw-shortlist).
    #[arg(long, value_name = "EF", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    recall_index_ef: Option<u32>,
}

/// `--memory-cache-mib`'s default: the SQLite memory store's own (256 MiB).
fn default_memory_cache_mib() -> u32 {
    let bytes = mnemon::memory::SqliteMemoryOptions::default().vector_cache_bytes;
    u32::try_from(bytes >> 20).unwrap_or(u32::MAX)
}

impl ServeArgs {
    /// The memory store's recall settings these flags ask for.
    fn recall(&self) -> mnemon::RecallOptions {
        let min_messages = if self.no_recall_index {
            usize::MAX
        } else {
            self.recall_index_min_messages
        };
        mnemon::RecallOptions {
            vector_cache_bytes: Some((self.memory_cache_mib as usize) << 20),
            index: mnemon::memory::RecallIndexOptions {
                min_messages,
                ef: self.recall_index_ef.map(|ef| ef as usize),
                ..mnemon::memory::RecallIndexOptions::default()
            },
        }
    }
}

/// A positive, finite number of seconds.
fn seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 => Ok(secs),
        _ => Err(format!(
            "{text:?} is not a number of seconds between 0 and 86400"
        )),
    }
}

/// Runs the server until SIGINT or SIGTERM.
pub(crate) fn run(args: ServeArgs, target: &Target<'_>, quiet: bool) -> CliResult {
    init_logging(quiet);
    // Connections take a descriptor each: the soft limit (often 1,024) would cap them.
    match mnemon_host::raise_fd_limit() {
        Ok(Some((before, after))) => {
            tracing::info!(
                before,
                after,
                "raised the open-file limit to its hard limit"
            );
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(%error, "cannot raise the open-file limit"),
    }
    let data_dir = target.data_dir;
    let loopback = args.addr.ip().is_loopback();
    let keys = key_store(target)?;
    if !loopback && !args.insecure && keys.is_none() {
        return Err(CliError::input(anyhow::anyhow!(
            "refusing to serve the stores on {} without API keys: anyone who can reach it could \
             read and change them; create a key with `mnemon keys create --namespace <ns> --role \
             write`, listen on 127.0.0.1 (the default), or pass --insecure if a proxy in front \
             of the server does the authentication",
            args.addr
        )));
    }
    let keyed = keys.is_some();
    let index = mnemon::library::IndexUse {
        min_bits: args.index_min_bits,
        ef: args.index_ef.map(|ef| ef as usize),
    };
    let recall = args.recall();
    let mut rest = server_config(
        target,
        args.embedding_model.as_deref(),
        keys,
        index,
        recall,
        args.max_concurrent_queries,
        args.max_result_bytes,
    )?;
    rest.gc_interval = args.gc_interval;
    rest.tenants.set_capacity(args.max_open_namespaces);
    if !args.allowed_hosts.is_empty() {
        // The names given, on any address: an open server on 0.0.0.0 (--insecure) is also
        // reached on loopback, by the user's browser, so DNS rebinding reaches it there too.
        rest.allowed_hosts = Some(
            ["localhost", "127.0.0.1", "[::1]"]
                .into_iter()
                .map(str::to_owned)
                .chain(args.allowed_hosts.iter().cloned())
                .collect(),
        );
    } else if !loopback {
        // Reached under names we cannot know: keys (or the proxy of --insecure) protect the
        // routes, not the Host check, which guards loopback servers against DNS rebinding.
        rest.allowed_hosts = Some(Vec::new());
    }
    let rebinding_open = !loopback && !keyed && args.allowed_hosts.is_empty();
    let data_dir_libraries = data_dir.join(mnemon::LIBRARIES_DIR);
    let sources = Sources {
        library: library_source(
            args.library,
            std::env::var_os("LIBRARY_FILENAME"),
            &[Path::new(mnemon::LIBRARIES_DIR), &data_dir_libraries],
        ),
        config: ConfigSource::discover(args.config),
    };
    let options = HostOptions {
        max_body_bytes: args.max_body_bytes,
        random_seed: args.random_seed,
        fast: args.fast,
        prescan_shared_scans: !args.no_shared_prescan,
        admin_reload: !args.no_admin_reload,
        max_connections: args.max_connections,
        header_read_timeout: Duration::from_secs_f64(args.header_read_timeout),
        idle_timeout: Duration::from_secs_f64(args.idle_timeout),
        send_timeout: Duration::from_secs_f64(args.send_timeout),
        max_buffered_body_bytes: args.max_buffered_body_bytes,
        max_concurrent_queries: args.max_concurrent_queries,
        queue_timeout: Duration::from_secs_f64(args.queue_timeout),
        max_result_bytes: args.max_result_bytes,
        index,
        ..HostOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failure)?;
    let namespace = target.namespace.as_str().to_owned();
    let backend = if target.database_url.is_some() {
        "PostgreSQL (--database-url)".to_owned()
    } else {
        format!("SQLite in {}", data_dir.display())
    };
    let insecure = args.insecure;
    let result = runtime.block_on(async move {
        let library = sources.library.to_string();
        let config = sources.config.to_string();
        let server = Server::bind(args.addr, sources, options, rest)
            .await
            .map_err(startup_error)?;
        let addr = server.local_addr().map_err(CliError::failure)?;
        tracing::info!(
            %library,
            %config,
            bits = server.host().bits(),
            model = %server.host().model(),
            stores = %backend,
            %namespace,
            "serving on http://{addr}/ (REST under /v1/, its OpenAPI document at \
             /v1/openapi.json; MCP at /mcp; the inspector at /ui/)"
        );
        if keyed {
            tracing::info!(
                "API keys required: every /v1, /mcp and /metrics request needs \
                 `Authorization: Bearer <key>` and runs in its key's namespace"
            );
            if !addr.ip().is_loopback() {
                tracing::warn!(
                    "API keys travel in clear over plain HTTP on {addr}: put a TLS-terminating \
                     reverse proxy in front (docs/reference/keys.md#transport-tls-and-reverse-proxies)"
                );
            }
        } else if insecure {
            tracing::warn!(
                "no API keys and --insecure: every request may read and change namespace \
                 {namespace:?}"
            );
            if rebinding_open {
                tracing::warn!(
                    "any name reaches this server, so a web page its users open can read and \
                     change it through DNS rebinding: list the names clients use with \
                     --allowed-host (docs/reference/rest.md#browsers)"
                );
            }
        } else {
            tracing::info!(
                "no API keys: open to this machine only, every request is the admin of \
                 namespace {namespace:?}"
            );
        }
        server.run_until_signal().await.map_err(CliError::failure)
    });
    // The stores close their connections with blocking calls: after the runtime is gone.
    drop(runtime);
    result
}

/// The REST side of the server: the stores of `--data-dir` (SQLite) or `--database-url`
/// (PostgreSQL) for `--namespace`, with the embedder of `--embedding-model`, open to every
/// request (no keys: loopback only unless `--insecure`), its library queries using the ANN
/// index as the Polymath endpoint does (`index`).
///
/// PostgreSQL, and a data directory whose database exists, are opened now, so a bad URL or a
/// damaged file stops the start. A data directory without a database is created by the first
/// request that uses the stores: a server that only ever answers library queries writes
/// nothing.
fn server_config(
    target: &Target<'_>,
    embedding_model: Option<&str>,
    keys: Option<Arc<KeyStore>>,
    index: mnemon::library::IndexUse,
    recall: mnemon::RecallOptions,
    operations: usize,
    max_result_bytes: usize,
) -> Result<ServerConfig, CliError> {
    let mut options = target.open_options().with_recall(recall);
    // As many PostgreSQL connections as operations run at once: none waits for one.
    options.postgres_pools = mnemon_ops::PostgresPools::with_store_connections(operations);
    let embedder: Option<Arc<dyn Embedder>> = match embedding_model {
        None => None,
        Some(model) => Some(Arc::from(
            mnemon_embed::embedder_for_model(model)
                .with_context(|| format!("cannot use --embedding-model {model:?}"))
                .map_err(CliError::input)?,
        )),
    };
    let dir = target.data_dir.to_path_buf();
    let namespace = target.namespace.clone();
    if let Some(store) = keys {
        // Every key's namespace is served, each opened on its first request.
        let tenants = Tenants::new(move |asked: &Namespace| {
            let options = options.clone().with_namespace(asked.clone());
            let stores = Mnemon::open_with(&dir, &options).map_err(OpsError::Open)?;
            let service = Service::new(stores)
                .with_index(index)
                .with_max_result_bytes(max_result_bytes);
            Ok(match &embedder {
                Some(embedder) => service.with_embedder(Arc::clone(embedder)),
                None => service,
            })
        });
        return Ok(ServerConfig {
            tenants,
            authenticator: Arc::new(KeyAuthenticator::new(store)),
            ready_namespace: namespace,
            allowed_hosts: None,
            gc_interval: mnemon_server::DEFAULT_GC_INTERVAL,
        });
    }
    let open = move || -> Result<Service, OpenError> {
        let service = Service::new(Mnemon::open_with(&dir, &options)?)
            .with_index(index)
            .with_max_result_bytes(max_result_bytes);
        Ok(match &embedder {
            Some(embedder) => service.with_embedder(Arc::clone(embedder)),
            None => service,
        })
    };
    // Open until a key is created: from then on the server refuses every request until it is
    // restarted, and so requires the keys (docs/reference/keys.md#running-open).
    let authenticator = Arc::new(OpenAccess::until_keys(
        namespace.clone(),
        keys_probe(target)?,
    ));
    let eager =
        target.database_url.is_some() || target.data_dir.join(mnemon::DATABASE_FILE).exists();
    let tenants = if eager {
        let service = open()
            .context("cannot open the stores to serve")
            .map_err(CliError::failure)?;
        Tenants::single(service)
    } else {
        let served = namespace.clone();
        Tenants::new(move |asked: &Namespace| {
            if *asked != served {
                return Err(OpsError::invalid(format!(
                    "this server serves namespace {:?} only",
                    served.as_str()
                )));
            }
            open().map_err(OpsError::Open)
        })
    };
    Ok(ServerConfig {
        tenants,
        authenticator,
        ready_namespace: namespace,
        allowed_hosts: None,
        gc_interval: mnemon_server::DEFAULT_GC_INTERVAL,
    })
}

/// What an open server asks, once a second, to notice an API key created after it started
/// (`OpenAccess::until_keys`): on PostgreSQL the database's key store; in a data directory its
/// `mnemon.sqlite3`, opened read-only for each check (the file or its key tables may not exist
/// yet: `mnemon keys create` makes them), so the check never creates or writes anything.
pub(crate) fn keys_probe(target: &Target<'_>) -> Result<mnemon_server::KeysProbe, CliError> {
    if let Some(url) = target.database_url {
        let store = KeyStore::open_postgres(url, KeyStoreOptions::default())
            .context("cannot open the API key store")
            .map_err(CliError::failure)?;
        return Ok(Box::new(move || store.requires_keys()));
    }
    let path = target.data_dir.join(mnemon::DATABASE_FILE);
    Ok(Box::new(move || {
        if !path.exists() {
            return Ok(false);
        }
        KeyStore::open_sqlite_read_only(&path, KeyStoreOptions::default())?.requires_keys()
    }))
}

/// The key store, when it has ever held a key, revoked ones included
/// (docs/reference/keys.md#running-open): the `--database-url` database's, or the data
/// directory's `mnemon.sqlite3` when that exists (a data directory without a database has no
/// keys, and is not created here). Revoking every key locks the server rather than opening it.
pub(crate) fn key_store(target: &Target<'_>) -> Result<Option<Arc<KeyStore>>, CliError> {
    let store = match target.database_url {
        Some(url) => KeyStore::open_postgres(url, KeyStoreOptions::default()),
        None => {
            let path = target.data_dir.join(mnemon::DATABASE_FILE);
            if !path.exists() {
                return Ok(None);
            }
            KeyStore::open_sqlite(&path, KeyStoreOptions::default())
        }
    }
    .context("cannot open the API key store")
    .map_err(CliError::failure)?;
    let required = store
        .requires_keys()
        .context("cannot read the API key store")
        .map_err(CliError::failure)?;
    if !required {
        return Ok(None);
    }
    let active = store
        .any_keys()
        .context("cannot read the API key store")
        .map_err(CliError::failure)?;
    if !active {
        tracing::warn!(
            "every API key is revoked: every request will be refused until one is created with \
             `mnemon keys create --namespace <ns> --role <role>` (a server that has had keys \
             never runs open)"
        );
    }
    Ok(Some(Arc::new(store)))
}

/// The library to serve (docs/reference/host.md#serving-libraries): `--library`, then
/// `$LIBRARY_FILENAME`, then the first of `local_dirs` (`./libraries`, `<data-dir>/libraries`) that
/// is a directory, else the sample library.
fn library_source(
    explicit: Option<PathBuf>,
    env: Option<OsString>,
    local_dirs: &[&Path],
) -> LibrarySource {
    if let Some(path) = explicit {
        return LibrarySource::Path(path);
    }
    if let Some(path) = env.filter(|p| !p.is_empty()) {
        return LibrarySource::Path(PathBuf::from(path));
    }
    if let Some(dir) = local_dirs.iter().find(|dir| dir.is_dir()) {
        return LibrarySource::Path(dir.to_path_buf());
    }
    match Path::new(SAMPLE_PATH).canonicalize() {
        Ok(on_disk) if on_disk.is_file() => LibrarySource::Path(on_disk),
        _ => LibrarySource::bytes("the built-in sample library", SAMPLE_BYTES),
    }
}

/// Bad libraries and configs are input errors (exit code 2); anything else is a failure.
fn startup_error(error: HostError) -> CliError {
    match error {
        HostError::Library { .. } | HostError::Config(_) => CliError::input(error),
        other => CliError::failure(other),
    }
}

/// Logs to stderr; `RUST_LOG` overrides the level (`info`, or `warn` with `--quiet`).
fn init_logging(quiet: bool) {
    super::log_to_stderr(if quiet { "warn" } else { "info" }, true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_path_precedence() {
        let dir = tempfile::tempdir().unwrap();
        let libs = dir.path().join("libraries");
        let data_libs = dir.path().join("mnemon-data/libraries");
        let local: [&Path; 2] = [&libs, &data_libs];
        let name = |s: &LibrarySource| s.to_string();
        let explicit = Some(PathBuf::from("a.json"));
        let env = Some(OsString::from("b.json"));
        assert_eq!(
            name(&library_source(explicit, env.clone(), &local)),
            "a.json"
        );
        assert_eq!(name(&library_source(None, env, &local)), "b.json");
        // No library folder: the sample library from the checkout.
        let sample = library_source(None, Some(OsString::new()), &local);
        assert!(name(&sample).ends_with("library.json"), "{}", name(&sample));
        // The data directory's libraries, then ./libraries before them.
        std::fs::create_dir_all(&data_libs).unwrap();
        assert_eq!(
            name(&library_source(None, None, &local)),
            data_libs.display().to_string()
        );
        std::fs::create_dir(&libs).unwrap();
        assert_eq!(
            name(&library_source(None, None, &local)),
            libs.display().to_string()
        );
    }

    #[test]
    fn seconds_must_be_positive_and_finite() {
        assert_eq!(seconds("2.5"), Ok(2.5));
        for bad in ["0", "-1", "inf", "NaN", "x", "1e9"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }

    /// The recall flags reach the memory store's options; without them the store's own
    /// defaults apply.
    #[test]
    fn recall_flags_become_the_memory_options() {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let parse = |args: &[&str]| {
            let argv = std::iter::once("serve").chain(args.iter().copied());
            Wrap::try_parse_from(argv).map(|w| w.serve.recall())
        };
        let defaults = parse(&[]).unwrap();
        let store = mnemon::memory::SqliteMemoryOptions::default();
        assert_eq!(defaults.vector_cache_bytes, Some(store.vector_cache_bytes));
        assert_eq!(defaults.index, store.recall_index);
        let set = parse(&[
            "--memory-cache-mib",
            "1024",
            "--recall-index-min-messages",
            "10",
            "--recall-index-ef",
            "64",
        ])
        .unwrap();
        assert_eq!(set.vector_cache_bytes, Some(1 << 30));
        assert_eq!((set.index.min_messages, set.index.ef), (10, Some(64)));
        assert_eq!(
            parse(&["--no-recall-index"]).unwrap().index.min_messages,
            usize::MAX
        );
        assert!(parse(&["--no-recall-index", "--recall-index-min-messages", "5"]).is_err());
        assert!(parse(&["--recall-index-ef", "0"]).is_err());
        assert!(parse(&["--memory-cache-mib", "-1"]).is_err());
        let open = |args: &[&str]| {
            let argv = std::iter::once("serve").chain(args.iter().copied());
            Wrap::try_parse_from(argv).map(|w| w.serve.max_open_namespaces)
        };
        assert_eq!(open(&[]).unwrap(), mnemon_server::MAX_OPEN_NAMESPACES);
        assert_eq!(open(&["--max-open-namespaces", "4"]).unwrap(), 4);
        assert!(open(&["--max-open-namespaces", "0"]).is_err());
        let hosts = |args: &[&str]| {
            let argv = std::iter::once("serve").chain(args.iter().copied());
            Wrap::try_parse_from(argv).map(|w| w.serve.allowed_hosts)
        };
        assert_eq!(hosts(&[]).unwrap(), Vec::<String>::new());
        assert_eq!(
            hosts(&[
                "--allowed-host",
                "a.example",
                "--allowed-host",
                "b.example:8443"
            ])
            .unwrap(),
            ["a.example", "b.example:8443"]
        );
        for bad in ["", "https://a.example", "a.example/v1", "a b"] {
            assert!(hosts(&["--allowed-host", bad]).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_compiled_in_sample_loads() {
        let sample = LibrarySource::bytes("sample", SAMPLE_BYTES);
        let library = sample.load().unwrap();
        assert!(library.len() >= 20);
        assert!(library.model().starts_with("mnemon:hashing-v1-"));
    }
}
