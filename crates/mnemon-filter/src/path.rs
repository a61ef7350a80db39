//! Paths into a record's fields: `role`, `metadata.tags[0]`, `metadata."a.b"`
//! (docs/reference/filters.md#paths).
//!
//! A path is a field name followed by steps: `.name` looks up an object member, `[n]` an array
//! element. A name is bare (letters, digits, `_`, `-`) or quoted in double quotes; a quoted name
//! holds any character except `"`, `\` and control characters. There are no escapes: SQLite's
//! JSON path syntax has none, so a key holding `"` could not be addressed in SQL, and refusing it
//! here keeps evaluation in memory and in SQL identical.

use std::fmt;
use std::str::FromStr;

/// The longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;
/// The most steps (names and indices) a path may have.
pub const MAX_PATH_STEPS: usize = 32;
/// The largest array index accepted (PostgreSQL's `->` takes a 32-bit index).
pub const MAX_INDEX: u32 = i32::MAX as u32;

/// One step of a [`Path`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Step {
    /// An object member; missing on anything but an object.
    Key(String),
    /// An array element, from 0; missing on anything but an array.
    Index(u32),
}

/// A parsed, validated path: a field name, then object keys and array indices.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Path {
    root: String,
    rest: Vec<Step>,
}

/// Why a path was refused; positions are byte offsets into the path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Nothing to parse.
    #[error("a path names a field, e.g. `role` or `metadata.tags[0]`; this one is empty")]
    Empty,
    /// Longer than [`MAX_PATH_BYTES`].
    #[error("a path is at most {MAX_PATH_BYTES} bytes long; this one has {0}")]
    TooLong(usize),
    /// More than [`MAX_PATH_STEPS`] steps.
    #[error("a path has at most {MAX_PATH_STEPS} names and indices")]
    TooManySteps,
    /// A path must start with a field name.
    #[error("a path starts with a field name, not an index (write `field[0]`)")]
    StartsWithIndex,
    /// A character where something else was expected.
    #[error("unexpected {found:?} at byte {pos}: expected {expected}")]
    Unexpected {
        /// Byte offset.
        pos: usize,
        /// The character found.
        found: char,
        /// What the parser expected there.
        expected: &'static str,
    },
    /// The path ended where something else was expected.
    #[error("the path ends where {expected} was expected")]
    EndsEarly {
        /// What the parser expected.
        expected: &'static str,
    },
    /// A quoted name without its closing quote.
    #[error("the quoted name starting at byte {pos} has no closing `\"`")]
    Unterminated {
        /// Byte offset of the opening quote.
        pos: usize,
    },
    /// A character no name may hold.
    #[error(
        "{found:?} at byte {pos} cannot appear in a name: names hold no `\"`, `\\` or control \
         characters (SQL JSON paths cannot address them)"
    )]
    ForbiddenInName {
        /// Byte offset.
        pos: usize,
        /// The character.
        found: char,
    },
    /// A name given to [`Path::new`] holds a character no name may hold.
    #[error(
        "the name {0:?} holds a `\"`, `\\` or control character, which no name may hold (SQL \
         JSON paths cannot address them)"
    )]
    BadName(String),
    /// An index with a leading zero or beyond [`MAX_INDEX`].
    #[error(
        "bad index at byte {pos}: write a decimal number from 0 to {MAX_INDEX} without leading zeros"
    )]
    BadIndex {
        /// Byte offset of the index.
        pos: usize,
    },
}

/// Bare names print without quotes; everything else is quoted.
fn is_bare_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_' || c == '-'
}

fn is_forbidden_in_name(c: char) -> bool {
    c == '"' || c == '\\' || c.is_control()
}

impl Path {
    /// A path from its field name and further steps, checked as [`Path::parse`] checks them.
    pub fn new(root: impl Into<String>, rest: Vec<Step>) -> Result<Path, PathError> {
        let path = Path {
            root: root.into(),
            rest,
        };
        if path.rest.len() + 1 > MAX_PATH_STEPS {
            return Err(PathError::TooManySteps);
        }
        let names = std::iter::once(path.root.as_str()).chain(path.rest.iter().filter_map(
            |step| match step {
                Step::Key(key) => Some(key.as_str()),
                Step::Index(_) => None,
            },
        ));
        for name in names {
            if name.chars().any(is_forbidden_in_name) {
                return Err(PathError::BadName(name.to_owned()));
            }
        }
        if path
            .rest
            .iter()
            .any(|step| matches!(step, Step::Index(i) if *i > MAX_INDEX))
        {
            return Err(PathError::BadIndex { pos: 0 });
        }
        let len = path.to_string().len();
        if len > MAX_PATH_BYTES {
            return Err(PathError::TooLong(len));
        }
        Ok(path)
    }

