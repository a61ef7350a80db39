//! Garbage collection and forgetting across every store of a namespace
//! (docs/reference/rest.md#gc-and-forget).
//!
//! * [`Service::gc`] removes what has expired: memory messages, asset rows and bytes, artifact
//!   records and the content files no remaining record points at. Expired records are already invisible to
//!   every read; the sweep reclaims their space.
//! * [`Service::forget`] deletes a subject, expired or not: memory threads of a user, agent or
//!   session, assets under an id prefix, artifact records under a scope prefix (with their
//!   files), or the whole namespace. Each store deletes in one transaction of its own; the
//!   answer counts what each removed.

use mnemon_artifacts::ArtifactSweep;
use mnemon_memory::ScopeFilter;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::OpsError;
use crate::service::Service;

/// What an artifact sweep removed ([`Service::gc`], [`Service::forget`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArtifactsSwept {
    /// Records removed.
    pub records: u64,
    /// Content locations (files of `write_to_file`) removed from their backend.
    pub content_removed: u64,
    /// Content locations left because another record still points at them.
    pub content_shared: u64,
    /// Content locations the backend no longer had.
    pub content_missing: u64,
    /// Content locations that could not be removed, each with why (the records are gone; the
    /// next sweep does not retry them, so remove these by hand).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content_errors: Vec<String>,
}

impl From<ArtifactSweep> for ArtifactsSwept {
    fn from(sweep: ArtifactSweep) -> Self {
        ArtifactsSwept {
            records: sweep.records,
            content_removed: sweep.content_removed,
            content_shared: sweep.content_shared,
            content_missing: sweep.content_missing,
            content_errors: sweep.content_errors,
        }
    }
}

/// Output of [`Service::gc`]: what each store removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GcOutput {
    /// The namespace swept.
    pub namespace: String,
    /// Expired memory messages removed (with their marks).
    pub messages: u64,
    /// Expired assets removed (rows and bytes).
    pub assets: u64,
    /// Expired artifact records removed, and their content.
    pub artifacts: ArtifactsSwept,
}

/// Input of [`Service::forget`]: the subject. Give at least one part; each part is deleted
/// from its own store, in one transaction per store.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForgetInput {
    /// Memory: every thread of this user (with `agent_id` / `session_id`, only those).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Memory: every thread of this agent (narrowed by `user_id` / `session_id` when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Memory: every thread of this session (narrowed by `user_id` / `agent_id` when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Assets: every asset whose id starts with this (not empty: forget the namespace for
    /// all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asset_prefix: Option<String>,
    /// Artifacts: every record whose scope starts with this, with its content files (not
    /// empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_scope_prefix: Option<String>,
    /// Everything of the namespace, in every store: give the namespace's name here, so that a
    /// whole namespace is never forgotten by mistake. No other part may be given with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// What [`Service::forget`] removed from memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryForgotten {
    /// Threads deleted.
    pub threads: u64,
    /// Messages deleted with them.
    pub messages: u64,
}

/// Output of [`Service::forget`]: what each store removed (zero for a store the subject did
/// not name).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ForgetOutput {
    /// The namespace.
    pub namespace: String,
    /// Memory threads and messages deleted.
    pub memory: MemoryForgotten,
    /// Assets deleted.
    pub assets: u64,
    /// Artifact records deleted, and their content.
    pub artifacts: ArtifactsSwept,
}

impl Service {
    /// Removes everything of the namespace that has expired, store by store: memory messages,
    /// assets (rows and bytes) and artifact records with the content files no remaining record
    /// points at.
    pub fn gc(&self) -> Result<GcOutput, OpsError> {
        let stores = self.stores();
        let messages = stores.gc_memory()?;
        let assets = stores.assets().gc()?;
        let artifacts = stores.artifacts().gc(stores.backends())?;
        Ok(GcOutput {
            namespace: stores.namespace().as_str().to_owned(),
            messages,
            assets,
            artifacts: artifacts.into(),
        })
    }

