//! Approximate nearest-neighbour search for large embedding libraries and memories: an HNSW graph
//! (Malkov & Yashunin, 2016) over int8-quantised vectors, with an exact `f32` re-rank, so every
//! returned score is the exact dot product of the query and that row.
//!
//! * [`build`] quantises the rows, builds the graph in parallel with rayon, deterministically
//!   (the same vectors, [`BuildParams`] and seed give the same bytes on any number of threads),
//!   and returns the persisted bytes ([`IndexBytes`]).
//! * [`IndexView::open`] views such bytes in place (a memory map, or an [`IndexBytes`]): it
//!   checks the header, the section table and checksums, and that the index was built over the
//!   vectors it is given (dimension, count, a sample of rows re-quantised, and optionally the
//!   [`fingerprint`] of all of them); nothing of the graph is copied or parsed. A damaged,
//!   truncated or stale index is refused with an [`AnnError`], never trusted.
//! * [`IndexView::search`] takes a visibility predicate (access tags, filters): invisible rows
//!   are walked through but never returned, and the search always returns `count` hits when that
//!   many rows are visible: when the graph cannot find them (a very selective filter) it falls
//!   back to an exact scan and says so ([`SearchMethod::ExactFallback`]). [`SearchParams::exact`]
//!   forces the exact scan.
//!
//! The vectors themselves are not stored in the index: the re-rank and the exact scans read the
//! caller's `f32` matrix (the library's packed sidecar), which the view borrows.
//!
//! ```
//! use mnemon_ann::{BuildParams, IndexView, OpenOptions, SearchMethod, SearchParams, build};
//! use mnemon_vector::Matrix;
//!
//! let mut m = Matrix::new(3);
//! for row in [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.6, 0.8, 0.0], [0.0, 0.0, 1.0]] {
//!     m.push_row(&row)?;
//! }
//! let bytes = build(m.view(), &BuildParams::default(), &|_| {})?;
//! let index = IndexView::open(bytes.as_bytes(), m.view(), &OpenOptions::default())?;
//! let found = index.search(&[0.0, 1.0, 0.0], &SearchParams::new(2), |_| true)?;
//! assert_eq!(found.hits.iter().map(|h| h.index).collect::<Vec<_>>(), vec![1, 2]);
//! assert_eq!(found.hits[1].score, 0.8); // the exact f32 dot product
//! assert_eq!(found.method, SearchMethod::Graph);
//! // Only even rows visible.
//! let found = index.search(&[0.0, 1.0, 0.0], &SearchParams::new(2), |i| i % 2 == 0)?;
//! assert_eq!(found.hits.iter().map(|h| h.index).collect::<Vec<_>>(), vec![2, 0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod build;
mod format;
mod graph;
mod kernel;

use mnemon_vector::MatrixView;

pub use build::BuildProgress;
pub use format::{IndexBytes, MAGIC, VERSION, fingerprint};
pub use kernel::int8_kernel_name;

use crate::graph::{Cand, Query};

/// Everything that can go wrong building, opening or searching an index.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AnnError {
    /// The bytes end before the header or a section does.
    #[error(
        "the ANN index is truncated ({found} bytes, at least {expected} needed): rebuild it (`library pack --index`)"
    )]
    Truncated {
        /// Bytes needed.
        expected: u64,
        /// Bytes present.
        found: u64,
    },
    /// The bytes do not start with [`MAGIC`].
    #[error("the file is not a Mnemon ANN index (wrong magic bytes)")]
    NotAnIndex,
    /// A format version this build cannot read.
    #[error(
        "the ANN index has format version {found}, this build reads version {supported}: rebuild it"
    )]
    UnsupportedVersion {
        /// The version found.
        found: u32,
        /// The version this crate reads.
        supported: u32,
    },
    /// A checksum or a structural check failed.
    #[error("the ANN index is damaged ({what}): rebuild it")]
    Corrupt {
        /// What failed.
        what: String,
    },
    /// The index was built over other vectors.
    #[error("the ANN index is stale ({what}): rebuild it over the current vectors")]
    Stale {
        /// What differs.
        what: String,
    },
    /// A buffer not aligned for the in-place view.
    #[error(
        "{what} is not aligned for an in-place view: use a memory map or IndexBytes::copy_from"
    )]
    Misaligned {
        /// Which buffer.
        what: String,
    },
    /// A platform the in-place format cannot serve.
    #[error("the ANN index cannot be used on {what}")]
    Unsupported {
        /// What is unsupported.
        what: String,
    },
    /// A build or search parameter out of range.
    #[error("invalid ANN parameter: {what}")]
    InvalidParameter {
        /// Which and why.
        what: String,
    },
    /// A row holds NaN or an infinity.
    #[error("row {row} holds a NaN or an infinity: it has no nearest neighbours")]
    NonFinite {
        /// The row.
        row: usize,
    },
    /// The query's length differs from the index's dimension.
    #[error("the query has {found} dimensions, the index {expected}")]
    DimensionMismatch {
        /// The index's dimension.
        expected: usize,
        /// The query's length.
        found: usize,
    },
    /// [`build_cancellable`]'s caller asked the build to stop.
    #[error("the ANN index build was cancelled before it finished")]
    Cancelled,
}

