//! `mnemon serve` run as the README shows it: no library given, so it serves the shipped sample
//! library; a form query like the README's `curl`, and a question in words through
//! `mnemon library args`, both answered over real HTTP on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// A running `mnemon serve`, stopped with SIGTERM on drop.
struct Serve {
    child: Child,
    addr: SocketAddr,
}

impl Serve {
    /// Starts `mnemon serve --addr 127.0.0.1:0` in `cwd` and waits for its address.
    fn start(cwd: &std::path::Path, extra: &[&str]) -> Serve {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mnemon"));
        command.args(["serve", "--addr", "127.0.0.1:0"]).args(extra);
        Self::spawn(command, cwd)
    }

    /// Starts `mnemon serve --addr 127.0.0.1:0` with at most `fds` open file descriptors (the
    /// soft and the hard limit).
    fn start_with_fd_limit(cwd: &std::path::Path, fds: u32, extra: &[&str]) -> Serve {
        Self::start_with_ulimit(cwd, &format!("-n {fds}"), extra)
    }

    /// Starts `mnemon serve --addr 127.0.0.1:0` after `ulimit {limit}` in its shell.
    fn start_with_ulimit(cwd: &std::path::Path, limit: &str, extra: &[&str]) -> Serve {
        let mut command = Command::new("sh");
        command
            .args(["-c", &format!("ulimit {limit} && exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_mnemon"))
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(extra);
        Self::spawn(command, cwd)
    }

    fn spawn(mut command: Command, cwd: &std::path::Path) -> Serve {
        let mut child = command
            .current_dir(cwd)
            .env_remove("LIBRARY_FILENAME")
            .env_remove("MNEMON_DATA_DIR")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mnemon serve starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("serving on http://").nth(1) {
                    let _ = tx.send(rest.split('/').next().unwrap_or_default().to_owned());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the server logs its address")
            .parse()
            .expect("a socket address");
        Serve { child, addr }
    }

    /// POSTs `body` to `/` and returns the status and the parsed JSON body.
    fn post(&self, content_type: &str, body: &[u8]) -> (u16, Value) {
        self.send("POST", "/", content_type, body)
    }

    /// Sends a JSON request to a REST route and returns the status and the parsed JSON body.
    fn rest(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        self.send(method, path, "application/json", body.as_bytes())
    }

    /// Sends one request and returns the status and the parsed JSON body.
    fn send(&self, method: &str, path: &str, content_type: &str, body: &[u8]) -> (u16, Value) {
        self.send_with(method, path, content_type, "", body)
    }

    /// A JSON request to a REST route with `Authorization: Bearer <key>`.
    fn rest_with_key(
        &self,
        key: &str,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let header = format!("Authorization: Bearer {key}\r\n");
        self.send_with(method, path, "application/json", &header, body.as_bytes())
    }

    /// Sends one request with `extra` header lines and returns the status and the JSON body.
    fn send_with(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        extra: &str,
        body: &[u8],
    ) -> (u16, Value) {
        self.try_send_with(method, path, content_type, extra, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// [`Serve::send_with`], with a refused connection or a cut response as an error (the
    /// server may have been killed).
    fn try_send_with(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        extra: &str,
        body: &[u8],
    ) -> std::io::Result<(u16, Value)> {
        let mut stream = TcpStream::connect(self.addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\n{extra}\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            self.addr,
            body.len()
        )?;
        stream.write_all(body)?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response)?;
        let cut = |what: &str| std::io::Error::other(format!("a cut response: {what}"));
        let text = String::from_utf8(response).map_err(|_| cut("not UTF-8"))?;
        let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| cut("no head"))?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| cut("no status"))?;
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{head}"
        );
        let value = serde_json::from_str(body).map_err(|_| cut("no JSON body"))?;
        Ok((status, value))
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

#[test]
fn serve_answers_the_readme_queries_from_the_sample_library() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let server = Serve::start(cwd.path(), &["--data-dir", data.to_str().unwrap()]);

    // The README's curl: a form body, no query embedding (a random vector), two bits.
    let (status, result) = server.post(
        "application/x-www-form-urlencoded",
        b"version=1&query_embedding_model=mnemon:hashing-v1-512&count=2&count_type=bit",
    );
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["embedding_model"], "mnemon:hashing-v1-512");
    assert_eq!(result["bits"].as_array().unwrap().len(), 2, "{result}");

