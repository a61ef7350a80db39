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
use std::sync::Arc;
use std::time::Duration;

use mnemon_artifacts::{
    ArtifactError, ArtifactStore, ArtifactSweep, BackendRegistry, Clock, Expiry, Filter,
    ListedArtifact, ManualClock, PageQuery, StorageBackend, WRITE_TO_FILE, WriteToFile,
};
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
            concurrent_saves_all_land_with_distinct_sequences,
            filters_select_before_the_limit,
            bad_filters_are_refused,
            the_widest_filters_are_answered,
            forget_removes_a_scope_prefix_with_its_content,
            pages_walk_the_listing_without_content
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

    // Pages: a handle lists its own namespace's records, and another namespace's record
    // gives a cursor no place.
    let listed = page_names(
        &*a,
        PageQuery {
            scope: Some("s"),
            limit: 10,
            ..PageQuery::default()
        },
    );
    assert_eq!(
        listed,
        Some(vec!["a-plan".to_owned(), "a-notes".to_owned()])
    );
    let after_theirs = page_names(
        &*b,
        PageQuery {
            after: Some(only_a.id),
            limit: 10,
            ..PageQuery::default()
        },
    );
    assert_eq!(after_theirs, None, "a cursor of another namespace's record");

    // A second handle on namespace a is the same tenant.
    let a2 = open("tenant-a");
    assert_eq!(must_list(&*a2, "s", None), ["a-plan", "a-notes"]);
    assert!(matches!(a2.delete(only_a.id), Ok(true)));
    assert!(matches!(a.get(only_a.id), Ok(None)));
}

fn filter(json: serde_json::Value) -> Filter {
    match Filter::parse(&json) {
        Ok(f) => f,
        Err(e) => panic!("bad test filter {json}: {e}"),
    }
}

fn names(found: Result<Vec<Artifact>, ArtifactError>) -> Vec<String> {
    match found {
        Ok(found) => found.into_iter().map(|a| a.name).collect(),
        Err(e) => panic!("listing failed: {e}"),
    }
}

fn count(store: &dyn ArtifactStore, scope: Option<&str>, f: Option<&Filter>) -> u64 {
    match store.count_where(scope, f) {
        Ok(n) => n,
        Err(e) => panic!("count_where failed: {e}"),
    }
}

/// Issue 14, item 2: `list_where` selects by the record's document (key, type, name, scope,
/// storage, inline data, times), within one scope or across all, in save order, and the filter
/// applies before the limit: 30 earlier non-matching records do not crowd out a top 5.
pub fn filters_select_before_the_limit(store: &dyn ArtifactStore) {
    for i in 0..30 {
        must_save(
            store,
            &Artifact::new("chat-1", format!("k{i}"), "note", format!("n{i}"))
                .with_data(json!({"lang": "fr", "score": i})),
        );
    }
    for i in 0..8 {
        must_save(
            store,
            &Artifact::new("chat-2", "plan", "plan", format!("p{i}"))
                .with_data(json!({"lang": "en", "tags": ["x", "y"], "score": 100 + i})),
        );
    }
    must_save(
        store,
        &Artifact::new("chat-1", "file", "file", "f")
            .with_storage(StorageLocation::new("write_to_file", "out/f.txt")),
    );
    let english = filter(json!({"eq": {"path": "data.lang", "value": "en"}}));
    assert_eq!(
        names(store.list_where(None, Some(&english), Some(5))),
        ["p0", "p1", "p2", "p3", "p4"]
    );
    assert_eq!(count(store, None, Some(&english)), 8);
    assert_eq!(count(store, Some("chat-1"), Some(&english)), 0);
    assert_eq!(count(store, Some("chat-1"), None), 31);
    assert_eq!(count(store, None, None), 39);
    let plans = filter(json!({"and": [
        {"eq": {"path": "type", "value": "plan"}},
        {"contains": {"path": "data.tags", "value": "y"}},
        {"gte": {"path": "data.score", "value": 106}}
    ]}));
    assert_eq!(
        names(store.list_where(Some("chat-2"), Some(&plans), None)),
        ["p6", "p7"]
    );
    let by_key = filter(json!({"in": {"path": "key", "values": ["k3", "k29"]}}));
    assert_eq!(
        names(store.list_where(None, Some(&by_key), None)),
        ["n3", "n29"]
    );
    let stored = filter(json!({"eq": {"path": "storage", "value": "write_to_file"}}));
    assert_eq!(names(store.list_where(None, Some(&stored), None)), ["f"]);
    let in_files = filter(json!({"contains": {"path": "storage_id", "value": "out/"}}));
    assert_eq!(count(store, None, Some(&in_files)), 1);
    let no_data = filter(json!({"not": {"exists": "data"}}));
    assert_eq!(count(store, None, Some(&no_data)), 1);
    let scope = filter(json!({"eq": {"path": "scope", "value": "chat-2"}}));
    assert_eq!(count(store, None, Some(&scope)), 8);
    let recent = filter(json!({"gte": {"path": "created_at", "value": "2020-01-01"}}));
    assert_eq!(count(store, None, Some(&recent)), 39);
    let expiring = filter(json!({"exists": "expires_at"}));
    assert_eq!(count(store, None, Some(&expiring)), 0);
    assert_eq!(
        names(store.list_where(None, None, Some(0))),
        Vec::<String>::new()
    );
    // A backslash then `u0000` in a string is no NUL: PostgreSQL used to take its JSON text
    // (`\\u0000`) for one and keep no document, so no filter saw the record.
    must_save(
        store,
        &Artifact::new("chat-3", "code", "note", "escaped").with_data(json!("x\\u0000")),
    );
    let escaped = filter(json!({"eq": {"path": "name", "value": "escaped"}}));
    assert_eq!(
        names(store.list_where(None, Some(&escaped), None)),
        ["escaped"]
    );
}