/// Build parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildParams {
    /// Neighbours per node on the upper levels (twice as many on level 0). Default 16: the
    /// usual HNSW choice, about 132 bytes of graph per row.
    pub m: usize,
    /// Beam width while inserting. Default 128: larger builds a better graph, more slowly.
    pub ef_construction: usize,
    /// Seed of the level assignment. Default 0.
    pub seed: u64,
}

impl Default for BuildParams {
    fn default() -> Self {
        BuildParams {
            m: 16,
            ef_construction: 128,
            seed: 0,
        }
    }
}

/// Builds an index over `vectors` (unit-normalised embeddings: similarity is the dot product),
/// reporting progress after each batch. Errors on a NaN or infinite value, an empty dimension or
/// out-of-range parameters.
pub fn build(
    vectors: MatrixView<'_>,
    params: &BuildParams,
    progress: &(dyn Fn(BuildProgress) + Sync),
) -> Result<IndexBytes, AnnError> {
    build::build(vectors, params, progress, &|| false)
}

/// Builds like [`build`], asking `cancelled` before each node's insertion (so it must be
/// cheap: an atomic load) and before the final repair pass; once it answers `true` the build
/// stops and returns [`AnnError::Cancelled`], within one node's insertion (milliseconds at
/// 1,536 dimensions): a build whose result nobody will read (the store that wanted it was
/// closed) gives its cores back instead of running on for seconds or minutes.
///
/// ```
/// use mnemon_ann::{AnnError, BuildParams, build_cancellable};
/// use mnemon_vector::Matrix;
///
/// let mut vectors = Matrix::new(2);
/// for i in 0..100u16 {
///     let a = f32::from(i) / 100.0;
///     vectors.push_row(&[a.cos(), a.sin()])?;
/// }
/// let stop = || true;
/// let built = build_cancellable(vectors.view(), &BuildParams::default(), &|_| {}, &stop);
/// assert_eq!(built.unwrap_err(), AnnError::Cancelled);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn build_cancellable(
    vectors: MatrixView<'_>,
    params: &BuildParams,
    progress: &(dyn Fn(BuildProgress) + Sync),
    cancelled: &(dyn Fn() -> bool + Sync),
) -> Result<IndexBytes, AnnError> {
    build::build(vectors, params, progress, cancelled)
}

/// How much of the file [`IndexView::open`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// Every checksum, including the two large sections (the codes and level 0): reads the
    /// whole file (measured from a warm page cache on 2 cores, `cargo xtask bench ann`: 7–13 ms
    /// at 100,000 × 1,536, 240–330 ms at 1,000,000 × 1,536, so a host that must open within
    /// 100 ms opens with [`Verify::Structure`] and verifies in the background).
    #[default]
    Full,
    /// The header, the section table, the small sections' checksums and the structure, but not
    /// the large sections' checksums: opening costs no reads proportional to the size. Searches
    /// bounds-check every id, so a damaged large section costs recall, never safety; call
    /// [`IndexView::verify_checksums`] later (in the background) to refuse it.
    Structure,
}

/// Options of [`IndexView::open`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// How much to verify.
    pub verify: Verify,
    /// The [`fingerprint`] of the vectors, when the caller keeps it (computing it reads every
    /// vector, so [`IndexView::open`] does not): refused as stale when it differs.
    pub expected_fingerprint: Option<u64>,
}

/// What [`IndexView::open`] checked: the bytes (where and how long, their header checksum) and
/// the vectors (where, rows, dimension, stride), for [`IndexView::reopen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verified {
    header_checksum: u64,
    bytes_at: usize,
    len: usize,
    vectors: (usize, usize, usize, usize),
    count: usize,
}

/// The address, rows, dimension and stride of a matrix view: the same for a re-view of the
/// same matrix, different for any other.
fn vectors_identity(v: MatrixView<'_>) -> (usize, usize, usize, usize) {
    let at = v.row(0).map_or(0, |r| r.as_ptr() as usize);
    (at, v.rows(), v.dim(), v.stride())
}