    /// Deletes a subject from every store it names, expired or not, each store in one
    /// transaction; returns what each removed. Nothing of it is readable afterwards.
    pub fn forget(&self, input: ForgetInput) -> Result<ForgetOutput, OpsError> {
        let stores = self.stores();
        let namespace = stores.namespace().as_str().to_owned();
        let within = ScopeFilter {
            user_id: input.user_id,
            agent_id: input.agent_id,
            session_id: input.session_id,
        };
        let has_scope = within != ScopeFilter::all();
        let mut out = ForgetOutput {
            namespace: namespace.clone(),
            ..ForgetOutput::default()
        };
        if let Some(confirm) = input.namespace {
            if has_scope || input.asset_prefix.is_some() || input.artifact_scope_prefix.is_some() {
                return Err(OpsError::invalid(
                    "forgetting a namespace deletes everything in it: give namespace alone",
                ));
            }
            if confirm != namespace {
                return Err(OpsError::invalid(format!(
                    "namespace is {confirm:?}, but this is namespace {namespace:?}: to forget \
                     everything in it, give its own name"
                )));
            }
            let forgotten = stores.forget_memory(&ScopeFilter::all())?;
            out.memory = MemoryForgotten {
                threads: forgotten.threads,
                messages: forgotten.messages,
            };
            out.assets = stores.assets().forget("")?;
            out.artifacts = stores.artifacts().forget("", stores.backends())?.into();
            return Ok(out);
        }
        for (field, value) in [
            ("user_id", &within.user_id),
            ("agent_id", &within.agent_id),
            ("session_id", &within.session_id),
            ("asset_prefix", &input.asset_prefix),
            ("artifact_scope_prefix", &input.artifact_scope_prefix),
        ] {
            if value.as_deref() == Some("") {
                return Err(OpsError::invalid(format!(
                    "{field} must not be empty (to forget everything, give namespace: the \
                     namespace's name)"
                )));
            }
        }
        if !has_scope && input.asset_prefix.is_none() && input.artifact_scope_prefix.is_none() {
            return Err(OpsError::invalid(
                "name what to forget: user_id, agent_id or session_id (memory), asset_prefix \
                 (assets), artifact_scope_prefix (artifacts), or namespace (everything)",
            ));
        }
        if has_scope {
            let forgotten = stores.forget_memory(&within)?;
            out.memory = MemoryForgotten {
                threads: forgotten.threads,
                messages: forgotten.messages,
            };
        }
        if let Some(prefix) = &input.asset_prefix {
            out.assets = stores.assets().forget(prefix)?;
        }
        if let Some(prefix) = &input.artifact_scope_prefix {
            out.artifacts = stores.artifacts().forget(prefix, stores.backends())?.into();
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stores;
    use crate::artifacts::{ArtifactIdInput, ArtifactSaveInput};
    use crate::assets::{AssetBody, AssetIdInput, AssetPutInput};
    use crate::expiry::ExpiryInput;
    use crate::memory::{AddWith, MemoryAddInput, MessageBody, SessionListInput};

    fn service(dir: &std::path::Path, namespace: &str) -> Service {
        let options = crate::OpenOptions::default().with_namespace(namespace.parse().unwrap());
        Service::new(Stores::open_with(dir, &options).unwrap())
    }

    fn put(service: &Service, id: &str, expiry: ExpiryInput) {
        let asset = AssetBody {
            asset_id: Some(id.into()),
            asset_type: None,
            asset_name: None,
            description: None,
            content_type: None,
            content: Some(serde_json::json!(id)),
            content_base64: None,
            extra: serde_json::Map::new(),
        };
        service
            .asset_put_expiring(AssetPutInput { asset }, expiry)
            .unwrap();
    }

    fn save(service: &Service, scope: &str, file: &str, expiry: ExpiryInput) -> String {
        service
            .artifact_save_expiring(
                ArtifactSaveInput {
                    scope: scope.into(),
                    key: "k".into(),
                    artifact_type: "t".into(),
                    name: "n".into(),
                    description: None,
                    content: serde_json::json!({"file": file}),
                    storage: Some("write_to_file".into()),
                    storage_id: Some(file.into()),
                },
                expiry,
            )
            .unwrap()
            .artifact
            .id
            .to_string()
    }

    fn add(service: &Service, session: &str) {
        service
            .memory_add(MemoryAddInput {
                session: session.into(),
                messages: vec![MessageBody(
                    serde_json::json!({"name": "u", "content": "x"}),
                )],
                marks: vec![],
            })
            .unwrap();
    }

    /// With a default time-to-live, `never_expires` (REST `?never_expires=true`, MCP
    /// `never_expires`, CLI `--ttl never`) keeps an asset, an artifact record and messages
    /// until deleted; before, nothing but the default could be asked for.
    #[test]
    fn never_expires_overrides_the_default_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let options = crate::OpenOptions::default()
            .with_default_ttl(Some(std::time::Duration::from_secs(3_600)));
        let svc = Service::new(Stores::open_with(dir.path(), &options).unwrap());
        let never = ExpiryInput::never();
        put(&svc, "kept", never);
        put(&svc, "default", ExpiryInput::default());
        let expiry_of = |id: &str| {
            svc.asset_get(AssetIdInput {
                asset_id: id.into(),
            })
            .unwrap()
            .expires_at_ms
        };
        assert_eq!(expiry_of("kept"), None);
        assert!(expiry_of("default").is_some());
        let kept = save(&svc, "chat", "kept.json", never);
        let record = svc.artifact_get(ArtifactIdInput { id: kept }).unwrap();
        assert_eq!(record.expires_at_ms, None);
        svc.memory_add_with(
            MemoryAddInput {
                session: "s".into(),
                messages: vec![MessageBody(
                    serde_json::json!({"id": "m", "name": "u", "content": "x"}),
                )],
                marks: vec![],
            },
            &AddWith {
                embed: false,
                expiry: never,
            },
        )
        .unwrap();
        let memory = svc
            .stores()
            .memory(mnemon_memory::Scope::session("s"))
            .unwrap();
        let options = mnemon_memory::ExportOptions {
            format: mnemon_memory::ExportFormat::AgentScope00Stored,
            ..mnemon_memory::ExportOptions::default()
        };
        let mnemon_memory::Exported::Json(document) = memory
            .export(mnemon_memory::ExportTarget::Json, &options)
            .unwrap()
        else {
            panic!("a JSON export")
        };
        assert!(!document.contains("__expires_at"), "{document}");
    }

    /// A sweep never removes a file a live record names another way: a save stores the
    /// storage id in one spelling. Before, a record saved as `./plans/p.json` expired and its
    /// sweep removed `plans/p.json`, which a live record still named.
    #[test]
    fn a_sweep_keeps_a_file_a_live_record_names_another_way() {
        let dir = tempfile::tempdir().unwrap();
        let acme = service(dir.path(), "acme");
        let live = save(&acme, "a", "plans/p.json", ExpiryInput::never());
        save(
            &acme,
            "b",
            "./plans/p.json",
            ExpiryInput::after(std::time::Duration::from_secs(1)),
        );
        std::thread::sleep(std::time::Duration::from_millis(1_100));
        let swept = acme.gc().unwrap();
        assert_eq!(swept.artifacts.records, 1);
        assert_eq!(swept.artifacts.content_removed, 0);
        // The two records share the file, which holds the later save's content.
        let record = acme.artifact_get(ArtifactIdInput { id: live }).unwrap();
        let content = record.content.unwrap().to_string();
        assert!(content.contains("./plans/p.json"), "{content}");
    }

    #[test]
    fn gc_sweeps_expired_assets_and_artifacts_with_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let acme = service(dir.path(), "acme");
        let second = ExpiryInput::after(std::time::Duration::from_secs(1));
        put(&acme, "keep", ExpiryInput::default());
        put(&acme, "brief", second);
        let message =
            |content: &str| MessageBody(serde_json::json!({"name": "u", "content": content}));
        acme.memory_add_with(
            MemoryAddInput {
                session: "s".into(),
                messages: vec![message("brief")],
                marks: vec![],
            },
            &AddWith {
                embed: false,
                expiry: second,
            },
        )
        .unwrap();
        add(&acme, "s");
        let kept = save(&acme, "chat", "kept.json", ExpiryInput::default());
        save(&acme, "chat", "brief.json", second);
        let files = dir.path().join("artifacts/.namespaces/acme");
        assert!(files.join("brief.json").is_file());
        std::thread::sleep(std::time::Duration::from_millis(1_100));

        let swept = acme.gc().unwrap();
        assert_eq!(swept.namespace, "acme");
        assert_eq!(swept.messages, 1);
        assert_eq!(swept.assets, 1);
        assert_eq!(swept.artifacts.records, 1);
        assert_eq!(swept.artifacts.content_removed, 1);
        assert!(!files.join("brief.json").exists());
        assert!(files.join("kept.json").is_file());
        acme.asset_get(AssetIdInput {
            asset_id: "keep".into(),
        })
        .unwrap();
        acme.artifact_get(ArtifactIdInput { id: kept }).unwrap();
        let left = acme
            .memory_get(crate::memory::tests::every_message("s"))
            .unwrap();
        assert_eq!(left.messages.len(), 1);
        assert_eq!(left.messages[0].0["content"], "x");
        // Nothing left to sweep.
        let again = acme.gc().unwrap();
        assert_eq!(
            (again.messages, again.assets, again.artifacts.records),
            (0, 0, 0)
        );
    }

