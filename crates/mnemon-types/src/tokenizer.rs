//! The `Tokenizer` trait: how memory's token budgets and a library's `token_count`s are
//! counted, whatever the vocabulary.

/// Counts the tokens of a text.
///
/// Token counts bound what reaches a model's context: memory's budgeted recall sums them, and
/// every bit of an embedding library records its own (`token_count`). Implementations: the
/// vocabulary-free [`WhitespaceTokenizer`] here, and OpenAI's `cl100k_base`
/// (`mnemon_embed::Cl100kTokenizer`, feature `tiktoken` of `mnemon-embed`), which the
/// library format's counts use.
pub trait Tokenizer: Send + Sync {
    /// The tokenizer's name, e.g. `cl100k_base`.
    fn name(&self) -> &str;

    /// The number of tokens in `text`.
    fn count(&self, text: &str) -> usize;
}

/// Counts `split_whitespace` pieces: a rough fallback that needs no vocabulary.
///
/// ```
/// use mnemon_types::{Tokenizer, WhitespaceTokenizer};
///
/// assert_eq!(WhitespaceTokenizer.count("  a b\tc\n"), 3);
/// assert_eq!(WhitespaceTokenizer.name(), "whitespace");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct WhitespaceTokenizer;

impl Tokenizer for WhitespaceTokenizer {
    fn name(&self) -> &str {
        "whitespace"
    }

    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_counts_pieces() {
        assert_eq!(WhitespaceTokenizer.count(""), 0);
        assert_eq!(WhitespaceTokenizer.count(" \n\t"), 0);
        assert_eq!(WhitespaceTokenizer.count("one two  three"), 3);
    }

    #[test]
    fn usable_as_a_trait_object() {
        let tokenizer: &dyn Tokenizer = &WhitespaceTokenizer;
        assert_eq!(tokenizer.count("a b"), 2);
    }
}