    // The README's question in words: `mnemon library args … | curl --data-binary @-`.
    let args = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args([
            "library",
            "args",
            "--text",
            "how does a Fresnel lens work",
            "--count",
            "2",
            "--count-type",
            "bit",
        ])
        .current_dir(cwd.path())
        .env_remove("LIBRARY_FILENAME")
        .env_remove("MNEMON_DATA_DIR")
        .output()
        .unwrap();
    assert!(
        args.status.success(),
        "{}",
        String::from_utf8_lossy(&args.stderr)
    );
    let (status, result) = server.post("application/json", &args.stdout);
    assert_eq!(status, 200, "{result}");
    let first = result["bits"][0]["text"].as_str().unwrap();
    assert!(first.contains("Fresnel"), "{first}");

    // A malformed request gets a readable 400, and the server keeps serving.
    let (status, error) = server.post("application/json", b"{\"version\": 2}");
    assert_eq!(status, 400);
    assert!(error["error"].as_str().is_some(), "{error}");
    let (status, _) = server.post(
        "application/x-www-form-urlencoded",
        b"version=1&query_embedding_model=mnemon:hashing-v1-512&count=1&count_type=bit",
    );
    assert_eq!(status, 200);

    // Nothing was written where it was run: serving only reads.
    assert!(!data.exists());
}

/// `--max-result-bytes` bounds every library query and render, not only `POST /`: the
/// operations behind `/v1` and `/mcp` took their own default of 32 MiB whatever the flag said
/// (checked here through `/v1`; MCP's `search_library` calls the same operation).
#[test]
fn serve_applies_max_result_bytes_to_library_queries_and_renders() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let server = Serve::start(
        cwd.path(),
        &[
            "--data-dir",
            data.to_str().unwrap(),
            "--max-result-bytes",
            "2000",
            "--embedding-model",
            "mnemon:hashing-v1-512",
        ],
    );
    let every_bit = serde_json::json!({"text": "how does a Fresnel lens work", "count": -1});
    let (status, refused) = server.rest("POST", "/v1/library/query", Some(every_bit));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "result_too_large", "{refused}");
    let one = serde_json::json!({"text": "how does a Fresnel lens work", "count": 1, "omit": "embedding"});
    let (status, answered) = server.rest("POST", "/v1/library/query", Some(one));
    assert_eq!(status, 200, "{answered}");
    let (status, _) = server.rest(
        "PUT",
        "/v1/assets/long",
        Some(serde_json::json!({"content": {"text": "x".repeat(1_500)}})),
    );
    assert_eq!(status, 200);
    let twice =
        serde_json::json!({"text": "<|asset://long/content/text|> <|asset://long/content/text|>"});
    let (status, refused) = server.rest("POST", "/v1/refs/render", Some(twice));
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "result_too_large", "{refused}");
}

#[test]
fn serve_prefers_the_data_directory_libraries_over_the_sample() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let libraries = data.join("libraries");
    std::fs::create_dir_all(&libraries).unwrap();
    let one_bit = serde_json::json!({
        "version": 1,
        "embedding_model": "test-model",
        "bits": [{"text": "only bit", "embedding": "AACAPwAAAAAAAAAA", "token_count": 2,
                  "info": {"url": "https://example.com/only"}}],
    });
    std::fs::write(libraries.join("one.json"), one_bit.to_string()).unwrap();
    let server = Serve::start(cwd.path(), &["--data-dir", data.to_str().unwrap()]);
    let (status, result) = server.post(
        "application/x-www-form-urlencoded",
        b"version=1&query_embedding_model=test-model&count=5&count_type=bit",
    );
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["bits"][0]["text"], "only bit");
}

