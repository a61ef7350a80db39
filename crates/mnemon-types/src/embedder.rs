//! The `Embedder` trait, shared by conversation memory and embedding libraries.

/// Turns texts into embedding vectors.
///
/// Implementations include a remote API client and an offline hashing embedder; memory recall
/// and library import accept any of them through this trait.
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
