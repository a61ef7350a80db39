//! Forgetting a subject (docs/reference/memory.md#forget): what both durable stores return.

use serde::Serialize;

/// What [`SqliteMemoryStore::forget`](crate::SqliteMemoryStore::forget) (or the PostgreSQL
/// store's) deleted: the threads a `ScopeFilter` selected in the store's namespace, and every
/// message they held (their marks and any index rows went with them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Forgotten {
    /// Threads deleted.
    pub threads: u64,
    /// Messages deleted with them.
    pub messages: u64,
}
