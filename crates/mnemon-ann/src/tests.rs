//! Tests of the whole index: build, persist, open, search.

use mnemon_vector::Matrix;
use proptest::prelude::*;

use super::*;

/// Seeded unit vectors around `clusters` centres (a tiny xorshift: the tests need no `rand`).
fn clustered(n: usize, dims: usize, clusters: usize, seed: u64) -> Matrix {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    };
    let centres: Vec<Vec<f32>> = (0..clusters.max(1))
        .map(|_| (0..dims).map(|_| next()).collect())
        .collect();
    let mut m = Matrix::new(dims);
    for i in 0..n {
        let c = &centres[i % centres.len()];
        let mut v: Vec<f32> = c.iter().map(|x| x + 0.5 * next()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
        v.iter_mut().for_each(|x| *x /= norm);
        m.push_row(&v).unwrap();
    }
    m
}

fn exact(m: &Matrix, q: &[f32], k: usize, visible: impl Fn(u32) -> bool + Sync) -> Vec<u32> {
    m.view()
        .top_k(q, k, |i| visible(i as u32))
        .unwrap()
        .into_iter()
        .map(|s| s.index as u32)
        .collect()
}

fn indices(o: &SearchOutcome) -> Vec<u32> {
    o.hits.iter().map(|h| h.index).collect()
}

fn build_default(m: &Matrix) -> IndexBytes {
    build(m.view(), &BuildParams::default(), &|_| {}).unwrap()
}

#[test]
fn same_input_and_seed_give_the_same_bytes_on_any_thread_count() {
    let m = clustered(3_000, 24, 20, 1);
    let params = BuildParams {
        m: 8,
        ef_construction: 40,
        seed: 9,
    };
    let on = |threads: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| build(m.view(), &params, &|_| {}).unwrap())
    };
    let one = on(1);
    assert_eq!(one.as_bytes(), on(3).as_bytes());
    assert_eq!(one.as_bytes(), on(2).as_bytes());
    let other_seed = build(
        m.view(),
        &BuildParams {
            seed: 10,
            ..params.clone()
        },
        &|_| {},
    )
    .unwrap();
    assert_ne!(one.as_bytes(), other_seed.as_bytes());
}

#[test]
fn recall_on_clustered_vectors_is_high_and_scores_are_exact() {
    let m = clustered(5_000, 64, 50, 2);
    let bytes = build_default(&m);
    let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    let queries = clustered(100, 64, 50, 3);
    let mut found = 0;
    for q in 0..queries.rows() {
        let query = queries.row(q).unwrap();
        let o = index
            .search(query, &SearchParams::new(10), |_| true)
            .unwrap();
        assert_eq!(o.method, SearchMethod::Graph);
        for h in &o.hits {
            let row = m.row(h.index as usize).unwrap();
            assert_eq!(h.score, mnemon_vector::dot(query, row).unwrap());
        }
        let truth = exact(&m, query, 10, |_| true);
        found += indices(&o).iter().filter(|i| truth.contains(i)).count();
    }
    let recall = found as f64 / 1000.0;
    assert!(recall >= 0.98, "recall@10 {recall}");
}

/// Unfiltered searches of every row of `queries` with `params`, each outcome passed to `check`
/// with its query: the share of the exact top 10 found.
fn recall_at_10(
    index: &IndexView<'_>,
    m: &Matrix,
    queries: &Matrix,
    params: &SearchParams,
    check: impl Fn(&[f32], &SearchOutcome),
) -> f64 {
    let mut found = 0;
    for q in 0..queries.rows() {
        let query = queries.row(q).unwrap();
        let o = index.search(query, params, |_| true).unwrap();
        check(query, &o);
        let truth = exact(m, query, 10, |_| true);
        found += indices(&o).iter().filter(|i| truth.contains(i)).count();
    }
    found as f64 / (queries.rows() * 10) as f64
}

