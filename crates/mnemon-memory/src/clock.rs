//! The default clock and message factory.

use std::sync::Arc;

use mnemon_types::MsgFactory;
use mnemon_types::msg::{Clock, UuidIds};

/// The local wall clock, formatted `%Y-%m-%d %H:%M:%S` as AgentScope 0.0.4 writes timestamps.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    /// Formatting the local time (the time zone's offset, then the format string parsed and
    /// applied) was a tenth of a batch add's time in the writer (issue 13's batched adds: every
    /// message without a timestamp asks): the text of the current second is kept per thread
    /// and formatted again only when the second changes.
    fn now(&self) -> String {
        let utc = chrono::Utc::now();
        let second = utc.timestamp();
        LAST_SECOND.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some((cached, text)) if *cached == second => text.clone(),
                _ => {
                    let text = utc
                        .with_timezone(&chrono::Local)
                        .format("%Y-%m-%d %H:%M:%S")
                        .to_string();
                    *last = Some((second, text.clone()));
                    text
                }
            }
        })
    }
}

thread_local! {
    /// The last second [`SystemClock::now`] formatted on this thread (Unix seconds) and its text.
    static LAST_SECOND: std::cell::RefCell<Option<(i64, String)>> =
        const { std::cell::RefCell::new(None) };
}

/// A factory with random UUID ids and the local clock: what memories use unless told otherwise.
pub fn default_factory() -> MsgFactory {
    MsgFactory::new(Arc::new(UuidIds), Arc::new(SystemClock))
}

/// A deterministic factory for unit tests.
#[cfg(test)]
pub(crate) fn test_factory() -> MsgFactory {
    use mnemon_types::msg::{FixedClock, SequentialIds};
    MsgFactory::new(
        Arc::new(SequentialIds::new()),
        Arc::new(FixedClock::new("2024-03-05 08:30:00")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_clock_text_is_the_current_second_of_the_local_time() {
        for _ in 0..3 {
            let before = chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string();
            let now = SystemClock.now();
            let after = chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string();
            assert!(
                before <= now && now <= after,
                "{before} <= {now} <= {after}"
            );
            std::thread::sleep(std::time::Duration::from_millis(600));
        }
    }

    #[test]
    fn system_clock_format() {
        let now = SystemClock.now();
        assert_eq!(now.len(), 19);
        assert_eq!(&now[4..5], "-");
        assert_eq!(&now[10..11], " ");
        assert_eq!(default_factory().next_id().len(), 32);
    }
}
