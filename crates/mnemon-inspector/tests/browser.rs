//! The pages in headless Chromium against a server with seeded data: each page loads and shows
//! what is stored, a session is clicked through, searches run, a reference is resolved, an image
//! asset is previewed from a blob URL, and stored-XSS payloads in a message, an asset id and an
//! artifact name render as text without running. Screenshots of each page go to
//! `target/inspector-screenshots/`.

use std::path::PathBuf;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{call, png, start};
use crate::webdriver::{self, Browser};

/// Runs when executed: `window.__xss` set, or a `<script>` or `<img src=x>` in the DOM.
const XSS_MESSAGE: &str =
    "<img src=x onerror=\"window.__xss='message'\"><script>window.__xss='message script'</script>";
const XSS_ASSET: &str = "<img src=x onerror=window.__xss='asset'>";
const XSS_ARTIFACT: &str = "<script>window.__xss='artifact'</script>";

fn screenshots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/inspector-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn seed(rest: &str) {
    crate::support::crypto();
    let client = reqwest::blocking::Client::new();
    let post =
        |path: &str, body: Value| call(&client, Method::POST, &format!("{rest}{path}"), Some(body));
    post(
        "/v1/memory/sessions/chat-1/messages",
        json!({"messages": [
            {"name": "user", "role": "user", "content": "My cat is called Miso and she sleeps on the mat."},
            {"name": "assistant", "role": "assistant", "content": "Noted: Miso the cat sleeps on the mat."},
            {"name": "user", "role": "user", "content": XSS_MESSAGE},
        ]}),
    );
    post(
        "/v1/memory/sessions/chat-2/messages",
        json!({"messages": [
            {"name": "user", "role": "user", "content": "The dog barks at the postman every morning."},
            {"name": "assistant", "role": "assistant", "content": "Dogs often bark at visitors."},
        ]}),
    );
    let first = call(
        &client,
        Method::GET,
        &format!("{rest}/v1/memory/sessions/chat-1/messages?recent=3"),
        None,
    );
    let first_id = first["messages"][0]["id"].as_str().unwrap().to_owned();
    post(
        "/v1/memory/sessions/chat-1/mark",
        json!({"mark": "important", "ids": [first_id]}),
    );
    // A later write to chat-2, so it is the most recently active session (a mark is a write).
    std::thread::sleep(std::time::Duration::from_millis(5));
    let second = call(
        &client,
        Method::GET,
        &format!("{rest}/v1/memory/sessions/chat-2/messages?recent=1"),
        None,
    );
    let second_id = second["messages"][0]["id"].as_str().unwrap().to_owned();
    post(
        "/v1/memory/sessions/chat-2/mark",
        json!({"mark": "later", "ids": [second_id]}),
    );
    call(
        &client,
        Method::PUT,
        &format!("{rest}/v1/assets/photo-1"),
        Some(
            json!({"asset_type": "image", "description": "a cat on a mat",
                     "content": {"labels": ["cat", "mat"], "width": 640, "camera": {"make": "Acme", "iso": 200}}}),
        ),
    );
    let put = client
        .put(format!("{rest}/v1/assets/logo/content"))
        .header("Content-Type", "image/png")
        .body(png(96, 64))
        .send()
        .unwrap();
    assert!(put.status().is_success());
    call(
        &client,
        Method::PUT,
        &format!("{rest}/v1/assets/{}", urlencode(XSS_ASSET)),
        Some(json!({"asset_type": "note", "content": {"note": XSS_MESSAGE}})),
    );
    for (key, name, content) in [
        ("plan", "Plan v1", json!(["parse"])),
        ("plan", "Plan v2", json!(["parse", "test", "ship"])),
        ("xss", XSS_ARTIFACT, json!({"html": XSS_MESSAGE})),
    ] {
        post(
            "/v1/artifacts",
            json!({"scope": "chat-1", "key": key, "type": "plan", "name": name, "content": content}),
        );
    }
    // A scope that is a payload, listed on the Artifacts page.
    post(
        "/v1/artifacts",
        json!({"scope": XSS_ASSET, "key": "k", "type": "plan", "name": "n", "content": "c"}),
    );
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Nothing the payloads carry has run or become markup, and the page broke no CSP rule.
fn assert_no_xss(browser: &Browser) {
    let state = browser.js(
        "return {xss: window.__xss === undefined ? null : String(window.__xss),
                 injected: document.querySelectorAll('img[src=\"x\"], main script, main iframe').length,
                 scripts: document.scripts.length,
                 violations: window.__violations || null};",
    );
    assert_eq!(state["xss"], Value::Null, "a payload ran: {state}");
    assert_eq!(state["injected"], 0, "a payload became markup: {state}");
    assert_eq!(state["scripts"], 1, "{state}");
    assert_eq!(state["violations"], json!([]), "CSP violations: {state}");
}

