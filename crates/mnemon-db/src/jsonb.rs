//! What PostgreSQL's `jsonb` can hold: every JSON text but one with U+0000 in a string, which
//! JSON writes as the escape `\u0000` (the stores keep such a record's filterable document as
//! NULL; docs/reference/filters.md). In SQL, over stored JSON text `t`, the same test is
//! `strpos(replace(t, '\\', ''), '\u0000') > 0` (escaped backslashes removed first, left to
//! right as JSON reads them), which the stores' migrations use.

/// Whether the JSON text `json` (valid, as serde_json writes it) has a string holding U+0000,
/// that is an escape `\u0000` — not the text `\\u0000` (an escaped backslash, then `u0000`),
/// which a plain search for `\u0000` also finds: a string holding a backslash and `u0000`
/// (code, a JSON payload kept as text) would lose its document and go unseen by every filter.
///
/// ```
/// use mnemon_db::jsonb::holds_nul;
///
/// assert!(holds_nul(r#"{"a": "x\u0000"}"#));
/// assert!(!holds_nul(r#"{"a": "x\\u0000"}"#));
/// assert!(holds_nul(r#"{"a": "x\\\u0000"}"#));
/// ```
pub fn holds_nul(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut i = 0;
    while let Some(offset) = bytes
        .get(i..)
        .and_then(|rest| rest.iter().position(|&b| b == b'\\'))
    {
        let at = i + offset;
        match bytes.get(at + 1) {
            Some(b'u') if bytes.get(at + 2..at + 6) == Some(b"0000") => return true,
            // Any other escape is two bytes long (a `\uXXXX` one is read on as text, which
            // holds no backslash).
            Some(_) => i = at + 2,
            None => return false,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_are_read_as_json_reads_them() {
        for (text, nul) in [
            (r#""\u0000""#, true),
            (r#""\\u0000""#, false),
            (r#""\\\u0000""#, true),
            (r#""\\\\u0000""#, false),
            (r#""\u00001""#, true),
            (r#""\u0001\u0000""#, true),
            (r#""a\"u0000""#, false),
            (r#""plain""#, false),
        ] {
            assert_eq!(holds_nul(text), nul, "{text}");
        }
    }

    proptest! {
        /// Against serde_json itself: a string's JSON text holds a NUL escape exactly when
        /// the string holds U+0000.
        #[test]
        fn agrees_with_serde_json(s in "[a-c\\\\u0\"\u{0}\u{1}]{0,12}") {
            let json = serde_json::to_string(&serde_json::json!({"k": s})).unwrap();
            prop_assert_eq!(holds_nul(&json), s.contains('\0'));
        }
    }
}
