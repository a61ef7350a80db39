//! Translation to a SQL `WHERE` fragment for SQLite (JSON1) and PostgreSQL (`jsonb`)
//! (docs/reference/filters.md#sql).
//!
//! The fragment agrees with [`Filter::matches`] on every document: each leaf checks the JSON type
//! of the value at its path before comparing, so `1` never equals `"1"` or `true`, and is
//! two-valued (wrapped in `COALESCE(…, FALSE)`, or `… AND c IS NOT NULL` on a typed column so
//! that its index serves), so a missing field gives FALSE rather than NULL and `NOT` means "does
//! not match". Values and paths are bound parameters, never SQL text: there is no escaping to get
//! wrong, and a statement's text depends only on the filter's shape, so prepared-statement
//! caches are reused. The only text spliced in is what the store's resolver returns (its own
//! column names and expressions, never input).

use crate::error::FilterError;
use crate::filter::{Bound, Filter, Order, Scalar};
use crate::path::{Path, Step};

/// Which SQL to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite with the JSON functions (`json_type`, `json_extract`, `json_each`; built in since
    /// 3.38); parameters are `?N`. Documents are JSON text (or SQLite's JSONB).
    Sqlite,
    /// PostgreSQL, documents in `jsonb`; parameters are `$N`, each cast to its type in the text.
    Postgres,
}

/// A bound parameter of a fragment. Its placeholder is its 1-based position in the `params`
/// vector given to [`Filter::to_sql`].
#[derive(Debug, Clone, PartialEq)]
pub enum SqlParam {
    /// Text (SQLite `TEXT`; PostgreSQL `text`, the fragment casts it as needed).
    Text(String),
    /// A 64-bit integer (SQLite `INTEGER`; PostgreSQL `int8`).
    Integer(i64),
    /// A double (SQLite `REAL`; PostgreSQL `float8`; only SQLite fragments use it).
    Real(f64),
}

/// The SQL type of a [`Source::Column`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// A text column: the field is a JSON string. On PostgreSQL its collation is deterministic
    /// (the default always is), so equality is byte equality.
    Text,
    /// An integer column: a JSON integer.
    Integer,
    /// A floating-point column: a JSON number.
    Real,
    /// A boolean column (SQLite: 0 or 1): `true` or `false`.
    Boolean,
}

/// Where a store keeps the field a path starts with: what a resolver returns for a path's
/// first name. The expressions are SQL text written by the store, never input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The field is the member of that name in the JSON object held by this expression (a
    /// document column such as `body`); a NULL document has no fields.
    Member(String),
    /// The field's JSON value is this expression (a column holding JSON, or a subquery building
    /// it); NULL means the field is missing.
    Json(String),
    /// The field is this scalar column; NULL means missing. Further steps find nothing.
    Column {
        /// The column or expression.
        expr: String,
        /// Its type.
        kind: ColumnKind,
    },
}

struct Writer<'a, R> {
    dialect: Dialect,
    resolver: &'a R,
    params: &'a mut Vec<SqlParam>,
}

/// Where a leaf's value is, in SQL.
enum Target {
    /// SQLite: a JSON document and a JSON path placeholder.
    Sqlite { doc: String, path: String },
    /// PostgreSQL: a `jsonb` expression (NULL when missing).
    Postgres(String),
    /// A scalar column compared as itself (so its indexes serve): its type is known, so a leaf
    /// is either a plain comparison or FALSE. Not for PostgreSQL `Real` columns, which go
    /// through `to_jsonb` (comparing `float8` with an integer exactly needs `numeric`, whose
    /// conversion from `float8` keeps only 15 digits).
    Column { expr: String, kind: ColumnKind },
}

/// Wraps a leaf so that it is TRUE or FALSE, never NULL. A column leaf is two-valued already
/// (`… AND c IS NOT NULL`) and stays a plain conjunction, which the planners match to the
/// column's index; `COALESCE` around it would hide the comparison from them.
fn leaf(target: &Target, expr: String) -> String {
    match target {
        Target::Column { .. } => format!("({expr})"),
        _ => format!("COALESCE(({expr}), FALSE)"),
    }
}

