//! Reference operations: substitute references in tool-call parameters, and render markers in
//! text (docs/reference/rest.md#references, docs/reference/assets.md#tool-call-parameters).

use mnemon_refs::{CommandSpec, Limits, Mode, render_limited, resolve_params_limited};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::assets::json_view;
use crate::error::OpsError;
use crate::service::Service;

/// A command's declaration: which parameters accept asset references.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CommandSpecBody {
    /// The command's name.
    pub name: String,
    /// What the command does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The parameters, in order.
    #[serde(default)]
    pub parameters: Vec<ParameterSpecBody>,
}

/// One parameter of a [`CommandSpecBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ParameterSpecBody {
    /// The parameter's name.
    pub name: String,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether a reference given for it is replaced by the value it references.
    #[serde(default)]
    pub asset_ref_acceptable: bool,
}

/// Input of [`Service::refs_resolve_params`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResolveParamsInput {
    /// The command spec.
    pub spec: CommandSpecBody,
    /// The tool call's parameters: a JSON object of name → value.
    pub params: serde_json::Value,
    /// Fail on a reference in a parameter that does not accept references, instead of passing
    /// it through.
    #[serde(default)]
    pub strict: bool,
}

/// Output of [`Service::refs_resolve_params`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ResolveParamsOutput {
    /// The parameters with every accepted reference replaced by its value (bytes as `data:`
    /// URLs).
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// Input of [`Service::refs_render`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RenderInput {
    /// Text with `<|asset://…|>` markers.
    pub text: String,
}

/// A marker left as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UnresolvedMarker {
    /// Its first byte in the input text.
    pub start: usize,
    /// The byte after its last.
    pub end: usize,
    /// The marker as written.
    pub marker: String,
    /// Why it was left.
    pub message: String,
}

/// Output of [`Service::refs_render`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RenderOutput {
    /// The text with every resolvable marker replaced.
    pub text: String,
    /// The markers left as written, in order.
    pub unresolved: Vec<UnresolvedMarker>,
}

impl Service {
    /// The limits of one render or substitution: the service's output cap, and at most
    /// [`DEFAULT_MAX_REFERENCES`](mnemon_refs::DEFAULT_MAX_REFERENCES) references.
    fn refs_limits(&self) -> Limits {
        Limits::default().with_max_output_bytes(self.max_result_bytes())
    }

    /// Substitutes references in tool-call parameters as the spec allows: all or nothing.
    ///
    /// At most 10,000 references per call, each distinct one resolved once, and at most
    /// [`max_result_bytes`](Service::max_result_bytes) of substituted parameters as JSON:
    /// past either, a 400-kind error (`too_many_references`, `result_too_large`).
    pub fn refs_resolve_params(
        &self,
        input: ResolveParamsInput,
    ) -> Result<ResolveParamsOutput, OpsError> {
        // Through the spec's own parser, so its checks (empty or repeated names) apply.
        let text = serde_json::to_string(&input.spec)
            .map_err(|e| OpsError::invalid(format!("the spec cannot be written as JSON: {e}")))?;
        let spec = CommandSpec::from_json(&text)?;
        let mode = if input.strict {
            Mode::Strict
        } else {
            Mode::Lenient
        };
        let resolved = resolve_params_limited(
            &spec,
            &input.params,
            self.stores().assets(),
            mode,
            self.refs_limits(),
        )?;
        Ok(ResolveParamsOutput {
            params: resolved
                .iter()
                .map(|(k, v)| (k.clone(), json_view(v)))
                .collect(),
        })
    }

    /// Replaces each resolvable marker in the text by its value, rendered for people.
    ///
    /// At most 10,000 markers per text, each distinct reference resolved once, and at most
    /// [`max_result_bytes`](Service::max_result_bytes) of output (the text, and the markers left
    /// as written with their messages): past either, a 400-kind error (`too_many_references`,
    /// `result_too_large`).
    pub fn refs_render(&self, input: RenderInput) -> Result<RenderOutput, OpsError> {
        let rendered = render_limited(&input.text, self.stores().assets(), self.refs_limits())?;
        Ok(RenderOutput {
            text: rendered.text,
            unresolved: rendered
                .unresolved
                .into_iter()
                .map(|u| {
                    // A marker left because the storage failed: as an operation's 503, its
                    // details (the database's host and user, a file) are the log's
                    // (`OpsError::withheld_message`); the caller's own mistakes say what to fix.
                    let message = if u.error.is_caller_error() {
                        u.error.to_string()
                    } else {
                        tracing::warn!(error = %u.error, "a marker was left: the storage failed");
                        MARKER_WITHHELD.to_owned()
                    };
                    UnresolvedMarker {
                        start: u.span.start,
                        end: u.span.end,
                        marker: u.marker,
                        message,
                    }
                })
                .collect(),
        })
    }
}

