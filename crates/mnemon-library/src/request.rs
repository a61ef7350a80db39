//! A query as the engine takes it: typed, already parsed (the JSON arguments are parsed once,
//! by [`crate::wire`]).

use crate::cut::CountType;
use crate::omit::Omit;

/// One query against a [`Library`](crate::Library), for
/// [`Library::query`](crate::Library::query) and [`Library::plan`](crate::Library::plan).
///
/// Rust callers build it directly ([`QueryRequest::new`]); a host parses the Polymath JSON
/// arguments into one with [`wire::parse_query`](crate::wire::parse_query). Either way the
/// engine checks it against the library the same way (count, model, the vector's dimension and
/// range) before it scans.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryRequest {
    /// The query vector, or `None` to draw a random one (seeded with [`QueryRequest::seed`]).
    pub embedding: Option<Vec<f32>>,
    /// The embedding model the vector comes from; must equal the library's.
    pub model: String,
    /// Bits or tokens to return; negative means all; 0 is an error.
    pub count: i64,
    /// How `count` is measured.
    pub count_type: CountType,
    /// Fields to leave out of each bit ([`Omit::default`] leaves out `embedding`).
    pub omit: Omit,
    /// Seeds the random query vector drawn when `embedding` is `None`; `None` seeds from the OS.
    /// A host that wants one seeded stream draws each query's seed from its own RNG.
    pub seed: Option<u64>,
    /// Use the int8 pre-scan (docs/reference/library.md#fast-mode). Rows are scored exactly in
    /// order of a proven upper bound of their score until no unscored row can enter the result, so
    /// the result equals the exact scan's (same bits, order and similarities); only the time
    /// differs. Falls back to the exact scan when the bounds would make it score a quarter of the
    /// rows.
    pub fast: bool,
    /// Never use the library's approximate index: scan (`exact: true` in the arguments,
    /// docs/reference/library.md#ann-index). Fast mode, when on, still applies: its results are
    /// the exact scan's.
    pub exact: bool,
    /// When the library's approximate index answers (when it has one, verified, and `exact` is
    /// off).
    pub index: IndexUse,
}

/// The default [`IndexUse::min_bits`]: libraries of 50,000 bits and more are searched through
/// their index (docs/reference/library.md#ann-index). Below it an exact scan takes a few
/// milliseconds (about 11 ms at 50,000 × 1,536 on 2 cores), which is worth exact results.
pub const DEFAULT_INDEX_MIN_BITS: usize = 50_000;

/// The beam an indexed query of a library of `bits` bits uses when [`IndexUse::ef`] is `None`:
/// 128 up to 100,000 bits, growing with the square root above (416 at 1,000,000), so a larger
/// library keeps finding about 99% of the true nearest bits
/// (docs/reference/library.md#ann-index; [`mnemon_ann::default_ef`]).
pub fn default_index_ef(bits: usize) -> usize {
    mnemon_ann::default_ef(bits)
}

/// When and how a query uses a library's approximate index (docs/reference/library.md#ann-index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexUse {
    /// Libraries with fewer bits are scanned exactly even when they have an index; `0` uses the
    /// index on every library that has one, `usize::MAX` never.
    pub min_bits: usize,
    /// The search's beam width (at least the bits wanted is used): the candidates the walk
    /// keeps, the best of which (`mnemon_ann::default_rerank`) are re-ranked with the exact
    /// `f32` score. When it covers the library (`ef` ≥ bits) the result is the exact scan's.
    /// `None` (the default) sizes it by the library: [`default_index_ef`].
    pub ef: Option<usize>,
}

impl Default for IndexUse {
    fn default() -> Self {
        IndexUse {
            min_bits: DEFAULT_INDEX_MIN_BITS,
            ef: None,
        }
    }
}

impl QueryRequest {
    /// The `count` bits nearest `embedding`, a vector of `model`, omitting their embeddings.
    pub fn new(model: &str, embedding: Vec<f32>, count: i64) -> Self {
        QueryRequest {
            embedding: Some(embedding),
            model: model.to_owned(),
            count,
            count_type: CountType::Bit,
            omit: Omit::default(),
            seed: None,
            fast: false,
            exact: false,
            index: IndexUse::default(),
        }
    }
}
