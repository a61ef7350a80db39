//! The approximate index beside a library (docs/reference/library.md#ann-index): indexed queries
//! against the exact scan, access tags applied during the walk, and damaged or stale indexes
//! refused with a warning while queries scan exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use mnemon_library::synthetic::write_synthetic;
use mnemon_library::{
    AccessGrant, AccessPolicy, CountType, IndexState, IndexUse, Library, QueryMethod, QueryOptions,
    QueryRequest, index_path, wire,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// A library file of `bits` random unit vectors of `dim` dimensions, every bit whose index
/// `tagged` holds tagged `secret`, packed (sidecar and index).
struct Packed {
    _dir: tempfile::TempDir,
    json: PathBuf,
}

fn packed(bits: usize, dim: usize, seed: u64, tagged: impl Fn(usize) -> bool) -> Packed {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("lib.json");
    let mut bytes = Vec::new();
    write_synthetic(&mut bytes, "m", bits, dim, seed).unwrap();
    let mut value: Value = serde_json::from_slice(&bytes).unwrap();
    for i in 0..bits {
        if tagged(i) {
            value["bits"][i]["access_tag"] = json!("secret");
        }
    }
    std::fs::write(&json, serde_json::to_vec(&value).unwrap()).unwrap();
    let lib = Library::open(&json).unwrap();
    lib.pack(&json).unwrap();
    let written = lib.pack_index(&json, &|_, _| {}).unwrap();
    assert_eq!(written, index_path(&json));
    Packed { _dir: dir, json }
}

/// The index on every library that has one, with the given beam width.
fn always(ef: usize) -> IndexUse {
    IndexUse {
        min_bits: 0,
        ef: Some(ef),
    }
}

fn request(lib: &Library, query: &[f32], count: i64, count_type: CountType) -> QueryRequest {
    QueryRequest {
        count_type,
        index: always(128),
        ..QueryRequest::new(lib.model(), query.to_vec(), count)
    }
}

fn secret() -> AccessGrant {
    AccessGrant {
        tags: vec!["secret".into()],
        ..AccessGrant::default()
    }
}

/// The rendered result and how it was found.
fn run(lib: &Library, request: &QueryRequest, grant: &AccessGrant) -> (Value, QueryMethod) {
    let result = lib.query(request, grant).unwrap();
    let method = result.method();
    (Value::Object(wire::render(&result).unwrap()), method)
}

fn exact(lib: &Library, request: &QueryRequest, grant: &AccessGrant) -> Value {
    let forced = QueryRequest {
        exact: true,
        ..request.clone()
    };
    let (value, method) = run(lib, &forced, grant);
    assert_eq!(method, QueryMethod::Scan);
    value
}

/// The query vectors: some rows of the library (their nearest bit is themselves) and some
/// random ones.
fn queries(lib: &Library, n: usize, seed: u64) -> Vec<Vec<f32>> {
    let dim = lib.dimension().unwrap();
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed);
    let mut out: Vec<Vec<f32>> = (0..n / 2)
        .map(|i| lib.embeddings().row(i * 7 % lib.len()).unwrap().to_vec())
        .collect();
    while out.len() < n {
        out.push(mnemon_library::synthetic::unit_vector(&mut rng, dim));
    }
    out
}

/// Captures the warnings logged while `f` runs on this thread.
fn warnings_during<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);
    impl Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let buffer = Buffer::default();
    let writer = buffer.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