#[test]
fn every_page_in_headless_chromium() {
    let Some((chromium, driver)) = webdriver::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stores = mnemon_ops::Stores::open(dir.path()).unwrap();
    every_page(stores, "sqlite", &chromium, &driver, &screenshots());
}

/// On a server with keys, the session page's export used to be a plain link: a navigation,
/// which carries no `Authorization` header, so it got 401. It is fetched with the key now and
/// offered as a download of what was fetched.
#[test]
fn the_export_is_fetched_with_the_key() {
    let Some((chromium, driver)) = webdriver::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let stores = mnemon_ops::Stores::open(dir.path()).unwrap();
    let keys = mnemon_keys::KeyStore::open_sqlite(
        dir.path().join("keys.sqlite3"),
        mnemon_keys::KeyStoreOptions::default(),
    )
    .unwrap();
    let created = keys
        .create(
            stores.namespace(),
            mnemon_keys::Role::Write,
            "inspector test",
        )
        .unwrap();
    let key = created.key().to_owned();
    let running = crate::support::start_with(stores, Some(std::sync::Arc::new(keys)));
    crate::support::crypto();
    let client = reqwest::blocking::Client::new();
    let rest = &running.rest;
    let response = client
        .post(format!("{rest}/v1/memory/sessions/chat-1/messages"))
        .bearer_auth(&key)
        .json(
            &json!({"messages": [{"name": "user", "role": "user", "content": "Keys guard this."}]}),
        )
        .send()
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let expected = client
        .get(format!(
            "{rest}/v1/memory/sessions/chat-1/export?format=agentscope-0.1"
        ))
        .bearer_auth(&key)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let browser = Browser::start(&chromium, &driver);
    browser.goto(&format!("{}/ui/", running.base));
    browser.type_into(&browser.find("#key-input"), &key);
    browser.click(&browser.find("#key-use"));
    browser.wait_for("document.querySelector('#key-state').textContent.includes('key set')");
    browser.goto(&format!("{}/ui/#/session/chat-1", running.base));
    browser.wait_for("document.querySelectorAll('#messages .card').length === 1");
    browser.click(&browser.find("#export"));
    browser.wait_for("document.querySelector('#export-link') !== null");
    // The link holds what was fetched (the page's policy lets no script read a blob URL back,
    // so its size stands for it; a refused fetch leaves no link but the error).
    let link = browser
        .js("const a = document.querySelector('#export-link'); return [a.href, a.textContent];");
    assert!(link[0].as_str().unwrap().starts_with("blob:"), "{link}");
    assert!(
        link[1]
            .as_str()
            .unwrap()
            .ends_with(&format!("({} bytes)", expected.len())),
        "{link} against {} bytes",
        expected.len()
    );
    let name =
        browser.js("return document.querySelector('#export-link').getAttribute('download');");
    assert_eq!(name, json!("chat-1.agentscope-0.1.json"));
}

#[test]
fn every_page_in_headless_chromium_on_postgres() {
    let Some((chromium, driver)) = webdriver::find() else {
        return;
    };
    let server = mnemon_tests::require_postgres!();
    let url = server.fresh_database("inspector_pages").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let options = mnemon_ops::OpenOptions::postgres(url);
    let stores = mnemon_ops::Stores::open_with(dir.path(), &options).unwrap();
    let shots = screenshots().join("postgres");
    std::fs::create_dir_all(&shots).unwrap();
    every_page(stores, "postgres", &chromium, &driver, &shots);
}

