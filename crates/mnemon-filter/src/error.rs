//! The errors of parsing a path or a filter and of translating a filter to SQL
//! (docs/reference/filters.md#errors).

use crate::path::PathError;

/// Why a filter was refused. Every variant names where in the filter the problem is (`at`, e.g.
/// `and[1].gt`; `top level` for the filter itself) so that a person or a model can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// The filter text is not JSON.
    #[error("the filter is not valid JSON: {0}")]
    Json(String),
    /// A filter node has the wrong shape or a value of the wrong type.
    #[error("{}: {reason}", display_at(at))]
    Invalid {
        /// Where in the filter, e.g. `and[1].gt`.
        at: String,
        /// What is wrong and what is expected instead.
        reason: String,
    },
    /// A path does not parse.
    #[error("{}: bad path {path:?}: {error}", display_at(at))]
    Path {
        /// Where in the filter, e.g. `or[0].eq.path`.
        at: String,
        /// The path as written.
        path: String,
        /// What is wrong with it.
        error: PathError,
    },
    /// The filter is larger or deeper than the limits allow.
    #[error(
        "{}: the filter is too large: {what} exceeds the limit of {limit} \
         (docs/reference/filters.md#limits); split it or simplify it",
        display_at(at)
    )]
    TooLarge {
        /// Where in the filter the limit was crossed.
        at: String,
        /// Which limit: nesting depth, operators and values, list length or string length.
        what: &'static str,
        /// The limit.
        limit: usize,
    },
    /// A path starts with a field the SQL resolver does not know.
    #[error(
        "{}: unknown field {field:?}: this store cannot filter on it (check the spelling of the \
         path's first name)",
        display_at(at)
    )]
    UnknownField {
        /// Where in the filter, e.g. `and[0].eq.path`.
        at: String,
        /// The path's first name.
        field: String,
    },
}

fn display_at(at: &str) -> &str {
    if at.is_empty() { "top level" } else { at }
}
