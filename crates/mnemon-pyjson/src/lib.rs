//! Writing JSON exactly as Python's `json.dumps` / `json.dump` does with its defaults
//! (`ensure_ascii=True`), so that files Mnemon writes are byte-identical to the ones the Python
//! tools it is compatible with (Polymath, AgentScope) write. One difference: a non-finite float
//! (which a `serde_json::Value` cannot hold) is written `null`, as serde_json writes it before any
//! formatter sees it, where Python's default `allow_nan=True` writes `NaN` or `Infinity`.
//!
//! The rules, all implemented by [`PythonFormatter`], a [`serde_json::ser::Formatter`]:
//!
//! * **Layout.** Without `indent`: items separated by `", "`, keys by `": "`, everything on one
//!   line. With `indent` (a string, or a number of spaces): each item on its own line indented
//!   by `indent` per level, items separated by `","` (Python ≥ 3.4 drops the trailing space when
//!   indenting), keys by `": "`, and empty containers written as `[]` / `{}`.
//! * **Strings** (`ensure_ascii`). `"` and `\` are backslash-escaped; `\b \f \n \r \t` use their
//!   short forms; other characters below U+0020, U+007F (DEL) and every non-ASCII character
//!   are written `\uXXXX` with lowercase hex, characters beyond the BMP as a UTF-16 surrogate
//!   pair. `/` is not escaped. The output is therefore always pure printable ASCII.
//! * **Floats** as Python's `float.__repr__` ([`python_float_repr`]): the shortest digits that
//!   read back as the same value, positional for decimal exponents −4 to 15 (always with a
//!   fractional part: `1.0`), scientific otherwise with a signed, at least two-digit exponent
//!   (`1e-05`, `1.5e+16`). Integers are written as integers.
//!
//! ```
//! use mnemon_pyjson::{PythonFormatter, python_float_repr, to_string};
//! use serde_json::json;
//!
//! let value = json!({"text": "caf\u{e9}\u{7f}", "score": 1e-5, "ids": [1, 2]});
//! // json.dumps(value)
//! assert_eq!(
//!     to_string(&value, PythonFormatter::compact())?,
//!     r#"{"text": "caf\u00e9\u007f", "score": 1e-05, "ids": [1, 2]}"#
//! );
//! // json.dumps(value, indent='\t')
//! assert_eq!(
//!     to_string(&json!({"a": [], "b": [0.5]}), PythonFormatter::indented("\t"))?,
//!     "{\n\t\"a\": [],\n\t\"b\": [\n\t\t0.5\n\t]\n}"
//! );
//! assert_eq!(python_float_repr(1e16), "1e+16");
//! # Ok::<(), mnemon_pyjson::PyJsonError>(())
//! ```

use std::io::{self, Write};

use serde::Serialize;
use serde_json::ser::Formatter;

/// Why a value could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PyJsonError {
    /// The value refused to serialize (a map with non-string keys, a custom `Serialize` that
    /// failed) or the writer failed.
    #[error(
        "cannot write the value as Python-compatible JSON: {0} (map keys must be strings; check the writer if this is an I/O error)"
    )]
    Serialize(#[from] serde_json::Error),
}

/// A `serde_json` formatter that writes Python's `json.dumps` layout, ASCII-only strings and
/// float `repr` (see the crate documentation for the rules).
#[derive(Debug, Clone)]
pub struct PythonFormatter {
    /// `None`: the one-line default layout; `Some(unit)`: `indent=unit`.
    indent: Option<Vec<u8>>,
    depth: usize,
    /// Whether the innermost open container has at least one item (decides whether its closing
    /// bracket goes on a new line).
    has_value: bool,
}

impl PythonFormatter {
    /// `json.dumps(value)`: one line, separators `", "` and `": "`.
    pub fn compact() -> Self {
        PythonFormatter {
            indent: None,
            depth: 0,
            has_value: false,
        }
    }

    /// `json.dumps(value, indent=unit)` with a string `unit` (e.g. `"\t"`).
    pub fn indented(unit: &str) -> Self {
        PythonFormatter {
            indent: Some(unit.as_bytes().to_vec()),
            depth: 0,
            has_value: false,
        }
    }

    /// `json.dumps(value, indent=n)`: `n` spaces per level (0 still puts each item on its own
    /// line, as Python does).
    pub fn spaces(n: usize) -> Self {
        Self::indented(&" ".repeat(n))
    }

    fn newline<W: ?Sized + Write>(&self, writer: &mut W) -> io::Result<()> {
        if let Some(unit) = &self.indent {
            writer.write_all(b"\n")?;
            for _ in 0..self.depth {
                writer.write_all(unit)?;
            }
        }
        Ok(())
    }

