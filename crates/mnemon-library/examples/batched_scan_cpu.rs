//! CPU time per query of the exact scan and of fast mode, one query at a time and batched as
//! the host batches them (docs/reference/host.md#concurrent-queries-measured).
//!
//! `cargo run --release -p mnemon-library --example batched_scan_cpu -- <library.json>`, for
//! example the synthetic library `cargo xtask bench host --bits 100000` writes under
//! `target/bench-host/`. Times are the thread's CPU time (Linux `/proc/thread-self/schedstat`)
//! on a one-thread rayon pool, so other load on the machine changes them little.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use mnemon_library::synthetic::unit_vector;
use mnemon_library::{AccessGrant, Library, QueryRequest};
use rand::SeedableRng;

/// Queries per batch: the most 8 closed-loop clients can have waiting.
const BATCH: usize = 8;

/// This thread's CPU time in ns.
fn cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: batched_scan_cpu <library.json>");
    let lib = Library::open(&path).unwrap();
    let dim = lib.dimension().unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(43);
    let queries: Vec<Vec<f32>> = (0..BATCH).map(|_| unit_vector(&mut rng, dim)).collect();
    let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
    let grant = AccessGrant::default();
    let request = |q: &[f32], fast: bool| {
        let mut r = QueryRequest::new(lib.model(), q.to_vec(), 5);
        r.fast = fast;
        r
    };
    let ms = |from: u64| (cpu_ns() - from) as f64 / 1e6;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    pool.install(|| {
        // The first fast query builds the int8 copy; not timed.
        lib.query(&request(refs[0], true), &grant).unwrap();
        for round in 0..3 {
            let t = cpu_ns();
            for q in &refs {
                std::hint::black_box(lib.query(&request(q, false), &grant).unwrap());
            }
            let exact = ms(t) / BATCH as f64;
            let t = cpu_ns();
            std::hint::black_box(lib.scores_many(&refs).unwrap());
            let exact_batched = ms(t) / BATCH as f64;
            let t = cpu_ns();
            for q in &refs {
                std::hint::black_box(lib.query(&request(q, true), &grant).unwrap());
            }
            let fast = ms(t) / BATCH as f64;
            let t = cpu_ns();
            let prescans = lib.prescan_many(&refs);
            let prescan = ms(t) / BATCH as f64;
            let t = cpu_ns();
            for (q, p) in refs.iter().zip(prescans) {
                let plan = lib.plan(&request(q, true), grant.clone()).unwrap();
                std::hint::black_box(lib.run_prescanned(plan, p).unwrap());
            }
            let rerank = ms(t) / BATCH as f64;
            println!(
                "round {round}, CPU ms per query: exact alone {exact:.1}, batched {exact_batched:.1}; \
                 fast alone {fast:.1}, batched {:.1} (pre-scan {prescan:.1}, re-rank {rerank:.2})",
                prescan + rerank
            );
        }
    });
}
