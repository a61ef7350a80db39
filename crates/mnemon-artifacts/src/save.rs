//! SaveArtifact: the step that saves its inputs' content as an artifact
//! (docs/reference/artifacts.md#saveartifact).

use std::sync::Arc;

use mnemon_types::{Artifact, StorageLocation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::json_type;
use crate::selector::Selector;
use crate::{ArtifactError, ArtifactStore, BackendRegistry, Storage};

/// The class path the original platform wrapped SaveArtifact configs with.
pub const SAVE_ARTIFACT_CLASS_PATH: &str = "ix.chains.artifacts.SaveArtifact";

/// SaveArtifact's config, with the original platform's keys.
///
/// Unknown keys are refused, so that a misspelt key is reported instead of silently ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaveArtifactConfig {
    /// A JSONPath into the inputs selecting an artifact dictionary to start from.
    #[serde(default)]
    pub artifact_from_key: Option<String>,
    /// Static key; overrides the start artifact's.
    #[serde(default)]
    pub artifact_key: Option<String>,
    /// Static type; overrides the start artifact's.
    #[serde(default)]
    pub artifact_type: Option<String>,
    /// Static name; overrides the start artifact's.
    #[serde(default)]
    pub artifact_name: Option<String>,
    /// Static description; overrides the start artifact's.
    #[serde(default)]
    pub artifact_description: Option<String>,
    /// Storage backend name; overrides the start artifact's `storage`.
    #[serde(default)]
    pub artifact_storage: Option<String>,
    /// Storage id; overrides the start artifact's `storage_id` and `identifier`.
    #[serde(default)]
    pub artifact_storage_id: Option<String>,
    /// The input holding the content, when `content_path` is not set.
    #[serde(default = "default_content_key")]
    pub content_key: String,
    /// A JSONPath into the inputs selecting the content.
    #[serde(default)]
    pub content_path: Option<String>,
    /// The output that receives the saved artifact.
    #[serde(default = "default_output_key")]
    pub output_key: String,
}

fn default_content_key() -> String {
    "content".to_owned()
}

fn default_output_key() -> String {
    "artifact".to_owned()
}

impl Default for SaveArtifactConfig {
    fn default() -> Self {
        SaveArtifactConfig {
            artifact_from_key: None,
            artifact_key: None,
            artifact_type: None,
            artifact_name: None,
            artifact_description: None,
            artifact_storage: None,
            artifact_storage_id: None,
            content_key: default_content_key(),
            content_path: None,
            output_key: default_output_key(),
        }
    }
}

impl SaveArtifactConfig {
    /// Reads a config in its plain form or wrapped as
    /// `{"class_path": "ix.chains.artifacts.SaveArtifact", "config": {...}}`.
    pub fn from_json(config: &Value) -> Result<Self, ArtifactError> {
        let body = unwrap_class_path(config, "SaveArtifact", SAVE_ARTIFACT_CLASS_PATH)?;
        serde_json::from_value(body).map_err(|e| ArtifactError::InvalidConfig {
            component: "SaveArtifact",
            message: e.to_string(),
        })
    }
}

/// The body of a config that may be wrapped in `{"class_path", "config"}`.
pub(crate) fn unwrap_class_path(
    config: &Value,
    component: &'static str,
    class_path: &'static str,
) -> Result<Value, ArtifactError> {
    let invalid = |message: String| ArtifactError::InvalidConfig { component, message };
    let Some(object) = config.as_object() else {
        return Err(invalid(format!(
            "the config must be a JSON object, but it is {}",
            json_type(config)
        )));
    };
    let Some(found) = object.get("class_path") else {
        return Ok(config.clone());
    };
    let class_name = class_path.rsplit('.').next().unwrap_or(class_path);
    match found.as_str() {
        Some(path) if path == class_name || path.ends_with(&format!(".{class_name}")) => {}
        _ => {
            return Err(invalid(format!(
                "class_path is {found}, but this is {component}; use {class_path:?}"
            )));
        }
    }
    match object.get("config") {
        None | Some(Value::Null) => Ok(Value::Object(Map::new())),
        Some(body) => Ok(body.clone()),
    }
}