/// The message of a marker a render left because the asset could not be read (the storage
/// failed, or holds damaged data): the storage's own names its files and hosts. At most
/// [`mnemon_refs::WITHHELD_MESSAGE_BYTES`], which the render charged for it.
const MARKER_WITHHELD: &str = "the asset could not be read (the storage failed, or holds damaged \
     data); retrying may work, and the server's log has the details";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;
    use crate::assets::AssetPutBytesInput;

    /// The render charged at most this much for the message it sends instead of the storage's.
    #[test]
    fn the_withheld_marker_message_fits_its_charge() {
        assert!(MARKER_WITHHELD.len() <= mnemon_refs::WITHHELD_MESSAGE_BYTES);
        assert!(!MARKER_WITHHELD.contains("  "), "{MARKER_WITHHELD}");
    }

    /// 32 MiB, the default cap on what one call builds.
    const CAP: usize = 32 * 1024 * 1024;

    /// A service over a fresh data directory holding `big` (1 MiB of PNG bytes, 1.4 MB as a
    /// `data:` URL) and `small` (the bytes `x`, as text).
    fn service() -> (tempfile::TempDir, Service) {
        let dir = tempfile::tempdir().unwrap();
        let service = Service::new(crate::Stores::open(dir.path()).unwrap());
        for (id, media, data) in [
            ("big", "image/png", vec![7u8; 1024 * 1024]),
            ("small", "text/plain", b"x".to_vec()),
        ] {
            service
                .asset_put_bytes(AssetPutBytesInput {
                    asset_id: id.into(),
                    content_type: Some(media.into()),
                    data,
                })
                .unwrap();
        }
        (dir, service)
    }

    /// The error of a call expected to fail; on success, a short panic (the output is large).
    fn refused<T>(outcome: Result<T, OpsError>) -> OpsError {
        match outcome {
            Ok(_) => panic!("the call succeeded; it should have been refused"),
            Err(error) => error,
        }
    }

    /// A spec whose `n` parameters `p0`… all accept references, and parameters giving each
    /// `reference`.
    fn many_params(n: usize, reference: &str) -> ResolveParamsInput {
        ResolveParamsInput {
            spec: CommandSpecBody {
                name: "t".into(),
                description: None,
                parameters: (0..n)
                    .map(|i| ParameterSpecBody {
                        name: format!("p{i}"),
                        description: None,
                        asset_ref_acceptable: true,
                    })
                    .collect(),
            },
            params: serde_json::Value::Object(
                (0..n)
                    .map(|i| (format!("p{i}"), serde_json::Value::from(reference)))
                    .collect(),
            ),
            strict: false,
        }
    }

    /// 25 markers of a 1 MiB image would render 35 MB: refused with a 400 that names the limit
    /// and the way under it, instead of building it (a 2 MiB body of such markers asked for
    /// hundreds of gigabytes).
    #[test]
    fn a_render_larger_than_the_cap_is_refused() {
        let (_dir, service) = service();
        let text = "<|asset://big/content|>\n".repeat(25);
        let err = refused(service.refs_render(RenderInput { text }));
        assert_eq!(err.code(), "result_too_large", "{err}");
        assert_eq!(err.kind(), ErrorKind::BadRequest);
        let message = err.to_string();
        assert!(message.contains(&CAP.to_string()), "{message}");
        assert!(message.contains("fewer markers"), "{message}");
        // 20 of them (28 MB) fit.
        let text = "<|asset://big/content|>\n".repeat(20);
        let out = service.refs_render(RenderInput { text }).unwrap();
        assert!(out.text.len() > 20 * 1024 * 1024 && out.text.len() < CAP);
        assert!(out.unresolved.is_empty());
    }

    /// At most 10,000 markers are rendered per call, however small their values.
    #[test]
    fn a_render_with_too_many_markers_is_refused() {
        let (_dir, service) = service();
        let text = "<|asset://small/content|>".repeat(10_000);
        let out = service.refs_render(RenderInput { text }).unwrap();
        assert_eq!(out.text, "x".repeat(10_000));
        let text = "<|asset://small/content|>".repeat(10_001);
        let err = refused(service.refs_render(RenderInput { text }));
        assert_eq!(err.code(), "too_many_references", "{err}");
        assert_eq!(err.kind(), ErrorKind::BadRequest);
        let message = err.to_string();
        assert!(message.contains("more than 10000 markers"), "{message}");
    }

    /// Parameters are capped as a render is: by the size of the substituted parameters as JSON
    /// and by the number of references.
    #[test]
    fn parameters_larger_than_the_cap_or_with_too_many_references_are_refused() {
        let (_dir, service) = service();
        let err = refused(service.refs_resolve_params(many_params(25, "asset://big/content")));
        assert_eq!(err.code(), "result_too_large", "{err}");
        assert_eq!(err.kind(), ErrorKind::BadRequest);
        assert!(err.to_string().contains(&CAP.to_string()), "{err}");
        let out = service
            .refs_resolve_params(many_params(20, "asset://big/content"))
            .unwrap();
        assert_eq!(out.params.len(), 20);

        let out = service
            .refs_resolve_params(many_params(10_000, "asset://small/content"))
            .unwrap();
        assert_eq!(out.params.len(), 10_000);
        let err =
            refused(service.refs_resolve_params(many_params(10_001, "asset://small/content")));
        assert_eq!(err.code(), "too_many_references", "{err}");
        assert_eq!(err.kind(), ErrorKind::BadRequest);
    }

    /// The service's limit is the one its server passes (`--max-result-bytes`).
    #[test]
    fn the_limit_is_the_services() {
        let (_dir, service) = service();
        let service = service.with_max_result_bytes(100);
        assert_eq!(service.max_result_bytes(), 100);
        let out = service
            .refs_render(RenderInput {
                text: "<|asset://small/content|>".repeat(100),
            })
            .unwrap();
        assert_eq!(out.text.len(), 100);
        let text = "<|asset://small/content|>".repeat(101);
        let err = refused(service.refs_render(RenderInput { text }));
        assert!(err.to_string().contains("limit of 100 bytes"), "{err}");
        let err = refused(service.refs_resolve_params(many_params(10, "asset://small/content")));
        assert_eq!(err.code(), "result_too_large");
        assert!(err.to_string().contains("limit of 100 bytes"), "{err}");
    }
}
