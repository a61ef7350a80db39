//! What a change to a memory did: the reports of adds, loads and deletes.

use serde::Serialize;

/// What an add or load did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AddReport {
    /// How many messages were appended.
    pub added: usize,
    /// Ids skipped because they were already stored or came earlier in the batch.
    pub skipped_duplicates: Vec<String>,
}

/// What [`Memory::delete`](crate::Memory::delete) did. All lists are ascending and unique.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeleteReport {
    /// The indices removed.
    pub deleted: Vec<usize>,
    /// The ids of the removed messages, aligned with `deleted`.
    pub deleted_ids: Vec<String>,
    /// Indices that did not name a message.
    pub skipped_invalid: Vec<usize>,
}

/// What [`Memory::delete_by_id`](crate::Memory::delete_by_id) and
/// [`Memory::delete_by_mark`](crate::Memory::delete_by_mark) did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeleteByIdReport {
    /// The ids removed, in memory order.
    pub deleted: Vec<String>,
    /// Requested ids that were not stored, in input order, without repeats.
    pub not_found: Vec<String>,
}
