//! Conformance of `mnemon-library` with the reference Polymath library
//! (docs/reference/library.md#conformance), over the fixtures in `tests/fixtures/polymath/`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::host_support;

use std::fs;

use mnemon_library::{
    AccessPolicy, BitId, IndexState, IndexUse, Library, QueryMethod, QueryOptions, wire,
};
use mnemon_tests::fixture;
use serde_json::{Map, Value};

fn read_json(name: &str) -> Value {
    serde_json::from_slice(&fs::read(fixture(name)).unwrap()).unwrap()
}

fn library() -> Library {
    Library::open(fixture("polymath/library.json")).unwrap()
}

fn policy() -> AccessPolicy {
    AccessPolicy::from_host_config_file(fixture("polymath/host.SECRET.json")).unwrap()
}

#[test]
fn load_ids_and_tags() {
    let lib = library();
    assert_eq!(lib.len(), 60);
    assert_eq!(lib.dimension(), Some(1536));
    let helper = read_json("polymath/library_bits.json");
    let want: Vec<&str> = helper["bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    let got: Vec<String> = lib.bits().map(|b| b.id().to_string()).collect();
    assert_eq!(got, want);
    let count = |tag: Option<&str>| lib.bits().filter(|b| b.access_tag() == tag).count();
    assert_eq!(count(Some("unpublished")), 10);
    assert_eq!(count(Some("team")), 3);
    assert_eq!(count(None), 47);
    let id = BitId::from_hex(want[5]).unwrap();
    assert!(lib.get(&id).unwrap().is_some());
}

#[test]
fn save_reproduces_the_file() {
    let original = fs::read(fixture("polymath/library.json")).unwrap();
    let lib = library();
    let mut out = Vec::new();
    lib.to_writer(&mut out, true).unwrap();
    assert!(
        out == original,
        "save with access tags differs from library.json"
    );

    let mut plain = Vec::new();
    lib.to_writer(&mut plain, false).unwrap();
    let mut want: Value = serde_json::from_slice(&original).unwrap();
    for bit in want["bits"].as_array_mut().unwrap() {
        bit.as_object_mut().unwrap().shift_remove("access_tag");
    }
    let got: Value = serde_json::from_slice(&plain).unwrap();
    assert_eq!(got, want);

    assert_eq!(
        mnemon_library::encode_embedding(&[0.1, 0.2, 0.3]),
        "zczMPc3MTD6amZk+"
    );
    assert_eq!(
        mnemon_library::decode_embedding("zczMPc3MTD6amZk+").unwrap(),
        vec![0.1, 0.2, 0.3]
    );
}

#[test]
fn host_config_equals_queries_host_config() {
    let queries = read_json("polymath/queries.json");
    assert_eq!(
        queries["host_config"],
        read_json("polymath/host.SECRET.json")
    );
}

/// Texts of the two bits with byte-identical embeddings, in file order (37, then 41).
fn tie_texts(queries: &Value) -> Vec<String> {
    queries["tie"]["texts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_owned())
        .collect()
}

fn assert_same_bit(case: &str, pos: usize, got: &Value, want: &Value) {
    let g = got.as_object().unwrap();
    let w = want.as_object().unwrap();
    let gk: Vec<&String> = g.keys().collect();
    let wk: Vec<&String> = w.keys().collect();
    assert_eq!(gk, wk, "{case}: keys of bit {pos}");
    for (k, wv) in w {
        let gv = &g[k];
        if k == "similarity" {
            let d = (gv.as_f64().unwrap() - wv.as_f64().unwrap()).abs();
            assert!(d <= 1e-5, "{case}: similarity of bit {pos} differs by {d}");
        } else {
            // Compare serialised, so key order inside `info` counts.
            assert_eq!(gv.to_string(), wv.to_string(), "{case}: {k} of bit {pos}");
        }
    }
    assert!(!g.contains_key("access_tag"), "{case}: access_tag leaked");
}

fn assert_result(case: &str, got: &Map<String, Value>, want: &Value, ties: Option<&[String]>) {
    let want = want.as_object().unwrap();
    let gk: Vec<&String> = got.keys().collect();
    let wk: Vec<&String> = want.keys().collect();
    assert_eq!(gk, wk, "{case}: top-level keys");
    for (k, wv) in want {
        if k != "bits" {
            assert_eq!(&got[k], wv, "{case}: top-level {k}");
        }
    }
    let gb = got["bits"].as_array().unwrap();
    let wb = want["bits"].as_array().unwrap();
    assert_eq!(gb.len(), wb.len(), "{case}: number of bits");
    let text = |b: &Value| {
        b.get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let is_tie = |b: &Value| ties.is_some_and(|t| t.contains(&text(b)));
    let tie_positions: Vec<usize> = (0..wb.len()).filter(|&i| is_tie(&wb[i])).collect();
    for i in 0..wb.len() {
        if tie_positions.contains(&i) {
            continue;
        }
        assert_same_bit(case, i, &gb[i], &wb[i]);
    }
    if !tie_positions.is_empty() {
        let ties = ties.unwrap();
        let mut got_texts: Vec<String> = tie_positions.iter().map(|&i| text(&gb[i])).collect();
        let mut want_texts: Vec<String> = tie_positions.iter().map(|&i| text(&wb[i])).collect();
        if tie_positions.len() == 2 {
            assert_eq!(
                got_texts[0], ties[0],
                "{case}: tied bits must keep file order"
            );
        } else {
            assert_eq!(
                got_texts[0], ties[0],
                "{case}: the earlier tied bit must be kept"
            );
        }
        for &i in &tie_positions {
            let w = wb.iter().find(|b| text(b) == text(&gb[i])).unwrap();
            assert_same_bit(case, i, &gb[i], w);
        }
        got_texts.sort();
        want_texts.sort();
        if tie_positions.len() == 2 {
            assert_eq!(got_texts, want_texts, "{case}: tied bits as a set");
        }
    }
}

fn expected_error(case: &Value) -> Vec<String> {
    match case["name"].as_str().unwrap() {
        "err_short_embedding" => {
            vec!["query_embedding has 8 dimensions but the library's embeddings have 1536".into()]
        }
        "err_bad_base64_padding" => {
            vec!["query_embedding is not valid base64: Incorrect padding".into()]
        }
        _ => {
            let mut v = vec![case["error"].as_str().unwrap().to_owned()];
            if let Some(alts) = case.get("error_alternatives").and_then(Value::as_array) {
                v.extend(alts.iter().map(|a| a.as_str().unwrap().to_owned()));
            }
            v
        }
    }
}

/// How a case is run.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Exact,
    Fast,
    /// `plan`, one `scores_many` pass for the scan vector, then `run_planned`, as a batching
    /// host does.
    Planned,
    /// Through the library's ANN index (`library pack --index`), used for every query, with a
    /// beam covering the library (docs/reference/library.md#ann-index).
    Indexed,
}

fn run_case(
    lib: &mnemon_library::Library,
    args: &serde_json::Map<String, Value>,
    policy: &AccessPolicy,
    mode: Mode,
) -> Result<serde_json::Map<String, Value>, mnemon_library::LibraryError> {
    let options = QueryOptions {
        fast: mode == Mode::Fast,
        index: IndexUse {
            min_bits: if mode == Mode::Indexed { 0 } else { usize::MAX },
            ef: Some(128),
        },
        ..QueryOptions::default()
    };
    if mode == Mode::Indexed {
        // Every case that reaches the engine with a vector runs through the index.
        if let Ok(parsed) = wire::parse_query(lib, args, &options)
            && parsed.request.count > 0
            && let Ok(result) = lib.query(&parsed.request, &parsed.grant(policy))
        {
            assert_eq!(result.method(), QueryMethod::Index, "{args:?}");
        }
    }
    if mode != Mode::Planned {
        return wire::query(lib, args, policy, &options);
    }
    let parsed = wire::parse_query(lib, args, &options)?;
    let plan = lib.plan(&parsed.request, parsed.grant(policy))?;
    let scores = plan.scan_vector().map(|v| {
        // Scored beside an unrelated vector, as in a batch of several requests.
        let other = vec![0.5f32; v.len()];
        lib.scores_many(&[other.as_slice(), v])
            .unwrap()
            .pop()
            .unwrap()
    });
    wire::render(&lib.run_planned(plan, scores.as_deref())?)
}

fn run_all_cases(mode: Mode) -> usize {
    let queries = read_json("polymath/queries.json");
    let dir = tempfile::tempdir().unwrap();
    let lib = match mode {
        Mode::Indexed => {
            let path = dir.path().join("library.json");
            fs::copy(fixture("polymath/library.json"), &path).unwrap();
            library().pack_index(&path, &|_, _| {}).unwrap();
            let lib = Library::open(&path).unwrap();
            assert_eq!(lib.index_state(), IndexState::Ready);
            lib
        }
        _ => library(),
    };
    let policy = policy();
    let ties = tie_texts(&queries);
    let tie_cases: Vec<&str> = queries["tie_cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let mut n = 0;
    for case in queries["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let args = case["args"].as_object().unwrap();
        let result = run_case(&lib, args, &policy, mode);
        if let Some(expected) = case.get("expected") {
            let got = result.unwrap_or_else(|e| panic!("{name}: unexpected error {e}"));
            let tie = tie_cases.contains(&name).then_some(ties.as_slice());
            assert_result(name, &got, expected, tie);
        } else {
            let err = result
                .err()
                .unwrap_or_else(|| panic!("{name}: expected an error"));
            let allowed = expected_error(case);
            assert!(
                allowed.contains(&err.to_string()),
                "{name}: got {err:?}, want one of {allowed:?}"
            );
        }
        n += 1;
    }
    n
}

#[test]
fn every_query_case_matches_the_reference() {
    assert_eq!(run_all_cases(Mode::Exact), 37);
}

#[test]
fn fast_mode_matches_the_reference() {
    assert_eq!(run_all_cases(Mode::Fast), 37);
}

/// Issue 17: when the index's beam covers the library (60 bits, beam 128) its walk reaches every
/// visible bit, so every case returns the exact scan's result, access tags and token budgets
/// included.
#[test]
fn indexed_queries_match_the_reference() {
    assert_eq!(run_all_cases(Mode::Indexed), 37);
}

#[test]
fn planned_queries_scored_in_a_batch_match_the_reference() {
    assert_eq!(run_all_cases(Mode::Planned), 37);
}

fn bug(name: &str) -> Value {
    let bugs = read_json("polymath/known_reference_bugs.json");
    bugs["bugs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap()
        .clone()
}

#[test]
fn multi_key_omit_works() {
    let queries = read_json("polymath/queries.json");
    let rust_case = queries["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "bits_negative_all_near_rust")
        .unwrap();
    let lib = library();
    for fast in [false, true] {
        for name in ["multi_key_omit", "multi_key_omit_list"] {
            let b = bug(name);
            let options = QueryOptions {
                fast,
                ..QueryOptions::default()
            };
            let got =
                wire::query(&lib, b["args"].as_object().unwrap(), &policy(), &options).unwrap();
            let bits = got["bits"].as_array().unwrap();
            assert_eq!(bits.len(), 3, "{name}");
            for (g, w) in bits
                .iter()
                .zip(rust_case["expected"]["bits"].as_array().unwrap())
            {
                let mut w = w.as_object().unwrap().clone();
                w.shift_remove("similarity");
                w.shift_remove("embedding");
                assert_eq!(g.as_object().unwrap(), &w, "{name}");
                let keys: Vec<&String> = g.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["text", "info", "token_count"]);
            }
            assert_eq!(got["details"]["counts"]["bits"], 3);
            // Issue 11 item 2: a list, not the reference's "embedding,similarity" string that
            // the TypeScript client rejects.
            assert_eq!(got["omit"], serde_json::json!(["embedding", "similarity"]));
        }
    }
}

#[test]
fn a_file_that_says_sort_similarity_is_resorted() {
    let b = bug("library_file_with_sort_similarity");
    let original = read_json("polymath/library.json");
    let mut top = Map::new();
    for (k, v) in original.as_object().unwrap() {
        top.insert(k.clone(), v.clone());
        if k == "embedding_model" {
            top.insert("sort".into(), Value::from("similarity"));
        }
    }
    let lib = Library::from_value(Value::Object(top)).unwrap();
    for fast in [false, true] {
        let options = QueryOptions {
            fast,
            ..QueryOptions::default()
        };
        let got = wire::query(&lib, b["args"].as_object().unwrap(), &policy(), &options).unwrap();
        let keys: Vec<&String> = got.keys().collect();
        assert_eq!(
            keys,
            [
                "version",
                "embedding_model",
                "sort",
                "bits",
                "details",
                "omit"
            ]
        );
        let want = b["expected_if_resorted_summary"].as_array().unwrap();
        let bits = got["bits"].as_array().unwrap();
        assert_eq!(bits.len(), want.len());
        for (g, w) in bits.iter().zip(want) {
            assert_eq!(g["info"]["title"], w[0]);
            let d = (g["similarity"].as_f64().unwrap() - w[1].as_f64().unwrap()).abs();
            assert!(d <= 1e-5);
        }
    }
}

/// Issue 11 items 1, 2 and 4 as a client of the host sees them: a multi-key omit comes back as
/// a list (JSON and form bodies), a query whose scores would overflow is a 400 naming the
/// problem, and a library file served from under `access/<tag>/` has its bits restricted.
#[test]
fn host_answers_with_the_fixed_behaviours() {
    use host_support::{Server, file_sources, post_form, post_json};
    let server = Server::fixture();
    let b = bug("multi_key_omit");
    let args = b["args"].as_object().unwrap();
    let reply = post_json(&server, &Value::Object(args.clone()));
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json()["omit"],
        serde_json::json!(["embedding", "similarity"])
    );
    let reply = post_form(&server, args);
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json()["omit"],
        serde_json::json!(["embedding", "similarity"])
    );

    let huge = mnemon_library::encode_embedding(&vec![3.4e38f32; 1536]);
    let reply = post_json(
        &server,
        &serde_json::json!({"version": 1, "query_embedding_model": library().model(),
                            "query_embedding": huge, "count": 3, "count_type": "bit"}),
    );
    assert_eq!(reply.status, 400);
    assert!(reply.error().contains("too large"), "{}", reply.error());
    server.stop().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let tagged = dir.path().join("access/unpublished/x.json");
    fs::create_dir_all(tagged.parent().unwrap()).unwrap();
    fs::copy(fixture("polymath/library.json"), &tagged).unwrap();
    let server = Server::start(file_sources(&tagged), mnemon_host::HostOptions::default());
    let reply = post_json(
        &server,
        &serde_json::json!({"version": 1, "query_embedding_model": library().model(),
                            "count": -1, "count_type": "bit"}),
    );
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["bits"], serde_json::json!([]));
    server.stop().unwrap();
}