#[test]
fn idle_sockets_past_the_fd_limit_do_not_lock_out_healthz() {
    // The issue's scenario, scaled down: more idle sockets than the process may open files.
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let server =
        Serve::start_with_fd_limit(cwd.path(), 128, &["--data-dir", data.to_str().unwrap()]);
    let idle: Vec<TcpStream> = (0..200)
        .filter_map(|_| TcpStream::connect(server.addr).ok())
        .collect();
    assert!(idle.len() > 128, "only {} sockets connected", idle.len());
    std::thread::sleep(Duration::from_millis(500));
    let asked = std::time::Instant::now();
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "/healthz did not answer within {:?}: {response:?}",
        asked.elapsed()
    );
    assert!(response.ends_with(r#"{"status":"ok"}"#), "{response}");
}

/// Creates a key for `namespace` with `role` in the stores `at` (`["--data-dir", dir]` or
/// `["--database-url", url]`) and returns what `mnemon keys create` printed (`key`, `id`, …).
fn create_key(at: [&str; 2], namespace: &str, role: &str) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["keys", "create"])
        .args(at)
        .args(["--namespace", namespace, "--role", role])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Every namespace a server holds open used to keep SQLite connections of its own (the asset
/// store two, the artifact store one: six file descriptors), so under the common soft limit of
/// 1,024 descriptors `mnemon serve` failed every namespace past the 166th, with a 400. Now the
/// namespaces' store handles share their file's connections: 60 namespaces, each writing
/// assets, artifacts and memory, fit under a limit of 128 (before the fix the 18th failed).
#[test]
fn serve_holds_many_namespaces_within_a_low_fd_limit() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let data_dir = data.to_str().unwrap();
    let keys: Vec<String> = (0..60)
        .map(|i| {
            let created = create_key(["--data-dir", data_dir], &format!("tenant-{i}"), "write");
            created["key"].as_str().unwrap().to_owned()
        })
        .collect();
    let server = Serve::start_with_fd_limit(cwd.path(), 128, &["--data-dir", data_dir]);
    for (i, key) in keys.iter().enumerate() {
        let asset = serde_json::json!({"content": {"owner": i}});
        let (status, put) = server.rest_with_key(key, "PUT", "/v1/assets/a", Some(asset));
        assert_eq!(status, 200, "namespace {i}: {put}");
        let artifact = serde_json::json!({"scope": "s", "key": "plan", "type": "plan",
            "name": "The plan", "content": [i]});
        let (status, saved) = server.rest_with_key(key, "POST", "/v1/artifacts", Some(artifact));
        assert_eq!(status, 201, "namespace {i}: {saved}");
        let messages =
            serde_json::json!({"messages": [{"name": "user", "content": format!("{i}")}]});
        let path = "/v1/memory/sessions/chat/messages";
        let (status, added) = server.rest_with_key(key, "POST", path, Some(messages));
        assert_eq!(status, 200, "namespace {i}: {added}");
    }
    // Each namespace reads back its own, through the shared connections.
    for (i, key) in keys.iter().enumerate() {
        let path = "/v1/resolve?reference=asset://a/content/owner";
        let (status, value) = server.rest_with_key(key, "GET", path, None);
        assert_eq!(
            (status, value["value"].as_u64()),
            (200, Some(i as u64)),
            "{value}"
        );
        let path = "/v1/artifacts/latest?scope=s&key=plan";
        let (status, latest) = server.rest_with_key(key, "GET", path, None);
        assert_eq!(status, 200, "{latest}");
        assert_eq!(latest["content"], serde_json::json!([i]), "{latest}");
        let path = "/v1/memory/sessions/chat/messages?recent=5";
        let (status, got) = server.rest_with_key(key, "GET", path, None);
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["messages"].as_array().map(Vec::len), Some(1), "{got}");
        assert_eq!(got["messages"][0]["content"], format!("{i}"), "{got}");
    }
    assert_eq!(server.rest("GET", "/readyz", None).0, 200);
}

/// The soft limit on open files (often 1,024) capped the connections `mnemon serve` accepted:
/// it raises it to the hard limit at start.
#[test]
#[cfg(target_os = "linux")] // reads /proc
fn serve_raises_the_soft_fd_limit_to_the_hard_one() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let server = Serve::start_with_ulimit(
        cwd.path(),
        "-Sn 256",
        &["--data-dir", data.to_str().unwrap()],
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.child.id())).unwrap();
    let open_files: Vec<&str> = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .unwrap()
        .split_whitespace()
        .collect();
    // "Max open files <soft> <hard> files"
    let (soft, hard) = (open_files[3], open_files[4]);
    assert_eq!(soft, hard, "{limits}");
    assert_ne!(
        soft, "256",
        "the machine's hard limit is the soft one asked: {limits}"
    );
    assert_eq!(server.rest("GET", "/healthz", None).0, 200);
}

