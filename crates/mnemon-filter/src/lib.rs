//! Metadata filters: a small, serde-typed language over JSON paths that selects messages, assets
//! and artifacts by their fields (role, name, timestamps, marks, any extra field), evaluated in
//! memory or translated to SQL for SQLite and PostgreSQL. The full reference is
//! docs/reference/filters.md.
//!
//! A filter is JSON; every node is an object with one key, the operator:
//!
//! ```
//! use mnemon_filter::{Dialect, Filter, Source, SqlParam};
//! use serde_json::json;
//!
//! let filter: Filter = r#"{"and": [
//!     {"eq":  {"path": "role", "value": "user"}},
//!     {"gte": {"path": "timestamp", "value": "2026-01-01"}},
//!     {"contains": {"path": "metadata.tags", "value": "billing"}},
//!     {"not": {"exists": "metadata.secret"}}
//! ]}"#
//!     .parse()?;
//!
//! let message = json!({
//!     "role": "user", "timestamp": "2026-02-03 10:00:00",
//!     "metadata": {"tags": ["billing", "urgent"]}
//! });
//! assert!(filter.matches(&message));
//!
//! // The same filter as a WHERE fragment: `role` is a column, the rest is inside `body`.
//! let resolver = |field: &str| match field {
//!     "role" => Some(Source::Column { expr: "role".into(), kind: mnemon_filter::ColumnKind::Text }),
//!     _ => Some(Source::Member("body".into())),
//! };
//! let mut params: Vec<SqlParam> = Vec::new();
//! let sql = filter.to_sql(Dialect::Sqlite, &resolver, &mut params)?;
//! assert!(sql.starts_with("((((role) COLLATE BINARY = ?1 AND (role) IS NOT NULL) AND "));
//! assert!(!sql.contains("billing"), "values are parameters, never SQL text");
//! assert_eq!(params[1], SqlParam::Text("$.\"timestamp\"".into()));
//!
//! // Errors say where and what to fix.
//! let err = r#"{"and": [{"exists": "a"}, {"gt": {"path": "n", "value": {}}}]}"#
//!     .parse::<Filter>()
//!     .unwrap_err();
//! assert_eq!(err.to_string(), "and[1].gt: value must be a number or a string, got an object");
//! # Ok::<(), mnemon_filter::FilterError>(())
//! ```
//!
//! # Why this form
//!
//! `{"op": {"path": …, "value": …}}` is longer than a MongoDB-style `{"role": {"$eq": "user"}}`,
//! but every node has the same shape, every part is named, and field names never mix with
//! operators: a field called `and` or `$eq` needs no escaping, a JSON Schema for an MCP tool can
//! describe it operator by operator, and an error can point at `and[1].gt.value`. Models write it
//! reliably because there is one way to say each thing (`exists` also takes `{"path": …}`, the
//! form models reach for by analogy).
//!
//! # Modules
//!
//! - [`path`] — the path syntax (`metadata.tags[0]`, `metadata."a.b"`), its parser and printer.
//! - [`filter`] — the tree ([`Filter`]), its JSON form, the type rules and the limits.
//! - [`eval`] — [`Filter::matches`] against a `serde_json::Value`.
//! - [`sql`] — [`Filter::to_sql`] for SQLite and PostgreSQL.
//! - [`error`] — [`FilterError`].
//!
//! The invariant the tests hold the crate to: for every document and every filter,
//! `to_sql` selects the document exactly when `matches` is true, on both backends.

pub mod error;
pub mod eval;
pub mod filter;
pub mod path;
pub mod sql;

pub use error::FilterError;
pub use filter::{Bound, Filter, Order, Scalar};
pub use path::{Path, PathError, Step};
pub use sql::{ColumnKind, Dialect, Source, SqlParam};
