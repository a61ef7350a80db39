//! Substituting references in tool-call parameters, driven by a command spec
//! (docs/reference/assets.md#tool-call-parameters).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use mnemon_store::AssetStore;
use mnemon_types::{AssetRef, Map, Value};
use serde::{Deserialize, Serialize};

use crate::detect::{Detected, detect_reference};
use crate::error::RefsError;
use crate::fetched::Fetched;
use crate::limits::Limits;
use crate::size::{json_len, json_str_len};

/// A plugin command's declaration: its name and parameters.
///
/// Read from YAML or JSON; fields other than those below (a parameter's `type`, say) are
/// ignored, so richer specs written for other tools load too.
///
/// ```
/// let spec = mnemon_refs::CommandSpec::from_yaml(
///     "name: resize_image\nparameters:\n  - name: image\n    asset_ref_acceptable: true\n  - name: width\n",
/// )?;
/// assert!(spec.accepts_references("image"));
/// assert!(!spec.accepts_references("width"));
/// # Ok::<(), mnemon_refs::RefsError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandSpec {
    /// The command's name.
    pub name: String,
    /// What the command does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The parameters, in order.
    #[serde(default)]
    pub parameters: Vec<ParameterSpec>,
}

/// One parameter of a [`CommandSpec`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParameterSpec {
    /// The parameter's name.
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether a reference given for it is replaced by the value it references.
    #[serde(default)]
    pub asset_ref_acceptable: bool,
}

impl CommandSpec {
    /// Parses a spec written in YAML.
    pub fn from_yaml(text: &str) -> Result<CommandSpec, RefsError> {
        let spec: CommandSpec =
            serde_yaml_ng::from_str(text).map_err(|e| RefsError::SpecSyntax {
                format: "YAML",
                detail: e.to_string(),
            })?;
        spec.validated()
    }

    /// Parses a spec written in JSON.
    pub fn from_json(text: &str) -> Result<CommandSpec, RefsError> {
        let spec: CommandSpec = serde_json::from_str(text).map_err(|e| RefsError::SpecSyntax {
            format: "JSON",
            detail: e.to_string(),
        })?;
        spec.validated()
    }

    /// Reads a spec file: `.json` files as JSON, anything else (`.yaml`, `.yml`) as YAML.
    pub fn load(path: &Path) -> Result<CommandSpec, RefsError> {
        let text = std::fs::read_to_string(path).map_err(|error| RefsError::SpecUnreadable {
            path: path.to_owned(),
            error,
        })?;
        let is_json = path
            .extension()
            .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
        if is_json {
            Self::from_json(&text)
        } else {
            Self::from_yaml(&text)
        }
    }

    fn validated(self) -> Result<CommandSpec, RefsError> {
        let invalid = |detail: String| Err(RefsError::SpecInvalid { detail });
        if self.name.trim().is_empty() {
            return invalid("the command's name is empty".to_owned());
        }
        let mut seen = HashSet::new();
        for (i, p) in self.parameters.iter().enumerate() {
            if p.name.is_empty() {
                return invalid(format!(
                    "parameter {i} of {:?} has an empty name",
                    self.name
                ));
            }
            if !seen.insert(p.name.as_str()) {
                return invalid(format!(
                    "parameter {:?} of {:?} is declared twice",
                    p.name, self.name
                ));
            }
        }
        Ok(self)
    }

    /// The declared parameter named `name`.
    pub fn parameter(&self, name: &str) -> Option<&ParameterSpec> {
        self.parameters.iter().find(|p| p.name == name)
    }

    /// Whether the parameter is declared with `asset_ref_acceptable: true`.
    pub fn accepts_references(&self, name: &str) -> bool {
        self.parameter(name).is_some_and(|p| p.asset_ref_acceptable)
    }
}

/// What to do with a reference in a parameter that does not accept references.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Leave it untouched; the tool receives the reference as written.
    #[default]
    Lenient,
    /// Fail, naming the parameter.
    Strict,
}

