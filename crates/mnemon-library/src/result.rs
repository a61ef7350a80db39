//! What the engine returns: the chosen bits, best first, with what the caller was not shown.
//! [`wire::render_to`](crate::wire::render_to) writes it as the Polymath result JSON; it holds
//! only the hits (index, score, text cut) and borrows everything else from the library.

use crate::access::AccessGrant;
use crate::library::{BitRef, Library};
use crate::omit::Omit;

/// One chosen bit with its score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The bit's row in the library (its position in file order).
    pub index: usize,
    /// Its similarity to the query (the dot product of the two embeddings).
    pub similarity: f32,
    /// For the first bit of a token-counted result that alone is over the budget: its text is
    /// cut to this many characters (`docs/reference/library.md#query-pipeline`, step 5).
    pub text_limit: Option<usize>,
}

/// How a query found its bits (docs/reference/library.md#ann-index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QueryMethod {
    /// A scan of every visible bit: the exact scan, or fast mode (whose result is the exact
    /// scan's).
    Scan,
    /// The approximate index, its candidates re-ranked with their exact scores.
    Index,
    /// The index was asked, but its walk could not find `count` visible bits (the access tags
    /// hid too many of them), so the exact scan answered.
    IndexFallback,
}

/// The result of [`Library::query`](crate::Library::query): the bits chosen, best first, and
/// what the result reports about the bits the grant hid.
#[derive(Debug, Clone)]
pub struct QueryResult<'a> {
    pub(crate) library: &'a Library,
    pub(crate) hits: Vec<Hit>,
    pub(crate) restricted: usize,
    pub(crate) grant: AccessGrant,
    pub(crate) omit: Omit,
    pub(crate) method: QueryMethod,
}

impl<'a> QueryResult<'a> {
    /// The library the query ran on.
    pub fn library(&self) -> &'a Library {
        self.library
    }

    /// The chosen bits, best first (also under omit `*`, which renders none of them).
    pub fn hits(&self) -> &[Hit] {
        &self.hits
    }

    /// The chosen bits with their stored data, best first.
    pub fn bits(&self) -> impl ExactSizeIterator<Item = (BitRef<'a>, &Hit)> + '_ {
        let library = self.library;
        self.hits
            .iter()
            .map(move |hit| (library.bit_at(hit.index), hit))
    }

    /// How many bits the result JSON lists: the chosen bits, or none under omit `*`.
    pub fn returned_bits(&self) -> usize {
        if self.omit.all() { 0 } else { self.hits.len() }
    }

    /// How many bits of the library the grant hid (library-wide, not only near the query).
    pub fn restricted(&self) -> usize {
        self.restricted
    }

    /// The grant the query ran under.
    pub fn grant(&self) -> &AccessGrant {
        &self.grant
    }

    /// How the bits were found: whether the approximate index answered.
    pub fn method(&self) -> QueryMethod {
        self.method
    }

    /// The fields left out of each bit.
    pub fn omit(&self) -> &Omit {
        &self.omit
    }

    /// `details.message`: the grant's restricted message, when bits were hidden and it has one.
    pub fn message(&self) -> Option<String> {
        (self.restricted > 0 && !self.grant.restricted_message.is_empty()).then(|| {
            format!(
                "Restricted results were omitted. {}",
                self.grant.restricted_message
            )
        })
    }
}
