//! The filter tree and its JSON form (docs/reference/filters.md#grammar).
//!
//! Every node is a JSON object with exactly one key, the operator:
//!
//! ```json
//! {"and": [
//!   {"eq":  {"path": "role", "value": "user"}},
//!   {"gte": {"path": "timestamp", "value": "2026-01-01"}},
//!   {"not": {"exists": "metadata.secret"}}
//! ]}
//! ```
//!
//! [`Filter::parse`] checks a JSON value against the grammar, the type rules and the limits, and
//! names the offending place (`and[1].gt: value must be a number or a string, got an object`);
//! serde's `Deserialize` goes through it, and `Serialize` writes the same form back.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};

use crate::error::FilterError;
use crate::path::Path;

/// The deepest nesting of `and`, `or` and `not` accepted.
pub const MAX_DEPTH: usize = 32;
/// The most operators and values a filter may hold, all nodes and list elements counted.
pub const MAX_NODES: usize = 1024;
/// The most values an `in` or `nin` list may hold.
pub const MAX_LIST: usize = 256;
/// The longest string value accepted, in bytes.
pub const MAX_STRING_BYTES: usize = 4096;

/// A value `eq`, `ne`, `in`, `nin` and `contains` compare with: a JSON scalar. Integers lie in
/// the signed 64-bit range.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// JSON `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer (signed 64-bit) or a finite float; compared numerically.
    Number(Number),
    /// A string; compared byte for byte.
    String(String),
}

/// A value `gt`, `gte`, `lt` and `lte` compare with: numbers order numerically, strings by
/// their UTF-8 bytes (code point order); there is no order between a number and a string.
#[derive(Debug, Clone, PartialEq)]
pub enum Bound {
    /// An integer (signed 64-bit) or a finite float.
    Number(Number),
    /// A string.
    String(String),
}

/// The four orderings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// `gt`: greater than.
    Gt,
    /// `gte`: greater than or equal.
    Gte,
    /// `lt`: less than.
    Lt,
    /// `lte`: less than or equal.
    Lte,
}

impl Order {
    /// The operator's name in the JSON form.
    pub fn name(self) -> &'static str {
        match self {
            Order::Gt => "gt",
            Order::Gte => "gte",
            Order::Lt => "lt",
            Order::Lte => "lte",
        }
    }
}

/// A metadata filter: one node of the tree (docs/reference/filters.md#operators).
///
/// Build one with [`Filter::parse`], [`str::parse`] or serde; a filter built in code is trusted
/// and not held to the limits, which guard input.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// The value at `path` is present and equals `value` (same type; numbers numerically).
    Eq {
        /// Where.
        path: Path,
        /// What.
        value: Scalar,
    },
    /// Not `Eq`: true when the field is missing or of another type.
    Ne {
        /// Where.
        path: Path,
        /// What.
        value: Scalar,
    },
    /// The value at `path` equals one of `values`; an empty list matches nothing.
    In {
        /// Where.
        path: Path,
        /// The candidates.
        values: Vec<Scalar>,
    },
    /// Not `In`: true when the field is missing; an empty list matches everything.
    Nin {
        /// Where.
        path: Path,
        /// The candidates.
        values: Vec<Scalar>,
    },
    /// The value at `path` is of the bound's type (number or string) and compares as `order`
    /// says; false when missing or of another type.
    Compare {
        /// Which comparison.
        order: Order,
        /// Where.
        path: Path,
        /// The bound.
        value: Bound,
    },
    /// The value at `path` is a string holding `value` (a string) as a substring, or an array
    /// with an element equal to `value` (as `Eq` compares).
    Contains {
        /// Where.
        path: Path,
        /// What.
        value: Scalar,
    },
    /// Something is at `path`, JSON `null` included.
    Exists {
        /// Where.
        path: Path,
    },
    /// Every operand matches; `and: []` matches everything.
    And(Vec<Filter>),
    /// Some operand matches; `or: []` matches nothing.
    Or(Vec<Filter>),
    /// The operand does not match.
    Not(Box<Filter>),
}

const OPERATORS: &str = "eq, ne, in, nin, gt, gte, lt, lte, contains, exists, and, or, not";

/// What a JSON value is, for error messages.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

struct Checker {
    nodes: usize,
}

/// The most characters of input an error message repeats.
const ECHO_CHARS: usize = 64;

