//! A damaged sidecar never panics the process: it is rejected (and the JSON loaded) or, when the
//! damage leaves it consistent, opened and queried like any library.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use mnemon_library::synthetic::write_synthetic;
use mnemon_library::{AccessPolicy, Library, QueryOptions, sidecar_path};
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
        lib.query_with(&args(), &policy, &options).ok()
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
    let title = lib.bits().next().unwrap().info()["title"].clone();
    assert_eq!(title, "Document 0");
    exercise(&p.json);
}
