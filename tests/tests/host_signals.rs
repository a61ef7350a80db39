//! `Host::run_until_signal` (what `mnemon serve` runs): SIGHUP reloads the library, SIGTERM
//! drains and stops. A test binary of its own, since it signals its whole process: a signal
//! interrupts the blocking socket reads of other tests running beside it (a read with a
//! timeout is not restarted), which they would take for a closed connection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod host_support;

use std::time::{Duration, Instant};

use host_support::{Server, StopBy, file_sources, post_json};
use mnemon_host::HostOptions;
use mnemon_library::encode_embedding;
use serde_json::json;

fn write_library(path: &std::path::Path, bits: usize) {
    let mut lib = mnemon_library::Library::blank("test:signals");
    for i in 0..bits {
        let mut v = vec![0f32; 4];
        v[i % 4] = 1.0;
        lib.insert(&json!({"text": format!("bit {i}"),
                           "info": {"url": format!("https://example.com/{i}")},
                           "embedding": encode_embedding(&v), "token_count": 1}))
            .unwrap();
    }
    lib.save(path, false).unwrap();
}

fn kill(signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Sends `signal` every 100 ms until `done` holds (a signal that arrives just before the host
/// listens for it is lost, not fatal), for at most 20 s.
fn signal_until(signal: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{signal} had no effect");
        kill(signal);
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sighup_reloads_and_sigterm_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lib.json");
    write_library(&path, 2);
    let server = Server::start_with(
        file_sources(&path),
        HostOptions::default(),
        2,
        StopBy::Signals,
    );
    let args = json!({"version": 1, "query_embedding_model": "test:signals",
                      "query_embedding": encode_embedding(&[1.0, 0.0, 0.0, 0.0]),
                      "count": -1, "count_type": "bit"});
    let bits = || post_json(&server, &args).json()["details"]["counts"]["bits"].clone();
    assert_eq!(bits(), 2);

    write_library(&path, 5);
    signal_until("-HUP", || bits() == 5);

    signal_until("-TERM", || server.finished());
    let addr = server.addr;
    server.join().unwrap();
    assert!(std::net::TcpStream::connect(addr).is_err());
}

/// Issue 11 item 5, at host level: a packed sidecar overwritten in place (`cp` over it: truncate
/// then write) while the host serves from it killed the host with SIGBUS at the next query.
/// The host (in this test process) must survive: the query fails cleanly until a reload, which
/// maps the file again. A library JSON truncated before a reload fails that reload and the old
/// snapshot keeps serving.
#[test]
fn files_changed_under_the_host_never_end_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lib.json");
    write_library(&path, 3000);
    let side = mnemon_library::Library::open(&path)
        .unwrap()
        .pack(&path)
        .unwrap();
    let packed = std::fs::read(&side).unwrap();
    let server = Server::start(file_sources(&path), HostOptions::default());
    let args = json!({"version": 1, "query_embedding_model": "test:signals",
                      "query_embedding": encode_embedding(&[1.0, 0.0, 0.0, 0.0]),
                      "count": -1, "count_type": "bit"});
    let query = || post_json(&server, &args);
    assert_eq!(query().json()["details"]["counts"]["bits"], 3000);

    // `cp packed lib.json.mnx`: truncate, then write the same bytes back.
    std::fs::write(&side, &packed).unwrap();
    let reply = query();
    assert_eq!(
        reply.status,
        500,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    server.reload().unwrap();
    assert_eq!(query().json()["details"]["counts"]["bits"], 3000);

    // Truncated to nothing: the scan would touch pages past the end of the file.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&side)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(query().status, 500);

    // A JSON truncated before a reload: the reload fails, the old snapshot keeps serving.
    std::fs::remove_file(&side).unwrap();
    server.reload().unwrap();
    let json = std::fs::read(&path).unwrap();
    std::fs::write(&path, &json[..json.len() / 2]).unwrap();
    assert!(server.reload().is_err());
    assert_eq!(query().json()["details"]["counts"]["bits"], 3000);
    server.stop().unwrap();
}
