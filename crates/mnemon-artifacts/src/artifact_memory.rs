//! ArtifactMemory: loads artifacts named by key into a prompt variable
//! (docs/reference/artifacts.md#artifactmemory).

use std::sync::Arc;

use mnemon_types::Artifact;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::json_type;
use crate::save::unwrap_class_path;
use crate::{ArtifactError, ArtifactStore, BackendRegistry};

/// The class path the original platform wrapped ArtifactMemory configs with.
pub const ARTIFACT_MEMORY_CLASS_PATH: &str = "ix.memory.artifacts.ArtifactMemory";

/// The first line of a non-empty rendered block.
pub const RELATED_ARTIFACTS_HEADER: &str = "RELATED ARTIFACTS";

/// ArtifactMemory's config, with the original platform's keys.
///
/// Unknown keys are refused. The original's `save_artifact` flag is accepted for compatibility
/// and has no effect (saving is SaveArtifact's job).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactMemoryConfig {
    /// When false, nothing is loaded and `memory_key` is set to the empty string.
    #[serde(default = "default_true")]
    pub load_artifact: bool,
    /// The input naming the artifacts.
    #[serde(default = "default_input_key")]
    pub input_key: String,
    /// The prompt variable that receives the rendered block.
    #[serde(default = "default_memory_key")]
    pub memory_key: String,
    /// Accepted for compatibility with the original configs; ignored.
    #[serde(default, skip_serializing)]
    pub save_artifact: bool,
}

fn default_true() -> bool {
    true
}

fn default_input_key() -> String {
    "artifact_keys".to_owned()
}

fn default_memory_key() -> String {
    "related_artifacts".to_owned()
}

impl Default for ArtifactMemoryConfig {
    fn default() -> Self {
        ArtifactMemoryConfig {
            load_artifact: true,
            input_key: default_input_key(),
            memory_key: default_memory_key(),
            save_artifact: false,
        }
    }
}

impl ArtifactMemoryConfig {
    /// Reads a config in its plain form or wrapped as
    /// `{"class_path": "ix.memory.artifacts.ArtifactMemory", "config": {...}}`.
    pub fn from_json(config: &Value) -> Result<Self, ArtifactError> {
        let body = unwrap_class_path(config, "ArtifactMemory", ARTIFACT_MEMORY_CLASS_PATH)?;
        serde_json::from_value(body).map_err(|e| ArtifactError::InvalidConfig {
            component: "ArtifactMemory",
            message: e.to_string(),
        })
    }
}

/// What [`ArtifactMemory::load`] produced.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedArtifacts {
    /// The prompt variables: `memory_key` → the rendered block.
    pub variables: Map<String, Value>,
    /// The artifacts rendered, in the order their keys were given.
    pub artifacts: Vec<Artifact>,
    /// Keys that resolved to no artifact in the scope; they are not rendered.
    pub missing_keys: Vec<String>,
}

