//! Errors of the data model. Messages say what was wrong and how to fix it.

/// Why a string is not a valid `asset://` URL (docs/reference/assets.md#url-grammar).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// The string does not start with `asset://`.
    #[error(
        "not an asset URL: {found:?} does not start with \"asset://\"; write references as asset://<asset_id>/<field>/<field>..."
    )]
    WrongScheme {
        /// The start of the offending string.
        found: String,
    },
    /// Nothing between `asset://` and the first `/`.
    #[error(
        "the asset id is empty; write the asset's id right after \"asset://\", e.g. asset://a1/content"
    )]
    EmptyId,
    /// A `?` appeared; asset URLs have no query part.
    #[error(
        "'?' at byte {position} is not allowed in an asset URL (there is no query part); percent-encode it as %3F if it belongs to a key"
    )]
    QueryNotAllowed {
        /// Byte offset in the URL.
        position: usize,
    },
    /// A `#` appeared; asset URLs have no fragment.
    #[error(
        "'#' at byte {position} is not allowed in an asset URL (there is no fragment); percent-encode it as %23 if it belongs to a key"
    )]
    FragmentNotAllowed {
        /// Byte offset in the URL.
        position: usize,
    },
    /// White space appeared unencoded.
    #[error(
        "white space {found:?} at byte {position} is not allowed in an asset URL; percent-encode a space as %20"
    )]
    WhitespaceNotAllowed {
        /// Byte offset in the URL.
        position: usize,
        /// The white-space character.
        found: char,
    },
    /// A character outside RFC 3986 `pchar` appeared unencoded.
    #[error(
        "character {found:?} at byte {position} is not allowed in an asset URL; percent-encode it (its UTF-8 bytes as %XX)"
    )]
    InvalidCharacter {
        /// Byte offset in the URL.
        position: usize,
        /// The character.
        found: char,
    },
    /// A `%` not followed by two hex digits.
    #[error(
        "bad percent escape {found:?} at byte {position}: '%' must be followed by two hex digits; write a literal '%' as %25"
    )]
    BadPercentEscape {
        /// Byte offset of the `%`.
        position: usize,
        /// The escape as written.
        found: String,
    },
    /// The percent-decoded bytes of a part are not UTF-8.
    #[error("{part:?} does not decode to valid UTF-8; percent-escapes must encode UTF-8 text")]
    InvalidUtf8 {
        /// The part (id or segment) as written.
        part: String,
    },
}

/// Errors from building, converting or flattening assets.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TypesError {
    /// An asset reference URL did not parse.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// An asset's id is the empty string.
    #[error("asset_id must not be empty; omit it to have a UUID generated")]
    EmptyAssetId,
    /// A known asset field has the wrong JSON type.
    #[error("asset field {field:?} must be {expected}, found {found}")]
    FieldType {
        /// The field name.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
        /// What it was.
        found: &'static str,
    },
    /// An asset is not a JSON object.
    #[error("an asset must be a JSON object, found {found}")]
    NotAnObject {
        /// What it was.
        found: &'static str,
    },
    /// The flatten separator cannot give unambiguous paths.
    #[error(
        "invalid separator {sep:?}: use exactly one character other than '~' and the digits, such as \"/\" or \".\""
    )]
    InvalidSeparator {
        /// The separator given.
        sep: String,
    },
    /// A flattened map cannot be rebuilt into a tree.
    #[error("cannot unflatten path {path:?}: {reason}")]
    Unflatten {
        /// The offending flattened path.
        path: String,
        /// What is inconsistent about it.
        reason: String,
    },
}
