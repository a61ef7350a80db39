//! Namespaces: the tenant every record of every store belongs to.
//!
//! A store handle is opened for one [`Namespace`] and puts it in every row and key it writes
//! and every condition it reads with, so no call through the handle can see another tenant's
//! data. [`Namespace::default()`] (`default`) is the namespace of everything written before
//! namespaces existed, which keeps an existing data directory's behaviour unchanged.
//!
//! The character set is deliberately small (lowercase ASCII letters, digits, `_`, `-`, `.`,
//! starting with a letter or digit, at most [`Namespace::MAX_LEN`] bytes) so that a namespace
//! can go into a file name, a URL path segment, a log line or a PostgreSQL identifier suffix
//! without quoting, and so that two spellings never name one tenant (no case folding, no
//! Unicode normalisation to get wrong).
//!
//! ```
//! use mnemon_db::Namespace;
//!
//! let acme: Namespace = "acme-prod".parse()?;
//! assert_eq!(acme.as_str(), "acme-prod");
//! assert_eq!(Namespace::default().as_str(), "default");
//! assert!("Acme".parse::<Namespace>().is_err());
//! # Ok::<(), mnemon_db::NamespaceError>(())
//! ```

use std::fmt;
use std::str::FromStr;

/// A validated tenant name: see the module docs for the rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(String);

/// Why a string is not a [`Namespace`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NamespaceError {
    /// The string is empty.
    #[error(
        "the namespace is empty; give a name such as `default` or `acme-prod` (lowercase \
         letters, digits, '_', '-', '.')"
    )]
    Empty,
    /// The string is longer than [`Namespace::MAX_LEN`] bytes.
    #[error(
        "the namespace is {len} bytes long; use at most {} (lowercase letters, digits, '_', \
         '-', '.')",
        Namespace::MAX_LEN
    )]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The string holds a character outside the allowed set.
    #[error(
        "the namespace {given:?} contains {found:?} at byte {at}; use only lowercase ASCII \
         letters, digits, '_', '-' and '.'"
    )]
    BadCharacter {
        /// The string given (at most [`Namespace::MAX_LEN`] bytes, so it is short enough to
        /// quote).
        given: String,
        /// The first character refused.
        found: char,
        /// Its byte offset.
        at: usize,
    },
    /// The string starts with `_`, `-` or `.`.
    #[error(
        "the namespace {given:?} starts with {found:?}; start it with a lowercase letter or \
         a digit"
    )]
    BadStart {
        /// The string given.
        given: String,
        /// Its first character.
        found: char,
    },
    /// The string ends with `.`, which Windows drops from a folder name: `acme.` would share
    /// `acme`'s artifact files there.
    #[error(
        "the namespace {given:?} ends with '.'; end it with a letter, a digit, '_' or '-' (a \
         trailing dot is dropped from folder names on Windows, where it would name another \
         namespace's files)"
    )]
    BadEnd {
        /// The string given.
        given: String,
    },
}

impl Namespace {
    /// The longest namespace, in bytes: short enough to be a suffix of a PostgreSQL identifier
    /// (63 bytes) with room for a prefix, and to sit in a file name.
    pub const MAX_LEN: usize = 48;
    /// The name of the default namespace.
    pub const DEFAULT: &'static str = "default";

    /// Checks `name` against the rules in the module docs.
    pub fn new(name: impl Into<String>) -> Result<Namespace, NamespaceError> {
        let name = name.into();
        validate(&name)?;
        Ok(Namespace(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is the default namespace.
    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }

    /// The name, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

fn validate(name: &str) -> Result<(), NamespaceError> {
    if name.is_empty() {
        return Err(NamespaceError::Empty);
    }
    if name.len() > Namespace::MAX_LEN {
        return Err(NamespaceError::TooLong { len: name.len() });
    }
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.".contains(c);
    if let Some((at, found)) = name.char_indices().find(|&(_, c)| !allowed(c)) {
        return Err(NamespaceError::BadCharacter {
            given: name.to_owned(),
            found,
            at,
        });
    }
    match name.chars().next() {
        Some(found) if !found.is_ascii_alphanumeric() => Err(NamespaceError::BadStart {
            given: name.to_owned(),
            found,
        }),
        _ if name.ends_with('.') => Err(NamespaceError::BadEnd {
            given: name.to_owned(),
        }),
        _ => Ok(()),
    }
}

impl Default for Namespace {
    /// The namespace of everything written before namespaces existed: `default`.
    fn default() -> Self {
        Namespace(Self::DEFAULT.to_owned())
    }
}

impl FromStr for Namespace {
    type Err = NamespaceError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Namespace::new(s)
    }
}

impl TryFrom<String> for Namespace {
    type Error = NamespaceError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Namespace::new(value)
    }
}

impl TryFrom<&str> for Namespace {
    type Error = NamespaceError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Namespace::new(value)
    }
}

