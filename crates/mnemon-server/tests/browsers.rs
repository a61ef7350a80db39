//! Web pages of other sites get nothing from the server's routes (docs/reference/rest.md#browsers):
//! an open server on loopback used to answer them, so any site its user opened could read and
//! delete its data (`Access-Control-Allow-Origin: *` on every `/v1` answer, writes through
//! "simple" requests, DNS rebinding through any `Host`).

use super::*;

/// The headers a browser sends with a `fetch` of a page of another site.
fn from_another_site(
    request: reqwest::blocking::RequestBuilder,
) -> reqwest::blocking::RequestBuilder {
    request
        .header("origin", "http://evil.example")
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "no-cors")
}

#[test]
fn pages_of_other_sites_can_neither_read_nor_write() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    ok(
        api.put("/v1/assets/secret", json!({"content": {"pin": 1234}})),
        StatusCode::OK,
    );

    // A "simple" cross-site POST (text/plain: no preflight) that would delete the namespace.
    let forget = from_another_site(api.client.post(api.url("/v1/forget")))
        .header("content-type", "text/plain")
        .body(r#"{"namespace": "default"}"#)
        .send()
        .unwrap();
    expect_error(forget, StatusCode::FORBIDDEN, "cross_origin");
    // A cross-site read, and the same with only one of the two headers a browser sends.
    let read = from_another_site(api.client.get(api.url("/v1/assets/secret")))
        .send()
        .unwrap();
    expect_error(read, StatusCode::FORBIDDEN, "cross_origin");
    let origin_only = api
        .client
        .get(api.url("/v1/assets/secret"))
        .header("origin", "http://localhost:3000")
        .send()
        .unwrap();
    expect_error(origin_only, StatusCode::FORBIDDEN, "cross_origin");
    // MCP and the metrics too.
    let mcp = from_another_site(api.client.post(api.url("/mcp")))
        .header("content-type", "text/plain")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::FORBIDDEN);
    let metrics = from_another_site(api.client.get(api.url("/metrics")))
        .send()
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::FORBIDDEN);

    // DNS rebinding: same-origin to the browser, under the attacker's name.
    let port = running.base.rsplit(':').next().unwrap().to_owned();
    let rebound = api
        .client
        .get(api.url("/v1/assets/secret"))
        .header("host", format!("rebind.evil.example:{port}"))
        .send()
        .unwrap();
    expect_error(rebound, StatusCode::FORBIDDEN, "host_not_allowed");

    // Nothing was deleted, and the answers to programs carry no CORS header for pages to
    // read them by.
    let kept = api.get("/v1/assets/secret");
    assert!(kept.headers().get("access-control-allow-origin").is_none());
    ok(kept, StatusCode::OK);
    // The server's own pages still work: the inspector's requests are same-origin, and a link
    // from another site to it is a plain navigation.
    let same_origin = api
        .client
        .get(api.url("/v1/assets/secret"))
        .header("origin", running.base.clone())
        .header("sec-fetch-site", "same-origin")
        .send()
        .unwrap();
    ok(same_origin, StatusCode::OK);
    let link = api
        .client
        .get(api.url("/ui/"))
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "navigate")
        .send()
        .unwrap();
    assert_eq!(link.status(), StatusCode::OK);
    for host in ["localhost", "127.0.0.1", "[::1]"] {
        let named = api
            .client
            .get(api.url("/v1/assets/secret"))
            .header("host", format!("{host}:{port}"))
            .send()
            .unwrap();
        assert_eq!(named.status(), StatusCode::OK, "{host}");
    }

    // The library endpoint keeps the Polymath protocol's CORS for its browser clients.
    let query = api
        .client
        .post(api.url("/"))
        .header("origin", "http://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("count=1")
        .send()
        .unwrap();
    assert_eq!(query.headers()["access-control-allow-origin"], "*");
}

#[test]
fn a_server_lists_the_names_a_proxy_forwards() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let mut config = ServerConfig::open(service_of(Stores::open(dir.path()).unwrap()));
    config.allowed_hosts = Some(vec![
        "127.0.0.1".to_owned(),
        "mnemon.example.com".to_owned(),
    ]);
    let running = start_with(config, HostOptions::default());
    let api = Api::new(&running);
    let named = |host: &str| {
        api.client
            .get(api.url("/v1/memory/sessions"))
            .header("host", host)
            .send()
            .unwrap()
            .status()
    };
    assert_eq!(named("mnemon.example.com"), StatusCode::OK);
    assert_eq!(named("MNEMON.example.com:443"), StatusCode::OK);
    assert_eq!(named("localhost"), StatusCode::FORBIDDEN);
    assert_eq!(named("other.example.com"), StatusCode::FORBIDDEN);
}

/// Stored bytes are served from the server's origin: an HTML page an agent stored, opened in a
/// browser, would run its scripts as that origin (and reach `/v1` same-origin). Served
/// sandboxed, it runs none.
#[test]
fn stored_pages_are_served_sandboxed() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    let page = b"<script>fetch('/v1/forget', {method: 'POST', body: '{}'})</script>".to_vec();
    let stored = api
        .client
        .put(api.url("/v1/assets/page/content"))
        .header("content-type", "text/html")
        .body(page.clone())
        .send()
        .unwrap();
    ok(stored, StatusCode::OK);
    let served = api.get("/v1/assets/page/content");
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(served.headers()["content-type"], "text/html");
    assert_eq!(served.headers()["content-security-policy"], "sandbox");
    assert_eq!(served.headers()["x-content-type-options"], "nosniff");
    assert_eq!(served.bytes().unwrap().as_ref(), page);
}

/// A browser too old to say which site a request comes from sends a form's post with neither
/// `Origin` nor `Sec-Fetch-Site`: its declared type, one only a form or a page's simple request
/// uses, is refused instead, and a program's JSON with no type still goes through.
#[test]
fn json_declared_as_a_form_type_is_refused() {
    crypto();
    let dir = tempfile::tempdir().unwrap();
    let running = start(Stores::open(dir.path()).unwrap(), HostOptions::default());
    let api = Api::new(&running);
    let body = r#"{"messages": [{"name": "u", "content": "hello"}]}"#;
    for form in [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        let posted = api
            .client
            .post(api.url("/v1/memory/sessions/s/messages"))
            .header("content-type", form)
            .body(body)
            .send()
            .unwrap();
        expect_error(
            posted,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        );
    }
    let forget = api
        .client
        .post(api.url("/v1/forget"))
        .header("content-type", "text/plain")
        .body(r#"{"namespace": "default"}"#)
        .send()
        .unwrap();
    expect_error(
        forget,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    // A type with bytes outside visible ASCII cannot be read: refused too (it used to be read
    // as empty, which let `text/plain; a=<byte>` through as JSON).
    let unreadable = api
        .client
        .post(api.url("/v1/memory/sessions/s/messages"))
        .header(
            "content-type",
            reqwest::header::HeaderValue::from_bytes(b"text/plain; a=\xe9").unwrap(),
        )
        .body(body)
        .send()
        .unwrap();
    expect_error(
        unreadable,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    let untyped = api
        .client
        .post(api.url("/v1/memory/sessions/s/messages"))
        .body(body)
        .send()
        .unwrap();
    assert_eq!(ok(untyped, StatusCode::OK)["added"], 1);
}
