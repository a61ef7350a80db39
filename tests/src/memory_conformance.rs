//! The conformance suite of the [`Memory`] trait (docs/reference/memory.md#conformance), run
//! against every implementation.
//!
//! Each check is a function taking a *maker* that returns a fresh, empty memory whose factory
//! uses [`SequentialIds`] and a fixed clock (see [`test_factory`]). Use
//! [`memory_conformance_tests!`](crate::memory_conformance_tests) to turn every check into a
//! `#[test]` for one implementation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::sync::Arc;

use mnemon_embed::HashingEmbedder;
use mnemon_memory::{
    AddOptions, BudgetOptions, DeleteByIdReport, ExportFormat, ExportOptions, ExportTarget,
    Exported, LoadSource, Memory, MemoryError, MemoryQuery, Metric, MsgInput, RetrievalQuery,
    RetrieveOptions, WhitespaceTokenizer,
};
use mnemon_types::msg::{FixedClock, SequentialIds, serialize, serialize_list};
use mnemon_types::{Msg, MsgFactory};
use serde_json::{Value, json};

use crate::fixture;

/// Makes a fresh, empty memory.
pub type Maker<'a> = &'a dyn Fn() -> Box<dyn Memory>;

/// The factory every maker should give its memories: ids `…01`, `…02`, … and a fixed clock.
pub fn test_factory() -> MsgFactory {
    MsgFactory::new(
        Arc::new(SequentialIds::new()),
        Arc::new(FixedClock::new("2024-03-05 08:30:00")),
    )
}