/// Issue 14, item 2: a path starting with a field artifacts do not have is refused with an
/// error that names the place and the field, on every store (and the same for both reads).
pub fn bad_filters_are_refused(store: &dyn ArtifactStore) {
    must_save(store, &artifact("s", "k", "n"));
    let typo = filter(json!({"and": [{"exists": "data"}, {"eq": {"path": "nmae", "value": "n"}}]}));
    for err in [
        store.list_where(None, Some(&typo), None).map(|_| ()),
        store.count_where(Some("s"), Some(&typo)).map(|_| ()),
    ] {
        let Err(err) = err else {
            panic!("an unknown field must be refused")
        };
        assert!(matches!(err, ArtifactError::Filter(_)), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("and[1].eq.path") && text.contains("\"nmae\""),
            "{text}"
        );
        assert!(err.is_caller_error());
    }
}

/// The widest filters the parser takes are answered by every store: an `or` of
/// `MAX_NODES - 1` operands, and an `in` of `MAX_LIST` values inside an `or`. SQLite refused
/// both ("Expression tree is too large (maximum depth 1000)"): its parser nests a chain of
/// `OR`s one level per operand.
pub fn the_widest_filters_are_answered(store: &dyn ArtifactStore) {
    must_save(store, &artifact("s", "k", "n-hit"));
    must_save(store, &artifact("s", "k", "other"));
    let mut operands: Vec<serde_json::Value> = (0..mnemon_filter::filter::MAX_NODES - 2)
        .map(|i| json!({"eq": {"path": "name", "value": format!("n-{i}")}}))
        .collect();
    operands.push(json!({"eq": {"path": "name", "value": "n-hit"}}));
    let wide = filter(json!({ "or": operands }));
    match store.count_where(Some("s"), Some(&wide)) {
        Ok(n) => assert_eq!(n, 1),
        Err(e) => panic!(
            "an or of {} operands: {e}",
            mnemon_filter::filter::MAX_NODES - 1
        ),
    }
    let mut values: Vec<serde_json::Value> = (0..mnemon_filter::filter::MAX_LIST - 1)
        .map(|i| json!(format!("v-{i}")))
        .collect();
    values.push(json!("other"));
    let mut operands = vec![json!({"in": {"path": "name", "values": values}})];
    operands.extend((0..700).map(|i| json!({"eq": {"path": "key", "value": format!("k-{i}")}})));
    let listed = filter(json!({ "or": operands }));
    match store.count_where(Some("s"), Some(&listed)) {
        Ok(n) => assert_eq!(n, 1),
        Err(e) => panic!(
            "an in of {} values in an or: {e}",
            mnemon_filter::filter::MAX_LIST
        ),
    }
}

/// A file-backed content root for sweep checks, with the registry that names it.
struct Files {
    dir: tempfile::TempDir,
    backend: WriteToFile,
    registry: BackendRegistry,
}