/// The re-rank depth of a search for `count` hits that does not set [`SearchParams::rerank`]:
/// `max(4 · count, 64)`. Measured at 1,000,000 × 1,536 (`cargo xtask bench ann --rerank`,
/// top 10): depths 48, 96 and all 384 or 512 candidates gave the same recall@10 (0.9908), and
/// 48 answered 1,829 queries/s against 1,187 for all 384.
pub fn default_rerank(count: usize) -> usize {
    count.saturating_mul(4).max(64)
}

/// The beam width a search of an index over `rows` rows uses when its caller does not choose
/// one: 128 up to 100,000 rows, then `128 · √(rows / 100,000)` rounded up to a multiple of 32
/// (416 at 1,000,000 rows, 1,280 at 10,000,000).
///
/// A graph over more rows needs a wider beam for the same share of the true nearest rows. On
/// the benchmark's clustered vectors (docs/reference/library.md#ann-index-measured), 96 found
/// 99.8% of the true top 10 at 100,000 × 1,536, while 1,000,000 × 1,536 needed 384 for 99%
/// (128 found 95%); the square root through 128 at 100,000 rows covers both points.
pub fn default_ef(rows: usize) -> usize {
    const BASE_ROWS: f64 = 100_000.0;
    const BASE_EF: f64 = 128.0;
    if rows as f64 <= BASE_ROWS {
        return BASE_EF as usize;
    }
    let ef = (BASE_EF * (rows as f64 / BASE_ROWS).sqrt()).ceil() as usize;
    ef.div_ceil(32).saturating_mul(32)
}

/// Cache lines of the next candidate's `f32` row requested while the re-rank scores one.
const RERANK_PREFETCH_LINES: usize = 16;

/// Rows [`IndexView::open`] re-quantises to check the index matches the vectors.
const STALE_SAMPLE: usize = 64;

/// An index viewed in place over its bytes, bound to the vectors it was checked against.
pub struct IndexView<'a> {
    parsed: format::Parsed<'a>,
    vectors: MatrixView<'a>,
}

impl std::fmt::Debug for IndexView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexView")
            .field("info", &self.info())
            .finish()
    }
}

/// What an index holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexInfo {
    /// Dimension.
    pub dims: usize,
    /// Rows.
    pub count: usize,
    /// [`BuildParams::m`].
    pub m: usize,
    /// [`BuildParams::ef_construction`].
    pub ef_construction: usize,
    /// [`BuildParams::seed`].
    pub seed: u64,
    /// Upper levels.
    pub levels: usize,
    /// The [`fingerprint`] of the vectors it was built over.
    pub fingerprint: u64,
}

/// Search parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchParams {
    /// Hits wanted.
    pub count: usize,
    /// Beam width (at least `count` is used): the candidates the walk keeps. Default 128
    /// ([`SearchParams::new`]); [`default_ef`] gives a width that grows with the index.
    pub ef: usize,
    /// Candidates re-ranked with the exact `f32` dot product, best int8 scores first (at least
    /// `count`). `None` (the default) re-ranks [`default_rerank`]`(count)` of them, or all `ef`
    /// when the beam covers the index (so a covering search is the exact scan's). Each
    /// re-ranked row is a random read of `4 · dims` bytes from the caller's matrix, the largest
    /// cost of a wide beam: the int8 order is already close to the exact one, and the beam's
    /// tail is what finds the true neighbours, not what ranks them.
    pub rerank: Option<usize>,
    /// Skip the graph and scan every row exactly.
    pub exact: bool,
    /// A graph search that scores more than this fraction of the rows (and more than
    /// `ef · (2m + 1)`, the cost of an unfiltered search) gives up for an exact scan, which
    /// is cheaper by then. Default 0.25.
    pub max_visit_fraction: f32,
}

impl SearchParams {
    /// `count` hits, the default budget.
    pub fn new(count: usize) -> Self {
        SearchParams {
            count,
            ef: 128,
            rerank: None,
            exact: false,
            max_visit_fraction: 0.25,
        }
    }
}

/// One hit: a row and its exact `f32` dot product with the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The row.
    pub index: u32,
    /// The exact dot product.
    pub score: f32,
}

/// Why a graph search gave way to an exact scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackReason {
    /// The walk found fewer visible rows than wanted.
    TooFewVisible,
    /// The walk scored more rows than [`SearchParams::max_visit_fraction`] allows (a very
    /// selective filter).
    VisitBudget,
}

