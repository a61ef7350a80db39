//! A running server for the tests: the real server of `mnemon-server` on 127.0.0.1:0, which
//! mounts the inspector at `/ui/` beside `/v1`, so the page and the API share one origin.

use std::net::SocketAddr;
use std::sync::Arc;

use mnemon_embed::HashingEmbedder;
use mnemon_host::{ConfigSource, HostOptions, LibrarySource, Sources};
use mnemon_ops::{Service, Stores};
use mnemon_server::{Server, ServerConfig};
use serde_json::Value;

/// Installs ring as the process-wide rustls provider if none is: the workspace builds reqwest
/// without a default provider (see `mnemon_embed`), and a test's HTTP client needs one even for
/// plain `http://` URLs once a workspace build unifies reqwest's TLS features.
pub fn crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The sample library `mnemon serve` answers from by default.
pub const SAMPLE: &[u8] = include_bytes!("../../mnemon/sample-library/library.json");

/// A running server; stopped when dropped.
pub struct Running {
    /// The REST server, `http://127.0.0.1:port`.
    pub rest: String,
    /// The inspector's origin: the same server.
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn sample_model() -> String {
    let library: Value = serde_json::from_slice(SAMPLE).unwrap();
    library["embedding_model"].as_str().unwrap().to_owned()
}

/// Starts the server over `stores` (hashing embedder of the sample library's model).
pub fn start(stores: Stores) -> Running {
    start_with(stores, None)
}

/// [`start`], requiring the keys of `keys` on every request when given (as `mnemon serve`
/// does over a store that holds keys).
pub fn start_with(stores: Stores, keys: Option<Arc<mnemon_keys::KeyStore>>) -> Running {
    let embedder = HashingEmbedder::from_model_name(&sample_model()).unwrap();
    let service = Service::new(stores).with_embedder(Arc::new(embedder));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let sources = Sources {
                library: LibrarySource::bytes("sample", SAMPLE),
                config: ConfigSource::Defaults,
            };
            let mut config = ServerConfig::open(service);
            if let Some(keys) = keys {
                config.authenticator = Arc::new(mnemon_server::KeyAuthenticator::new(keys));
            }
            let server = Server::bind(
                "127.0.0.1:0".parse().unwrap(),
                sources,
                HostOptions::default(),
                config,
            )
            .await
            .unwrap();
            addr_tx.send(server.local_addr().unwrap()).unwrap();
            server
                .run(async move {
                    let _ = stop_rx.await;
                })
                .await
                .unwrap();
        });
    });
    let addr = addr_rx.recv().unwrap();
    Running {
        rest: format!("http://{addr}"),
        base: format!("http://{addr}"),
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

/// A JSON call to the REST server that must succeed.
pub fn call(
    client: &reqwest::blocking::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut request = client.request(method.clone(), url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().unwrap();
    let status = response.status();
    let text = response.text().unwrap();
    assert!(status.is_success(), "{method} {url}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// A `width` x `height` RGB PNG (a colour gradient), written with stored deflate blocks so the
/// test needs no image crate.
pub fn png(width: u32, height: u32) -> Vec<u8> {
    let mut raw = Vec::new();
    for y in 0..height {
        raw.push(0); // filter: none
        for x in 0..width {
            raw.extend_from_slice(&[(x * 255 / width) as u8, (y * 255 / height) as u8, 160]);
        }
    }
    // zlib: header, stored blocks of at most 65,535 bytes, Adler-32.
    let mut zlib = vec![0x78, 0x01];
    let blocks: Vec<&[u8]> = raw.chunks(65_535).collect();
    for (i, block) in blocks.iter().enumerate() {
        zlib.push(u8::from(i + 1 == blocks.len()));
        let len = block.len() as u16;
        zlib.extend_from_slice(&len.to_le_bytes());
        zlib.extend_from_slice(&(!len).to_le_bytes());
        zlib.extend_from_slice(block);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in &raw {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    zlib.extend_from_slice(&((b << 16) | a).to_be_bytes());
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    for (kind, data) in [(b"IHDR", ihdr), (b"IDAT", zlib), (b"IEND", Vec::new())] {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut chunk = kind.to_vec();
        chunk.extend_from_slice(&data);
        out.extend_from_slice(&chunk);
        out.extend_from_slice(&crc32(&chunk).to_be_bytes());
    }
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
