//! Where new messages get their ids and timestamps: the [`IdGen`] and [`Clock`] traits, random
//! ids for real use, and deterministic providers for tests and reproducible runs.

use std::sync::atomic::{AtomicU64, Ordering};

/// Supplies ids for new messages.
pub trait IdGen: Send + Sync {
    /// Returns a fresh, non-empty id.
    fn next_id(&self) -> String;
}

/// Supplies timestamps for new messages, as `%Y-%m-%d %H:%M:%S` strings.
pub trait Clock: Send + Sync {
    /// Returns the current time.
    fn now(&self) -> String;
}

/// Random ids: a UUID v4 as 32 lowercase hex digits, like Python's `uuid4().hex`.
#[derive(Debug, Clone, Copy, Default)]
pub struct UuidIds;

impl IdGen for UuidIds {
    fn next_id(&self) -> String {
        uuid::Uuid::new_v4().simple().to_string()
    }
}

/// Deterministic ids for tests: `format!("{:032x}", n)` for n = 1, 2, …
#[derive(Debug, Default)]
pub struct SequentialIds {
    issued: AtomicU64,
}

impl SequentialIds {
    /// Starts at 1.
    pub fn new() -> Self {
        SequentialIds::default()
    }
}

impl IdGen for SequentialIds {
    fn next_id(&self) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        format!("{n:032x}")
    }
}

/// A clock that always returns the same timestamp.
#[derive(Debug, Clone)]
pub struct FixedClock(String);

impl FixedClock {
    /// A clock stuck at `timestamp` (kept verbatim).
    pub fn new(timestamp: impl Into<String>) -> Self {
        FixedClock(timestamp.into())
    }
}

impl Clock for FixedClock {
    fn now(&self) -> String {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_and_uuid_ids() {
        let ids = SequentialIds::new();
        assert_eq!(ids.next_id(), "00000000000000000000000000000001");
        assert_eq!(ids.next_id(), "00000000000000000000000000000002");
        assert_eq!(UuidIds.next_id().len(), 32);
    }
}
