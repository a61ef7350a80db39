//! Scans shared by queries that come and go (docs/reference/host.md#shared-scans).
//!
//! A scan of a large library is bound by memory bandwidth, so concurrent queries should read
//! each block of rows once between them. Gathering queries into passes that each cover the whole
//! library makes a query that arrives during a pass wait for the next; with closed-loop clients
//! the passes then serve one or two queries each. Here a query joins the scan that is already
//! running, at whatever block it has reached, and leaves once it has seen every block: the
//! scanner ([`Library::scan_rows`]) scores the next block for every query present, so each
//! block read serves everyone waiting.
//!
//! A [`ScanJob`] counts the rows it has been given and is only worth anything once it has
//! covered every row: [`ScanJob::into_scores`] and [`ScanJob::into_prescan`] give nothing
//! before that, so a job fed the wrong blocks falls back to its own full scan and never to a
//! partial answer.

use std::ops::Range;

use crate::error::{LibraryError, Result};
use crate::fast::{Bounds, BoundsOut, HIDDEN, QueryCodes, TopBounds};
use crate::library::Library;
use crate::query::Prescan;

/// What a [`ScanJob`] computes for its query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanKind {
    /// Every row's exact score, as [`Library::scores_many`] computes it (for
    /// [`Library::run_planned`]).
    Scores,
    /// Every row's int8 bound, as [`Library::prescan_many`] computes it (for
    /// [`Library::run_prescanned`]).
    Prescan,
    /// The int8 bounds of only the rows that can rank among the query's `k` best, for a
    /// bit-mode query of count `k` that sees every row ([`Library::prescan_kind`] says when):
    /// a few hundred rows instead of all. [`Library::run_prescanned`] gives the same result as
    /// with [`ScanKind::Prescan`], and scans exactly if the rows listed do not decide it.
    /// `k` above [`MAX_PRESCAN_TOP`], or not below the library's size, computes every bound.
    PrescanTop(usize),
}

/// The largest `k` of [`ScanKind::PrescanTop`] computed as such: the rows kept grow with `k`,
/// and keeping them costs a little per row seen.
pub const MAX_PRESCAN_TOP: usize = 256;

/// One query's part in a scan shared with other queries: fed blocks of rows by
/// [`Library::scan_rows`] until it has covered every row of its library.
pub struct ScanJob {
    query: Vec<f32>,
    state: JobState,
    /// Rows scored so far.
    covered: usize,
    /// Rows in the library the job was made for.
    rows: usize,
}

enum JobState {
    Scores(Vec<f32>),
    /// `None` when the int8 bounds cannot be trusted for this query: the job then covers rows
    /// without computing anything, and its pre-scan says to scan exactly.
    Bounds(Option<(QueryCodes, Gathered)>),
}

/// The bounds a pre-scan job gathers.
enum Gathered {
    /// Every row's, by row.
    Every(Vec<f64>),
    /// Those of the rows that can rank among the `k` best.
    Top(TopBounds),
}

impl std::fmt::Debug for ScanJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanJob")
            .field("kind", &self.kind())
            .field("covered", &self.covered)
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl ScanJob {
    /// What this job computes.
    pub fn kind(&self) -> ScanKind {
        match &self.state {
            JobState::Scores(_) => ScanKind::Scores,
            JobState::Bounds(Some((_, Gathered::Top(top)))) => ScanKind::PrescanTop(top.k()),
            JobState::Bounds(_) => ScanKind::Prescan,
        }
    }

    /// Whether every row has been scored, so the job's answer can be taken.
    pub fn is_complete(&self) -> bool {
        self.covered >= self.rows
    }

    /// Every row's exact score, once the job is complete; `None` before, or for a
    /// [`ScanKind::Prescan`] job.
    pub fn into_scores(self) -> Option<Vec<f32>> {
        match self.state {
            JobState::Scores(scores) if self.covered >= self.rows => Some(scores),
            _ => None,
        }
    }

    /// The query's pre-scan, for [`Library::run_prescanned`]; `None` for a
    /// [`ScanKind::Scores`] job. An incomplete job gives a pre-scan without bounds, which
    /// [`Library::run_prescanned`] answers with its own scan.
    pub fn into_prescan(self) -> Option<Prescan> {
        match self.state {
            JobState::Bounds(bounds) => {
                let complete = self.covered >= self.rows;
                let rows = self.rows;
                let bounds = bounds.filter(|_| complete).map(|(_, b)| match b {
                    Gathered::Every(bounds) => Bounds::Every(bounds),
                    Gathered::Top(top) => top.finish(rows),
                });
                Some(Prescan::new(self.query, bounds))
            }
            JobState::Scores(_) => None,
        }
    }
}

