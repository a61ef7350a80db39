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
        }
    }
}
