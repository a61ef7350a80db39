//! The crate's error type. Messages name the parameter or marker and say how to fix it.
//!
//! Each message is complete on its own (it includes the underlying error's text), so inner
//! errors are not also exposed as `source()`: error reporters that walk the chain (anyhow's
//! `{:#}`, which the CLI uses) would print them twice. Reach the inner [`StoreError`] by
//! matching on the variant.

use std::path::PathBuf;

use mnemon_store::StoreError;

/// Everything that can go wrong while reading a command spec, substituting references in tool
/// parameters, or scanning markers in text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RefsError {
    /// A command spec is not valid YAML or JSON, or does not have the spec's shape.
    #[error("the command spec is not valid {format}: {detail}")]
    SpecSyntax {
        /// `YAML` or `JSON`.
        format: &'static str,
        /// The parser's message.
        detail: String,
    },
    /// A command spec file could not be read: it is missing, unreadable or not UTF-8 text.
    #[error(
        "cannot read the command spec file {}: {error}; check the path and its permissions",
        .path.display()
    )]
    SpecUnreadable {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// A command spec parses but breaks a rule (an empty or repeated parameter name).
    #[error("invalid command spec: {detail}")]
    SpecInvalid {
        /// What is wrong.
        detail: String,
    },
    /// The tool-call parameters are not a JSON object.
    #[error("tool-call parameters must be a JSON object of name → value, found {found}")]
    ParamsNotAnObject {
        /// What they were.
        found: &'static str,
    },
    /// Something written as a reference is not a valid one.
    #[error("parameter {parameter:?} holds an invalid asset reference: {detail}")]
    InvalidReference {
        /// The parameter.
        parameter: String,
        /// What is wrong with the reference.
        detail: String,
    },
    /// Strict mode: a reference in a parameter that does not accept references.
    #[error(
        "parameter {parameter:?} does not accept asset references, but holds {reference}; pass the value itself instead"
    )]
    ReferenceNotAccepted {
        /// The parameter.
        parameter: String,
        /// The reference, as a URL.
        reference: String,
    },
    /// A reference in a parameter does not resolve.
    #[error("parameter {parameter:?}: {error}")]
    Unresolved {
        /// The parameter.
        parameter: String,
        /// Why it does not resolve. Named `error`, not `source`, because thiserror would make a
        /// field called `source` the error's `source()` (module docs).
        error: StoreError,
    },
    /// A marker's content is neither an asset URL nor a JSON reference.
    #[error("malformed marker: {detail}")]
    MalformedMarker {
        /// What is wrong with it.
        detail: String,
    },
    /// A `<|` with no `|>` to close it before the next `<|` or the end of the text.
    #[error(
        "unterminated marker: \"<|\" is not closed by \"|>\" before {before}; close it, or write the text without \"<|\""
    )]
    UnterminatedMarker {
        /// `the next "<|"` or `the end of the text`.
        before: &'static str,
    },
    /// A well-formed marker whose reference does not resolve.
    #[error("{0}")]
    MarkerUnresolved(StoreError),
    /// A text holds more markers than one render may resolve
    /// ([`Limits::max_references`](crate::Limits::max_references)).
    #[error(
        "the text holds more than {limit} markers, the most one render resolves; split the text and render the parts in separate calls"
    )]
    TooManyMarkers {
        /// The limit (the scan stops past it, so the text's own count is not known).
        limit: usize,
    },
    /// Tool-call parameters ask to substitute more references than one call may resolve
    /// ([`Limits::max_references`](crate::Limits::max_references)).
    #[error(
        "the parameters hold {found} references to substitute, more than the {limit} one call resolves; substitute them in separate calls"
    )]
    TooManyReferences {
        /// How many references the parameters ask to substitute.
        found: usize,
        /// The limit.
        limit: usize,
    },
    /// The rendered text would be larger than the limit
    /// ([`Limits::max_output_bytes`](crate::Limits::max_output_bytes)); nothing past the
    /// limit was built.
    #[error(
        "the rendered text would be larger than the limit of {limit} bytes (the text with each marker replaced by its value, plus the markers left as written and why); render fewer markers per call, or point them at smaller parts of the assets"
    )]
    RenderTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The references of one call read assets again, after dropping them for room, for more
    /// than one call may: large assets referenced in turn, more than the call's memory for
    /// assets keeps (docs/limits.md).
    #[error(
        "the references of this call read assets again, after dropping them for room, for more than {limit} bytes (large assets referenced in turn, more than one call keeps in memory); resolve fewer references per call, or order the markers so that those into one asset come together"
    )]
    ReadTooLarge {
        /// The limit, in bytes of assets' value trees read.
        limit: usize,
    },
    /// The substituted parameters would be larger than the limit
    /// ([`Limits::max_output_bytes`](crate::Limits::max_output_bytes)); nothing past the
    /// limit was built.
    #[error(
        "the parameters with their references substituted would be larger than the limit of {limit} bytes of JSON (bytes count as data: URLs); substitute fewer references per call, or point them at smaller parts of the assets"
    )]
    ParamsTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
}

impl RefsError {
    /// Whether the caller can fix this by changing the input (everything but a storage
    /// failure).
    pub fn is_caller_error(&self) -> bool {
        match self {
            RefsError::Unresolved { error, .. } | RefsError::MarkerUnresolved(error) => {
                error.is_caller_error()
            }
            _ => true,
        }
    }
}
