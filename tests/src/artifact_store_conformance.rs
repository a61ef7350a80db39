//! The shared conformance suite for [`ArtifactStore`] implementations
//! (docs/reference/artifacts.md#artifact-store).
//!
//! Every check is a public function taking a fresh, empty store. To run the whole suite against
//! an implementation, invoke [`artifact_store_conformance!`](macro@crate::artifact_store_conformance)
//! in a test file with an expression that makes `(store, guard)`: a new empty store and
//! whatever must live as long as it (a temporary directory, or `()`):
//!
//! ```ignore
//! mnemon_tests::artifact_store_conformance!((InMemoryArtifactStore::new(), ()));
//! ```
//!
//! The PostgreSQL store runs the same suite with a fresh database per test; [`tenant_isolation`]
//! runs once per durable backend.

use std::collections::HashSet;

use mnemon_artifacts::{ArtifactError, ArtifactStore};
use mnemon_types::artifact::Timestamp;
use mnemon_types::{Artifact, StorageLocation};
use serde_json::json;
use uuid::Uuid;

/// Generates one `#[test]` per conformance check, each with a fresh store from `$make`.
#[macro_export]
macro_rules! artifact_store_conformance {
    ($make:expr) => {
        $crate::artifact_store_conformance!(@cases $make;
            save_then_get_round_trips_every_field,
            get_of_an_unknown_id_is_none,
            latest_is_the_most_recent_save,
            most_recent_wins_within_one_microsecond,
            most_recent_wins_by_save_order_not_by_created_at,
            sequence_is_monotonic_and_never_reused,
            scopes_are_isolated,
            list_is_in_save_order_and_filters_by_type,
            delete_removes_only_that_record,
            refuses_records_missing_required_attributes,
            refuses_a_duplicate_id,
            odd_text_is_stored_verbatim,
            scopes_name_each_scope_once_in_byte_order,
            concurrent_saves_all_land_with_distinct_sequences
        );
    };
    (@cases $make:expr; $($check:ident),+ $(,)?) => {
        $(
            #[test]
            fn $check() {
                let (store, _guard) = $make;
                $crate::artifact_store_conformance::$check(&store);
            }
        )+
    };
}

fn artifact(scope: &str, key: &str, name: &str) -> Artifact {
    Artifact::new(scope, key, "note", name)
}

fn must_save(store: &dyn ArtifactStore, a: &Artifact) -> u64 {
    match store.save(a) {
        Ok(seq) => seq,
        Err(e) => panic!("saving {} failed: {e}", a.name),
    }
}

fn latest_name(store: &dyn ArtifactStore, scope: &str, key: &str) -> Option<String> {
    match store.latest(scope, key) {
        Ok(found) => found.map(|a| a.name),
        Err(e) => panic!("latest({scope:?}, {key:?}) failed: {e}"),
    }
}

fn must_list(store: &dyn ArtifactStore, scope: &str, t: Option<&str>) -> Vec<String> {
    match store.list(scope, t) {
        Ok(found) => found.into_iter().map(|a| a.name).collect(),
        Err(e) => panic!("list({scope:?}, {t:?}) failed: {e}"),
    }
}

/// Every field comes back as saved, including storage, nested data and the timestamp.
pub fn save_then_get_round_trips_every_field(store: &dyn ArtifactStore) {
    let inline = Artifact::new("chat-1", "plan", "plan", "The plan")
        .with_description("steps to take, ünïcödé")
        .with_data(json!({"steps": ["a", "b"], "n": 1.5, "ok": true, "none": null}));
    let stored = Artifact::new("chat-1", "file", "file", "main.rs")
        .with_storage(StorageLocation::new("write_to_file", "src/main.rs"));
    let null_data =
        Artifact::new("chat-1", "nothing", "note", "explicit null").with_data(json!(null));
    for a in [&inline, &stored, &null_data] {
        must_save(store, a);
        assert_eq!(
            store.get(a.id).ok().flatten().as_ref(),
            Some(a),
            "get({})",
            a.id
        );
    }
}

/// `get` of an id never saved is `Ok(None)`, not an error.
pub fn get_of_an_unknown_id_is_none(store: &dyn ArtifactStore) {
    must_save(store, &artifact("s", "k", "one"));
    assert!(matches!(store.get(Uuid::now_v7()), Ok(None)));
    assert_eq!(latest_name(store, "s", "other"), None);
    assert_eq!(must_list(store, "empty scope", None), Vec::<String>::new());
}

