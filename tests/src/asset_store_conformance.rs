//! The conformance suite every [`AssetStore`] runs (docs/reference/assets.md#asset-store).
//!
//! Call [`run`] with a factory that makes a fresh, empty store, and [`concurrent_mixed`] with a
//! shared one. A durable store must be opened with [`point_codec`] registered, so that the
//! object checks can round-trip [`Point`] through it.

// A test suite: a failed expectation is a panic with a message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::missing_panics_doc)]

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mnemon_store::{
    AssetStore, Clock, CodecError, Expiry, Filter, MAX_NESTING, ManualClock, ObjectCodec,
    ResolveError, StoreError,
};
use mnemon_types::{Asset, AssetObject, AssetRef, Bytes, Map, Object, PathSegment, Value, meta};
use serde_json::json;

/// What sets stores apart, as far as the suite is concerned.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// The store holds objects of any type (in memory); otherwise only types with a codec
    /// (durable stores), and [`Unencodable`] must be rejected.
    pub objects_without_codec: bool,
}

/// A test object with a codec ([`point_codec`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// x
    pub x: i32,
    /// y
    pub y: i32,
}

impl AssetObject for Point {
    fn type_name(&self) -> &str {
        "conformance::Point"
    }
    fn to_json(&self) -> Option<serde_json::Value> {
        Some(json!([self.x, self.y]))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A test object that no codec handles.
#[derive(Debug)]
pub struct Unencodable;

impl AssetObject for Unencodable {
    fn type_name(&self) -> &str {
        "conformance::Unencodable"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

struct PointCodec;

impl ObjectCodec for PointCodec {
    fn type_name(&self) -> &str {
        "conformance::Point"
    }
    fn encode(&self, object: &Object) -> Result<Vec<u8>, CodecError> {
        let p = object.downcast_ref::<Point>().ok_or("not a Point")?;
        let mut out = p.x.to_le_bytes().to_vec();
        out.extend_from_slice(&p.y.to_le_bytes());
        Ok(out)
    }
    fn decode(&self, data: &[u8]) -> Result<Object, CodecError> {
        let (x, y) = data.split_at_checked(4).ok_or("too short")?;
        Ok(Object::new(Point {
            x: i32::from_le_bytes(x.try_into()?),
            y: i32::from_le_bytes(y.try_into()?),
        }))
    }
}

/// The codec for [`Point`], to register in durable stores under test.
pub fn point_codec() -> impl ObjectCodec {
    PointCodec
}

/// Runs every check, each on a fresh store from `make`.
pub fn run(make: &dyn Fn() -> Box<dyn AssetStore>, caps: Capabilities) {
    put_get_round_trips_every_json_shape(&*make());
    put_replaces_the_whole_asset(&*make());
    unknown_ids_are_absent_not_errors(&*make());
    delete_removes(&*make());
    list_ids_is_sorted_and_filters_by_type(&*make());
    meta_matches_the_data_model(&*make());
    resolve_walks_from_the_root(&*make());
    resolve_errors_are_typed(&*make());
    batch_is_all_or_nothing(&*make());
    empty_id_is_rejected_and_changes_nothing(&*make());
    over_deep_assets_are_rejected_up_front(&*make());
    marker_like_json_comes_back_unchanged(&*make());
    bytes_round_trip_everywhere(&*make());
    odd_ids_round_trip(&*make());
    objects(&*make(), caps);
    filters_select_before_the_limit(&*make());
    forget_removes_an_id_prefix(&*make());
}

fn asset(json: serde_json::Value) -> Asset {
    match Asset::from_json(json) {
        Ok(a) => a,
        Err(e) => panic!("bad test asset: {e}"),
    }
}

fn ok<T>(r: Result<T, StoreError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("store call failed: {e}"),
    }
}

fn r(url: &str) -> AssetRef {
    match url.parse() {
        Ok(r) => r,
        Err(e) => panic!("bad test URL {url}: {e}"),
    }
}

/// Compares assets including key order, which `PartialEq` on maps ignores.
fn assert_same(got: &Asset, want: &Asset) {
    assert_eq!(got, want);
    assert_eq!(
        serde_json::to_string(got).ok(),
        serde_json::to_string(want).ok(),
        "key order must survive"
    );
}

fn put_get_round_trips_every_json_shape(store: &dyn AssetStore) {
    let a = asset(json!({
        "asset_type": "table",
        "asset_id": "a1",
        "asset_name": "rows",
        "description": "a table of rows",
        "content_type": "<class 'dict'>",
        "content": {
            "z": 1, "a": [1.5, -0.0, 1e300, u64::MAX, i64::MIN, null, true, false, "x"],
            "nested": {"b": {"c": [[], {}, [{}]]}},
            "unicode": "ünï\u{0}côdé \u{1F600}",
            "": "empty key",
        },
        "zeta": {"extra": [1, 2]},
        "alpha": null,
    }));
    ok(store.put(&a));
    let got = ok(store.get("a1")).expect("stored asset is found");
    assert_same(&got, &a);
    // Scalars and odd content at the root.
    for (i, content) in [json!(null), json!("text"), json!([]), json!(42)]
        .into_iter()
        .enumerate()
    {
        let a = asset(json!({"asset_id": format!("s{i}"), "content": content}));
        ok(store.put(&a));
        assert_same(&ok(store.get(&a.asset_id)).expect("found"), &a);
    }
}

fn put_replaces_the_whole_asset(store: &dyn AssetStore) {
    let mut content = Map::new();
    content.insert("img".into(), Bytes::new(vec![1u8, 2]).into());
    let first = Asset::new(Value::Map(content))
        .with_id("a")
        .with_type("image");
    ok(store.put(&first));
    let second = asset(json!({"asset_id": "a", "asset_type": "text", "content": "hello"}));
    ok(store.put(&second));
    assert_same(&ok(store.get("a")).expect("found"), &second);
    assert_eq!(ok(store.list_ids(None)), ["a"]);
    assert!(ok(store.list_ids(Some("image"))).is_empty());
    assert_eq!(ok(store.list_ids(Some("text"))), ["a"]);
}

fn unknown_ids_are_absent_not_errors(store: &dyn AssetStore) {
    assert!(ok(store.get("nope")).is_none());
    assert!(ok(store.meta("nope")).is_none());
    assert!(!ok(store.delete("nope")));
    assert!(ok(store.list_ids(None)).is_empty());
}

fn delete_removes(store: &dyn AssetStore) {
    let mut content = Map::new();
    content.insert("b".into(), Bytes::new(vec![9u8]).into());
    ok(store.put(&Asset::new(Value::Map(content)).with_id("d")));
    ok(store.put(&asset(json!({"asset_id": "keep"}))));
    assert!(ok(store.delete("d")));
    assert!(ok(store.get("d")).is_none());
    assert!(!ok(store.delete("d")));
    assert_eq!(ok(store.list_ids(None)), ["keep"]);
    match store.resolve(&r("asset://d/content")) {
        Err(StoreError::Resolve(ResolveError::AssetNotFound { asset_id })) => {
            assert_eq!(asset_id, "d")
        }
        other => panic!("expected AssetNotFound, got {other:?}"),
    }
    // A re-put after delete comes back without the old leaves.
    ok(store.put(&asset(json!({"asset_id": "d", "content": {"b": 1}}))));
    assert_eq!(
        ok(store.get("d")).map(|a| a.content.to_json()),
        Some(Some(json!({"b": 1})))
    );
}

fn list_ids_is_sorted_and_filters_by_type(store: &dyn AssetStore) {
    let ids = ["b", "a", "B", "é", "a0", "_"];
    for (i, id) in ids.iter().enumerate() {
        let ty = if i % 2 == 0 { Some("even") } else { None };
        let mut a = asset(json!({"asset_id": id}));
        a.asset_type = ty.map(str::to_owned);
        ok(store.put(&a));
    }
    let mut sorted: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    sorted.sort();
    assert_eq!(ok(store.list_ids(None)), sorted);
    assert_eq!(ok(store.list_ids(Some("even"))), ["B", "a0", "b"]);
    assert!(ok(store.list_ids(Some("missing"))).is_empty());
    assert!(ok(store.list_ids(Some(""))).is_empty());
}

fn meta_matches_the_data_model(store: &dyn AssetStore) {
    let mut content = Map::new();
    content.insert(
        "image".into(),
        Bytes::with_media_type(vec![0x89u8], "image/png").into(),
    );
    content.insert("labels".into(), Value::from_json(json!(["cat", "sofa"])));
    let a = Asset::new(Value::Map(content))
        .with_id("m")
        .with_type("asset_example")
        .with_content_type("<class 'dict'>");
    ok(store.put(&a));
    let got = ok(store.meta("m")).expect("meta of a stored asset");
    assert_eq!(got, meta(&a));
    assert_eq!(
        serde_json::Value::Object(got),
        json!({
            "asset_type": "asset_example",
            "asset_id": "m",
            "content_type": "<class 'dict'>",
            "content": {"image": "<class 'bytes'>", "labels": ["cat", "sofa"]},
        })
    );
}

fn resolve_walks_from_the_root(store: &dyn AssetStore) {
    let mut content = Map::new();
    content.insert(
        "image".into(),
        Bytes::with_media_type(vec![1u8, 2, 3], "image/png").into(),
    );
    content.insert(
        "labels".into(),
        Value::from_json(json!(["cat", {"k": [10, 20]}])),
    );
    content.insert("10".into(), "ten".into());
    let a = Asset::new(Value::Map(content))
        .with_id("a1")
        .with_name("cat picture");
    ok(store.put(&a));
    let get = |url: &str| ok(store.resolve(&r(url)));
    assert_eq!(get("asset://a1/content/labels/0").as_str(), Some("cat"));
    assert_eq!(
        get("asset://a1/content/labels/1/k/1").to_json(),
        Some(json!(20))
    );
    assert_eq!(get("asset://a1/content/10").as_str(), Some("ten"));
    assert_eq!(get("asset://a1/asset_name").as_str(), Some("cat picture"));
    let image = get("asset://a1/content/image");
    let bytes = image.as_bytes().expect("bytes leaf");
    assert_eq!(
        (bytes.data(), bytes.media_type()),
        (&[1u8, 2, 3][..], Some("image/png"))
    );
    // The whole asset, and object form with a string index.
    let whole = get("asset://a1");
    assert_eq!(Asset::from_value(whole).ok(), Some(a.clone()));
    let reference = AssetRef::new("a1")
        .child("content")
        .child("labels")
        .child(PathSegment::Key("1".into()))
        .child("k");
    assert_eq!(
        ok(store.resolve(&reference)).to_json(),
        Some(json!([10, 20]))
    );
}

fn resolve_errors_are_typed(store: &dyn AssetStore) {
    ok(store.put(&asset(json!({
        "asset_id": "a1",
        "content": {"image": "x", "source_url": "u", "labels": ["cat", "sofa"]},
    }))));
    let err = |url: &str| match store.resolve(&r(url)) {
        Err(StoreError::Resolve(e)) => e,
        other => panic!("{url}: expected a resolve error, got {other:?}"),
    };
    let e = err("asset://a1/content/lables");
    assert_eq!(
        e.to_string(),
        "asset://a1/content has no key \"lables\"; available keys: \"image\", \"source_url\", \"labels\". Correct the field path and try again."
    );
    assert!(matches!(
        err("asset://a1/content/labels/2"),
        ResolveError::IndexOutOfRange {
            index: 2,
            len: 2,
            ..
        }
    ));
    assert!(matches!(
        err("asset://a1/content/labels/first"),
        ResolveError::BadIndex { .. }
    ));
    assert!(matches!(
        err("asset://a1/content/image/0"),
        ResolveError::NotAContainer {
            kind: "a string",
            ..
        }
    ));
    let e = err("asset://zz/content");
    assert!(matches!(&e, ResolveError::AssetNotFound { asset_id } if asset_id == "zz"));
    assert!(e.to_string().contains("\"zz\""));

    // `asset://a1/` is the path [""]: the key "" of the root object, which has none.
    let e = err("asset://a1/");
    assert_eq!(
        e,
        ResolveError::KeyNotFound {
            at: "asset://a1".into(),
            key: String::new(),
            available: vec!["asset_id".into(), "content".into()],
            total: 2,
        }
    );
    assert_eq!(
        e.to_string(),
        "asset://a1 has no key \"\"; available keys: \"asset_id\", \"content\". Correct the field path and try again."
    );
    assert!(matches!(
        err("asset://a1/content/"),
        ResolveError::KeyNotFound { ref at, ref key, total: 3, .. }
            if at == "asset://a1/content" && key.is_empty()
    ));
    assert!(matches!(
        err("asset://a1/content/labels/"),
        ResolveError::BadIndex { ref segment, len: 2, .. } if segment.is_empty()
    ));

    // Every kind of leaf ends a path (docs/reference/assets.md#resolution, NotAContainer), whether
    // the next segment is a key or an index. The object has a codec, so durable stores hold it too.
    let mut content = Map::new();
    content.insert("float".into(), Value::from_json(json!(1.5)));
    content.insert("int".into(), Value::from_json(json!(7)));
    content.insert("yes".into(), Value::Bool(true));
    content.insert("nothing".into(), Value::Null);
    content.insert("text".into(), "x".into());
    content.insert(
        "png".into(),
        Bytes::with_media_type(vec![1u8], "image/png").into(),
    );
    content.insert("point".into(), Object::new(Point { x: 1, y: 2 }).into());
    ok(store.put(&Asset::new(Value::Map(content)).with_id("leaves")));
    for (field, kind) in [
        ("float", "a number"),
        ("int", "a number"),
        ("yes", "a boolean"),
        ("nothing", "null"),
        ("text", "a string"),
        ("png", "bytes"),
        ("point", "an object"),
    ] {
        for next in ["0", "x", ""] {
            let url = format!("asset://leaves/content/{field}/{next}");
            let want = ResolveError::NotAContainer {
                at: format!("asset://leaves/content/{field}"),
                kind,
                segment: next.into(),
            };
            assert_eq!(err(&url), want, "{url}");
        }
    }
    assert_eq!(
        err("asset://leaves/content/int/0").to_string(),
        "asset://leaves/content/int is a number, not a map or a list, so it has no field \"0\"; end the reference at asset://leaves/content/int or correct the field path, then try again."
    );
    // A top-level text field is a leaf too.
    assert!(matches!(
        err("asset://leaves/asset_id/0"),
        ResolveError::NotAContainer { ref at, kind: "a string", .. } if at == "asset://leaves/asset_id"
    ));

    // Failed resolutions change nothing.
    assert_eq!(ok(store.list_ids(None)), ["a1", "leaves"]);
}

fn batch_is_all_or_nothing(store: &dyn AssetStore) {
    let batch: Vec<Asset> = (0..50)
        .map(|i| asset(json!({"asset_id": format!("b{i:02}"), "content": i})))
        .chain([asset(json!({"asset_id": "b00", "content": "last wins"}))])
        .collect();
    ok(store.put_batch(&batch));
    assert_eq!(ok(store.list_ids(None)).len(), 50);
    assert_eq!(
        ok(store.get("b00")).map(|a| a.content.to_json()),
        Some(Some(json!("last wins")))
    );
    let mut bad = vec![
        asset(json!({"asset_id": "new1"})),
        asset(json!({"asset_id": "b01", "content": "changed"})),
    ];
    bad.push(Asset::new(Value::Null).with_id(""));
    assert!(matches!(
        store.put_batch(&bad),
        Err(StoreError::EmptyAssetId)
    ));
    assert!(ok(store.get("new1")).is_none());
    assert_eq!(
        ok(store.get("b01")).map(|a| a.content.to_json()),
        Some(Some(json!(1)))
    );
    ok(store.put_batch(&[]));
    assert_eq!(ok(store.list_ids(None)).len(), 50);
}

fn empty_id_is_rejected_and_changes_nothing(store: &dyn AssetStore) {
    // An extra field named like an asset's own would replace it when read back (on the
    // durable stores, a `get` of "x" answered an asset with another id): refused when put.
    for field in ["asset_id", "asset_type", "content"] {
        let mut shadowing = asset(json!({"asset_id": "x", "content": 1}));
        shadowing
            .extra
            .insert(field.into(), Value::from_json(json!(5)));
        assert!(
            matches!(
                store.put(&shadowing),
                Err(StoreError::ReservedExtraField { .. })
            ),
            "{field}"
        );
        assert!(ok(store.get("x")).is_none(), "{field}");
    }
    let err = store.put(&Asset::new(Value::Null).with_id(""));
    assert!(matches!(err, Err(StoreError::EmptyAssetId)), "{err:?}");
    assert!(ok(store.list_ids(None)).is_empty());
}

/// `depth` lists nested in one another around `leaf`.
fn nested_lists(depth: usize, leaf: Value) -> Value {
    (0..depth).fold(leaf, |v, _| Value::Array(vec![v]))
}

/// An asset nested [`MAX_NESTING`] deep (its root object included) is stored and read back in
/// full; one level more is refused when put, naming the place and the limit, and changes
/// nothing, so no store ever holds an asset it cannot read back.
fn over_deep_assets_are_rejected_up_front(store: &dyn AssetStore) {
    // The root object, the content map, then lists down to the limit, around a bytes leaf.
    let mut content = Map::new();
    content.insert(
        "list".into(),
        nested_lists(MAX_NESTING - 2, Bytes::new(vec![5u8]).into()),
    );
    let deepest = Asset::new(Value::Map(content)).with_id("deep");
    ok(store.put(&deepest));
    assert_same(&ok(store.get("deep")).expect("found"), &deepest);
    assert_eq!(ok(store.meta("deep")), Some(meta(&deepest)));
    let leaf = format!("asset://deep/content/list{}", "/0".repeat(MAX_NESTING - 2));
    let bytes = ok(store.resolve(&r(&leaf)));
    assert_eq!(bytes.as_bytes().map(Bytes::data), Some(&[5u8][..]));

    // The root object, then lists one level past the limit.
    let too_deep = Asset::new(nested_lists(MAX_NESTING, Value::Null)).with_id("deep");
    let check = |result: Result<(), StoreError>| {
        let Err(e) = result else {
            panic!("an asset nested past MAX_NESTING was stored")
        };
        let text = e.to_string();
        assert!(e.is_caller_error(), "{text}");
        let StoreError::TooDeep {
            asset_id,
            field_path,
            limit,
        } = e
        else {
            panic!("expected TooDeep, got {text}")
        };
        assert_eq!((asset_id.as_str(), limit), ("deep", MAX_NESTING));
        // The innermost list, the first one past the limit.
        let mut want = vec![PathSegment::Key("content".into())];
        want.extend(std::iter::repeat_n(PathSegment::Index(0), MAX_NESTING - 1));
        assert_eq!(field_path, want);
        let at = format!("asset://deep/content{}", "/0".repeat(MAX_NESTING - 1));
        assert!(
            text.contains(&format!("{at} is nested deeper than {MAX_NESTING} ")),
            "{text}"
        );
    };
    check(store.put(&too_deep));
    check(store.put_batch(&[asset(json!({"asset_id": "other"})), too_deep]));
    // Neither the asset it would replace nor the batch's other asset changed.
    assert_same(&ok(store.get("deep")).expect("still there"), &deepest);
    assert_eq!(ok(store.list_ids(None)), ["deep"]);

    // Far deeper than a recursive walk's stack would take: still a typed error.
    let abyss = Asset::new(nested_lists(20_000, Value::Null)).with_id("abyss");
    assert!(matches!(store.put(&abyss), Err(StoreError::TooDeep { .. })));
    assert_eq!(ok(store.list_ids(None)), ["deep"]);
    // Dropping a value this deep recurses once per level and could overflow the test
    // thread's stack; the suite leaks it instead (a few hundred KB).
    std::mem::forget(abyss);
}

fn marker_like_json_comes_back_unchanged(store: &dyn AssetStore) {
    let a = asset(json!({
        "asset_id": "m",
        "content": {
            "$bytes": "AAEC", "__bytes__": {"b64": "AAEC", "media_type": "image/png"},
            "$object": {"type": "x", "data": null}, "$type": "bytes", "__mnemon__": 1,
            "data": "data:image/png;base64,iVBORw0KGgo=", "<class 'bytes'>": "<class 'bytes'>",
            "null_leaf": null, "asset_id": "not-the-id", "content": {"content": []},
        },
        "$ref": {"asset_id": "m", "field_path": ["content"]},
        "__leaf__": [null, null],
    }));
    ok(store.put(&a));
    assert_same(&ok(store.get("m")).expect("found"), &a);
}

fn bytes_round_trip_everywhere(store: &dyn AssetStore) {
    let big: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut content = Map::new();
    content.insert("empty".into(), Bytes::new(Vec::<u8>::new()).into());
    content.insert(
        "big".into(),
        Bytes::with_media_type(big, "application/x-test").into(),
    );
    content.insert(
        "list".into(),
        Value::Array(vec![
            Value::Null,
            Bytes::new(vec![0u8]).into(),
            Value::Array(vec![Bytes::new(vec![1u8]).into()]),
        ]),
    );
    content.insert("7".into(), Bytes::new(vec![7u8]).into());
    let mut a = Asset::new(Value::Map(content)).with_id("bytes");
    a.extra.insert(
        "thumb".into(),
        Bytes::with_media_type(vec![2u8], "image/jpeg").into(),
    );
    ok(store.put(&a));
    assert_same(&ok(store.get("bytes")).expect("found"), &a);
    let root_bytes = Asset::new(Bytes::new(vec![3u8, 4])).with_id("root");
    ok(store.put(&root_bytes));
    assert_same(&ok(store.get("root")).expect("found"), &root_bytes);
}

fn odd_ids_round_trip(store: &dyn AssetStore) {
    for id in [
        "with space",
        "a/b",
        "%41",
        "ünï",
        "a\u{0}b",
        "0",
        "x".repeat(500).as_str(),
    ] {
        let a = asset(json!({"asset_id": id, "content": id}));
        ok(store.put(&a));
        assert_same(&ok(store.get(id)).expect("found"), &a);
        let url = AssetRef::new(id).child("content").to_url();
        assert_eq!(ok(store.resolve(&r(&url))).as_str(), Some(id));
    }
}

fn objects(store: &dyn AssetStore, caps: Capabilities) {
    let mut content = Map::new();
    content.insert("p".into(), Object::new(Point { x: 3, y: -4 }).into());
    let a = Asset::new(Value::Map(content)).with_id("obj");
    ok(store.put(&a));
    let got = ok(store.get("obj")).expect("found");
    let p = got.content.as_map().and_then(|m| m.get("p"));
    match p {
        Some(Value::Object(o)) => {
            assert_eq!(o.downcast_ref::<Point>(), Some(&Point { x: 3, y: -4 }))
        }
        other => panic!("expected the Point object back, got {other:?}"),
    }
    assert_eq!(
        ok(store.meta("obj")).map(serde_json::Value::Object),
        Some(json!({"asset_id": "obj", "content": {"p": "<class 'conformance::Point'>"}}))
    );

    let mut content = Map::new();
    content.insert(
        "deep".into(),
        Value::Array(vec![Value::Null, Object::new(Unencodable).into()]),
    );
    let bad = Asset::new(Value::Map(content)).with_id("bad");
    let result = store.put(&bad);
    if caps.objects_without_codec {
        ok(result);
        let got = ok(store.resolve(&r("asset://bad/content/deep/1")));
        assert!(matches!(got, Value::Object(o) if o.type_name() == "conformance::Unencodable"));
    } else {
        match result {
            Err(e @ StoreError::NoCodec { .. }) => {
                let text = e.to_string();
                assert!(text.contains("asset://bad/content/deep/1"), "{text}");
                assert!(text.contains("conformance::Unencodable"), "{text}");
                assert!(e.is_caller_error());
            }
            other => panic!("expected NoCodec, got {other:?}"),
        }
        assert!(ok(store.get("bad")).is_none());
        // In a batch, the bad asset stops the good one too.
        let good = asset(json!({"asset_id": "good"}));
        assert!(store.put_batch(&[good, bad]).is_err());
        assert!(ok(store.get("good")).is_none());
    }
}

/// `threads` threads each run `ops` mixed put/get/delete/resolve calls on `store`, some on ids
/// of their own (checked against a model: every thread reads its own writes) and some on ids
/// shared by all (checked for consistency: a read never sees a torn asset).
pub fn concurrent_mixed(store: Arc<dyn AssetStore>, threads: usize, ops: usize) {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || worker(&*store, t, ops))
        })
        .collect();
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for h in handles {
        match h.join() {
            Ok(own) => expected.extend(own),
            Err(_) => panic!("a worker thread panicked"),
        }
    }
    let ids = ok(store.list_ids(Some("own")));
    assert_eq!(ids, expected.keys().cloned().collect::<Vec<_>>());
    for (id, n) in expected {
        let a = ok(store.get(&id)).expect("own asset present");
        check_consistent(&a);
        assert_eq!(
            a.content
                .as_map()
                .and_then(|m| m.get("n"))
                .and_then(|v| v.to_json()),
            Some(json!(n))
        );
    }
}