/// The step that saves content from its inputs as an artifact
/// (docs/reference/artifacts.md#saveartifact).
///
/// ```
/// use std::sync::Arc;
/// use mnemon_artifacts::{ArtifactStore, BackendRegistry, InMemoryArtifactStore, SaveArtifact,
///     SaveArtifactConfig};
/// use serde_json::json;
///
/// let store = Arc::new(InMemoryArtifactStore::new());
/// let config = SaveArtifactConfig::from_json(&json!({
///     "artifact_key": "plan", "artifact_type": "plan", "artifact_name": "The plan",
/// }))?;
/// let step = SaveArtifact::new(config, store.clone(), BackendRegistry::new())?;
/// let outputs = step.run("chat-1", &json!({"content": "1. parse 2. test"}))?;
/// assert_eq!(outputs["artifact"]["data"], "1. parse 2. test");
/// assert_eq!(store.latest("chat-1", "plan")?.map(|a| a.name).as_deref(), Some("The plan"));
/// # Ok::<(), mnemon_artifacts::ArtifactError>(())
/// ```
pub struct SaveArtifact {
    config: SaveArtifactConfig,
    from_key: Option<Selector>,
    content_path: Option<Selector>,
    store: Arc<dyn ArtifactStore>,
    backends: BackendRegistry,
}

impl std::fmt::Debug for SaveArtifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaveArtifact")
            .field("config", &self.config)
            .field("backends", &self.backends)
            .finish_non_exhaustive()
    }
}

/// What the start artifact dictionary (step 1) provided.
#[derive(Debug, Default)]
struct Start {
    key: Option<String>,
    artifact_type: Option<String>,
    name: Option<String>,
    description: Option<String>,
    storage: Option<String>,
    storage_id: Option<String>,
    identifier: Option<String>,
    data: Option<Value>,
}

/// Where step 5 puts the content.
enum Placement {
    Inline,
    External {
        location: StorageLocation,
        backend: Arc<dyn crate::StorageBackend>,
    },
}

impl SaveArtifact {
    /// A SaveArtifact step saving to `store`, with content backends from `backends`.
    ///
    /// Checks what it can before any input arrives: the JSONPaths compile and a configured
    /// backend is registered.
    pub fn new(
        config: SaveArtifactConfig,
        store: Arc<dyn ArtifactStore>,
        backends: BackendRegistry,
    ) -> Result<Self, ArtifactError> {
        let from_key = config
            .artifact_from_key
            .as_deref()
            .map(|p| Selector::compile("artifact_from_key", p))
            .transpose()?;
        let content_path = config
            .content_path
            .as_deref()
            .map(|p| Selector::compile("content_path", p))
            .transpose()?;
        if let Some(name) = &config.artifact_storage {
            backends.resolve(name)?;
        }
        Ok(SaveArtifact {
            config,
            from_key,
            content_path,
            store,
            backends,
        })
    }

    /// The config this step runs with.
    pub fn config(&self) -> &SaveArtifactConfig {
        &self.config
    }

