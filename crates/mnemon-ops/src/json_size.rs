//! The size of a value's JSON, measured without keeping it: [`Counter`] is a writer that
//! counts the bytes written to it and fails once they pass a limit, so serialising into it
//! stops there.

/// A writer that keeps nothing, counts what it is given, and fails past `max` bytes.
pub(crate) struct Counter {
    written: usize,
    max: usize,
}

impl Counter {
    /// A counter that fails once more than `max` bytes are written.
    pub(crate) fn upto(max: usize) -> Counter {
        Counter { written: 0, max }
    }

    /// Whether more than the limit was written (the write that passed it failed).
    pub(crate) fn over(&self) -> bool {
        self.written > self.max
    }
}

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.written = self.written.saturating_add(buf.len());
        if self.over() {
            return Err(std::io::Error::other("past the result limit"));
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_stops_past_the_limit() {
        let value = serde_json::json!({"a": [1, 2, 3], "b": "text"});
        let exact = serde_json::to_vec(&value).unwrap().len();
        let mut fits = Counter::upto(exact);
        assert!(serde_json::to_writer(&mut fits, &value).is_ok());
        assert!(!fits.over());
        let mut over = Counter::upto(exact - 1);
        assert!(serde_json::to_writer(&mut over, &value).is_err());
        assert!(over.over());
    }
}
