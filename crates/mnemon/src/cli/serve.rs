//! `mnemon serve`: the library host (docs/reference/host.md#library-host-protocol).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use std::time::Duration;

use mnemon_host::{
    ConfigSource, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BUFFERED_BODY_BYTES, DEFAULT_MAX_CONCURRENT_QUERIES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_RESULT_BYTES, DEFAULT_QUEUE_TIMEOUT, Host, HostError, HostOptions, LibrarySource,
    Sources,
};

use super::{CliError, CliResult};

/// Where the sample library lives in a source checkout (and in the packaged crate, which is why
/// it sits inside this crate; `examples/sample-library` at the top of the repository links
/// here); `serve` reads it from disk there, so a SIGHUP picks up a regenerated file.
const SAMPLE_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/sample-library/library.json");

/// The same sample library compiled in, so `serve` works from anywhere.
const SAMPLE_BYTES: &[u8] = include_bytes!("../../sample-library/library.json");

/// Serve embedding libraries over HTTP, compatible with Polymath clients.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
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

    /// Address to listen on. The default accepts connections from this machine only.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,

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

    /// The largest serialised result; larger ones get 400 asking for a lower count or omit.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_RESULT_BYTES)]
    max_result_bytes: usize,
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

/// Runs the host until SIGINT or SIGTERM.
pub(crate) fn run(args: ServeArgs, data_dir: &Path, quiet: bool) -> CliResult {
    init_logging(quiet);
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
        admin_reload: !args.no_admin_reload,
        max_connections: args.max_connections,
        header_read_timeout: Duration::from_secs_f64(args.header_read_timeout),
        idle_timeout: Duration::from_secs_f64(args.idle_timeout),
        max_buffered_body_bytes: args.max_buffered_body_bytes,
        max_concurrent_queries: args.max_concurrent_queries,
        queue_timeout: Duration::from_secs_f64(args.queue_timeout),
        max_result_bytes: args.max_result_bytes,
        ..HostOptions::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
        .map_err(CliError::failure)?;
    runtime.block_on(async move {
        let library = sources.library.to_string();
        let config = sources.config.to_string();
        let host = Host::bind(args.addr, sources, options)
            .await
            .map_err(startup_error)?;
        let addr = host.local_addr().map_err(CliError::failure)?;
        tracing::info!(
            %library,
            %config,
            bits = host.bits(),
            model = %host.model(),
            "serving on http://{addr}/"
        );
        host.run_until_signal().await.map_err(CliError::failure)
    })
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

    #[test]
    fn the_compiled_in_sample_loads() {
        let sample = LibrarySource::bytes("sample", SAMPLE_BYTES);
        let library = sample.load().unwrap();
        assert!(library.len() >= 20);
        assert!(library.model().starts_with("mnemon:hashing-v1-"));
    }
}