/// When the beam covers the library, the walk reaches every visible bit, so an indexed query
/// returns exactly what the exact scan returns: the same bits, order and similarities, in the
/// same result JSON, in bit and token mode, under either grant.
#[test]
fn indexed_queries_equal_the_exact_scan_when_the_budget_covers_the_library() {
    let p = packed(120, 16, 3, |i| i % 3 == 0);
    let lib = Library::open(&p.json).unwrap();
    assert_eq!(lib.index_state(), IndexState::Ready);
    for (n, q) in queries(&lib, 12, 1).iter().enumerate() {
        for (count, count_type) in [
            (10, CountType::Bit),
            (1, CountType::Bit),
            (600, CountType::Token),
        ] {
            for grant in [AccessGrant::default(), secret()] {
                let request = request(&lib, q, count, count_type);
                let (got, method) = run(&lib, &request, &grant);
                assert_eq!(method, QueryMethod::Index, "query {n}");
                assert_eq!(
                    got,
                    exact(&lib, &request, &grant),
                    "query {n}, {count_type:?}"
                );
            }
        }
    }
    // Through the wire: `exact: true` scans, and both give the same result.
    let args = |exact: bool| {
        let q = mnemon_library::encode_embedding(lib.embeddings().row(5).unwrap());
        json!({"version": 1, "query_embedding_model": "m", "query_embedding": q,
               "count": 5, "count_type": "bit", "exact": exact})
        .as_object()
        .unwrap()
        .clone()
    };
    let options = QueryOptions {
        index: always(128),
        ..QueryOptions::default()
    };
    let policy = AccessPolicy::default();
    let via_index = wire::query(&lib, &args(false), &policy, &options).unwrap();
    let via_scan = wire::query(&lib, &args(true), &policy, &options).unwrap();
    assert_eq!(via_index, via_scan);
    let parsed = wire::parse_query(&lib, &args(true), &options).unwrap();
    assert_eq!(
        lib.query(&parsed.request, &AccessGrant::default())
            .unwrap()
            .method(),
        QueryMethod::Scan
    );
}

/// Below `min_bits`, and for `count` < 0, the library is scanned even though it has an index.
#[test]
fn small_libraries_and_negative_counts_scan() {
    let p = packed(60, 8, 4, |_| false);
    let lib = Library::open(&p.json).unwrap();
    let q = lib.embeddings().row(3).unwrap().to_vec();
    let mut r = request(&lib, &q, 5, CountType::Bit);
    r.index.min_bits = 61;
    assert_eq!(run(&lib, &r, &AccessGrant::default()).1, QueryMethod::Scan);
    r.index.min_bits = 60;
    assert_eq!(run(&lib, &r, &AccessGrant::default()).1, QueryMethod::Index);
    r.count = -1;
    assert_eq!(run(&lib, &r, &AccessGrant::default()).1, QueryMethod::Scan);
    // The default threshold is far above this library.
    let r = QueryRequest::new("m", q, 5);
    assert_eq!(run(&lib, &r, &AccessGrant::default()).1, QueryMethod::Scan);
}

/// A restricted user gets `count` bits whenever that many are visible, never fewer, each with
/// its exact similarity: the access tags are applied during the walk, and the index scans when
/// its walk cannot find enough (a tag hiding almost everything).
#[test]
fn restricted_users_get_count_visible_bits() {
    // 1,500 bits, the beam (32) far below the library: every tenth bit visible, then one in 300.
    for (every, count) in [(10usize, 20i64), (300, 8)] {
        let p = packed(1500, 12, 5, |i| i % every != 0);
        let lib = Library::open(&p.json).unwrap();
        let visible = 1500usize.div_ceil(every);
        for q in queries(&lib, 6, 2) {
            let mut r = request(&lib, &q, count, CountType::Bit);
            r.index.ef = Some(32);
            let result = lib.query(&r, &AccessGrant::default()).unwrap();
            assert_ne!(result.method(), QueryMethod::Scan);
            assert_eq!(result.hits().len(), (count as usize).min(visible));
            for (bit, hit) in result.bits() {
                assert_eq!(bit.access_tag(), None, "a hidden bit was returned");
                let row = lib.embeddings().row(hit.index).unwrap();
                assert_eq!(hit.similarity, mnemon_vector::dot(&q, row).unwrap());
            }
            let exact_r = QueryRequest {
                exact: true,
                ..r.clone()
            };
            let exact_result = lib.query(&exact_r, &AccessGrant::default()).unwrap();
            if result.method() == QueryMethod::IndexFallback {
                assert_eq!(result.hits(), exact_result.hits());
            }
            // The same similarity the exact scan gives any bit both return.
            for hit in result.hits() {
                if let Some(e) = exact_result.hits().iter().find(|e| e.index == hit.index) {
                    assert_eq!(e.similarity, hit.similarity);
                }
            }
            // Restricted bits are counted as on the exact path.
            assert_eq!(result.restricted(), exact_result.restricted());
        }
    }
}