fn every_page(
    stores: mnemon_ops::Stores,
    backend: &str,
    chromium: &std::path::Path,
    driver: &std::path::Path,
    shots: &std::path::Path,
) {
    let running = start(stores);
    seed(&running.rest);
    let browser = Browser::start(chromium, driver);
    let ui = format!("{}/ui/", running.base);

    // Sessions: the list, each row's newest message.
    browser.goto(&ui);
    browser.js(
        "window.__violations = [];
         document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));",
    );
    browser.wait_for("document.querySelectorAll('#sessions a.session-link').length === 2");
    browser.wait_for("!document.querySelector('#sessions .pending')");
    let text = browser.text();
    assert!(text.contains("chat-1") && text.contains("chat-2"), "{text}");
    assert!(
        text.contains("assistant: Dogs often bark at visitors."),
        "{text}"
    );
    assert!(
        text.contains(&format!("user: {}", &XSS_MESSAGE[..60])),
        "{text}"
    );
    // Sorted by last activity (chat-2 was written last), with each session's message count
    // and last activity from the listing.
    let rows = browser.js(
        "return Array.from(document.querySelectorAll('#sessions tbody tr')).map((r) =>
           [r.querySelector('a.session-link').textContent, r.querySelector('.count').textContent,
            r.querySelector('.activity').textContent]);",
    );
    assert_eq!(rows[0][0], "chat-2", "{rows}");
    assert_eq!(rows[0][1], "2", "{rows}");
    assert_eq!(rows[1][0], "chat-1", "{rows}");
    assert_eq!(rows[1][1], "3", "{rows}");
    let activity = |row: usize| rows[row][2].as_str().unwrap().to_owned();
    assert!(
        activity(0).ends_with('Z') && activity(0) > activity(1),
        "{rows}"
    );

    // Search across every session (hybrid by default; these messages have no embedding, so
    // the keyword ranking finds them).
    browser.type_into(&browser.find("#search-all input[name=q]"), "cat Miso mat");
    browser.click(&browser.find("#search-all button[type=submit]"));
    browser.wait_for("document.querySelectorAll('#search-hits .card').length > 0");
    let hits = browser.js("return document.querySelector('#search-hits').innerText;");
    let hits = hits.as_str().unwrap();
    assert!(
        hits.contains("score") && hits.contains("in chat-1"),
        "{hits}"
    );
    assert!(
        hits.find("Miso")
            .is_some_and(|i| hits.find("Dogs").is_none_or(|j| i < j)),
        "{hits}"
    );
    // Keyword mode with a filter: only the assistant's words about Miso.
    browser.js("document.querySelector('#search-all select[name=mode]').value = 'keyword';");
    browser.type_into(
        &browser.find("#search-all textarea[name=filter]"),
        r#"{"eq": {"path": "role", "value": "assistant"}}"#,
    );
    browser.click(&browser.find("#search-all button[type=submit]"));
    browser.wait_for("document.body.innerText.includes('hits, best first (keyword)')");
    let hits = browser.js("return document.querySelector('#search-hits').innerText;");
    let hits = hits.as_str().unwrap();
    assert_eq!(
        browser.js("return document.querySelectorAll('#search-hits .card').length;"),
        json!(1),
        "{hits}"
    );
    assert!(hits.contains("Noted: Miso the cat"), "{hits}");
    browser.js("document.querySelector('#search-all textarea[name=filter]').value = '';");
    browser.js("document.querySelector('#search-all select[name=mode]').value = 'hybrid';");
    browser.screenshot(&shots.join("sessions.png"));

    // Click through a session: the conversation, marks, a search within it.
    browser.click(&browser.find_xpath("//a[@class='session-link' and text()='chat-1']"));
    browser.wait_for("document.querySelectorAll('#messages .card').length === 3");
    assert_eq!(
        browser.js("return location.hash;"),
        json!("#/session/chat-1")
    );
    let text = browser.text();
    assert!(text.contains("My cat is called Miso"), "{text}");
    assert!(
        text.contains(XSS_MESSAGE),
        "the payload is shown as text: {text}"
    );
    assert!(text.contains("3 messages"), "{text}");
    browser.click(&browser.find_xpath("//button[text()='Load marks']"));
    browser.wait_for("document.querySelectorAll('#messages .mark').length === 1");
    assert_eq!(
        browser.js("return document.querySelector('#messages .card .mark').textContent;"),
        json!("important")
    );
    browser.type_into(&browser.find("#search-one input[name=q]"), "Miso the cat");
    browser.click(&browser.find("#search-one button[type=submit]"));
    browser.wait_for("document.querySelectorAll('#session-hits .card').length === 3");
    let first = browser.js("return document.querySelector('#session-hits .card').innerText;");
    assert!(first.as_str().unwrap().contains("Miso"), "{first}");
    // Token counts: the newest messages within a budget.
    browser.type_into(&browser.find("input[name=tokens]"), "1000");
    browser.click(&browser.find_xpath("//button[text()='Show']"));
    browser.wait_for("document.body.innerText.includes('cl100k tokens')");
    browser.screenshot(&shots.join("session.png"));
    assert_no_xss(&browser);

    // Assets: the list, a pasted reference resolved.
    browser.goto(&format!("{ui}#/assets"));
    browser.js("window.__violations = []; document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective));");
    browser.wait_for("document.querySelectorAll('#asset-list a.asset-link').length === 3");
    assert!(browser.text().contains(XSS_ASSET));
    browser.type_into(
        &browser.find("#resolve-input"),
        "asset://photo-1/content/camera/make",
    );
    browser.click(&browser.find("#resolve button[type=submit]"));
    browser.wait_for("document.querySelector('#resolve-out').innerText.includes('Acme')");
    browser.screenshot(&shots.join("assets.png"));

    // Filtered by a field inside the content (POST /v1/query/assets), then a bad filter: its
    // message is shown, not a blank list.
    browser.type_into(
        &browser.find("#asset-filter textarea[name=filter]"),
        r#"{"contains": {"path": "content.labels", "value": "cat"}}"#,
    );
    browser.click(&browser.find("#asset-filter button[type=submit]"));
    browser.wait_for(
        "document.querySelectorAll('#asset-list a.asset-link').length === 1 \
         && document.querySelector('#asset-list a.asset-link').textContent === 'photo-1'",
    );
    browser.js(
        "document.querySelector('#asset-filter textarea').value = '{\"eq\": {\"path\": \"a\"}}';",
    );
    browser.click(&browser.find("#asset-filter button[type=submit]"));
    browser.wait_for("document.body.innerText.includes('expected `path` and `value`')");
    browser.js("document.querySelector('#asset-filter textarea').value = '';");
    browser.click(&browser.find("#asset-filter button[type=submit]"));
    browser.wait_for("document.querySelectorAll('#asset-list a.asset-link').length === 3");

    // One asset: its meta as a tree and flattened; a clicked field gives its reference.
    browser.click(&browser.find_xpath("//a[@class='asset-link' and text()='photo-1']"));
    browser.wait_for("document.querySelectorAll('#meta-flat tbody tr').length >= 6");
    browser.click(&browser.find_xpath("//div[@id='meta-tree']//button[text()='iso']"));
    assert_eq!(
        browser.js("return document.querySelector('#picked-ref').textContent;"),
        json!("asset://photo-1/content/camera/iso")
    );
    browser.click(&browser.find("#resolve button[type=submit]"));
    browser.wait_for("document.querySelector('#resolve-out pre') && document.querySelector('#resolve-out pre').textContent === '200'");
    browser
        .click(&browser.find_xpath("//table[@id='meta-flat']//button[text()='content/labels/1']"));
    assert_eq!(
        browser.js("return document.querySelector('#picked-ref').textContent;"),
        json!("asset://photo-1/content/labels/1")
    );
    browser.screenshot(&shots.join("asset-meta.png"));

    // An image asset: previewed from a blob: URL, never as base64 text.
    browser.goto(&format!("{ui}#/asset/logo"));
    browser.wait_for("document.querySelector('#content-image') && document.querySelector('#content-image').naturalWidth === 96");
    assert!(
        browser
            .js("return document.querySelector('#content-image').src;")
            .as_str()
            .unwrap()
            .starts_with("blob:")
    );
    assert!(browser.text().contains("image/png"));
    assert!(!browser.text().contains("iVBOR"), "no base64 on screen");
    browser.screenshot(&shots.join("asset-image.png"));

    // The asset whose id is a payload.
    browser.goto(&format!("{ui}#/asset/{}", urlencode(XSS_ASSET)));
    browser.wait_for("document.querySelectorAll('#meta-flat tbody tr').length > 0");
    assert_eq!(
        browser.js("return document.querySelector('#asset-id').textContent;"),
        json!(XSS_ASSET)
    );
    // Its field's reference is canonical (percent-encoded as `AssetRef::to_url` writes it)
    // and the server resolves it.
    browser.click(&browser.find_xpath("//table[@id='meta-flat']//button[text()='content/note']"));
    assert_eq!(
        browser.js("return document.querySelector('#picked-ref').textContent;"),
        json!(format!("asset://{}/content/note", urlencode(XSS_ASSET)))
    );
    browser.click(&browser.find("#resolve button[type=submit]"));
    browser.wait_for("document.querySelector('#resolve-out pre')");
    assert_eq!(
        browser.js("return document.querySelector('#resolve-out pre').textContent;"),
        json!(serde_json::to_string(XSS_MESSAGE).unwrap())
    );
    assert_no_xss(&browser);

    // Artifacts: the scopes to click (GET /v1/artifacts/scopes), sorted, the payload as text.
    browser.goto(&format!("{ui}#/artifacts"));
    browser.js("window.__violations = []; document.addEventListener('securitypolicyviolation', (e) => window.__violations.push(e.violatedDirective));");
    browser.wait_for("document.querySelectorAll('#artifact-scopes a.scope-link').length === 2");
    let scopes = browser.js(
        "return Array.from(document.querySelectorAll('#artifact-scopes a.scope-link')).map((n) => n.textContent);",
    );
    assert_eq!(scopes, json!([XSS_ASSET, "chat-1"]));
    assert_no_xss(&browser);
    // Keys with their history, newest first; a record's content; the prompt block.
    browser.click(&browser.find_xpath("//a[@class='scope-link' and text()='chat-1']"));
    browser.wait_for("document.querySelectorAll('.artifact-key').length === 2");
    assert_eq!(
        browser.js("return location.hash;"),
        json!("#/artifacts?scope=chat-1")
    );
    assert_eq!(
        browser.js("return document.querySelector('#artifact-scope').textContent;"),
        json!("chat-1")
    );
    let names = browser.js(
        "return Array.from(document.querySelectorAll('.artifact-name')).map((n) => n.textContent);",
    );
    assert_eq!(names, json!(["Plan v2", "Plan v1", XSS_ARTIFACT]));
    // Regression: `replaceChildren(null)` wrote the text "null" above the keys.
    let keys = browser.js("return document.querySelector('#artifact-keys').innerText;");
    assert!(!keys.as_str().unwrap().contains("null"), "{keys}");
    browser.click(&browser.find(".artifact-link"));
    browser.wait_for("document.querySelector('#artifact-detail pre')");
    assert!(
        browser
            .js("return document.querySelector('#artifact-detail').innerText;")
            .as_str()
            .unwrap()
            .contains("ship")
    );
    browser.click(&browser.find("#load-form button[type=submit]"));
    browser.wait_for("document.querySelector('#prompt-text')");
    let block = browser.js("return document.querySelector('#prompt-text').textContent;");
    assert!(
        block.as_str().unwrap().starts_with("RELATED ARTIFACTS"),
        "{block}"
    );
    assert!(block.as_str().unwrap().contains(XSS_ARTIFACT), "{block}");
    browser.screenshot(&shots.join("artifacts.png"));
    assert_no_xss(&browser);

    // Libraries: a question, the bits with their scores and token use.
    browser.goto(&format!("{ui}#/library"));
    browser.wait_for("document.querySelector('#library-info').innerText.includes('bits')");
    browser.type_into(
        &browser.find("#ask input[name=question]"),
        "how do bees keep warm in winter",
    );
    browser.click(&browser.find("#ask button[type=submit]"));
    browser.wait_for("document.querySelectorAll('#library-results .bit').length > 0");
    let results = browser.js("return document.querySelector('#library-results').innerText;");
    assert!(
        results.as_str().unwrap().contains("similarity"),
        "{results}"
    );
    assert!(
        results.as_str().unwrap().contains("tokens used"),
        "{results}"
    );
    browser.screenshot(&shots.join("library.png"));

    // Status: from GET /v1/status, with the server's recent errors (a provoked one).
    let client = reqwest::blocking::Client::new();
    let missing = client
        .get(format!("{}/v1/assets/status-probe-missing", running.rest))
        .send()
        .unwrap();
    assert_eq!(missing.status(), reqwest::StatusCode::NOT_FOUND);
    browser.goto(&format!("{ui}#/status"));
    browser.wait_for("document.querySelector('#status').innerText.includes('recent errors')");
    let status = browser.text();
    assert!(
        status.contains("ready") && status.contains("sessions") && status.contains("2"),
        "{status}"
    );
    assert_eq!(
        browser.js("return document.querySelector('#status-version').textContent;"),
        json!(env!("CARGO_PKG_VERSION"))
    );
    let shown = browser.js("return document.querySelector('#status-backend').textContent;");
    assert!(
        shown.as_str().unwrap().starts_with(&format!("{backend}, ")),
        "{shown}"
    );
    let errors = browser.js("return document.querySelector('#status-errors').innerText;");
    assert!(
        errors.as_str().unwrap().contains("/v1/assets/{asset_id}")
            && errors.as_str().unwrap().contains("asset_not_found"),
        "{errors}"
    );
    assert!(status.contains("max body bytes"), "{status}");
    browser.screenshot(&shots.join("status.png"));

    // With a key: kept for the browser session, sent as a bearer token (the open server
    // accepts any request, so the pages still load).
    browser.type_into(&browser.find("#key-input"), "mk_test_key");
    browser.click(&browser.find("#key-use"));
    browser.wait_for("document.querySelector('#key-state').textContent.includes('key set')");
    assert_eq!(
        browser.js("return sessionStorage.getItem('mnemon.inspector.key');"),
        json!("mk_test_key")
    );
    assert_no_xss(&browser);
}

