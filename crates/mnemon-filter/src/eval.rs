//! Evaluation against a JSON document, as the in-memory stores filter
//! (docs/reference/filters.md#semantics). The SQL translation (`sql.rs`) must agree with it on
//! every document and filter.

use std::cmp::Ordering;

use serde_json::{Number, Value};

use crate::filter::{Bound, Filter, Order, Scalar};
use crate::path::{Path, Step};

/// The value at `path` in `doc`, or `None` when something on the way is missing or of the wrong
/// kind (a key on a non-object, an index on a non-array).
pub fn lookup<'a>(doc: &'a Value, path: &Path) -> Option<&'a Value> {
    let mut value = doc.as_object()?.get(path.root())?;
    for step in path.rest() {
        value = match (step, value) {
            (Step::Key(key), Value::Object(object)) => object.get(key)?,
            (Step::Index(index), Value::Array(array)) => {
                array.get(usize::try_from(*index).ok()?)?
            }
            _ => return None,
        };
    }
    Some(value)
}

/// A number as an exact integer or a float.
enum Num {
    Int(i128),
    Float(f64),
}

fn num(n: &Number) -> Option<Num> {
    if let Some(i) = n.as_i64() {
        Some(Num::Int(i128::from(i)))
    } else if let Some(u) = n.as_u64() {
        Some(Num::Int(i128::from(u)))
    } else {
        n.as_f64().map(Num::Float)
    }
}

/// `i` against `f`, exactly (no rounding of the integer to a float), as SQLite compares an
/// INTEGER with a REAL and PostgreSQL compares `numeric`s.
fn cmp_int_float(i: i128, f: f64) -> Option<Ordering> {
    if f.is_nan() {
        return None;
    }
    // 2^127: every i128 lies below it, and every float beyond it is integral.
    const LIMIT: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;
    if f >= LIMIT {
        return Some(Ordering::Less);
    }
    if f < -LIMIT {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // Exact: `whole` is an integer of magnitude below 2^127.
    #[allow(clippy::cast_possible_truncation)]
    let whole_int = whole as i128;
    match i.cmp(&whole_int) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - whole)),
        other => Some(other),
    }
}

/// Numeric comparison of two JSON numbers: integers and floats compare by value, exactly.
pub(crate) fn cmp_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    match (num(a)?, num(b)?) {
        (Num::Int(x), Num::Int(y)) => Some(x.cmp(&y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(x), Num::Float(y)) => cmp_int_float(x, y),
        (Num::Float(x), Num::Int(y)) => cmp_int_float(y, x).map(Ordering::reverse),
    }
}

/// `value` equals `scalar`: same JSON type; numbers by value; strings byte for byte.
pub(crate) fn scalar_eq(value: &Value, scalar: &Scalar) -> bool {
    match (value, scalar) {
        (Value::Null, Scalar::Null) => true,
        (Value::Bool(a), Scalar::Bool(b)) => a == b,
        (Value::Number(a), Scalar::Number(b)) => cmp_numbers(a, b) == Some(Ordering::Equal),
        (Value::String(a), Scalar::String(b)) => a == b,
        _ => false,
    }
}

