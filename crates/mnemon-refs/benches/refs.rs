//! Reference benchmarks (issue 3). Target on the project machine (2 cores): scanning a 100 KB
//! text with 100 markers ≥ 200 MB/s. Rendering it (resolving each marker in an in-memory store)
//! and `resolve_params` are measured alongside, and so is scanning 100 KB of adversarial input
//! (openers that are never closed, backtick runs that are never closed), which must stay
//! linear: its throughput should be of the same order as the prose's, not collapse.
//!
//! Run: `cargo bench -p mnemon-refs --bench refs -- --warm-up-time 1 --measurement-time 3`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use mnemon_refs::{CommandSpec, Mode, render_default, resolve_params, scan};
use mnemon_store::{AssetStore, InMemoryStore};
use mnemon_types::Asset;
use serde_json::json;

/// About 100 KB of Markdown-like prose with 100 markers (half URL form, half JSON form), some
/// inline code and a fenced block every so often.
fn text() -> String {
    let prose = "The harbour ferry leaves the east quay at nine thirty; passengers with `bikes` board first. ";
    let mut out = String::new();
    let mut i = 0;
    while out.len() < 100 * 1024 {
        out.push_str(prose);
        if out.len() / 1024 > i && i < 100 {
            if i % 2 == 0 {
                out.push_str(&format!(
                    "![photo {i}](<|asset://a{}/content/labels/0|>) ",
                    i % 10
                ));
            } else {
                out.push_str(&format!(
                    "<|{{\"asset_id\": \"a{}\", \"field_path\": [\"content\", \"labels\", 1]}}|> ",
                    i % 10
                ));
            }
            i += 1;
            if i % 25 == 0 {
                out.push_str("\n```\nlet x = 1; // code <|asset://not/this|>\n```\n");
            }
        }
    }
    assert_eq!(scan(&out).len(), 100);
    out
}

fn store() -> InMemoryStore {
    let store = InMemoryStore::new();
    for i in 0..10 {
        let asset = Asset::from_json(json!({
            "asset_id": format!("a{i}"),
            "content": {"labels": ["cat", "sofa"]},
        }))
        .unwrap();
        store.put(&asset).unwrap();
    }
    store
}

fn markers(c: &mut Criterion) {
    let text = text();
    let store = store();
    let mut group = c.benchmark_group("markers_100kb_100");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("scan", |b| b.iter(|| scan(black_box(&text))));
    group.bench_function("render_default", |b| {
        b.iter(|| render_default(black_box(&text), &store))
    });
    // Baseline in the same run: the cheapest possible pass over the same bytes.
    group.bench_function("baseline_count_lt", |b| {
        b.iter(|| black_box(&text).bytes().filter(|&b| b == b'<').count())
    });
    group.finish();
}

/// About 100 KB each of inputs that made a scanner searching to the end of the text quadratic.
fn adversarial() -> Vec<(&'static str, String)> {
    const SIZE: usize = 100 * 1024;
    let backticks = (1..)
        .map(|n| "`".repeat(n) + " ")
        .scan(0, |len, run| {
            *len += run.len();
            (*len <= SIZE).then_some(run)
        })
        .collect();
    vec![
        ("openers_no_closer", "<|".repeat(SIZE / 2)),
        ("json_openers_no_closer", "<|{".repeat(SIZE / 3)),
        (
            "openers_in_a_json_string",
            format!("<|{{\"k\":\"{}\"}} oops", "<|".repeat(SIZE / 2)),
        ),
        ("unclosed_backtick_runs", backticks),
    ]
}

fn adversarial_scan(c: &mut Criterion) {
    let mut group = c.benchmark_group("adversarial_100kb");
    for (name, text) in adversarial() {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(name, |b| b.iter(|| scan(black_box(&text))));
    }
    group.finish();
}

fn params(c: &mut Criterion) {
    let store = store();
    let spec = CommandSpec::from_yaml(
        "name: resize\nparameters:\n  - {name: image, asset_ref_acceptable: true}\n  - {name: width}\n",
    )
    .unwrap();
    let params = json!({"image": "<|asset://a3/content/labels/1|>", "width": 300});
    c.bench_function("resolve_params_one_ref", |b| {
        b.iter(|| resolve_params(&spec, black_box(&params), &store, Mode::Strict).unwrap())
    });
}

criterion_group!(benches, markers, adversarial_scan, params);
criterion_main!(benches);
