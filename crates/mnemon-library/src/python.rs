//! The bits of Python semantics the format and the query grammar depend on.

use serde_json::Value;

use crate::error::{LibraryError, Result};

/// Whether Python's `str.isspace()` is true for `c`: Rust's whitespace plus U+001C–U+001F.
pub(crate) fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()` with no arguments.
pub(crate) fn pystrip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Parses Python `int(str)` for base 10 with ASCII digits: sign, digits, single underscores
/// between digits, surrounding whitespace. Saturates outside `i64`.
fn parse_int_literal(raw: &str) -> Option<i64> {
    let s = pystrip(raw);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let bytes = digits.as_bytes();
    if bytes.is_empty() || !bytes[0].is_ascii_digit() || !bytes[bytes.len() - 1].is_ascii_digit() {
        return None;
    }
    let mut value: i128 = 0;
    let mut previous_underscore = false;
    for &b in bytes {
        if b == b'_' {
            if previous_underscore {
                return None;
            }
            previous_underscore = true;
            continue;
        }
        if !b.is_ascii_digit() {
            return None;
        }
        previous_underscore = false;
        value = (value * 10 + i128::from(b - b'0')).min(i128::from(i64::MAX) + 1);
    }
    let value = if negative { -value } else { value };
    Some(value.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64)
}

/// Python `int(value)` for a JSON argument named `name`
/// (docs/reference/library.md#integer-like-values). `Ok(None)` for null.
pub(crate) fn int_like(name: &'static str, value: Option<&Value>) -> Result<Option<i64>> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(i64::from(*b))),
        Some(Value::Number(n)) => Ok(Some(if let Some(i) = n.as_i64() {
            i
        } else if n.as_u64().is_some() {
            i64::MAX
        } else {
            // `as` truncates toward zero and saturates, like `int(float)` within i64.
            n.as_f64().unwrap_or(0.0) as i64
        })),
        Some(Value::String(s)) => parse_int_literal(s)
            .map(Some)
            .ok_or_else(|| LibraryError::InvalidIntLiteral(s.clone())),
        Some(Value::Array(_) | Value::Object(_)) => Err(LibraryError::NotAnInteger(name)),
    }
}

/// How a non-string value is shown inside a message: strings as they are, others as JSON.
pub(crate) fn display_value(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn int_literals_follow_python() {
        assert_eq!(parse_int_literal(" 2 "), Some(2));
        assert_eq!(parse_int_literal("+2"), Some(2));
        assert_eq!(parse_int_literal("-12"), Some(-12));
        assert_eq!(parse_int_literal("1_0"), Some(10));
        assert_eq!(parse_int_literal("\u{1f}7\u{1c}"), Some(7));
        for bad in ["3.5", "1__0", "_1", "1_", "", "+", "0x10", "١"] {
            assert_eq!(parse_int_literal(bad), None, "{bad}");
        }
        assert_eq!(parse_int_literal("99999999999999999999999"), Some(i64::MAX));
        assert_eq!(
            parse_int_literal("-99999999999999999999999"),
            Some(i64::MIN)
        );
    }

    #[test]
    fn int_like_values() {
        assert_eq!(int_like("count", Some(&json!(2.7))).unwrap(), Some(2));
        assert_eq!(int_like("count", Some(&json!(-0.5))).unwrap(), Some(0));
        assert_eq!(int_like("count", Some(&json!(true))).unwrap(), Some(1));
        assert_eq!(int_like("count", Some(&json!(null))).unwrap(), None);
        assert_eq!(
            int_like("count", Some(&json!("3.5")))
                .unwrap_err()
                .to_string(),
            "invalid literal for int() with base 10: '3.5'"
        );
        assert_eq!(
            int_like("count", Some(&json!([1])))
                .unwrap_err()
                .to_string(),
            "count must be an integer"
        );
    }

    #[test]
    fn strip_matches_python() {
        assert_eq!(pystrip("\u{1c} a b\u{85}\u{3000}"), "a b");
    }
}