    /// Parses `text` (docs/reference/filters.md#paths).
    pub fn parse(text: &str) -> Result<Path, PathError> {
        if text.is_empty() {
            return Err(PathError::Empty);
        }
        if text.len() > MAX_PATH_BYTES {
            return Err(PathError::TooLong(text.len()));
        }
        let mut parser = Parser { text, pos: 0 };
        if parser.peek() == Some('[') {
            return Err(PathError::StartsWithIndex);
        }
        let root = parser.name()?;
        let mut rest = Vec::new();
        while let Some(c) = parser.peek() {
            if rest.len() + 1 >= MAX_PATH_STEPS {
                return Err(PathError::TooManySteps);
            }
            match c {
                '.' => {
                    parser.pos += 1;
                    rest.push(Step::Key(parser.name()?));
                }
                '[' => {
                    parser.pos += 1;
                    rest.push(Step::Index(parser.index()?));
                }
                found => {
                    return Err(PathError::Unexpected {
                        pos: parser.pos,
                        found,
                        expected: "`.` or `[` after a name or index (a name holding other \
                                   characters goes in double quotes: `metadata.\"a b\"`)",
                    });
                }
            }
        }
        Ok(Path { root, rest })
    }

    /// The field the path starts at: what a SQL resolver maps to a column or document.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The steps after the field name.
    pub fn rest(&self) -> &[Step] {
        &self.rest
    }
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text.get(self.pos..).and_then(|s| s.chars().next())
    }

    fn name(&mut self) -> Result<String, PathError> {
        match self.peek() {
            None => Err(PathError::EndsEarly { expected: "a name" }),
            Some('"') => {
                let start = self.pos;
                self.pos += 1;
                let mut name = String::new();
                loop {
                    match self.peek() {
                        None => return Err(PathError::Unterminated { pos: start }),
                        Some('"') => {
                            self.pos += 1;
                            return Ok(name);
                        }
                        Some(found) if is_forbidden_in_name(found) => {
                            return Err(PathError::ForbiddenInName {
                                pos: self.pos,
                                found,
                            });
                        }
                        Some(c) => {
                            name.push(c);
                            self.pos += c.len_utf8();
                        }
                    }
                }
            }
            Some(found) if !is_bare_char(found) => Err(PathError::Unexpected {
                pos: self.pos,
                found,
                expected: match found {
                    // A JSONPath habit.
                    '$' => {
                        "a name: a path starts with a field's name, without `$.` (write \
                         `metadata.topic`, not `$.metadata.topic`)"
                    }
                    _ => "a name (letters, digits, `_`, `-`, or any text in double quotes)",
                },
            }),
            Some(_) => {
                let mut name = String::new();
                while let Some(c) = self.peek().filter(|c| is_bare_char(*c)) {
                    name.push(c);
                    self.pos += c.len_utf8();
                }
                Ok(name)
            }
        }
    }

    fn index(&mut self) -> Result<u32, PathError> {
        let start = self.pos;
        let digits: String = self
            .text
            .get(start..)
            .unwrap_or_default()
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        self.pos += digits.len();
        if digits.is_empty() {
            return match self.peek() {
                None => Err(PathError::EndsEarly {
                    expected: "an index",
                }),
                Some(found) => Err(PathError::Unexpected {
                    pos: self.pos,
                    found,
                    expected: match found {
                        '\'' | '"' => {
                            "an index (0, 1, 2, …); a key goes after a dot, in double quotes \
                             when it holds other characters: `metadata.\"a.b\"`"
                        }
                        '*' => {
                            "an index (0, 1, 2, …); there are no wildcards: to match any \
                             element of an array, use `contains`"
                        }
                        _ => "an index (0, 1, 2, …)",
                    },
                }),
            };
        }
        if digits.len() > 1 && digits.starts_with('0') {
            return Err(PathError::BadIndex { pos: start });
        }
        let index = digits
            .parse::<u32>()
            .ok()
            .filter(|i| *i <= MAX_INDEX)
            .ok_or(PathError::BadIndex { pos: start })?;
        match self.peek() {
            Some(']') => {
                self.pos += 1;
                Ok(index)
            }
            None => Err(PathError::EndsEarly { expected: "`]`" }),
            Some(found) => Err(PathError::Unexpected {
                pos: self.pos,
                found,
                expected: "`]` after an index",
            }),
        }
    }
}

fn write_name(f: &mut fmt::Formatter<'_>, name: &str) -> fmt::Result {
    if !name.is_empty() && name.chars().all(is_bare_char) {
        f.write_str(name)
    } else {
        write!(f, "\"{name}\"")
    }
}

