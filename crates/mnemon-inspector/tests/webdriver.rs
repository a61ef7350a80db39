//! Just enough of the W3C WebDriver protocol, over HTTP with reqwest, to drive headless
//! Chromium through `chromedriver` (Debian: `apt-get install chromium chromium-driver`).
//!
//! Without the two programs the browser tests print one `SKIPPED:` line and pass, except
//! when `MNEMON_REQUIRE_BROWSER=1` (CI), where they fail.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::blocking::Client;
use serde_json::{Value, json};

/// The key WebDriver names element references by.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long a wait for the page lasts before the test fails.
const WAIT: Duration = Duration::from_secs(15);

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// The Chromium binary and chromedriver: `MNEMON_CHROMIUM` / `MNEMON_CHROMEDRIVER`, else
/// found on the PATH. `None` (after one loud line) when missing and not required.
pub fn find() -> Option<(PathBuf, PathBuf)> {
    let browser = std::env::var_os("MNEMON_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| on_path(&["chromium", "chromium-browser", "google-chrome"]));
    let driver = std::env::var_os("MNEMON_CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| on_path(&["chromedriver"]));
    match (browser, driver) {
        (Some(b), Some(d)) => Some((b, d)),
        _ => {
            let why = "Chromium and chromedriver are not installed \
                       (Debian: apt-get install -y chromium chromium-driver)";
            if std::env::var("MNEMON_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
                panic!("MNEMON_REQUIRE_BROWSER=1 but {why}");
            }
            eprintln!("SKIPPED: the inspector's browser tests: {why}");
            None
        }
    }
}

/// chromedriver on a loopback port with one headless Chromium session; both end on drop.
pub struct Browser {
    driver: Child,
    client: Client,
    session: String,
    /// chromedriver's log (its `--log-path`), removed on drop.
    log: std::path::PathBuf,
}

/// The last lines of chromedriver's log at `path`, for a failure's message.
fn log_tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.client.delete(self.url("")).send();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Browser {
    /// Starts chromedriver and a 1280 x 900 headless Chromium.
    pub fn start(browser: &std::path::Path, driver: &std::path::Path) -> Browser {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Its log is kept for the message of a failure to start (a missing library, a
        // version mismatch with Chromium): otherwise only "did not start" would be known.
        let log = std::env::temp_dir().join(format!("mnemon-chromedriver-{port}.log"));
        let child = Command::new(driver)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .arg(format!("--log-path={}", log.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", driver.display()));
        crate::support::crypto();
        let client = Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while client.get(format!("{base}/status")).send().is_err() {
            assert!(
                started.elapsed() < WAIT,
                "chromedriver did not start; its log ends:\n{}",
                log_tail(&log)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut args = vec![
            "--headless=new",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--lang=en-US",
        ];
        // Chromium's sandbox refuses to run as root (containers, CI).
        if running_as_root() {
            args.push("--no-sandbox");
        }
        let answer: Value = client
            .post(format!("{base}/session"))
            .json(&json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {"binary": browser, "args": args},
            }}}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| {
                panic!(
                    "no WebDriver session: {answer}; chromedriver's log ends:\n{}",
                    log_tail(&log)
                )
            })
            .to_owned();
        Browser {
            driver: child,
            client,
            session: format!("{base}/session/{session}"),
            log,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.session)
    }

    fn post(&self, path: &str, body: Value) -> Value {
        let answer: Value = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .unwrap()
            .json()
            .unwrap();
        if answer["value"].get("error").is_some() {
            panic!("WebDriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    /// Opens `url`.
    pub fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url}));
    }

    /// Runs `script` (a function body; `arguments` available) in the page, answers its result.
    pub fn js(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
    }

    /// Waits until `condition` (a JavaScript expression) is truthy.
    pub fn wait_for(&self, condition: &str) {
        let started = Instant::now();
        loop {
            if self.js(&format!("return !!({condition});")) == json!(true) {
                return;
            }
            if started.elapsed() > WAIT {
                let text = self.js("return document.body.innerText;");
                panic!("timed out waiting for {condition}; the page shows:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The element `css` selects (the first), by WebDriver's own lookup.
    pub fn find(&self, css: &str) -> String {
        self.find_by("css selector", css)
    }

    /// The element an XPath selects.
    pub fn find_xpath(&self, xpath: &str) -> String {
        self.find_by("xpath", xpath)
    }

    fn find_by(&self, using: &str, value: &str) -> String {
        let found = self.post("/element", json!({"using": using, "value": value}));
        found[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {value}: {found}"))
            .to_owned()
    }

    /// Clicks an element as a person would (scrolled into view, pointer events).
    pub fn click(&self, element: &str) {
        self.post(&format!("/element/{element}/click"), json!({}));
    }

    /// Types `text` into an element.
    pub fn type_into(&self, element: &str, text: &str) {
        self.post(&format!("/element/{element}/clear"), json!({}));
        self.post(&format!("/element/{element}/value"), json!({"text": text}));
    }

    /// The visible text of the page.
    pub fn text(&self) -> String {
        self.js("return document.body.innerText;")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Saves a PNG of the window to `path`.
    pub fn screenshot(&self, path: &std::path::Path) {
        let answer: Value = self
            .client
            .get(self.url("/screenshot"))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(answer["value"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        std::fs::write(path, png).unwrap();
    }
}

/// Whether the tests run as root (uid 0), read from `/proc/self/status` (no libc needed).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    })
}