    /// Runs the six steps of docs/reference/artifacts.md#saveartifact over `inputs` (a JSON object
    /// of named inputs), saving into `scope`, and returns the outputs: `output_key` → the saved
    /// artifact as a dictionary.
    ///
    /// Content kept by a backend is written before the record is saved: if saving the record
    /// fails, the content may remain as an orphan, but no record ever points at missing
    /// content. The write and the record are one step of the store
    /// ([`ArtifactStore::save_with_content`]), so concurrent saves to one storage id never leave
    /// the newest record pointing at another save's content.
    pub fn run(&self, scope: &str, inputs: &Value) -> Result<Map<String, Value>, ArtifactError> {
        if !inputs.is_object() {
            return Err(ArtifactError::InputsNotObject {
                found: json_type(inputs),
            });
        }
        // 1. Start.
        let start = match &self.from_key {
            Some(selector) => read_start(selector, inputs)?,
            None => Start::default(),
        };
        // 2. Static attributes override.
        let c = &self.config;
        let pick = |fixed: &Option<String>, started: Option<String>| fixed.clone().or(started);
        let key = pick(&c.artifact_key, start.key);
        let artifact_type = pick(&c.artifact_type, start.artifact_type);
        let name = pick(&c.artifact_name, start.name);
        let description = pick(&c.artifact_description, start.description).unwrap_or_default();
        // 3. Required attributes.
        let mut artifact = Artifact::new(
            scope,
            key.unwrap_or_default(),
            artifact_type.unwrap_or_default(),
            name.unwrap_or_default(),
        )
        .with_description(description);
        let missing = artifact.missing_required();
        if !missing.is_empty() {
            return Err(ArtifactError::MissingAttributes {
                missing: missing.into_iter().map(str::to_owned).collect(),
            });
        }
        // 4. Content.
        let content = self.content(inputs, start.data)?;
        // 5. Storage.
        let backend_name = c.artifact_storage.clone().or(start.storage);
        let placement = match backend_name {
            None => Placement::Inline,
            Some(name) => match self.backends.resolve(&name)? {
                Storage::Inline => Placement::Inline,
                Storage::External { name, backend } => {
                    let id = c
                        .artifact_storage_id
                        .clone()
                        .or(start.storage_id)
                        .or(start.identifier)
                        .ok_or_else(|| ArtifactError::StorageIdRequired {
                            backend: name.clone(),
                        })?;
                    // Stored in the backend's one spelling, so that the sweeps' "still in
                    // use?" checks see every record that names the same content.
                    let id = backend.canonical_id(&id)?;
                    Placement::External {
                        location: StorageLocation::new(name, id),
                        backend,
                    }
                }
            },
        };
        match placement {
            Placement::Inline => {
                artifact.data = Some(content);
                self.store.save(&artifact)?;
            }
            Placement::External { location, backend } => {
                let id = location.id.clone();
                artifact.storage = Some(location);
                // One step, so that a concurrent save to the same storage id cannot slip its
                // content in between this write and this record.
                self.store
                    .save_with_content(&artifact, &mut || backend.write(&id, &content))?;
            }
        }
        // 6. Output.
        let mut outputs = Map::new();
        outputs.insert(c.output_key.clone(), Value::Object(artifact.to_dict()));
        Ok(outputs)
    }

    /// Step 4: the content, from `content_path`, else `inputs[content_key]`, else the start
    /// artifact's `data`.
    fn content(&self, inputs: &Value, start_data: Option<Value>) -> Result<Value, ArtifactError> {
        if let Some(selector) = &self.content_path {
            return selector
                .exactly_one(
                    inputs,
                    "point content_path at the single value to save, e.g. $.result.files[0]",
                )
                .cloned();
        }
        match (inputs.get(&self.config.content_key), start_data) {
            (Some(content), _) => Ok(content.clone()),
            (None, Some(data)) => Ok(data),
            (None, None) => Err(ArtifactError::ContentMissing {
                key: self.config.content_key.clone(),
            }),
        }
    }
}

/// Step 1: the start artifact dictionary's fields.
fn read_start(selector: &Selector, inputs: &Value) -> Result<Start, ArtifactError> {
    let found = selector.exactly_one(
        inputs,
        "point artifact_from_key at the one artifact dictionary to start from",
    )?;
    let Some(object) = found.as_object() else {
        return Err(ArtifactError::StartNotObject {
            path: selector.written().to_owned(),
            found: json_type(found),
        });
    };
    let text = |field: &'static str| -> Result<Option<String>, ArtifactError> {
        match object.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(ArtifactError::StartFieldNotString {
                field,
                found: json_type(other),
            }),
        }
    };
    // `storage` may also be the record form {"backend", "id"}.
    let (storage, storage_from_record) = match object.get("storage") {
        Some(Value::Object(location)) => {
            let location: StorageLocation = serde_json::from_value(Value::Object(location.clone()))
                .map_err(|_| ArtifactError::StartFieldNotString {
                    field: "storage",
                    found: "an object other than {\"backend\", \"id\"}",
                })?;
            (Some(location.backend), Some(location.id))
        }
        _ => (text("storage")?, None),
    };
    Ok(Start {
        key: text("key")?,
        artifact_type: match text("type")? {
            Some(t) => Some(t),
            None => text("artifact_type")?,
        },
        name: text("name")?,
        description: text("description")?,
        storage,
        storage_id: text("storage_id")?.or(storage_from_record),
        identifier: text("identifier")?,
        data: object.get("data").filter(|d| !d.is_null()).cloned(),
    })
}