/// Flips one byte of the index file at `at` (from the end when negative).
fn flip(path: &Path, at: i64) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = if at < 0 {
        bytes.len() - at.unsigned_abs() as usize
    } else {
        at as usize
    };
    bytes[at] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

/// Opens the library, checks the index is refused with a warning naming it, and that queries
/// (which would use the index) return the exact scan's results.
fn assert_refused_and_exact(json: &Path, why: &str) {
    let (lib, warnings) = warnings_during(|| {
        let lib = Library::open(json).unwrap();
        let state = lib.index_state();
        (lib, state)
    });
    let (lib, state) = lib;
    match &state {
        IndexState::Refused(reason) => assert!(reason.contains(why), "{reason}"),
        other => panic!("expected a refusal ({why}), got {other:?}"),
    }
    assert!(
        warnings.contains("not using the ANN index") && warnings.contains(why),
        "{warnings}"
    );
    for q in queries(&lib, 4, 9) {
        let r = request(&lib, &q, 7, CountType::Bit);
        let (got, method) = run(&lib, &r, &AccessGrant::default());
        assert_eq!(method, QueryMethod::Scan);
        assert_eq!(got, exact(&lib, &r, &AccessGrant::default()));
    }
}

#[test]
fn a_damaged_index_is_refused_and_queries_scan() {
    for at in [200i64, 5000, -3] {
        let p = packed(300, 16, 6, |i| i % 4 == 0);
        flip(&index_path(&p.json), at);
        assert_refused_and_exact(&p.json, "damaged");
    }
    let p = packed(300, 16, 6, |_| false);
    let path = index_path(&p.json);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert_refused_and_exact(&p.json, "truncated");
    std::fs::write(&path, b"").unwrap();
    assert_refused_and_exact(&p.json, "truncated");
}

/// The library changed after it was packed: one vector in the JSON. The sidecar is stale (the
/// JSON is loaded) and the index no longer matches the vectors: refused, queries scan. A change
/// of text alone leaves the vectors, so the index still serves them.
#[test]
fn a_stale_index_is_refused_and_queries_scan() {
    let p = packed(200, 16, 7, |_| false);
    let mut value: Value = serde_json::from_slice(&std::fs::read(&p.json).unwrap()).unwrap();
    let edited = mnemon_library::encode_embedding(&[0.25; 16]);
    value["bits"][150]["embedding"] = json!(edited);
    std::fs::write(&p.json, serde_json::to_vec(&value).unwrap()).unwrap();
    assert_refused_and_exact(&p.json, "stale");
    // Re-packing the sidecar alone does not make the old index current.
    Library::open(&p.json).unwrap().pack(&p.json).unwrap();
    assert_refused_and_exact(&p.json, "stale");
    // Rebuilt: used again.
    let lib = Library::open(&p.json).unwrap();
    lib.pack_index(&p.json, &|_, _| {}).unwrap();
    assert_eq!(
        Library::open(&p.json).unwrap().index_state(),
        IndexState::Ready
    );
    // Text only: the vectors are the ones indexed.
    value["bits"][3]["text"] = json!("another text");
    std::fs::write(&p.json, serde_json::to_vec(&value).unwrap()).unwrap();
    assert_eq!(
        Library::open(&p.json).unwrap().index_state(),
        IndexState::Ready
    );
}

