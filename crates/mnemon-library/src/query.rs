//! The query engine (`docs/reference/library.md#query-pipeline`) on typed requests: check, score,
//! cut. The JSON arguments and result are parsed and written by [`crate::wire`].

use mnemon_ann::{SearchMethod, SearchParams};
use mnemon_vector::{Scored, top_k_of_scores};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::access::AccessGrant;
use crate::cut::CountType;
use crate::cut::{cut, cut_ranked};
use crate::error::{LibraryError, Result};
use crate::fast::{self, Bounds, Need};
use crate::library::{Library, norm_f64};
use crate::omit::{Omit, OmitKey};
use crate::request::QueryRequest;
use crate::result::{Hit, QueryMethod, QueryResult};
use crate::shared_scan::{MAX_PRESCAN_TOP, ScanKind};
use crate::storage::NO_TAG;

/// A query whose request has been checked: the first half of [`Library::query`], made by
/// [`Library::plan`] and finished by [`Library::run_planned`]. It carries its grant, so the
/// query finishes under the access it was planned with.
///
/// The split lets a host score many concurrent queries in one pass over the matrix
/// ([`Library::scores_many`]): a scan of a large library is bound by memory bandwidth, so
/// answering queries together multiplies throughput while each result stays exactly what
/// [`Library::query`] returns.
#[derive(Debug, Clone)]
pub struct PlannedQuery {
    /// The vector scored against, random when the request had none (`None` on an empty
    /// library).
    query: Option<Vec<f32>>,
    count: i64,
    count_type: CountType,
    omit: Omit,
    fast: bool,
    rows: usize,
    grant: AccessGrant,
    /// The approximate index will answer (the library has one not yet refused, is at least
    /// [`IndexUse::min_bits`] large, and the query did not ask for the exact scan).
    indexed: bool,
    /// The index's beam width.
    ef: usize,
}

impl PlannedQuery {
    /// The vector every row is scored against when this query runs without fast mode on a
    /// non-empty library: pass it to [`Library::scores_many`], and the scores to
    /// [`Library::run_planned`]. `None` when no full scan is needed.
    pub fn scan_vector(&self) -> Option<&[f32]> {
        if self.fast || self.rows == 0 || self.indexed {
            return None;
        }
        self.query.as_deref()
    }

    /// The vector of this query's int8 pre-scan when it runs in fast mode on a non-empty
    /// library: pass it to [`Library::prescan_many`], and the result to
    /// [`Library::run_prescanned`]. `None` when the query does not run in fast mode.
    pub fn prescan_vector(&self) -> Option<&[f32]> {
        if !self.fast || self.rows == 0 || self.indexed {
            return None;
        }
        self.query.as_deref()
    }

    /// Whether the library's approximate index is to answer this query (it may still give way
    /// to the exact scan: see [`QueryMethod`]). Such a query has no [`PlannedQuery::scan_vector`]
    /// or [`PlannedQuery::prescan_vector`]: it reads only its candidates.
    pub fn indexed(&self) -> bool {
        self.indexed
    }

    /// The grant the query will run under.
    pub fn grant(&self) -> &AccessGrant {
        &self.grant
    }
}

/// A fast query's int8 pre-scan, computed ahead by [`Library::prescan_many`] in a pass over
/// the int8 copy shared with other queries (docs/reference/library.md#fast-mode); hand it to
/// [`Library::run_prescanned`]. It holds every row's bound, before access is applied.
#[derive(Clone)]
pub struct Prescan {
    /// The vector it was computed for: a pre-scan of another vector is never used.
    query: Vec<f32>,
    /// The rows' upper bounds (every row's, or those that can rank among the best), or `None`
    /// when bounds cannot be trusted for this vector (the query then runs the exact scan, as it
    /// would alone).
    bounds: Option<Bounds>,
}

impl Prescan {
    /// A pre-scan of `query` with `bounds`, or `None` when they cannot be trusted.
    pub(crate) fn new(query: Vec<f32>, bounds: Option<Bounds>) -> Prescan {
        Prescan { query, bounds }
    }

