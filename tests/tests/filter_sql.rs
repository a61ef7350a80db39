//! The metadata filter's main invariant (issue 14, item 2; docs/reference/filters.md#sql): for
//! every document and filter, `Filter::to_sql` selects the document on SQLite and on PostgreSQL
//! exactly when `Filter::matches` is true. Random documents and filters from a seeded generator,
//! stored with some fields in typed columns (`role` text, `n` integer, `score` real, `flag`
//! boolean), `marks` in a JSON column of its own and the rest inside a `body` document.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use mnemon_filter::{ColumnKind, Dialect, Filter, Source, SqlParam};
use serde_json::{Map, Value, json};

/// Documents in the corpus.
const DOCS: usize = 240;
/// Random filters checked against it, per backend.
const FILTERS: usize = 600;

/// SplitMix64: a small, seeded, reproducible generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

const STRINGS: &[&str] = &[
    "",
    "a",
    "ab",
    "abc",
    "b",
    "B",
    "é",
    "日本",
    "😀",
    "a'b",
    "x\"y",
    "%",
    "_",
    "1",
    "true",
    "null",
    "user",
    "assistant",
    "2026-01-01",
    "2026-01-01 10:00:00",
    "2026-02-03",
];
const ROLES: &[&str] = &["user", "assistant", "system", "", "User"];
const KEYS: &[&str] = &[
    "a", "b", "c", "0", "x.y", "tags", "ts", "", "it's ü", "$x", "a[0]", "*",
];

fn number(rng: &mut Rng) -> Value {
    match rng.below(7) {
        0 => json!(rng.below(7) as i64 - 3),
        1 => json!(rng.pick(&[
            0.5,
            -0.0,
            1.0,
            2.5,
            -2.5,
            0.1,
            0.30000000000000004,
            1e300,
            -1e-300
        ])),
        2 => json!(rng.pick(&[
            9_007_199_254_740_993_i64,
            9_007_199_254_740_992,
            i64::MAX,
            i64::MIN,
            1_000_000_000_000
        ])),
        // Large floats whose shortest form is exact. Not ±2^63 and the like: on PostgreSQL a
        // float is the decimal it is written as, and an integer between that decimal and the
        // float's binary value compares differently there (docs/reference/filters.md#numbers;
        // `postgres_reads_large_floats_as_written` pins it).
        3 => json!(rng.pick(&[9_007_199_254_740_992.0, 1.5e16, -4.5e15, 1e20])),
        4 => {
            // Any finite double: checks that each backend reads back the same double.
            // (Beyond 2^53 only when no 64-bit integer can lie near it: see above.)
            let f = f64::from_bits(rng.next());
            if f.is_finite() && !near_integers(f) {
                json!(f)
            } else {
                json!(0.25)
            }
        }
        5 => json!(rng.next() as i64),
        _ => json!(rng.below(7) as f64 - 3.0),
    }
}

/// Floats whose shortest decimal may differ from their binary value by more than the distance
/// to the nearest 64-bit integer (docs/reference/filters.md#numbers).
fn near_integers(f: f64) -> bool {
    (9.007_199_254_740_992e15..1e20).contains(&f.abs())
}

fn scalar(rng: &mut Rng) -> Value {
    match rng.below(6) {
        0 => Value::Null,
        1 => json!(rng.chance(50)),
        2 | 3 => number(rng),
        _ => json!(rng.pick(STRINGS)),
    }
}

fn value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth == 0 { 4 } else { 6 }) {
        0..=3 => scalar(rng),
        4 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth - 1)).collect()),
        _ => {
            let mut object = Map::new();
            for _ in 0..rng.below(4) {
                object.insert(rng.pick(KEYS).to_string(), value(rng, depth - 1));
            }
            Value::Object(object)
        }
    }
}

/// One record: the columns (`None` for NULL) and the whole document `matches` sees.
struct Record {
    role: Option<String>,
    n: Option<i64>,
    score: Option<f64>,
    flag: Option<bool>,
    marks: Option<Value>,
    body: Value,
    doc: Value,
}

