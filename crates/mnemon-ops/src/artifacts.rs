//! Artifact operations: save, get, latest, list, scopes, delete, load into a prompt
//! (docs/reference/rest.md#artifacts, docs/reference/artifacts.md).

use mnemon_artifacts::{
    ArtifactMemory, ArtifactMemoryConfig, SaveArtifact, SaveArtifactConfig, Uuid,
};
use mnemon_types::Artifact;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::assets::DeleteOutput;
use crate::error::OpsError;
use crate::page;
use crate::service::Service;

/// Input of [`Service::artifact_save`]: SaveArtifact with static attributes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactSaveInput {
    /// The chat or session the artifact belongs to.
    pub scope: String,
    /// How later steps refer to it; the newest artifact of a key is *the* artifact.
    pub key: String,
    /// Its type, e.g. `plan` or `file`.
    #[serde(rename = "type")]
    pub artifact_type: String,
    /// A human-readable name.
    pub name: String,
    /// A description.
    #[serde(default)]
    pub description: Option<String>,
    /// The content, any JSON.
    pub content: serde_json::Value,
    /// The storage backend (`inline`, or `write_to_file` when the server has one); inline when
    /// absent.
    #[serde(default)]
    pub storage: Option<String>,
    /// The content's id in an external backend (for `write_to_file`, a relative path).
    #[serde(default)]
    pub storage_id: Option<String>,
}

/// An artifact record with its content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactOutput {
    /// The record.
    pub artifact: Artifact,
    /// Its content: read from its backend when stored externally, else the inline data.
    #[serde(default)]
    pub content: Option<serde_json::Value>,
}

/// Input of the operations that take one artifact id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactIdInput {
    /// The artifact's id (a UUID).
    pub id: String,
}

/// Input of [`Service::artifact_latest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactLatestInput {
    /// The scope.
    pub scope: String,
    /// The key.
    pub key: String,
}