    /// The bounds, when trusted.
    #[cfg(test)]
    pub(crate) fn bounds(&self) -> Option<&Bounds> {
        self.bounds.as_ref()
    }
}

impl std::fmt::Debug for Prescan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prescan")
            .field("dimension", &self.query.len())
            .field("rows", &self.bounds.as_ref().map(Bounds::total))
            .finish_non_exhaustive()
    }
}

/// How a query's rows get their scores.
#[derive(Clone, Copy)]
enum Scan<'a> {
    /// Scan every row exactly.
    Exact,
    /// The int8 pre-scan, falling back to the exact scan.
    Fast,
    /// Already scored (by [`Library::scores_many`]).
    Scored(&'a [f32]),
}

impl Library {
    /// Runs a query under `grant` (`docs/reference/library.md#query-pipeline`). Never modifies the
    /// library; safe to call from many threads at once.
    pub fn query(&self, request: &QueryRequest, grant: &AccessGrant) -> Result<QueryResult<'_>> {
        let plan = self.plan(request, grant.clone())?;
        self.finish(plan, None, None)
    }

    /// Checks `request` against this library and prepares it, as [`Library::query`] does
    /// before it scans: request errors surface here, with the same messages.
    pub fn plan(&self, request: &QueryRequest, grant: AccessGrant) -> Result<PlannedQuery> {
        if request.count == 0 {
            return Err(LibraryError::CountZero);
        }
        if request.model != self.model {
            return Err(LibraryError::WrongModel {
                given: request.model.clone(),
                expected: self.model.clone(),
            });
        }
        self.check_query_vector(request.embedding.as_deref())?;
        let query = match &request.embedding {
            Some(q) => Some(q.clone()),
            None if self.is_empty() => None,
            None => {
                let seed = request.seed.unwrap_or_else(rand::random);
                let mut rng = ChaCha8Rng::seed_from_u64(seed);
                let d = self.store.dim.unwrap_or(0);
                Some((0..d).map(|_| rng.random::<f32>()).collect())
            }
        };
        // A negative count ranks every visible bit: only a scan does that.
        let indexed = !request.exact
            && request.count > 0
            && query.is_some()
            && self.len() >= request.index.min_bits
            && self.ann.as_ref().is_some_and(|ann| !ann.refused());
        Ok(PlannedQuery {
            query,
            count: request.count,
            count_type: request.count_type,
            omit: request.omit.clone(),
            fast: request.fast,
            rows: self.len(),
            grant,
            indexed,
            ef: request
                .index
                .ef
                .unwrap_or_else(|| crate::request::default_index_ef(self.len())),
        })
    }

    /// Runs a planned query. `scores`, when given, must be the row scores of its
    /// [`PlannedQuery::scan_vector`] as [`Library::scores_many`] computed them; scores of the
    /// wrong length are ignored and the rows scored again. The result equals
    /// [`Library::query`]'s.
    pub fn run_planned(
        &self,
        plan: PlannedQuery,
        scores: Option<&[f32]>,
    ) -> Result<QueryResult<'_>> {
        let scores = scores.filter(|s| s.len() == self.len() && plan.scan_vector().is_some());
        self.finish(plan, scores, None)
    }

    /// The int8 pre-scan of each of `queries` (vectors of the library's dimension), in one
    /// pass over the library's int8 copy (built by the first fast query): each block of rows is
    /// read once and scored against every query with the batched int8 kernel
    /// ([`mnemon_vector::dot_i8_symmetric_many`]). Hand each to [`Library::run_prescanned`]
    /// with the plan whose [`PlannedQuery::prescan_vector`] it was computed for.
    pub fn prescan_many(&self, queries: &[&[f32]]) -> Vec<Prescan> {
        self.int8_matrix()
            .upper_bounds_many(queries)
            .into_iter()
            .zip(queries)
            .map(|(bounds, query)| Prescan {
                query: query.to_vec(),
                bounds: bounds.map(Bounds::Every),
            })
            .collect()
    }

    /// Runs a planned fast query with its pre-scan computed ahead by [`Library::prescan_many`].
    /// The result equals [`Library::query`]'s; a pre-scan of another vector or another
    /// library's size is ignored and the rows pre-scanned again.
    pub fn run_prescanned(&self, plan: PlannedQuery, prescan: Prescan) -> Result<QueryResult<'_>> {
        let same_vector = plan.prescan_vector().is_some_and(|v| {
            v.len() == prescan.query.len()
                && v.iter()
                    .zip(&prescan.query)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
        });
        let bounds = prescan
            .bounds
            .filter(|b| same_vector && b.total() == self.len());
        self.finish(plan, None, bounds)
    }

    /// What a shared scan should compute for `plan`'s pre-scan ([`Library::scan_job`]):
    /// [`ScanKind::PrescanTop`] for a bit-mode query of at most [`MAX_PRESCAN_TOP`] bits under
    /// a grant that sees every row, whose cut needs only the rows that can rank among its
    /// `count` best; [`ScanKind::Prescan`] (every row's bound) otherwise. Either gives the same
    /// result; the first reads and writes far less.
    pub fn prescan_kind(&self, plan: &PlannedQuery) -> ScanKind {
        let all_visible = self.restricted_rows(&self.open_tags(&plan.grant)) == 0;
        match (plan.count_type, usize::try_from(plan.count)) {
            (CountType::Bit, Ok(k)) if all_visible && (1..=MAX_PRESCAN_TOP).contains(&k) => {
                ScanKind::PrescanTop(k)
            }
            _ => ScanKind::Prescan,
        }
    }

    /// The exact score of every row for each of `queries` (vectors of the library's
    /// dimension), in one pass over the matrix: `result[q][row]` is what a query with
    /// `queries[q]` scores row `row`. A query of another dimension fails with
    /// [`LibraryError::QueryDimension`].
    pub fn scores_many(&self, queries: &[&[f32]]) -> Result<Vec<Vec<f32>>> {
        let view = self.store.embeddings.view();
        view.scores_many(queries).map_err(|_| {
            let found = queries
                .iter()
                .map(|q| q.len())
                .find(|&n| n != view.dim())
                .unwrap_or(0);
            LibraryError::QueryDimension {
                found,
                expected: view.dim(),
            }
        })
    }

    /// The checks of a query vector against this library, in the reference's order
    /// (`docs/reference/library.md#query-errors`): its dimension, finite values, a library that can
    /// be scored at all, and a score range that fits f32. `None` (a random vector) passes all but
    /// the third.
    pub(crate) fn check_query_vector(&self, query: Option<&[f32]>) -> Result<()> {
        let embeddings_omitted = self
            .omit
            .as_ref()
            .is_some_and(|o| o.contains(OmitKey::Embedding));
        let has_embeddings = !self.is_empty() && !embeddings_omitted;
        if has_embeddings
            && let (Some(q), Some(d)) = (query, self.store.dim)
            && q.len() != d
        {
            return Err(LibraryError::QueryDimension {
                found: q.len(),
                expected: d,
            });
        }
        if query.is_some_and(|q| q.iter().any(|x| !x.is_finite())) {
            return Err(LibraryError::QueryNotFinite);
        }
        if !self.is_empty() && embeddings_omitted {
            return Err(LibraryError::NoSimilarity(self.store.ids[0].to_string()));
        }
        if let Some(q) = query
            && has_embeddings
        {
            self.check_score_range(q)?;
        }
        Ok(())
    }

    /// Refuses a query whose scores could overflow f32 (issue 11 item 4). Scores are dot
    /// products accumulated in f32 by `mnemon_vector`; by Cauchy–Schwarz every partial sum of
    /// `q·r` is at most `|q|·|r|` in magnitude, so when `|q|·max|r|` stays below half of
    /// `f32::MAX` (margin for rounding) every score is finite and ranks correctly, in the exact
    /// and the fast scan alike. Both lengths are computed in f64, where they cannot overflow.
    fn check_score_range(&self, query: &[f32]) -> Result<()> {
        let limit = f64::from(f32::MAX) / 2.0;
        let query_norm = norm_f64(query);
        if query_norm == 0.0 {
            return Ok(());
        }
        let library_norm = self.max_row_norm();
        if query_norm * library_norm >= limit {
            return Err(LibraryError::QueryTooLarge {
                query_norm,
                library_norm,
                limit,
            });
        }
        Ok(())
    }

    /// Everything after the checks: access, scoring (unless `scores` holds it already, or
    /// `prescan` a fast query's bounds) and the cut.
    fn finish(
        &self,
        plan: PlannedQuery,
        scores: Option<&[f32]>,
        prescan: Option<Bounds>,
    ) -> Result<QueryResult<'_>> {
        // A sidecar changed under the map: refuse rather than answer from zeros or new bytes.
        self.store.check_backing()?;
        // Restrict: which tags the grant opens.
        let open_tag = self.open_tags(&plan.grant);
        let tags = &self.store.tags;
        let keep = |i: usize| {
            let t = tags[i];
            t == NO_TAG || open_tag.get(t as usize).copied().unwrap_or(false)
        };
        let restricted = self.restricted_rows(&open_tag);
        let visible = self.len().saturating_sub(restricted);

        let indexed = match &plan.query {
            Some(query) if plan.indexed && !self.is_empty() => {
                self.select_indexed(query, plan.count, plan.count_type, plan.ef, &keep, visible)
            }
            _ => None,
        };
        let (chosen, truncate, method) = match (indexed, &plan.query) {
            (Some(found), _) => found,
            (None, Some(query)) if !self.is_empty() => {
                let scan = match (scores, plan.fast) {
                    (Some(scores), _) => Scan::Scored(scores),
                    (None, true) => Scan::Fast,
                    (None, false) => Scan::Exact,
                };
                let (chosen, truncate) = self.select(
                    query,
                    plan.count,
                    plan.count_type,
                    &keep,
                    visible,
                    scan,
                    prescan,
                )?;
                (chosen, truncate, QueryMethod::Scan)
            }
            _ => (Vec::new(), None, QueryMethod::Scan),
        };
        let hits = chosen
            .iter()
            .enumerate()
            .map(|(n, s)| Hit {
                index: s.index,
                similarity: s.score,
                text_limit: truncate.filter(|_| n == 0),
            })
            .collect();
        // Checked again after the scan: the file may have changed while it was read. The
        // result is rendered from the library later, so `wire::render` checks once more.
        self.store.check_backing()?;
        Ok(QueryResult {
            library: self,
            hits,
            restricted,
            grant: plan.grant,
            omit: plan.omit,
            method,
        })
    }

    /// Which of the library's tags `grant` opens, by tag index.
    fn open_tags(&self, grant: &AccessGrant) -> Vec<bool> {
        self.store
            .tag_names
            .iter()
            .map(|t| grant.opens(t))
            .collect()
    }

    /// The rows hidden by a grant that opens `open_tag`: tagged with a tag it does not open,
    /// or with a tag index past the table (exactly the rows `finish`'s `keep` refuses).
    fn restricted_rows(&self, open_tag: &[bool]) -> usize {
        let counts = self.tag_counts.get_or_init(|| {
            let mut counts = vec![0usize; self.store.tag_names.len() + 1];
            let past = self.store.tag_names.len();
            for &t in &self.store.tags {
                if t != NO_TAG {
                    let slot = (t as usize).min(past);
                    if let Some(c) = counts.get_mut(slot) {
                        *c += 1;
                    }
                }
            }
            counts
        });
        counts
            .iter()
            .enumerate()
            .filter(|&(t, _)| !open_tag.get(t).copied().unwrap_or(false))
            .map(|(_, &c)| c)
            .sum()
    }

    /// Scores, sorts and cuts: the chosen bits in result order, and the character limit for the
    /// first bit's text when it alone is over a token budget.
    #[allow(clippy::too_many_arguments)]
    fn select<F>(
        &self,
        query: &[f32],
        count: i64,
        count_type: CountType,
        keep: &F,
        visible: usize,
        scan: Scan<'_>,
        prescan: Option<Bounds>,
    ) -> Result<(Vec<Scored>, Option<usize>)>
    where
        F: Fn(usize) -> bool + Sync,
    {
        let view = self.store.embeddings.view();
        if matches!(scan, Scan::Fast)
            && count > 0
            && let Some(chosen) = self.select_fast(query, count, count_type, keep, visible, prescan)
        {
            return Ok(chosen);
        }
        // The plan checked the query's dimension; a mismatch here is still refused, never
        // scored over a common prefix.
        let dimension = |_: mnemon_vector::VectorError| LibraryError::QueryDimension {
            found: query.len(),
            expected: view.dim(),
        };
        let scored = match scan {
            Scan::Scored(scores) => Some(scores),
            Scan::Fast | Scan::Exact => None,
        };
        if count > 0 && count_type == CountType::Bit {
            let k = (count as u64).min(visible as u64) as usize;
            return Ok(match scored {
                Some(scores) => (top_k_of_scores(scores, k, keep), None),
                None => (view.top_k(query, k, keep).map_err(dimension)?, None),
            });
        }
        let computed;
        let scores = match scored {
            Some(scores) => scores,
            None => {
                computed = view.scores(query).map_err(dimension)?;
                &computed
            }
        };
        let visible_rows = (0..self.len())
            .filter(|&i| keep(i))
            .map(|i| i as u32)
            .collect();
        let mut ranked = Ranked::new(scores, visible_rows);
        let (order, truncate) = cut(&mut ranked, count, count_type, &self.store.token_counts);
        let chosen = order
            .into_iter()
            .map(|index| Scored {
                index,
                score: scores[index],
            })
            .collect();
        Ok((chosen, truncate))
    }
}