/// `memory_cases.json`.
pub fn cases() -> Value {
    let text = std::fs::read_to_string(fixture("agentscope/memory_cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn v004_text() -> String {
    std::fs::read_to_string(fixture("agentscope/export_v004.json")).unwrap()
}

fn ids(messages: &[Msg]) -> Vec<String> {
    messages.iter().map(|m| m.id().to_owned()).collect()
}

fn json_ids(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

fn all(memory: &dyn Memory) -> Vec<Msg> {
    memory.get_memory(&MemoryQuery::default()).unwrap()
}

fn export_text(memory: &dyn Memory) -> String {
    match memory
        .export(ExportTarget::Json, &ExportOptions::default())
        .unwrap()
    {
        Exported::Json(text) => text,
        other => panic!("expected JSON text, got {other:?}"),
    }
}

/// Check 1: the 8 constructed messages, then `delete([5])`.
fn build(memory: &dyn Memory) {
    let cases = cases();
    let items: Vec<MsgInput> = cases["messages_constructed"]
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(MsgInput::from)
        .collect();
    let report = memory.add(items).unwrap();
    assert_eq!(report.added, 8);
    assert_eq!(memory.size().unwrap(), 8);
    let report = memory.delete(&[5]).unwrap();
    assert_eq!(report.deleted, vec![5]);
    assert_eq!(
        report.deleted_ids,
        vec![cases["deleted_id"].as_str().unwrap()]
    );
    assert!(report.skipped_invalid.is_empty());
}

/// Check 1.
pub fn build_and_delete(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    assert_eq!(
        ids(&all(memory.as_ref())),
        json_ids(&cases()["ids_after_delete"])
    );
}

/// Check 2: the export equals `export_v004.json`, byte for byte.
pub fn export_matches_v004(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let text = export_text(memory.as_ref());
    let expected = v004_text();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        serde_json::from_str::<Value>(&expected).unwrap()
    );
    assert_eq!(text, expected);
}

/// Check 3: loading `export_v004.json` from a path and from JSON text.
pub fn load_v004(make: Maker<'_>) {
    let reference = make();
    build(reference.as_ref());
    let expected = all(reference.as_ref());
    for source in [
        LoadSource::Path(fixture("agentscope/export_v004.json")),
        LoadSource::Json(v004_text()),
    ] {
        let memory = make();
        let report = memory.load(source, false).unwrap();
        assert_eq!(report.added, 7);
        assert_eq!(all(memory.as_ref()), expected);
        assert_eq!(export_text(memory.as_ref()), v004_text());
    }
}

/// Check 4: every `get_memory` case (and DEV-1: `recent_n=0` gives nothing).
pub fn get_memory_cases(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let by_role = |_: usize, m: &Msg| m.role() == "user";
    let by_name = |_: usize, m: &Msg| m.name() == "Harbourmaster";
    let even = |i: usize, _: &Msg| i.is_multiple_of(2);
    let embedded = |_: usize, m: &Msg| m.extra("embedding").is_some();
    let cases = cases();
    for case in cases["get_memory"].as_array().unwrap() {
        let call = case["call"].as_str().unwrap();
        let query = match call {
            "get_memory(recent_n=3)" => MemoryQuery {
                recent_n: Some(3),
                ..MemoryQuery::default()
            },
            "get_memory()" => MemoryQuery::default(),
            "get_memory(filter_func=lambda i, m: m['role'] == 'user')" => MemoryQuery {
                filter: Some(&by_role),
                ..MemoryQuery::default()
            },
            "get_memory(filter_func=lambda i, m: m['name'] == 'Harbourmaster')" => MemoryQuery {
                filter: Some(&by_name),
                ..MemoryQuery::default()
            },
            "get_memory(filter_func=lambda i, m: i % 2 == 0)" => MemoryQuery {
                filter: Some(&even),
                ..MemoryQuery::default()
            },
            "get_memory(recent_n=4, filter_func=lambda i, m: i % 2 == 0)" => MemoryQuery {
                recent_n: Some(4),
                filter: Some(&even),
                ..MemoryQuery::default()
            },
            "get_memory(filter_func=lambda i, m: 'embedding' in m)" => MemoryQuery {
                filter: Some(&embedded),
                ..MemoryQuery::default()
            },
            "get_memory(recent_n=10)" => MemoryQuery {
                recent_n: Some(10),
                ..MemoryQuery::default()
            },
            "get_memory(recent_n=0)" => {
                let got = memory
                    .get_memory(&MemoryQuery {
                        recent_n: Some(0),
                        ..MemoryQuery::default()
                    })
                    .unwrap();
                assert!(got.is_empty(), "DEV-1: recent_n=0 returns nothing");
                continue;
            }
            other => panic!("untranslated case {other}"),
        };
        let got = memory.get_memory(&query).unwrap();
        assert_eq!(ids(&got), json_ids(&case["ids"]), "{call}");
        // Streamed, the same messages (a server reads whole sessions this way).
        let mut streamed = Vec::new();
        let given = memory
            .for_each_message(&query, &mut |m| {
                streamed.push(m);
                true
            })
            .unwrap();
        assert_eq!(ids(&streamed), ids(&got), "streamed {call}");
        assert_eq!(given, got.len(), "streamed {call}");
    }
    stops_when_told(memory.as_ref());
}

/// A stream stopped after two messages decodes no third (the filter sees each message
/// decoded): a caller bounding its answer never holds the whole thread.
fn stops_when_told(memory: &dyn Memory) {
    let seen = std::cell::Cell::new(0);
    let counting = |_: usize, _: &Msg| {
        seen.set(seen.get() + 1);
        true
    };
    let mut taken = 0;
    let given = memory
        .for_each_message(
            &MemoryQuery {
                filter: Some(&counting),
                ..MemoryQuery::default()
            },
            &mut |_| {
                taken += 1;
                taken < 2
            },
        )
        .unwrap();
    assert_eq!(
        (given, seen.get()),
        (2, 2),
        "messages past the stop were decoded"
    );
}

fn expect_results(got: &[mnemon_memory::Retrieved], expected: &Value) {
    let expected = expected.as_array().unwrap();
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(expected) {
        let score = e[0].as_f64().unwrap();
        assert!((g.score - score).abs() < 1e-6, "{} vs {score}", g.score);
        assert_eq!(g.index, usize::try_from(e[1].as_u64().unwrap()).unwrap());
        assert_eq!(g.message.id(), e[2].as_str().unwrap());
    }
}

fn check_fixture_retrieval(memory: &dyn Memory) {
    let cases = cases();
    let r = &cases["retrieve_by_embedding"];
    let query: Vec<f32> = r["query"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect();
    for (top_k, preserve_order, key) in [
        // Every message's score, in memory order.
        (None, true, "all_scores"),
        (Some(2), true, "top_k_2_preserve_order_True"),
        (Some(2), false, "top_k_2_preserve_order_False"),
        (None, false, "top_k_None_preserve_order_False"),
    ] {
        let options = RetrieveOptions {
            top_k,
            preserve_order,
            ..RetrieveOptions::default()
        };
        let got = memory
            .retrieve_by_embedding(RetrievalQuery::Vector(query.clone()), &options, None)
            .unwrap();
        expect_results(&got, &r[key]);
    }
}

/// Check 5: `MissingEmbedding` on the full memory; the fixture scores on the embedded ones,
/// built from the constructed messages and from both exports.
pub fn retrieval_matches_fixture(make: Maker<'_>) {
    let full = make();
    build(full.as_ref());
    let err = full
        .retrieve_by_embedding(
            RetrievalQuery::Vector(vec![0.2, -0.4, 0.5, 0.7]),
            &RetrieveOptions::default(),
            None,
        )
        .unwrap_err();
    assert_eq!(
        err,
        MemoryError::MissingEmbedding {
            id: "a0000000000000000000000000000001".into(),
            missing: 4
        }
    );
    let has_embedding = |_: usize, m: &Msg| m.extra("embedding").is_some();
    let only_embedded = MemoryQuery {
        filter: Some(&has_embedding),
        ..MemoryQuery::default()
    };
    for source in [
        None,
        Some(LoadSource::Path(fixture("agentscope/export_v004.json"))),
        Some(LoadSource::Path(fixture("agentscope/export_v016.json"))),
    ] {
        let origin = make();
        match source {
            None => build(origin.as_ref()),
            Some(source) => {
                origin.load(source, false).unwrap();
            }
        }
        let embedded = origin.get_memory(&only_embedded).unwrap();
        assert_eq!(
            ids(&embedded),
            json_ids(&cases()["retrieve_by_embedding"]["embedded_memory_ids"])
        );
        let memory = make();
        memory
            .add(embedded.into_iter().map(MsgInput::from).collect())
            .unwrap();
        check_fixture_retrieval(memory.as_ref());
    }
}

/// Checks 6 and 7: stored messages serialize to the fixture's bytes and deserialize back.
pub fn serialize_matches_fixture(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let stored = all(memory.as_ref());
    let cases = cases();
    for case in cases["serialize"]["msg_serialize"].as_array().unwrap() {
        let msg = stored
            .iter()
            .find(|m| m.id() == case["id"].as_str().unwrap())
            .unwrap();
        assert_eq!(serialize(msg), case["output"].as_str().unwrap());
    }
    let list = cases["serialize"]["module_serialize_list"]["output"]
        .as_str()
        .unwrap();
    assert_eq!(serialize_list(&stored), list);
    let other = make();
    other
        .load(LoadSource::Json(list.to_owned()), false)
        .unwrap();
    assert_eq!(all(other.as_ref()), stored);
}

/// Check 8: `to_str` and `render`.
pub fn to_str_matches_fixture(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let stored = all(memory.as_ref());
    let cases = cases();
    for case in cases["serialize"]["to_str"].as_array().unwrap() {
        let msg = stored
            .iter()
            .find(|m| m.id() == case["id"].as_str().unwrap())
            .unwrap();
        if msg.content().is_string() {
            assert_eq!(msg.to_str(), case["output"].as_str().unwrap());
        } else {
            assert_eq!(
                msg.to_str(),
                r#"Harbourmaster: {"ferry":"running","departures":["09:30","13:00"],"delayed":false,"note":"quai n°2"}"#
            );
        }
    }
    let rendered = memory
        .render(&MemoryQuery {
            recent_n: Some(2),
            ..MemoryQuery::default()
        })
        .unwrap();
    assert_eq!(
        rendered,
        format!("{}\n{}", stored[5].to_str(), stored[6].to_str())
    );
}

/// Check 9: loading the 0.1.x export.
pub fn load_v016(make: Maker<'_>) {
    let reference = make();
    build(reference.as_ref());
    let v004 = all(reference.as_ref());
    let memory = make();
    let report = memory
        .load(
            LoadSource::Path(fixture("agentscope/export_v016.json")),
            false,
        )
        .unwrap();
    assert_eq!(report.added, 7);
    let v016 = all(memory.as_ref());
    for (new, old) in v016.iter().zip(&v004) {
        assert_eq!(
            (new.id(), new.name(), new.role(), new.timestamp()),
            (old.id(), old.name(), old.role(), old.timestamp())
        );
        assert_eq!(new.url(), None);
        assert_eq!(new.extra("metadata"), None);
        assert_eq!(new.extra("embedding"), old.extra("embedding"));
        match &new.id()[30..] {
            "02" | "08" => assert!(new.content().is_array()),
            "05" => assert!(new.content().is_string()),
            _ => assert_eq!(new.content(), old.content()),
        }
    }
}

/// Issue 11, item 15: the AgentScope 0.1.x export. The fixture's messages, added as plain
/// objects, export in the 0.1 layout to `export_v016.json` byte for byte; loading the fixture
/// (from a path or text) and exporting it again (as text or to a file) gives the same bytes;
/// marks ride along as a last `"__marks"` key and come back.
pub fn export_v016_round_trip(make: Maker<'_>) {
    let v016 = std::fs::read_to_string(fixture("agentscope/export_v016.json")).unwrap();
    let v01 = ExportOptions {
        format: ExportFormat::AgentScope01,
        ..ExportOptions::default()
    };
    let export01 = |memory: &dyn Memory, options: &ExportOptions| match memory
        .export(ExportTarget::Json, options)
        .unwrap()
    {
        Exported::Json(text) => text,
        other => panic!("expected JSON text, got {other:?}"),
    };
    // The same messages in the plain form: the embedding out of metadata, no markers.
    let plain: Vec<MsgInput> = serde_json::from_str::<Value>(&v016)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|item| {
            let mut object = item.as_object().unwrap().clone();
            object.shift_remove("__module__");
            object.shift_remove("__name__");
            if let Some(Value::Object(metadata)) = object.shift_remove("metadata") {
                object.insert("embedding".into(), metadata["embedding"].clone());
            }
            MsgInput::Json(Value::Object(object))
        })
        .collect();
    let built = make();
    built.add(plain).unwrap();
    assert_eq!(export01(built.as_ref(), &v01), v016);

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("v016-again.json");
    for source in [
        LoadSource::Path(fixture("agentscope/export_v016.json")),
        LoadSource::Json(v016.clone()),
    ] {
        let memory = make();
        memory.load(source, false).unwrap();
        assert_eq!(all(memory.as_ref()), all(built.as_ref()));
        assert_eq!(export01(memory.as_ref(), &v01), v016);
        assert_eq!(
            memory
                .export(ExportTarget::File(file.clone()), &v01)
                .unwrap(),
            Exported::File {
                path: file.clone(),
                count: 7
            }
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), v016);
        // With marks, and back: same messages, same marks, same bytes.
        let ids = [
            "a0000000000000000000000000000004",
            "a0000000000000000000000000000007",
        ];
        memory.mark(&ids, "pin").unwrap();
        let options = ExportOptions {
            include_marks: true,
            ..v01
        };
        let marked = export01(memory.as_ref(), &options);
        assert!(marked.contains(r#""timestamp": "2024-03-05 08:16:30", "__marks": ["pin"]}"#));
        let again = make();
        again.load(LoadSource::Json(marked.clone()), false).unwrap();
        assert_eq!(export01(again.as_ref(), &options), marked);
        assert_eq!(export01(again.as_ref(), &v01), v016);
    }
}

/// Check 10: token counts and budgets (docs/reference/memory.md#recall-by-token-budget).
pub fn token_budgets(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let suffixes = ["01", "02", "03", "04", "05", "07", "08"];
    let whitespace = [11, 14, 11, 8, 3, 11, 14];
    let all_ws = memory
        .recall_within_budget(usize::MAX, &WhitespaceTokenizer, &BudgetOptions::default())
        .unwrap();
    assert_eq!(all_ws.counts, whitespace);
    assert_eq!(all_ws.total, whitespace.iter().sum::<usize>());
    assert_eq!(all_ws.messages.len(), suffixes.len());
    {
        let cl100k = mnemon_embed::Cl100kTokenizer;
        let counts = [17, 19, 14, 29, 34, 23, 22];
        let full = memory
            .recall_within_budget(158, &cl100k, &BudgetOptions::default())
            .unwrap();
        assert_eq!(full.counts, counts);
        assert_eq!(full.messages.len(), 7);
        for (budget, expected) in [
            (79, vec!["05", "07", "08"]),
            (78, vec!["07", "08"]),
            (21, vec![]),
        ] {
            let got = memory
                .recall_within_budget(budget, &cl100k, &BudgetOptions::default())
                .unwrap();
            let got: Vec<&str> = got.messages.iter().map(|m| &m.id()[30..]).collect();
            assert_eq!(got, expected, "budget {budget}");
        }
    }
    // The overhead counts once per message.
    let with_overhead = memory
        .recall_within_budget(
            14 + 3,
            &WhitespaceTokenizer,
            &BudgetOptions {
                per_message_overhead: 3,
                ..BudgetOptions::default()
            },
        )
        .unwrap();
    assert_eq!(with_overhead.counts, vec![17]);
}

/// Duplicate ids are skipped, against the memory and within a batch (DEV-4, DEV-5).
pub fn dedupe(make: Maker<'_>) {
    let memory = make();
    let m = |id: &str| json!({"id": id, "name": "n", "content": id});
    let report = memory
        .add(vec![m("a").into(), m("b").into(), m("a").into()])
        .unwrap();
    assert_eq!(report.added, 2);
    assert_eq!(report.skipped_duplicates, vec!["a"]);
    let report = memory.add(vec![m("b").into(), m("c").into()]).unwrap();
    assert_eq!(report.added, 1);
    assert_eq!(report.skipped_duplicates, vec!["b"]);
    assert_eq!(ids(&all(memory.as_ref())), vec!["a", "b", "c"]);
    // Missing ids and timestamps come from the factory.
    memory
        .add(vec![json!({"name": "x", "content": null}).into()])
        .unwrap();
    let last = all(memory.as_ref()).pop().unwrap();
    assert_eq!(last.id(), "00000000000000000000000000000001");
    assert_eq!(last.timestamp(), "2024-03-05 08:30:00");
    assert_eq!(last.role(), "assistant");
}

/// Everything a memory holds that a caller can see: the export with marks (messages, their
/// order and their marks) and the size.
fn snapshot(memory: &dyn Memory) -> (String, usize) {
    let Exported::Json(text) = memory
        .export(
            ExportTarget::Json,
            &ExportOptions {
                include_marks: true,
                ..ExportOptions::default()
            },
        )
        .unwrap()
    else {
        panic!("JSON expected")
    };
    (text, memory.size().unwrap())
}

/// The check-1 memory with marks on two messages, so that "unchanged" covers marks too.
fn build_marked(memory: &dyn Memory) {
    build(memory);
    memory
        .mark(&["a0000000000000000000000000000001"], "pin")
        .unwrap();
    memory
        .mark(
            &[
                "a0000000000000000000000000000004",
                "a0000000000000000000000000000001",
            ],
            "later",
        )
        .unwrap();
}

/// Bad input gives a typed error and leaves the memory exactly as it was (messages, order and
/// marks), whether it comes through `add`, `load` of JSON text or `load` of a file, and even
/// with `overwrite`.
pub fn bad_input_changes_nothing(make: Maker<'_>) {
    let memory = make();
    build_marked(memory.as_ref());
    let before = snapshot(memory.as_ref());
    assert!(before.0.contains("__marks"));
    let ok = json!({"id": "new", "name": "n", "content": "c"});
    let missing = |field: &str| MemoryError::MissingField {
        p: 1,
        field: field.into(),
    };
    let cases: Vec<(Vec<MsgInput>, MemoryError)> = vec![
        (
            vec![ok.clone().into(), json!({"content": 1}).into()],
            missing("name"),
        ),
        (
            vec![ok.clone().into(), json!({"name": "n"}).into()],
            missing("content"),
        ),
        (
            vec![ok.clone().into(), json!(5).into()],
            MemoryError::NotAnObject { p: 1 },
        ),
        (
            vec![ok.clone().into(), json!({"__type": "Foo"}).into()],
            MemoryError::UnknownType { name: "Foo".into() },
        ),
        (
            vec![
                ok.clone().into(),
                json!({"name": "n", "content": 1, "embedding": []}).into(),
            ],
            MemoryError::InvalidField {
                p: 1,
                field: "embedding".into(),
                expected: "null or a non-empty array of finite numbers".into(),
            },
        ),
    ];
    for (items, expected) in cases {
        assert_eq!(memory.add(items).unwrap_err(), expected);
        assert_eq!(snapshot(memory.as_ref()), before);
    }
    let bad_mark = memory.add_with(
        vec![ok.clone().into()],
        &AddOptions {
            marks: vec![String::new()],
            ..AddOptions::default()
        },
    );
    assert_eq!(
        bad_mark.unwrap_err(),
        MemoryError::InvalidMark {
            mark: String::new()
        }
    );
    assert_eq!(snapshot(memory.as_ref()), before);

    // Load documents, each read from JSON text and from a file, with and without overwrite.
    let ok = r#"{"name": "n", "content": 1}"#;
    let v004 = v004_text();
    let mut no_content: Value = serde_json::from_str(&v004).unwrap();
    no_content[3].as_object_mut().unwrap().remove("content");
    let documents: Vec<(String, MemoryError)> = vec![
        (
            "5".into(),
            MemoryError::InvalidFormat {
                found: "a number".into(),
            },
        ),
        (format!("[{ok}, 3]"), MemoryError::NotAnObject { p: 1 }),
        (
            format!(r#"[{ok}, {{"__type": "Nope"}}]"#),
            MemoryError::UnknownType {
                name: "Nope".into(),
            },
        ),
        (format!(r#"[{ok}, {{"content": "who?"}}]"#), missing("name")),
        (format!(r#"[{ok}, {{"name": "n"}}]"#), missing("content")),
        // A whole export that lost one message's content.
        (
            no_content.to_string(),
            MemoryError::MissingField {
                p: 3,
                field: "content".into(),
            },
        ),
        (
            r#"[{"name": "n", "content": 1, "embedding": []}]"#.into(),
            MemoryError::InvalidField {
                p: 0,
                field: "embedding".into(),
                expected: "null or a non-empty array of finite numbers".into(),
            },
        ),
        (
            format!(r#"[{ok}, {{"name": "n", "content": 1, "__marks": ["ok", ""]}}]"#),
            MemoryError::InvalidMark {
                mark: String::new(),
            },
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    for (text, expected) in &documents {
        std::fs::write(&file, text).unwrap();
        for overwrite in [false, true] {
            for source in [
                LoadSource::Json(text.clone()),
                LoadSource::Path(file.clone()),
            ] {
                let got = memory.load(source.clone(), overwrite).unwrap_err();
                assert_eq!(&got, expected, "{source:?}, overwrite {overwrite}");
                assert_eq!(snapshot(memory.as_ref()), before, "{text}");
            }
        }
    }
    // Corrupt export files: truncated, damaged in the middle, not UTF-8, absent. The parser's
    // message varies, so only the variant is fixed.
    let corrupt: [(&str, Vec<u8>); 3] = [
        ("truncated", v004.as_bytes()[..v004.len() / 2].to_vec()),
        (
            "damaged",
            v004.replacen("\"name\": \"Kenji\"", "\"name\" \"Kenji\"", 1)
                .into_bytes(),
        ),
        ("empty", Vec::new()),
    ];
    for (what, bytes) in corrupt {
        std::fs::write(&file, bytes).unwrap();
        for overwrite in [true, false] {
            let got = memory.load(LoadSource::Path(file.clone()), overwrite);
            assert!(
                matches!(got, Err(MemoryError::InvalidJson { .. })),
                "{what}: {got:?}"
            );
            assert_eq!(snapshot(memory.as_ref()), before, "{what}");
        }
    }
    let mut latin1 = v004.clone().into_bytes();
    latin1.extend_from_slice(b"\xff\xfe");
    std::fs::write(&file, latin1).unwrap();
    for path in [
        file.clone(),
        dir.path().join("absent.json"),
        dir.path().to_path_buf(),
    ] {
        let got = memory.load(LoadSource::Path(path.clone()), true);
        assert!(
            matches!(got, Err(MemoryError::Io { .. })),
            "{path:?}: {got:?}"
        );
        assert_eq!(snapshot(memory.as_ref()), before);
    }
    // Invalid indices are reported, never an error.
    let report = memory.delete(&[100, 7]).unwrap();
    assert!(report.deleted.is_empty());
    assert_eq!(report.skipped_invalid, vec![7, 100]);
    assert_eq!(snapshot(memory.as_ref()), before);
    let empty = make();
    assert_eq!(empty.delete(&[0]).unwrap().skipped_invalid, vec![0]);
    assert_eq!(snapshot(empty.as_ref()), ("[]".into(), 0));
}

/// Deletion by several indices, by id and by mark.
pub fn delete_variants(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let report = memory.delete(&[5, 0, 5, 9]).unwrap();
    assert_eq!(report.deleted, vec![0, 5]);
    assert_eq!(
        report.deleted_ids,
        vec![
            "a0000000000000000000000000000001",
            "a0000000000000000000000000000007"
        ]
    );
    assert_eq!(report.skipped_invalid, vec![9]);
    let report = memory
        .delete_by_id(&[
            "a0000000000000000000000000000008",
            "zz",
            "a0000000000000000000000000000002",
            "zz",
        ])
        .unwrap();
    assert_eq!(
        report,
        DeleteByIdReport {
            deleted: vec![
                "a0000000000000000000000000000002".into(),
                "a0000000000000000000000000000008".into()
            ],
            not_found: vec!["zz".into()],
        }
    );
    assert_eq!(memory.size().unwrap(), 3);
    memory.clear().unwrap();
    assert_eq!(memory.size().unwrap(), 0);
    assert_eq!(export_text(memory.as_ref()), "[]");
}

/// Load with overwrite replaces; without, appends with dedupe.
pub fn load_overwrite(make: Maker<'_>) {
    let memory = make();
    memory
        .add(vec![json!({"id": "x", "name": "n", "content": 1}).into()])
        .unwrap();
    memory.mark(&["x"], "keep").unwrap();
    let report = memory
        .load(
            LoadSource::Path(fixture("agentscope/export_v004.json")),
            false,
        )
        .unwrap();
    assert_eq!(report.added, 7);
    assert_eq!(memory.size().unwrap(), 8);
    let report = memory
        .load(
            LoadSource::Path(fixture("agentscope/export_v004.json")),
            false,
        )
        .unwrap();
    assert_eq!((report.added, report.skipped_duplicates.len()), (0, 7));
    let report = memory.load(LoadSource::Json(v004_text()), true).unwrap();
    assert_eq!(report.added, 7);
    assert_eq!(memory.size().unwrap(), 7);
    assert_eq!(memory.marks_of("x").unwrap(), None);
    let messages = all(memory.as_ref());
    memory
        .load(LoadSource::Messages(messages.clone()), true)
        .unwrap();
    assert_eq!(all(memory.as_ref()), messages);
    let bom = format!("\u{feff}{}", v004_text());
    memory.load(LoadSource::Json(bom), true).unwrap();
    assert_eq!(all(memory.as_ref()), messages);
}

/// Marks: add_with, mark, unmark, marks_of, delete_by_mark, filters and export.
pub fn marks(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let a = "a0000000000000000000000000000001";
    let b = "a0000000000000000000000000000004";
    assert_eq!(memory.mark(&[a, b, a, "none"], "pin").unwrap(), 2);
    assert_eq!(memory.mark(&[a], "pin").unwrap(), 0);
    assert_eq!(memory.mark(&[a], "z").unwrap(), 1);
    assert_eq!(
        memory.marks_of(a).unwrap(),
        Some(vec!["pin".into(), "z".into()])
    );
    assert_eq!(memory.marks_of("none").unwrap(), None);
    memory
        .add_with(
            vec![json!({"id": "m1", "name": "n", "content": "c"}).into()],
            &AddOptions {
                marks: vec!["fresh".into(), "pin".into()],
                ..AddOptions::default()
            },
        )
        .unwrap();
    let pinned = memory
        .get_memory(&MemoryQuery {
            mark: Some("pin"),
            ..MemoryQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&pinned), vec![a, b, "m1"]);
    let unpinned = memory
        .get_memory(&MemoryQuery {
            exclude_mark: Some("pin"),
            recent_n: Some(2),
            ..MemoryQuery::default()
        })
        .unwrap();
    assert_eq!(
        ids(&unpinned),
        vec![
            "a0000000000000000000000000000007",
            "a0000000000000000000000000000008"
        ]
    );
    // Marks never show in text forms or the default export; include_marks writes them.
    let plain = export_text(memory.as_ref());
    assert!(!plain.contains("__marks"));
    let (with_marks, _) = snapshot(memory.as_ref());
    let other = make();
    other.load(LoadSource::Json(with_marks), false).unwrap();
    assert_eq!(
        other.marks_of(a).unwrap(),
        Some(vec!["pin".into(), "z".into()])
    );
    assert_eq!(
        other.marks_of("m1").unwrap(),
        Some(vec!["fresh".into(), "pin".into()])
    );
    assert_eq!(all(other.as_ref()), all(memory.as_ref()));
    // Unmark some, then all.
    assert_eq!(memory.unmark(Some(&[a]), "pin").unwrap(), 1);
    assert_eq!(memory.unmark(None, "pin").unwrap(), 2);
    assert_eq!(memory.marks_of(a).unwrap(), Some(vec!["z".into()]));
    let report = memory.delete_by_mark("fresh").unwrap();
    assert_eq!(report.deleted, vec!["m1"]);
    assert!(matches!(
        memory.mark(&[a], ""),
        Err(MemoryError::InvalidMark { .. })
    ));
    // Retrieval and budgets honour marks.
    let got = memory
        .retrieve_by_embedding(
            RetrievalQuery::Vector(vec![0.2, -0.4, 0.5, 0.7]),
            &RetrieveOptions {
                mark: Some("z".into()),
                top_k: None,
                ..RetrieveOptions::default()
            },
            None,
        )
        .unwrap_err();
    assert!(matches!(
        got,
        MemoryError::MissingEmbedding { missing: 1, .. }
    ));
    let recall = memory
        .recall_within_budget(
            1000,
            &WhitespaceTokenizer,
            &BudgetOptions {
                mark: Some("z".into()),
                ..BudgetOptions::default()
            },
        )
        .unwrap();
    assert_eq!(ids(&recall.messages), vec![a]);
}

/// A mark repeated in `AddOptions::marks` (or in an item's `__marks`) is kept once, on every
/// backend: the durable stores key marks by message and mark, and refused the whole add.
pub fn repeated_marks(make: Maker<'_>) {
    let memory = make();
    let report = memory
        .add_with(
            vec![
                json!({"id": "r1", "name": "n", "content": "one"}).into(),
                json!({"id": "r2", "name": "n", "content": "two", "__marks": ["z", "pin", "z"]})
                    .into(),
            ],
            &AddOptions {
                marks: vec!["pin".into(), "a".into(), "pin".into(), "a".into()],
                ..AddOptions::default()
            },
        )
        .unwrap();
    assert_eq!(report.added, 2);
    assert_eq!(
        memory.marks_of("r1").unwrap(),
        Some(vec!["pin".into(), "a".into()])
    );
    assert_eq!(
        memory.marks_of("r2").unwrap(),
        Some(vec!["pin".into(), "a".into(), "z".into()])
    );
    let pinned = memory
        .get_memory(&MemoryQuery {
            mark: Some("pin"),
            ..MemoryQuery::default()
        })
        .unwrap();
    assert_eq!(ids(&pinned), ["r1", "r2"]);
    // Unmarking once takes the mark away: no second copy is left behind.
    assert_eq!(memory.unmark(Some(&["r1"]), "pin").unwrap(), 1);
    assert_eq!(memory.marks_of("r1").unwrap(), Some(vec!["a".into()]));
    // A repeat is still checked: an invalid mark among them refuses the add.
    assert!(matches!(
        memory.add_with(
            vec![json!({"id": "r3", "name": "n", "content": "three"}).into()],
            &AddOptions {
                marks: vec!["pin".into(), "pin".into(), String::new()],
                ..AddOptions::default()
            },
        ),
        Err(MemoryError::InvalidMark { .. })
    ));
    assert_eq!(memory.size().unwrap(), 2);
}

/// Export to a file, then load it back.
pub fn export_file_round_trip(make: Maker<'_>) {
    let memory = make();
    build(memory.as_ref());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("export.json");
    let exported = memory
        .export(ExportTarget::File(path.clone()), &ExportOptions::default())
        .unwrap();
    assert_eq!(
        exported,
        Exported::File {
            path: path.clone(),
            count: 7
        }
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), v004_text());
    let other = make();
    other.load(LoadSource::Path(path), false).unwrap();
    assert_eq!(all(other.as_ref()), all(memory.as_ref()));
    let Exported::Messages(messages) = memory
        .export(ExportTarget::Messages, &ExportOptions::default())
        .unwrap()
    else {
        panic!("messages expected")
    };
    assert_eq!(messages, all(memory.as_ref()));
}

/// Retrieval options, metrics, errors and the embedder path.
pub fn retrieval_behaviour(make: Maker<'_>) {
    let memory = make();
    let m = |id: &str, e: Value| json!({"id": id, "name": "n", "content": id, "embedding": e});
    memory
        .add(vec![
            m("a", json!([1.0, 0.0])).into(),
            m("b", json!([0.0, 1.0])).into(),
            m("c", json!([1.0, 0.0])).into(),
            m("d", json!([0.0, 0.0])).into(),
        ])
        .unwrap();
    let run = |query: Vec<f32>, options: RetrieveOptions| -> Vec<(String, f64)> {
        memory
            .retrieve_by_embedding(RetrievalQuery::Vector(query), &options, None)
            .unwrap()
            .into_iter()
            .map(|r| (r.message.id().to_owned(), r.score))
            .collect()
    };
    let top_all = RetrieveOptions {
        top_k: None,
        preserve_order: false,
        ..RetrieveOptions::default()
    };
    // Ties keep the lower index first; a zero vector scores 0 under cosine.
    let got = run(vec![2.0, 0.0], top_all.clone());
    assert_eq!(
        got,
        vec![
            ("a".into(), 1.0),
            ("c".into(), 1.0),
            ("b".into(), 0.0),
            ("d".into(), 0.0)
        ]
    );
    let got = run(
        vec![2.0, 0.0],
        RetrieveOptions {
            metric: Metric::Dot,
            ..top_all.clone()
        },
    );
    assert_eq!(got[0], ("a".into(), 2.0));
    let got = run(
        vec![0.0, 1.0],
        RetrieveOptions {
            metric: Metric::NegEuclidean,
            top_k: Some(2),
            preserve_order: false,
            ..RetrieveOptions::default()
        },
    );
    assert_eq!(got[0], ("b".into(), -0.0));
    assert_eq!(got[1].0, "d");
    assert!((got[1].1 + 1.0).abs() < 1e-12);
    let got = run(
        vec![1.0, 1.0],
        RetrieveOptions {
            metric: Metric::Custom(Arc::new(|_, e| -f64::from(e[1]))),
            ..top_all.clone()
        },
    );
    assert_eq!(got[0].0, "a");
    assert_eq!(got.last().unwrap().0, "b");
    assert!(
        run(
            vec![1.0, 0.0],
            RetrieveOptions {
                top_k: Some(0),
                ..RetrieveOptions::default()
            }
        )
        .is_empty()
    );
    assert_eq!(run(vec![0.0, 1.0], RetrieveOptions::default())[0].0, "b");
    // Without embeddings: the same messages and scores, each message's numbers left out.
    let recall = |with_embeddings: bool| {
        memory
            .retrieve_by_embedding(
                RetrievalQuery::Vector(vec![2.0, 0.0]),
                &RetrieveOptions {
                    with_embeddings,
                    ..top_all.clone()
                },
                None,
            )
            .unwrap()
    };
    let (with, without) = (recall(true), recall(false));
    assert_eq!(
        with.iter()
            .map(|r| (r.message.id(), r.score, r.index))
            .collect::<Vec<_>>(),
        without
            .iter()
            .map(|r| (r.message.id(), r.score, r.index))
            .collect::<Vec<_>>()
    );
    assert!(with.iter().all(|r| r.message.embedding().is_some()));
    assert!(without.iter().all(|r| r.message.embedding().is_none()));
    assert_eq!(without[0].message.content(), with[0].message.content());
    let err = memory
        .retrieve_by_embedding(
            RetrievalQuery::Vector(vec![1.0, 0.0, 0.0]),
            &RetrieveOptions::default(),
            None,
        )
        .unwrap_err();
    assert_eq!(
        err,
        MemoryError::DimensionMismatch {
            id: "a".into(),
            expected: 3,
            found: 2
        }
    );
    let err = memory
        .retrieve_by_embedding(
            RetrievalQuery::Vector(vec![]),
            &RetrieveOptions::default(),
            None,
        )
        .unwrap_err();
    assert!(matches!(err, MemoryError::InvalidQuery { .. }));
    let err = memory
        .retrieve_by_embedding(
            RetrievalQuery::Text("ferry".into()),
            &RetrieveOptions::default(),
            None,
        )
        .unwrap_err();
    assert_eq!(err, MemoryError::QueryNeedsEmbedder);
    assert_eq!(memory.get_embeddings(None).unwrap().len(), 4);
}

/// Missing embeddings are embedded with the content text and stored.
pub fn embedder_fills_missing(make: Maker<'_>) {
    let memory = make();
    memory
        .add(vec![
            json!({"id": "a", "name": "Mara", "content": "the morning ferry"}).into(),
            json!({"id": "b", "name": "Kenji", "content": "last boat to the island"}).into(),
            json!({"id": "c", "name": "x", "content": {"k": 1}}).into(),
        ])
        .unwrap();
    assert!(matches!(
        memory.get_embeddings(None),
        Err(MemoryError::MissingEmbedding { missing: 3, .. })
    ));
    let embedder = HashingEmbedder::new(32).unwrap();
    let got = memory
        .retrieve_by_embedding(
            RetrievalQuery::Text("Island boat".into()),
            &RetrieveOptions::default(),
            Some(&embedder),
        )
        .unwrap();
    assert_eq!(got[0].message.id(), "b");
    let embeddings = memory.get_embeddings(None).unwrap();
    assert_eq!(embeddings.len(), 3);
    use mnemon_types::Embedder as _;
    let direct = embedder
        .embed(&["the morning ferry", "last boat to the island", "{\"k\":1}"])
        .unwrap();
    assert_eq!(embeddings, direct);
    // The stored embedding is the f32's shortest decimal.
    let first = all(memory.as_ref()).remove(0);
    assert_eq!(first.embedding().unwrap(), direct[0]);
    // A message query uses its embedding.
    let got = memory
        .retrieve_by_embedding(
            RetrievalQuery::Message(first),
            &RetrieveOptions::default(),
            None,
        )
        .unwrap();
    assert_eq!(got[0].message.id(), "a");
}

/// A hashing embedder that, like a writer racing a recall, adds one message without an
/// embedding to `memory` every time it is called.
struct Interfering<'a> {
    memory: &'a dyn Memory,
    inner: HashingEmbedder,
    calls: std::sync::atomic::AtomicUsize,
}

impl mnemon_types::Embedder for Interfering<'_> {
    fn model(&self) -> &str {
        self.inner.model()
    }

    fn dimension(&self) -> usize {
        self.inner.dimension()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_types::EmbedError> {
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.memory
            .add(vec![
                json!({"id": format!("late-{call}"), "name": "w", "content": "a late boat"}).into(),
            ])
            .map_err(|e| mnemon_types::EmbedError::new("test:interfering", e.to_string()))?;
        self.inner.embed(texts)
    }
}

/// A recall by text while other writers keep adding messages without embeddings: it scores
/// every message present when it began and never fails on a message added meanwhile (found by
/// `cargo xtask bench server`: recalls racing adds answered 422 "no embedder was given").
pub fn recall_while_messages_arrive(make: Maker<'_>) {
    use mnemon_types::Embedder as _;
    let memory = make();
    memory
        .add(vec![
            json!({"id": "a", "name": "Mara", "content": "the morning ferry"}).into(),
            json!({"id": "b", "name": "Kenji", "content": "last boat to the island"}).into(),
        ])
        .unwrap();
    let embedder = Interfering {
        memory: memory.as_ref(),
        inner: HashingEmbedder::new(32).unwrap(),
        calls: std::sync::atomic::AtomicUsize::new(0),
    };
    let got = memory
        .retrieve_by_embedding(
            RetrievalQuery::Text("Island boat".into()),
            &RetrieveOptions {
                top_k: None,
                ..RetrieveOptions::default()
            },
            Some(&embedder),
        )
        .unwrap();
    let ids: Vec<&str> = got.iter().map(|r| r.message.id()).collect();
    assert!(ids.contains(&"a") && ids.contains(&"b"), "{ids:?}");
    let calls = embedder.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        calls >= 2,
        "the embedder ran {calls} times: nothing raced the recall"
    );
    // Every message returned is scored against its stored embedding.
    let query = embedder.inner.embed(&["Island boat"]).unwrap().remove(0);
    for r in &got {
        let stored = r.message.embedding().unwrap();
        let dot: f64 = stored
            .iter()
            .zip(&query)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        let cosine = dot / (norm(&stored) * norm(&query));
        assert!(
            (r.score - cosine).abs() < 1e-6,
            "{}: {}",
            r.message.id(),
            r.score
        );
    }
    assert_eq!(memory.size().unwrap(), 2 + calls);
}

/// An embedder that breaks in one of the ways retrieval must survive.
struct BrokenEmbedder {
    /// How it breaks.
    fault: Fault,
    /// How many calls succeed before it breaks.
    good_calls: usize,
    calls: std::sync::atomic::AtomicUsize,
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Returns an error.
    Fails,
    /// Returns vectors one shorter than `dimension()`.
    WrongDimension,
    /// Returns one vector fewer than texts.
    WrongCount,
    /// Returns a NaN.
    NonFinite,
}

impl BrokenEmbedder {
    fn new(fault: Fault, good_calls: usize) -> Self {
        BrokenEmbedder {
            fault,
            good_calls,
            calls: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// The error retrieval must report for this embedder's fault.
    fn expected_error(&self, texts: usize) -> MemoryError {
        let model = "test:broken".to_owned();
        match self.fault {
            Fault::Fails => MemoryError::Embedder {
                model,
                detail: "the model is unavailable".into(),
            },
            Fault::WrongDimension => MemoryError::EmbedderContract {
                model,
                detail: "a vector of length 3 where dimension() is 4".into(),
            },
            Fault::WrongCount => MemoryError::EmbedderContract {
                model,
                detail: format!("{} vectors for {texts} texts", texts - 1),
            },
            Fault::NonFinite => MemoryError::EmbedderContract {
                model,
                detail: "a vector with a NaN or infinite number".into(),
            },
        }
    }
}

impl mnemon_types::Embedder for BrokenEmbedder {
    fn model(&self) -> &str {
        "test:broken"
    }

    fn dimension(&self) -> usize {
        4
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, mnemon_types::EmbedError> {
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let good = |_: &&str| vec![0.5f32, 0.5, 0.5, 0.5];
        if call < self.good_calls {
            return Ok(texts.iter().map(good).collect());
        }
        match self.fault {
            Fault::Fails => Err(mnemon_types::EmbedError::new(
                "test:broken",
                "the model is unavailable",
            )),
            Fault::WrongDimension => Ok(texts.iter().map(|_| vec![0.5f32; 3]).collect()),
            Fault::WrongCount => Ok(texts.iter().skip(1).map(good).collect()),
            Fault::NonFinite => Ok(texts
                .iter()
                .map(|_| vec![0.5f32, f32::NAN, 0.5, 0.5])
                .collect()),
        }
    }
}

/// An embedder that fails or breaks its contract gives `Embedder` or `EmbedderContract`, and stores
/// nothing: not even the batches it embedded before failing
/// (docs/reference/memory.md#retrieval-steps step 2).
pub fn embedder_errors_store_nothing(make: Maker<'_>) {
    let memory = make();
    build_marked(memory.as_ref());
    let before = snapshot(memory.as_ref());
    let query = || RetrievalQuery::Vector(vec![0.2, -0.4, 0.5, 0.7]);
    let still_missing = MemoryError::MissingEmbedding {
        id: "a0000000000000000000000000000001".into(),
        missing: 4,
    };
    for fault in [
        Fault::Fails,
        Fault::WrongDimension,
        Fault::WrongCount,
        Fault::NonFinite,
    ] {
        let embedder = BrokenEmbedder::new(fault, 0);
        let expected = embedder.expected_error(4);
        for options in [
            RetrieveOptions::default(),
            RetrieveOptions {
                top_k: None,
                preserve_order: false,
                ..RetrieveOptions::default()
            },
        ] {
            let got = memory
                .retrieve_by_embedding(query(), &options, Some(&embedder))
                .unwrap_err();
            assert_eq!(got, expected, "{fault:?}");
            assert_eq!(snapshot(memory.as_ref()), before, "{fault:?}");
        }
        assert_eq!(
            memory.get_embeddings(Some(&embedder)).unwrap_err(),
            expected,
            "{fault:?}"
        );
        assert_eq!(memory.get_embeddings(None).unwrap_err(), still_missing);
        assert_eq!(snapshot(memory.as_ref()), before, "{fault:?}");
        // A text query is embedded first, with the same error.
        let got = memory
            .retrieve_by_embedding(
                RetrievalQuery::Text("ferry".into()),
                &RetrieveOptions::default(),
                Some(&BrokenEmbedder::new(fault, 0)),
            )
            .unwrap_err();
        assert_eq!(got, BrokenEmbedder::new(fault, 0).expected_error(1));
    }

    // Embedded in batches (of 256): the first batch succeeds, the second fails, and the first
    // batch's vectors must not be stored either.
    let large = make();
    let items: Vec<MsgInput> = (0..300)
        .map(|i| {
            json!({"id": format!("m{i:03}"), "name": "n", "content": format!("message {i}")}).into()
        })
        .collect();
    large.add(items).unwrap();
    large.mark(&["m000", "m299"], "ends").unwrap();
    let before = snapshot(large.as_ref());
    for fault in [
        Fault::Fails,
        Fault::WrongDimension,
        Fault::WrongCount,
        Fault::NonFinite,
    ] {
        let embedder = BrokenEmbedder::new(fault, 1);
        let got = large
            .retrieve_by_embedding(query(), &RetrieveOptions::default(), Some(&embedder))
            .unwrap_err();
        assert_eq!(got, embedder.expected_error(300 - 256), "{fault:?}");
        assert_eq!(
            embedder.calls.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "{fault:?}: one good batch, then the failure"
        );
        assert_eq!(snapshot(large.as_ref()), before, "{fault:?}");
        assert_eq!(
            large.get_embeddings(None).unwrap_err(),
            MemoryError::MissingEmbedding {
                id: "m000".into(),
                missing: 300
            }
        );
    }
    // A working embedder afterwards fills in everything, in both batches.
    let working = BrokenEmbedder::new(Fault::Fails, usize::MAX);
    let got = large
        .retrieve_by_embedding(query(), &RetrieveOptions::default(), Some(&working))
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(large.get_embeddings(None).unwrap().len(), 300);
    assert_eq!(large.marks_of("m299").unwrap(), Some(vec!["ends".into()]));

    // An embedder that keeps its contract but whose dimension differs from the query's: the
    // mismatch is reported by message.
    let other = make();
    build(other.as_ref());
    let got = other
        .retrieve_by_embedding(
            query(),
            &RetrieveOptions::default(),
            Some(&HashingEmbedder::new(8).unwrap()),
        )
        .unwrap_err();
    assert_eq!(
        got,
        MemoryError::DimensionMismatch {
            id: "a0000000000000000000000000000001".into(),
            expected: 4,
            found: 8
        }
    );
}

/// Runs every check (for callers that prefer one test).
pub fn run_all(make: Maker<'_>) {
    for (name, check) in CHECKS {
        eprintln!("memory conformance: {name}");
        check(make);
    }
}

/// One conformance check.
pub type Check = fn(Maker<'_>);

/// Every check, by name.
pub const CHECKS: &[(&str, Check)] = &[
    ("build_and_delete", build_and_delete),
    ("export_matches_v004", export_matches_v004),
    ("load_v004", load_v004),
    ("get_memory_cases", get_memory_cases),
    ("retrieval_matches_fixture", retrieval_matches_fixture),
    ("serialize_matches_fixture", serialize_matches_fixture),
    ("to_str_matches_fixture", to_str_matches_fixture),
    ("load_v016", load_v016),
    ("export_v016_round_trip", export_v016_round_trip),
    ("token_budgets", token_budgets),
    ("dedupe", dedupe),
    ("bad_input_changes_nothing", bad_input_changes_nothing),
    ("delete_variants", delete_variants),
    ("load_overwrite", load_overwrite),
    ("marks", marks),
    ("repeated_marks", repeated_marks),
    ("export_file_round_trip", export_file_round_trip),
    ("retrieval_behaviour", retrieval_behaviour),
    ("embedder_fills_missing", embedder_fills_missing),
    (
        "embedder_errors_store_nothing",
        embedder_errors_store_nothing,
    ),
];

/// Defines one `#[test]` per conformance check, each calling `$make()` for a maker
/// (`impl Fn() -> Box<dyn Memory>`, which may own resources such as a temporary directory).
#[macro_export]
macro_rules! memory_conformance_tests {
    ($make:expr) => {
        $crate::memory_conformance_tests!(@each $make;
            build_and_delete, export_matches_v004, load_v004, get_memory_cases,
            retrieval_matches_fixture, serialize_matches_fixture, to_str_matches_fixture,
            load_v016, export_v016_round_trip, token_budgets, dedupe, bad_input_changes_nothing, delete_variants,
            load_overwrite, marks, repeated_marks, export_file_round_trip, retrieval_behaviour,
            embedder_fills_missing, embedder_errors_store_nothing, recall_while_messages_arrive);
    };
    (@each $make:expr; $($name:ident),*) => {
        $(
            #[test]
            fn $name() {
                let make = $make;
                $crate::memory_conformance::$name(&make);
            }
        )*
    };
}

/// Durable memories opened by namespace (tenant) and session, for [`tenant_isolation`]: each
/// call opens the backend's store for `namespace` (a handle of one namespace only).
pub trait TenantStores {
    /// The memory of session `session` in `namespace`, created if needed.
    fn memory(&self, namespace: &str, session: &str) -> Box<dyn Memory>;
    /// The memory of session `session` in `namespace` if it exists, without creating it.
    fn existing(&self, namespace: &str, session: &str) -> Option<Box<dyn Memory>>;
    /// The sessions of `namespace`, oldest first (the store's thread listing).
    fn sessions(&self, namespace: &str) -> Vec<String>;
    /// Drops session `session` of `namespace`; whether it existed.
    fn drop_session(&self, namespace: &str, session: &str) -> bool;
}

/// Four messages with fixed ids whose names, contents and embeddings say which tenant wrote
/// them.
fn tenant_messages(tenant: &str, flip: bool) -> Vec<MsgInput> {
    (1..=4)
        .map(|i| {
            let x = f64::from(i) / 4.0;
            let embedding = if flip { [1.0 - x, x] } else { [x, 1.0 - x] };
            json!({"id": format!("m{i}"), "name": tenant, "role": "user",
                   "content": format!("{tenant} says {i}"), "embedding": embedding,
                   "timestamp": "2024-03-05 08:15:00"})
            .into()
        })
        .collect()
}

fn names(messages: &[Msg]) -> Vec<String> {
    messages.iter().map(|m| m.name().to_owned()).collect()
}

/// Issue 13, item 3: two namespaces holding the same session ids and the same message ids never
/// see each other. Every operation of [`Memory`] through one tenant's handle (reads, adds with
/// dedupe, marks, recall by embedding and by budget, deletes by index, id and mark, load with
/// overwrite, clear) leaves the other tenant's memory exactly as it was and reads only its own
/// messages; the store's session listing, lookup and drop are per namespace too.
pub fn tenant_isolation(stores: &dyn TenantStores) {
    let alpha = stores.memory("alpha", "s1");
    let beta = stores.memory("beta", "s1");
    assert_eq!(alpha.add(tenant_messages("alpha", false)).unwrap().added, 4);
    // The same ids in the other namespace are new there: no dedupe across tenants.
    let report = beta.add(tenant_messages("beta", true)).unwrap();
    assert_eq!(report.added, 4, "{report:?}");
    assert!(report.skipped_duplicates.is_empty());
    let alpha_before = snapshot(alpha.as_ref());
    let only = |memory: &dyn Memory, tenant: &str| {
        let got = names(&all(memory));
        assert!(got.iter().all(|n| n == tenant), "{tenant} read {got:?}");
        got.len()
    };
    assert_eq!(only(alpha.as_ref(), "alpha"), 4);
    assert_eq!(only(beta.as_ref(), "beta"), 4);
    assert_eq!(beta.size().unwrap(), 4);
    assert_eq!(
        beta.render(&MemoryQuery {
            recent_n: Some(1),
            ..MemoryQuery::default()
        })
        .unwrap(),
        "beta: beta says 4"
    );

    // Marks: marking, reading and unmarking in beta never touch alpha's same-id messages.
    assert_eq!(alpha.mark(&["m1"], "pin").unwrap(), 1);
    let alpha_before = {
        let marked = snapshot(alpha.as_ref());
        assert_ne!(marked, alpha_before);
        marked
    };
    assert_eq!(beta.marks_of("m1").unwrap(), Some(Vec::new()));
    assert_eq!(beta.unmark(None, "pin").unwrap(), 0);
    assert_eq!(
        beta.delete_by_mark("pin").unwrap(),
        DeleteByIdReport::default()
    );
    let pinned = beta
        .get_memory(&MemoryQuery {
            mark: Some("pin"),
            ..MemoryQuery::default()
        })
        .unwrap();
    assert!(pinned.is_empty());
    assert_eq!(beta.mark(&["m2"], "beta-only").unwrap(), 1);
    assert_eq!(alpha.marks_of("m2").unwrap(), Some(Vec::new()));
    assert_eq!(snapshot(alpha.as_ref()), alpha_before);

    // Recall by embedding: beta's query closest to alpha's m4 finds only beta's messages.
    let options = RetrieveOptions {
        top_k: None,
        ..RetrieveOptions::default()
    };
    let found = beta
        .retrieve_by_embedding(RetrievalQuery::Vector(vec![1.0, 0.0]), &options, None)
        .unwrap();
    assert_eq!(found.len(), 4);
    assert!(found.iter().all(|r| r.message.name() == "beta"));
    let alpha_embeddings = alpha.get_embeddings(None).unwrap();
    let beta_embeddings = beta.get_embeddings(None).unwrap();
    assert_eq!(alpha_embeddings.len(), 4);
    assert_ne!(alpha_embeddings, beta_embeddings);
    let marked = beta
        .retrieve_by_embedding(
            RetrievalQuery::Vector(vec![1.0, 0.0]),
            &RetrieveOptions {
                mark: Some("pin".into()),
                ..options.clone()
            },
            None,
        )
        .unwrap();
    assert!(marked.is_empty(), "alpha's pin reached beta: {marked:?}");
    let budget = beta
        .recall_within_budget(1000, &WhitespaceTokenizer, &BudgetOptions::default())
        .unwrap();
    assert!(budget.messages.iter().all(|m| m.name() == "beta"));
    assert_eq!(budget.messages.len(), 4);

    // Deletes in beta by index, id and mark leave alpha whole, and the reverse.
    assert_eq!(beta.delete(&[0]).unwrap().deleted_ids, ["m1"]);
    assert_eq!(
        beta.delete_by_id(&["m2"]).unwrap().deleted,
        vec!["m2".to_owned()]
    );
    assert_eq!(snapshot(alpha.as_ref()), alpha_before);
    assert_eq!(
        alpha.delete_by_id(&["m3"]).unwrap().deleted,
        vec!["m3".to_owned()]
    );
    assert_eq!(ids(&all(beta.as_ref())), ["m3", "m4"]);
    let alpha_before = snapshot(alpha.as_ref());

    // Load with overwrite and clear replace only beta's messages.
    let document = serde_json::to_string(
        &(5..=6)
            .map(|i| {
                json!({"id": format!("m{i}"), "name": "beta", "role": "user",
                            "content": "loaded", "timestamp": "2024-03-05 08:15:00"})
            })
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert_eq!(
        beta.load(LoadSource::Json(document), true).unwrap().added,
        2
    );
    assert_eq!(ids(&all(beta.as_ref())), ["m5", "m6"]);
    assert_eq!(snapshot(alpha.as_ref()), alpha_before);
    beta.clear().unwrap();
    assert_eq!(beta.size().unwrap(), 0);
    assert_eq!(snapshot(alpha.as_ref()), alpha_before);
    assert_eq!(only(alpha.as_ref(), "alpha"), 3);

    // A fresh handle of each namespace reads its own tenant's rows from storage.
    let alpha_again = stores.existing("alpha", "s1").expect("alpha's s1 exists");
    assert_eq!(snapshot(alpha_again.as_ref()), alpha_before);
    let beta_again = stores.existing("beta", "s1").expect("beta's s1 exists");
    assert_eq!(beta_again.size().unwrap(), 0);

    // Listing, lookup and drop are per namespace.
    let _beta_two = stores.memory("beta", "s2");
    assert_eq!(stores.sessions("alpha"), ["s1"]);
    assert_eq!(stores.sessions("beta"), ["s1", "s2"]);
    assert!(stores.sessions("gamma").is_empty());
    assert!(stores.existing("alpha", "s2").is_none());
    assert!(stores.existing("gamma", "s1").is_none());
    assert!(!stores.drop_session("alpha", "s2"));
    assert!(!stores.drop_session("gamma", "s1"));
    assert_eq!(stores.sessions("beta"), ["s1", "s2"]);
    assert!(stores.drop_session("beta", "s1"));
    assert_eq!(stores.sessions("beta"), ["s2"]);
    assert_eq!(stores.sessions("alpha"), ["s1"]);
    assert_eq!(snapshot(alpha.as_ref()), alpha_before);
    // Writing through beta's old handle recreates beta's thread, never alpha's.
    beta.add(tenant_messages("beta", true)).unwrap();
    assert_eq!(snapshot(alpha.as_ref()), alpha_before);
    assert_eq!(only(beta.as_ref(), "beta"), 4);
}

/// `for_each_message` on handles that have not read the thread (a durable memory then reads
/// rows, not a mirror): `fresh` opens such a handle on the thread `write` writes. 300 messages,
/// every third marked `m`: each query streamed first through a fresh handle gives what
/// `get_memory` gives, and a stream stopped after two messages decodes no third (the filter
/// sees each message decoded).
pub fn streams_unread_threads(write: &dyn Memory, fresh: &dyn Fn() -> Box<dyn Memory>) {
    let items: Vec<MsgInput> = (0..300)
        .map(|i| json!({"id": format!("s{i:03}"), "name": "n", "content": format!("c {i}")}).into())
        .collect();
    write.add(items).unwrap();
    let marked: Vec<String> = (0..300).step_by(3).map(|i| format!("s{i:03}")).collect();
    let marked: Vec<&str> = marked.iter().map(String::as_str).collect();
    write.mark(&marked, "m").unwrap();
    let even = |i: usize, _: &Msg| i.is_multiple_of(2);
    let queries = [
        MemoryQuery::default(),
        MemoryQuery {
            mark: Some("m"),
            ..MemoryQuery::default()
        },
        MemoryQuery {
            exclude_mark: Some("m"),
            filter: Some(&even),
            ..MemoryQuery::default()
        },
    ];
    for query in &queries {
        let mut streamed = Vec::new();
        let given = fresh()
            .for_each_message(query, &mut |m| {
                streamed.push(m);
                true
            })
            .unwrap();
        let expected = write.get_memory(query).unwrap();
        assert_eq!(ids(&streamed), ids(&expected), "{query:?}");
        assert_eq!(given, expected.len(), "{query:?}");
    }
    stops_when_told(fresh().as_ref());
}