impl fmt::Display for Path {
    /// The canonical text: bare names where possible, quoted otherwise; `Path::parse` reads it
    /// back to an equal path.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_name(f, &self.root)?;
        for step in &self.rest {
            match step {
                Step::Key(key) => {
                    f.write_str(".")?;
                    write_name(f, key)?;
                }
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

impl FromStr for Path {
    type Err = PathError;

    fn from_str(text: &str) -> Result<Path, PathError> {
        Path::parse(text)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;

    fn key(k: &str) -> Step {
        Step::Key(k.to_owned())
    }

    #[test]
    fn parses_names_keys_indices_and_quotes() {
        let path = Path::parse("metadata.tags[0]").unwrap();
        assert_eq!(path.root(), "metadata");
        assert_eq!(path.rest(), &[key("tags"), Step::Index(0)]);
        let path = Path::parse(r#"metadata."a.b"[12]."""#).unwrap();
        assert_eq!(path.rest(), &[key("a.b"), Step::Index(12), key("")]);
        assert_eq!(path.to_string(), r#"metadata."a.b"[12]."""#);
        let path = Path::parse("\"0\".café-x_1").unwrap();
        assert_eq!(path.root(), "0");
        assert_eq!(path.to_string(), "0.café-x_1");
        assert_eq!(Path::parse("a[0][1]").unwrap().rest().len(), 2);
    }

    /// Habits from other path languages get a message saying what to write instead (found by
    /// a review: `$.metadata.topic` said only "expected a name").
    #[test]
    fn other_path_languages_get_a_hint() {
        let message = |path: &str| Path::parse(path).unwrap_err().to_string();
        assert!(
            message("$.metadata.topic").contains("write `metadata.topic`"),
            "{}",
            message("$.metadata.topic")
        );
        assert!(message("metadata['a.b']").contains("`metadata.\"a.b\"`"));
        assert!(message("metadata[\"a\"]").contains("double quotes"));
        assert!(message("tags[*]").contains("use `contains`"));
        assert!(message("metadata.a b").contains("`metadata.\"a b\"`"));
        // Elsewhere, the plain reasons.
        assert!(!message("a[x]").contains("contains"));
        assert!(!message("a.%").contains("$."));
    }

    #[test]
    fn refuses_bad_paths_with_a_reason() {
        assert_eq!(Path::parse(""), Err(PathError::Empty));
        assert_eq!(Path::parse("[0]"), Err(PathError::StartsWithIndex));
        assert_eq!(
            Path::parse("a."),
            Err(PathError::EndsEarly { expected: "a name" })
        );
        assert!(matches!(
            Path::parse("a b"),
            Err(PathError::Unexpected {
                pos: 1,
                found: ' ',
                ..
            })
        ));
        assert!(matches!(
            Path::parse("a.$"),
            Err(PathError::Unexpected {
                pos: 2,
                found: '$',
                ..
            })
        ));
        assert_eq!(
            Path::parse("a.\"b"),
            Err(PathError::Unterminated { pos: 2 })
        );
        assert_eq!(
            Path::parse("a.\"b\\c\""),
            Err(PathError::ForbiddenInName {
                pos: 4,
                found: '\\'
            })
        );
        assert_eq!(Path::parse("a[01]"), Err(PathError::BadIndex { pos: 2 }));
        assert_eq!(
            Path::parse("a[2147483648]"),
            Err(PathError::BadIndex { pos: 2 })
        );
        assert!(Path::parse("a[2147483647]").is_ok());
        assert!(matches!(
            Path::parse("a[-1]"),
            Err(PathError::Unexpected { found: '-', .. })
        ));
        assert_eq!(
            Path::parse("a[1"),
            Err(PathError::EndsEarly { expected: "`]`" })
        );
        assert_eq!(
            Path::parse(&"a".repeat(MAX_PATH_BYTES + 1)),
            Err(PathError::TooLong(MAX_PATH_BYTES + 1))
        );
        assert_eq!(
            Path::parse(&["a"; MAX_PATH_STEPS + 1].join(".")),
            Err(PathError::TooManySteps)
        );
        assert!(Path::parse(&["a"; MAX_PATH_STEPS].join(".")).is_ok());
        assert_eq!(
            Path::new("a\"", vec![]),
            Err(PathError::BadName("a\"".into()))
        );
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z_][a-z0-9_-]{0,6}",
            "[^\"\\\\\\p{Cc}]{0,6}",
            Just(String::new()),
            "[0-9]{1,3}",
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            name().prop_map(Step::Key),
            (0..=MAX_INDEX).prop_map(Step::Index),
        ]
    }

    proptest! {
        #[test]
        fn print_then_parse_is_identity(root in name(), rest in prop::collection::vec(step(), 0..6)) {
            let path = Path::new(root, rest).unwrap();
            let text = path.to_string();
            prop_assert_eq!(Path::parse(&text).unwrap(), path);
        }

        #[test]
        fn parse_then_print_is_identity_on_canonical_text(text in "[a-z\".\\[\\]0-9]{0,16}") {
            if let Ok(path) = Path::parse(&text) {
                let printed = path.to_string();
                prop_assert_eq!(Path::parse(&printed).unwrap(), path);
            }
        }

        #[test]
        fn never_panics(text in "\\PC{0,40}") {
            let _ = Path::parse(&text);
        }

        #[test]
        fn never_panics_on_any_string(text in any::<String>()) {
            let _ = Path::parse(&text);
        }
    }
}