impl Library {
    /// The approximate index (docs/reference/library.md#ann-index): the `count` visible bits it
    /// finds (bit mode), or the ranked bits it finds cut by the token budget, asking it for
    /// twice as many until the budget is decided (token mode); every similarity is the exact
    /// `f32` score. Access is applied during the walk, and the index itself scans exactly when
    /// its walk finds fewer visible bits than wanted. `None` when the index cannot be used
    /// (refused, or its file changed under the map): the caller scans.
    fn select_indexed<F>(
        &self,
        query: &[f32],
        count: i64,
        count_type: CountType,
        ef: usize,
        keep: &F,
        visible: usize,
    ) -> Option<(Vec<Scored>, Option<usize>, QueryMethod)>
    where
        F: Fn(usize) -> bool + Sync,
    {
        let ann = self.ann.as_ref()?;
        let index = match ann.view(self.store.embeddings.view()) {
            Ok(index) => index,
            Err(why) => {
                // A refusal by verification was logged once, when it happened.
                if ann.refusal() != Some(why.as_str()) {
                    tracing::warn!(
                        "not using the ANN index {} for this query: {why}; scanning exactly",
                        ann.path().display()
                    );
                }
                return None;
            }
        };
        let mut method = QueryMethod::Index;
        let mut search = |k: usize| -> Option<Vec<Scored>> {
            let params = SearchParams {
                ef: ef.max(k),
                ..SearchParams::new(k)
            };
            // Ids come from the index file: the view bounds-checks them, and so does this.
            let rows = self.len();
            let found = index
                .search(query, &params, |i| (i as usize) < rows && keep(i as usize))
                .map_err(|e| tracing::warn!("the ANN index search failed ({e}): scanning exactly"))
                .ok()?;
            if let SearchMethod::ExactFallback(reason) = found.method {
                tracing::debug!(?reason, "the ANN index gave way to an exact scan");
                method = QueryMethod::IndexFallback;
            }
            Some(
                found
                    .hits
                    .into_iter()
                    .map(|h| Scored {
                        index: h.index as usize,
                        score: h.score,
                    })
                    .collect(),
            )
        };
        let found = match count_type {
            CountType::Bit => {
                let k = (count.max(0) as u64).min(visible as u64) as usize;
                (search(k)?, None)
            }
            CountType::Token => {
                let token_counts = &self.store.token_counts;
                let mut k = visible.min(64);
                loop {
                    let mut ranked = search(k)?;
                    let (kept, truncate, more) = cut_ranked(
                        ranked.iter().map(|s| s.index),
                        count,
                        count_type,
                        token_counts,
                    );
                    if !more || ranked.len() < k || k >= visible {
                        ranked.truncate(kept);
                        break (ranked, truncate);
                    }
                    k = k.saturating_mul(2).min(visible);
                }
            }
        };
        // The file may have changed while the walk read it.
        if let Some(changed) = ann.changed() {
            tracing::warn!(
                "not using the ANN index {} for this query: {changed}; scanning exactly",
                ann.path().display()
            );
            return None;
        }
        Some((found.0, found.1, method))
    }