impl Library {
    /// A job for `query` in a shared scan of this library (see [`Library::scan_rows`]).
    /// [`ScanKind::Prescan`] builds the int8 copy if no fast query has yet. Fails with
    /// [`LibraryError::QueryDimension`] when `query` does not have the library's dimension.
    pub fn scan_job(&self, kind: ScanKind, query: Vec<f32>) -> Result<ScanJob> {
        let rows = self.len();
        let dim = self.store.embeddings.view().dim();
        if rows > 0 && query.len() != dim {
            return Err(LibraryError::QueryDimension {
                found: query.len(),
                expected: dim,
            });
        }
        let state = match kind {
            ScanKind::Scores => JobState::Scores(vec![0.0; rows]),
            ScanKind::PrescanTop(k) if (1..=MAX_PRESCAN_TOP).contains(&k) && k < rows => {
                JobState::Bounds(
                    self.int8_matrix()
                        .prepare(&query)
                        .map(|codes| (codes, Gathered::Top(TopBounds::new(k)))),
                )
            }
            ScanKind::Prescan | ScanKind::PrescanTop(_) => JobState::Bounds(
                self.int8_matrix()
                    .prepare(&query)
                    .map(|codes| (codes, Gathered::Every(vec![HIDDEN; rows]))),
            ),
        };
        Ok(ScanJob {
            query,
            state,
            covered: 0,
            rows,
        })
    }

