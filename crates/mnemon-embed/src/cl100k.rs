//! OpenAI's `cl100k_base` token counts, the ones the library format's `token_count` and
//! memory's token budgets use.

use mnemon_types::Tokenizer;

/// OpenAI's `cl100k_base` encoding, compiled in, so it works offline. Special-token strings
/// (`<|endoftext|>`) count as ordinary text, so a document cannot change its count by quoting
/// them.
///
/// The vocabulary is loaded once per process, on the first count.
///
/// ```
/// use mnemon_embed::Cl100kTokenizer;
/// use mnemon_types::Tokenizer;
///
/// assert_eq!(Cl100kTokenizer.count("hello world"), 2);
/// assert_eq!(Cl100kTokenizer.name(), "cl100k_base");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Cl100kTokenizer;

impl Tokenizer for Cl100kTokenizer {
    fn name(&self) -> &str {
        "cl100k_base"
    }

    fn count(&self, text: &str) -> usize {
        tiktoken_rs::cl100k_base_singleton()
            .encode_ordinary(text)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn special_tokens_count_as_text() {
        assert_eq!(Cl100kTokenizer.count(""), 0);
        assert!(Cl100kTokenizer.count("<|endoftext|>") > 1);
    }

    proptest! {
        /// Counts equal tiktoken's own `encode_ordinary`, the count `mnemon library import`
        /// always wrote.
        #[test]
        fn counts_match_encode_ordinary(text in any::<String>()) {
            let reference = tiktoken_rs::cl100k_base_singleton().encode_ordinary(&text).len();
            prop_assert_eq!(Cl100kTokenizer.count(&text), reference);
        }
    }
}
