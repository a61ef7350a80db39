//! What filtered listing, expiry and forgetting share across the three stores
//! (docs/reference/assets.md#filters, #expiry, #forget): the filterable document of an asset,
//! where each of its fields lives in SQL, and the byte range of an id prefix.

use mnemon_filter::{ColumnKind, Dialect, Filter, Source, SqlParam};
use mnemon_types::{Asset, meta};

use crate::error::StoreError;

/// The store-kept times every asset's filterable document carries besides its meta: when it
/// was first stored, last replaced, and when it expires (milliseconds since the Unix epoch;
/// missing when unknown or never).
pub(crate) const TIME_FIELDS: [&str; 3] = ["created_at", "updated_at", "expires_at"];

/// When a stored asset was written and when it expires (milliseconds since the Unix epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Times {
    pub(crate) created_at: Option<i64>,
    pub(crate) updated_at: Option<i64>,
    pub(crate) expires_at: Option<i64>,
}

/// The document a filter is matched against: the asset's meta (its fields, with bytes and
/// objects as type strings) and the store's times, which win over fields of the same names.
pub(crate) fn document(asset: &Asset, times: Times) -> serde_json::Value {
    let mut doc = meta(asset);
    let values = [times.created_at, times.updated_at, times.expires_at];
    for (name, value) in TIME_FIELDS.into_iter().zip(values) {
        match value {
            Some(ms) => doc.insert(name.to_owned(), ms.into()),
            None => doc.remove(name),
        };
    }
    serde_json::Value::Object(doc)
}

/// Where a durable store keeps each field of the document, for [`Filter::to_sql`]: the times
/// in their integer columns (`None` on a file from before expiry: no column, so missing), the
/// rest in the JSON document `doc` (SQLite: the `meta` column; PostgreSQL: the `doc` `jsonb`
/// column). The id and type go through the document too on PostgreSQL, where their columns
/// are `bytea`.
pub(crate) fn resolver(
    doc: &'static str,
    has_times: bool,
    typed_ids: bool,
) -> impl Fn(&str) -> Option<Source> {
    move |field: &str| {
        if TIME_FIELDS.contains(&field) {
            let expr = if has_times { field } else { "NULL" };
            return Some(Source::Column {
                expr: expr.to_owned(),
                kind: ColumnKind::Integer,
            });
        }
        if typed_ids && (field == "asset_id" || field == "asset_type") {
            return Some(Source::Column {
                expr: field.to_owned(),
                kind: ColumnKind::Text,
            });
        }
        Some(Source::Member(doc.to_owned()))
    }
}

/// The filter as a SQL fragment, its parameters appended to `params`; a filter the store
/// cannot translate is the caller's error.
pub(crate) fn where_sql(
    filter: Option<&Filter>,
    dialect: Dialect,
    resolver: &impl Fn(&str) -> Option<Source>,
    params: &mut Vec<SqlParam>,
) -> Result<String, StoreError> {
    match filter {
        None => Ok("TRUE".to_owned()),
        Some(filter) => Ok(filter.to_sql(dialect, resolver, params)?),
    }
}

pub(crate) use mnemon_db::prefix::prefix_end;