/// `text` cut to [`ECHO_CHARS`] characters (`…` marks the cut): errors repeat what was given,
/// which may be megabytes.
fn clip(text: &str) -> String {
    match text.char_indices().nth(ECHO_CHARS) {
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or_default()),
        None => text.to_owned(),
    }
}

/// [`clip`]ped `text`, quoted as Rust's `{:?}` quotes it.
fn echo(text: &str) -> String {
    format!("{:?}", clip(text))
}

fn invalid(at: &str, reason: impl Into<String>) -> FilterError {
    FilterError::Invalid {
        at: at.to_owned(),
        reason: reason.into(),
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

impl Checker {
    fn count(&mut self, at: &str) -> Result<(), FilterError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(FilterError::TooLarge {
                at: at.to_owned(),
                what: "the number of operators and values",
                limit: MAX_NODES,
            });
        }
        Ok(())
    }

    fn filter(&mut self, value: &Value, at: &str, depth: usize) -> Result<Filter, FilterError> {
        self.count(at)?;
        let Value::Object(object) = value else {
            return Err(invalid(
                at,
                format!(
                    "a filter is an object with one operator key ({OPERATORS}), got {}",
                    kind(value)
                ),
            ));
        };
        let mut entries = object.iter();
        let (Some((op, operand)), None) = (entries.next(), entries.next()) else {
            // The first few keys, each cut: an error repeats the input, which may be huge.
            let keys: Vec<String> = object.keys().take(5).map(|k| echo(k)).collect();
            let more = object.len().saturating_sub(keys.len());
            return Err(invalid(
                at,
                format!(
                    "a filter object has exactly one key, the operator ({OPERATORS}); this one \
                     has {}: {}{} (combine conditions with `and`)",
                    object.len(),
                    keys.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ),
            ));
        };
        let node_at = at;
        let here = join(at, op);
        let at = here.as_str();
        match op.as_str() {
            "eq" | "ne" | "contains" => {
                let (path, value) = self.path_value(operand, at)?;
                let value = self.scalar(value, &join(at, "value"))?;
                Ok(match op.as_str() {
                    "eq" => Filter::Eq { path, value },
                    "ne" => Filter::Ne { path, value },
                    _ => Filter::Contains { path, value },
                })
            }
            "gt" | "gte" | "lt" | "lte" => {
                let order = match op.as_str() {
                    "gt" => Order::Gt,
                    "gte" => Order::Gte,
                    "lt" => Order::Lt,
                    _ => Order::Lte,
                };
                let (path, value) = self.path_value(operand, at)?;
                let value = match value {
                    Value::Number(n) => Bound::Number(self.number(n, &join(at, "value"))?),
                    Value::String(s) => Bound::String(self.string(s, &join(at, "value"))?),
                    other => {
                        return Err(invalid(
                            at,
                            format!("value must be a number or a string, got {}", kind(other)),
                        ));
                    }
                };
                Ok(Filter::Compare { order, path, value })
            }
            "in" | "nin" => {
                let fields = self.fields(operand, at, &["path", "values"])?;
                let path = self.path(fields[0], at)?;
                let Value::Array(list) = fields[1] else {
                    return Err(invalid(
                        at,
                        format!("values must be an array, got {}", kind(fields[1])),
                    ));
                };
                if list.len() > MAX_LIST {
                    return Err(FilterError::TooLarge {
                        at: join(at, "values"),
                        what: "the length of an `in`/`nin` list",
                        limit: MAX_LIST,
                    });
                }
                let values = list
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let at = format!("{at}.values[{i}]");
                        self.count(&at)?;
                        self.scalar(v, &at)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(if op == "in" {
                    Filter::In { path, values }
                } else {
                    Filter::Nin { path, values }
                })
            }
            "exists" => {
                let path = match operand {
                    Value::Object(_) => {
                        let fields = self.fields(operand, at, &["path"])?;
                        self.path(fields[0], at)?
                    }
                    // The short form has no `path` key to point at.
                    other => self.path(other, at).map_err(|e| match e {
                        FilterError::Path { path, error, .. } => FilterError::Path {
                            at: at.to_owned(),
                            path,
                            error,
                        },
                        other => other,
                    })?,
                };
                Ok(Filter::Exists { path })
            }
            "and" | "or" => {
                let Value::Array(list) = operand else {
                    return Err(invalid(
                        at,
                        format!("`{op}` takes an array of filters, got {}", kind(operand)),
                    ));
                };
                self.depth(at, depth)?;
                let operands = list
                    .iter()
                    .enumerate()
                    .map(|(i, v)| self.filter(v, &format!("{at}[{i}]"), depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(if op == "and" {
                    Filter::And(operands)
                } else {
                    Filter::Or(operands)
                })
            }
            "not" => {
                self.depth(at, depth)?;
                Ok(Filter::Not(Box::new(self.filter(
                    operand,
                    at,
                    depth + 1,
                )?)))
            }
            other => Err(invalid(
                node_at,
                format!(
                    "unknown operator {}: expected one of {OPERATORS}",
                    echo(other)
                ),
            )),
        }
    }

    fn depth(&self, at: &str, depth: usize) -> Result<(), FilterError> {
        if depth >= MAX_DEPTH {
            return Err(FilterError::TooLarge {
                at: at.to_owned(),
                what: "the nesting depth of and/or/not",
                limit: MAX_DEPTH,
            });
        }
        Ok(())
    }

    /// The operand object's fields, in the order of `names`; every one required, no other.
    fn fields<'v>(
        &self,
        operand: &'v Value,
        at: &str,
        names: &[&str],
    ) -> Result<Vec<&'v Value>, FilterError> {
        let expected = names
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(" and ");
        let Value::Object(object) = operand else {
            return Err(invalid(
                at,
                format!("expected an object with {expected}, got {}", kind(operand)),
            ));
        };
        if let Some(extra) = object.keys().find(|k| !names.contains(&k.as_str())) {
            return Err(invalid(
                at,
                format!("unknown field {}: expected {expected}", echo(extra)),
            ));
        }
        names
            .iter()
            .map(|name| {
                object
                    .get(*name)
                    .ok_or_else(|| invalid(at, format!("missing `{name}`: expected {expected}")))
            })
            .collect()
    }

    fn path_value<'v>(
        &self,
        operand: &'v Value,
        at: &str,
    ) -> Result<(Path, &'v Value), FilterError> {
        let fields = self.fields(operand, at, &["path", "value"])?;
        Ok((self.path(fields[0], at)?, fields[1]))
    }

    fn path(&self, value: &Value, at: &str) -> Result<Path, FilterError> {
        let Value::String(text) = value else {
            return Err(invalid(
                at,
                format!(
                    "path must be a string such as \"metadata.tags[0]\", got {}",
                    kind(value)
                ),
            ));
        };
        Path::parse(text).map_err(|error| FilterError::Path {
            at: join(at, "path"),
            path: clip(text),
            error,
        })
    }

    fn scalar(&self, value: &Value, at: &str) -> Result<Scalar, FilterError> {
        Ok(match value {
            Value::Null => Scalar::Null,
            Value::Bool(b) => Scalar::Bool(*b),
            Value::Number(n) => Scalar::Number(self.number(n, at)?),
            Value::String(s) => Scalar::String(self.string(s, at)?),
            other => {
                return Err(invalid(
                    at,
                    format!(
                        "must be a string, a number, a boolean or null, got {}",
                        kind(other)
                    ),
                ));
            }
        })
    }

    fn number(&self, n: &Number, at: &str) -> Result<Number, FilterError> {
        if n.is_u64() && !n.is_i64() {
            return Err(invalid(
                at,
                format!(
                    "the integer {n} is out of range: integers lie from -2^63 to 2^63-1 (write a \
                     float for larger magnitudes)"
                ),
            ));
        }
        Ok(n.clone())
    }

    fn string(&self, s: &str, at: &str) -> Result<String, FilterError> {
        if s.len() > MAX_STRING_BYTES {
            return Err(FilterError::TooLarge {
                at: at.to_owned(),
                what: "the length of a string value in bytes",
                limit: MAX_STRING_BYTES,
            });
        }
        if s.contains('\0') {
            return Err(invalid(
                at,
                "a string value cannot hold U+0000 (PostgreSQL stores no NUL in text or jsonb)",
            ));
        }
        Ok(s.to_owned())
    }
}