/// Saving a key again replaces it as *the* artifact for that key.
pub fn latest_is_the_most_recent_save(store: &dyn ArtifactStore) {
    for name in ["v1", "v2", "v3"] {
        must_save(store, &artifact("s", "plan", name));
        must_save(store, &artifact("s", "other", name));
        assert_eq!(latest_name(store, "s", "plan").as_deref(), Some(name));
    }
}

/// Saves with identical timestamps, and ids that sort against save order, still have an order.
pub fn most_recent_wins_within_one_microsecond(store: &dyn ArtifactStore) {
    let same_instant = Timestamp::now();
    for i in 0..50u128 {
        let mut a = artifact("s", "plan", &format!("save {i}"));
        a.created_at = same_instant;
        // Ids descend while saves ascend: an implementation ordering by id would fail.
        a.id = Uuid::from_u128(u128::MAX - i);
        must_save(store, &a);
        assert_eq!(
            latest_name(store, "s", "plan"),
            Some(format!("save {i}")),
            "after save {i} in the same microsecond"
        );
    }
}

/// A later save wins even when its `created_at` is earlier (a clock stepped back).
pub fn most_recent_wins_by_save_order_not_by_created_at(store: &dyn ArtifactStore) {
    let mut first = artifact("s", "plan", "saved first, created later");
    first.created_at =
        Timestamp::from_unix_micros(2_000_000_000_000_000).unwrap_or(first.created_at);
    let mut second = artifact("s", "plan", "saved second, created earlier");
    second.created_at =
        Timestamp::from_unix_micros(1_000_000_000_000_000).unwrap_or(second.created_at);
    must_save(store, &first);
    must_save(store, &second);
    assert_eq!(
        latest_name(store, "s", "plan").as_deref(),
        Some("saved second, created earlier")
    );
}

/// Sequence values rise with every save and are not handed out again after a delete.
pub fn sequence_is_monotonic_and_never_reused(store: &dyn ArtifactStore) {
    let mut last = 0;
    let mut ids = Vec::new();
    for i in 0..10 {
        let a = artifact(if i % 2 == 0 { "a" } else { "b" }, "k", &format!("{i}"));
        let seq = must_save(store, &a);
        assert!(seq > last, "sequence {seq} after {last}");
        last = seq;
        ids.push(a.id);
    }
    for id in &ids {
        assert!(matches!(store.delete(*id), Ok(true)));
    }
    let seq = must_save(store, &artifact("a", "k", "after deletes"));
    assert!(
        seq > last,
        "sequence {seq} reused after deleting up to {last}"
    );
}

/// Artifacts of one scope are never visible through another.
pub fn scopes_are_isolated(store: &dyn ArtifactStore) {
    must_save(store, &artifact("chat-1", "plan", "plan of chat 1"));
    must_save(store, &artifact("chat-2", "plan", "plan of chat 2"));
    must_save(store, &artifact("chat-1", "only-in-1", "x"));
    assert_eq!(
        latest_name(store, "chat-1", "plan").as_deref(),
        Some("plan of chat 1")
    );
    assert_eq!(
        latest_name(store, "chat-2", "plan").as_deref(),
        Some("plan of chat 2")
    );
    assert_eq!(latest_name(store, "chat-2", "only-in-1"), None);
    assert_eq!(latest_name(store, "chat-3", "plan"), None);
    assert_eq!(must_list(store, "chat-2", None), ["plan of chat 2"]);
    // Scopes are compared exactly: no prefix, case or pattern matching.
    assert_eq!(latest_name(store, "chat-", "plan"), None);
    assert_eq!(latest_name(store, "CHAT-1", "plan"), None);
    assert_eq!(latest_name(store, "chat-%", "plan"), None);
}

/// `list` returns a scope's records in save order, optionally of one type only.
pub fn list_is_in_save_order_and_filters_by_type(store: &dyn ArtifactStore) {
    let kinds = ["file", "plan", "file", "artifact_list", "file"];
    for (i, t) in kinds.iter().enumerate() {
        let mut a = Artifact::new("s", format!("k{}", i % 2), *t, format!("{i}"));
        // Adversarial ids again: list order must come from the sequence.
        a.id = Uuid::from_u128(1000 - i as u128);
        must_save(store, &a);
    }
    must_save(
        store,
        &Artifact::new("elsewhere", "k0", "file", "other scope"),
    );
    assert_eq!(must_list(store, "s", None), ["0", "1", "2", "3", "4"]);
    assert_eq!(must_list(store, "s", Some("file")), ["0", "2", "4"]);
    assert_eq!(must_list(store, "s", Some("plan")), ["1"]);
    assert_eq!(must_list(store, "s", Some("missing")), Vec::<String>::new());
}

