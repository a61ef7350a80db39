//! The crate's error type. `Display` texts are the messages of the library specification, so
//! clients that matched the reference's messages keep working.

/// Everything that can go wrong when loading, changing or querying a library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LibraryError {
    // ---- Loading (docs/reference/library.md#load-errors) ----
    /// The input is not JSON, or not a JSON object.
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// `version` is not an integer, or not 1 after upgrade.
    #[error("Version invalid")]
    VersionInvalid,
    /// A version-0 file without `content`.
    #[error("version 0 library is missing content")]
    MissingContent,
    /// A version-0 file whose `sort.ids` names a key that `content` lacks.
    #[error("sort.ids names unknown bit {0}")]
    UnknownSortId(String),
    /// `embedding_model` missing, not a string, or empty.
    #[error("Invalid model name")]
    InvalidModel,
    /// The stored `omit` is not a string.
    #[error("omit not str as expected")]
    OmitNotString,
    /// `bits` is missing.
    #[error("bits is a required field")]
    MissingBits,
    /// `bits` is not an array.
    #[error("bits not list as expected")]
    BitsNotList,
    /// The stored `omit` is `*` but bits are present.
    #[error("omit configured to omit all bits but they were present")]
    OmitAllButBits,
    /// A bit is not a JSON object.
    #[error("bit {0} is not an object")]
    BitNotObject(usize),
    /// A bit carries a field the stored `omit` names.
    #[error("Expected {0} to be omitted but it was included")]
    FieldNotOmitted(String),
    /// A bit has no `text`.
    #[error("{0} is missing text")]
    MissingText(String),
    /// A bit's `text` is not a string.
    #[error("bit {0} text not str as expected")]
    TextNotString(usize),
    /// A bit has no embedding (missing, null, empty).
    #[error("{0} is missing embedding")]
    MissingEmbedding(String),
    /// A bit's embedding is not a string, not valid base64, or not finite.
    #[error("{id} has an invalid embedding: {detail}")]
    InvalidEmbedding {
        /// The bit id.
        id: String,
        /// What is wrong.
        detail: String,
    },
    /// A bit's embedding has the wrong number of dimensions.
    #[error("{id} had the wrong length of embedding, expected {expected}")]
    WrongEmbeddingLength {
        /// The bit id.
        id: String,
        /// The library's dimension.
        expected: usize,
    },
    /// A bit has no `token_count`.
    #[error("{0} is missing token_count")]
    MissingTokenCount(String),
    /// A bit's `token_count` is not a JSON integer.
    #[error("token_count not int as expected")]
    TokenCountNotInt,
    /// A bit has no `info`.
    #[error("{0} is missing info")]
    MissingInfo(String),
    /// A bit's `info` is not an object.
    #[error("info not dict as expected")]
    InfoNotObject,
    /// A bit's `info` has no `url`.
    #[error("{0} info is missing required url")]
    MissingUrl(String),
    /// A bit's `access_tag` is neither a string nor null.
    #[error("{0} access_tag not str as expected")]
    AccessTagNotString(String),

    // ---- Library operations (docs/reference/library.md#library-api) ----
    /// `extend` with a library of another model.
    #[error("The other library had a different embedding model")]
    DifferentModel,
    /// `extend` with a library of another dimension.
    #[error(
        "The other library's embeddings have {found} dimensions but this library's have {expected}"
    )]
    DifferentDimension {
        /// This library's dimension.
        expected: usize,
        /// The other library's dimension.
        found: usize,
    },
    /// `set_sort` with an unknown value.
    #[error("Illegal sort: {0}")]
    IllegalSort(String),
    /// A directory held no library files.
    #[error("No libraries were in the default library directory.")]
    NoLibraries,

    // ---- Query arguments (docs/reference/library.md#query-arguments and
    // docs/reference/library.md#query-errors) ----
    /// A string argument is not an integer literal.
    #[error("invalid literal for int() with base 10: '{0}'")]
    InvalidIntLiteral(String),
    /// An array or object where an integer was expected.
    #[error("{0} must be an integer")]
    NotAnInteger(&'static str),
    /// `count` is 0.
    #[error("count must be greater than 0")]
    CountZero,
    /// `version` is below 1 or absent.
    #[error("version must be at least 1")]
    VersionTooLow,
    /// The query names another embedding model.
    #[error("Embedding model was {given} but expected {expected}")]
    WrongModel {
        /// The model the query named (`None` when absent).
        given: String,
        /// The library's model.
        expected: String,
    },
    /// `query_embedding` is neither a string nor empty.
    #[error("query_embedding must be str")]
    EmbeddingNotString,
    /// `query_embedding` is not valid base64.
    #[error("query_embedding is not valid base64: {0}")]
    QueryBase64(String),
    /// `query_embedding` decodes to a byte count that is not a multiple of 4.
    #[error("query_embedding decodes to {0} bytes, which is not a whole number of float32 values")]
    QueryByteCount(usize),
    /// `count_type` is neither `bit` nor `token`.
    #[error("count_type {0} is not one of the legal options: {{'bit', 'token'}}")]
    BadCountType(String),
    /// `exact` is neither a boolean nor `"true"` / `"false"` (docs/reference/library.md#query-arguments).
    #[error("exact must be true or false, not {0}")]
    BadExact(String),
    /// The approximate index could not be built (docs/reference/library.md#ann-index).
    #[error("cannot build the ANN index of {path}: {reason}")]
    IndexBuild {
        /// The library file.
        path: String,
        /// Why.
        reason: String,
    },
    /// `query_embedding` has the wrong number of dimensions.
    #[error("query_embedding has {found} dimensions but the library's embeddings have {expected}")]
    QueryDimension {
        /// The query's length.
        found: usize,
        /// The library's dimension.
        expected: usize,
    },
    /// `query_embedding` holds NaN or an infinity.
    #[error("query_embedding contains a non-finite value")]
    QueryNotFinite,
    /// The query is so long that a score could overflow the 32-bit floats scores are computed
    /// in (the product of its length and the longest stored embedding's reaches half of
    /// `f32::MAX`, which leaves room for rounding in any summation order). Refused rather than
    /// answered with scores that are infinite or NaN and rank wrongly.
    #[error(
        "query_embedding is too large: its length ({query_norm:.3e}) times the length of the longest stored embedding ({library_norm:.3e}) exceeds {limit:.3e}, so similarity scores would overflow 32-bit floats; scale the query_embedding down (embeddings are normally of length about 1), or fix the library's oversized embeddings"
    )]
    QueryTooLarge {
        /// The query's Euclidean length.
        query_norm: f64,
        /// The longest stored embedding's Euclidean length.
        library_norm: f64,
        /// The largest product of the two that is accepted.
        limit: f64,
    },
    /// A bit has no similarity where one is needed (unscorable library, or `sort_by_similarity`).
    #[error("sort of similarity passed but {0} had no similarity")]
    NoSimilarity(String),
    /// An omit item is not a known key.
    #[error("Illegal omit key type: {0}")]
    IllegalOmitKey(String),
    /// `""` combined with other omit items.
    #[error("If '' is provided, it must be the only item.")]
    EmptyOmitNotAlone,
    /// `*` combined with other omit items.
    #[error("If '*' is provided, it must be the only item.")]
    StarOmitNotAlone,
    /// `omit` is neither a string nor a list of strings.
    #[error("omit must be a string or a list of strings")]
    OmitBadType,

    // ---- Where a load error is ----
    /// A load error in one bit. `Display` is the inner message alone, exactly as the spec gives
    /// it (clients match those texts); [`LibraryError::bit_index`] and [`LibraryError::field`]
    /// say where, and [`LibraryError::located`] prints the message with both.
    #[error("{error}")]
    InBit {
        /// The bit's index in file order (after a version-0 upgrade). For
        /// [`Library::insert`](crate::Library::insert) the index it would have had, for
        /// [`Library::extend`](crate::Library::extend) its index in the other library.
        index: usize,
        /// What is wrong with it.
        error: Box<LibraryError>,
    },
    /// An error in one file of a directory being loaded by
    /// [`Library::open_dir`](crate::Library::open_dir). The message names the file and, for a
    /// bit error, the bit and the field.
    #[error("{path}: {}", error.located())]
    InFile {
        /// The file, as the directory path joined with its relative path.
        path: String,
        /// What is wrong with it.
        error: Box<LibraryError>,
    },

    // ---- Host configuration and I/O ----
    /// A host configuration file does not exist.
    #[error("Config file \"{0}\" does not exist")]
    ConfigMissing(String),
    /// A host configuration value has the wrong type.
    #[error("invalid host config: {0}")]
    InvalidConfig(String),
    /// A memory-mapped library file or sidecar was truncated or rewritten while it was
    /// loading or being served. A load fails with this (a host keeps its previous library); a
    /// query on a library served from a changed sidecar fails with it until the library is
    /// reloaded.
    #[error(
        "{path} {detail} while Mnemon was reading it; reload the library (POST /admin/reload or restart the host). To update a library or sidecar in place safely, write a new file and rename it over the old one (`mnemon library pack` does) instead of copying over it"
    )]
    FileChanged {
        /// The file.
        path: String,
        /// What happened to it.
        detail: &'static str,
    },
    /// A bit's stored data no longer parses: the bytes changed under the library (a sidecar
    /// damaged after it was opened). Not the caller's fault.
    #[error(
        "bit {index}'s stored data is corrupt ({reason}); reopen the library from its JSON file (and re-run `mnemon library pack` if a sidecar was in use)"
    )]
    CorruptBit {
        /// The bit's position in file order.
        index: usize,
        /// What the parser found.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file involved.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl LibraryError {
    /// Whether the error is the caller's fault (bad arguments or a bad file), as opposed to an
    /// I/O failure. An HTTP host answers the former with 400 and the latter with 500.
    pub fn is_client_error(&self) -> bool {
        !matches!(
            self.kind(),
            LibraryError::Io { .. }
                | LibraryError::FileChanged { .. }
                | LibraryError::CorruptBit { .. }
        )
    }

    /// The error itself, without the location wrappers ([`LibraryError::InBit`],
    /// [`LibraryError::InFile`]): match on this to tell errors apart.
    pub fn kind(&self) -> &LibraryError {
        match self {
            LibraryError::InBit { error, .. } | LibraryError::InFile { error, .. } => error.kind(),
            other => other,
        }
    }

    /// The index of the bit at fault, for an error in one bit.
    pub fn bit_index(&self) -> Option<usize> {
        match self {
            LibraryError::InBit { index, .. } => Some(*index),
            LibraryError::InFile { error, .. } => error.bit_index(),
            _ => None,
        }
    }

    /// The file at fault, for an error in one file of a directory.
    pub fn file(&self) -> Option<&str> {
        match self {
            LibraryError::InFile { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The field at fault: a key of the library (`version`, `embedding_model`, `omit`,
    /// `bits`, `content`, `sort.ids`) or of a bit (`text`, `embedding`, `token_count`, `info`,
    /// `info.url`, `access_tag`, or a field the stored omit names). `None` when the error is
    /// not about one field (invalid JSON, a bit that is not an object, I/O).
    pub fn field(&self) -> Option<&str> {
        use LibraryError as E;
        Some(match self.kind() {
            E::VersionInvalid => "version",
            E::MissingContent => "content",
            E::UnknownSortId(_) => "sort.ids",
            E::InvalidModel => "embedding_model",
            E::OmitNotString
            | E::OmitAllButBits
            | E::IllegalOmitKey(_)
            | E::EmptyOmitNotAlone
            | E::StarOmitNotAlone
            | E::OmitBadType => "omit",
            E::MissingBits | E::BitsNotList => "bits",
            E::FieldNotOmitted(field) => field,
            E::MissingText(_) | E::TextNotString(_) => "text",
            E::MissingEmbedding(_)
            | E::InvalidEmbedding { .. }
            | E::WrongEmbeddingLength { .. } => "embedding",
            E::MissingTokenCount(_) | E::TokenCountNotInt => "token_count",
            E::MissingInfo(_) | E::InfoNotObject => "info",
            E::MissingUrl(_) => "info.url",
            E::AccessTagNotString(_) => "access_tag",
            _ => return None,
        })
    }

    /// The message with its location in front, for people: `bit 3, field "embedding": <id> is
    /// missing embedding`, `field "version": Version invalid`, and the file first for an error
    /// in a directory. [`Display`](std::fmt::Display) alone gives the spec's message.
    pub fn located(&self) -> Located<'_> {
        Located(self)
    }

    /// Wraps an error in bit `index` (once: an error already located keeps its location).
    pub(crate) fn in_bit(index: usize, error: LibraryError) -> Self {
        match error {
            located @ LibraryError::InBit { .. } => located,
            error => LibraryError::InBit {
                index,
                error: Box::new(error),
            },
        }
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        LibraryError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// A [`LibraryError`] shown with its location; see [`LibraryError::located`].
#[derive(Debug, Clone, Copy)]
pub struct Located<'a>(&'a LibraryError);

impl std::fmt::Display for Located<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let e = self.0;
        // `InFile` already prints its path and the inner location.
        if e.file().is_some() {
            return write!(f, "{e}");
        }
        match (e.bit_index(), e.field()) {
            (Some(i), Some(field)) => write!(f, "bit {i}, field \"{field}\": {e}"),
            (Some(i), None) => write!(f, "bit {i}: {e}"),
            (None, Some(field)) => write!(f, "field \"{field}\": {e}"),
            (None, None) => write!(f, "{e}"),
        }
    }
}

/// Shorthand for results in this crate.
pub type Result<T, E = LibraryError> = std::result::Result<T, E>;