impl Scalar {
    /// The JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Scalar::Null => Value::Null,
            Scalar::Bool(b) => Value::Bool(*b),
            Scalar::Number(n) => Value::Number(n.clone()),
            Scalar::String(s) => Value::String(s.clone()),
        }
    }
}

impl Bound {
    /// The JSON value.
    pub fn to_value(&self) -> Value {
        match self {
            Bound::Number(n) => Value::Number(n.clone()),
            Bound::String(s) => Value::String(s.clone()),
        }
    }
}

fn node(op: &str, operand: Value) -> Value {
    let mut object = Map::new();
    object.insert(op.to_owned(), operand);
    Value::Object(object)
}

fn path_value(path: &Path, key: &str, value: Value) -> Value {
    let mut object = Map::new();
    object.insert("path".to_owned(), Value::String(path.to_string()));
    object.insert(key.to_owned(), value);
    Value::Object(object)
}

impl Filter {
    /// Checks `value` against the grammar, the type rules and the limits
    /// (docs/reference/filters.md).
    pub fn parse(value: &Value) -> Result<Filter, FilterError> {
        Checker { nodes: 0 }.filter(value, "", 0)
    }

    /// Parses JSON text, then checks it as [`Filter::parse`] does.
    pub fn from_json(text: &str) -> Result<Filter, FilterError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| FilterError::Json(e.to_string()))?;
        Filter::parse(&value)
    }

    /// The JSON form; [`Filter::parse`] reads it back to an equal filter.
    pub fn to_value(&self) -> Value {
        match self {
            Filter::Eq { path, value } => node("eq", path_value(path, "value", value.to_value())),
            Filter::Ne { path, value } => node("ne", path_value(path, "value", value.to_value())),
            Filter::Contains { path, value } => {
                node("contains", path_value(path, "value", value.to_value()))
            }
            Filter::In { path, values } | Filter::Nin { path, values } => {
                let list = Value::Array(values.iter().map(Scalar::to_value).collect());
                let op = if matches!(self, Filter::In { .. }) {
                    "in"
                } else {
                    "nin"
                };
                node(op, path_value(path, "values", list))
            }
            Filter::Compare { order, path, value } => {
                node(order.name(), path_value(path, "value", value.to_value()))
            }
            Filter::Exists { path } => node("exists", Value::String(path.to_string())),
            Filter::And(operands) => node(
                "and",
                Value::Array(operands.iter().map(Filter::to_value).collect()),
            ),
            Filter::Or(operands) => node(
                "or",
                Value::Array(operands.iter().map(Filter::to_value).collect()),
            ),
            Filter::Not(operand) => node("not", operand.to_value()),
        }
    }
}