fn record(rng: &mut Rng) -> Record {
    let mut body = Map::new();
    for key in KEYS {
        if rng.chance(60) {
            body.insert(key.to_string(), value(rng, 3));
        }
    }
    let role = rng.chance(80).then(|| rng.pick(ROLES).to_string());
    let n = rng.chance(80).then(|| match number(rng) {
        Value::Number(n) if n.is_i64() => n.as_i64().unwrap(),
        _ => rng.below(7) as i64 - 3,
    });
    // A float column: as `number` does, nothing in the band where integers lie between a
    // float's shortest decimal and its binary value.
    let score = rng.chance(80).then(|| match number(rng).as_f64() {
        Some(f) if !near_integers(f) => f,
        _ => 0.5,
    });
    let flag = rng.chance(80).then(|| rng.chance(50));
    let marks = rng.chance(80).then(|| {
        if rng.chance(70) {
            Value::Array(
                (0..rng.below(4))
                    .map(|_| json!(rng.pick(&["todo", "done", "a", ""])))
                    .collect(),
            )
        } else {
            value(rng, 2)
        }
    });
    let mut doc = body.clone();
    let fields = [
        ("role", role.clone().map(Value::from)),
        ("n", n.map(Value::from)),
        ("score", score.map(Value::from)),
        ("flag", flag.map(Value::from)),
        ("marks", marks.clone()),
    ];
    for (name, field) in fields {
        if let Some(field) = field {
            doc.insert(name.to_owned(), field);
        }
    }
    Record {
        role,
        n,
        score,
        flag,
        marks,
        body: Value::Object(body),
        doc: Value::Object(doc),
    }
}

fn path(rng: &mut Rng) -> String {
    let root = match rng.below(10) {
        0 => "role".to_owned(),
        1 => "n".to_owned(),
        2 => "score".to_owned(),
        3 => "flag".to_owned(),
        4 => "marks".to_owned(),
        5 => "missing".to_owned(),
        _ => quote(rng.pick(KEYS)),
    };
    let mut path = root;
    for _ in 0..rng.below(3) {
        if rng.chance(50) {
            path.push('.');
            path.push_str(&quote(rng.pick(KEYS)));
        } else {
            path.push_str(&format!("[{}]", rng.below(3)));
        }
    }
    path
}

fn quote(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_alphanumeric()) {
        key.to_owned()
    } else {
        format!("\"{key}\"")
    }
}

fn filter(rng: &mut Rng, depth: usize) -> Value {
    let leaves = 10;
    let choice = rng.below(if depth == 0 { leaves } else { leaves + 3 });
    let p = path(rng);
    match choice {
        0 => json!({"eq": {"path": p, "value": scalar(rng)}}),
        1 => json!({"ne": {"path": p, "value": scalar(rng)}}),
        2 | 3 => {
            let op = if choice == 2 { "in" } else { "nin" };
            let values: Vec<Value> = (0..rng.below(4)).map(|_| scalar(rng)).collect();
            json!({op: {"path": p, "values": values}})
        }
        4..=7 => {
            let op = ["gt", "gte", "lt", "lte"][choice - 4];
            let bound = if rng.chance(50) {
                number(rng)
            } else {
                json!(rng.pick(STRINGS))
            };
            json!({op: {"path": p, "value": bound}})
        }
        8 => json!({"contains": {"path": p, "value": scalar(rng)}}),
        9 => json!({"exists": p}),
        10 | 11 => {
            let op = if choice == 10 { "and" } else { "or" };
            let operands: Vec<Value> = (0..rng.below(4)).map(|_| filter(rng, depth - 1)).collect();
            json!({op: operands})
        }
        _ => json!({"not": filter(rng, depth - 1)}),
    }
}

fn resolver(field: &str) -> Option<Source> {
    let column = |expr: &str, kind| Source::Column {
        expr: expr.to_owned(),
        kind,
    };
    Some(match field {
        "role" => column("role", ColumnKind::Text),
        "n" => column("n", ColumnKind::Integer),
        "score" => column("score", ColumnKind::Real),
        "flag" => column("flag", ColumnKind::Boolean),
        "marks" => Source::Json("marks".to_owned()),
        _ => Source::Member("body".to_owned()),
    })
}

fn corpus(seed: u64) -> (Vec<Record>, Vec<Filter>) {
    let mut rng = Rng(seed);
    let records = (0..DOCS).map(|_| record(&mut rng)).collect();
    let filters = (0..FILTERS)
        .map(|_| {
            let value = filter(&mut rng, 3);
            Filter::parse(&value).unwrap_or_else(|e| panic!("{value}: {e}"))
        })
        .collect();
    (records, filters)
}

fn expected(records: &[Record], filter: &Filter) -> BTreeSet<i64> {
    (0..records.len())
        .filter(|&i| filter.matches(&records[i].doc))
        .map(|i| i as i64)
        .collect()
}