/// `delete` removes one record; the previous save of its key becomes the latest again.
pub fn delete_removes_only_that_record(store: &dyn ArtifactStore) {
    let old = artifact("s", "plan", "old");
    let new = artifact("s", "plan", "new");
    must_save(store, &old);
    must_save(store, &new);
    assert!(matches!(store.delete(new.id), Ok(true)));
    assert!(matches!(store.delete(new.id), Ok(false)));
    assert!(matches!(store.get(new.id), Ok(None)));
    assert_eq!(latest_name(store, "s", "plan").as_deref(), Some("old"));
    assert_eq!(must_list(store, "s", None), ["old"]);
}

/// Empty `key`, `type` or `name` is refused, listing every missing attribute; nothing is saved.
pub fn refuses_records_missing_required_attributes(store: &dyn ArtifactStore) {
    let bad = Artifact::new("s", "", "", " ");
    match store.save(&bad) {
        Err(ArtifactError::MissingAttributes { missing }) => {
            assert_eq!(missing, ["key", "type", "name"]);
        }
        other => panic!("expected MissingAttributes, got {other:?}"),
    }
    assert!(matches!(store.get(bad.id), Ok(None)));
    assert_eq!(must_list(store, "s", None), Vec::<String>::new());
}

/// Records are immutable: saving an id twice fails and keeps the first.
pub fn refuses_a_duplicate_id(store: &dyn ArtifactStore) {
    let a = artifact("s", "k", "first");
    must_save(store, &a);
    let mut again = a.clone();
    again.name = "second".into();
    match store.save(&again) {
        Err(ArtifactError::DuplicateId { id }) => assert_eq!(id, a.id),
        other => panic!("expected DuplicateId, got {other:?}"),
    }
    assert_eq!(
        store.get(a.id).ok().flatten().map(|a| a.name).as_deref(),
        Some("first")
    );
    assert_eq!(must_list(store, "s", None), ["first"]);
}

/// Quotes, SQL metacharacters, Unicode and control characters are plain data.
pub fn odd_text_is_stored_verbatim(store: &dyn ArtifactStore) {
    let scope = "scope'; DROP TABLE artifact_records; --";
    let key = "ключ \"{plan}\" %_ \u{0001}\n";
    let a = Artifact::new(scope, key, "tÿpe", "名前").with_data(json!("line1\nline2\u{0000}"));
    must_save(store, &a);
    assert_eq!(store.latest(scope, key).ok().flatten().as_ref(), Some(&a));
    assert_eq!(must_list(store, scope, Some("tÿpe")), ["名前"]);
}

fn must_scopes(store: &dyn ArtifactStore) -> Vec<String> {
    match store.scopes() {
        Ok(found) => found,
        Err(e) => panic!("scopes() failed: {e}"),
    }
}

/// `scopes` names every scope holding a record, once, in ascending byte order, and forgets a
/// scope once its last record is deleted; with `list` per scope it reaches every record.
pub fn scopes_name_each_scope_once_in_byte_order(store: &dyn ArtifactStore) {
    assert_eq!(must_scopes(store), Vec::<String>::new());
    let scopes = ["b", "a", "é", "B", "a b", "\u{0001}ctl", "", "ab", "a"];
    let mut saved = Vec::new();
    for (i, scope) in scopes.iter().enumerate() {
        let a = artifact(scope, &format!("k{}", i % 2), &format!("n{i}"));
        must_save(store, &a);
        saved.push(a);
    }
    let mut expected: Vec<String> = scopes.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    expected.dedup();
    assert_eq!(must_scopes(store), expected);
    let listed: usize = must_scopes(store)
        .iter()
        .map(|scope| must_list(store, scope, None).len())
        .sum();
    assert_eq!(listed, saved.len());

    // Deleting one of two records of "a" keeps it; deleting "b"'s only record drops it.
    for a in saved.iter().filter(|a| a.scope == "b" || a.name == "n1") {
        assert!(matches!(store.delete(a.id), Ok(true)), "delete {}", a.name);
    }
    expected.retain(|s| s != "b");
    assert_eq!(must_scopes(store), expected);
}

