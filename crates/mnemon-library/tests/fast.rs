//! Fast mode (int8 pre-scan, exact re-rank) against the exact scan on libraries large enough
//! that the candidate set is a small part of the library, with the cases that break a naive
//! pre-scan: exact ties at the cut, near-ties the int8 copy cannot tell apart, restricted rows,
//! and token budgets that end inside a run of ties.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mnemon_library::synthetic::unit_vector;
use mnemon_library::{AccessPolicy, Library, QueryOptions, encode_embedding, wire};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};

const MODEL: &str = "m";
const TOKEN: &str = "team-token";

/// A library of `rows` bits drawn from `seed`: random unit vectors, runs of byte-identical
/// copies (exact ties), clusters of near-copies that differ below int8 resolution, tags on some
/// bits (`team` opened by [`TOKEN`], `hidden` never), and token counts from 1 to 40.
fn library(seed: u64, rows: usize, dim: usize) -> (Library, Vec<Vec<f32>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut vectors: Vec<Vec<f32>> = Vec::with_capacity(rows);
    while vectors.len() < rows {
        let base = unit_vector(&mut rng, dim);
        match rng.random_range(0..10) {
            // A run of exact copies.
            0 => {
                for _ in 0..rng.random_range(2..120) {
                    vectors.push(base.clone());
                }
            }
            // Near-copies: one coordinate nudged by far less than an int8 step.
            1 => {
                for _ in 0..rng.random_range(2..200) {
                    let mut v = base.clone();
                    let at = rng.random_range(0..dim);
                    v[at] += rng.random_range(-1e-4f32..1e-4);
                    vectors.push(v);
                }
            }
            _ => vectors.push(base),
        }
    }
    vectors.truncate(rows);
    let mut bits = Vec::with_capacity(rows);
    for (i, v) in vectors.iter().enumerate() {
        let mut bit = json!({
            "text": format!("bit {i}"),
            "info": {"url": format!("https://example.com/{i}")},
            "embedding": encode_embedding(v),
            "token_count": rng.random_range(1..=40),
        });
        match rng.random_range(0..8) {
            0 => bit["access_tag"] = json!("team"),
            1 => bit["access_tag"] = json!("hidden"),
            _ => {}
        }
        bits.push(bit);
    }
    let lib = json!({"version": 1, "embedding_model": MODEL, "bits": bits});
    (Library::from_value(lib).unwrap(), vectors)
}

fn policy() -> AccessPolicy {
    let mut p = AccessPolicy::new();
    p.add_token(TOKEN, vec!["team".into()]);
    p
}

fn args(query: &[f32], count: i64, count_type: &str, token: bool) -> Map<String, Value> {
    let mut a = json!({
        "version": 1,
        "query_embedding_model": MODEL,
        "query_embedding": encode_embedding(query),
        "count": count,
        "count_type": count_type,
    });
    if token {
        a["access_token"] = json!(TOKEN);
    }
    a.as_object().unwrap().clone()
}

fn run(lib: &Library, args: &Map<String, Value>, fast: bool) -> Map<String, Value> {
    let options = QueryOptions {
        fast,
        ..QueryOptions::default()
    };
    wire::query(lib, args, &policy(), &options).unwrap()
}

