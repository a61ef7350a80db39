//! Thread summaries of the durable stores (docs/reference/memory.md#thread-summaries): every
//! thread of a namespace with its live message count and its last activity, newest activity
//! first, a page at a time.
//!
//! Both backends keep the two numbers in the thread's row, moved by every write in the write's
//! own transaction (SQLite schema version 3, PostgreSQL version 5), and list through an index on
//! `(namespace, last_active_ms DESC, thread_id DESC)`: a page is an index range read from a
//! keyset cursor, whatever the number of threads or messages.

use serde::Serialize;

use crate::error::MemoryError;
use crate::scope::Scope;

/// One thread of a store's namespace, as [`SqliteMemoryStore::thread_summaries`] and
/// `PostgresMemoryStore::thread_summaries` list it.
///
/// [`SqliteMemoryStore::thread_summaries`]: crate::SqliteMemoryStore::thread_summaries
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadSummary {
    /// Which thread.
    pub scope: Scope,
    /// How many messages the thread holds now.
    pub messages: u64,
    /// When a write last changed the thread (an add, a delete, a mark or a message update, a
    /// clear, a load; its creation before any of them), in milliseconds since the Unix epoch,
    /// as the asset and artifact stores keep their times. SQLite takes it from the writing
    /// process's clock, PostgreSQL from the server's. A clock that steps back never moves it
    /// back.
    pub last_active_ms: i64,
}

impl ThreadSummary {
    /// [`last_active_ms`](Self::last_active_ms) as an RFC 3339 UTC time with milliseconds
    /// (`2026-11-24T00:41:07.123Z`).
    pub fn last_active_rfc3339(&self) -> String {
        rfc3339_ms(self.last_active_ms)
    }
}

/// One page of [`ThreadSummary`]s, newest activity first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadPage {
    /// The page's threads, at most the limit asked for.
    pub threads: Vec<ThreadSummary>,
    /// The cursor of the next page (pass it as `after`); `None` when this page is the last.
    /// Opaque: only a value returned here is meaningful.
    pub next: Option<String>,
}

/// Where a page ends: the last thread's activity and id (the listing's order is
/// `last_active_ms DESC, thread_id DESC`, so the pair is a total order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub(crate) last_active_ms: i64,
    pub(crate) thread_id: i64,
}

impl Cursor {
    /// The cursor's text: `<last_active_ms>.<thread_id>`, both decimal.
    pub(crate) fn encode(self) -> String {
        format!("{}.{}", self.last_active_ms, self.thread_id)
    }

    /// The cursor of [`encode`](Self::encode)'s text; anything else is
    /// [`MemoryError::InvalidCursor`].
    pub(crate) fn decode(text: &str) -> Result<Cursor, MemoryError> {
        let invalid = || MemoryError::InvalidCursor {
            cursor: text.to_owned(),
        };
        let (ms, id) = text.split_once('.').ok_or_else(invalid)?;
        Ok(Cursor {
            last_active_ms: ms.parse().map_err(|_| invalid())?,
            thread_id: id.parse().map_err(|_| invalid())?,
        })
    }
}

/// The cursor of the creation-order listing (`threads_page`): the last listed thread's id, in
/// decimal; anything else is [`MemoryError::InvalidCursor`].
pub(crate) fn decode_created(text: &str) -> Result<i64, MemoryError> {
    text.parse().map_err(|_| MemoryError::InvalidCursor {
        cursor: text.to_owned(),
    })
}

/// [`page`] of the creation-order listing: its cursor is the last thread's id.
pub(crate) fn created_page(mut rows: Vec<(ThreadSummary, i64)>, limit: usize) -> ThreadPage {
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = match rows.last() {
        Some((_, thread_id)) if more => Some(thread_id.to_string()),
        _ => None,
    };
    ThreadPage {
        threads: rows.into_iter().map(|(summary, _)| summary).collect(),
        next,
    }
}

/// Builds a page from up to `limit + 1` rows read in listing order, each a summary with its
/// thread id: the extra row only says that another page follows.
pub(crate) fn page(mut rows: Vec<(ThreadSummary, i64)>, limit: usize) -> ThreadPage {
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next = match rows.last() {
        Some((summary, thread_id)) if more => Some(
            Cursor {
                last_active_ms: summary.last_active_ms,
                thread_id: *thread_id,
            }
            .encode(),
        ),
        _ => None,
    };
    ThreadPage {
        threads: rows.into_iter().map(|(summary, _)| summary).collect(),
        next,
    }
}

/// The row count a page reads: one more than `limit`, as an SQL integer.
pub(crate) fn fetch_count(limit: usize) -> i64 {
    i64::try_from(limit)
        .unwrap_or(i64::MAX - 1)
        .saturating_add(1)
}

/// The writing process's clock in milliseconds since the Unix epoch (SQLite's activity
/// times); a clock before the epoch reads as 0.
#[cfg(feature = "sqlite")]
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `ms` since the Unix epoch as RFC 3339 UTC with milliseconds; out of chrono's range, the
/// nearest representable end.
fn rfc3339_ms(ms: i64) -> String {
    let time = chrono::DateTime::from_timestamp_millis(ms).unwrap_or(if ms < 0 {
        chrono::DateTime::<chrono::Utc>::MIN_UTC
    } else {
        chrono::DateTime::<chrono::Utc>::MAX_UTC
    });
    time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn cursors_read_back(last_active_ms in any::<i64>(), thread_id in any::<i64>()) {
            let cursor = Cursor { last_active_ms, thread_id };
            prop_assert_eq!(Cursor::decode(&cursor.encode()), Ok(cursor));
        }

        #[test]
        fn any_text_decodes_or_is_invalid_cursor(text in ".{0,40}") {
            match Cursor::decode(&text) {
                Ok(cursor) => prop_assert_eq!(Cursor::decode(&cursor.encode()), Ok(cursor)),
                Err(e) => prop_assert_eq!(e, MemoryError::InvalidCursor { cursor: text }),
            }
        }
    }

    #[test]
    fn malformed_cursors_are_rejected() {
        for text in [
            "",
            ".",
            "1",
            "1.",
            ".1",
            "a.1",
            "1.b",
            "1.2.3",
            "99999999999999999999.1",
        ] {
            assert!(
                matches!(Cursor::decode(text), Err(MemoryError::InvalidCursor { .. })),
                "{text:?}"
            );
        }
    }

    #[test]
    fn times_render_as_rfc3339_utc() {
        let summary = ThreadSummary {
            scope: Scope::default(),
            messages: 0,
            last_active_ms: 1_764_000_000_123,
        };
        assert_eq!(summary.last_active_rfc3339(), "2025-11-24T16:00:00.123Z");
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
        assert!(rfc3339_ms(i64::MAX).starts_with('+'));
    }

    #[test]
    fn a_page_has_a_cursor_only_when_more_rows_follow() {
        let row = |ms, id| {
            (
                ThreadSummary {
                    scope: Scope::session(format!("s{id}")),
                    messages: 1,
                    last_active_ms: ms,
                },
                id,
            )
        };
        let full = page(vec![row(30, 3), row(20, 2), row(10, 1)], 2);
        assert_eq!(full.threads.len(), 2);
        assert_eq!(full.next.as_deref(), Some("20.2"));
        let last = page(vec![row(30, 3), row(20, 2)], 2);
        assert_eq!(last.next, None);
        assert_eq!(page(Vec::new(), 0).next, None);
        assert_eq!(fetch_count(usize::MAX), i64::MAX);
        assert_eq!(fetch_count(0), 1);
    }
}