impl Files {
    fn new() -> Files {
        let dir = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(e) => panic!("tempdir: {e}"),
        };
        Files {
            backend: WriteToFile::new(dir.path()),
            registry: BackendRegistry::with_defaults(dir.path()),
            dir,
        }
    }

    /// Files in a folder of one namespace's own: the registry is
    /// [private to the namespace](BackendRegistry::private_to_namespace).
    fn private() -> Files {
        let files = Files::new();
        Files {
            registry: files.registry.private_to_namespace(),
            ..files
        }
    }

    /// Saves `artifact` with its content in a file named `id`.
    fn save(&self, store: &dyn ArtifactStore, artifact: &Artifact, expiry: Expiry) {
        let id = match &artifact.storage {
            Some(location) => location.id.clone(),
            None => panic!("{} has no storage", artifact.name),
        };
        let saved = store.save_expiring(artifact, expiry, &mut || {
            self.backend.write(&id, &json!(artifact.name))
        });
        if let Err(e) = saved {
            panic!("saving {} failed: {e}", artifact.name);
        }
    }

    fn exists(&self, id: &str) -> bool {
        self.dir.path().join(id).exists()
    }
}

fn in_file(scope: &str, name: &str, file: &str) -> Artifact {
    Artifact::new(scope, "k", "file", name).with_storage(StorageLocation::new(WRITE_TO_FILE, file))
}

fn sweep(result: Result<ArtifactSweep, ArtifactError>) -> ArtifactSweep {
    match result {
        Ok(sweep) => sweep,
        Err(e) => panic!("sweep failed: {e}"),
    }
}

/// Issue 14, item 5: `forget(prefix)` removes every record whose scope starts with the prefix
/// (byte-wise: `user-1/` is not a prefix of `user-10/…`) and their files, keeps a file another
/// record still points at until that one goes too, and leaves nothing readable; `""` removes
/// the rest.
pub fn forget_removes_a_scope_prefix_with_its_content(store: &dyn ArtifactStore) {
    let files = Files::new();
    files.save(store, &in_file("user-1/s1", "a", "a.json"), Expiry::Default);
    files.save(
        store,
        &in_file("user-1/s2", "b", "shared.json"),
        Expiry::Default,
    );
    files.save(
        store,
        &in_file("user-10/s1", "c", "c.json"),
        Expiry::Default,
    );
    files.save(
        store,
        &in_file("user-2/s1", "d", "shared.json"),
        Expiry::Default,
    );
    must_save(store, &artifact("user-1/s1", "note", "inline"));
    let swept = sweep(store.forget("user-1/", &files.registry));
    assert_eq!(
        swept,
        ArtifactSweep {
            records: 3,
            content_removed: 1,
            content_shared: 1,
            ..ArtifactSweep::default()
        }
    );
    assert!(!files.exists("a.json") && files.exists("shared.json") && files.exists("c.json"));
    assert_eq!(must_scopes(store), ["user-10/s1", "user-2/s1"]);
    assert!(must_list(store, "user-1/s1", None).is_empty());
    assert_eq!(latest_name(store, "user-1/s1", "k"), None);
    assert_eq!(count(store, None, None), 2);
    assert_eq!(
        sweep(store.forget("nobody", &files.registry)),
        ArtifactSweep::default()
    );
    let swept = sweep(store.forget("", &files.registry));
    assert_eq!((swept.records, swept.content_removed), (2, 2));
    assert!(
        swept.content_errors.is_empty(),
        "{:?}",
        swept.content_errors
    );
    assert!(!files.exists("shared.json") && !files.exists("c.json"));
    assert!(must_scopes(store).is_empty());
    // Content whose backend is not registered is reported, not an error of the call.
    files.save(store, &in_file("s", "e", "e.json"), Expiry::Default);
    let swept = sweep(store.forget("s", &BackendRegistry::new()));
    assert_eq!(swept.records, 1);
    assert_eq!(swept.content_errors.len(), 1, "{swept:?}");
    assert!(swept.content_errors[0].contains("e.json"), "{swept:?}");
}

/// Opens a fresh, empty store reading a clock, with a default time-to-live.
pub type OpenWithClock<'a> =
    dyn Fn(Arc<dyn Clock>, Option<Duration>) -> Box<dyn ArtifactStore> + 'a;

/// Opens a handle for a namespace on one shared database, reading a clock.
pub type OpenInNamespace<'a> = dyn Fn(&str, Arc<dyn Clock>) -> Box<dyn ArtifactStore> + 'a;