    fn separator<W: ?Sized + Write>(&self, writer: &mut W, first: bool) -> io::Result<()> {
        if !first {
            let sep: &[u8] = if self.indent.is_some() { b"," } else { b", " };
            writer.write_all(sep)?;
        }
        self.newline(writer)
    }

    fn open<W: ?Sized + Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(bracket)
    }

    fn close<W: ?Sized + Write>(&mut self, writer: &mut W, bracket: &[u8]) -> io::Result<()> {
        self.depth = self.depth.saturating_sub(1);
        if self.has_value {
            self.newline(writer)?;
        }
        self.has_value = true;
        writer.write_all(bracket)
    }
}

/// Serializes `value` with `formatter` into a string.
pub fn to_string<T: ?Sized + Serialize>(
    value: &T,
    formatter: PythonFormatter,
) -> Result<String, PyJsonError> {
    let mut out = Vec::with_capacity(256);
    to_writer(&mut out, value, formatter)?;
    // The formatter only ever writes ASCII, and serde_json writes map keys and strings through
    // it, so the bytes are valid UTF-8; the lossy conversion never replaces anything.
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// `json.dumps(value)` of a JSON value: one line, separators `", "` and `": "`, ASCII only.
///
/// Unlike [`to_string`] this cannot fail: a [`serde_json::Value`] always has string keys.
pub fn dumps(value: &serde_json::Value) -> String {
    value_to_string(value, PythonFormatter::compact())
}

/// `json.dumps(value, indent=spaces)` of a JSON value (exports use 4).
pub fn dumps_indent(value: &serde_json::Value, spaces: usize) -> String {
    value_to_string(value, PythonFormatter::spaces(spaces))
}

fn value_to_string(value: &serde_json::Value, formatter: PythonFormatter) -> String {
    // Serializing a `Value` into a Vec cannot fail (string keys, infallible writer); the
    // fallback only keeps this total without a panic.
    to_string(value, formatter).unwrap_or_else(|_| value.to_string())
}

/// Serializes `value` with `formatter` into `writer`.
pub fn to_writer<W: Write, T: ?Sized + Serialize>(
    writer: W,
    value: &T,
    formatter: PythonFormatter,
) -> Result<(), PyJsonError> {
    let mut serializer = serde_json::Serializer::with_formatter(writer, formatter);
    value.serialize(&mut serializer)?;
    Ok(())
}

/// Writes `fragment` with every character from U+007F up as `\uXXXX` (UTF-16 units, lowercase
/// hex), as Python's `ensure_ascii` does. serde_json hands the formatter only fragments free of
/// `"`, `\` and control characters (it escapes those itself through `write_char_escape`, with
/// the same escapes Python uses), so everything below U+007F here is written as is.
fn write_ascii_escaped<W: ?Sized + Write>(writer: &mut W, fragment: &str) -> io::Result<()> {
    let mut start = 0;
    for (i, c) in fragment.char_indices() {
        if u32::from(c) < 0x7f {
            continue;
        }
        writer.write_all(fragment.as_bytes().get(start..i).unwrap_or_default())?;
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            write!(writer, "\\u{unit:04x}")?;
        }
        start = i + c.len_utf8();
    }
    writer.write_all(fragment.as_bytes().get(start..).unwrap_or_default())
}

impl Formatter for PythonFormatter {
    fn write_f64<W: ?Sized + Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(python_float_repr(value).as_bytes())
    }

    /// Python has only double-precision floats: an `f32` is written as the `f64` it widens to
    /// (`0.1f32` → `0.10000000149011612`), as Python would print that value.
    fn write_f32<W: ?Sized + Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        self.write_f64(writer, f64::from(value))
    }

    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        write_ascii_escaped(writer, fragment)
    }

    fn begin_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"[")
    }

    fn end_array<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"]")
    }

    fn begin_array_value<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.separator(writer, first)
    }

    fn end_array_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.open(writer, b"{")
    }

    fn end_object<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.close(writer, b"}")
    }

    fn begin_object_key<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.separator(writer, first)
    }

    fn begin_object_value<W: ?Sized + Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// Python's `float.__repr__` (also what `json.dumps` writes for a float): shortest round-trip