/// The default beam is 128 up to 100,000 rows and grows with the square root above, in steps
/// of 32, never shrinking as the index grows.
#[test]
fn the_default_beam_grows_with_the_index() {
    assert_eq!(default_ef(0), 128);
    assert_eq!(default_ef(100_000), 128);
    assert_eq!(default_ef(100_001), 160);
    assert_eq!(default_ef(1_000_000), 416);
    assert_eq!(default_ef(10_000_000), 1_280);
    assert!(default_ef(usize::MAX) >= default_ef(1 << 40));
    let mut last = 0;
    for rows in (0..4_000_000).step_by(9_973) {
        let ef = default_ef(rows);
        assert!(ef >= last && ef.is_multiple_of(32), "{rows} rows: {ef}");
        last = ef;
    }
}

/// The default re-rank depth (`default_rerank`, below a wide beam) keeps the recall of
/// re-ranking every candidate.
#[test]
fn the_default_rerank_depth_keeps_the_full_rerank_recall() {
    assert_eq!(default_rerank(10), 64);
    assert_eq!(default_rerank(100), 400);
    let m = clustered(3_000, 32, 30, 8);
    let bytes = build_default(&m);
    let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    let queries = clustered(100, 32, 30, 9);
    let recall = |rerank: Option<usize>| {
        let params = SearchParams {
            ef: 400,
            rerank,
            ..SearchParams::new(10)
        };
        recall_at_10(&index, &m, &queries, &params, |_, o| {
            assert_eq!(o.hits.len(), 10)
        })
    };
    let (default, full) = (recall(None), recall(Some(400)));
    assert!(
        default >= full - 0.005,
        "default {default}, every candidate {full}"
    );
}

#[test]
fn a_shallow_rerank_keeps_exact_scores_and_most_of_the_recall() {
    let m = clustered(3_000, 32, 30, 8);
    let bytes = build_default(&m);
    let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    let queries = clustered(50, 32, 30, 9);
    let params = SearchParams {
        rerank: Some(3),
        ..SearchParams::new(10)
    };
    let recall = recall_at_10(&index, &m, &queries, &params, |query, o| {
        // At least `count` are re-ranked, whatever the depth asked.
        assert_eq!(o.hits.len(), 10);
        assert!(o.hits.windows(2).all(|w| w[0].score >= w[1].score));
        for h in &o.hits {
            let row = m.row(h.index as usize).unwrap();
            assert_eq!(h.score, mnemon_vector::dot(query, row).unwrap());
        }
    });
    assert!(recall >= 0.9, "recall@10 {recall}");
}

#[test]
fn progress_reaches_the_total_and_exact_mode_scans() {
    let m = clustered(500, 8, 5, 4);
    let last = std::sync::Mutex::new(None);
    let bytes = build(m.view(), &BuildParams::default(), &|p| {
        *last.lock().unwrap() = Some(p);
    })
    .unwrap();
    assert_eq!(
        *last.lock().unwrap(),
        Some(BuildProgress {
            inserted: 500,
            total: 500
        })
    );
    let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    let q = m.row(7).unwrap();
    let params = SearchParams {
        exact: true,
        ..SearchParams::new(5)
    };
    let o = index.search(q, &params, |_| true).unwrap();
    assert_eq!(o.method, SearchMethod::Exact);
    assert_eq!(indices(&o), exact(&m, q, 5, |_| true));
}

#[test]
fn a_cancelled_build_stops_at_once() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let m = clustered(2_000, 8, 5, 9);
    let last = std::sync::Mutex::new(None);
    // Asked to stop once five nodes are in (the first, then batches of one).
    let stop = AtomicBool::new(false);
    let asked_after = AtomicUsize::new(0);
    let built = build_cancellable(
        m.view(),
        &BuildParams::default(),
        &|p| {
            *last.lock().unwrap() = Some(p);
            if p.inserted >= 5 {
                stop.store(true, Ordering::SeqCst);
            }
        },
        &|| {
            let stop = stop.load(Ordering::SeqCst);
            if stop {
                asked_after.fetch_add(1, Ordering::SeqCst);
            }
            stop
        },
    );
    assert_eq!(built.unwrap_err(), AnnError::Cancelled);
    // Stopped at the first question after the request: no node more was inserted.
    assert_eq!(asked_after.load(Ordering::SeqCst), 1);
    assert_eq!(
        *last.lock().unwrap(),
        Some(BuildProgress {
            inserted: 5,
            total: 2_000
        })
    );
    // Asked to stop in the middle of a batch: the batch's remaining nodes are skipped and the
    // build stops before reporting it.
    let calls = AtomicUsize::new(0);
    let reported = AtomicUsize::new(0);
    let built = build_cancellable(
        m.view(),
        &BuildParams::default(),
        &|p| reported.store(p.inserted, Ordering::SeqCst),
        &|| calls.fetch_add(1, Ordering::SeqCst) >= 1_000,
    );
    assert_eq!(built.unwrap_err(), AnnError::Cancelled);
    assert!(reported.load(Ordering::SeqCst) < 1_000);
    // Never cancelled: the same bytes as `build`.
    let whole = build_cancellable(m.view(), &BuildParams::default(), &|_| {}, &|| false).unwrap();
    assert_eq!(whole.as_bytes(), build_default(&m).as_bytes());
}