    /// Fast mode (docs/reference/library.md#fast-mode): the int8 pre-scan with proven bounds, see
    /// [`crate::fast`]. The
    /// result equals the exact scan's; `None` when the exact scan should run instead.
    fn select_fast<F>(
        &self,
        query: &[f32],
        count: i64,
        count_type: CountType,
        keep: &F,
        visible: usize,
        prescan: Option<Bounds>,
    ) -> Option<(Vec<Scored>, Option<usize>)>
    where
        F: Fn(usize) -> bool + Sync,
    {
        let view = self.store.embeddings.view();
        let token_counts = &self.store.token_counts;
        let int8 = self.int8_matrix();
        match count_type {
            CountType::Bit => {
                let k = (count as u64).min(visible as u64) as usize;
                let mut chosen = fast::select(
                    int8,
                    &view,
                    query,
                    keep,
                    visible,
                    prescan,
                    (4 * k).max(k + 64),
                    &mut |scored| {
                        if scored.len() >= k {
                            Need::Prefix(k)
                        } else {
                            Need::More
                        }
                    },
                )?;
                chosen.truncate(k);
                Some((chosen, None))
            }
            CountType::Token => {
                let cut_of = |scored: &[Scored]| {
                    cut_ranked(
                        scored.iter().map(|s| s.index),
                        count,
                        count_type,
                        token_counts,
                    )
                };
                let mut chosen = fast::select(
                    int8,
                    &view,
                    query,
                    keep,
                    visible,
                    prescan,
                    64,
                    &mut |scored| {
                        match cut_of(scored) {
                            (_, _, true) => Need::More,
                            // A lone first bit over the budget: only it was looked at.
                            (_, Some(_), false) => Need::Prefix(1),
                            // The bit after the kept ones ended the budget, so it counts too.
                            (kept, None, false) => Need::Prefix(kept + 1),
                        }
                    },
                )?;
                let (kept, truncate, _) = cut_of(&chosen);
                chosen.truncate(kept);
                Some((chosen, truncate))
            }
        }
    }
}