/// A versioned asset whose parts must agree: `n`, the payload's length and the bytes' content.
fn versioned(id: &str, asset_type: &str, n: u64) -> Asset {
    let mut content = Map::new();
    content.insert("n".into(), Value::from_json(json!(n)));
    content.insert(
        "payload".into(),
        Value::String("x".repeat((n % 200) as usize)),
    );
    content.insert("blob".into(), Bytes::new(n.to_le_bytes().to_vec()).into());
    Asset::new(Value::Map(content))
        .with_id(id)
        .with_type(asset_type)
}

fn check_consistent(a: &Asset) {
    let map = a.content.as_map().expect("content is a map");
    let n = map
        .get("n")
        .and_then(|v| v.to_json())
        .and_then(|j| j.as_u64())
        .expect("n");
    assert_eq!(
        map.get("payload").and_then(Value::as_str).map(str::len),
        Some((n % 200) as usize)
    );
    assert_eq!(
        map.get("blob")
            .and_then(Value::as_bytes)
            .map(|b| b.data().to_vec()),
        Some(n.to_le_bytes().to_vec()),
        "torn asset {}",
        a.asset_id
    );
}

fn worker(store: &dyn AssetStore, thread: usize, ops: usize) -> BTreeMap<String, u64> {
    let mut rng =
        0x9E37_79B9_7F4A_7C15u64 ^ (thread as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut own: BTreeMap<String, u64> = BTreeMap::new();
    for op in 0..ops as u64 {
        let roll = next();
        let shared = roll % 3 == 0;
        let slot = (roll >> 8) % 8;
        let id = if shared {
            format!("shared-{slot}")
        } else {
            format!("own-{thread}-{slot}")
        };
        match (roll >> 16) % 4 {
            0 | 1 => {
                let asset = versioned(&id, if shared { "shared" } else { "own" }, op);
                ok(store.put(&asset));
                if !shared {
                    own.insert(id.clone(), op);
                }
            }
            2 => {
                let got = ok(store.get(&id));
                if let Some(a) = &got {
                    check_consistent(a);
                }
                if !shared {
                    let n = got.map(|a| {
                        a.content
                            .as_map()
                            .and_then(|m| m.get("n"))
                            .and_then(|v| v.to_json())
                            .and_then(|j| j.as_u64())
                    });
                    assert_eq!(
                        n,
                        own.get(&id).map(|n| Some(*n)),
                        "thread {thread} must read its own write of {id}"
                    );
                }
            }
            _ => {
                let existed = ok(store.delete(&id));
                if !shared {
                    assert_eq!(existed, own.remove(&id).is_some());
                }
            }
        }
        if op % 50 == 0 {
            let _ = ok(store.list_ids(None));
            match store.resolve(&r(&format!("asset://{id}/content/n"))) {
                Ok(v) => assert!(v.to_json().is_some_and(|j| j.is_u64())),
                Err(StoreError::Resolve(ResolveError::AssetNotFound { .. })) => {}
                Err(e) => panic!("resolve failed: {e}"),
            }
        }
    }
    own
}

/// Tenants (issue 13, item 3): `open(namespace)` opens a handle on one shared database for that
/// namespace. Two namespaces hold assets with the same ids and types, and no call through one
/// handle (put, put_batch, get, meta, resolve, list_ids with and without a type, delete) reads,
/// changes or removes the other's; a second handle on the same namespace sees the first's
/// writes, so the two are one database, not two.
pub fn tenant_isolation(open: &dyn Fn(&str) -> Box<dyn AssetStore>) {
    let a = open("tenant-a");
    let b = open("tenant-b");
    // Each asset holds a bytes leaf too, so the leaves' rows are checked as well as the assets'.
    let tagged = |id: &str, owner: &str| {
        let mut content = Map::new();
        content.insert("owner".into(), Value::String(owner.into()));
        content.insert("data".into(), Bytes::new(owner.as_bytes().to_vec()).into());
        let mut a = Asset::new(Value::Map(content)).with_id(id);
        a.asset_type = Some("doc".into());
        a
    };
    ok(a.put(&tagged("shared", "a")));
    ok(b.put(&tagged("shared", "b")));
    ok(a.put_batch(&[tagged("only-a", "a"), tagged("both", "a")]));
    ok(b.put_batch(&[tagged("both", "b")]));

    // Reads see each namespace's own asset under the same id.
    for (store, owner) in [(&a, "a"), (&b, "b")] {
        let got = ok(store.get("shared")).expect("own asset");
        assert_same(&got, &tagged("shared", owner));
        assert_same(&ok(store.get("both")).unwrap(), &tagged("both", owner));
        let value = ok(store.resolve(&r("asset://shared/content/owner")));
        assert_eq!(value.as_str(), Some(owner));
        assert_eq!(
            ok(store.meta("shared")),
            Some(meta(&tagged("shared", owner)))
        );
    }
    assert_eq!(ok(a.list_ids(None)), ["both", "only-a", "shared"]);
    assert_eq!(ok(a.list_ids(Some("doc"))), ["both", "only-a", "shared"]);
    assert_eq!(ok(b.list_ids(None)), ["both", "shared"]);
    assert_eq!(ok(b.list_ids(Some("doc"))), ["both", "shared"]);

    // Another namespace's id is absent everywhere.
    assert!(ok(b.get("only-a")).is_none());
    assert!(ok(b.meta("only-a")).is_none());
    assert!(matches!(
        b.resolve(&r("asset://only-a")),
        Err(StoreError::Resolve(ResolveError::AssetNotFound { .. }))
    ));
    assert!(!ok(b.delete("only-a")));
    assert!(ok(a.get("only-a")).is_some());

    // Deleting and replacing in one namespace leaves the other's asset of that id alone.
    assert!(ok(b.delete("shared")));
    assert!(ok(b.get("shared")).is_none());
    assert_same(&ok(a.get("shared")).unwrap(), &tagged("shared", "a"));
    ok(b.put(&asset(
        json!({"asset_id": "both", "asset_type": "other", "content": 1}),
    )));
    assert_same(&ok(a.get("both")).unwrap(), &tagged("both", "a"));
    assert_eq!(ok(a.list_ids(Some("other"))), Vec::<String>::new());
    assert_eq!(ok(b.list_ids(Some("doc"))), Vec::<String>::new());

    // A second handle on namespace a is the same tenant.
    let a2 = open("tenant-a");
    assert_eq!(ok(a2.list_ids(None)), ["both", "only-a", "shared"]);
    assert!(ok(a2.delete("only-a")));
    assert!(ok(a.get("only-a")).is_none());
}

fn filter(json: serde_json::Value) -> Filter {
    match Filter::parse(&json) {
        Ok(f) => f,
        Err(e) => panic!("bad test filter {json}: {e}"),
    }
}

/// Issue 14, item 2: `list_where` and `count_where` select by any field of the asset's
/// document (its meta: type, name, content, extra fields; and the store's times), in id
/// order, and the filter applies before the limit: 40 non-matching assets sorting before the
/// matching ones do not crowd them out of a top 10.
fn filters_select_before_the_limit(store: &dyn AssetStore) {
    let mut batch = Vec::new();
    for i in 0..40 {
        batch.push(asset(json!({
            "asset_id": format!("a{i:03}"), "asset_type": "image",
            "content": {"labels": ["cat"], "score": i}, "owner": "bob"
        })));
    }
    for i in 0..12 {
        batch.push(asset(json!({
            "asset_id": format!("b{i:03}"), "asset_type": "table",
            "content": {"labels": ["dog", "cat"], "score": 100 + i}, "owner": "alice",
            "asset_name": format!("table {i}")
        })));
    }
    ok(store.put_batch(&batch));
    let alice = filter(json!({"eq": {"path": "owner", "value": "alice"}}));
    let top10 = ok(store.list_where(Some(&alice), Some(10)));
    let want: Vec<String> = (0..10).map(|i| format!("b{i:03}")).collect();
    assert_eq!(top10, want, "the filter applies before the limit");
    assert_eq!(ok(store.count_where(Some(&alice))), 12);
    assert_eq!(ok(store.count_where(None)), 52);
    assert_eq!(ok(store.list_where(None, None)).len(), 52);
    assert_eq!(ok(store.list_where(None, Some(0))), Vec::<String>::new());
    // Content paths, the typed fields and combinations.
    let dogs = filter(json!({"contains": {"path": "content.labels", "value": "dog"}}));
    assert_eq!(ok(store.count_where(Some(&dogs))), 12);
    let by_type = filter(json!({"in": {"path": "asset_type", "values": ["table", "x"]}}));
    assert_eq!(ok(store.count_where(Some(&by_type))), 12);
    let high = filter(json!({"and": [
        {"gte": {"path": "content.score", "value": 35}},
        {"lt": {"path": "content.score", "value": 105.5}}
    ]}));
    assert_eq!(
        ok(store.list_where(Some(&high), None)),
        [
            "a035", "a036", "a037", "a038", "a039", "b000", "b001", "b002", "b003", "b004", "b005"
        ]
    );
    let by_id = filter(json!({"eq": {"path": "asset_id", "value": "a007"}}));
    assert_eq!(ok(store.list_where(Some(&by_id), None)), ["a007"]);
    let unnamed = filter(json!({"not": {"exists": "asset_name"}}));
    assert_eq!(ok(store.count_where(Some(&unnamed))), 40);
    // The store's times are fields too: every asset here was written, none expires.
    let stamped = filter(json!({"and": [
        {"exists": "created_at"}, {"exists": "updated_at"}, {"not": {"exists": "expires_at"}}
    ]}));
    assert_eq!(ok(store.count_where(Some(&stamped))), 52);
    let typed = filter(json!({"gt": {"path": "created_at", "value": "2020"}}));
    assert_eq!(ok(store.count_where(Some(&typed))), 0, "times are numbers");
    // Bytes are filtered as their meta's type string.
    let mut content = Map::new();
    content.insert("png".into(), Bytes::new(vec![1, 2, 3]).into());
    ok(store.put(&Asset::new(Value::Map(content)).with_id("c-bytes")));
    let bytes = filter(json!({"eq": {"path": "content.png", "value": "<class 'bytes'>"}}));
    assert_eq!(ok(store.list_where(Some(&bytes), None)), ["c-bytes"]);
    // A backslash then `u0000` in a string is no NUL: PostgreSQL used to take its JSON text
    // (`\\u0000`) for one and keep no document, so no filter saw the asset.
    ok(store.put(&asset(json!({
        "asset_id": "d-escaped", "content": "x\\u0000", "owner": "carol"
    }))));
    let carol = filter(json!({"eq": {"path": "owner", "value": "carol"}}));
    assert_eq!(ok(store.list_where(Some(&carol), None)), ["d-escaped"]);
}

/// Issue 14, item 5: `forget(prefix)` removes every asset whose id starts with the prefix,
/// in byte terms (not `a1` for `a10/`), bytes included, and returns how many; `""` removes
/// the rest.
fn forget_removes_an_id_prefix(store: &dyn AssetStore) {
    let with_bytes = |id: &str| {
        let mut content = Map::new();
        content.insert("b".into(), Bytes::new(id.as_bytes().to_vec()).into());
        Asset::new(Value::Map(content)).with_id(id)
    };
    let ids = [
        "user-1/a",
        "user-1/b",
        "user-1",
        "user-10/a",
        "user-2/a",
        "über/x",
        "\u{10FFFF}z",
    ];
    ok(store.put_batch(&ids.iter().map(|id| with_bytes(id)).collect::<Vec<_>>()));
    assert_eq!(ok(store.forget("user-1/")), 2);
    assert!(ok(store.get("user-1/a")).is_none());
    assert!(ok(store.meta("user-1/b")).is_none());
    let whole = AssetRef {
        asset_id: "user-1/a".into(),
        field_path: Vec::new(),
    };
    assert!(matches!(
        store.resolve(&whole),
        Err(StoreError::Resolve(ResolveError::AssetNotFound { .. }))
    ));
    assert_eq!(
        ok(store.list_ids(None)),
        ["user-1", "user-10/a", "user-2/a", "über/x", "\u{10FFFF}z"]
    );
    assert_eq!(ok(store.forget("nothing-here")), 0);
    assert_eq!(ok(store.forget("\u{10FFFF}")), 1);
    assert_eq!(ok(store.forget("ü")), 1);
    // A re-put id comes back whole: no leaf of the forgotten asset lingers.
    ok(store.put(&with_bytes("user-1/a")));
    assert_same(&ok(store.get("user-1/a")).unwrap(), &with_bytes("user-1/a"));
    assert_eq!(ok(store.forget("")), 4);
    assert_eq!(ok(store.list_ids(None)), Vec::<String>::new());
    assert_eq!(ok(store.count_where(None)), 0);
}

/// Opens a fresh, empty store reading a clock, with a default time-to-live.
pub type OpenWithClock<'a> = dyn Fn(Arc<dyn Clock>, Option<Duration>) -> Box<dyn AssetStore> + 'a;

/// Opens a handle for a namespace on one shared database, reading a clock.
pub type OpenInNamespace<'a> = dyn Fn(&str, Arc<dyn Clock>) -> Box<dyn AssetStore> + 'a;

/// The instant the expiry checks start at (milliseconds since the Unix epoch).
const T0: i64 = 1_700_000_000_000;

/// Issue 14, item 4: expiry at the boundary instant, through an injected clock. `open(clock,
/// default_ttl)` opens a fresh, empty store reading `clock`. An asset expiring at `t` is
/// visible to every read at `t - 1` and to none at `t`; the default time-to-live applies to
/// plain puts, `Expiry::Never` overrides it, a re-put renews; `gc` removes exactly the expired
/// assets (a clock set back afterwards does not bring them back) and returns how many.
pub fn expiry(open: &OpenWithClock<'_>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = open(clock.clone(), Some(Duration::from_secs(60)));
    let doc = |id: &str| asset(json!({"asset_id": id, "asset_type": "t", "content": {"n": 1}}));
    ok(store.put_expiring(&doc("short"), Expiry::After(Duration::from_millis(10))));
    ok(store.put(&doc("default")));
    ok(store.put_expiring(&doc("forever"), Expiry::Never));
    ok(store.put_batch_expiring(&[doc("at")], Expiry::At(T0 + 500)));
    assert_eq!(ok(store.expires_at("short")), Some(Some(T0 + 10)));
    assert_eq!(ok(store.expires_at("default")), Some(Some(T0 + 60_000)));
    assert_eq!(ok(store.expires_at("forever")), Some(None));
    assert_eq!(ok(store.expires_at("at")), Some(Some(T0 + 500)));
    assert_eq!(ok(store.expires_at("missing")), None);

    let visible = |id: &str| {
        let reads = [
            ok(store.get(id)).is_some(),
            ok(store.meta(id)).is_some(),
            store
                .resolve(&r(&format!("asset://{id}/content/n")))
                .is_ok(),
            ok(store.list_ids(None)).iter().any(|i| i == id),
            ok(store.list_ids(Some("t"))).iter().any(|i| i == id),
            ok(store.list_where(None, None)).iter().any(|i| i == id),
            ok(store.expires_at(id)).is_some(),
        ];
        assert!(
            reads.iter().all(|&v| v == reads[0]),
            "{id}: reads disagree at {}: {reads:?}",
            clock.now_millis()
        );
        reads[0]
    };
    clock.set(T0 + 9);
    assert!(visible("short"), "one millisecond before its expiry");
    assert_eq!(ok(store.count_where(None)), 4);
    clock.set(T0 + 10);
    assert!(!visible("short"), "at the boundary instant");
    assert!(visible("default") && visible("forever") && visible("at"));
    assert_eq!(ok(store.count_where(None)), 3);
    // The expiry is a filterable field.
    let expiring = filter(json!({"exists": "expires_at"}));
    assert_eq!(
        ok(store.list_where(Some(&expiring), None)),
        ["at", "default"]
    );
    // An expired asset is absent to delete as well; a re-put is a new asset.
    assert!(!ok(store.delete("short")));
    ok(store.put_expiring(&doc("short"), Expiry::After(Duration::from_millis(10))));
    assert!(visible("short"));
    clock.set(T0 + 20);
    assert!(!visible("short"));
    // Replacing a live asset replaces its expiry.
    ok(store.put_expiring(&doc("at"), Expiry::Never));
    clock.set(T0 + 60_000);
    assert!(!visible("default") && visible("at") && visible("forever"));

    // The sweep removes the expired ones (short, default), and only those.
    assert_eq!(ok(store.gc()), 2);
    assert_eq!(ok(store.gc()), 0);
    clock.set(T0);
    assert!(
        !visible("short") && !visible("default"),
        "gc removed them for good"
    );
    assert_eq!(ok(store.list_ids(None)), ["at", "forever"]);
}

/// Tenants (issue 14): `open(namespace, clock)` opens a handle on one shared database. A
/// filter, a sweep and a forget through one namespace never see or remove another's assets,
/// even with the same ids.
pub fn tenant_isolation_of_sweeps(open: &OpenInNamespace<'_>) {
    let clock = Arc::new(ManualClock::new(T0));
    let a = open("tenant-a", clock.clone());
    let b = open("tenant-b", clock.clone());
    let doc = |id: &str| asset(json!({"asset_id": id, "content": {"k": "v"}}));
    for store in [&a, &b] {
        ok(store.put_expiring(&doc("x/1"), Expiry::After(Duration::from_millis(5))));
        ok(store.put(&doc("x/2")));
        ok(store.put(&doc("y/1")));
    }
    let all = filter(json!({"eq": {"path": "content.k", "value": "v"}}));
    assert_eq!(ok(a.count_where(Some(&all))), 3);
    clock.set(T0 + 5);
    assert_eq!(ok(b.gc()), 1);
    assert_eq!(ok(a.gc()), 1);
    assert_eq!(ok(b.forget("x/")), 1);
    assert_eq!(ok(a.list_ids(None)), ["x/2", "y/1"]);
    assert_eq!(ok(b.forget("")), 1);
    assert_eq!(ok(b.count_where(None)), 0);
    assert_eq!(ok(a.list_where(Some(&all), None)), ["x/2", "y/1"]);
    assert_same(&ok(a.get("y/1")).unwrap(), &doc("y/1"));
}
