//! [`Embedder`] implementations for Mnemon, and the `cl100k_base` [`Tokenizer`].
//!
//! * [`HashingEmbedder`]: offline and deterministic. It hashes lowercase word unigrams and
//!   bigrams into a fixed number of dimensions and L2-normalises the result. Its vectors are
//!   **lexical, not semantic**: texts that share words score high, paraphrases with different
//!   words do not. It needs no network, no model file and no API key, so it suits tests, demos,
//!   the sample library shipped in `examples/`, and small keyword-style collections.
//! * [`OpenAiEmbedder`] (feature `openai`): a client for any server speaking OpenAI's
//!   `POST /embeddings` API (key from `OPENAI_API_KEY`, API root from `OPENAI_BASE_URL`, model
//!   from `OPENAI_EMBEDDING_MODEL`), with batching, timeouts and bounded retries on 429 and 5xx.
//! * [`embedder_for_model`]: the embedder a library's `embedding_model` names, for queries.
//! * [`Cl100kTokenizer`] (feature `tiktoken`): OpenAI's `cl100k_base` token counts, offline.
//!
//! Features (both on by default): `openai` brings the HTTP client (reqwest, rustls);
//! `tiktoken` brings the compiled-in `cl100k_base` vocabulary. A crate that only counts tokens
//! depends on this one with `default-features = false, features = ["tiktoken"]`.
//!
//! ```
//! use mnemon_embed::HashingEmbedder;
//! use mnemon_types::Embedder;
//!
//! let embedder = HashingEmbedder::default();
//! let v = embedder.embed(&["Bees dance to share directions", "bees dance"])?;
//! assert_eq!(v[0].len(), embedder.dimension());
//! let dot: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum();
//! assert!(dot > 0.4);
//! # Ok::<(), mnemon_types::EmbedError>(())
//! ```

#[cfg(feature = "tiktoken")]
mod cl100k;
mod for_model;
mod hashing;
#[cfg(feature = "openai")]
mod openai;

#[cfg(feature = "tiktoken")]
pub use cl100k::Cl100kTokenizer;
pub use for_model::embedder_for_model;
pub use hashing::HashingEmbedder;
pub use mnemon_types::{
    ContractError, EmbedError, Embedder, Tokenizer, WhitespaceTokenizer, check_embeddings,
};
#[cfg(feature = "openai")]
pub use openai::{OpenAiEmbedder, OpenAiEmbedderBuilder};