/// Replaces each reference in a parameter that accepts references by the value it references
/// (docs/reference/assets.md#tool-call-parameters). Parameters the spec does not declare are
/// treated as not accepting references.
///
/// Either every reference resolves and the full parameter map is returned, or an error names
/// the first parameter that failed and nothing is substituted. Each distinct reference is
/// resolved once; parameters repeating it get copies of its value (byte buffers shared).
///
/// There is no limit on the references or the output: for parameters the caller trusts.
/// Parameters from a client go through [`resolve_params_limited`].
///
/// ```
/// use mnemon_refs::{resolve_params, CommandSpec, Mode};
/// use mnemon_store::{AssetStore, InMemoryStore};
/// use mnemon_types::Asset;
/// use serde_json::json;
///
/// let store = InMemoryStore::new();
/// store.put(&Asset::from_json(json!({"asset_id": "a1", "content": {"w": 640}}))?)?;
/// let spec = CommandSpec::from_json(r#"{"name": "resize", "parameters": [
///     {"name": "width", "asset_ref_acceptable": true}, {"name": "label"}]}"#)?;
/// let params = json!({"width": "<|asset://a1/content/w|>", "label": "asset://a1"});
/// let out = resolve_params(&spec, &params, &store, Mode::Lenient)?;
/// assert_eq!(out["width"].to_json(), Some(json!(640)));
/// assert_eq!(out["label"].as_str(), Some("asset://a1"));
/// assert!(resolve_params(&spec, &params, &store, Mode::Strict).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn resolve_params(
    spec: &CommandSpec,
    params: &serde_json::Value,
    store: &dyn AssetStore,
    mode: Mode,
) -> Result<Map, RefsError> {
    resolve_params_limited(spec, params, store, mode, Limits::NONE)
}