/// The REST side of `mnemon serve` on a data directory: memory and assets through /v1, search by
/// text with --embedding-model, readiness, and durability across a restart.
#[test]
fn serve_runs_the_rest_api_on_the_data_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let args = [
        "--data-dir",
        data.to_str().unwrap(),
        "--embedding-model",
        "mnemon:hashing-v1-512",
    ];
    {
        let server = Serve::start(cwd.path(), &args);
        assert_eq!(server.rest("GET", "/readyz", None).0, 200);
        let messages = serde_json::json!({"messages": [
            {"name": "user", "content": "my cat is called Miso"},
            {"name": "user", "content": "the weather is rainy today"}]});
        let (status, added) = server.rest(
            "POST",
            "/v1/memory/sessions/chat-1/messages",
            Some(messages),
        );
        assert_eq!((status, added["added"].as_u64()), (200, Some(2)), "{added}");
        let query = serde_json::json!({"query": {"text": "what is my cat called"}, "top_k": 1});
        let (status, hits) = server.rest("POST", "/v1/memory/sessions/chat-1/search", Some(query));
        assert_eq!(status, 200, "{hits}");
        assert_eq!(
            hits["hits"][0]["message"]["content"],
            "my cat is called Miso"
        );
        let asset = serde_json::json!({"content": {"labels": ["cat"]}});
        assert_eq!(server.rest("PUT", "/v1/assets/a1", Some(asset)).0, 200);
    }
    assert!(data.join("mnemon.sqlite3").is_file());
    // The same data through a new server.
    let server = Serve::start(cwd.path(), &args);
    let (status, value) = server.rest(
        "GET",
        "/v1/resolve?reference=asset://a1/content/labels/0",
        None,
    );
    assert_eq!(
        (status, value["value"].as_str()),
        (200, Some("cat")),
        "{value}"
    );
    let (status, got) = server.rest("GET", "/v1/memory/sessions/chat-1/messages?recent=1", None);
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["messages"][0]["content"], "the weather is rainy today");
    // No --embedding-model on a search by text: a typed error that says what to pass.
    drop(server);
    let server = Serve::start(cwd.path(), &["--data-dir", data.to_str().unwrap()]);
    let query = serde_json::json!({"query": {"text": "cat"}});
    let (status, error) = server.rest("POST", "/v1/memory/sessions/chat-1/search", Some(query));
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["code"], "embedder_not_configured");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--embedding-model")
    );
}

/// Once the data directory has an API key, every REST request needs one and runs in its
/// namespace; with keys a non-loopback address is allowed.
#[test]
fn serve_requires_keys_once_the_data_directory_has_some() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let data_dir = data.to_str().unwrap();
    let key = create_key(["--data-dir", data_dir], "acme", "write")["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let server = Serve::start(cwd.path(), &["--data-dir", data_dir]);
    let (status, error) = server.rest("GET", "/v1/assets", None);
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (401, Some("unauthorized")),
        "{error}"
    );
    let asset = serde_json::json!({"content": {"labels": ["cat"]}});
    let (status, put) = server.rest_with_key(&key, "PUT", "/v1/assets/a1", Some(asset));
    assert_eq!(status, 200, "{put}");
    drop(server);
    // The asset went to the key's namespace, where the CLI finds it.
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args([
            "asset",
            "list",
            "--data-dir",
            data_dir,
            "--namespace",
            "acme",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout), "a1\n");
    // With keys, a non-loopback address starts without --insecure.
    let mut command = Command::new(env!("CARGO_BIN_EXE_mnemon"));
    command.args(["serve", "--addr", "0.0.0.0:0", "--data-dir", data_dir]);
    let public = Serve::spawn(command, cwd.path());
    let port = public.addr.port();
    let local = Serve {
        child: Command::new("true").spawn().unwrap(),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let (status, list) = local.rest_with_key(&key, "GET", "/v1/assets", None);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["asset_ids"], serde_json::json!(["a1"]), "{list}");
    assert_eq!(local.rest("GET", "/v1/assets", None).0, 401);
    drop(public);
}

/// Revoking the last key used to turn a keyed server, on its next start, into an open one
/// (every request the admin of its namespace): behind a reverse proxy on the same machine,
/// open to the world. A store that has held keys now requires them for good.
#[test]
fn revoking_every_key_locks_the_server_rather_than_opening_it() {
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let data_dir = data.to_str().unwrap();
    let created = create_key(["--data-dir", data_dir], "acme", "write");
    let id = created["id"].as_str().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["keys", "revoke", id, "--data-dir", data_dir])
        .output()
        .unwrap();
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("last active key"), "{stderr}");
    let server = Serve::start(cwd.path(), &["--data-dir", data_dir]);
    let (status, error) = server.rest("GET", "/v1/assets", None);
    assert_eq!(
        (status, error["error"]["code"].as_str()),
        (401, Some("unauthorized")),
        "{error}"
    );
    let key = created["key"].as_str().unwrap();
    assert_eq!(server.rest_with_key(key, "GET", "/v1/assets", None).0, 401);
}

