//! Choosing the embedder that a library's `embedding_model` names, so that a query lands in the
//! same vector space as the library it searches.

use mnemon_types::{EmbedError, Embedder};

use crate::HashingEmbedder;
#[cfg(feature = "openai")]
use crate::OpenAiEmbedder;

/// The prefix of OpenAI model names as libraries record them, known even without the `openai`
/// feature so that the refusal can say what is missing.
#[cfg(not(feature = "openai"))]
const OPENAI_PREFIX: &str = "openai.com:";

/// The embedder for a model name as libraries record it:
///
/// - `mnemon:hashing-v1-<D>`: a [`HashingEmbedder`] of dimension `D` (offline; an error for
///   a `D` that [`HashingEmbedder::new`] refuses);
/// - `openai.com:<model>`: an `OpenAiEmbedder` for `<model>`, configured from the environment
///   (`OPENAI_API_KEY`, `OPENAI_BASE_URL`); without the `openai` feature, an error that says
///   the feature is needed.
///
/// Any other name is an error that says so, since guessing would produce meaningless scores.
///
/// ```
/// use mnemon_embed::embedder_for_model;
///
/// let embedder = embedder_for_model("mnemon:hashing-v1-64")?;
/// assert_eq!(embedder.dimension(), 64);
/// assert!(embedder_for_model("acme:secret-model").is_err());
/// # Ok::<(), mnemon_embed::EmbedError>(())
/// ```
pub fn embedder_for_model(model: &str) -> Result<Box<dyn Embedder>, EmbedError> {
    if let Some(hashing) = HashingEmbedder::parse_model_name(model) {
        return Ok(Box::new(hashing?));
    }
    #[cfg(feature = "openai")]
    if let Some(name) = model.strip_prefix(OpenAiEmbedder::MODEL_PREFIX) {
        let embedder = OpenAiEmbedder::from_env()?.model(name).build()?;
        return Ok(Box::new(embedder));
    }
    #[cfg(not(feature = "openai"))]
    if model.starts_with(OPENAI_PREFIX) {
        return Err(EmbedError::new(
            model,
            "this program was built without mnemon-embed's `openai` feature; enable it, or \
             embed the query yourself and pass it as query_embedding",
        ));
    }
    Err(EmbedError::new(
        model,
        "Mnemon has no embedder for this model; known models are mnemon:hashing-v1-<dimension> \
         and openai.com:<model>. Embed the query yourself and pass it as query_embedding",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_names_give_hashing_embedders() {
        let e = embedder_for_model("mnemon:hashing-v1-512").unwrap();
        assert_eq!(e.model(), "mnemon:hashing-v1-512");
        assert_eq!(e.dimension(), 512);
    }

    #[test]
    fn unknown_names_are_refused_with_advice() {
        for model in ["", "mnemon:hashing-v1-", "mnemon:hashing-v2-8", "acme:m"] {
            let err = embedder_for_model(model).err().unwrap();
            assert!(
                err.to_string().contains("query_embedding"),
                "{model}: {err}"
            );
        }
    }
}
