//! The inspector's files over HTTP: every `/ui` response, errors and redirects included, has the
//! strict Content-Security-Policy and `nosniff`; the files have their media types.

use crate::support::start;

#[test]
fn every_ui_response_has_the_security_headers() {
    let dir = tempfile::tempdir().unwrap();
    let running = start(mnemon_ops::Stores::open(dir.path()).unwrap());
    crate::support::crypto();
    let client = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (path, status, media) in [
        ("/ui/", 200, "text/html; charset=utf-8"),
        ("/ui/index.html", 200, "text/html; charset=utf-8"),
        ("/ui/app.js", 200, "text/javascript; charset=utf-8"),
        ("/ui/app.css", 200, "text/css; charset=utf-8"),
        ("/ui/missing.js", 404, "text/plain; charset=utf-8"),
        ("/ui/a/b/../c", 404, "text/plain; charset=utf-8"),
        ("/ui", 308, ""),
    ] {
        let response = client
            .get(format!("{}{path}", running.base))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{path}");
        let headers = response.headers();
        assert_eq!(
            headers["content-security-policy"],
            mnemon_inspector::CONTENT_SECURITY_POLICY,
            "{path}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["x-frame-options"], "DENY", "{path}");
        if !media.is_empty() {
            assert_eq!(headers["content-type"], media, "{path}");
        } else {
            assert_eq!(headers["location"], "/ui/");
        }
    }
    // The library host's `GET /` page links to the inspector.
    let page = client
        .get(format!("{}/", running.base))
        .header("Accept", "text/html")
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(page.contains("\"/ui/\""), "{page}");
    let script = client
        .get(format!("{}/ui/app.js", running.base))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert_eq!(script, include_str!("../assets/app.js"));
}
