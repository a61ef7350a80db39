//! The `Embedder` trait, shared by conversation memory and embedding libraries, and the one
//! check of its contract that every caller runs on an embedder's answer.

/// Turns texts into embedding vectors.
///
/// Implementations include a remote API client and an offline hashing embedder; memory recall
/// and library import accept any of them through this trait.
///
/// The contract: [`embed`](Embedder::embed) returns exactly one vector per text, in input
/// order, each of [`dimension`](Embedder::dimension) finite floats (at least one), or an error.
/// Callers do not trust it blindly: they pass every answer through [`check_embeddings`].
pub trait Embedder: Send + Sync {
    /// The model's name, as recorded in a library's `embedding_model` (e.g.
    /// `openai.com:text-embedding-ada-002`).
    fn model(&self) -> &str;

    /// The length of every vector this embedder returns.
    fn dimension(&self) -> usize;

    /// Embeds a batch of texts, returning one vector per text, in order.
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Why a batch could not be embedded.
#[derive(Debug, thiserror::Error)]
#[error("embedding with {model} failed: {message}")]
pub struct EmbedError {
    /// The embedder's model name.
    pub model: String,
    /// What went wrong and, where known, what to do about it.
    pub message: String,
    /// The underlying cause, if any.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl EmbedError {
    /// An error with a message and no underlying cause.
    pub fn new(model: impl Into<String>, message: impl Into<String>) -> Self {
        EmbedError {
            model: model.into(),
            message: message.into(),
            source: None,
        }
    }
}

/// How an embedder's answer broke the [`Embedder`] contract, found by [`check_embeddings`].
///
/// The messages name what was wrong, not the embedder: callers wrap the error with the model's
/// name (memory's `EmbedderContract`, import's `ImportError::EmbedderContract`), since a broken
/// answer is a bug or a misconfiguration of that embedder (a server answering for another
/// model, a `--dimension` that does not match it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    /// Not one vector per text.
    #[error("{got} vectors for {texts} texts")]
    WrongCount {
        /// How many texts were sent.
        texts: usize,
        /// How many vectors came back.
        got: usize,
    },
    /// A vector whose length is not the embedder's dimension, or is zero.
    #[error("a vector of length {got} where dimension() is {dimension}")]
    WrongDimension {
        /// The position of the vector (and its text) in the batch.
        index: usize,
        /// The embedder's [`Embedder::dimension`].
        dimension: usize,
        /// The vector's length.
        got: usize,
    },
    /// A vector holding a NaN or an infinity, which no similarity can be computed from.
    #[error("a vector with a NaN or infinite number")]
    NotFinite {
        /// The position of the vector (and its text) in the batch.
        index: usize,
    },
}

/// Checks an embedder's answer against the [`Embedder`] contract: `texts` texts were sent and
/// `vectors` came back, which must be exactly one vector per text, each of `dimension` floats
/// (at least one), every one finite.
///
/// Every caller that embeds (memory recall, library import) runs this on every batch, so a
/// misbehaving embedder is reported where it misbehaved instead of as a wrong score later.
/// Problems are reported in this order: the count, then each vector in batch order (its length
/// before its values).
///
/// ```
/// use mnemon_types::{ContractError, check_embeddings};
///
/// assert_eq!(check_embeddings(2, 1, &[vec![0.6, 0.8]]), Ok(()));
/// assert_eq!(
///     check_embeddings(2, 2, &[vec![0.6, 0.8]]),
///     Err(ContractError::WrongCount { texts: 2, got: 1 })
/// );
/// let err = check_embeddings(2, 1, &[vec![f32::NAN, 0.0]]).unwrap_err();
/// assert_eq!(err.to_string(), "a vector with a NaN or infinite number");
/// ```
pub fn check_embeddings(
    dimension: usize,
    texts: usize,
    vectors: &[Vec<f32>],
) -> Result<(), ContractError> {
    if vectors.len() != texts {
        return Err(ContractError::WrongCount {
            texts,
            got: vectors.len(),
        });
    }
    for (index, vector) in vectors.iter().enumerate() {
        if vector.len() != dimension || vector.is_empty() {
            return Err(ContractError::WrongDimension {
                index,
                dimension,
                got: vector.len(),
            });
        }
        if vector.iter().any(|x| !x.is_finite()) {
            return Err(ContractError::NotFinite { index });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn messages_are_the_ones_memory_reports() {
        // Memory's conformance suite compares these texts (tests/src/memory_conformance.rs).
        let count = check_embeddings(4, 3, &[vec![0.0; 4], vec![0.0; 4]]).unwrap_err();
        assert_eq!(count.to_string(), "2 vectors for 3 texts");
        let length = check_embeddings(4, 1, &[vec![1.0; 3]]).unwrap_err();
        assert_eq!(
            length.to_string(),
            "a vector of length 3 where dimension() is 4"
        );
        let nan = check_embeddings(1, 2, &[vec![1.0], vec![f32::INFINITY]]).unwrap_err();
        assert_eq!(nan, ContractError::NotFinite { index: 1 });
    }

    #[test]
    fn empty_vectors_break_the_contract_even_at_dimension_zero() {
        assert_eq!(
            check_embeddings(0, 1, &[vec![]]),
            Err(ContractError::WrongDimension {
                index: 0,
                dimension: 0,
                got: 0
            })
        );
        assert_eq!(check_embeddings(0, 0, &[]), Ok(()));
    }

    #[test]
    fn the_count_is_checked_before_the_vectors() {
        let err = check_embeddings(2, 2, &[vec![f32::NAN]]).unwrap_err();
        assert_eq!(err, ContractError::WrongCount { texts: 2, got: 1 });
    }

    proptest! {
        /// The check accepts exactly the answers that keep the contract.
        #[test]
        fn accepts_exactly_well_formed_answers(
            dimension in 0usize..6,
            vectors in proptest::collection::vec(
                proptest::collection::vec(
                    prop_oneof![
                        8 => -1e3f32..1e3,
                        1 => Just(f32::NAN),
                        1 => Just(f32::NEG_INFINITY),
                    ],
                    0..6,
                ),
                0..5,
            ),
            texts in 0usize..5,
        ) {
            let ok = vectors.len() == texts
                && vectors
                    .iter()
                    .all(|v| v.len() == dimension && dimension > 0 && v.iter().all(|x| x.is_finite()));
            prop_assert_eq!(check_embeddings(dimension, texts, &vectors).is_ok(), ok);
        }
    }
}