impl LoadedArtifacts {
    /// The rendered block (empty when nothing was loaded).
    pub fn text(&self) -> &str {
        self.variables
            .values()
            .next()
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
}

/// Loads the most recent artifacts for the keys an input names, within one scope, and renders
/// them for a prompt.
///
/// ```
/// use std::sync::Arc;
/// use mnemon_artifacts::{ArtifactMemory, ArtifactMemoryConfig, ArtifactStore, BackendRegistry,
///     InMemoryArtifactStore};
/// use mnemon_types::Artifact;
/// use serde_json::json;
///
/// let store = Arc::new(InMemoryArtifactStore::new());
/// store.save(&Artifact::new("chat-1", "plan", "plan", "The plan").with_data(json!("parse, test")))?;
/// let memory = ArtifactMemory::new(ArtifactMemoryConfig::default(), store, BackendRegistry::new(), "chat-1");
/// let loaded = memory.load(&json!({"artifact_keys": "Tell me about {plan} and {code}"}))?;
/// assert!(loaded.text().starts_with("RELATED ARTIFACTS\n\nid: "));
/// assert!(loaded.text().ends_with("data:\nparse, test"));
/// assert_eq!(loaded.missing_keys, ["code"]);
/// # Ok::<(), mnemon_artifacts::ArtifactError>(())
/// ```
pub struct ArtifactMemory {
    config: ArtifactMemoryConfig,
    store: Arc<dyn ArtifactStore>,
    backends: BackendRegistry,
    scope: String,
    /// The most bytes the rendered block may take ([`ArtifactMemory::with_max_block_bytes`]).
    max_block_bytes: usize,
}

impl std::fmt::Debug for ArtifactMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactMemory")
            .field("config", &self.config)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl ArtifactMemory {
    /// A memory reading `scope`'s artifacts from `store`, with content from `backends`.
    pub fn new(
        config: ArtifactMemoryConfig,
        store: Arc<dyn ArtifactStore>,
        backends: BackendRegistry,
        scope: impl Into<String>,
    ) -> Self {
        ArtifactMemory {
            config,
            store,
            backends,
            scope: scope.into(),
            max_block_bytes: usize::MAX,
        }
    }

    /// The same memory, refusing to render a block of more than `max` bytes
    /// ([`ArtifactError::BlockTooLarge`]): it stops reading contents at the first one past
    /// the bound, so a service's answer is bounded before the contents are all read (default:
    /// no bound).
    pub fn with_max_block_bytes(self, max: usize) -> Self {
        ArtifactMemory {
            max_block_bytes: max,
            ..self
        }
    }

    /// The prompt variables this memory provides: `[memory_key]`.
    pub fn memory_variables(&self) -> Vec<&str> {
        vec![self.config.memory_key.as_str()]
    }

    /// Loads and renders the artifacts `inputs[input_key]` names.
    pub fn load(&self, inputs: &Value) -> Result<LoadedArtifacts, ArtifactError> {
        let mut loaded = LoadedArtifacts {
            variables: Map::new(),
            artifacts: Vec::new(),
            missing_keys: Vec::new(),
        };
        if self.config.load_artifact {
            for key in requested_keys(&self.config.input_key, inputs)? {
                match self.store.latest(&self.scope, &key)? {
                    Some(artifact) => loaded.artifacts.push(artifact),
                    None => loaded.missing_keys.push(key),
                }
            }
        }
        let text = render_block_within(&loaded.artifacts, &self.backends, self.max_block_bytes)?;
        loaded
            .variables
            .insert(self.config.memory_key.clone(), Value::String(text));
        Ok(loaded)
    }
}

/// The keys `inputs[input_key]` names: a list of keys, a single key, or text mentioning keys in
/// braces. De-duplicated, first mention first.
pub fn requested_keys(input_key: &str, inputs: &Value) -> Result<Vec<String>, ArtifactError> {
    let bad = |problem: String| ArtifactError::BadKeysInput {
        input_key: input_key.to_owned(),
        problem,
    };
    let Some(inputs) = inputs.as_object() else {
        return Err(ArtifactError::InputsNotObject {
            found: json_type(inputs),
        });
    };
    let raw: Vec<String> = match inputs.get(input_key) {
        None => return Err(bad("is missing from the inputs".to_owned())),
        Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(key) => Ok(key.trim().to_owned()),
                other => Err(bad(format!(
                    "has {} at position {i}, not a key",
                    json_type(other)
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(Value::String(text)) if text.contains('{') => mentioned_keys(text),
        Some(Value::String(key)) => vec![key.trim().to_owned()],
        Some(other) => return Err(bad(format!("is {}", json_type(other)))),
    };
    // A set, not a scan of the kept keys: a list of many distinct keys stays linear.
    let mut seen = std::collections::HashSet::with_capacity(raw.len());
    let mut keys: Vec<String> = Vec::with_capacity(raw.len());
    for key in raw {
        if !key.is_empty() && seen.insert(key.clone()) {
            keys.push(key);
        }
    }
    Ok(keys)
}

/// Keys mentioned as `{key}` in free text. `{{` and `}}` are literal braces, as in templates.
fn mentioned_keys(text: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        let after = rest.get(open + 1..).unwrap_or_default();
        if let Some(escaped) = after.strip_prefix('{') {
            rest = escaped;
            continue;
        }
        match after.find(['{', '}']) {
            Some(close) if after.get(close..close + 1) == Some("}") => {
                keys.push(after.get(..close).unwrap_or_default().trim().to_owned());
                rest = after.get(close + 1..).unwrap_or_default();
            }
            // An unclosed or nested brace: not a mention; look again from the next brace.
            Some(next) => rest = after.get(next..).unwrap_or_default(),
            None => break,
        }
    }
    keys
}

/// The block docs/reference/artifacts.md#artifactmemory prescribes; the empty string for no
/// artifacts.
pub fn render_block(
    artifacts: &[Artifact],
    backends: &BackendRegistry,
) -> Result<String, ArtifactError> {
    render_block_within(artifacts, backends, usize::MAX)
}

/// [`render_block`], refusing a block of more than `max_bytes` ([`ArtifactError::BlockTooLarge`])
/// as soon as the entries read so far pass it.
pub fn render_block_within(
    artifacts: &[Artifact],
    backends: &BackendRegistry,
    max_bytes: usize,
) -> Result<String, ArtifactError> {
    if artifacts.is_empty() {
        return Ok(String::new());
    }
    let mut blocks = Vec::with_capacity(artifacts.len());
    // The header, then each entry and its separator.
    let mut size = RELATED_ARTIFACTS_HEADER.len() + 2;
    for artifact in artifacts {
        let data = match backends.read_content(artifact)? {
            // JSON has one null: a `null` content is no content, so a record reads the same
            // after a backup or a migrate, whose JSON cannot tell the two apart
            // (docs/reference/artifacts.md#rendered-block).
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text,
            // Built within what is left of the bound: pretty JSON grows with the nesting, so a
            // small inline content could render to many times the limit.
            Some(other) => {
                let left = max_bytes.saturating_add(2).saturating_sub(size);
                let bytes = crate::pretty::pretty_within(&other, left)
                    .map_err(ArtifactError::ContentEncoding)?
                    .ok_or(ArtifactError::BlockTooLarge { max: max_bytes })?;
                // serde_json writes UTF-8; the lossy path is never taken.
                String::from_utf8(bytes)
                    .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
            }
        };
        let entry = format!(
            "id: {}\nkey: {}\ntype: {}\nname: {}\ndescription: {}\ndata:\n{data}",
            artifact.id, artifact.key, artifact.artifact_type, artifact.name, artifact.description
        );
        size = size.saturating_add(entry.len() + 2);
        if size > max_bytes.saturating_add(2) {
            return Err(ArtifactError::BlockTooLarge { max: max_bytes });
        }
        blocks.push(entry);
    }
    Ok(format!(
        "{RELATED_ARTIFACTS_HEADER}\n\n{}",
        blocks.join("\n\n")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A bounded block stops at the first entry past its bound: the service's answer is
    /// bounded before every content is read.
    #[test]
    fn a_block_past_its_bound_is_refused() {
        use crate::{ArtifactStore, InMemoryArtifactStore};
        let store = Arc::new(InMemoryArtifactStore::new());
        for key in ["a", "b"] {
            store
                .save(&Artifact::new("s", key, "t", "n").with_data(json!("x".repeat(1_000))))
                .unwrap();
        }
        let inputs = json!({"artifact_keys": ["a", "b"]});
        let memory = |max| {
            ArtifactMemory::new(
                ArtifactMemoryConfig::default(),
                store.clone(),
                BackendRegistry::new(),
                "s",
            )
            .with_max_block_bytes(max)
        };
        let whole = memory(usize::MAX).load(&inputs).unwrap();
        let size = whole.text().len();
        assert_eq!(memory(size).load(&inputs).unwrap().text(), whole.text());
        assert!(matches!(
            memory(size - 1).load(&inputs),
            Err(ArtifactError::BlockTooLarge { max }) if max == size - 1
        ));
        assert!(matches!(
            memory(1_200).load(&inputs),
            Err(ArtifactError::BlockTooLarge { .. })
        ));
        // The entry past the bound stops the rendering: the next content is not read (its
        // file is gone, which reading would report).
        let dir = tempfile::tempdir().unwrap();
        store
            .save(&Artifact::new("s", "gone", "t", "n").with_storage(
                mnemon_types::artifact::StorageLocation::new(crate::WRITE_TO_FILE, "gone.txt"),
            ))
            .unwrap();
        let with_files = ArtifactMemory::new(
            ArtifactMemoryConfig::default(),
            store.clone(),
            BackendRegistry::with_defaults(dir.path()),
            "s",
        );
        let both = json!({"artifact_keys": ["a", "gone"]});
        assert!(matches!(
            with_files.load(&both),
            Err(ArtifactError::ContentNotFound { .. })
        ));
        assert!(matches!(
            with_files.with_max_block_bytes(500).load(&both),
            Err(ArtifactError::BlockTooLarge { .. })
        ));
        // Structured inline content pretty-prints by nesting: a few KB, a hundred levels
        // deep, renders to megabytes, which were built before the bound was checked.
        let mut deep = Value::Array(vec![json!(0); 5_000]);
        for _ in 0..100 {
            deep = Value::Array(vec![deep]);
        }
        store
            .save(&Artifact::new("s", "deep", "t", "n").with_data(deep))
            .unwrap();
        let deep_keys = json!({"artifact_keys": ["deep"]});
        assert!(matches!(
            memory(100_000).load(&deep_keys),
            Err(ArtifactError::BlockTooLarge { max: 100_000 })
        ));
        // At the bound exactly, structured content renders; one byte less refuses it.
        let whole = memory(usize::MAX).load(&deep_keys).unwrap();
        let size = whole.text().len();
        assert_eq!(memory(size).load(&deep_keys).unwrap().text(), whole.text());
        assert!(matches!(
            memory(size - 1).load(&deep_keys),
            Err(ArtifactError::BlockTooLarge { .. })
        ));
    }

    #[test]
    fn keys_from_each_input_shape() {
        let keys = |v: Value| requested_keys("k", &json!({ "k": v })).unwrap();
        assert_eq!(keys(json!(["a", "b", "a"])), ["a", "b"]);
        assert_eq!(keys(json!(" plan ")), ["plan"]);
        assert_eq!(
            keys(json!(
                "Tell me about {plan} and {file_list}, then {plan} again"
            )),
            ["plan", "file_list"]
        );
        assert_eq!(keys(json!("{{not}} {x} {unclosed")), ["x"]);
        assert_eq!(keys(json!("{a{b}")), ["b"]);
        assert_eq!(keys(json!(null)), Vec::<String>::new());
        assert_eq!(keys(json!("")), Vec::<String>::new());
    }

    #[test]
    fn bad_inputs_say_what_is_expected() {
        let err = requested_keys("k", &json!({})).unwrap_err();
        assert!(err.to_string().contains("\"k\" is missing"), "{err}");
        let err = requested_keys("k", &json!({"k": [1]})).unwrap_err();
        assert!(err.to_string().contains("a number at position 0"), "{err}");
        assert!(requested_keys("k", &json!({"k": 3})).is_err());
        assert!(requested_keys("k", &json!([])).is_err());
    }

    proptest! {
        #[test]
        fn mentions_never_panic_and_have_no_braces(s in "\\PC{0,60}") {
            for key in mentioned_keys(&s) {
                let clean = !key.contains(['{', '}']);
                prop_assert!(clean, "{:?}", key);
            }
        }
    }
}