/// An edit in memory drops the index: it was built over the vectors as they were.
#[test]
fn edits_drop_the_index() {
    let p = packed(80, 8, 8, |_| false);
    let mut lib = Library::open(&p.json).unwrap();
    assert_eq!(lib.index_state(), IndexState::Ready);
    let id = lib.bits().next().unwrap().id();
    lib.remove(&id).unwrap();
    assert_eq!(lib.index_state(), IndexState::Absent);
    let q = lib.embeddings().row(0).unwrap().to_vec();
    let r = request(&lib, &q, 3, CountType::Bit);
    assert_eq!(run(&lib, &r, &AccessGrant::default()).1, QueryMethod::Scan);
    // Progress reaches the total; an empty library has nothing to index.
    let calls = Mutex::new(Vec::new());
    lib.pack_index(&p.json, &|done, total| {
        calls.lock().unwrap().push((done, total))
    })
    .unwrap();
    assert_eq!(calls.lock().unwrap().last(), Some(&(79, 79)));
    assert!(Library::blank("m").pack_index(&p.json, &|_, _| {}).is_err());
}

fn args_map(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// On random small libraries with random tags: the index (beam covering the library)
    /// returns the exact scan's result, and never fewer visible bits than asked for.
    #[test]
    fn random_small_libraries_answer_as_the_exact_scan(
        bits in 1usize..90,
        dim in 2usize..12,
        seed in any::<u64>(),
        hidden in 0u32..4,
        count in 1i64..30,
    ) {
        let p = packed(bits, dim, seed, |i| (i as u32 + seed as u32) % 4 < hidden);
        let lib = Library::open(&p.json).unwrap();
        prop_assert_eq!(lib.index_state(), IndexState::Ready);
        let q = mnemon_library::encode_embedding(
            &mnemon_library::synthetic::unit_vector(
                &mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed ^ 1),
                dim,
            ),
        );
        let options = QueryOptions { index: always(128), ..QueryOptions::default() };
        for exact in [false, true] {
            let a = args_map(json!({"version": 1, "query_embedding_model": "m",
                                    "query_embedding": q, "count": count,
                                    "count_type": "bit", "exact": exact}));
            let parsed = wire::parse_query(&lib, &a, &options).unwrap();
            let result = lib.query(&parsed.request, &AccessGrant::default()).unwrap();
            let visible = lib.bits().filter(|b| b.access_tag().is_none()).count();
            prop_assert_eq!(result.hits().len(), (count as usize).min(visible));
        }
        let index = |exact: bool| {
            let a = args_map(json!({"version": 1, "query_embedding_model": "m",
                                    "query_embedding": q, "count": count,
                                    "count_type": "bit", "exact": exact}));
            wire::query(&lib, &a, &AccessPolicy::default(), &options).unwrap()
        };
        prop_assert_eq!(index(false), index(true));
    }
}

