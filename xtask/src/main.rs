//! Project automation: `cargo xtask <task>`.
//!
//! - `ci`: runs `.ci/run` (formatting, lints, docs, `test`, the examples, a release rehearsal).
//! - `test [--no-clients]`: every test on a fresh machine: installs PostgreSQL for its suites,
//!   `cargo test --workspace`, then the original clients in `tests/clients/`.
//! - `codegen [--check]`: JSON Schemas of the wire formats into `docs/schemas/`.
//! - `release <VERSION> [--dry-run]`: bump every crate together and package them in dependency
//!   order.
//! - `bench <library|host|memory-stream|stores|ann|server|recall|writers>`: the benchmarks that check
//!   the issues' performance targets.
//! - `postgres install`: the PostgreSQL 16 + pgvector binaries the tests start themselves
//!   (docs/postgres.md).

use anyhow::{Result, bail};

mod apt;
mod bench_ann;
mod bench_host;
mod bench_library;
mod bench_memory;
#[path = "bench/recall.rs"]
mod bench_recall;
mod bench_server;
mod bench_stores;
#[path = "bench/writers.rs"]
mod bench_writers;
mod cargo;
mod chromium;
mod ci;
mod codegen;
mod postgres;
mod release;
mod test;

const USAGE: &str = "usage: cargo xtask <task>

tasks:
  ci                              run .ci/run: fmt, clippy, docs, all tests, client checks
  test [--no-clients]             every test: PostgreSQL install, cargo test, the original clients
  codegen [--check]               write JSON Schemas to docs/schemas (--check: fail if stale)
  release <VERSION> [--dry-run]   bump all crate versions, check the CHANGELOG, cargo package
  bench <library|host|memory-stream|stores|ann|server|recall|writers>
                                  run a benchmark and print its report
  postgres install                download PostgreSQL 16 + pgvector into target/postgres (tests)
  chromium install                apt-get Chromium + chromedriver (the inspector's browser tests)";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or_default();
    match args.first().map(String::as_str) {
        Some("ci") => ci::run(),
        Some("test") => test::run(rest),
        Some("codegen") => codegen::run(rest),
        Some("release") => release::run(rest),
        Some("bench") => bench(rest),
        Some("postgres") => postgres::run(rest),
        Some("chromium") => chromium::run(rest),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown task {other:?}\n\n{USAGE}"),
        None => bail!("{USAGE}"),
    }
}

fn bench(args: &[String]) -> Result<()> {
    let rest = args.get(1..).unwrap_or_default();
    match args.first().map(String::as_str) {
        Some("library") => bench_library::run(rest),
        Some("host") => bench_host::run(rest),
        Some("memory-stream") => bench_memory::run(rest),
        Some("stores") => bench_stores::run(rest),
        Some("ann") => bench_ann::run(rest),
        Some("server") => bench_server::run(rest),
        Some("recall") => bench_recall::run(rest),
        Some("writers") => bench_writers::run(rest),
        Some(other) => {
            bail!(
                "unknown benchmark {other:?}; available: library, host, memory-stream, stores, ann, server, recall, writers"
            )
        }
        None => bail!("usage: cargo xtask bench <name>"),
    }
}
