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
use crate::fast::{HIDDEN, QueryCodes};
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
}

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
    Bounds(Option<(QueryCodes, Vec<f64>)>),
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
        match self.state {
            JobState::Scores(_) => ScanKind::Scores,
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
                let bounds = bounds.filter(|_| complete).map(|(_, b)| b);
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
            ScanKind::Prescan => JobState::Bounds(
                self.int8_matrix()
                    .prepare(&query)
                    .map(|codes| (codes, vec![HIDDEN; rows])),
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
        let mut bounds: Vec<&mut [f64]> = Vec::new();
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
                JobState::Bounds(Some((q, out))) => {
                    if let Some(out) = out.get_mut(rows.clone()) {
                        codes.push(q);
                        bounds.push(out);
                    }
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
                .upper_bounds_rows(&codes, first, &mut bounds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{unit_vector, write_synthetic};
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
            for kind in [ScanKind::Scores, ScanKind::Prescan] {
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
                            let got = got.bounds().map(|b| b.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                            prop_assert_eq!(got, want);
                        }
                    }
                }
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
