//! The memory ceilings of the host (`docs/limits.md`): a byte budget shared by every request
//! body being read, a cap on queries running at once, the message of the cap on the size of a
//! serialised result (`mnemon_library::wire::render_capped` applies it),
//! and returning freed memory to the operating system after a burst.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::options::HostOptions;
use crate::response::ApiError;

/// Body bytes are budgeted in KiB, so a 64 MiB budget is 65,536 permits.
const BUDGET_UNIT: usize = 1024;

/// After a request that buffered or produced at least this much, freed memory is handed back to
/// the operating system once the host is quiet again.
pub(crate) const TRIM_AFTER_BYTES: usize = 1024 * 1024;

/// The seconds a 503 tells the client to wait (`Retry-After`).
pub(crate) const RETRY_AFTER_SECS: u32 = 1;

/// The shared limits of one host.
pub(crate) struct Limits {
    body_budget: Arc<Semaphore>,
    body_budget_units: usize,
    queries: Arc<Semaphore>,
    max_queries: usize,
    queue_timeout: Duration,
    /// Set when a large request finished; the trimmer clears it.
    trim_wanted: AtomicBool,
}

impl Limits {
    pub(crate) fn new(options: &HostOptions) -> Limits {
        // Tokio caps a semaphore's permits; no real budget comes near it.
        let units = options
            .max_buffered_body_bytes
            .div_ceil(BUDGET_UNIT)
            .clamp(1, Semaphore::MAX_PERMITS);
        let queries = options
            .max_concurrent_queries
            .clamp(1, Semaphore::MAX_PERMITS);
        Limits {
            body_budget: Arc::new(Semaphore::new(units)),
            body_budget_units: units,
            queries: Arc::new(Semaphore::new(queries)),
            max_queries: queries,
            queue_timeout: options.queue_timeout,
            trim_wanted: AtomicBool::new(false),
        }
    }

    /// A reservation for request-body bytes, grown as the body arrives.
    pub(crate) fn body_reservation(&self) -> BodyReservation<'_> {
        BodyReservation {
            limits: self,
            permit: None,
            units: 0,
        }
    }

    /// A query slot, waiting up to the queue timeout for one.
    pub(crate) async fn query_slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        let wait = Arc::clone(&self.queries).acquire_owned();
        match tokio::time::timeout(self.queue_timeout, wait).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(ApiError::busy(format!(
                "the host is busy: {} queries are running, the most it runs at once \
                 (--max-concurrent-queries); retry later",
                self.max_queries
            ))),
        }
    }

    /// Whether no query is running.
    fn queries_idle(&self) -> bool {
        self.queries.available_permits() == self.max_queries
    }

    /// Notes that a request held `bytes` of memory, so that it is returned once freed.
    pub(crate) fn note_large(&self, bytes: usize) {
        if bytes >= TRIM_AFTER_BYTES {
            self.trim_wanted.store(true, Ordering::Relaxed);
        }
    }

    /// Hands freed heap memory back to the operating system about once a second after large
    /// requests, when no query is running (glibc keeps freed memory in its arenas otherwise:
    /// a burst of large results left an idle host at 3 GB). Runs until the host stops.
    pub(crate) async fn trim_when_quiet(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if self.queries_idle() && self.trim_wanted.swap(false, Ordering::Relaxed) {
                // malloc_trim walks every arena: off the async threads.
                let _ = tokio::task::spawn_blocking(release_free_memory).await;
            }
        }
    }
}

/// Request-body bytes held against the shared budget; released when dropped.
pub(crate) struct BodyReservation<'a> {
    limits: &'a Limits,
    permit: Option<OwnedSemaphorePermit>,
    units: usize,
}

impl BodyReservation<'_> {
    /// Grows the reservation to cover `bytes` buffered bytes, waiting up to the queue timeout
    /// for room; 503 if there is none by then.
    pub(crate) async fn cover(&mut self, bytes: usize) -> Result<(), ApiError> {
        let units = bytes.div_ceil(BUDGET_UNIT);
        if units <= self.units {
            return Ok(());
        }
        let more = units - self.units;
        let too_busy = || {
            ApiError::busy(format!(
                "the host is busy: request bodies being received fill its buffer budget of {} \
                 bytes (--max-buffered-body-bytes); retry later",
                self.limits.body_budget_units.saturating_mul(BUDGET_UNIT)
            ))
        };
        if more > self.limits.body_budget_units {
            return Err(too_busy());
        }
        let Ok(more32) = u32::try_from(more) else {
            return Err(too_busy());
        };
        let semaphore = Arc::clone(&self.limits.body_budget);
        let permit = match semaphore.clone().try_acquire_many_owned(more32) {
            Ok(permit) => permit,
            Err(_) => {
                let wait = semaphore.acquire_many_owned(more32);
                match tokio::time::timeout(self.limits.queue_timeout, wait).await {
                    Ok(Ok(permit)) => permit,
                    _ => return Err(too_busy()),
                }
            }
        };
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        self.units = units;
        Ok(())
    }

    /// The bytes reserved.
    pub(crate) fn bytes(&self) -> usize {
        self.units.saturating_mul(BUDGET_UNIT)
    }

    /// Keeps the bytes reserved beyond the borrow of the limits (until the request ends).
    pub(crate) fn into_permit(self) -> Option<OwnedSemaphorePermit> {
        self.permit
    }
}

/// The error of a result over `max` bytes.
pub(crate) fn result_too_large(max: usize) -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        format!(
            "the result is larger than the host's limit of {max} bytes (--max-result-bytes); \
             ask for fewer bits with a lower count, or leave fields out with omit \
             (for example omit=embedding)"
        ),
    )
}

/// Returns free heap memory to the operating system (glibc only; elsewhere the allocator
/// decides on its own).
fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let started = std::time::Instant::now();
        // SAFETY: malloc_trim only walks the allocator's own free lists; it takes the arena
        // locks itself and is safe to call from any thread at any time.
        let released = unsafe { libc::malloc_trim(0) };
        tracing::debug!(
            released = released != 0,
            trim_ms = started.elapsed().as_millis() as u64,
            "returned free memory to the OS"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(budget: usize, queries: usize) -> HostOptions {
        HostOptions {
            max_buffered_body_bytes: budget,
            max_concurrent_queries: queries,
            queue_timeout: Duration::from_millis(50),
            ..HostOptions::default()
        }
    }

    #[tokio::test]
    async fn the_body_budget_is_shared_and_released() {
        let limits = Limits::new(&options(4096, 1));
        let mut first = limits.body_reservation();
        first.cover(3000).await.unwrap();
        assert_eq!(first.bytes(), 3072);
        let mut second = limits.body_reservation();
        second.cover(1024).await.unwrap();
        let mut third = limits.body_reservation();
        let refused = third.cover(1).await.unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(refused.message.contains("--max-buffered-body-bytes"));
        drop(first);
        third.cover(2048).await.unwrap();
        // One body larger than the whole budget is refused at once.
        let mut huge = limits.body_reservation();
        assert!(huge.cover(1 << 20).await.is_err());
    }

    #[tokio::test]
    async fn query_slots_queue_then_refuse() {
        let limits = Limits::new(&options(4096, 1));
        let slot = limits.query_slot().await.unwrap();
        assert!(!limits.queries_idle());
        let refused = limits.query_slot().await.unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.retry_after, Some(RETRY_AFTER_SECS));
        drop(slot);
        assert!(limits.queries_idle());
        drop(limits.query_slot().await.unwrap());
    }
}
