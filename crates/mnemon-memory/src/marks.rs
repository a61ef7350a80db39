//! Marks: short tags kept beside messages (docs/reference/memory.md#marks), never inside them, so
//! text forms and default exports are unchanged.

use crate::error::MemoryError;

/// The longest mark, in bytes.
pub const MAX_MARK_BYTES: usize = 255;

/// Checks that `mark` is 1 to 255 bytes.
pub fn validate_mark(mark: &str) -> Result<(), MemoryError> {
    if mark.is_empty() || mark.len() > MAX_MARK_BYTES {
        return Err(MemoryError::InvalidMark { mark: mark.into() });
    }
    Ok(())
}

/// Checks every mark of a list and returns each once, in the order first given.
///
/// A message's marks are a set: a mark given twice (`["pin", "pin"]`) is kept once, on every
/// backend alike. The durable stores key a mark by (thread, message, mark), so passing a repeat
/// on would fail the whole add there while the in-memory backend kept both copies.
pub(crate) fn unique_marks(marks: &[String]) -> Result<Vec<String>, MemoryError> {
    let mut seen = std::collections::HashSet::with_capacity(marks.len());
    let mut unique = Vec::with_capacity(marks.len());
    for mark in marks {
        validate_mark(mark)?;
        if seen.insert(mark.as_str()) {
            unique.push(mark.clone());
        }
    }
    Ok(unique)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert!(validate_mark("").is_err());
        assert!(validate_mark("a").is_ok());
        assert!(validate_mark(&"x".repeat(255)).is_ok());
        assert!(validate_mark(&"x".repeat(256)).is_err());
    }

    #[test]
    fn repeated_marks_are_kept_once_in_first_order() {
        let marks: Vec<String> = ["pin", "a", "pin", "b", "a"].map(String::from).into();
        assert_eq!(unique_marks(&marks).unwrap(), ["pin", "a", "b"]);
        assert!(unique_marks(&["ok".into(), String::new()]).is_err());
    }
}