/// A server over a fresh data directory, the browser to drive and an HTTP client. The fields
/// drop in order: the server stops before its directory is removed.
struct Fresh {
    chromium: PathBuf,
    driver: PathBuf,
    running: crate::support::Running,
    client: reqwest::blocking::Client,
    _dir: tempfile::TempDir,
}

/// A [`Fresh`] server, or `None` when no browser is installed (`webdriver::find` says so).
fn fresh() -> Option<Fresh> {
    let (chromium, driver) = webdriver::find()?;
    let dir = tempfile::tempdir().unwrap();
    let running = start(mnemon_ops::Stores::open(dir.path()).unwrap());
    crate::support::crypto();
    Some(Fresh {
        chromium,
        driver,
        _dir: dir,
        running,
        client: reqwest::blocking::Client::new(),
    })
}

/// A page that fails to load leaves the pager usable where it was: before, both buttons stayed
/// disabled after one failed load (a busy server, a cursor gone stale) until the user left the
/// page. A malformed escape in the address shows an error instead of nothing.
#[test]
fn a_failed_page_load_leaves_the_pager_usable() {
    let Some(fresh) = fresh() else {
        return;
    };
    let (running, client) = (&fresh.running, &fresh.client);
    for i in 0..60 {
        call(
            client,
            Method::PUT,
            &format!("{}/v1/assets/a{i:02}", running.rest),
            Some(json!({"content": {"n": i}})),
        );
    }
    let browser = Browser::start(&fresh.chromium, &fresh.driver);
    browser.goto(&format!("{}/ui/#/assets", running.base));
    browser.wait_for("document.querySelectorAll('#asset-list li').length === 50");
    let pager = "Array.from(document.querySelectorAll('#main .bar')).pop()";
    let state = |browser: &Browser| {
        browser.js(&format!(
            "const [p, n, i] = {pager}.children; return [p.disabled, n.disabled, i.textContent];"
        ))
    };
    assert_eq!(state(&browser), json!([true, false, "page 1"]));
    // The next page's request fails once.
    browser.js(
        "window.__fetch = window.fetch; \
         window.fetch = () => { window.fetch = window.__fetch; return Promise.reject(new Error('the network is down')); };",
    );
    browser.js(&format!("{pager}.children[1].click();"));
    browser.wait_for(&format!(
        "{pager}.children[2].textContent.includes('the network is down')"
    ));
    let after = state(&browser);
    assert_eq!(after[0], json!(true), "no earlier page: {after}");
    assert_eq!(after[1], json!(false), "next must stay usable: {after}");
    // Next again: page 2, and previous back to page 1.
    browser.js(&format!("{pager}.children[1].click();"));
    browser.wait_for("document.querySelectorAll('#asset-list li').length === 10");
    assert_eq!(state(&browser), json!([false, true, "page 2"]));
    browser.js(&format!("{pager}.children[0].click();"));
    browser.wait_for("document.querySelectorAll('#asset-list li').length === 50");
    assert_eq!(state(&browser), json!([true, false, "page 1"]));

    browser.goto(&format!("{}/ui/#/session/%E0", running.base));
    browser.wait_for("document.querySelector('#main .error') !== null");
    let shown = browser.js("return document.querySelector('#main .error').textContent;");
    assert!(shown.as_str().unwrap().contains("URI"), "{shown}");
}