/// The instant the expiry checks start at (milliseconds since the Unix epoch).
const T0: i64 = 1_700_000_000_000;

/// Issue 14, item 4: expiry at the boundary instant, through an injected clock. `open(clock,
/// default_ttl)` opens a fresh, empty store reading `clock`. A record expiring at `t` is
/// visible to every read at `t - 1` and to none at `t` (`get`, `latest`, which falls back to
/// the newest live record of the key, `list`, `list_where`, `count_where`, `scopes`,
/// `expires_at`); the default applies to plain saves and `Expiry::Never` overrides it; `gc`
/// removes exactly the expired records and their files, keeping a file a live record shares.
pub fn expiry(open: &OpenWithClock<'_>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(clock.clone(), Some(Duration::from_secs(60)));
    let files = Files::new();
    let old = artifact("s", "plan", "old");
    let new = artifact("s", "plan", "new");
    let other = artifact("other", "k", "other");
    must_save(&*store, &old);
    let Ok(_) = store.save_expiring(&new, Expiry::After(Duration::from_millis(10)), &mut || {
        Ok(())
    }) else {
        panic!("save_expiring failed")
    };
    let Ok(_) = store.save_expiring(&other, Expiry::At(T0 + 10), &mut || Ok(())) else {
        panic!("save_expiring failed")
    };
    let forever = artifact("s", "keep", "forever");
    let Ok(_) = store.save_expiring(&forever, Expiry::Never, &mut || Ok(())) else {
        panic!("save_expiring failed")
    };
    files.save(
        &*store,
        &in_file("s", "f1", "lone.json"),
        Expiry::At(T0 + 10),
    );
    files.save(
        &*store,
        &in_file("s", "f2", "shared.json"),
        Expiry::At(T0 + 10),
    );
    files.save(&*store, &in_file("s", "f3", "shared.json"), Expiry::Never);
    assert!(matches!(store.expires_at(old.id), Ok(Some(Some(t))) if t == T0 + 60_000));
    assert!(matches!(store.expires_at(new.id), Ok(Some(Some(t))) if t == T0 + 10));
    assert!(matches!(store.expires_at(forever.id), Ok(Some(None))));
    assert!(matches!(store.expires_at(Uuid::now_v7()), Ok(None)));

    clock.set(T0 + 9);
    assert!(matches!(store.get(new.id), Ok(Some(_))));
    assert_eq!(latest_name(&*store, "s", "plan").as_deref(), Some("new"));
    assert_eq!(
        must_list(&*store, "s", Some("note")),
        ["old", "new", "forever"]
    );
    assert_eq!(must_scopes(&*store), ["other", "s"]);
    assert_eq!(count(&*store, None, None), 7);

    clock.set(T0 + 10);
    assert!(
        matches!(store.get(new.id), Ok(None)),
        "at the boundary instant"
    );
    assert!(matches!(store.get(other.id), Ok(None)));
    assert!(matches!(store.expires_at(new.id), Ok(None)));
    assert_eq!(latest_name(&*store, "s", "plan").as_deref(), Some("old"));
    assert_eq!(latest_name(&*store, "other", "k"), None);
    assert_eq!(must_list(&*store, "s", None), ["old", "forever", "f3"]);
    assert_eq!(must_list(&*store, "s", Some("note")), ["old", "forever"]);
    assert_eq!(
        must_scopes(&*store),
        ["s"],
        "a scope of expired records is gone"
    );
    assert_eq!(
        names(store.list_where(None, None, None)),
        ["old", "forever", "f3"]
    );
    assert_eq!(count(&*store, Some("other"), None), 0);
    // An expired record not yet swept still holds its place as a page's cursor.
    let after_expired = PageQuery {
        scope: Some("s"),
        after: Some(new.id),
        limit: 10,
        ..PageQuery::default()
    };
    assert_eq!(
        page_names(&*store, after_expired),
        Some(vec!["forever".to_owned(), "f3".to_owned()])
    );
    let expiring = filter(json!({"lt": {"path": "expires_at", "value": T0 + 100_000}}));
    assert_eq!(
        names(store.list_where(Some("s"), Some(&expiring), None)),
        ["old"]
    );
    // An expired record is absent to delete as well.
    assert!(matches!(store.delete(other.id), Ok(false)));

    // The sweep: new, f1, f2 (other was deleted above); lone.json goes, shared.json stays.
    let swept = sweep(store.gc(&files.registry));
    assert_eq!(
        swept,
        ArtifactSweep {
            records: 3,
            content_removed: 1,
            content_shared: 1,
            ..ArtifactSweep::default()
        }
    );
    assert!(!files.exists("lone.json") && files.exists("shared.json"));
    assert_eq!(sweep(store.gc(&files.registry)), ArtifactSweep::default());
    assert_eq!(
        page_names(&*store, after_expired),
        None,
        "a swept record is no cursor"
    );
    clock.set(T0);
    assert!(
        matches!(store.get(new.id), Ok(None)),
        "gc removed it for good"
    );
    assert_eq!(must_list(&*store, "s", None), ["old", "forever", "f3"]);
}