/// digits, positional for decimal exponents −4 to 15 (keeping `.0`), otherwise scientific with
/// a signed, at least two-digit exponent (`1e-05`, `1.5e+16`). `NaN`, `Infinity` and
/// `-Infinity` are written as `json.dumps` writes them (serde_json itself never passes a
/// non-finite value to a formatter: it writes `null`).
pub fn python_float_repr(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // `{:e}` gives the shortest round-trip digits, e.g. "1.2345e-7".
    let sci = format!("{:e}", value.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if value.is_sign_negative() { "-" } else { "" };
    if (-4..16).contains(&exponent) {
        if exponent < 0 {
            let zeros = "0".repeat(exponent.unsigned_abs() as usize - 1);
            return format!("{sign}0.{zeros}{digits}");
        }
        let point = exponent as usize + 1;
        match (digits.get(..point), digits.get(point..)) {
            (Some(int), Some(frac)) if !frac.is_empty() => format!("{sign}{int}.{frac}"),
            _ => {
                let zeros = "0".repeat(point.saturating_sub(digits.len()));
                format!("{sign}{digits}{zeros}.0")
            }
        }
    } else {
        let (head, tail) = digits.split_at(1.min(digits.len()));
        let fraction = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!(
            "{sign}{head}{fraction}e{exp_sign}{:02}",
            exponent.unsigned_abs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn compact(v: &Value) -> String {
        to_string(v, PythonFormatter::compact()).unwrap()
    }

    /// Python's `py_encode_basestring_ascii` (Lib/json/encoder.py), written independently of
    /// the formatter: the escape rules the formatter must follow.
    fn python_ascii_string(s: &str) -> String {
        let mut out = String::from("\"");
        for c in s.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                ' '..='~' => out.push(c),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{u:04x}"));
                    }
                }
            }
        }
        out.push('"');
        out
    }

    #[test]
    fn floats_like_python() {
        for (v, s) in [
            (0.1, "0.1"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (-2.5, "-2.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (0.7341831922531128, "0.7341831922531128"),
            (123456.789, "123456.789"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.2345e-7, "1.2345e-07"),
            (1e100, "1e+100"),
            (1e-100, "1e-100"),
            (f64::from(0.1f32), "0.10000000149011612"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(python_float_repr(v), s, "{v}");
        }
    }

    #[test]
    fn del_is_escaped_like_python() {
        // json.dumps("\x7f") == '"\\u007f"' (ensure_ascii escapes everything outside 0x20..0x7e).
        assert_eq!(compact(&json!("a\u{7f}b")), r#""a\u007fb""#);
    }

    #[test]
    fn layouts_like_python() {
        let v = json!({"a": [1, {"b": "ø😀\u{1f}\"/\u{7f}"}], "e": [], "o": {}});
        assert_eq!(
            compact(&v),
            r#"{"a": [1, {"b": "\u00f8\ud83d\ude00\u001f\"/\u007f"}], "e": [], "o": {}}"#
        );
        assert_eq!(
            to_string(&v, PythonFormatter::indented("\t")).unwrap(),
            "{\n\t\"a\": [\n\t\t1,\n\t\t{\n\t\t\t\"b\": \"\\u00f8\\ud83d\\ude00\\u001f\\\"/\\u007f\"\n\t\t}\n\t],\n\t\"e\": [],\n\t\"o\": {}\n}"
        );
        assert_eq!(
            to_string(&json!([1, [2]]), PythonFormatter::spaces(2)).unwrap(),
            "[\n  1,\n  [\n    2\n  ]\n]"
        );
        assert_eq!(
            to_string(&json!([1]), PythonFormatter::spaces(0)).unwrap(),
            "[\n1\n]"
        );
    }

    #[test]
    fn python_reprs_of_message_numbers() {
        for (x, s) in [
            (0.12, "0.12"),
            (-0.5, "-0.5"),
            (1.0, "1.0"),
            (100.0, "100.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (123.456, "123.456"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1e-100, "1e-100"),
            (0.1f32 as f64, "0.10000000149011612"),
        ] {
            assert_eq!(python_float_repr(x), s);
        }
    }

    #[test]
    fn dumps_layouts() {
        let v = json!({"a": [1, {"b": "é😀\u{7f}"}], "c": [], "d": {}});
        assert_eq!(
            dumps(&v),
            r#"{"a": [1, {"b": "\u00e9\ud83d\ude00\u007f"}], "c": [], "d": {}}"#
        );
        assert_eq!(
            dumps_indent(&v, 2),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": \"\\u00e9\\ud83d\\ude00\\u007f\"\n    }\n  ],\n  \"c\": [],\n  \"d\": {}\n}"
        );
    }

    #[test]
    fn f32_widens_like_python() {
        assert_eq!(
            to_string(&[0.1f32], PythonFormatter::compact()).unwrap(),
            "[0.10000000149011612]"
        );
    }

    #[test]
    fn non_string_keys_are_an_error() {
        let map = std::collections::BTreeMap::from([(vec![1u8], 1)]);
        let err = to_string(&map, PythonFormatter::compact()).unwrap_err();
        assert!(
            err.to_string().contains("map keys must be strings"),
            "{err}"
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |x| x.is_finite())
                .prop_map(Value::from),
            any::<String>().prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((any::<String>(), inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// Python's `json.dumps` of a value, written independently of the formatter (recursive,
    /// string-building), for the layout property.
    fn python_dumps(v: &Value, indent: Option<&str>, depth: usize) -> String {
        let (item_sep, open_nl, close_nl) = match indent {
            None => (", ".to_string(), String::new(), String::new()),
            Some(unit) => (
                format!(",\n{}", unit.repeat(depth + 1)),
                format!("\n{}", unit.repeat(depth + 1)),
                format!("\n{}", unit.repeat(depth)),
            ),
        };
        match v {
            Value::Null => "null".into(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => match n.as_i64() {
                Some(i) => i.to_string(),
                None => match n.as_u64() {
                    Some(u) => u.to_string(),
                    None => python_float_repr(n.as_f64().unwrap()),
                },
            },
            Value::String(s) => python_ascii_string(s),
            Value::Array(a) if a.is_empty() => "[]".into(),
            Value::Object(o) if o.is_empty() => "{}".into(),
            Value::Array(a) => {
                let items: Vec<String> = a
                    .iter()
                    .map(|x| python_dumps(x, indent, depth + 1))
                    .collect();
                format!("[{open_nl}{}{close_nl}]", items.join(&item_sep))
            }
            Value::Object(o) => {
                let items: Vec<String> = o
                    .iter()
                    .map(|(k, x)| {
                        format!(
                            "{}: {}",
                            python_ascii_string(k),
                            python_dumps(x, indent, depth + 1)
                        )
                    })
                    .collect();
                format!("{{{open_nl}{}{close_nl}}}", items.join(&item_sep))
            }
        }
    }

    proptest! {
        #[test]
        fn strings_follow_python_escape_rules(s in any::<String>()) {
            let out = compact(&Value::String(s.clone()));
            prop_assert_eq!(&out, &python_ascii_string(&s));
            prop_assert!(out.bytes().all(|b| (0x20..0x7f).contains(&b)));
            let back: String = serde_json::from_str(&out).unwrap();
            prop_assert_eq!(back, s);
        }

        #[test]
        fn float_repr_round_trips_and_is_shortest(x in any::<f64>().prop_filter("finite", |x| x.is_finite())) {
            let repr = python_float_repr(x);
            let back: f64 = repr.parse().unwrap();
            prop_assert_eq!(back.to_bits(), x.to_bits());
            // Shortest digits: as many significant digits as Rust's shortest round-trip form.
            let shortest = format!("{:e}", x.abs());
            let want = shortest.split('e').next().unwrap().chars().filter(char::is_ascii_digit).count();
            let (mantissa, exp) = match repr.split_once('e') {
                Some((m, e)) => (m, Some(e)),
                None => (repr.as_str(), None),
            };
            match exp {
                Some(e) => {
                    // Scientific only outside −4..16, with a sign and ≥ 2 exponent digits.
                    prop_assert!(e.starts_with('+') || e.starts_with('-'));
                    prop_assert!(e.len() >= 3);
                    let e: i32 = e.parse().unwrap();
                    prop_assert!(!(-4..16).contains(&e));
                    let got = mantissa.chars().filter(char::is_ascii_digit).count();
                    prop_assert_eq!(got, want);
                }
                None => {
                    prop_assert!(mantissa.contains('.'));
                    let significant = mantissa.trim_start_matches('-').replace('.', "");
                    let significant = significant.trim_start_matches('0').trim_end_matches('0');
                    prop_assert!(significant.len() <= want.max(1));
                }
            }
        }

        #[test]
        fn dumps_is_json(value in arb_json()) {
            let back: Value = serde_json::from_str(&dumps(&value)).unwrap();
            prop_assert_eq!(&back, &value);
            let back: Value = serde_json::from_str(&dumps_indent(&value, 4)).unwrap();
            prop_assert_eq!(back, value);
        }

        #[test]
        fn layouts_follow_python_rules(v in arb_json()) {
            prop_assert_eq!(compact(&v), python_dumps(&v, None, 0));
            for unit in ["\t", "    ", ""] {
                let out = to_string(&v, PythonFormatter::indented(unit)).unwrap();
                prop_assert_eq!(&out, &python_dumps(&v, Some(unit), 0));
                let back: Value = serde_json::from_str(&out).unwrap();
                prop_assert_eq!(&back, &v);
            }
        }
    }
}
