//! Cursor pagination of lists (docs/reference/rest.md#pagination).
//!
//! A cursor is opaque to callers: URL-safe base64 of the key of the last item handed out, so the
//! next page starts after that item even when items before it were added or removed meanwhile.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::OpsError;

/// The page size when the caller gives no `limit`.
pub const DEFAULT_LIMIT: usize = 100;

/// The largest `limit` a list takes; larger ones are refused, so one request never reads an
/// unbounded list into memory twice (once from the store, once as its answer).
pub const MAX_LIMIT: usize = 1000;

/// The checked page size of a request.
pub fn limit(requested: Option<usize>) -> Result<usize, OpsError> {
    match requested {
        None => Ok(DEFAULT_LIMIT),
        Some(0) => Err(OpsError::invalid(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        ))),
        Some(n) if n > MAX_LIMIT => Err(OpsError::invalid(format!(
            "limit {n} is over the most a page holds, {MAX_LIMIT}; ask for fewer and follow \
             next_cursor"
        ))),
        Some(n) => Ok(n),
    }
}

/// The cursor pointing after the item whose key is `key`.
pub fn encode(key: &str) -> String {
    URL_SAFE_NO_PAD.encode(key.as_bytes())
}

/// The key a cursor points after.
pub fn decode(cursor: &str) -> Result<String, OpsError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.as_bytes())
        .map_err(|_| OpsError::InvalidCursor)?;
    String::from_utf8(bytes).map_err(|_| OpsError::InvalidCursor)
}

/// One page of `items` (in list order) after the cursor's item: the items and the cursor of
/// the next page (`None` on the last page). `key` gives each item's key; `sorted` says that the
/// list is in ascending key order, so a cursor whose item was removed still finds its place.
pub fn page<T>(
    items: Vec<T>,
    cursor: Option<&str>,
    limit: usize,
    sorted: bool,
    key: impl Fn(&T) -> String,
) -> Result<(Vec<T>, Option<String>), OpsError> {
    let start = match cursor {
        None => 0,
        Some(cursor) => {
            let after = decode(cursor)?;
            if sorted {
                items.partition_point(|item| key(item) <= after)
            } else {
                items
                    .iter()
                    .position(|item| key(item) == after)
                    .map(|i| i + 1)
                    .ok_or(OpsError::InvalidCursor)?
            }
        }
    };
    let total = items.len();
    let end = start.saturating_add(limit).min(total);
    let page: Vec<T> = items
        .into_iter()
        .skip(start)
        .take(end.saturating_sub(start))
        .collect();
    let next = if end < total {
        page.last().map(|item| encode(&key(item)))
    } else {
        None
    };
    Ok((page, next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn walk(items: &[String], limit: usize, sorted: bool) -> Vec<String> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let (page, next) = page(items.to_vec(), cursor.as_deref(), limit, sorted, |s| {
                s.clone()
            })
            .unwrap();
            out.extend(page);
            match next {
                Some(next) => cursor = Some(next),
                None => return out,
            }
        }
    }

    proptest! {
        #[test]
        fn cursors_round_trip(key in ".{0,40}") {
            prop_assert_eq!(decode(&encode(&key)).unwrap(), key);
        }

        #[test]
        fn walking_the_pages_yields_every_item_once(
            set in proptest::collection::btree_set("[a-z]{1,6}", 0..40),
            limit in 1usize..7,
        ) {
            let items: Vec<String> = set.into_iter().collect();
            prop_assert_eq!(&walk(&items, limit, true), &items);
            prop_assert_eq!(&walk(&items, limit, false), &items);
        }
    }

    #[test]
    fn a_removed_item_keeps_its_place_in_a_sorted_list() {
        let items: Vec<String> = ["a", "b", "d"].map(String::from).to_vec();
        let (page1, next) =
            page(items.clone(), Some(&encode("c")), 10, true, |s| s.clone()).unwrap();
        assert_eq!(page1, ["d"]);
        assert!(next.is_none());
        let unsorted = page(items, Some(&encode("c")), 10, false, |s| s.clone());
        assert!(matches!(unsorted, Err(OpsError::InvalidCursor)));
        assert!(matches!(decode("!!"), Err(OpsError::InvalidCursor)));
        assert!(limit(Some(0)).is_err());
        assert!(limit(Some(MAX_LIMIT + 1)).is_err());
        assert_eq!(limit(None).unwrap(), DEFAULT_LIMIT);
    }
}