/// Saves from several threads all land, each with its own sequence value.
pub fn concurrent_saves_all_land_with_distinct_sequences(store: &dyn ArtifactStore) {
    let sequences: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    (0..25)
                        .map(|i| must_save(store, &artifact("s", "k", &format!("{t}-{i}"))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    assert_eq!(sequences.len(), 100);
    assert_eq!(sequences.iter().collect::<HashSet<_>>().len(), 100);
    let listed = must_list(store, "s", None);
    assert_eq!(listed.len(), 100);
    // The latest is the one with the highest sequence, whichever thread saved it.
    let latest = latest_name(store, "s", "k");
    assert_eq!(latest.as_ref(), listed.last());
}

/// Tenants (issue 13, item 3): `open(namespace)` opens a handle on one shared database for that
/// namespace. Two namespaces save records with the same ids, scopes, keys and types, and no
/// call through one handle (save, save_with_content, get, latest, list with and without a type,
/// delete) reads or removes the other's; a second handle on a namespace sees the first's
/// records, so the two are one database, not two.
pub fn tenant_isolation(open: &dyn Fn(&str) -> Box<dyn ArtifactStore>) {
    let a = open("tenant-a");
    let b = open("tenant-b");
    let in_a = artifact("s", "plan", "a-plan");
    let mut in_b = in_a.clone();
    in_b.name = "b-plan".into();
    must_save(&*a, &in_a);
    // The same id in another namespace is another record, not a duplicate.
    must_save(&*b, &in_b);
    let only_a = artifact("s", "notes", "a-notes");
    must_save(&*a, &only_a);
    let mut with_content = artifact("s", "plan", "b-plan-2");
    with_content.storage = Some(StorageLocation {
        backend: "write_to_file".into(),
        id: "plan.json".into(),
    });
    let mut wrote = false;
    let saved = b.save_with_content(&with_content, &mut || {
        wrote = true;
        Ok(())
    });
    assert!(saved.is_ok() && wrote, "{saved:?}");

    assert_eq!(
        a.get(in_a.id).ok().flatten().map(|r| r.name).as_deref(),
        Some("a-plan")
    );
    assert_eq!(
        b.get(in_a.id).ok().flatten().map(|r| r.name).as_deref(),
        Some("b-plan")
    );
    assert_eq!(latest_name(&*a, "s", "plan").as_deref(), Some("a-plan"));
    assert_eq!(latest_name(&*b, "s", "plan").as_deref(), Some("b-plan-2"));
    assert_eq!(must_list(&*a, "s", None), ["a-plan", "a-notes"]);
    assert_eq!(must_list(&*a, "s", Some("note")), ["a-plan", "a-notes"]);
    assert_eq!(must_list(&*b, "s", None), ["b-plan", "b-plan-2"]);
    assert_eq!(must_list(&*b, "s", Some("note")), ["b-plan", "b-plan-2"]);
    // Scopes: each handle names its own namespace's only.
    let only_b = artifact("b-only", "k", "b-only");
    must_save(&*b, &only_b);
    assert_eq!(must_scopes(&*a), ["s"]);
    assert_eq!(must_scopes(&*b), ["b-only", "s"]);
    assert!(matches!(b.delete(only_b.id), Ok(true)));
    assert_eq!(must_scopes(&*b), ["s"]);

    // Another namespace's record is absent everywhere.
    assert!(matches!(b.get(only_a.id), Ok(None)));
    assert_eq!(latest_name(&*b, "s", "notes"), None);
    assert!(matches!(b.delete(only_a.id), Ok(false)));
    assert!(matches!(a.get(only_a.id), Ok(Some(_))));
    assert!(matches!(a.get(with_content.id), Ok(None)));
    // A duplicate id is still refused within one namespace.
    assert!(matches!(
        a.save(&in_a),
        Err(ArtifactError::DuplicateId { .. })
    ));

    // Deleting in one namespace leaves the other's record of that id alone.
    assert!(matches!(b.delete(in_a.id), Ok(true)));
    assert!(matches!(b.get(in_a.id), Ok(None)));
    assert_eq!(
        a.get(in_a.id).ok().flatten().map(|r| r.name).as_deref(),
        Some("a-plan")
    );

    // A second handle on namespace a is the same tenant.
    let a2 = open("tenant-a");
    assert_eq!(must_list(&*a2, "s", None), ["a-plan", "a-notes"]);
    assert!(matches!(a2.delete(only_a.id), Ok(true)));
    assert!(matches!(a.get(only_a.id), Ok(None)));
}