/// Tenants (issue 14): `open(namespace, clock)` opens a handle on one shared database. A
/// filter, a sweep and a forget through one namespace never see or remove another's records,
/// even with the same ids, scopes and keys, and never remove a file another namespace's
/// record points at.
pub fn tenant_isolation_of_sweeps(open: &OpenInNamespace<'_>) {
    let clock = Arc::new(ManualClock::new(T0));
    let a = open("tenant-a", clock.clone());
    let b = open("tenant-b", clock.clone());
    let files = Files::new();
    let short = artifact("s", "k", "short");
    let kept = artifact("s", "k", "kept");
    for store in [&a, &b] {
        let Ok(_) = store.save_expiring(&short, Expiry::At(T0 + 5), &mut || Ok(())) else {
            panic!("save_expiring failed")
        };
        must_save(&**store, &kept);
        files.save(
            &**store,
            &in_file("s", "file", "both.json"),
            Expiry::Default,
        );
    }
    let all = filter(json!({"eq": {"path": "scope", "value": "s"}}));
    assert_eq!(count(&*a, None, Some(&all)), 3);
    clock.set(T0 + 5);
    assert_eq!(sweep(b.gc(&files.registry)).records, 1);
    assert_eq!(count(&*a, None, None), 2);
    let swept = sweep(b.forget("", &files.registry));
    assert_eq!((swept.records, swept.content_shared), (2, 1), "{swept:?}");
    assert!(
        files.exists("both.json"),
        "namespace a's record still points at it"
    );
    assert_eq!(count(&*b, None, None), 0);
    assert_eq!(
        names(a.list_where(Some("s"), Some(&all), None)),
        ["kept", "file"]
    );
    assert_eq!(sweep(a.gc(&files.registry)).records, 1);
    let swept = sweep(a.forget("s", &files.registry));
    assert_eq!((swept.records, swept.content_removed), (2, 1));
    assert!(!files.exists("both.json"));

    // Registries private to their namespace (each namespace's files in its own folder, as
    // `mnemon serve` keeps them): the same storage id names two files, and forgetting one
    // namespace removes its file, never the other's.
    let (files_a, files_b) = (Files::private(), Files::private());
    files_a.save(&*a, &in_file("p", "a's", "same.json"), Expiry::Default);
    files_b.save(&*b, &in_file("p", "b's", "same.json"), Expiry::Default);
    let swept = sweep(b.forget("p", &files_b.registry));
    assert_eq!(
        (swept.records, swept.content_removed, swept.content_shared),
        (1, 1, 0),
        "{swept:?}"
    );
    assert!(!files_b.exists("same.json"), "no file of b is left");
    assert!(files_a.exists("same.json"), "a's own file stays");
    assert_eq!(names(a.list_where(Some("p"), None, None)), ["a's"]);
}

/// The names of one `list_page` page, `None` when its cursor names no record.
fn page_names(store: &dyn ArtifactStore, query: PageQuery<'_>) -> Option<Vec<String>> {
    match store.list_page(&query) {
        Ok(page) => page.map(|page| page.into_iter().map(|l| l.artifact.name).collect()),
        Err(e) => panic!("list_page({query:?}) failed: {e}"),
    }
}