/// How the hits were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchMethod {
    /// The graph, candidates re-ranked exactly.
    Graph,
    /// An exact scan, as asked ([`SearchParams::exact`]).
    Exact,
    /// An exact scan after the graph could not answer: callers log or count these.
    ExactFallback(FallbackReason),
}

/// Hits, best first (ties to the lower row), and how they were found.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOutcome {
    /// `min(count, visible rows)` hits.
    pub hits: Vec<Hit>,
    /// How.
    pub method: SearchMethod,
    /// Rows the graph walk scored in int8 (0 for a forced exact scan).
    pub scored: usize,
}

impl<'a> IndexView<'a> {
    /// Views `bytes` (a memory map or an [`IndexBytes`], 8-byte aligned) as an index over
    /// `vectors`, verifying as `options` says; refuses a damaged, truncated or stale index.
    pub fn open(
        bytes: &'a [u8],
        vectors: MatrixView<'a>,
        options: &OpenOptions,
    ) -> Result<Self, AnnError> {
        let parsed = format::parse(bytes, true)?;
        if options.verify == Verify::Full {
            parsed.verify_large()?;
        }
        let h = parsed.header;
        let stale = |what: String| Err(AnnError::Stale { what });
        if vectors.dim() != h.dims as usize {
            return stale(format!(
                "built over {} dimensions, the vectors have {}",
                h.dims,
                vectors.dim()
            ));
        }
        if vectors.rows() != h.count as usize {
            return stale(format!(
                "built over {} rows, there are {}",
                h.count,
                vectors.rows()
            ));
        }
        if let Some(expected) = options.expected_fingerprint
            && expected != h.fingerprint
        {
            return stale("the vectors' fingerprint differs".into());
        }
        // A sample of rows, spread over the matrix, must quantise to the stored codes.
        let count = h.count as usize;
        let stride = h.code_stride as usize;
        let mut codes = vec![0i8; stride];
        let sample = STALE_SAMPLE.min(count);
        for k in 0..sample {
            let r = if sample <= 1 {
                0
            } else {
                k * (count - 1) / (sample - 1)
            };
            let row = vectors.row(r).unwrap_or(&[]);
            let scale = if row.iter().all(|x| x.is_finite()) {
                kernel::quantise(row, &mut codes)
            } else {
                f32::NAN
            };
            let stored = parsed.codes.get(r * stride..(r + 1) * stride);
            let stored_scale = parsed.scales.get(r).copied();
            if stored != Some(&codes[..]) || stored_scale.map(f32::to_bits) != Some(scale.to_bits())
            {
                return stale(format!(
                    "row {r} differs from the one the index was built over"
                ));
            }
        }
        Ok(IndexView { parsed, vectors })
    }

    /// What this open checked, for [`IndexView::reopen`] of the same bytes over the same
    /// vectors.
    pub fn verified(&self) -> Verified {
        let h = self.parsed.header;
        Verified {
            header_checksum: self.parsed.header_checksum,
            bytes_at: self.parsed.bytes_at,
            len: self.parsed.len,
            vectors: vectors_identity(self.vectors),
            count: h.count as usize,
        }
    }

    /// Views again the bytes an earlier [`IndexView::open`] checked (`verified` is what that
    /// view's [`IndexView::verified`] returned), without reading them again: the same buffer
    /// (same address and length, same header and section table) over the same vectors (same
    /// address, rows, dimension and stride) is only parsed, which costs no reads proportional
    /// to the size and no re-quantised sample. An owner that keeps the bytes and the vectors
    /// side by side (a library: a view borrows both, so it cannot be stored beside them) opens
    /// once and re-views per query. Anything else is refused with [`AnnError::Stale`].
    pub fn reopen(
        bytes: &'a [u8],
        vectors: MatrixView<'a>,
        verified: &Verified,
    ) -> Result<Self, AnnError> {
        if bytes.as_ptr() as usize != verified.bytes_at
            || bytes.len() != verified.len
            || vectors_identity(vectors) != verified.vectors
        {
            return Err(AnnError::Stale {
                what: "not the bytes and vectors it was verified over".into(),
            });
        }
        let parsed = format::parse(bytes, false)?;
        if parsed.header_checksum != verified.header_checksum
            || parsed.header.count as usize != verified.count
        {
            return Err(AnnError::Stale {
                what: "its header changed since it was verified".into(),
            });
        }
        Ok(IndexView { parsed, vectors })
    }

    /// Checks the large sections' checksums, after an open with [`Verify::Structure`].
    pub fn verify_checksums(&self) -> Result<(), AnnError> {
        self.parsed.verify_large()
    }

