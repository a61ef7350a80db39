//! `Msg` text forms against the AgentScope 0.0.4 fixtures (docs/reference/memory.md#conformance
//! checks 6–9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use mnemon_pyjson::dumps_indent;
use mnemon_tests::fixture;
use mnemon_types::msg::{
    Deserialized, FixedClock, Msg, MsgFactory, MsgKind, SequentialIds, deserialize, serialize,
    serialize_list,
};
use serde_json::Value;

fn factory() -> MsgFactory {
    MsgFactory::new(
        Arc::new(SequentialIds::new()),
        Arc::new(FixedClock::new("2024-03-05 08:30:00")),
    )
}

fn cases() -> Value {
    let text = std::fs::read_to_string(fixture("agentscope/memory_cases.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn export_v004_text() -> String {
    std::fs::read_to_string(fixture("agentscope/export_v004.json")).unwrap()
}

/// The seven messages of `export_v004.json`, ingested as plain objects.
fn stored_messages(f: &MsgFactory) -> Vec<Msg> {
    let doc: Value = serde_json::from_str(&export_v004_text()).unwrap();
    doc.as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, v)| {
            f.from_object(v.as_object().unwrap(), MsgKind::Msg, i)
                .unwrap()
        })
        .collect()
}

fn by_id<'a>(messages: &'a [Msg], id: &str) -> &'a Msg {
    messages.iter().find(|m| m.id() == id).unwrap()
}

#[test]
fn export_layout_is_byte_identical() {
    let f = factory();
    let messages = stored_messages(&f);
    let doc = Value::Array(messages.iter().map(Msg::to_json).collect());
    assert_eq!(dumps_indent(&doc, 4), export_v004_text());
}

#[test]
fn msg_serialize_matches_fixture_bytes() {
    let f = factory();
    let messages = stored_messages(&f);
    let cases = cases();
    for case in cases["serialize"]["msg_serialize"].as_array().unwrap() {
        let msg = by_id(&messages, case["id"].as_str().unwrap());
        let expected = case["output"].as_str().unwrap();
        assert_eq!(serialize(msg), expected);
        assert_eq!(
            deserialize(expected, &f).unwrap(),
            Deserialized::One(msg.clone())
        );
    }
}

#[test]
fn serialize_list_matches_fixture_bytes() {
    let f = factory();
    let messages = stored_messages(&f);
    let cases = cases();
    let expected = cases["serialize"]["module_serialize_list"]["output"]
        .as_str()
        .unwrap();
    assert_eq!(serialize_list(&messages), expected);
    assert_eq!(
        deserialize(expected, &f).unwrap(),
        Deserialized::Many(messages)
    );
}

#[test]
fn to_str_matches_fixture_for_string_content() {
    let f = factory();
    let messages = stored_messages(&f);
    let cases = cases();
    for case in cases["serialize"]["to_str"].as_array().unwrap() {
        let msg = by_id(&messages, case["id"].as_str().unwrap());
        if msg.content().is_string() {
            assert_eq!(msg.to_str(), case["output"].as_str().unwrap());
        }
    }
    // DEV-12: compact JSON instead of Python's repr.
    assert_eq!(
        by_id(&messages, "a0000000000000000000000000000005").to_str(),
        r#"Harbourmaster: {"ferry":"running","departures":["09:30","13:00"],"delayed":false,"note":"quai n°2"}"#
    );
}

#[test]
fn v016_export_deserializes_per_spec() {
    let f = factory();
    let v004 = stored_messages(&f);
    let text = std::fs::read_to_string(fixture("agentscope/export_v016.json")).unwrap();
    let Deserialized::Many(v016) = deserialize(&text, &f).unwrap() else {
        panic!("an array gives many messages");
    };
    assert_eq!(v016.len(), 7);
    for (new, old) in v016.iter().zip(&v004) {
        assert_eq!(new.id(), old.id());
        assert_eq!(new.name(), old.name());
        assert_eq!(new.role(), old.role());
        assert_eq!(new.timestamp(), old.timestamp());
        assert_eq!(new.url(), None);
        assert_eq!(new.extra("metadata"), None);
        assert_eq!(new.extra("embedding"), old.extra("embedding"));
        let suffix = &new.id()[30..];
        match suffix {
            "01" | "03" | "04" | "07" => assert_eq!(new.content(), old.content()),
            "02" | "08" => assert!(new.content().is_array()),
            "05" => assert!(new.content().is_string()),
            other => panic!("unexpected id suffix {other}"),
        }
    }
}
