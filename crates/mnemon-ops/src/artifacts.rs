//! Artifact operations: save, get, latest, list, scopes, delete, load into a prompt
//! (docs/reference/rest.md#artifacts, docs/reference/artifacts.md).

use std::sync::Arc;

use mnemon_artifacts::{
    ArtifactError, ArtifactMemory, ArtifactMemoryConfig, ArtifactStore, ArtifactSweep,
    BackendRegistry, Expiry, Filter, ListedArtifact, PageQuery, SaveArtifact, SaveArtifactConfig,
    Uuid,
};
use mnemon_types::Artifact;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::assets::DeleteOutput;
use crate::error::OpsError;
use crate::expiry::{ExpiryInput, parse_filter};
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
    /// When the record expires, in milliseconds since the Unix epoch; absent when it never
    /// does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// Input of [`Service::artifact_query`]: a filtered listing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactQueryInput {
    /// Only records of this scope; absent: every scope of the namespace.
    #[serde(default)]
    pub scope: Option<String>,
    /// A filter (docs/reference/filters.md) over each record's document
    /// (docs/reference/artifacts.md#filters), e.g. `{"eq": {"path": "type", "value": "plan"}}`; absent lists
    /// every live record.
    #[serde(default)]
    pub filter: Option<serde_json::Value>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
    /// At most this many records (default 100, at most 1,000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One record of [`ArtifactQueryOutput`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactListed {
    /// The record (content not included: get one to read it).
    pub artifact: Artifact,
    /// When it expires, in milliseconds since the Unix epoch; absent when it never does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// Output of [`Service::artifact_query`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactQueryOutput {
    /// The matching records, in save order.
    pub artifacts: Vec<ArtifactListed>,
    /// The cursor of the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// An artifact store whose plain saves expire as one [`Expiry`] says: what
/// [`Service::artifact_save_expiring`] (and `mnemon artifact save --ttl`) hands the
/// SaveArtifact step, which saves through `save_with_content` and knows nothing of expiry.
/// Every other call goes to the store as it is.
pub struct ExpiringSaves {
    inner: Arc<dyn ArtifactStore>,
    expiry: Expiry,
}

impl ExpiringSaves {
    /// `inner`, its saves expiring as `expiry` says.
    pub fn new(inner: Arc<dyn ArtifactStore>, expiry: Expiry) -> ExpiringSaves {
        ExpiringSaves { inner, expiry }
    }
}

impl ArtifactStore for ExpiringSaves {
    fn save(&self, artifact: &Artifact) -> Result<u64, ArtifactError> {
        self.inner
            .save_expiring(artifact, self.expiry, &mut || Ok(()))
    }

    fn save_with_content(
        &self,
        artifact: &Artifact,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        self.inner
            .save_expiring(artifact, self.expiry, write_content)
    }

    fn save_expiring(
        &self,
        artifact: &Artifact,
        expiry: Expiry,
        write_content: &mut dyn FnMut() -> Result<(), ArtifactError>,
    ) -> Result<u64, ArtifactError> {
        self.inner.save_expiring(artifact, expiry, write_content)
    }

    fn expires_at(&self, id: Uuid) -> Result<Option<Option<i64>>, ArtifactError> {
        self.inner.expires_at(id)
    }

    fn list_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
        limit: Option<usize>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        self.inner.list_where(scope, filter, limit)
    }

    fn count_where(
        &self,
        scope: Option<&str>,
        filter: Option<&Filter>,
    ) -> Result<u64, ArtifactError> {
        self.inner.count_where(scope, filter)
    }

    fn gc(&self, backends: &BackendRegistry) -> Result<ArtifactSweep, ArtifactError> {
        self.inner.gc(backends)
    }

    fn forget(
        &self,
        scope_prefix: &str,
        backends: &BackendRegistry,
    ) -> Result<ArtifactSweep, ArtifactError> {
        self.inner.forget(scope_prefix, backends)
    }

    fn get(&self, id: Uuid) -> Result<Option<Artifact>, ArtifactError> {
        self.inner.get(id)
    }

    fn latest(&self, scope: &str, key: &str) -> Result<Option<Artifact>, ArtifactError> {
        self.inner.latest(scope, key)
    }

    fn list(
        &self,
        scope: &str,
        artifact_type: Option<&str>,
    ) -> Result<Vec<Artifact>, ArtifactError> {
        self.inner.list(scope, artifact_type)
    }

    fn scopes(&self) -> Result<Vec<String>, ArtifactError> {
        self.inner.scopes()
    }

    fn delete(&self, id: Uuid) -> Result<bool, ArtifactError> {
        self.inner.delete(id)
    }

    fn list_page(
        &self,
        query: &PageQuery<'_>,
    ) -> Result<Option<Vec<ListedArtifact>>, ArtifactError> {
        self.inner.list_page(query)
    }
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