    /// Scores rows `rows` (cut to the library) for every one of `jobs`, reading the rows once
    /// for all of them: exact scores with the register-blocked f32 kernel, bounds with the
    /// batched int8 kernel, in parallel. A job's answer is bit for bit the one-query scan's
    /// once it has been given every row exactly once, in blocks of any size, in any order.
    /// Jobs made for a library of another size are skipped.
    pub fn scan_rows(&self, jobs: &mut [&mut ScanJob], rows: Range<usize>) {
        let total = self.len();
        let rows = rows.start.min(total)..rows.end.min(total);
        if rows.is_empty() {
            return;
        }
        let (first, len) = (rows.start, rows.len());
        let mut vectors: Vec<&[f32]> = Vec::new();
        let mut scores: Vec<&mut [f32]> = Vec::new();
        let mut codes: Vec<&QueryCodes> = Vec::new();
        let mut bounds: Vec<BoundsOut<'_>> = Vec::new();
        for job in jobs.iter_mut() {
            if job.rows != total {
                continue;
            }
            job.covered = job.covered.saturating_add(len);
            match &mut job.state {
                JobState::Scores(out) => {
                    if let Some(out) = out.get_mut(rows.clone()) {
                        vectors.push(&job.query);
                        scores.push(out);
                    }
                }
                JobState::Bounds(Some((q, Gathered::Every(out)))) => {
                    if let Some(out) = out.get_mut(rows.clone()) {
                        codes.push(q);
                        bounds.push(BoundsOut::Every(out));
                    }
                }
                JobState::Bounds(Some((q, Gathered::Top(top)))) => {
                    codes.push(q);
                    bounds.push(BoundsOut::Top(top));
                }
                JobState::Bounds(None) => {}
            }
        }
        if !scores.is_empty() {
            // Every vector was checked against the dimension by `scan_job`.
            let _ = self
                .store
                .embeddings
                .view()
                .scores_many_rows(&vectors, first, &mut scores);
        }
        if !bounds.is_empty() {
            self.int8_matrix()
                .upper_bounds_rows(&codes, rows, &mut bounds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{unit_vector, write_synthetic};
    use crate::{AccessGrant, CountType, QueryRequest, wire};
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn library(rows: usize, dim: usize, seed: u64) -> Library {
        let mut bytes = Vec::new();
        write_synthetic(&mut bytes, "m", rows, dim, seed).unwrap();
        Library::from_bytes(&bytes).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Issue 17 item 0: queries that join a running scan at different blocks, fed blocks
        /// of random sizes in rotation, end with the one-pass answers bit for bit.
        #[test]
        fn jobs_joining_anywhere_equal_one_pass(
            rows in 1usize..5000,
            dim in 1usize..80,
            block in 1usize..3000,
            starts in proptest::collection::vec(0usize..5000, 1..5),
            seed in 0u64..1000,
            top in 1usize..12,
        ) {
            let lib = library(rows, dim, seed);
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let queries: Vec<Vec<f32>> = starts.iter().map(|_| unit_vector(&mut rng, dim)).collect();
            let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
            let whole_scores = lib.scores_many(&refs).unwrap();
            let whole_bounds = lib.int8_matrix().upper_bounds_many(&refs);
            let blocks: Vec<Range<usize>> = (0..rows.div_ceil(block))
                .map(|b| b * block..((b + 1) * block).min(rows))
                .collect();
            for kind in [ScanKind::Scores, ScanKind::Prescan, ScanKind::PrescanTop(top)] {
                // Job k joins at block `starts[k] % blocks` and is fed every block once.
                let mut jobs: Vec<(usize, ScanJob)> = queries
                    .iter()
                    .zip(&starts)
                    .map(|(q, s)| (s % blocks.len(), lib.scan_job(kind, q.clone()).unwrap()))
                    .collect();
                for step in 0..blocks.len() * 2 {
                    let b = step % blocks.len();
                    let mut present: Vec<&mut ScanJob> = jobs
                        .iter_mut()
                        .filter(|(start, job)| {
                            !job.is_complete() && (step >= *start)
                        })
                        .map(|(_, job)| job)
                        .collect();
                    lib.scan_rows(&mut present, blocks[b].clone());
                }
                for (k, (_, job)) in jobs.into_iter().enumerate() {
                    prop_assert!(job.is_complete());
                    match kind {
                        ScanKind::Scores => {
                            let got = job.into_scores().unwrap();
                            prop_assert_eq!(
                                got.iter().map(|s| s.to_bits()).collect::<Vec<_>>(),
                                whole_scores[k].iter().map(|s| s.to_bits()).collect::<Vec<_>>()
                            );
                        }
                        ScanKind::Prescan => {
                            let got = job.into_prescan().unwrap();
                            let want = whole_bounds[k].as_ref().map(|b| b.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                            let got = got.bounds().map(|b| match b {
                                Bounds::Every(b) => b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                                Bounds::Listed { .. } => Vec::new(),
                            });
                            prop_assert_eq!(got, want);
                        }
                        ScanKind::PrescanTop(count) => {
                            // Only the best rows' bounds, yet the exact scan's result.
                            let prescan = job.into_prescan().unwrap();
                            if count < rows {
                                let listed = matches!(prescan.bounds(), Some(Bounds::Listed { .. }));
                                prop_assert!(listed);
                            }
                            let mut request = QueryRequest::new("m", queries[k].clone(), count as i64);
                            request.fast = true;
                            let plan = lib.plan(&request, AccessGrant::default()).unwrap();
                            prop_assert_eq!(lib.prescan_kind(&plan), ScanKind::PrescanTop(count));
                            let got = lib.run_prescanned(plan, prescan).unwrap();
                            request.fast = false;
                            let want = lib.query(&request, &AccessGrant::default()).unwrap();
                            prop_assert_eq!(wire::render(&got).unwrap(), wire::render(&want).unwrap());
                        }
                    }
                }
            }
        }
    }

    /// A pre-scan that listed only the rows that can rank among the 2 best still answers
    /// other cuts (more bits, a token budget) with the exact scan's result: its floor tells the
    /// selection that the list does not decide them, and the exact scan runs.
    #[test]
    fn a_short_list_answers_other_cuts_exactly() {
        let lib = library(3000, 16, 4);
        let mut rng = ChaCha8Rng::seed_from_u64(8);
        for _ in 0..4 {
            let q = unit_vector(&mut rng, 16);
            for (count, count_type) in [
                (2, CountType::Bit),
                (40, CountType::Bit),
                (1, CountType::Bit),
                (300, CountType::Token),
            ] {
                let mut job = lib.scan_job(ScanKind::PrescanTop(2), q.clone()).unwrap();
                lib.scan_rows(&mut [&mut job], 0..1700);
                lib.scan_rows(&mut [&mut job], 1700..3000);
                let prescan = job.into_prescan().unwrap();
                let mut request = QueryRequest::new("m", q.clone(), count);
                request.count_type = count_type;
                request.fast = true;
                let plan = lib.plan(&request, AccessGrant::default()).unwrap();
                let got = lib.run_prescanned(plan, prescan).unwrap();
                request.fast = false;
                let want = lib.query(&request, &AccessGrant::default()).unwrap();
                assert_eq!(wire::render(&got).unwrap(), wire::render(&want).unwrap());
            }
        }
    }

    #[test]
    fn an_incomplete_job_gives_no_answer() {
        let lib = library(300, 8, 1);
        let q = unit_vector(&mut ChaCha8Rng::seed_from_u64(2), 8);
        let mut job = lib.scan_job(ScanKind::Scores, q.clone()).unwrap();
        lib.scan_rows(&mut [&mut job], 0..299);
        assert!(!job.is_complete());
        assert!(job.into_scores().is_none());
        let mut job = lib.scan_job(ScanKind::Prescan, q.clone()).unwrap();
        lib.scan_rows(&mut [&mut job], 100..300);
        let prescan = job.into_prescan().unwrap();
        assert!(prescan.bounds().is_none());
        assert!(matches!(
            lib.scan_job(ScanKind::Scores, vec![0.0; 7]),
            Err(LibraryError::QueryDimension {
                found: 7,
                expected: 8
            })
        ));
    }
}
