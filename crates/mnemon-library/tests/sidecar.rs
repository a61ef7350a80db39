//! A damaged sidecar never panics the process: it is rejected (and the JSON loaded) or, when the
//! damage leaves it consistent, opened and queried like any library.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use mnemon_library::synthetic::write_synthetic;
use mnemon_library::{AccessPolicy, Library, QueryOptions, sidecar_path, wire};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Header layout (see `src/sidecar.rs`): magic 0..8, version 8..12, dim 12..16, rows 16..24,
/// stride 24..32, source size 32..40, source mtime 40..48, then 8 × (offset, length).
const CHECKED_FIRST: [std::ops::Range<usize>; 2] = [0..12, 32..48];
const HEADER_LEN: usize = 48 + 8 * 16;

struct Packed {
    _dir: tempfile::TempDir,
    json: PathBuf,
    side: PathBuf,
    bytes: Vec<u8>,
}

/// A small library with tags and an omit, packed once.
fn packed() -> Packed {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("lib.json");
    let mut bytes = Vec::new();
    write_synthetic(&mut bytes, "m", 6, 8, 3).unwrap();
    let mut value: Value = serde_json::from_slice(&bytes).unwrap();
    value["bits"][1]["access_tag"] = json!("team");
    value["bits"][4]["access_tag"] = json!("hidden");
    value["omit"] = json!("similarity");
    std::fs::write(&json, serde_json::to_vec(&value).unwrap()).unwrap();
    let side = Library::open(&json).unwrap().pack(&json).unwrap();
    let bytes = std::fs::read(&side).unwrap();
    Packed {
        _dir: dir,
        json,
        side,
        bytes,
    }
}

fn args() -> Map<String, Value> {
    json!({"version": 1, "query_embedding_model": "m", "count": 4, "count_type": "bit"})
        .as_object()
        .unwrap()
        .clone()
}

/// Opens, queries (exact and fast) and saves; only a panic fails.
fn exercise(json: &Path) {
    let Ok(lib) = Library::open(json) else {
        return;
    };
    let policy = AccessPolicy::default();
    let run = |fast| {
        let options = QueryOptions {
            seed: Some(1),
            fast,
            ..QueryOptions::default()
        };
        wire::query(&lib, &args(), &policy, &options).ok()
    };
    assert_eq!(run(false), run(true), "fast and exact disagree");
    let mut out = Vec::new();
    let _ = lib.to_writer(&mut out, true);
    for bit in lib.bits() {
        let _ = (
            bit.id(),
            bit.text(),
            bit.embedding().len(),
            bit.access_tag(),
        );
    }
    let _ = lib.validate();
}

/// A header integer set to a value chosen to overflow or mislead size arithmetic.
fn nasty() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u64::MAX / 2),
        Just(u64::MAX / 4 + 1),
        Just(1u64 << 61),
        Just(1u64 << 32),
        Just(u64::from(u32::MAX)),
        0u64..16,
        0u64..70_000,
        any::<u64>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn damaged_sidecars_never_panic(
        fields in proptest::collection::vec((0usize..(HEADER_LEN - 12) / 4, nasty()), 0..4),
        flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
        header_flips in proptest::collection::vec((0usize..HEADER_LEN, any::<u8>()), 0..4),
        keep_stamp in prop::bool::weighted(0.9),
    ) {
        let p = packed_once();
        let mut bytes = p.bytes.clone();
        // Header fields overwritten whole (u32 or u64 at any 4-byte boundary after the
        // version), then single bytes anywhere and in the header.
        for (slot, value) in fields {
            let at = 12 + slot * 4;
            let width = if at == 12 { 4 } else { 8 };
            let end = (at + width).min(bytes.len());
            let le = value.to_le_bytes();
            bytes[at..end].copy_from_slice(&le[..end - at]);
        }
        for (at, b) in flips {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        for (at, b) in header_flips {
            bytes[at] = b;
        }
        // Keep what the reader checks before the sizes (magic, version, the source stamp), so
        // the damage reaches the size checks; now and then let it hit them too.
        if keep_stamp {
            for r in CHECKED_FIRST {
                bytes[r.clone()].copy_from_slice(&p.bytes[r]);
            }
        }
        std::fs::write(&p.side, &bytes).unwrap();
        exercise(&p.json);
    }

    #[test]
    fn truncated_sidecars_never_panic(len in 0usize..40_000) {
        let p = packed_once();
        std::fs::write(&p.side, &p.bytes[..len.min(p.bytes.len())]).unwrap();
        exercise(&p.json);
    }
}

/// One packed library per test thread, rewritten by every case.
fn packed_once() -> &'static Packed {
    thread_local! {
        static PACKED: &'static Packed = Box::leak(Box::new(packed()));
    }
    PACKED.with(|p| *p)
}

#[test]
fn the_intact_sidecar_is_used() {
    let p = packed();
    assert_eq!(p.side, sidecar_path(&p.json));
    // Overwrite the JSON with different content of the same size and restore its mtime: a
    // library that answers with the old content was read from the sidecar.
    let mtime = std::fs::metadata(&p.json).unwrap().modified().unwrap();
    let original = std::fs::read(&p.json).unwrap();
    let changed =
        String::from_utf8(original.clone())
            .unwrap()
            .replacen("Document 0", "Dokument 0", 1);
    assert_eq!(changed.len(), original.len());
    std::fs::write(&p.json, &changed).unwrap();
    let f = std::fs::File::options().write(true).open(&p.json).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    let lib = Library::open(&p.json).unwrap();
    let title = lib.bits().next().unwrap().info().unwrap().unwrap()["title"].clone();
    assert_eq!(title, "Document 0");
    exercise(&p.json);
}