/// Every record `query` selects, walking `list_page` from the start `limit` at a time.
fn walk_pages(
    store: &dyn ArtifactStore,
    query: PageQuery<'_>,
    limit: usize,
) -> Vec<ListedArtifact> {
    let mut out: Vec<ListedArtifact> = Vec::new();
    loop {
        let page = match store.list_page(&PageQuery {
            after: out.last().map(|l| l.artifact.id),
            limit,
            ..query
        }) {
            Ok(Some(page)) => page,
            Ok(None) => panic!("the cursor of a record just listed lost its place"),
            Err(e) => panic!("list_page({query:?}) failed: {e}"),
        };
        assert!(
            page.len() <= limit,
            "{} records in a page of {limit}",
            page.len()
        );
        let done = page.len() < limit;
        out.extend(page);
        if done {
            return out;
        }
    }
}

/// `list_page` walks exactly what `list` and `list_where` return (one scope or all, by type,
/// by filter), in save order, a page at a time, each record without its inline content and
/// with its expiry. A cursor whose record was deleted, or was never stored, is `Ok(None)`; a
/// bad filter is refused as `list_where` refuses it.
pub fn pages_walk_the_listing_without_content(store: &dyn ArtifactStore) {
    let mut saved = Vec::new();
    for i in 0..23 {
        let scope = if i % 3 == 0 { "other" } else { "s" };
        let artifact_type = if i % 2 == 0 { "note" } else { "plan" };
        let a = Artifact::new(scope, format!("k{i}"), artifact_type, format!("n{i}"))
            .with_data(json!({"i": i, "text": "x".repeat(100)}));
        must_save(store, &a);
        saved.push(a);
    }
    let late = filter(json!({"gte": {"path": "data.i", "value": 10}}));
    let cases: [(PageQuery<'_>, Vec<String>); 4] = [
        (
            PageQuery {
                scope: Some("s"),
                ..PageQuery::default()
            },
            must_list(store, "s", None),
        ),
        (
            PageQuery {
                scope: Some("s"),
                artifact_type: Some("note"),
                ..PageQuery::default()
            },
            must_list(store, "s", Some("note")),
        ),
        (
            PageQuery {
                filter: Some(&late),
                ..PageQuery::default()
            },
            names(store.list_where(None, Some(&late), None)),
        ),
        (
            PageQuery {
                scope: Some("other"),
                artifact_type: Some("plan"),
                filter: Some(&late),
                ..PageQuery::default()
            },
            names(store.list_where(Some("other"), Some(&late), None))
                .into_iter()
                .filter(|name| {
                    saved
                        .iter()
                        .any(|a| &a.name == name && a.artifact_type == "plan")
                })
                .collect(),
        ),
    ];
    for (query, expected) in &cases {
        assert!(!expected.is_empty(), "{query:?} selects nothing");
        for limit in [1, 4, 100] {
            let walked = walk_pages(store, *query, limit);
            let walked_names: Vec<String> =
                walked.iter().map(|l| l.artifact.name.clone()).collect();
            assert_eq!(&walked_names, expected, "{query:?} by {limit}");
            for listed in &walked {
                let Some(original) = saved.iter().find(|a| a.id == listed.artifact.id) else {
                    panic!("{} was never saved", listed.artifact.id);
                };
                let without_data = Artifact {
                    data: None,
                    ..original.clone()
                };
                assert_eq!(listed.artifact, without_data, "listed without content");
                assert_eq!(listed.expires_at, None);
            }
        }
    }
    // A cursor whose record is gone, or never was, has no place.
    let gone = &saved[4];
    assert!(matches!(store.delete(gone.id), Ok(true)));
    for after in [gone.id, Uuid::now_v7()] {
        let query = PageQuery {
            scope: Some("s"),
            after: Some(after),
            limit: 10,
            ..PageQuery::default()
        };
        assert_eq!(page_names(store, query), None, "after {after}");
    }
    // A record of another scope still marks a place in save order.
    let query = PageQuery {
        scope: Some("s"),
        after: Some(saved[18].id),
        limit: 10,
        ..PageQuery::default()
    };
    assert_eq!(
        page_names(store, query),
        Some(vec!["n19".to_owned(), "n20".to_owned(), "n22".to_owned()])
    );
    // A bad filter is refused, before a cursor with no place is looked at.
    let bad = filter(json!({"eq": {"path": "nope", "value": 1}}));
    for after in [None, Some(Uuid::now_v7())] {
        assert!(
            matches!(
                store.list_page(&PageQuery {
                    filter: Some(&bad),
                    after,
                    limit: 10,
                    ..PageQuery::default()
                }),
                Err(ArtifactError::Filter(_))
            ),
            "a filter on a field the document lacks, after {after:?}"
        );
    }
}