fn compare(value: &Value, bound: &Bound) -> Option<Ordering> {
    match (value, bound) {
        (Value::Number(a), Bound::Number(b)) => cmp_numbers(a, b),
        (Value::String(a), Bound::String(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        _ => None,
    }
}

impl Filter {
    /// Whether `doc` (a JSON object whose members are the record's fields) matches
    /// (docs/reference/filters.md#semantics).
    pub fn matches(&self, doc: &Value) -> bool {
        match self {
            Filter::Eq { path, value } => lookup(doc, path).is_some_and(|v| scalar_eq(v, value)),
            Filter::Ne { path, value } => !lookup(doc, path).is_some_and(|v| scalar_eq(v, value)),
            Filter::In { path, values } => {
                lookup(doc, path).is_some_and(|v| values.iter().any(|s| scalar_eq(v, s)))
            }
            Filter::Nin { path, values } => {
                !lookup(doc, path).is_some_and(|v| values.iter().any(|s| scalar_eq(v, s)))
            }
            Filter::Compare { order, path, value } => lookup(doc, path)
                .and_then(|v| compare(v, value))
                .is_some_and(|ordering| match order {
                    Order::Gt => ordering == Ordering::Greater,
                    Order::Gte => ordering != Ordering::Less,
                    Order::Lt => ordering == Ordering::Less,
                    Order::Lte => ordering != Ordering::Greater,
                }),
            Filter::Contains { path, value } => match (lookup(doc, path), value) {
                (Some(Value::String(text)), Scalar::String(needle)) => {
                    text.contains(needle.as_str())
                }
                (Some(Value::Array(items)), value) => items.iter().any(|v| scalar_eq(v, value)),
                _ => false,
            },
            Filter::Exists { path } => lookup(doc, path).is_some(),
            Filter::And(operands) => operands.iter().all(|f| f.matches(doc)),
            Filter::Or(operands) => operands.iter().any(|f| f.matches(doc)),
            Filter::Not(operand) => !operand.matches(doc),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn m(filter: Value, doc: &Value) -> bool {
        Filter::parse(&filter).unwrap().matches(doc)
    }

    fn doc() -> Value {
        json!({
            "role": "user", "name": "ann", "n": 3, "x": 2.5, "flag": true, "nothing": null,
            "timestamp": "2026-03-01 10:00:00",
            "metadata": {"tags": ["a", "b", 7, null], "a.b": {"c": 1}, "0": "zero"},
            "marks": ["todo"], "list": [[1], {"k": 1}]
        })
    }

    #[test]
    fn eq_and_ne() {
        let d = doc();
        assert!(m(json!({"eq": {"path": "role", "value": "user"}}), &d));
        assert!(!m(json!({"eq": {"path": "role", "value": "User"}}), &d));
        assert!(m(json!({"eq": {"path": "n", "value": 3.0}}), &d));
        assert!(!m(json!({"eq": {"path": "n", "value": "3"}}), &d));
        assert!(m(json!({"eq": {"path": "flag", "value": true}}), &d));
        assert!(!m(json!({"eq": {"path": "flag", "value": 1}}), &d));
        assert!(m(json!({"eq": {"path": "nothing", "value": null}}), &d));
        assert!(!m(json!({"eq": {"path": "missing", "value": null}}), &d));
        assert!(m(
            json!({"eq": {"path": "metadata.\"a.b\".c", "value": 1}}),
            &d
        ));
        assert!(m(
            json!({"eq": {"path": "metadata.tags[1]", "value": "b"}}),
            &d
        ));
        assert!(m(
            json!({"eq": {"path": "metadata.\"0\"", "value": "zero"}}),
            &d
        ));
        // An index is not a key, and a key is not an index.
        assert!(!m(json!({"exists": "metadata[0]"}), &d));
        assert!(!m(json!({"exists": "metadata.tags.\"0\""}), &d));
        assert!(m(json!({"ne": {"path": "role", "value": "bot"}}), &d));
        assert!(!m(json!({"ne": {"path": "role", "value": "user"}}), &d));
        // `ne` is `not eq`: a missing field or another type is "not equal".
        assert!(m(json!({"ne": {"path": "missing", "value": "x"}}), &d));
        assert!(m(json!({"ne": {"path": "n", "value": "3"}}), &d));
    }

    #[test]
    fn in_and_nin() {
        let d = doc();
        assert!(m(
            json!({"in": {"path": "role", "values": ["bot", "user"]}}),
            &d
        ));
        assert!(!m(json!({"in": {"path": "role", "values": []}}), &d));
        assert!(!m(json!({"in": {"path": "missing", "values": [null]}}), &d));
        assert!(m(json!({"in": {"path": "n", "values": [1, 3.0]}}), &d));
        assert!(!m(
            json!({"nin": {"path": "role", "values": ["bot", "user"]}}),
            &d
        ));
        assert!(m(json!({"nin": {"path": "role", "values": []}}), &d));
        assert!(m(json!({"nin": {"path": "missing", "values": ["x"]}}), &d));
    }

    #[test]
    fn orderings() {
        let d = doc();
        assert!(m(json!({"gt": {"path": "n", "value": 2}}), &d));
        assert!(m(json!({"gt": {"path": "n", "value": 2.999}}), &d));
        assert!(!m(json!({"gt": {"path": "n", "value": 3}}), &d));
        assert!(m(json!({"gte": {"path": "n", "value": 3}}), &d));
        assert!(m(json!({"lt": {"path": "x", "value": 3}}), &d));
        assert!(m(json!({"lte": {"path": "x", "value": 2.5}}), &d));
        assert!(!m(json!({"lt": {"path": "x", "value": 2.5}}), &d));
        let ts = "timestamp";
        assert!(m(json!({"gte": {"path": ts, "value": "2026-01-01"}}), &d));
        assert!(!m(json!({"lt": {"path": ts, "value": "2026-01-01"}}), &d));
        // No order between numbers and strings, nor on other types, nor on missing fields.
        assert!(!m(json!({"gt": {"path": "n", "value": "1"}}), &d));
        assert!(!m(json!({"lt": {"path": "n", "value": "1"}}), &d));
        assert!(!m(json!({"gt": {"path": "role", "value": 1}}), &d));
        assert!(!m(json!({"gte": {"path": "flag", "value": 0}}), &d));
        assert!(!m(json!({"gte": {"path": "missing", "value": 0}}), &d));
        assert!(m(json!({"not": {"gt": {"path": "role", "value": 1}}}), &d));
        // Strings order by bytes: "B" < "a", "é" > "z".
        assert!(m(json!({"lt": {"path": "name", "value": "b"}}), &d));
        assert!(!m(json!({"lt": {"path": "name", "value": "B"}}), &d));
        assert!(m(json!({"lt": {"path": "name", "value": "é"}}), &d));
    }

    #[test]
    fn numbers_compare_exactly() {
        let big = json!({"v": 9_007_199_254_740_993_i64});
        assert!(m(
            json!({"gt": {"path": "v", "value": 9_007_199_254_740_992.0}}),
            &big
        ));
        assert!(!m(
            json!({"eq": {"path": "v", "value": 9_007_199_254_740_992.0}}),
            &big
        ));
        assert!(m(json!({"lt": {"path": "v", "value": 1e300}}), &big));
        assert!(m(json!({"gt": {"path": "v", "value": -1e300}}), &big));
        let zero = json!({"v": -0.0});
        assert!(m(json!({"eq": {"path": "v", "value": 0}}), &zero));
        assert_eq!(
            cmp_int_float(i128::from(i64::MIN), -9_223_372_036_854_775_808.0),
            Some(Ordering::Equal)
        );
        assert_eq!(cmp_int_float(-3, -2.5), Some(Ordering::Less));
        assert_eq!(cmp_int_float(-2, -2.5), Some(Ordering::Greater));
        assert_eq!(cmp_int_float(2, 2.5), Some(Ordering::Less));
    }

    #[test]
    fn contains_and_exists() {
        let d = doc();
        assert!(m(json!({"contains": {"path": "name", "value": "nn"}}), &d));
        assert!(m(json!({"contains": {"path": "name", "value": ""}}), &d));
        assert!(!m(json!({"contains": {"path": "name", "value": "N"}}), &d));
        assert!(m(
            json!({"contains": {"path": "metadata.tags", "value": "a"}}),
            &d
        ));
        assert!(m(
            json!({"contains": {"path": "metadata.tags", "value": 7.0}}),
            &d
        ));
        assert!(m(
            json!({"contains": {"path": "metadata.tags", "value": null}}),
            &d
        ));
        assert!(!m(
            json!({"contains": {"path": "metadata.tags", "value": "ab"}}),
            &d
        ));
        // Not a substring of an array element, not a key of an object, not a number's digits.
        assert!(!m(
            json!({"contains": {"path": "marks", "value": "to"}}),
            &d
        ));
        assert!(!m(
            json!({"contains": {"path": "metadata", "value": "0"}}),
            &d
        ));
        assert!(!m(json!({"contains": {"path": "n", "value": 3}}), &d));
        assert!(!m(json!({"contains": {"path": "name", "value": 3}}), &d));
        assert!(!m(
            json!({"contains": {"path": "missing", "value": "a"}}),
            &d
        ));
        // Exists is true on JSON null.
        assert!(m(json!({"exists": "nothing"}), &d));
        assert!(m(json!({"exists": "metadata.tags[3]"}), &d));
        assert!(!m(json!({"exists": "metadata.tags[4]"}), &d));
        assert!(!m(json!({"exists": "role.x"}), &d));
        assert!(!m(json!({"exists": "role"}), &json!([{"role": 1}])));
    }

    #[test]
    fn and_or_not() {
        let d = doc();
        let yes = json!({"exists": "role"});
        let no = json!({"exists": "missing"});
        assert!(m(json!({"and": []}), &d));
        assert!(!m(json!({"or": []}), &d));
        assert!(m(json!({"and": [yes, yes]}), &d));
        assert!(!m(json!({"and": [yes, no]}), &d));
        assert!(m(json!({"or": [no, yes]}), &d));
        assert!(!m(json!({"or": [no, no]}), &d));
        assert!(m(json!({"not": no}), &d));
        assert!(!m(json!({"not": yes}), &d));
    }
}