fn texts(result: &Map<String, Value>) -> Vec<String> {
    result["bits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["text"].as_str().unwrap().to_owned())
        .collect()
}

/// The query planned, scored in one `scores_many` pass beside another vector (as a batching
/// host does), then run.
fn run_planned(lib: &Library, args: &Map<String, Value>) -> Map<String, Value> {
    let parsed = wire::parse_query(lib, args, &QueryOptions::default()).unwrap();
    let plan = lib.plan(&parsed.request, parsed.grant(&policy())).unwrap();
    let vector = plan.scan_vector().unwrap().to_vec();
    let other: Vec<f32> = vector.iter().rev().copied().collect();
    let mut scores = lib.scores_many(&[&vector, &other]).unwrap();
    scores.truncate(1);
    let result = lib
        .run_planned(plan, scores.first().map(Vec::as_slice))
        .unwrap();
    wire::render(&result).unwrap()
}

/// The query planned in fast mode, its int8 pre-scan computed in one `prescan_many` pass
/// between two other vectors (as a batching host does), then run.
fn run_prescanned(lib: &Library, args: &Map<String, Value>) -> Map<String, Value> {
    let options = QueryOptions {
        fast: true,
        ..QueryOptions::default()
    };
    let parsed = wire::parse_query(lib, args, &options).unwrap();
    let plan = lib.plan(&parsed.request, parsed.grant(&policy())).unwrap();
    let vector = plan.prescan_vector().unwrap().to_vec();
    let other: Vec<f32> = vector.iter().rev().copied().collect();
    let mut prescans = lib.prescan_many(&[&other, &vector, &other]);
    let mine = prescans.swap_remove(1);
    wire::render(&lib.run_prescanned(plan, mine).unwrap()).unwrap()
}

/// Fast, exact, planned and pre-scanned in a batch agree on the whole result (bits, order,
/// similarities, counts).
fn assert_same(lib: &Library, a: &Map<String, Value>) {
    let exact = run(lib, a, false);
    let fast = run(lib, a, true);
    assert_eq!(
        texts(&fast),
        texts(&exact),
        "count {} {}",
        a["count"],
        a["count_type"]
    );
    assert_eq!(fast, exact);
    assert_eq!(run_planned(lib, a), exact);
    assert_eq!(run_prescanned(lib, a), exact);
}

/// A query near `vectors[at]`: the row itself, nudged, so its run of copies and near-copies
/// fills the top of the ranking and the cut falls inside ties.
fn query_near(rng: &mut ChaCha8Rng, vectors: &[Vec<f32>], at: usize) -> Vec<f32> {
    let mut q = vectors[at].clone();
    for x in &mut q {
        *x += rng.random_range(-0.02f32..0.02);
    }
    q
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    #[test]
    fn fast_equals_exact_on_large_libraries(seed in any::<u64>()) {
        let (lib, vectors) = library(seed, 2500, 48);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        for round in 0..8 {
            let q = if round % 2 == 0 {
                let at = rng.random_range(0..vectors.len());
                query_near(&mut rng, &vectors, at)
            } else {
                unit_vector(&mut rng, 48)
            };
            let count: i64 = rng.random_range(1..=50);
            let token = rng.random_bool(0.5);
            assert_same(&lib, &args(&q, count, "bit", token));
            // Token budgets of a few bits up to a few hundred.
            assert_same(&lib, &args(&q, count * rng.random_range(1..=12), "token", token));
        }
    }
}

/// A run of byte-identical rows longer than the candidate set, straddling the cut: the lowest
/// indices must win, in file order, in both modes.
#[test]
fn ties_longer_than_the_candidate_set() {
    let dim = 32;
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let tie = unit_vector(&mut rng, dim);
    let mut lib = Library::blank(MODEL);
    for i in 0..2500 {
        let v = if (600..1000).contains(&i) {
            tie.clone()
        } else {
            unit_vector(&mut rng, dim)
        };
        lib.insert(&json!({"text": format!("bit {i}"), "info": {"url": "u"},
                           "embedding": encode_embedding(&v), "token_count": 3}))
            .unwrap();
    }
    for count in [1, 7, 50] {
        assert_same(&lib, &args(&tie, count, "bit", false));
        assert_same(&lib, &args(&tie, count * 3 + 1, "token", false));
    }
    let first = texts(&run(&lib, &args(&tie, 3, "bit", false), true));
    assert_eq!(first, ["bit 600", "bit 601", "bit 602"]);
}

/// Near-copies whose differences vanish in int8: the pre-scan ranks them all equal (so by
/// index), while the exact scores differ. Fast mode must still return the exact best.
#[test]
fn near_ties_below_int8_resolution() {
    let dim = 64;
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let base = unit_vector(&mut rng, dim);
    let mut lib = Library::blank(MODEL);
    for i in 0..3000 {
        let v = if i % 3 == 0 {
            let mut v = base.clone();
            v[i % dim] += (i as f32) * 1e-8;
            v
        } else {
            unit_vector(&mut rng, dim)
        };
        lib.insert(&json!({"text": format!("bit {i}"), "info": {"url": "u"},
                           "embedding": encode_embedding(&v), "token_count": 1 + i % 7}))
            .unwrap();
    }
    for count in 1..=50 {
        assert_same(&lib, &args(&base, count, "bit", false));
        assert_same(&lib, &args(&base, count * 4, "token", false));
    }
}

/// Issue 11 item 4: a finite but huge query vector (every component 3.4e38) overflowed the f32
/// dot products, gave `"similarity": null` and ranked those bits first. Such a query is now
/// refused with a client error (a 400 on the host) that names the problem, in both modes; the
/// same for a library whose stored embeddings are huge. Ordinary queries are unaffected.
#[test]
fn scores_that_would_overflow_are_refused() {
    let (lib, vectors) = library(7, 300, 16);
    let huge = vec![3.4e38f32; 16];
    let mut big_stored = json!({"version": 1, "embedding_model": MODEL, "bits": [
        {"text": "small", "info": {"url": "u1"}, "embedding": encode_embedding(&[0.5f32; 16]), "token_count": 1},
        {"text": "huge", "info": {"url": "u2"}, "embedding": encode_embedding(&huge), "token_count": 1},
    ]});
    let big_lib = Library::from_value(big_stored.take()).unwrap();
    for fast in [false, true] {
        let options = QueryOptions {
            fast,
            ..QueryOptions::default()
        };
        for (library, query) in [(&lib, &huge), (&big_lib, &vectors[0])] {
            for count_type in ["bit", "token"] {
                let err = wire::query(
                    library,
                    &args(query, 5, count_type, true),
                    &policy(),
                    &options,
                )
                .unwrap_err();
                assert!(err.is_client_error(), "{err}");
                let message = err.to_string();
                assert!(message.contains("too large"), "{message}");
            }
        }
        // A query at the edge of the range on a unit-length library still scores, finitely.
        let edge = vec![1e37f32; 16];
        let result = run(&lib, &args(&edge, 5, "bit", true), fast);
        for bit in result["bits"].as_array().unwrap() {
            assert!(bit["similarity"].as_f64().unwrap().is_finite(), "{bit}");
        }
    }
}

/// Issue 17 item 0: a pre-scan handed to the wrong query (another vector) is never used: the
/// result is still the query's own.
#[test]
fn a_prescan_of_another_vector_is_ignored() {
    let (lib, vectors) = library(7, 2500, 48);
    let a = args(&vectors[10], 5, "bit", true);
    let exact = run(&lib, &a, false);
    let options = QueryOptions {
        fast: true,
        ..QueryOptions::default()
    };
    let parsed = wire::parse_query(&lib, &a, &options).unwrap();
    let plan = lib.plan(&parsed.request, parsed.grant(&policy())).unwrap();
    // Another direction, scaled down: its bounds are all near zero, so trusted they would end
    // the re-rank after the first batch, without the query's own row.
    let other: Vec<f32> = vectors[2000].iter().map(|x| x * 1e-4).collect();
    let wrong = lib.prescan_many(&[&other]).remove(0);
    let result = wire::render(&lib.run_prescanned(plan, wrong).unwrap()).unwrap();
    assert_eq!(result, exact);
}