#[test]
fn a_selective_filter_falls_back_to_an_exact_scan_and_says_so() {
    let m = clustered(4_000, 16, 10, 5);
    let bytes = build_default(&m);
    let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    let q = m.row(0).unwrap();
    // Three visible rows in 4,000.
    let visible = |i: u32| i == 17 || i == 2_000 || i == 3_999;
    // A budget of a quarter of the rows (ef · (2m + 1) = 330 is less).
    let params = SearchParams {
        ef: 10,
        ..SearchParams::new(10)
    };
    let o = index.search(q, &params, visible).unwrap();
    assert_eq!(
        o.method,
        SearchMethod::ExactFallback(FallbackReason::VisitBudget)
    );
    assert_eq!(indices(&o), exact(&m, q, 10, visible));
    assert_eq!(o.hits.len(), 3);
}

#[test]
fn empty_and_degenerate_inputs() {
    let m = Matrix::new(4);
    let bytes = build_default(&m);
    let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    assert!(
        index
            .search(&[1.0; 4], &SearchParams::new(3), |_| true)
            .unwrap()
            .hits
            .is_empty()
    );
    assert_eq!(
        index.search(&[1.0; 3], &SearchParams::new(3), |_| true),
        Err(AnnError::DimensionMismatch {
            expected: 4,
            found: 3
        })
    );
    let mut nan = Matrix::new(2);
    nan.push_row(&[1.0, 0.0]).unwrap();
    nan.push_row(&[f32::NAN, 0.0]).unwrap();
    assert_eq!(
        build(nan.view(), &BuildParams::default(), &|_| {}).unwrap_err(),
        AnnError::NonFinite { row: 1 }
    );
    let zeros = Matrix::zeros(3, 5);
    let bytes = build_default(&zeros);
    let index = IndexView::open(bytes.as_bytes(), zeros.view(), &OpenOptions::default()).unwrap();
    assert_eq!(
        indices(
            &index
                .search(&[1.0; 5], &SearchParams::new(2), |_| true)
                .unwrap()
        ),
        vec![0, 1]
    );
    let bad = BuildParams {
        m: 1,
        ..BuildParams::default()
    };
    assert!(matches!(
        build(m.view(), &bad, &|_| {}),
        Err(AnnError::InvalidParameter { .. })
    ));
}

/// A beam as wide as `usize::MAX` is the whole index: building or searching with one works,
/// rather than reserving room for that many candidates (a capacity overflow panic before).
#[test]
fn a_beam_wider_than_the_index_is_the_whole_index() {
    let m = clustered(50, 8, 3, 11);
    let wide = BuildParams {
        ef_construction: usize::MAX,
        ..BuildParams::default()
    };
    let bytes = build(m.view(), &wide, &|_| {}).unwrap();
    let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    let q = m.row(3).unwrap().to_vec();
    let params = SearchParams {
        ef: usize::MAX,
        ..SearchParams::new(5)
    };
    let found = index.search(&q, &params, |_| true).unwrap();
    assert_eq!(indices(&found), exact(&m, &q, 5, |_| true));
}

