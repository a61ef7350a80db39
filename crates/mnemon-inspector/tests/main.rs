//! The inspector end to end (docs/reference/inspector.md): its files and headers over HTTP, the
//! pages in headless Chromium through WebDriver against a server with seeded data, and the
//! server time of the REST calls each page makes on a 100,000-message namespace (ignored:
//! `cargo test --release -p mnemon-inspector --test inspector -- --ignored --nocapture page_times`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod browser;
mod headers;
mod perf;
mod support;
mod webdriver;