/// A server started open (no key had ever been created) stayed open after `mnemon keys create`
/// until it was restarted: behind a reverse proxy on the same machine, every request the admin
/// of its namespace, key or not, although the keys' documentation says that once a key exists
/// every request needs one. It now notices the key within a second and refuses every request
/// until restarted; restarted, it requires the key. Checked on a data directory without a
/// database at start (the key command creates it) and on one with stores already in it, and on
/// PostgreSQL.
#[test]
fn a_server_started_open_refuses_requests_once_a_key_is_created() {
    let cwd = tempfile::tempdir().unwrap();
    for with_stores in [false, true] {
        let data = cwd.path().join(format!("data-{with_stores}"));
        let data_dir = data.to_str().unwrap();
        let server = Serve::start(cwd.path(), &["--data-dir", data_dir]);
        if with_stores {
            let asset = serde_json::json!({"content": "before the key"});
            assert_eq!(server.rest("PUT", "/v1/assets/a1", Some(asset)).0, 200);
        }
        assert_eq!(server.rest("GET", "/v1/assets", None).0, 200);
        let key = create_key(["--data-dir", data_dir], "default", "write")["key"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_locked(&server, &key);
        drop(server);
        // Restarted, the server requires the key, and takes it.
        let server = Serve::start(cwd.path(), &["--data-dir", data_dir]);
        assert_eq!(server.rest("GET", "/v1/assets", None).0, 401);
        assert_eq!(server.rest_with_key(&key, "GET", "/v1/assets", None).0, 200);
    }
}

/// As `a_server_started_open_refuses_requests_once_a_key_is_created`, on PostgreSQL.
#[test]
fn a_server_started_open_on_postgresql_refuses_requests_once_a_key_is_created() {
    let pg = mnemon_tests::require_postgres!();
    let url = pg.fresh_database("cli_serve_open_then_keyed").unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let server = Serve::start(cwd.path(), &["--database-url", &url]);
    assert_eq!(server.rest("GET", "/v1/assets", None).0, 200);
    let key = create_key(["--database-url", &url], "default", "write")["key"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_locked(&server, &key);
}

/// Waits (at most 10 s: the server checks once a second) until `server` refuses a request
/// without a key, then checks that it refuses the REST and MCP routes with and without `key`.
fn assert_locked(server: &Serve, key: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, error) = server.rest("GET", "/v1/assets", None);
        if status == 401 {
            assert!(
                error["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("restarted")),
                "{error}"
            );
            break;
        }
        assert_eq!(status, 200, "{error}");
        assert!(
            std::time::Instant::now() < deadline,
            "the server still runs open 10 s after a key was created"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(server.rest_with_key(key, "GET", "/v1/assets", None).0, 401);
    let asset = serde_json::json!({"content": "after the key"});
    assert_eq!(server.rest("PUT", "/v1/assets/a2", Some(asset)).0, 401);
    let call = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    assert_eq!(server.rest("POST", "/mcp", Some(call)).0, 401);
}

/// Without API keys the stores are served on loopback only, unless told --insecure.
#[test]
fn serve_refuses_a_public_address_without_keys() {
    let cwd = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["serve", "--addr", "0.0.0.0:0"])
        .current_dir(cwd.path())
        .env_remove("MNEMON_DATA_DIR")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--insecure"), "{stderr}");
    assert!(!cwd.path().join("mnemon-data").exists());
}

/// `mnemon serve --database-url … --namespace …`: what the REST API stores is in that
/// namespace of the database, where the CLI finds it.
#[test]
fn serve_runs_the_rest_api_on_postgresql_in_its_namespace() {
    let pg = mnemon_tests::require_postgres!();
    let url = pg.fresh_database("cli_serve_rest").unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let data = cwd.path().join("data");
    let server = Serve::start(
        cwd.path(),
        &[
            "--data-dir",
            data.to_str().unwrap(),
            "--database-url",
            &url,
            "--namespace",
            "acme",
        ],
    );
    assert_eq!(server.rest("GET", "/readyz", None).0, 200);
    let asset = serde_json::json!({"asset_type": "note", "content": "from the server"});
    assert_eq!(server.rest("PUT", "/v1/assets/n1", Some(asset)).0, 200);
    let list = |namespace: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
            .args([
                "asset",
                "list",
                "--database-url",
                &url,
                "--namespace",
                namespace,
            ])
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    assert_eq!(list("acme"), "n1\n");
    assert_eq!(list("default"), "");
    // Nothing of the stores went to the data directory.
    assert!(!data.join("mnemon.sqlite3").exists());
}

/// Scale-out on one PostgreSQL database (docs/postgres.md#running-several-servers): two
/// `mnemon serve` processes share memory, assets and keys, and killing one with SIGKILL while
/// a client writes through it loses nothing it acknowledged.
#[test]
fn two_servers_share_one_postgresql_database_and_a_killed_one_loses_no_acknowledged_write() {
    let pg = mnemon_tests::require_postgres!();
    let url = pg.fresh_database("cli_serve_scale_out").unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // One key, created once, in the shared database.
    let created = create_key(["--database-url", &url], "acme", "write");
    let key = created["key"].as_str().unwrap().to_owned();
    // Each server has a data directory of its own: nothing is shared but the database.
    let start = |name: &str| {
        let data = cwd.path().join(name);
        Serve::start(
            cwd.path(),
            &[
                "--data-dir",
                data.to_str().unwrap(),
                "--database-url",
                &url,
                "--embedding-model",
                "mnemon:hashing-v1-512",
            ],
        )
    };
    let mut one = start("one");
    let two = start("two");
    for server in [&one, &two] {
        assert_eq!(server.rest("GET", "/readyz", None).0, 200);
        // Keys are required on both: the database has one.
        assert_eq!(server.rest("GET", "/v1/assets", None).0, 401);
    }

    // A memory added through one is recalled through the other at once.
    let messages = serde_json::json!({"messages": [
        {"name": "user", "content": "my cat is called Miso"},
        {"name": "user", "content": "the weather is rainy today"}]});
    let (status, added) = one.rest_with_key(
        &key,
        "POST",
        "/v1/memory/sessions/chat-1/messages",
        Some(messages),
    );
    assert_eq!((status, added["added"].as_u64()), (200, Some(2)), "{added}");
    let query = serde_json::json!({"query": {"text": "what is my cat called"}, "top_k": 1});
    let (status, hits) = two.rest_with_key(
        &key,
        "POST",
        "/v1/memory/sessions/chat-1/search",
        Some(query),
    );
    assert_eq!(status, 200, "{hits}");
    assert_eq!(
        hits["hits"][0]["message"]["content"],
        "my cat is called Miso"
    );
    // An asset put through one resolves through the other.
    let asset = serde_json::json!({"content": {"labels": ["cat", "dog"]}});
    let (status, put) = one.rest_with_key(&key, "PUT", "/v1/assets/a1", Some(asset));
    assert_eq!(status, 200, "{put}");
    let (status, value) = two.rest_with_key(
        &key,
        "GET",
        "/v1/resolve?reference=asset://a1/content/labels/1",
        None,
    );
    assert_eq!(
        (status, value["value"].as_str()),
        (200, Some("dog")),
        "{value}"
    );

    // A client writes through `one`, one message per request; `one` is killed (SIGKILL) while
    // the client is still writing. Every write it acknowledged is then read through `two`.
    let addr = one.addr;
    let writer_key = key.clone();
    let (acked_tx, acked_rx) = mpsc::channel::<usize>();
    let writer = std::thread::spawn(move || {
        let client = Serve {
            child: Command::new("true").spawn().unwrap(),
            addr,
        };
        let mut acknowledged = Vec::new();
        for i in 0..10_000 {
            let body = serde_json::json!({"messages": [
                {"id": format!("w-{i}"), "name": "writer", "content": format!("write {i}")}]});
            let header = format!("Authorization: Bearer {writer_key}\r\n");
            let answer = client.try_send_with(
                "POST",
                "/v1/memory/sessions/writes/messages",
                "application/json",
                &header,
                body.to_string().as_bytes(),
            );
            match answer {
                Ok((200, _)) => {
                    acknowledged.push(i);
                    let _ = acked_tx.send(i);
                }
                Ok((status, body)) => panic!("write {i} answered {status}: {body}"),
                // A refused connection or a cut response: the server is gone.
                Err(_) => break,
            }
        }
        acknowledged
    });
    // Let it get going, then kill the server mid-stream.
    for _ in 0..50 {
        acked_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the writer's first acknowledgements");
    }
    one.child.kill().unwrap();
    one.child.wait().unwrap();
    let acknowledged = writer.join().expect("the writer thread");
    assert!(
        acknowledged.len() >= 50 && acknowledged.len() < 10_000,
        "the kill did not land mid-stream: {} acknowledged",
        acknowledged.len()
    );
    let (status, got) = two.rest_with_key(&key, "GET", "/v1/memory/sessions/writes/messages", None);
    assert_eq!(status, 200, "{got}");
    let stored: Vec<String> = got["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = acknowledged.iter().map(|i| format!("w-{i}")).collect();
    // In order, and at most the one write in flight at the kill beyond what was acknowledged.
    assert!(
        stored.starts_with(&expected),
        "an acknowledged write is missing after the kill: {} acknowledged, {} stored",
        expected.len(),
        stored.len()
    );
    assert!(stored.len() <= expected.len() + 1, "{stored:?}");
    // The surviving server still writes to the same session (no lock left behind).
    let more =
        serde_json::json!({"messages": [{"id": "after", "name": "user", "content": "after"}]});
    let (status, added) = two.rest_with_key(
        &key,
        "POST",
        "/v1/memory/sessions/writes/messages",
        Some(more),
    );
    assert_eq!((status, added["added"].as_u64()), (200, Some(1)), "{added}");
    // A restarted server sees everything.
    let one = start("one");
    let (status, got) = one.rest_with_key(
        &key,
        "GET",
        "/v1/memory/sessions/writes/messages?recent=1",
        None,
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["messages"][0]["id"], "after", "{got}");
    // The key revoked once (from the command line) is refused by both servers within the key
    // cache's lifetime (1 s by default).
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args([
            "keys",
            "revoke",
            "--database-url",
            &url,
            created["id"].as_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let revoked = std::time::Instant::now();
    for server in [&one, &two] {
        loop {
            let (status, _) = server.rest_with_key(&key, "GET", "/v1/assets", None);
            if status == 401 {
                break;
            }
            assert_eq!(status, 200);
            assert!(
                revoked.elapsed() < Duration::from_secs(5),
                "a revoked key still works after {:?}",
                revoked.elapsed()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    eprintln!(
        "scale-out: {} writes acknowledged before the kill, {} stored",
        expected.len(),
        stored.len()
    );
}

/// `mnemon.toml` in the current directory configures `mnemon serve` and the global options;
/// a flag or the environment overrides it; a mistake in it stops the command with exit code 2
/// (docs/reference/config.md).
#[test]
fn mnemon_toml_configures_serve_below_flags_and_environment() {
    let cwd = tempfile::tempdir().unwrap();
    std::fs::write(
        cwd.path().join("mnemon.toml"),
        "data-dir = \"from-file\"\nnamespace = \"acme\"\n\n[serve]\nmax-body-bytes = 64\n",
    )
    .unwrap();
    let big = vec![b' '; 200];
    {
        let server = Serve::start(cwd.path(), &[]);
        let (status, _) = server.send("POST", "/", "application/json", &big);
        assert_eq!(status, 413, "the file's max-body-bytes is not applied");
        let asset = serde_json::json!({"content": "configured"});
        assert_eq!(server.rest("PUT", "/v1/assets/c1", Some(asset)).0, 200);
    }
    // The server used the file's data directory and namespace.
    assert!(cwd.path().join("from-file/mnemon.sqlite3").is_file());
    let list = |extra: &[&str], env: &[(&str, &str)]| {
        let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
            .args(["asset", "list"])
            .args(extra)
            .current_dir(cwd.path())
            .env_remove("MNEMON_DATA_DIR")
            .env_remove("MNEMON_NAMESPACE")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        )
    };
    let (listed, said) = list(&[], &[]);
    assert_eq!(listed, "c1\n");
    assert!(
        said.contains("settings from mnemon.toml: data-dir, namespace"),
        "{said}"
    );
    // The environment and the command line each override the file.
    assert_eq!(list(&[], &[("MNEMON_NAMESPACE", "default")]).0, "");
    assert_eq!(list(&["--namespace", "default"], &[]).0, "");
    // A flag beats the file's [serve] value.
    let server = Serve::start(cwd.path(), &["--max-body-bytes", "100000"]);
    let (status, _) = server.send("POST", "/", "application/json", &big);
    assert_ne!(status, 413);
    drop(server);
    // A mistake names the file and the key.
    std::fs::write(
        cwd.path().join("mnemon.toml"),
        "[serve]\nmax-bodybytes = 64\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("serve")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("mnemon.toml") && stderr.contains("unknown setting `serve.max-bodybytes`"),
        "{stderr}"
    );
    // The sweep interval is a [serve] setting, checked as the flag is.
    std::fs::write(
        cwd.path().join("mnemon.toml"),
        "[serve]\ngc-interval = \"soon\"\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .arg("serve")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--gc-interval") && stderr.contains("e.g. 90s"),
        "{stderr}"
    );
    // ... and says the value came from the file, since the user typed no flag.
    assert!(
        stderr.contains("note: the config file") && stderr.contains("serve.gc-interval"),
        "{stderr}"
    );
    // A flag on the command line wins over a file setting it conflicts with, rather than
    // failing on the conflict (here the command then stops at the address check).
    std::fs::write(
        cwd.path().join("mnemon.toml"),
        "[serve]
recall-index-min-messages = 5
",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["serve", "--no-recall-index", "--addr", "0.0.0.0:0"])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("cannot be used with"), "{stderr}");
    assert!(stderr.contains("--insecure"), "{stderr}");
    // `$LIBRARY_FILENAME` names the library over the file's `library`, as the environment
    // wins over the file for every setting: the missing library the command stops on is the
    // environment's.
    std::fs::write(
        cwd.path().join("mnemon.toml"),
        "[serve]
library = \"from-the-file.json\"\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_mnemon"))
        .args(["serve", "--addr", "127.0.0.1:0"])
        .env("LIBRARY_FILENAME", "from-the-environment.json")
        .current_dir(cwd.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("from-the-environment.json") && !stderr.contains("from-the-file.json"),
        "{stderr}"
    );
}

/// `mnemon serve --no-shared-prescan` (issue 17 item 0): on a library large enough for shared
/// scans (2,048 bits × 512 = 1 Mi floats, the default threshold), concurrent exact queries give
/// the same bits and similarities with and without the int8 pre-scan, and as `--fast` does.
/// `--random-seed` makes the three servers draw the same query vectors in the same order.
#[test]
fn shared_scans_answer_the_same_with_and_without_the_prescan() {
    let dir = tempfile::tempdir().unwrap();
    let library = dir.path().join("large.json");
    mnemon_library::synthetic::write_synthetic(
        std::io::BufWriter::new(std::fs::File::create(&library).unwrap()),
        "synthetic-model",
        2048,
        512,
        17,
    )
    .unwrap();
    let library = library.to_str().unwrap();
    let base = ["--library", library, "--random-seed", "5"];
    let servers: Vec<Serve> = [&[][..], &["--no-shared-prescan"], &["--fast"]]
        .iter()
        .map(|extra| {
            let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
            Serve::start(dir.path(), &args)
        })
        .collect();
    let body = b"version=1&query_embedding_model=synthetic-model&count=5&count_type=bit";
    for round in 0..6 {
        // Four queries at once per server, so they share scans where the host batches them;
        // their answers are compared by the order they were drawn in, which the seeded RNG
        // fixes only for requests made one after another, so each server's are sorted.
        let answers: Vec<Vec<String>> = servers
            .iter()
            .map(|server| {
                let mut bits: Vec<String> = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..4)
                        .map(|_| {
                            scope.spawn(|| {
                                let (status, result) =
                                    server.post("application/x-www-form-urlencoded", body);
                                assert_eq!(status, 200, "{result}");
                                result["bits"].to_string()
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().unwrap()).collect()
                });
                bits.sort();
                bits
            })
            .collect();
        assert_eq!(answers[0], answers[1], "round {round}: prescan or not");
        assert_eq!(answers[0], answers[2], "round {round}: exact or fast");
        for bits in &answers[0] {
            assert_eq!(
                serde_json::from_str::<Value>(bits)
                    .unwrap()
                    .as_array()
                    .unwrap()
                    .len(),
                5
            );
        }
    }
}
