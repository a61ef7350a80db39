//! Reference operations: substitute references in tool-call parameters, and render markers in
//! text (docs/reference/rest.md#references, docs/reference/assets.md#tool-call-parameters).

use mnemon_refs::{CommandSpec, Mode, render_default, resolve_params};
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
    /// Substitutes references in tool-call parameters as the spec allows: all or nothing.
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
        let resolved = resolve_params(&spec, &input.params, self.stores().assets(), mode)?;
        Ok(ResolveParamsOutput {
            params: resolved
                .iter()
                .map(|(k, v)| (k.clone(), json_view(v)))
                .collect(),
        })
    }

    /// Replaces each resolvable marker in the text by its value, rendered for people.
    pub fn refs_render(&self, input: RenderInput) -> Result<RenderOutput, OpsError> {
        let rendered = render_default(&input.text, self.stores().assets());
        Ok(RenderOutput {
            text: rendered.text,
            unresolved: rendered
                .unresolved
                .into_iter()
                .map(|u| UnresolvedMarker {
                    start: u.span.start,
                    end: u.span.end,
                    marker: u.marker,
                    message: u.error.to_string(),
                })
                .collect(),
        })
    }
}
