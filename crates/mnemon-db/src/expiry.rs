//! Expiry, shared by every store (docs/reference/assets.md#expiry,
//! docs/reference/artifacts.md#expiry): a time-to-live per record, a default per store handle
//! (its namespace), and the clock that decides when a record has expired.
//!
//! Times are whole **milliseconds since the Unix epoch, UTC** (`i64`): an `INTEGER` column on
//! SQLite and a `BIGINT` on PostgreSQL, compared the same way on both and in memory. A record
//! with `expires_at = t` is visible while the clock reads less than `t` and invisible from `t`
//! on (`expires_at > now` is the visibility test everywhere), so a test can set a
//! [`ManualClock`] to `t - 1` and `t` and check the boundary exactly. Records without
//! `expires_at` never expire.
//!
//! The clock is injected (`Arc<dyn Clock>` in each store's options) so that tests, and
//! programs that replay a log, decide what "now" is; [`SystemClock`] is the default.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What time it is, in milliseconds since the Unix epoch (UTC).
pub trait Clock: Send + Sync + Debug {
    /// The current time in milliseconds since the Unix epoch.
    fn now_millis(&self) -> i64;
}

/// The system's wall clock: the default of every store.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        // A clock set before 1970 reads as the epoch rather than failing every read.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }
}

/// A clock that reads what it was set to: for tests (the boundary instant of an expiry) and
/// for tools that replay history. Shared between threads; `set` and `advance` are seen by
/// every later read.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock reading `millis` (milliseconds since the Unix epoch).
    pub fn new(millis: i64) -> Self {
        ManualClock {
            now: AtomicI64::new(millis),
        }
    }

    /// Sets the time to `millis`.
    pub fn set(&self, millis: i64) {
        self.now.store(millis, Ordering::SeqCst);
    }

    /// Moves the time forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .now
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// When a record being written expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expiry {
    /// The store handle's default time-to-live (its options' `default_ttl`), or never when it
    /// has none. What the plain writes (`put`, `save`) use.
    #[default]
    Default,
    /// Never, whatever the default.
    Never,
    /// This long after the write (by the store's clock).
    After(Duration),
    /// At this instant (milliseconds since the Unix epoch); an instant not after the write's
    /// is already expired, so the record is invisible as soon as it is written.
    At(i64),
}

impl Expiry {
    /// The `expires_at` to store for a write at `now` (milliseconds) under a handle whose
    /// default time-to-live is `default_ttl`: `None` for never.
    pub fn deadline(self, now: i64, default_ttl: Option<Duration>) -> Option<i64> {
        let after = |ttl: Duration| {
            let ttl = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            now.saturating_add(ttl)
        };
        match self {
            Expiry::Default => default_ttl.map(after),
            Expiry::Never => None,
            Expiry::After(ttl) => Some(after(ttl)),
            Expiry::At(at) => Some(at),
        }
    }
}

/// Whether a record with `expires_at` is visible at `now`: the one visibility rule, written
/// in SQL as `(expires_at IS NULL OR expires_at > now)`.
pub fn is_live(expires_at: Option<i64>, now: i64) -> bool {
    expires_at.is_none_or(|at| at > now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boundary_instant_is_expired() {
        let deadline = Expiry::After(Duration::from_millis(10)).deadline(1_000, None);
        assert_eq!(deadline, Some(1_010));
        assert!(is_live(deadline, 1_009));
        assert!(!is_live(deadline, 1_010));
        assert!(is_live(None, i64::MAX));
    }

    #[test]
    fn the_default_applies_only_to_default() {
        let ttl = Some(Duration::from_secs(1));
        assert_eq!(Expiry::Default.deadline(0, ttl), Some(1_000));
        assert_eq!(Expiry::Default.deadline(0, None), None);
        assert_eq!(Expiry::Never.deadline(0, ttl), None);
        assert_eq!(Expiry::At(5).deadline(100, ttl), Some(5));
        assert_eq!(
            Expiry::After(Duration::MAX).deadline(1, None),
            Some(i64::MAX)
        );
    }

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(7);
        assert_eq!(clock.now_millis(), 7);
        clock.advance(Duration::from_millis(3));
        assert_eq!(clock.now_millis(), 10);
        clock.set(-5);
        assert_eq!(clock.now_millis(), -5);
        assert!(SystemClock.now_millis() > 1_600_000_000_000);
    }
}