impl std::str::FromStr for Filter {
    type Err = FilterError;

    fn from_str(text: &str) -> Result<Filter, FilterError> {
        Filter::from_json(text)
    }
}

impl Serialize for Filter {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Filter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Filter, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Filter::parse(&value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn err(value: Value) -> String {
        Filter::parse(&value).unwrap_err().to_string()
    }

    /// An error repeats at most a short cut of what was given: a megabyte operator name, path or
    /// field, or an object of a thousand keys, came back whole in the message (and the logs).
    #[test]
    fn errors_repeat_a_short_cut_of_the_input() {
        let huge = "x".repeat(1 << 20);
        let many: serde_json::Map<String, Value> =
            (0..1_000).map(|i| (format!("k{i}"), json!(1))).collect();
        for input in [
            json!({ huge.clone(): 1 }),
            json!({"eq": {"path": "a", "value": 1, huge.clone(): 2}}),
            json!({"eq": {"path": format!("a.{huge}"), "value": 1}}),
            Value::Object(many),
        ] {
            let error = Filter::parse(&input).unwrap_err().to_string();
            assert!(error.len() < 600, "{} bytes: {:.200}", error.len(), error);
        }
    }

    #[test]
    fn parses_every_operator() {
        let f = Filter::parse(&json!({"and": [
            {"eq": {"path": "role", "value": "user"}},
            {"ne": {"path": "name", "value": null}},
            {"in": {"path": "role", "values": ["user", 1, true]}},
            {"nin": {"path": "role", "values": []}},
            {"gt": {"path": "n", "value": 1}},
            {"gte": {"path": "timestamp", "value": "2026-01-01"}},
            {"lt": {"path": "n", "value": 1.5}},
            {"lte": {"path": "n", "value": -3}},
            {"contains": {"path": "metadata.tags", "value": "x"}},
            {"exists": "metadata.secret"},
            {"exists": {"path": "metadata.other"}},
            {"or": []},
            {"not": {"exists": "a"}}
        ]}))
        .unwrap();
        let Filter::And(operands) = &f else {
            panic!("{f:?}")
        };
        assert_eq!(operands.len(), 13);
        assert_eq!(
            operands[5],
            Filter::Compare {
                order: Order::Gte,
                path: Path::parse("timestamp").unwrap(),
                value: Bound::String("2026-01-01".into())
            }
        );
        assert_eq!(
            operands[10],
            Filter::Exists {
                path: Path::parse("metadata.other").unwrap()
            }
        );
    }

    #[test]
    fn errors_name_the_place_and_the_fix() {
        assert_eq!(
            err(json!({"and": [{"exists": "a"}, {"gt": {"path": "n", "value": {}}}]})),
            "and[1].gt: value must be a number or a string, got an object"
        );
        assert_eq!(
            err(json!({"eq": {"path": "n", "value": [1]}})),
            "eq.value: must be a string, a number, a boolean or null, got an array"
        );
        assert_eq!(
            err(json!({"or": [{"not": {"eq": {"path": "a..b", "value": 1}}}]})),
            "or[0].not.eq.path: bad path \"a..b\": unexpected '.' at byte 2: expected a name \
             (letters, digits, `_`, `-`, or any text in double quotes)"
        );
        assert!(
            err(json!({"like": {"path": "a", "value": 1}}))
                .starts_with("top level: unknown operator \"like\": expected one of eq, ne, in")
        );
        assert!(
            err(json!({"eq": {"path": "a", "value": 1}, "ne": {"path": "a", "value": 1}}))
                .contains("exactly one key")
        );
        assert!(err(json!({})).contains("this one has 0"));
        assert_eq!(
            err(json!({"eq": {"path": "a", "valeu": 1}})),
            "eq: unknown field \"valeu\": expected `path` and `value`"
        );
        assert_eq!(
            err(json!({"eq": {"path": "a"}})),
            "eq: missing `value`: expected `path` and `value`"
        );
        assert_eq!(
            err(json!({"in": {"path": "a", "values": "x"}})),
            "in: values must be an array, got a string"
        );
        assert_eq!(
            err(json!({"in": {"path": "a", "values": [1, {}]}})),
            "in.values[1]: must be a string, a number, a boolean or null, got an object"
        );
        assert_eq!(
            err(json!({"and": {"exists": "a"}})),
            "and: `and` takes an array of filters, got an object"
        );
        assert_eq!(
            err(json!({"not": {"exists": "[0]"}})),
            "not.exists: bad path \"[0]\": a path starts with a field name, not an index (write \
             `field[0]`)"
        );
        assert!(err(json!({"exists": {"path": ""}})).starts_with("exists.path: bad path \"\""));
        assert_eq!(
            err(json!({"exists": 3})),
            "exists: path must be a string such as \"metadata.tags[0]\", got a number"
        );
        assert!(
            err(json!({"eq": {"path": "a", "value": u64::MAX}})).contains("out of range"),
            "{}",
            err(json!({"eq": {"path": "a", "value": u64::MAX}}))
        );
        assert!(err(json!([])).contains("got an array"));
        assert_eq!(
            err(json!({"contains": {"path": "a", "value": "x\u{0}"}})),
            "contains.value: a string value cannot hold U+0000 (PostgreSQL stores no NUL in text \
             or jsonb)"
        );
        assert!(matches!(Filter::from_json("{"), Err(FilterError::Json(_))));
    }

    #[test]
    fn hostile_filters_are_refused() {
        let mut deep = json!({"exists": "a"});
        for _ in 0..MAX_DEPTH {
            deep = json!({"not": deep});
        }
        assert!(Filter::parse(&deep).is_ok());
        let deeper = json!({"and": [deep]});
        assert!(matches!(
            Filter::parse(&deeper),
            Err(FilterError::TooLarge {
                limit: MAX_DEPTH,
                ..
            })
        ));
        let wide = json!({"or": vec![json!({"exists": "a"}); MAX_NODES]});
        assert!(matches!(
            Filter::parse(&wide),
            Err(FilterError::TooLarge {
                limit: MAX_NODES,
                ..
            })
        ));
        let long = json!({"in": {"path": "a", "values": vec![1; MAX_LIST + 1]}});
        let e = Filter::parse(&long).unwrap_err();
        assert_eq!(
            e,
            FilterError::TooLarge {
                at: "in.values".into(),
                what: "the length of an `in`/`nin` list",
                limit: MAX_LIST
            }
        );
        let big = json!({"eq": {"path": "a", "value": "x".repeat(MAX_STRING_BYTES + 1)}});
        assert!(
            Filter::parse(&big)
                .unwrap_err()
                .to_string()
                .contains("4096")
        );
        // Through serde, too.
        let e = serde_json::from_value::<Filter>(deeper).unwrap_err();
        assert!(e.to_string().contains("nesting depth"), "{e}");
    }

    #[test]
    fn serde_round_trips() {
        let f: Filter = serde_json::from_str(
            r#"{"or": [{"eq": {"path": "metadata.\"a.b\"[2]", "value": 1.5}}, {"exists": "x"}]}"#,
        )
        .unwrap();
        let text = serde_json::to_string(&f).unwrap();
        assert_eq!(
            text,
            r#"{"or":[{"eq":{"path":"metadata.\"a.b\"[2]","value":1.5}},{"exists":"x"}]}"#
        );
        assert_eq!(text.parse::<Filter>().unwrap(), f);
    }

    pub(crate) fn arb_scalar() -> impl Strategy<Value = Scalar> {
        prop_oneof![
            Just(Scalar::Null),
            any::<bool>().prop_map(Scalar::Bool),
            any::<i64>().prop_map(|i| Scalar::Number(i.into())),
            any::<f64>()
                .prop_filter_map("finite", Number::from_f64)
                .prop_map(Scalar::Number),
            "[^\\x00]{0,8}".prop_map(Scalar::String),
        ]
    }

    /// Any JSON, biased towards the operator and field names so that parsing gets deep.
    fn arb_json() -> impl Strategy<Value = Value> {
        let key = prop_oneof![
            Just("and".to_owned()),
            Just("or".to_owned()),
            Just("not".to_owned()),
            Just("eq".to_owned()),
            Just("in".to_owned()),
            Just("gt".to_owned()),
            Just("contains".to_owned()),
            Just("exists".to_owned()),
            Just("path".to_owned()),
            Just("value".to_owned()),
            Just("values".to_owned()),
            "\\PC{0,4}",
        ];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-z.\\[\\]0-9\"]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 4, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((key.clone(), inner), 0..3)
                    .prop_map(|entries| Value::Object(entries.into_iter().collect())),
            ]
        })
    }

    fn arb_path() -> impl Strategy<Value = Path> {
        "[a-z]{1,3}(\\.[a-z\"0-9]{1,3}|\\[[0-9]{1,2}\\]){0,3}"
            .prop_filter_map("a valid path", |text| Path::parse(&text).ok())
    }

    fn arb_filter() -> impl Strategy<Value = Filter> {
        let leaf = prop_oneof![
            (arb_path(), arb_scalar()).prop_map(|(path, value)| Filter::Eq { path, value }),
            (arb_path(), arb_scalar()).prop_map(|(path, value)| Filter::Ne { path, value }),
            (arb_path(), prop::collection::vec(arb_scalar(), 0..4))
                .prop_map(|(path, values)| Filter::In { path, values }),
            (arb_path(), prop::collection::vec(arb_scalar(), 0..4))
                .prop_map(|(path, values)| Filter::Nin { path, values }),
            (
                prop_oneof![
                    Just(Order::Gt),
                    Just(Order::Gte),
                    Just(Order::Lt),
                    Just(Order::Lte)
                ],
                arb_path(),
                prop_oneof![
                    any::<i64>().prop_map(|i| Bound::Number(i.into())),
                    "[^\\x00]{0,8}".prop_map(Bound::String)
                ]
            )
                .prop_map(|(order, path, value)| Filter::Compare {
                    order,
                    path,
                    value
                }),
            (arb_path(), arb_scalar()).prop_map(|(path, value)| Filter::Contains { path, value }),
            arb_path().prop_map(|path| Filter::Exists { path }),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Filter::And),
                prop::collection::vec(inner.clone(), 0..4).prop_map(Filter::Or),
                inner.prop_map(|f| Filter::Not(Box::new(f))),
            ]
        })
    }

    proptest! {
        #[test]
        fn json_round_trip(filter in arb_filter()) {
            let text = serde_json::to_string(&filter).unwrap();
            let back: Filter = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&back, &filter);
            prop_assert_eq!(Filter::parse(&filter.to_value()).unwrap(), filter);
        }

        #[test]
        fn never_panics_on_arbitrary_json(text in "[\\[\\]{}\",:a-z0-9 .]{0,60}") {
            let _ = Filter::from_json(&text);
        }

        #[test]
        fn never_panics_on_arbitrary_values(value in arb_json()) {
            let _ = Filter::parse(&value);
        }
    }
}