/// A comparison on a column, made two-valued: NULL (missing) gives FALSE, not NULL.
fn not_null(expr: &str, comparison: String) -> String {
    format!("{comparison} AND {expr} IS NOT NULL")
}

/// Appends `."key"` to a SQLite JSON path or a PostgreSQL SQL/JSON path.
fn push_key(path: &mut String, key: &str) {
    // Names hold no `"`, `\` or control characters (path.rs), so quoting is enough in both
    // syntaxes.
    path.push_str(".\"");
    path.push_str(key);
    path.push('"');
}

impl<R: Fn(&str) -> Option<Source>> Writer<'_, R> {
    fn param(&mut self, param: SqlParam) -> String {
        self.params.push(param);
        let n = self.params.len();
        match self.dialect {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    /// A number as a parameter: SQLite compares INTEGER and REAL values; PostgreSQL gets JSON
    /// text and compares `jsonb` numbers (exact `numeric`s).
    fn number(&mut self, n: &serde_json::Number) -> String {
        match self.dialect {
            Dialect::Sqlite => match n.as_i64() {
                Some(i) => self.param(SqlParam::Integer(i)),
                None => self.param(SqlParam::Real(n.as_f64().unwrap_or(f64::NAN))),
            },
            // The shortest round-trip form, as serde_json writes the documents' floats: `jsonb`
            // keeps numbers as decimals, and two floats' shortest decimals order as the floats
            // do. (An exact decimal would break `0.1 = 0.1`: docs/reference/filters.md#numbers.)
            Dialect::Postgres => {
                let p = self.param(SqlParam::Text(n.to_string()));
                format!("({p}::text)::jsonb")
            }
        }
    }

    fn resolve(&self, path: &Path, at: &str) -> Result<Source, FilterError> {
        (self.resolver)(path.root()).ok_or_else(|| FilterError::UnknownField {
            at: format!("{at}.path"),
            field: path.root().to_owned(),
        })
    }

    fn target(&mut self, path: &Path, at: &str) -> Result<Target, FilterError> {
        let source = self.resolve(path, at)?;
        if let Source::Column { expr, kind } = &source {
            let real_on_postgres = *kind == ColumnKind::Real && self.dialect == Dialect::Postgres;
            if path.rest().is_empty() && !real_on_postgres {
                return Ok(Target::Column {
                    expr: format!("({expr})"),
                    kind: *kind,
                });
            }
        }
        match self.dialect {
            Dialect::Sqlite => {
                let mut text = String::from("$");
                let doc = match source {
                    Source::Member(expr) => {
                        push_key(&mut text, path.root());
                        expr
                    }
                    Source::Json(expr) => expr,
                    Source::Column { expr, kind } => match kind {
                        ColumnKind::Boolean => format!(
                            "CASE WHEN ({expr}) IS NULL THEN NULL WHEN ({expr}) THEN 'true' \
                             ELSE 'false' END"
                        ),
                        _ => format!(
                            "CASE WHEN ({expr}) IS NULL THEN NULL ELSE json_quote({expr}) END"
                        ),
                    },
                };
                for step in path.rest() {
                    match step {
                        Step::Key(key) => push_key(&mut text, key),
                        Step::Index(index) => text.push_str(&format!("[{index}]")),
                    }
                }
                let path = self.param(SqlParam::Text(text));
                Ok(Target::Sqlite { doc, path })
            }
            Dialect::Postgres => {
                let (base, mut text) = match source {
                    Source::Member(expr) => {
                        let mut text = String::from("strict $");
                        push_key(&mut text, path.root());
                        (format!("({expr})"), text)
                    }
                    Source::Json(expr) => (format!("({expr})"), String::from("strict $")),
                    Source::Column { expr, .. } => {
                        (format!("to_jsonb({expr})"), String::from("strict $"))
                    }
                };
                if text.len() == "strict $".len() && path.rest().is_empty() {
                    return Ok(Target::Postgres(base));
                }
                for step in path.rest() {
                    match step {
                        Step::Key(key) => push_key(&mut text, key),
                        Step::Index(index) => text.push_str(&format!("[{index}]")),
                    }
                }
                // A strict SQL/JSON path, not a chain of `->`: `->` with an index treats a
                // scalar as a one-element array (`'1'::jsonb -> 0` is `1`). In strict mode a key
                // on a non-object or an index on a non-array is an error, which `silent`
                // (the last argument) turns into "no value": SQL NULL, as `matches` has it.
                let p = self.param(SqlParam::Text(text));
                let value =
                    format!("jsonb_path_query_first({base}, ({p}::text)::jsonpath, '{{}}', TRUE)");
                Ok(Target::Postgres(value))
            }
        }
    }

    /// SQLite: a JSON value of type `ty` (a `json_type` name) and SQL value `val` equals
    /// `scalar`. `json_extract` turns `true` into 1 and `"1"` into '1', so the type decides.
    fn sqlite_eq(&mut self, ty: &str, val: &str, scalar: &Scalar) -> String {
        match scalar {
            Scalar::Null => format!("{ty} = 'null'"),
            Scalar::Bool(true) => format!("{ty} = 'true'"),
            Scalar::Bool(false) => format!("{ty} = 'false'"),
            Scalar::Number(n) => {
                let p = self.number(n);
                format!("{ty} IN ('integer', 'real') AND {val} = {p}")
            }
            Scalar::String(s) => {
                let p = self.param(SqlParam::Text(s.clone()));
                format!("{ty} = 'text' AND {val} = {p}")
            }
        }
    }

    /// PostgreSQL: `jsonb` equality is typed (a string never equals a number) and numeric for
    /// numbers (`1 = 1.0`), as `matches` compares.
    fn postgres_eq(&mut self, value: &str, scalar: &Scalar) -> String {
        let p = self.param(SqlParam::Text(scalar.to_value().to_string()));
        format!("{value} = ({p}::text)::jsonb")
    }

    /// A number compared with an integer column: an `int8` parameter when it is an integer (an
    /// index serves), else both as exact `numeric`s on PostgreSQL.
    fn column_number(&mut self, expr: &str, op: &str, n: &serde_json::Number) -> String {
        match (self.dialect, n.as_i64()) {
            (Dialect::Postgres, Some(i)) => {
                let p = self.param(SqlParam::Integer(i));
                format!("{expr} {op} {p}::int8")
            }
            (Dialect::Postgres, None) => {
                let p = self.param(SqlParam::Text(n.to_string()));
                format!("{expr}::numeric {op} ({p}::text)::numeric")
            }
            (Dialect::Sqlite, _) => {
                let p = self.number(n);
                format!("{expr} {op} {p}")
            }
        }
    }

    fn column_text(&mut self, expr: &str, op: &str, s: &str) -> String {
        let p = self.param(SqlParam::Text(s.to_owned()));
        match self.dialect {
            Dialect::Sqlite => format!("{expr} COLLATE BINARY {op} {p}"),
            // Equality under a deterministic collation is byte equality, so only the order
            // needs "C" (and equality keeps the column's index).
            Dialect::Postgres if op == "=" => format!("{expr} = {p}::text"),
            Dialect::Postgres => format!("{expr} COLLATE \"C\" {op} {p}::text"),
        }
    }

    fn column_eq(&mut self, expr: &str, kind: ColumnKind, scalar: &Scalar) -> String {
        let comparison = match (kind, scalar) {
            (ColumnKind::Text, Scalar::String(s)) => self.column_text(expr, "=", s),
            (ColumnKind::Integer | ColumnKind::Real, Scalar::Number(n)) => {
                self.column_number(expr, "=", n)
            }
            (ColumnKind::Boolean, Scalar::Bool(b)) => match (self.dialect, b) {
                (Dialect::Sqlite, true) => format!("{expr} <> 0"),
                (Dialect::Sqlite, false) => format!("{expr} = 0"),
                (Dialect::Postgres, true) => format!("{expr} = TRUE"),
                (Dialect::Postgres, false) => format!("{expr} = FALSE"),
            },
            // A column of another type, or NULL (missing), never equals this value.
            _ => return "FALSE".to_owned(),
        };
        not_null(expr, comparison)
    }

    fn eq(&mut self, target: &Target, scalar: &Scalar) -> String {
        match target {
            Target::Column { expr, kind } => self.column_eq(expr, *kind, scalar),
            Target::Sqlite { doc, path } => {
                let ty = format!("json_type({doc}, {path})");
                let val = format!("json_extract({doc}, {path})");
                self.sqlite_eq(&ty, &val, scalar)
            }
            Target::Postgres(value) => self.postgres_eq(value, scalar),
        }
    }

    fn any_eq(&mut self, path: &Path, values: &[Scalar], at: &str) -> Result<String, FilterError> {
        if values.is_empty() {
            // No parameter for the path: PostgreSQL refuses a parameter the text never uses.
            self.resolve(path, at)?;
            return Ok("FALSE".to_owned());
        }
        let target = self.target(path, at)?;
        let parts: Vec<String> = values
            .iter()
            .map(|v| format!("({})", self.eq(&target, v)))
            .collect();
        Ok(leaf(&target, balanced(&parts, " OR ")))
    }

    fn compare(&mut self, target: &Target, order: Order, bound: &Bound) -> String {
        let op = match order {
            Order::Gt => ">",
            Order::Gte => ">=",
            Order::Lt => "<",
            Order::Lte => "<=",
        };
        match (target, bound) {
            (Target::Column { expr, kind }, bound) => match (kind, bound) {
                (ColumnKind::Text, Bound::String(s)) => {
                    let comparison = self.column_text(expr, op, s);
                    not_null(expr, comparison)
                }
                (ColumnKind::Integer | ColumnKind::Real, Bound::Number(n)) => {
                    let comparison = self.column_number(expr, op, n);
                    not_null(expr, comparison)
                }
                _ => "FALSE".to_owned(),
            },
            (Target::Sqlite { doc, path }, Bound::Number(n)) => {
                let p = self.number(n);
                format!(
                    "json_type({doc}, {path}) IN ('integer', 'real') AND \
                     json_extract({doc}, {path}) {op} {p}"
                )
            }
            // BINARY collation: byte order, as `matches` orders.
            (Target::Sqlite { doc, path }, Bound::String(s)) => {
                let p = self.param(SqlParam::Text(s.clone()));
                format!(
                    "json_type({doc}, {path}) = 'text' AND \
                     json_extract({doc}, {path}) COLLATE BINARY {op} {p}"
                )
            }
            (Target::Postgres(value), Bound::Number(n)) => {
                let p = self.number(n);
                format!("jsonb_typeof({value}) = 'number' AND {value} {op} {p}")
            }
            // `jsonb` orders strings by the database collation; "C" is byte order.
            (Target::Postgres(value), Bound::String(s)) => {
                let p = self.param(SqlParam::Text(s.clone()));
                format!(
                    "jsonb_typeof({value}) = 'string' AND \
                     ({value} #>> '{{}}') COLLATE \"C\" {op} {p}::text"
                )
            }
        }
    }

    fn contains(&mut self, target: &Target, scalar: &Scalar) -> String {
        match target {
            // A column is never an array: only a substring of a text column can match.
            Target::Column { expr, kind } => match (kind, scalar) {
                (ColumnKind::Text, Scalar::String(s)) => {
                    let p = self.param(SqlParam::Text(s.clone()));
                    let comparison = match self.dialect {
                        Dialect::Sqlite => format!("instr({expr}, {p}) > 0"),
                        Dialect::Postgres => {
                            format!("strpos({expr} COLLATE \"C\", {p}::text) > 0")
                        }
                    };
                    not_null(expr, comparison)
                }
                _ => "FALSE".to_owned(),
            },
            Target::Sqlite { doc, path } => {
                let ty = format!("json_type({doc}, {path})");
                let substring = match scalar {
                    Scalar::String(s) => {
                        let p = self.param(SqlParam::Text(s.clone()));
                        format!("WHEN 'text' THEN instr(json_extract({doc}, {path}), {p}) > 0 ")
                    }
                    _ => String::new(),
                };
                let element = self.sqlite_eq("filter_elem.type", "filter_elem.value", scalar);
                format!(
                    "CASE {ty} {substring}WHEN 'array' THEN EXISTS (SELECT 1 FROM \
                     json_each({doc}, {path}) AS filter_elem WHERE {element}) ELSE FALSE END"
                )
            }
            Target::Postgres(value) => {
                let substring = match scalar {
                    Scalar::String(s) => {
                        let p = self.param(SqlParam::Text(s.clone()));
                        format!(
                            "WHEN 'string' THEN strpos(({value} #>> '{{}}') COLLATE \"C\", \
                             {p}::text) > 0 "
                        )
                    }
                    _ => String::new(),
                };
                let element = self.postgres_eq("filter_elem.v", scalar);
                // CASE, not AND: jsonb_array_elements fails on a non-array, and PostgreSQL
                // may evaluate AND's operands in any order.
                format!(
                    "CASE jsonb_typeof({value}) {substring}WHEN 'array' THEN EXISTS (SELECT 1 \
                     FROM jsonb_array_elements({value}) AS filter_elem(v) WHERE {element}) \
                     ELSE FALSE END"
                )
            }
        }
    }

    fn filter(&mut self, filter: &Filter, at: &str) -> Result<String, FilterError> {
        Ok(match filter {
            Filter::Eq { path, value } => {
                let target = self.target(path, &format!("{at}eq"))?;
                let eq = self.eq(&target, value);
                leaf(&target, eq)
            }
            Filter::Ne { path, value } => {
                let target = self.target(path, &format!("{at}ne"))?;
                let eq = self.eq(&target, value);
                format!("(NOT {})", leaf(&target, eq))
            }
            Filter::In { path, values } => self.any_eq(path, values, &format!("{at}in"))?,
            Filter::Nin { path, values } => {
                let any = self.any_eq(path, values, &format!("{at}nin"))?;
                format!("(NOT {any})")
            }
            Filter::Compare { order, path, value } => {
                let target = self.target(path, &format!("{at}{}", order.name()))?;
                let compare = self.compare(&target, *order, value);
                leaf(&target, compare)
            }
            Filter::Contains { path, value } => {
                let target = self.target(path, &format!("{at}contains"))?;
                let contains = self.contains(&target, value);
                leaf(&target, contains)
            }
            Filter::Exists { path } => {
                let target = self.target(path, &format!("{at}exists"))?;
                match target {
                    Target::Sqlite { doc, path } => {
                        format!("(json_type({doc}, {path}) IS NOT NULL)")
                    }
                    Target::Postgres(value) => format!("({value} IS NOT NULL)"),
                    Target::Column { expr, .. } => format!("({expr} IS NOT NULL)"),
                }
            }
            Filter::And(operands) | Filter::Or(operands) => {
                let (op, empty, joiner) = match filter {
                    Filter::And(_) => ("and", "TRUE", " AND "),
                    _ => ("or", "FALSE", " OR "),
                };
                if operands.is_empty() {
                    return Ok(empty.to_owned());
                }
                let parts = operands
                    .iter()
                    .enumerate()
                    .map(|(i, f)| self.filter(f, &format!("{at}{op}[{i}].")))
                    .collect::<Result<Vec<_>, _>>()?;
                format!("({})", balanced(&parts, joiner))
            }
            Filter::Not(operand) => {
                format!("(NOT {})", self.filter(operand, &format!("{at}not."))?)
            }
        })
    }
}

/// `parts` joined by `joiner` (` AND `, ` OR `) as a balanced tree of parentheses: SQLite's
/// parser nests a flat chain one level per operand and refuses past 1,000 levels, which an `or`
/// of the 1,023 operands a filter may hold passed; balanced, the depth is about log₂ of the
/// count. PostgreSQL flattens either form. The operands keep their order.
fn balanced(parts: &[String], joiner: &str) -> String {
    // A half in parentheses unless it is one operand (already a closed expression).
    let group = |half: &[String]| match half {
        [one] => one.clone(),
        _ => format!("({})", balanced(half, joiner)),
    };
    match parts {
        [] => String::new(),
        [one] => one.clone(),
        _ => {
            let (left, right) = parts.split_at(parts.len() / 2);
            format!("{}{joiner}{}", group(left), group(right))
        }
    }
}

impl Filter {
    /// A SQL boolean expression, TRUE exactly where [`Filter::matches`] is true, for a `WHERE`
    /// clause (docs/reference/filters.md#sql).
    ///
    /// `resolver` says where each field a path starts with lives ([`Source`]); `None` refuses
    /// the filter with [`FilterError::UnknownField`]. Values and paths are appended to `params`
    /// and referenced by position (`?N` or `$N`, counting the parameters already there), so a
    /// store can bind its own parameters first.
    pub fn to_sql<R>(
        &self,
        dialect: Dialect,
        resolver: &R,
        params: &mut Vec<SqlParam>,
    ) -> Result<String, FilterError>
    where
        R: Fn(&str) -> Option<Source>,
    {
        let start = params.len();
        let mut writer = Writer {
            dialect,
            resolver,
            params,
        };
        let result = writer.filter(self, "");
        if result.is_err() {
            params.truncate(start);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn body(_: &str) -> Option<Source> {
        Some(Source::Member("body".into()))
    }

    #[test]
    fn sqlite_fragment_binds_values_and_paths() {
        let f = Filter::parse(&json!({"and": [
            {"eq": {"path": "metadata.\"a'b\"[2]", "value": "x'; DROP TABLE t; --"}},
            {"gt": {"path": "n", "value": 1.5}}
        ]}))
        .unwrap();
        let mut params = vec![SqlParam::Text("store's own".into())];
        let sql = f.to_sql(Dialect::Sqlite, &body, &mut params).unwrap();
        assert_eq!(
            params,
            vec![
                SqlParam::Text("store's own".into()),
                SqlParam::Text("$.\"metadata\".\"a'b\"[2]".into()),
                SqlParam::Text("x'; DROP TABLE t; --".into()),
                SqlParam::Text("$.\"n\"".into()),
                SqlParam::Real(1.5),
            ]
        );
        assert!(!sql.contains("DROP") && !sql.contains("a'b"), "{sql}");
        assert!(sql.contains("json_type(body, ?2) = 'text' AND json_extract(body, ?2) = ?3"));
        assert!(sql.contains("json_extract(body, ?4) > ?5"), "{sql}");
    }

    #[test]
    fn postgres_fragment_casts_every_parameter() {
        let f = Filter::parse(&json!({"or": [
            {"contains": {"path": "tags", "value": "a"}},
            {"lt": {"path": "meta.list[3]", "value": "z"}}
        ]}))
        .unwrap();
        let mut params = Vec::new();
        let sql = f.to_sql(Dialect::Postgres, &body, &mut params).unwrap();
        assert_eq!(
            params,
            vec![
                SqlParam::Text("strict $.\"tags\"".into()),
                SqlParam::Text("a".into()),
                SqlParam::Text("\"a\"".into()),
                SqlParam::Text("strict $.\"meta\".\"list\"[3]".into()),
                SqlParam::Text("z".into()),
            ]
        );
        assert!(
            sql.contains("jsonb_path_query_first((body), ($4::text)::jsonpath, '{}', TRUE)"),
            "{sql}"
        );
        assert!(sql.contains("COLLATE \"C\" < $5::text"), "{sql}");
    }

    #[test]
    fn columns_and_unknown_fields() {
        let resolver = |root: &str| match root {
            "role" => Some(Source::Column {
                expr: "role".into(),
                kind: ColumnKind::Text,
            }),
            "marks" => Some(Source::Json("marks_json".into())),
            _ => None,
        };
        let f = Filter::parse(&json!({"and": [
            {"eq": {"path": "role", "value": "user"}},
            {"contains": {"path": "marks", "value": "todo"}}
        ]}))
        .unwrap();
        let mut params = Vec::new();
        let sql = f.to_sql(Dialect::Sqlite, &resolver, &mut params).unwrap();
        // A column with no further step is compared as itself, so its index serves.
        assert!(
            sql.starts_with("(((role) COLLATE BINARY = ?1 AND (role) IS NOT NULL) AND COALESCE("),
            "{sql}"
        );
        assert!(sql.contains("json_each(marks_json, ?2)"), "{sql}");
        // A value of another type never matches a typed column: no parameter at all.
        let mut params = Vec::new();
        let wrong = Filter::parse(&json!({"gt": {"path": "role", "value": 1}})).unwrap();
        let sql = wrong
            .to_sql(Dialect::Postgres, &resolver, &mut params)
            .unwrap();
        assert_eq!((sql.as_str(), params.len()), ("(FALSE)", 0));
        // Further steps go through JSON, and find nothing in a scalar.
        let deeper = Filter::parse(&json!({"exists": "role.x"})).unwrap();
        let sql = deeper
            .to_sql(Dialect::Sqlite, &resolver, &mut params)
            .unwrap();
        assert!(sql.contains("json_quote(role)"), "{sql}");
        let bad = Filter::parse(&json!({"not": {"or": [{"exists": "role"}, {"exists": "x.y"}]}}))
            .unwrap();
        let mut params = vec![SqlParam::Integer(1)];
        let e = bad
            .to_sql(Dialect::Postgres, &resolver, &mut params)
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "not.or[1].exists.path: unknown field \"x\": this store cannot filter on it (check \
             the spelling of the path's first name)"
        );
        assert_eq!(params, vec![SqlParam::Integer(1)], "no stray parameters");
    }

    #[test]
    fn empty_lists_and_groups_are_constants() {
        let f = Filter::parse(&json!({"and": [
            {"in": {"path": "a", "values": []}},
            {"nin": {"path": "a", "values": []}},
            {"and": []}, {"or": []}
        ]}))
        .unwrap();
        let mut params = Vec::new();
        let sql = f.to_sql(Dialect::Sqlite, &body, &mut params).unwrap();
        // Operands are joined as a balanced tree (`balanced`), in their order.
        assert_eq!(sql, "((FALSE AND (NOT FALSE)) AND (TRUE AND FALSE))");
    }

    /// The depth of a group's SQL grows with the log of its operands, not their count.
    #[test]
    fn groups_nest_logarithmically() {
        let parts: Vec<String> = (0..1023).map(|i| format!("x{i}")).collect();
        let sql = balanced(&parts, " OR ");
        let (mut depth, mut deepest) = (0i32, 0i32);
        for c in sql.chars() {
            match c {
                '(' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        assert_eq!(depth, 0);
        assert!(deepest <= 10, "{deepest} levels");
        let order: Vec<&str> = sql
            .split(" OR ")
            .map(|t| t.trim_matches(|c| c == '(' || c == ')'))
            .collect();
        assert_eq!(order, parts.iter().map(String::as_str).collect::<Vec<_>>());
    }
}