/// [`resolve_params`] within `limits`: for parameters from a client.
///
/// Fails with [`RefsError::TooManyReferences`] before anything is resolved when more than
/// [`Limits::max_references`] parameters ask for a reference to be substituted, and with
/// [`RefsError::ParamsTooLarge`] as soon as the substituted parameters, written as compact JSON
/// (bytes as `data:` URLs, as a server sends them), would pass [`Limits::max_output_bytes`].
/// Each value is measured before it is copied into the output, so a refused call never holds
/// more than the limit of substituted values.
pub fn resolve_params_limited(
    spec: &CommandSpec,
    params: &serde_json::Value,
    store: &dyn AssetStore,
    mode: Mode,
    limits: Limits,
) -> Result<Map, RefsError> {
    let serde_json::Value::Object(params) = params else {
        return Err(RefsError::ParamsNotAnObject {
            found: Value::from_json(params.clone()).kind(),
        });
    };
    // A set, not `spec.accepts_references`: that walks the spec's list for each parameter,
    // time in the product of two sizes a client chooses.
    let accepting: HashSet<&str> = spec
        .parameters
        .iter()
        .filter(|p| p.asset_ref_acceptable)
        .map(|p| p.name.as_str())
        .collect();
    let detected: Vec<_> = params
        .iter()
        .map(|(name, value)| {
            let accepts = accepting.contains(name.as_str());
            (name, value, accepts, detect_reference(value))
        })
        .collect();
    let references = detected
        .iter()
        .filter(|(_, _, accepts, d)| *accepts && matches!(d, Detected::Reference(_)))
        .count();
    if references > limits.max_references {
        return Err(RefsError::TooManyReferences {
            found: references,
            limit: limits.max_references,
        });
    }
    // The output as JSON: braces, and a comma between entries; each entry adds `"name":value`,
    // measured before the value joins the output (or, for a repeated reference, is copied).
    let mut size = 2 + params.len().saturating_sub(1);
    let mut measure = |name: &str, value: &Value| -> Result<(), RefsError> {
        let room = limits.max_output_bytes.saturating_sub(size);
        let entry = json_str_len(name) + 1;
        match json_len(value, room.saturating_sub(entry)) {
            Some(len) if entry <= room => {
                size += entry + len;
                Ok(())
            }
            _ => Err(RefsError::ParamsTooLarge {
                limit: limits.max_output_bytes,
            }),
        }
    };
    // Each reference resolved so far, with the parameter that holds its value in `out`.
    let mut resolved: HashMap<AssetRef, &str> = HashMap::new();
    let mut fetched = Fetched::new(store);
    let mut out = Map::with_capacity(params.len());
    for (name, value, accepts, detected) in detected {
        let substituted = match detected {
            Detected::Plain => Value::from_json(value.clone()),
            Detected::Reference(reference) if accepts => {
                if let Some(first) = resolved.get(&reference).and_then(|first| out.get(*first)) {
                    measure(name, first)?;
                    let copy = first.clone();
                    out.insert(name.clone(), copy);
                    continue;
                }
                let value =
                    fetched
                        .resolve(&reference)?
                        .map_err(|error| RefsError::Unresolved {
                            parameter: name.clone(),
                            error,
                        })?;
                resolved.insert(reference, name.as_str());
                value
            }
            Detected::Invalid(detail) if accepts => {
                return Err(RefsError::InvalidReference {
                    parameter: name.clone(),
                    detail,
                });
            }
            detected => match mode {
                Mode::Lenient => Value::from_json(value.clone()),
                Mode::Strict => {
                    return Err(RefsError::ReferenceNotAccepted {
                        parameter: name.clone(),
                        reference: match detected {
                            Detected::Reference(r) => r.to_url(),
                            _ => value.to_string(),
                        },
                    });
                }
            },
        };
        measure(name, &substituted)?;
        out.insert(name.clone(), substituted);
    }
    if size > limits.max_output_bytes {
        return Err(RefsError::ParamsTooLarge {
            limit: limits.max_output_bytes,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mnemon_store::{InMemoryStore, ResolveError, StoreError};
    use mnemon_types::Asset;
    use serde_json::json;

    const SPEC: &str = "
name: resize_image
description: resizes an image
parameters:
  - name: image
    description: the image to resize
    asset_ref_acceptable: true
    type: bytes
  - name: width
    description: target width in pixels
";

    fn store() -> InMemoryStore {
        let s = InMemoryStore::new();
        s.put(
            &Asset::from_json(json!({"asset_id": "a1", "content": {"image": "PNG", "w": 5}}))
                .unwrap(),
        )
        .unwrap();
        s
    }

    #[test]
    fn yaml_and_json_specs_agree() {
        let yaml = CommandSpec::from_yaml(SPEC).unwrap();
        let json = CommandSpec::from_json(&serde_json::to_string(&yaml).unwrap()).unwrap();
        assert_eq!(yaml, json);
        assert_eq!(yaml.parameters.len(), 2);
        assert!(yaml.accepts_references("image"));
        assert!(!yaml.accepts_references("width"));
        assert!(!yaml.accepts_references("undeclared"));
    }

    #[test]
    fn malformed_specs_are_clear_errors() {
        let cases = [
            ("name: [unclosed", "YAML"),
            ("parameters: []", "name"),
            ("name: x\nparameters: 5", "sequence"),
            ("name: x\nparameters:\n  - description: no name", "name"),
            (
                "name: x\nparameters:\n  - name: a\n  - name: a",
                "declared twice",
            ),
            ("name: ''", "empty"),
            (
                "name: x\nparameters:\n  - name: a\n    asset_ref_acceptable: maybe",
                "bool",
            ),
        ];
        for (text, needle) in cases {
            let err = CommandSpec::from_yaml(text).unwrap_err();
            assert!(err.to_string().contains(needle), "{text:?}: {err}");
        }
        assert!(matches!(
            CommandSpec::from_json("{\"name\": 1}"),
            Err(RefsError::SpecSyntax { format: "JSON", .. })
        ));
    }

    #[test]
    fn unreadable_spec_files_are_their_own_error() {
        let dir = std::env::temp_dir().join(format!("mnemon-refs-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_utf8 = dir.join("latin1.yaml");
        std::fs::write(&not_utf8, b"name: caf\xe9\n").unwrap();
        let good = dir.join("spec.json");
        std::fs::write(&good, r#"{"name": "t"}"#).unwrap();
        let missing = dir.join("missing.yaml");
        for path in [&missing, &dir, &not_utf8] {
            let err = CommandSpec::load(path).unwrap_err();
            let RefsError::SpecUnreadable { path: reported, .. } = &err else {
                panic!("{}: {err:?}", path.display())
            };
            assert_eq!(reported, path);
            let message = err.to_string();
            assert!(
                message.starts_with(&format!(
                    "cannot read the command spec file {}: ",
                    path.display()
                )),
                "{message}"
            );
            assert!(message.ends_with("check the path and its permissions"));
            assert!(err.is_caller_error());
            // The message is complete: no source for reporters to print a second time.
            assert!(std::error::Error::source(&err).is_none());
        }
        assert!(CommandSpec::load(&good).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unresolved_references_carry_their_cause_once() {
        let spec = CommandSpec::from_yaml(SPEC).unwrap();
        let params = json!({"image": "asset://a1/content/imag"});
        let err = resolve_params(&spec, &params, &store(), Mode::Lenient).unwrap_err();
        assert_eq!(
            err.to_string(),
            "parameter \"image\": asset://a1/content has no key \"imag\"; available keys: \"image\", \"w\". Correct the field path and try again."
        );
        assert!(std::error::Error::source(&err).is_none());
    }

    #[test]
    fn accepted_references_are_substituted_others_pass() {
        let spec = CommandSpec::from_yaml(SPEC).unwrap();
        let params = json!({"image": {"asset_id": "a1", "field_path": ["content", "image"]},
                            "width": 300, "extra": "asset://a1"});
        let out = resolve_params(&spec, &params, &store(), Mode::Lenient).unwrap();
        assert_eq!(out["image"].as_str(), Some("PNG"));
        assert_eq!(out["width"].to_json(), Some(json!(300)));
        assert_eq!(out["extra"].as_str(), Some("asset://a1"));
        let keys: Vec<_> = out.keys().collect();
        assert_eq!(keys, ["image", "width", "extra"]);
        // A plain value in an accepting parameter passes through.
        let out = resolve_params(&spec, &json!({"image": "raw"}), &store(), Mode::Strict).unwrap();
        assert_eq!(out["image"].as_str(), Some("raw"));
    }

    /// A spec of `n` parameters `p0`, `p1`, … that all accept references.
    fn accepting(n: usize) -> CommandSpec {
        CommandSpec {
            name: "t".into(),
            description: None,
            parameters: (0..n)
                .map(|i| ParameterSpec {
                    name: format!("p{i}"),
                    description: None,
                    asset_ref_acceptable: true,
                })
                .collect(),
        }
    }

    /// Parameters repeating a reference read the store once per distinct reference.
    #[test]
    fn each_distinct_reference_is_resolved_once() {
        let asset = Asset::from_json(json!({"asset_id": "a1", "content": {"w": 5}})).unwrap();
        let counting = crate::test_store::CountingStore::with(&[asset]);
        let spec = accepting(100);
        let params: serde_json::Map<_, _> = (0..100)
            .map(|i| (format!("p{i}"), json!("asset://a1/content/w")))
            .collect();
        let out = resolve_params(&spec, &params.into(), &counting, Mode::Strict).unwrap();
        assert_eq!(counting.reads(), 1);
        assert_eq!(out.len(), 100);
        assert!(out.values().all(|v| v.to_json() == Some(json!(5))));
    }

    /// The limit is on the parameters as JSON: `{"p0":"PNG","p1":5}` is 19 bytes.
    #[test]
    fn the_substituted_parameters_stay_within_the_limit() {
        let spec = accepting(2);
        let params = json!({"p0": "asset://a1/content/image", "p1": "asset://a1/content/w"});
        let at = |max| Limits::default().with_max_output_bytes(max);
        let out = resolve_params_limited(&spec, &params, &store(), Mode::Strict, at(19)).unwrap();
        assert_eq!(serde_json::to_string(&out).unwrap().len(), 19);
        for max in [0, 1, 2, 10, 18] {
            let err = resolve_params_limited(&spec, &params, &store(), Mode::Strict, at(max))
                .unwrap_err();
            assert!(
                matches!(err, RefsError::ParamsTooLarge { limit } if limit == max),
                "{err}"
            );
        }
        // Parameters passed through count too.
        let plain = json!({"p0": "PNG", "p1": 5});
        assert!(resolve_params_limited(&spec, &plain, &store(), Mode::Strict, at(19)).is_ok());
        assert!(resolve_params_limited(&spec, &plain, &store(), Mode::Strict, at(18)).is_err());
        assert!(resolve_params_limited(&spec, &json!({}), &store(), Mode::Strict, at(2)).is_ok());
    }

    #[test]
    fn too_many_references_are_refused_before_any_is_resolved() {
        let asset = Asset::from_json(json!({"asset_id": "a1", "content": {"w": 5}})).unwrap();
        let counting = crate::test_store::CountingStore::with(&[asset]);
        let spec = accepting(3);
        let limits = Limits::default().with_max_references(2);
        // Only references to substitute count: not plain values, nor undeclared parameters.
        let params = json!({"p0": "asset://a1/content/w", "p1": 7, "p2": "asset://a1/content/w",
                            "other": "asset://a1"});
        assert!(resolve_params_limited(&spec, &params, &counting, Mode::Lenient, limits).is_ok());
        let params = json!({"p0": "asset://a1/content/w", "p1": "asset://a1/content/w",
                            "p2": "asset://zz"});
        let before = counting.reads();
        let err =
            resolve_params_limited(&spec, &params, &counting, Mode::Lenient, limits).unwrap_err();
        assert!(
            matches!(err, RefsError::TooManyReferences { found: 3, limit: 2 }),
            "{err}"
        );
        assert!(err.to_string().contains("separate calls"), "{err}");
        assert_eq!(counting.reads(), before);
    }

    #[test]
    fn strict_mode_names_the_parameter() {
        let spec = CommandSpec::from_yaml(SPEC).unwrap();
        let params =
            json!({"image": "asset://a1/content/image", "width": "<|asset://a1/content/w|>"});
        let err = resolve_params(&spec, &params, &store(), Mode::Strict).unwrap_err();
        assert!(
            matches!(&err, RefsError::ReferenceNotAccepted { parameter, .. } if parameter == "width"),
            "{err}"
        );
        assert!(err.to_string().contains("\"width\""));
    }

    #[test]
    fn one_bad_reference_fails_the_whole_call() {
        let spec = CommandSpec::from_yaml(
            "name: t\nparameters:\n  - {name: a, asset_ref_acceptable: true}\n  - {name: b, asset_ref_acceptable: true}",
        )
        .unwrap();
        let params = json!({"a": "asset://a1/content/w", "b": "asset://a1/content/lables"});
        let err = resolve_params(&spec, &params, &store(), Mode::Lenient).unwrap_err();
        let RefsError::Unresolved { parameter, error } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(parameter, "b");
        assert!(matches!(
            error,
            StoreError::Resolve(ResolveError::KeyNotFound { .. })
        ));
        assert!(err.to_string().contains("available keys: \"image\", \"w\""));
        let err = resolve_params(&spec, &json!({"a": "asset://zz"}), &store(), Mode::Lenient)
            .unwrap_err();
        assert!(err.to_string().contains("\"zz\""), "{err}");
        let err = resolve_params(
            &spec,
            &json!({"a": "asset://a1/x y"}),
            &store(),
            Mode::Lenient,
        )
        .unwrap_err();
        assert!(matches!(err, RefsError::InvalidReference { .. }), "{err}");
        let err = resolve_params(&spec, &json!([1]), &store(), Mode::Lenient).unwrap_err();
        assert!(matches!(
            err,
            RefsError::ParamsNotAnObject { found: "a list" }
        ));
    }
}