/// The restricted count comes from per-tag counts kept beside the library (so an indexed query
/// does not pass over every bit): every edit must recount them.
#[test]
fn restricted_counts_follow_edits() {
    let p = packed(30, 4, 10, |i| i % 3 == 0);
    let mut lib = Library::open(&p.json).unwrap();
    let q = lib.embeddings().row(1).unwrap().to_vec();
    let restricted = |lib: &Library| {
        let r = QueryRequest::new("m", q.clone(), 3);
        let open = lib.query(&r, &secret()).unwrap().restricted();
        (
            lib.query(&r, &AccessGrant::default()).unwrap().restricted(),
            open,
        )
    };
    assert_eq!(restricted(&lib), (10, 0));
    let tagged = lib
        .bits()
        .find(|b| b.access_tag() == Some("secret"))
        .unwrap()
        .id();
    lib.remove(&tagged).unwrap();
    assert_eq!(restricted(&lib), (9, 0));
    for (n, tag) in [(0, Some("secret")), (1, Some("other")), (2, None)] {
        lib.insert_bit(&mnemon_library::NewBit {
            text: &format!("new {n}"),
            embedding: &[0.5, 0.5, 0.5, 0.5],
            token_count: 1,
            url: "https://x",
            title: None,
            access_tag: tag,
        })
        .unwrap();
    }
    assert_eq!(restricted(&lib), (11, 1));
    lib.set_sort("random").unwrap();
    assert_eq!(restricted(&lib), (11, 1));
    let mut other = Library::blank("m");
    other
        .insert_bit(&mnemon_library::NewBit {
            text: "more",
            embedding: &[0.1, 0.2, 0.3, 0.4],
            token_count: 1,
            url: "https://y",
            title: None,
            access_tag: Some("secret"),
        })
        .unwrap();
    lib.extend(&other).unwrap();
    assert_eq!(restricted(&lib), (12, 1));
}

/// Writes `lib-<n>.json` into `dir`: `bits` random vectors from `seed`, URLs unique to the file.
fn write_part(dir: &Path, n: usize, bits: usize, seed: u64) {
    let mut bytes = Vec::new();
    write_synthetic(&mut bytes, "m", bits, 16, seed).unwrap();
    let mut value: Value = serde_json::from_slice(&bytes).unwrap();
    for i in 0..bits {
        value["bits"][i]["info"]["url"] = json!(format!("https://part{n}.example.com/{i}"));
    }
    let path = dir.join(format!("lib-{n}.json"));
    std::fs::write(path, serde_json::to_vec(&value).unwrap()).unwrap();
}

/// A served directory is one library: its index (`<dir>/.library.ann`) is built over the merged
/// vectors, is not itself read as a library, answers like the exact scan, and is refused once a
/// file is added (the merged vectors are no longer those it was built over).
#[test]
fn a_directory_has_one_index_over_its_merged_files() {
    let dir = tempfile::tempdir().unwrap();
    write_part(dir.path(), 1, 90, 11);
    write_part(dir.path(), 2, 70, 12);
    let lib = Library::open_dir(dir.path()).unwrap();
    assert_eq!(lib.len(), 160);
    assert_eq!(lib.index_state(), IndexState::Absent);
    let written = lib.pack_index(dir.path(), &|_, _| {}).unwrap();
    assert_eq!(written, dir.path().join(mnemon_library::DIR_INDEX_NAME));
    assert_eq!(written, index_path(dir.path()));

    let lib = Library::open_dir(dir.path()).unwrap();
    assert_eq!(lib.len(), 160, "the index file is not read as a library");
    assert_eq!(lib.index_state(), IndexState::Ready);
    for q in queries(&lib, 8, 2) {
        for grant in [AccessGrant::default(), secret()] {
            let r = request(&lib, &q, 10, CountType::Bit);
            let (got, method) = run(&lib, &r, &grant);
            assert_eq!(method, QueryMethod::Index);
            assert_eq!(got, exact(&lib, &r, &grant));
        }
    }

    write_part(dir.path(), 3, 10, 13);
    let (lib, warnings) = warnings_during(|| {
        let lib = Library::open_dir(dir.path()).unwrap();
        let state = lib.index_state();
        (lib, state)
    });
    let (lib, state) = lib;
    assert_eq!(lib.len(), 170);
    assert!(
        matches!(&state, IndexState::Refused(why) if why.contains("stale")),
        "{state:?}"
    );
    assert!(warnings.contains("not using the ANN index"), "{warnings}");
    for q in queries(&lib, 4, 3) {
        let r = request(&lib, &q, 7, CountType::Bit);
        let (got, method) = run(&lib, &r, &AccessGrant::default());
        assert_eq!(method, QueryMethod::Scan);
        assert_eq!(got, exact(&lib, &r, &AccessGrant::default()));
    }
}