#[test]
fn a_stale_index_is_refused() {
    let m = clustered(300, 12, 4, 6);
    let bytes = build_default(&m);
    let fp = fingerprint(m.view());
    let with_fp = OpenOptions {
        expected_fingerprint: Some(fp),
        ..OpenOptions::default()
    };
    assert_eq!(
        IndexView::open(bytes.as_bytes(), m.view(), &with_fp)
            .unwrap()
            .info()
            .fingerprint,
        fp
    );
    // One row changed: caught by the sample (row 0 is always sampled) and by the fingerprint.
    let mut changed = m.clone();
    changed.row_mut(0).unwrap()[3] += 0.5;
    assert!(matches!(
        IndexView::open(bytes.as_bytes(), changed.view(), &OpenOptions::default()),
        Err(AnnError::Stale { .. })
    ));
    let mut unsampled = m.clone();
    unsampled.row_mut(1).unwrap()[3] += 0.5;
    let changed_fp = OpenOptions {
        expected_fingerprint: Some(fingerprint(unsampled.view())),
        ..OpenOptions::default()
    };
    assert!(matches!(
        IndexView::open(bytes.as_bytes(), unsampled.view(), &changed_fp),
        Err(AnnError::Stale { .. })
    ));
    // Fewer rows, other dimension.
    let fewer = clustered(299, 12, 4, 6);
    assert!(matches!(
        IndexView::open(bytes.as_bytes(), fewer.view(), &OpenOptions::default()),
        Err(AnnError::Stale { .. })
    ));
    let wider = clustered(300, 13, 4, 6);
    assert!(matches!(
        IndexView::open(bytes.as_bytes(), wider.view(), &OpenOptions::default()),
        Err(AnnError::Stale { .. })
    ));
}

#[test]
fn a_reopened_view_searches_as_the_opened_one_and_only_over_the_same_buffers() {
    let m = clustered(400, 16, 5, 9);
    let bytes = build_default(&m);
    let opened = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
    let verified = opened.verified();
    let again = IndexView::reopen(bytes.as_bytes(), m.view(), &verified).unwrap();
    assert_eq!(again.info(), opened.info());
    let q = m.view().row(17).unwrap().to_vec();
    let params = SearchParams::new(10);
    assert_eq!(
        again.search(&q, &params, |i| i % 3 != 0).unwrap(),
        opened.search(&q, &params, |i| i % 3 != 0).unwrap()
    );
    // A copy of the same bytes, or a copy of the same vectors, is another buffer: refused.
    let copy = bytes.clone();
    assert!(matches!(
        IndexView::reopen(copy.as_bytes(), m.view(), &verified),
        Err(AnnError::Stale { .. })
    ));
    let other = m.clone();
    assert!(matches!(
        IndexView::reopen(bytes.as_bytes(), other.view(), &verified),
        Err(AnnError::Stale { .. })
    ));
    // The same buffer with its header changed in place: refused.
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    let len = bytes.len();
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..len].copy_from_slice(bytes.as_bytes());
    let buf = |w: &[u64]| -> Vec<u8> { bytemuck::cast_slice::<u64, u8>(w)[..len].to_vec() };
    assert_eq!(buf(&words), bytes.as_bytes());
    let verified_here = {
        let view: &[u8] = &bytemuck::cast_slice::<u64, u8>(&words)[..len];
        IndexView::open(view, m.view(), &OpenOptions::default())
            .unwrap()
            .verified()
    };
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[48] ^= 1; // the seed
    let view: &[u8] = &bytemuck::cast_slice::<u64, u8>(&words)[..len];
    assert!(IndexView::reopen(view, m.view(), &verified_here).is_err());
    bytemuck::cast_slice_mut::<u64, u8>(&mut words)[48] ^= 1;
    let view: &[u8] = &bytemuck::cast_slice::<u64, u8>(&words)[..len];
    assert!(IndexView::reopen(view, m.view(), &verified_here).is_ok());
}

#[test]
fn a_misaligned_buffer_is_refused_not_copied() {
    let m = clustered(50, 8, 2, 7);
    let bytes = build_default(&m);
    let mut shifted = vec![0u8; bytes.len() + 8];
    let start = (1..9)
        .find(|&s| !(shifted.as_ptr() as usize + s).is_multiple_of(8))
        .unwrap();
    shifted[start..start + bytes.len()].copy_from_slice(bytes.as_bytes());
    assert!(matches!(
        IndexView::open(
            &shifted[start..start + bytes.len()],
            m.view(),
            &OpenOptions::default()
        ),
        Err(AnnError::Misaligned { .. })
    ));
    let copied = IndexBytes::copy_from(&shifted[start..start + bytes.len()]);
    assert!(IndexView::open(copied.as_bytes(), m.view(), &OpenOptions::default()).is_ok());
}