/// Checks every filter; panics listing the first disagreements.
fn check(
    dialect: Dialect,
    records: &[Record],
    filters: &[Filter],
    mut select: impl FnMut(&str, &[SqlParam]) -> BTreeSet<i64>,
) {
    let mut failures = Vec::new();
    let mut matched = 0;
    for filter in filters {
        let mut params = Vec::new();
        let sql = filter.to_sql(dialect, &resolver, &mut params).unwrap();
        let got = select(&sql, &params);
        let want = expected(records, filter);
        matched += want.len();
        if got != want {
            let differ: Vec<_> = got.symmetric_difference(&want).take(2).collect();
            let docs: Vec<String> = differ
                .iter()
                .map(|&&i| records[i as usize].doc.to_string())
                .collect();
            failures.push(format!(
                "{dialect:?}: {}\n  sql: {sql}\n  params: {params:?}\n  memory {} vs sql {} \
                 matches; differing documents: {docs:?}",
                filter.to_value(),
                want.len(),
                got.len()
            ));
        }
    }
    // The corpus is not degenerate: filters select some documents and reject others.
    assert!(
        matched > FILTERS * DOCS / 10 && matched < FILTERS * DOCS * 9 / 10,
        "{matched}"
    );
    assert!(
        failures.is_empty(),
        "{} of {} filters disagree:\n{}",
        failures.len(),
        filters.len(),
        failures[..failures.len().min(5)].join("\n")
    );
}

fn sqlite_select(conn: &rusqlite::Connection, sql: &str, params: &[SqlParam]) -> BTreeSet<i64> {
    let values: Vec<rusqlite::types::Value> = params
        .iter()
        .map(|p| match p {
            SqlParam::Text(s) => rusqlite::types::Value::Text(s.clone()),
            SqlParam::Integer(i) => rusqlite::types::Value::Integer(*i),
            SqlParam::Real(f) => rusqlite::types::Value::Real(*f),
        })
        .collect();
    let mut statement = conn
        .prepare(&format!("SELECT id FROM docs WHERE {sql}"))
        .unwrap_or_else(|e| panic!("{e}: {sql}"));
    statement
        .query_map(rusqlite::params_from_iter(values), |row| row.get(0))
        .unwrap_or_else(|e| panic!("{e}: {sql}"))
        .collect::<Result<_, _>>()
        .unwrap()
}

fn postgres_select(client: &mut postgres::Client, sql: &str, params: &[SqlParam]) -> BTreeSet<i64> {
    let boxed: Vec<Box<dyn postgres::types::ToSql + Sync>> = params
        .iter()
        .map(|p| -> Box<dyn postgres::types::ToSql + Sync> {
            match p {
                SqlParam::Text(s) => Box::new(s.clone()),
                SqlParam::Integer(i) => Box::new(*i),
                SqlParam::Real(f) => Box::new(*f),
            }
        })
        .collect();
    let refs: Vec<&(dyn postgres::types::ToSql + Sync)> =
        boxed.iter().map(|b| b.as_ref()).collect();
    client
        .query(&format!("SELECT id FROM docs WHERE {sql}"), &refs)
        .unwrap_or_else(|e| panic!("{e:?}: {sql}"))
        .iter()
        .map(|row| row.get::<_, i64>(0))
        .collect()
}

#[test]
fn sqlite_agrees_with_matches() {
    for seed in [1, 2] {
        let (records, filters) = corpus(seed);
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT NOT NULL, role TEXT, \
             n INTEGER, score REAL, flag INTEGER, marks TEXT)",
        )
        .unwrap();
        for (id, r) in records.iter().enumerate() {
            conn.execute(
                "INSERT INTO docs VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                rusqlite::params![
                    id as i64,
                    r.body.to_string(),
                    r.role,
                    r.n,
                    r.score,
                    r.flag,
                    r.marks.as_ref().map(Value::to_string)
                ],
            )
            .unwrap();
        }
        check(Dialect::Sqlite, &records, &filters, |sql, params| {
            sqlite_select(&conn, sql, params)
        });
    }
}