/// A field named `__proto__` (a key of a message's content, or a message's extra field) is shown
/// like any other: assigned into a plain object it set that object's prototype instead, and
/// vanished from the page.
#[test]
fn fields_named_proto_are_shown() {
    let Some(fresh) = fresh() else {
        return;
    };
    let (running, client) = (&fresh.running, &fresh.client);
    call(
        client,
        Method::POST,
        &format!("{}/v1/memory/sessions/proto/messages", running.rest),
        Some(json!({"messages": [{"name": "user", "role": "user",
            "content": {"shown": 1, "__proto__": {"hidden": "kept in the content"}},
            "__proto__": {"hidden": "kept as an extra field"}}]})),
    );
    let browser = Browser::start(&fresh.chromium, &fresh.driver);
    browser.goto(&format!("{}/ui/#/session/proto", running.base));
    browser.wait_for("document.querySelectorAll('#messages .card').length === 1");
    let card = browser.js("return document.querySelector('#messages .card').textContent;");
    let card = card.as_str().unwrap();
    assert!(
        card.contains("kept in the content") && card.contains("kept as an extra field"),
        "{card}"
    );
}

/// An asset whose id is "." cannot be read over HTTP (a URL drops the segment): its page says
/// so. It fetched `/v1/assets/./content`, that is the asset "content", and showed another
/// record under its name.
#[test]
fn an_asset_named_dot_is_not_shown_with_another_ones_content() {
    let Some(fresh) = fresh() else {
        return;
    };
    let (running, client) = (&fresh.running, &fresh.client);
    for (id, marker) in [
        ("content", "the asset named content"),
        (".", "the asset named dot"),
    ] {
        call(
            client,
            Method::POST,
            &format!("{}/v1/assets", running.rest),
            Some(json!({"asset_id": id, "asset_type": "note", "content": {"marker": marker}})),
        );
    }
    let browser = Browser::start(&fresh.chromium, &fresh.driver);
    browser.goto(&format!("{}/ui/#/asset/.", running.base));
    browser.wait_for(
        "document.querySelector('#main').textContent.includes('cannot be read over HTTP')",
    );
    let main = browser.js("return document.querySelector('#main').textContent;");
    assert!(
        !main.as_str().unwrap().contains("the asset named content"),
        "{main}"
    );
}