/// Issue 11 item 5: a sidecar truncated or rewritten in place (`cp` over it) while a library
/// is served from it. Before, the next query touched a page past the new end of the file and
/// the process died of SIGBUS (this test binary with it); now the query fails with a clear
/// error and the process lives.
#[test]
fn a_sidecar_changed_under_a_served_library_is_refused_not_fatal() {
    let write_big = |path: &Path| {
        let f = std::fs::File::create(path).unwrap();
        write_synthetic(f, "m", 3000, 64, 9).unwrap();
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("lib.json");
    write_big(&json);
    let side = Library::open(&json).unwrap().pack(&json).unwrap();
    let packed = std::fs::read(&side).unwrap();
    let args = json!({"version": 1, "query_embedding_model": "m", "count": 5,
                      "count_type": "bit"});
    let args = args.as_object().unwrap();
    let query = |lib: &Library| {
        let options = QueryOptions {
            seed: Some(1),
            ..QueryOptions::default()
        };
        wire::query(lib, args, &AccessPolicy::default(), &options)
    };

    // Truncated: what `cp` does first.
    let lib = Library::open(&json).unwrap();
    assert!(query(&lib).is_ok());
    std::fs::OpenOptions::new()
        .write(true)
        .open(&side)
        .unwrap()
        .set_len(0)
        .unwrap();
    let err = query(&lib).unwrap_err();
    assert!(err.to_string().contains("was truncated"), "{err}");
    assert!(!err.is_client_error());
    assert!(query(&lib).is_err(), "a damaged library stays refused");
    // Reading the mapped rows and texts directly faults on the missing pages: rows read as
    // zeros instead of ending the process, and texts fail as corrupt rather than reading as
    // empty (issue 12 item 4: corruption is never hidden).
    let view = lib.embeddings();
    assert_eq!(view.row(view.rows() - 1).unwrap()[0], 0.0);
    for text in lib.texts() {
        let err = text.unwrap_err();
        assert!(err.to_string().contains("is corrupt"), "{err}");
        assert!(!err.is_client_error());
    }
    drop(lib);

    // Rewritten in place with bytes of the same size: no fault at all, still refused.
    std::fs::write(&side, &packed).unwrap();
    let lib = Library::open(&json).unwrap();
    assert!(query(&lib).is_ok());
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&side, &packed).unwrap();
    let err = query(&lib).unwrap_err();
    assert!(err.to_string().contains("rewritten in place"), "{err}");
    drop(lib);

    // Replaced by a rename (what `mnemon library pack` does): the old file stays valid.
    let lib = Library::open(&json).unwrap();
    let fresh = dir.path().join("fresh.mnx");
    std::fs::write(&fresh, &packed).unwrap();
    std::fs::rename(&fresh, &side).unwrap();
    assert!(query(&lib).is_ok());
}

/// Issue 11 item 5: a library JSON truncated while it loads (a deploy during a reload) killed
/// the process with SIGBUS; the load now fails with a clear error.
#[test]
fn a_json_truncated_while_it_loads_fails_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("lib.json");
    let f = std::fs::File::create(&json).unwrap();
    // Large enough for several progress calls (one per batch of 4,096 bits).
    write_synthetic(f, "m", 20_000, 16, 4).unwrap();
    let target = json.clone();
    let truncated = std::sync::atomic::AtomicBool::new(false);
    let truncated = std::sync::Arc::new(truncated);
    let flag = std::sync::Arc::clone(&truncated);
    let options = mnemon_library::OpenOptions {
        ignore_sidecar: true,
        progress: Some(std::sync::Arc::new(move |_parsed| {
            if !flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&target)
                    .unwrap()
                    .set_len(0)
                    .unwrap();
            }
        })),
        ..Default::default()
    };
    let err = Library::open_with(&json, &options).unwrap_err();
    assert!(truncated.load(std::sync::atomic::Ordering::SeqCst));
    assert!(err.to_string().contains("lib.json was truncated"), "{err}");
}

/// Issue 12 item 2: `pack` replaces the sidecar through the workspace's one atomic-write helper:
/// packing again over an open, mapped sidecar leaves the old map valid, no temporary file stays
/// behind, and a directory that cannot be written fails with the path and no partial sidecar.
#[test]
fn pack_replaces_the_sidecar_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("lib.json");
    write_synthetic(std::fs::File::create(&json).unwrap(), "m", 50, 8, 5).unwrap();
    let lib = Library::open(&json).unwrap();
    let side = lib.pack(&json).unwrap();
    let mapped = Library::open(&json).unwrap();
    let args = json!({"version": 1, "query_embedding_model": "m", "count": 3,
                      "count_type": "bit"});
    let options = QueryOptions {
        seed: Some(2),
        ..QueryOptions::default()
    };
    let query = |lib: &Library| {
        wire::query(
            lib,
            args.as_object().unwrap(),
            &AccessPolicy::default(),
            &options,
        )
        .unwrap()
    };
    let before = query(&mapped);
    assert_eq!(lib.pack(&json).unwrap(), side);
    assert_eq!(
        query(&mapped),
        before,
        "the replaced sidecar's map stays valid"
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["lib.json", "lib.json.mnx"]);

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).unwrap();
        let inner = locked.join("lib.json");
        std::fs::copy(&json, &inner).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
        // Root may write anyway; then there is nothing to check.
        if std::fs::File::create(locked.join("probe")).is_err() {
            let err = lib.pack(&inner).unwrap_err();
            assert!(err.to_string().contains("lib.json.mnx"), "{err}");
            assert!(!err.is_client_error());
            let left: Vec<_> = std::fs::read_dir(&locked).unwrap().collect();
            assert_eq!(left.len(), 1, "only the library file");
        }
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