/// Input of [`Service::artifact_list`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactListInput {
    /// The scope to list.
    pub scope: String,
    /// Only artifacts of this type.
    #[serde(default, rename = "type")]
    pub artifact_type: Option<String>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many records (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Output of [`Service::artifact_list`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactListOutput {
    /// The records, in save order (content not included: get one to read it).
    pub artifacts: Vec<Artifact>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Input of [`Service::artifact_scopes`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactScopesInput {
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many scopes (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Output of [`Service::artifact_scopes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactScopesOutput {
    /// The scopes that hold live artifact records, each once, in ascending byte order.
    pub scopes: Vec<String>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Input of [`Service::artifact_load`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactLoadInput {
    /// The scope whose artifacts are visible.
    pub scope: String,
    /// The keys to load, in order (de-duplicated).
    #[serde(default)]
    pub keys: Vec<String>,
    /// Or text naming keys in braces, e.g. `Use {plan} and {code}`.
    #[serde(default)]
    pub text: Option<String>,
}

/// Output of [`Service::artifact_load`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactLoadOutput {
    /// The `RELATED ARTIFACTS` block for the prompt (empty when nothing was found).
    pub text: String,
    /// The ids of the artifacts rendered, in key order.
    pub artifact_ids: Vec<String>,
    /// Keys with no artifact in the scope.
    pub missing_keys: Vec<String>,
}

fn parse_id(id: &str) -> Result<Uuid, OpsError> {
    Uuid::parse_str(id).map_err(|_| {
        OpsError::invalid(format!(
            "{id:?} is not an artifact id: artifact ids are UUIDs, as listed by GET /v1/artifacts"
        ))
    })
}

impl Service {
    fn with_content(&self, artifact: Artifact) -> Result<ArtifactOutput, OpsError> {
        let content = self.stores().backends().read_content(&artifact)?;
        Ok(ArtifactOutput { artifact, content })
    }

    /// Saves an artifact (content first, then the record) and returns it.
    pub fn artifact_save(&self, input: ArtifactSaveInput) -> Result<ArtifactOutput, OpsError> {
        let config = SaveArtifactConfig {
            artifact_key: Some(input.key),
            artifact_type: Some(input.artifact_type),
            artifact_name: Some(input.name),
            artifact_description: input.description,
            artifact_storage: input.storage,
            artifact_storage_id: input.storage_id,
            ..SaveArtifactConfig::default()
        };
        let step = SaveArtifact::new(
            config,
            self.stores().artifacts(),
            self.stores().backends().clone(),
        )?;
        let outputs = step.run(
            &input.scope,
            &serde_json::json!({ "content": input.content }),
        )?;
        let id = outputs
            .get("artifact")
            .and_then(|a| a.get("id"))
            .and_then(serde_json::Value::as_str)
            .and_then(|id| Uuid::parse_str(id).ok())
            .ok_or_else(|| OpsError::invalid("the saved artifact has no id"))?;
        self.artifact_get(ArtifactIdInput { id: id.to_string() })
    }

    /// One artifact record with its content.
    pub fn artifact_get(&self, input: ArtifactIdInput) -> Result<ArtifactOutput, OpsError> {
        let id = parse_id(&input.id)?;
        let artifact =
            self.stores()
                .artifacts()
                .get(id)?
                .ok_or_else(|| OpsError::ArtifactNotFound {
                    what: format!("there is no artifact with id {id}"),
                })?;
        self.with_content(artifact)
    }

    /// The newest artifact of a key in a scope, with its content.
    pub fn artifact_latest(&self, input: ArtifactLatestInput) -> Result<ArtifactOutput, OpsError> {
        let artifact = self
            .stores()
            .artifacts()
            .latest(&input.scope, &input.key)?
            .ok_or_else(|| OpsError::ArtifactNotFound {
                what: format!(
                    "there is no artifact with key {:?} in scope {:?}",
                    input.key, input.scope
                ),
            })?;
        self.with_content(artifact)
    }

    /// One page of a scope's records, in save order.
    pub fn artifact_list(&self, input: ArtifactListInput) -> Result<ArtifactListOutput, OpsError> {
        let limit = page::limit(input.limit)?;
        let all = self
            .stores()
            .artifacts()
            .list(&input.scope, input.artifact_type.as_deref())?;
        let (artifacts, next_cursor) =
            page::page(all, input.cursor.as_deref(), limit, false, |a| {
                a.id.to_string()
            })?;
        Ok(ArtifactListOutput {
            artifacts,
            next_cursor,
        })
    }

    /// One page of the scopes that hold artifact records, in ascending byte order: what to
    /// list with [`artifact_list`](Self::artifact_list).
    pub fn artifact_scopes(
        &self,
        input: ArtifactScopesInput,
    ) -> Result<ArtifactScopesOutput, OpsError> {
        let limit = page::limit(input.limit)?;
        let all = self.stores().artifacts().scopes()?;
        // Sorted by the store, so a cursor whose scope has since emptied keeps its place.
        let (scopes, next_cursor) =
            page::page(all, input.cursor.as_deref(), limit, true, String::clone)?;
        Ok(ArtifactScopesOutput {
            scopes,
            next_cursor,
        })
    }

    /// Removes an artifact record; an unknown id is [`OpsError::ArtifactNotFound`]. Content in
    /// an external backend stays (another record may name the same storage id).
    pub fn artifact_delete(&self, input: ArtifactIdInput) -> Result<DeleteOutput, OpsError> {
        let id = parse_id(&input.id)?;
        if self.stores().artifacts().delete(id)? {
            Ok(DeleteOutput { deleted: true })
        } else {
            Err(OpsError::ArtifactNotFound {
                what: format!("there is no artifact with id {id}"),
            })
        }
    }

    /// The newest artifacts of the named keys, rendered as a prompt block (ArtifactMemory).
    pub fn artifact_load(&self, input: ArtifactLoadInput) -> Result<ArtifactLoadOutput, OpsError> {
        let keys = match (input.keys.is_empty(), input.text) {
            (false, Some(_)) => {
                return Err(OpsError::invalid(
                    "name the artifacts either by keys or by text, not both",
                ));
            }
            (false, None) => serde_json::json!(input.keys),
            (true, Some(text)) => serde_json::Value::String(text),
            (true, None) => {
                return Err(OpsError::invalid(
                    "name the artifacts to load: keys (a list) or text mentioning {key}",
                ));
            }
        };
        let memory = ArtifactMemory::new(
            ArtifactMemoryConfig::default(),
            self.stores().artifacts(),
            self.stores().backends().clone(),
            input.scope,
        );
        let loaded = memory.load(&serde_json::json!({ "artifact_keys": keys }))?;
        Ok(ArtifactLoadOutput {
            text: loaded.text().to_owned(),
            artifact_ids: loaded.artifacts.iter().map(|a| a.id.to_string()).collect(),
            missing_keys: loaded.missing_keys,
        })
    }
}