/// The most distinct keys one [`Service::artifact_load`] reads (one store read each).
pub const MAX_LOAD_KEYS: usize = 1_000;

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
        // A second point read: a record that expired or went in between is gone now, never
        // reported as one that never expires.
        let expires_at_ms = self
            .stores()
            .artifacts()
            .expires_at(artifact.id)?
            .ok_or_else(|| OpsError::ArtifactNotFound {
                what: format!("artifact {} expired or was deleted", artifact.id),
            })?;
        Ok(ArtifactOutput {
            artifact,
            content,
            expires_at_ms,
        })
    }

    /// Saves an artifact (content first, then the record) and returns it.
    pub fn artifact_save(&self, input: ArtifactSaveInput) -> Result<ArtifactOutput, OpsError> {
        self.artifact_save_expiring(input, ExpiryInput::default())
    }

    /// [`artifact_save`](Self::artifact_save), the record expiring as `expiry` says (its
    /// content goes with it at the next sweep, [`Service::gc`]).
    pub fn artifact_save_expiring(
        &self,
        input: ArtifactSaveInput,
        expiry: ExpiryInput,
    ) -> Result<ArtifactOutput, OpsError> {
        let expiry = expiry.to_expiry()?;
        let store: Arc<dyn ArtifactStore> = match expiry {
            Expiry::Default => self.stores().artifacts(),
            expiry => Arc::new(ExpiringSaves {
                inner: self.stores().artifacts(),
                expiry,
            }),
        };
        let config = SaveArtifactConfig {
            artifact_key: Some(input.key),
            artifact_type: Some(input.artifact_type),
            artifact_name: Some(input.name),
            artifact_description: input.description,
            artifact_storage: input.storage,
            artifact_storage_id: input.storage_id,
            ..SaveArtifactConfig::default()
        };
        let step = SaveArtifact::new(config, store, self.stores().backends().clone())?;
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
        let (listed, next_cursor) = self.artifact_page(
            PageQuery {
                scope: Some(&input.scope),
                artifact_type: input.artifact_type.as_deref(),
                ..PageQuery::default()
            },
            input.cursor.as_deref(),
            input.limit,
        )?;
        Ok(ArtifactListOutput {
            artifacts: listed.into_iter().map(|l| l.artifact).collect(),
            next_cursor,
        })
    }

    /// One page of the live records a filter selects (in one scope, or every scope), in save
    /// order, each with its expiry. The filter applies before the page cut.
    pub fn artifact_query(
        &self,
        input: ArtifactQueryInput,
    ) -> Result<ArtifactQueryOutput, OpsError> {
        let filter = parse_filter(input.filter.as_ref())?;
        let (listed, next_cursor) = self.artifact_page(
            PageQuery {
                scope: input.scope.as_deref(),
                filter: filter.as_ref(),
                ..PageQuery::default()
            },
            input.cursor.as_deref(),
            input.limit,
        )?;
        Ok(ArtifactQueryOutput {
            artifacts: listed
                .into_iter()
                .map(|l| ArtifactListed {
                    artifact: l.artifact,
                    expires_at_ms: l.expires_at,
                })
                .collect(),
            next_cursor,
        })
    }

    /// One page of the records `query` selects after the cursor's record, read by the store
    /// a page at a time (one record more than the page, to tell whether another follows),
    /// without content: a page of 1,000 records of large inline data would otherwise have no
    /// bound but the records' sizes (a get reads it). A cursor whose record is gone (deleted
    /// or swept) is [`OpsError::InvalidCursor`].
    fn artifact_page(
        &self,
        query: PageQuery<'_>,
        cursor: Option<&str>,
        limit: Option<usize>,
    ) -> Result<(Vec<ListedArtifact>, Option<String>), OpsError> {
        let limit = page::limit(limit)?;
        let after = cursor
            .map(|cursor| {
                page::decode(cursor)
                    .and_then(|key| Uuid::parse_str(&key).map_err(|_| OpsError::InvalidCursor))
            })
            .transpose()?;
        let mut listed = self
            .stores()
            .artifacts()
            .list_page(&PageQuery {
                after,
                limit: limit.saturating_add(1),
                ..query
            })?
            .ok_or(OpsError::InvalidCursor)?;
        let next_cursor = if listed.len() > limit {
            listed.truncate(limit);
            listed
                .last()
                .map(|l| page::encode(&l.artifact.id.to_string()))
        } else {
            None
        };
        Ok((listed, next_cursor))
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
    ///
    /// At most [`MAX_LOAD_KEYS`] distinct keys (each is a read of the store): more is
    /// `invalid_input`; a block whose answer would pass the result limit is refused
    /// ([`OpsError::LoadTooLarge`], `result_too_large`).
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
        let inputs = serde_json::json!({ "artifact_keys": keys });
        let named = mnemon_artifacts::requested_keys("artifact_keys", &inputs)?;
        if named.len() > MAX_LOAD_KEYS {
            return Err(OpsError::invalid(format!(
                "{} keys are named; load at most {MAX_LOAD_KEYS} at once",
                named.len()
            )));
        }
        // The block holds every artifact's content: the answer's bound is the result limit,
        // checked as the block is built, so contents past it are never read.
        let max = self.max_result_bytes();
        let memory = ArtifactMemory::new(
            ArtifactMemoryConfig::default(),
            self.stores().artifacts(),
            self.stores().backends().clone(),
            input.scope,
        )
        .with_max_block_bytes(max);
        let loaded = memory
            .load(&serde_json::json!({ "artifact_keys": named }))
            .map_err(|e| match e {
                ArtifactError::BlockTooLarge { .. } => OpsError::LoadTooLarge { max },
                other => other.into(),
            })?;
        let output = ArtifactLoadOutput {
            text: loaded.text().to_owned(),
            artifact_ids: loaded.artifacts.iter().map(|a| a.id.to_string()).collect(),
            missing_keys: loaded.missing_keys,
        };
        // With the ids beside it, the whole answer.
        let size = output
            .text
            .len()
            .saturating_add(output.artifact_ids.len().saturating_mul(40));
        if size > max {
            return Err(OpsError::LoadTooLarge { max });
        }
        Ok(output)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(dir: &std::path::Path) -> Service {
        Service::new(crate::Stores::open(dir).unwrap())
    }

    fn save(service: &Service, key: &str, content: serde_json::Value) {
        service
            .artifact_save(ArtifactSaveInput {
                scope: "chat-1".into(),
                key: key.into(),
                artifact_type: "note".into(),
                name: key.into(),
                description: None,
                content,
                storage: None,
                storage_id: None,
            })
            .unwrap();
    }

    fn load(service: &Service, keys: Vec<String>) -> Result<ArtifactLoadOutput, OpsError> {
        service.artifact_load(ArtifactLoadInput {
            scope: "chat-1".into(),
            keys,
            text: None,
        })
    }

    /// A load names at most `MAX_LOAD_KEYS` distinct keys (each one a store read; repeats
    /// were also removed in quadratic time), and its block stays within the result limit:
    /// both were unbounded.
    #[test]
    fn a_load_is_bounded_in_keys_and_in_size() {
        let dir = tempfile::tempdir().unwrap();
        let service = service(dir.path());
        save(&service, "plan", serde_json::json!("x".repeat(2_000)));
        let many: Vec<String> = (0..=MAX_LOAD_KEYS).map(|i| format!("k{i}")).collect();
        let refused = load(&service, many).unwrap_err();
        assert_eq!(refused.code(), "invalid_input", "{refused}");
        // Repeats count once.
        let repeated = vec!["plan".to_owned(); 5 * MAX_LOAD_KEYS];
        assert_eq!(load(&service, repeated).unwrap().artifact_ids.len(), 1);
        let small = service.with_max_result_bytes(1_000);
        let too_large = load(&small, vec!["plan".into()]).unwrap_err();
        assert_eq!(too_large.code(), "result_too_large", "{too_large}");
    }
}