#[test]
fn postgres_agrees_with_matches() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("filter_sql").unwrap();
    let database = url.rsplit('/').next().unwrap().to_owned();
    let mut client = server.connect(&database).unwrap();
    for seed in [1, 2] {
        let (records, filters) = corpus(seed);
        client
            .batch_execute(
                "DROP TABLE IF EXISTS docs; CREATE TABLE docs (id int8 PRIMARY KEY, \
                 body jsonb NOT NULL, role text, n int8, score float8, flag boolean, marks jsonb)",
            )
            .unwrap();
        let mut tx = client.transaction().unwrap();
        let insert = tx
            .prepare(
                "INSERT INTO docs VALUES ($1, $2::text::jsonb, $3, $4, $5, $6, $7::text::jsonb)",
            )
            .unwrap();
        for (id, r) in records.iter().enumerate() {
            tx.execute(
                &insert,
                &[
                    &(id as i64),
                    &r.body.to_string(),
                    &r.role,
                    &r.n,
                    &r.score,
                    &r.flag,
                    &r.marks.as_ref().map(Value::to_string),
                ],
            )
            .unwrap();
        }
        tx.commit().unwrap();
        check(Dialect::Postgres, &records, &filters, |sql, params| {
            postgres_select(&mut client, sql, params)
        });
    }
}

