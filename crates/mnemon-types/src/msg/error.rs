//! Why a message could not be built, converted or decoded.

/// Why a message could not be built, converted or decoded.
///
/// `p` is the position of the offending item in its batch or document (0 for a single message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MsgError {
    /// A required key is absent.
    #[error("item {p}: missing required field \"{field}\"")]
    MissingField {
        /// Position of the item.
        p: usize,
        /// The missing key.
        field: String,
    },
    /// A key has a value of the wrong type or shape.
    #[error("item {p}: field \"{field}\" must be {expected}")]
    InvalidField {
        /// Position of the item.
        p: usize,
        /// The offending key.
        field: String,
        /// What the value must be.
        expected: String,
    },
    /// An item is not a JSON object.
    #[error("item {p}: expected a JSON object")]
    NotAnObject {
        /// Position of the item.
        p: usize,
    },
    /// An extra used a core or marker key.
    #[error("key \"{key}\" is reserved")]
    ReservedKey {
        /// The key.
        key: String,
    },
    /// A `__type` other than `Msg`, `Tht` or `List`.
    #[error("deserialization of type \"{name}\" is not supported")]
    UnknownType {
        /// The `__type` value.
        name: String,
    },
    /// A serialized message without any format marker.
    #[error("serialized message has no \"__type\" or \"__module__\"/\"__name__\" key")]
    MissingType,
    /// A 0.1.x object of a class other than `agentscope.message.msg.Msg`.
    #[error("unsupported serialized class {module}.{name}")]
    UnsupportedClass {
        /// The `__module__` value.
        module: String,
        /// The `__name__` value.
        name: String,
    },
    /// The text is not JSON.
    #[error("invalid JSON: {detail}")]
    InvalidJson {
        /// The parser's message.
        detail: String,
    },
}

/// The error for an `embedding` that is not `null` or a non-empty array of finite numbers.
pub(super) fn invalid_embedding(p: usize) -> MsgError {
    MsgError::InvalidField {
        p,
        field: super::EMBEDDING_KEY.into(),
        expected: "null or a non-empty array of finite numbers".into(),
    }
}

/// The error for an `id` that is not a non-empty string.
pub(super) fn empty_id(p: usize) -> MsgError {
    MsgError::InvalidField {
        p,
        field: "id".into(),
        expected: "a non-empty string".into(),
    }
}
