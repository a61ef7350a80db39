//! The default clock and message factory.

use std::sync::Arc;

use mnemon_types::MsgFactory;
use mnemon_types::msg::{Clock, UuidIds};

/// The local wall clock, formatted `%Y-%m-%d %H:%M:%S` as AgentScope 0.0.4 writes timestamps.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> String {
        chrono::Local::now().format("%Y-%m-%d %H:%M:%S").to_string()
    }
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
    fn system_clock_format() {
        let now = SystemClock.now();
        assert_eq!(now.len(), 19);
        assert_eq!(&now[4..5], "-");
        assert_eq!(&now[10..11], " ");
        assert_eq!(default_factory().next_id().len(), 32);
    }
}