/// Hand-picked cases the random corpus might miss, on both backends: type confusion that
/// `json_extract` invites (`true` is 1, `"1"` is '1'), JSON null against a missing field,
/// an index against a key named like one, and exact integer/float comparison.
#[test]
fn edge_cases_agree() {
    let docs = [
        json!({"v": true}),
        json!({"v": 1}),
        json!({"v": "1"}),
        json!({"v": 1.0}),
        json!({"v": null}),
        json!({}),
        json!({"v": [1, "1", true, null]}),
        json!({"v": {"0": 1}}),
        json!({"v": [1]}),
        json!({"v": 9_007_199_254_740_993_i64}),
        json!({"v": "ab"}),
        json!({"v": ["ab"]}),
    ];
    let filters = [
        json!({"eq": {"path": "v", "value": 1}}),
        json!({"eq": {"path": "v", "value": true}}),
        json!({"eq": {"path": "v", "value": "1"}}),
        json!({"eq": {"path": "v", "value": null}}),
        json!({"ne": {"path": "v", "value": null}}),
        json!({"exists": "v"}),
        json!({"eq": {"path": "v[0]", "value": 1}}),
        json!({"eq": {"path": "v.\"0\"", "value": 1}}),
        json!({"gt": {"path": "v", "value": 9_007_199_254_740_992.0}}),
        json!({"gte": {"path": "v", "value": 1}}),
        json!({"lt": {"path": "v", "value": "b"}}),
        json!({"contains": {"path": "v", "value": "b"}}),
        json!({"contains": {"path": "v", "value": true}}),
        json!({"contains": {"path": "v", "value": null}}),
        json!({"nin": {"path": "v", "values": [1, "ab"]}}),
    ];
    let filters: Vec<Filter> = filters.iter().map(|f| Filter::parse(f).unwrap()).collect();
    let body_only = |_: &str| Some(Source::Member("body".to_owned()));
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch("CREATE TABLE docs (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        .unwrap();
    for (id, doc) in docs.iter().enumerate() {
        conn.execute(
            "INSERT INTO docs VALUES (?1, ?2)",
            rusqlite::params![id as i64, doc.to_string()],
        )
        .unwrap();
    }
    let mut pg = mnemon_tests::postgres::require().map(|server| {
        let url = server.fresh_database("filter_edges").unwrap();
        let mut client = server.connect(url.rsplit('/').next().unwrap()).unwrap();
        client
            .batch_execute("CREATE TABLE docs (id int8 PRIMARY KEY, body jsonb NOT NULL)")
            .unwrap();
        for (id, doc) in docs.iter().enumerate() {
            client
                .execute(
                    "INSERT INTO docs VALUES ($1, $2::text::jsonb)",
                    &[&(id as i64), &doc.to_string()],
                )
                .unwrap();
        }
        client
    });
    for filter in &filters {
        let want: BTreeSet<i64> = (0..docs.len())
            .filter(|&i| filter.matches(&docs[i]))
            .map(|i| i as i64)
            .collect();
        let mut params = Vec::new();
        let sql = filter
            .to_sql(Dialect::Sqlite, &body_only, &mut params)
            .unwrap();
        assert_eq!(
            sqlite_select(&conn, &sql, &params),
            want,
            "SQLite: {}",
            filter.to_value()
        );
        if let Some(client) = pg.as_mut() {
            let mut params = Vec::new();
            let sql = filter
                .to_sql(Dialect::Postgres, &body_only, &mut params)
                .unwrap();
            let got = postgres_select(client, &sql, &params);
            assert_eq!(got, want, "PostgreSQL: {}", filter.to_value());
        }
    }
}

/// The documented exception to the agreement (docs/reference/filters.md#numbers): `jsonb` keeps
/// a float as the decimal serde_json wrote, its shortest round-trip form, so -2^63 written as
/// `-9.223372036854776e18` is -9223372036854776000 on PostgreSQL, below `i64::MIN`, while memory
/// and SQLite compare the float's binary value, which equals `i64::MIN`.
#[test]
fn postgres_reads_large_floats_as_written() {
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("filter_floats").unwrap();
    let mut client = server.connect(url.rsplit('/').next().unwrap()).unwrap();
    client
        .batch_execute("CREATE TABLE docs (id int8 PRIMARY KEY, body jsonb NOT NULL)")
        .unwrap();
    let doc = json!({"v": -9.223_372_036_854_776e18});
    client
        .execute(
            "INSERT INTO docs VALUES (0, $1::text::jsonb)",
            &[&doc.to_string()],
        )
        .unwrap();
    let filter = Filter::parse(&json!({"eq": {"path": "v", "value": i64::MIN}})).unwrap();
    assert!(filter.matches(&doc));
    let body_only = |_: &str| Some(Source::Member("body".to_owned()));
    let mut params = Vec::new();
    let sql = filter
        .to_sql(Dialect::Postgres, &body_only, &mut params)
        .unwrap();
    assert!(postgres_select(&mut client, &sql, &params).is_empty());
    let lt = Filter::parse(&json!({"lt": {"path": "v", "value": i64::MIN}})).unwrap();
    let mut params = Vec::new();
    let sql = lt
        .to_sql(Dialect::Postgres, &body_only, &mut params)
        .unwrap();
    assert_eq!(
        postgres_select(&mut client, &sql, &params),
        BTreeSet::from([0])
    );
}

/// A leaf on a typed column compares the column itself, so the planner uses the column's index
/// (docs/reference/filters.md#sql): on SQLite and on PostgreSQL (sequential scans off, so that
/// the plan shows what is possible rather than what is cheapest on a small table).
#[test]
fn column_leaves_use_the_column_index() {
    let filter = Filter::parse(&json!({"and": [
        {"eq": {"path": "role", "value": "user"}},
        {"contains": {"path": "tags", "value": "x"}}
    ]}))
    .unwrap();
    let resolver = |field: &str| {
        Some(match field {
            "role" => Source::Column {
                expr: "role".to_owned(),
                kind: ColumnKind::Text,
            },
            _ => Source::Member("body".to_owned()),
        })
    };
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(
        "CREATE TABLE docs (id INTEGER PRIMARY KEY, role TEXT, body TEXT NOT NULL); \
         CREATE INDEX docs_role ON docs (role)",
    )
    .unwrap();
    let mut params = Vec::new();
    let sql = filter
        .to_sql(Dialect::Sqlite, &resolver, &mut params)
        .unwrap();
    let values: Vec<rusqlite::types::Value> = params
        .iter()
        .map(|p| match p {
            SqlParam::Text(s) => rusqlite::types::Value::Text(s.clone()),
            SqlParam::Integer(i) => rusqlite::types::Value::Integer(*i),
            SqlParam::Real(f) => rusqlite::types::Value::Real(*f),
        })
        .collect();
    let plan: Vec<String> = conn
        .prepare(&format!(
            "EXPLAIN QUERY PLAN SELECT id FROM docs WHERE {sql}"
        ))
        .unwrap()
        .query_map(rusqlite::params_from_iter(values), |row| row.get(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter()
            .any(|line| line.contains("USING INDEX docs_role")),
        "{plan:?}"
    );

    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("filter_index").unwrap();
    let mut client = server.connect(url.rsplit('/').next().unwrap()).unwrap();
    client
        .batch_execute(
            "CREATE TABLE docs (id int8 PRIMARY KEY, role text, body jsonb NOT NULL); \
             CREATE INDEX docs_role ON docs (role); SET enable_seqscan = off",
        )
        .unwrap();
    let mut params = Vec::new();
    let sql = filter
        .to_sql(Dialect::Postgres, &resolver, &mut params)
        .unwrap();
    let texts: Vec<String> = params
        .iter()
        .map(|p| match p {
            SqlParam::Text(s) => s.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = texts
        .iter()
        .map(|s| s as &(dyn postgres::types::ToSql + Sync))
        .collect();
    let plan: Vec<String> = client
        .query(&format!("EXPLAIN SELECT id FROM docs WHERE {sql}"), &refs)
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        plan.iter().any(|line| line.contains("docs_role")),
        "{plan:#?}"
    );
}