    /// What the index holds.
    pub fn info(&self) -> IndexInfo {
        let h = self.parsed.header;
        IndexInfo {
            dims: h.dims as usize,
            count: h.count as usize,
            m: h.m as usize,
            ef_construction: h.ef_construction as usize,
            seed: h.seed,
            levels: h.levels as usize,
            fingerprint: h.fingerprint,
        }
    }

    /// The `params.count` rows with the highest dot product with `query` among those for which
    /// `visible(row)` holds (see the crate documentation for the guarantee).
    pub fn search<F>(
        &self,
        query: &[f32],
        params: &SearchParams,
        visible: F,
    ) -> Result<SearchOutcome, AnnError>
    where
        F: Fn(u32) -> bool + Sync,
    {
        let dims = self.parsed.header.dims as usize;
        if query.len() != dims {
            return Err(AnnError::DimensionMismatch {
                expected: dims,
                found: query.len(),
            });
        }
        if query.iter().any(|x| !x.is_finite()) {
            return Err(AnnError::InvalidParameter {
                what: "the query holds a NaN or an infinity".into(),
            });
        }
        let count = self.parsed.header.count as usize;
        if params.exact {
            return Ok(self.exact(query, params.count, &visible, SearchMethod::Exact, 0));
        }
        if params.count == 0 || count == 0 {
            return Ok(SearchOutcome {
                hits: Vec::new(),
                method: SearchMethod::Graph,
                scored: 0,
            });
        }
        let graph = self.parsed.graph();
        let mut codes = vec![0i8; self.parsed.header.code_stride as usize];
        let scale = kernel::quantise(query, &mut codes);
        let q = Query::new(&codes, scale);
        let ef = params.ef.max(params.count).min(count);
        // A budget covering every row never gives up: the walk then reaches every row (the
        // build made level 0 connected from the entry point, which is always a seed).
        let budget = if ef >= count {
            usize::MAX
        } else {
            ((count as f64 * f64::from(params.max_visit_fraction)) as usize).max(ef * graph.m0)
        };
        let start = graph.descend(&q, 0);
        let entry = Cand {
            score: graph.score(&q, graph.entry),
            node: graph.entry,
        };
        let seeds = if start.node == entry.node {
            vec![start]
        } else {
            vec![start, entry]
        };
        let found = graph.search_level(&q, 0, &seeds, ef, &visible, budget);
        let (found, scored) = match found {
            None => {
                return Ok(self.exact(
                    query,
                    params.count,
                    &visible,
                    SearchMethod::ExactFallback(FallbackReason::VisitBudget),
                    budget,
                ));
            }
            // Fewer visible rows than wanted, and the walk did not score every row: rows it
            // missed may be visible.
            Some((found, scored)) if found.len() < params.count && scored < count => {
                return Ok(self.exact(
                    query,
                    params.count,
                    &visible,
                    SearchMethod::ExactFallback(FallbackReason::TooFewVisible),
                    scored,
                ));
            }
            Some(f) => f,
        };
        let depth = match params.rerank {
            Some(depth) => depth,
            None if ef >= count => ef,
            None => default_rerank(params.count),
        }
        .max(params.count);
        let candidates = found.get(..depth.min(found.len())).unwrap_or(&[]);
        let mut hits: Vec<Hit> = Vec::with_capacity(candidates.len());
        for (k, c) in candidates.iter().enumerate() {
            // Each row is a random read of `4 · dims` bytes: the next one is requested while
            // this one is scored.
            if let Some(next) = candidates
                .get(k + 1)
                .and_then(|n| self.vectors.row(n.node as usize))
            {
                kernel::prefetch(next, RERANK_PREFETCH_LINES);
            }
            if let Some(row) = self.vectors.row(c.node as usize)
                && let Ok(score) = mnemon_vector::dot(query, row)
            {
                hits.push(Hit {
                    index: c.node,
                    score,
                });
            }
        }
        hits.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
        hits.truncate(params.count);
        Ok(SearchOutcome {
            hits,
            method: SearchMethod::Graph,
            scored,
        })
    }

    /// The exact scan over the caller's vectors.
    fn exact<F>(
        &self,
        query: &[f32],
        k: usize,
        visible: &F,
        method: SearchMethod,
        scored: usize,
    ) -> SearchOutcome
    where
        F: Fn(u32) -> bool + Sync,
    {
        let hits = self
            .vectors
            .top_k(query, k, |i| visible(i as u32))
            .unwrap_or_default()
            .into_iter()
            .map(|s| Hit {
                index: s.index as u32,
                score: s.score,
            })
            .collect();
        SearchOutcome {
            hits,
            method,
            scored,
        }
    }
}

#[cfg(test)]
mod tests;