/// Visible rows in rank order, sorted lazily: a batch of the best C is selected and sorted, and the
/// next batch (C doubled) only when the walk gets there
/// (docs/reference/library.md#scan-and-selection).
struct Ranked<'a> {
    scores: &'a [f32],
    rest: Vec<u32>,
    pos: usize,
    sorted_to: usize,
    batch: usize,
}

impl<'a> Ranked<'a> {
    fn new(scores: &'a [f32], rest: Vec<u32>) -> Self {
        Ranked {
            scores,
            rest,
            pos: 0,
            sorted_to: 0,
            batch: 64,
        }
    }

    fn cmp(scores: &[f32], a: u32, b: u32) -> std::cmp::Ordering {
        let (sa, sb) = (scores[a as usize], scores[b as usize]);
        sb.total_cmp(&sa).then(a.cmp(&b))
    }
}

impl Iterator for Ranked<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.pos >= self.rest.len() {
            return None;
        }
        if self.pos == self.sorted_to {
            let scores = self.scores;
            let tail = &mut self.rest[self.pos..];
            let take = self.batch.min(tail.len());
            if take < tail.len() {
                tail.select_nth_unstable_by(take - 1, |&a, &b| Ranked::cmp(scores, a, b));
            }
            tail[..take].sort_unstable_by(|&a, &b| Ranked::cmp(scores, a, b));
            self.sorted_to = self.pos + take;
            self.batch = self.batch.saturating_mul(2);
        }
        let i = self.rest[self.pos] as usize;
        self.pos += 1;
        Some(i)
    }
}