/// A small random library: rows, dims, duplicates allowed (they stress the pruning).
fn small_library() -> impl Strategy<Value = (Matrix, u64)> {
    (
        1usize..120,
        1usize..24,
        1usize..6,
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(n, dims, clusters, seed, duplicates)| {
            let mut m = clustered(n, dims, clusters, seed);
            if duplicates && n > 2 {
                let first = m.row(0).unwrap().to_vec();
                for r in (0..n).step_by(3) {
                    m.row_mut(r).unwrap().copy_from_slice(&first);
                }
            }
            (m, seed)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// With `ef` covering the library the walk reaches every row, so the hits are the exact
    /// top k, in order, with exact scores.
    #[test]
    fn recall_is_one_when_the_budget_covers_the_library(
        (m, seed) in small_library(),
        k in 1usize..12,
        graph_m in 2usize..10,
        ef_construction in 1usize..40,
        q in 0usize..1000,
    ) {
        let params = BuildParams { m: graph_m, ef_construction, seed };
        let bytes = build(m.view(), &params, &|_| {}).unwrap();
        let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
        let query = m.row(q % m.rows()).unwrap().to_vec();
        let search = SearchParams { ef: m.rows(), ..SearchParams::new(k) };
        let o = index.search(&query, &search, |_| true).unwrap();
        prop_assert_eq!(o.method, SearchMethod::Graph);
        prop_assert_eq!(indices(&o), exact(&m, &query, k, |_| true));
    }

    /// Whatever the filter and budget, a search returns min(count, visible) visible hits,
    /// best first.
    #[test]
    fn filtered_queries_never_return_fewer_than_the_visible_count(
        (m, seed) in small_library(),
        k in 1usize..15,
        ef in 1usize..20,
        mask in proptest::collection::vec(any::<bool>(), 120),
        density in 0u32..4,
        q in 0usize..1000,
    ) {
        let bytes = build(m.view(), &BuildParams { m: 4, ef_construction: 16, seed }, &|_| {}).unwrap();
        let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default()).unwrap();
        let visible = |i: u32| {
            let bit = mask.get(i as usize).copied().unwrap_or(false);
            match density { 0 => bit, 1 => bit && i.is_multiple_of(3), 2 => i.is_multiple_of(7), _ => true }
        };
        let visible_count = (0..m.rows() as u32).filter(|&i| visible(i)).count();
        let query = m.row(q % m.rows()).unwrap().to_vec();
        let o = index.search(&query, &SearchParams { ef, ..SearchParams::new(k) }, visible).unwrap();
        prop_assert_eq!(o.hits.len(), k.min(visible_count));
        prop_assert!(o.hits.iter().all(|h| visible(h.index)));
        prop_assert!(o.hits.windows(2).all(|w| w[0].score >= w[1].score));
    }

    /// Any one byte changed, or the file cut short, is refused at open; with only the
    /// structure verified, searches over a damaged large section still never panic.
    #[test]
    fn a_damaged_or_truncated_index_is_refused(
        (m, seed) in small_library(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = build(m.view(), &BuildParams { m: 4, ef_construction: 8, seed }, &|_| {}).unwrap();
        let mut damaged = bytes.as_bytes().to_vec();
        let at = at.index(damaged.len());
        damaged[at] ^= flip;
        let damaged = IndexBytes::copy_from(&damaged);
        prop_assert!(IndexView::open(damaged.as_bytes(), m.view(), &OpenOptions::default()).is_err());
        let structure = OpenOptions { verify: Verify::Structure, ..OpenOptions::default() };
        if let Ok(index) = IndexView::open(damaged.as_bytes(), m.view(), &structure) {
            prop_assert!(index.verify_checksums().is_err());
            let q = m.row(0).unwrap().to_vec();
            let o = index.search(&q, &SearchParams::new(3), |_| true).unwrap();
            prop_assert_eq!(o.hits.len(), 3.min(m.rows()));
        }
        let cut = cut.index(bytes.len());
        let truncated = IndexBytes::copy_from(&bytes.as_bytes()[..cut]);
        prop_assert!(IndexView::open(truncated.as_bytes(), m.view(), &OpenOptions::default()).is_err());
    }
}
