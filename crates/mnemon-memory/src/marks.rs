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

/// Checks every mark of a list.
pub(crate) fn validate_marks(marks: &[String]) -> Result<(), MemoryError> {
    marks.iter().try_for_each(|m| validate_mark(m))
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
}