impl AsRef<str> for Namespace {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Namespace> for String {
    fn from(value: Namespace) -> Self {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_default_is_valid_and_named_default() {
        let default = Namespace::default();
        assert_eq!(default.as_str(), "default");
        assert!(default.is_default());
        assert_eq!("default".parse::<Namespace>().unwrap(), default);
        assert!(!"acme".parse::<Namespace>().unwrap().is_default());
    }

    #[test]
    fn examples() {
        for good in [
            "a",
            "0",
            "acme-prod",
            "team_7.eu",
            &"x".repeat(Namespace::MAX_LEN),
        ] {
            assert_eq!(Namespace::new(good).unwrap().as_str(), good);
        }
        assert_eq!(Namespace::new(""), Err(NamespaceError::Empty));
        assert_eq!(
            Namespace::new("x".repeat(Namespace::MAX_LEN + 1)),
            Err(NamespaceError::TooLong {
                len: Namespace::MAX_LEN + 1
            })
        );
        for (bad, found, at) in [
            ("Acme", 'A', 0),
            ("a b", ' ', 1),
            ("a/b", '/', 1),
            ("ab'", '\'', 2),
            ("é", 'é', 0),
            ("a\0", '\0', 1),
        ] {
            assert_eq!(
                Namespace::new(bad),
                Err(NamespaceError::BadCharacter {
                    given: bad.to_owned(),
                    found,
                    at
                }),
                "{bad:?}"
            );
        }
        for bad in ["_a", "-a", ".", ".."] {
            assert!(
                matches!(Namespace::new(bad), Err(NamespaceError::BadStart { .. })),
                "{bad:?}"
            );
        }
        // Windows drops trailing dots from folder names: `acme.` would be `acme`'s folder.
        for bad in ["acme.", "a..", "team_7.eu."] {
            assert!(
                matches!(Namespace::new(bad), Err(NamespaceError::BadEnd { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn messages_say_what_to_use() {
        let err = Namespace::new("Acme").unwrap_err().to_string();
        assert!(err.contains("lowercase ASCII letters"), "{err}");
    }

    /// The rule, written independently of `validate` to check it against.
    fn expected_valid(s: &str) -> bool {
        let bytes = s.as_bytes();
        !bytes.is_empty()
            && bytes.len() <= Namespace::MAX_LEN
            && bytes[0].is_ascii_alphanumeric()
            && !bytes[0].is_ascii_uppercase()
            && bytes[bytes.len() - 1] != b'.'
            && bytes.iter().all(|&b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-' || b == b'.'
            })
    }

    proptest! {
        /// Any string: accepted exactly when the rule says, and an accepted one round-trips
        /// through Display and FromStr unchanged.
        #[test]
        fn parser_accepts_exactly_the_rule(s in "\\PC{0,60}|[a-z0-9_.A-Z -]{0,60}") {
            let parsed = s.parse::<Namespace>();
            prop_assert_eq!(parsed.is_ok(), expected_valid(&s), "{:?}: {:?}", s, parsed);
            if let Ok(ns) = parsed {
                prop_assert_eq!(ns.to_string(), s.clone());
                prop_assert_eq!(ns.to_string().parse::<Namespace>().unwrap(), ns);
            }
        }

        /// Every string built from the allowed set is accepted (a trailing `.` is not).
        #[test]
        fn allowed_strings_parse(s in "[a-z0-9]([a-z0-9_.-]{0,46}[a-z0-9_-])?") {
            prop_assert_eq!(Namespace::new(s.clone()).unwrap().into_string(), s);
        }

        /// A refusal's message names the problem and never panics on any input.
        #[test]
        fn refusals_explain(s in "\\PC{0,80}") {
            if let Err(e) = Namespace::new(s) {
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}