    #[test]
    fn forget_deletes_each_named_part_and_a_namespace_only_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let acme = service(dir.path(), "acme");
        let globex = service(dir.path(), "globex");
        for (s, name) in [(&acme, "acme"), (&globex, "globex")] {
            put(s, "u1/a", ExpiryInput::default());
            put(s, "u1/b", ExpiryInput::default());
            put(s, "u2/a", ExpiryInput::default());
            // Storage ids differ by namespace: the artifact store keeps a file while a record
            // of any namespace names the same storage id (docs/reference/artifacts.md).
            save(
                s,
                "u1-chat",
                &format!("u1-{name}.json"),
                ExpiryInput::default(),
            );
            save(
                s,
                "u2-chat",
                &format!("u2-{name}.json"),
                ExpiryInput::default(),
            );
            add(s, "s1");
            add(s, "s2");
        }
        let out = acme
            .forget(ForgetInput {
                session_id: Some("s1".into()),
                asset_prefix: Some("u1/".into()),
                artifact_scope_prefix: Some("u1-".into()),
                ..ForgetInput::default()
            })
            .unwrap();
        assert_eq!(
            out.memory,
            MemoryForgotten {
                threads: 1,
                messages: 1
            }
        );
        assert_eq!(out.assets, 2);
        assert_eq!(out.artifacts.records, 1);
        assert_eq!(out.artifacts.content_removed, 1);
        let sessions = acme.memory_sessions(SessionListInput::default()).unwrap();
        assert_eq!(sessions.sessions.len(), 1);
        assert!(
            acme.asset_get(AssetIdInput {
                asset_id: "u1/a".into()
            })
            .is_err()
        );
        acme.asset_get(AssetIdInput {
            asset_id: "u2/a".into(),
        })
        .unwrap();
        assert!(
            !dir.path()
                .join("artifacts/.namespaces/acme/u1.json")
                .exists()
        );

