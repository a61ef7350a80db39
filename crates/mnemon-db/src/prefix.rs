//! Prefix ranges: the byte-order bound that turns "starts with `prefix`" into a key range an
//! index serves (asset id prefixes, artifact scope prefixes).

/// The least string greater than every string that starts with `prefix`, in byte (and so code
/// point) order: `None` when there is none (an empty prefix, or one of only U+10FFFF). Ids
/// starting with `prefix` are exactly those `>= prefix` and `<` this bound, so a forget or a
/// listing uses the key's order instead of reading every key.
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value, skipping the surrogate gap.
        let next = match last as u32 {
            0xD7FF => Some('\u{E000}'),
            n => char::from_u32(n + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("ab").as_deref(), Some("ac"));
        assert_eq!(prefix_end("a\u{D7FF}").as_deref(), Some("a\u{E000}"));
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{10FFFF}"), None);
    }

    proptest! {
        /// `prefix <= s < prefix_end(prefix)` holds exactly for the strings starting with the
        /// prefix, in byte order (what SQLite's BINARY collation and `bytea` compare).
        #[test]
        fn the_range_is_the_prefix(prefix in "\\PC{0,3}", s in "\\PC{0,5}") {
            let in_range = s.as_bytes() >= prefix.as_bytes()
                && prefix_end(&prefix).is_none_or(|end| s.as_bytes() < end.as_bytes());
            prop_assert_eq!(in_range, s.starts_with(&prefix));
        }

        #[test]
        fn extensions_are_in_range(prefix in "\\PC{0,3}", rest in "\\PC{0,3}") {
            let s = format!("{prefix}{rest}");
            let in_range = s.as_bytes() >= prefix.as_bytes()
                && prefix_end(&prefix).is_none_or(|end| s.as_bytes() < end.as_bytes());
            prop_assert!(in_range);
        }
    }
}
