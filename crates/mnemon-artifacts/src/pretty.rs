//! Structured content as pretty JSON within a byte bound.
//!
//! Pretty JSON indents each value by its nesting, so its size is not bounded by the compact
//! JSON it came from: a request body of 2 MiB nested 126 arrays deep around a list of zeros
//! pretty-prints to about 250 MB (each `0,` on a line of its own behind 252 spaces). Content is
//! written into a buffer that refuses to grow past the bound, so a refused value never takes
//! more memory than the bound (docs/reference/artifacts.md#write_to_file).

use std::io::{self, Write};

use serde_json::Value;

/// `value` as pretty JSON, or `None` when that would take more than `max` bytes.
pub(crate) fn pretty_within(
    value: &Value,
    max: usize,
) -> Result<Option<Vec<u8>>, serde_json::Error> {
    let mut out = Capped {
        bytes: Vec::new(),
        max,
        over: false,
    };
    match serde_json::to_writer_pretty(&mut out, value) {
        Ok(()) => Ok(Some(out.bytes)),
        Err(_) if out.over => Ok(None),
        Err(e) => Err(e),
    }
}

/// A buffer that refuses writes past `max` bytes.
struct Capped {
    bytes: Vec<u8>,
    max: usize,
    over: bool,
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let needed = self.bytes.len().saturating_add(data.len());
        if needed > self.max {
            self.over = true;
            return Err(io::Error::other("over the bound"));
        }
        // Grown by doubling, but never past the bound (a plain `Vec` could reserve up to
        // twice it).
        if needed > self.bytes.capacity() {
            let target = needed
                .max(self.bytes.capacity().saturating_mul(2))
                .min(self.max);
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn within_the_bound_it_is_serde_jsons_pretty_form() {
        let value = json!({"a": [1, 2, {"b": null}], "c": "d"});
        let pretty = serde_json::to_vec_pretty(&value).unwrap();
        assert_eq!(
            pretty_within(&value, pretty.len()).unwrap(),
            Some(pretty.clone())
        );
        assert_eq!(pretty_within(&value, pretty.len() - 1).unwrap(), None);
    }

    /// Deep nesting multiplies the size; the refusal never holds more than the bound.
    #[test]
    fn deeply_nested_content_is_refused_at_the_bound() {
        let mut value = Value::Array(vec![json!(0); 10_000]);
        for _ in 0..100 {
            value = Value::Array(vec![value]);
        }
        let compact = serde_json::to_vec(&value).unwrap().len();
        assert!(compact < 25_000);
        assert_eq!(pretty_within(&value, 100 * compact).unwrap(), None);
    }
}