        // Refusals say what to give.
        for (input, needle) in [
            (ForgetInput::default(), "name what to forget"),
            (
                ForgetInput {
                    asset_prefix: Some(String::new()),
                    ..ForgetInput::default()
                },
                "must not be empty",
            ),
            (
                ForgetInput {
                    namespace: Some("globex".into()),
                    ..ForgetInput::default()
                },
                "give its own name",
            ),
            (
                ForgetInput {
                    namespace: Some("acme".into()),
                    user_id: Some("u".into()),
                    ..ForgetInput::default()
                },
                "namespace alone",
            ),
        ] {
            let error = acme.forget(input).unwrap_err();
            assert_eq!(error.code(), "invalid_input");
            assert!(error.to_string().contains(needle), "{error}");
        }

        let all = acme
            .forget(ForgetInput {
                namespace: Some("acme".into()),
                ..ForgetInput::default()
            })
            .unwrap();
        assert_eq!(
            (all.memory.threads, all.assets, all.artifacts.records),
            (1, 1, 1)
        );
        assert!(acme.stores().threads().unwrap().is_empty());
        assert!(acme.stores().assets().list_ids(None).unwrap().is_empty());
        // The other namespace is whole.
        assert_eq!(globex.stores().threads().unwrap().len(), 2);
        assert_eq!(globex.stores().assets().list_ids(None).unwrap().len(), 3);
        assert!(
            dir.path()
                .join("artifacts/.namespaces/globex/u1-globex.json")
                .is_file()
        );
    }
}
