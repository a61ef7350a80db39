//! `cargo xtask bench memory-stream`: peak memory of the memory commands on a large session
//! (issue 11, item 14: export, `show --recent 1` and import must stream, each under 150 MB at
//! 650,000 messages).
//!
//! Builds the release `mnemon` binary, writes under `target/bench-memory/` a session file of
//! `--messages` messages (default 650,000: about 248 MB in the 0.0.x export layout) and an
//! import file of about `--import-mb` MB (default 200), then runs each command once under
//! `/usr/bin/time -v` and reports its maximum resident set size and wall time:
//!
//! 1. `memory import` of the session file into session `big`;
//! 2. `memory export --session big` (the file must equal the session file byte for byte: the
//!    generator writes exactly the export layout);
//! 3. `memory show --session big --recent 1`;
//! 4. `memory import` of the import file into a new session.
//!
//! The machine is shared and noisy: run it more than once and report ranges.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cargo;

/// The target for each command's peak RSS.
const TARGET_MB: f64 = 150.0;

const USAGE: &str =
    "usage: cargo xtask bench memory-stream [--messages N] [--import-mb M] [--keep]";

struct Params {
    messages: usize,
    import_mb: usize,
    keep: bool,
}

fn parse(args: &[String]) -> Result<Params> {
    let mut p = Params {
        messages: 650_000,
        import_mb: 200,
        keep: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value; {USAGE}"))?
                .parse()
                .with_context(|| format!("{name} needs a whole number; {USAGE}"))
        };
        match a.as_str() {
            "--messages" => p.messages = value("--messages")?,
            "--import-mb" => p.import_mb = value("--import-mb")?,
            "--keep" => p.keep = true,
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    Ok(p)
}

/// Runs the benchmark. `args` are the words after `bench memory-stream`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let params = parse(args)?;
    let root = cargo::workspace_root();
    cargo::run_in(&root, &["build", "--release", "--quiet", "-p", "mnemon"])?;
    let bin = root.join("target/release/mnemon");
    let dir = root.join("target/bench-memory");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let session_file = dir.join("session.json");
    let import_file = dir.join("import.json");
    let exported = dir.join("export.json");
    let data = dir.join("data");

    let session_bytes = write_export(&session_file, "s", Limit::Messages(params.messages))?;
    let import_bytes = write_export(
        &import_file,
        "i",
        Limit::Bytes(params.import_mb.saturating_mul(1_000_000)),
    )?;
    println!(
        "session file: {} messages, {:.1} MB; import file: {:.1} MB",
        params.messages,
        mb(session_bytes),
        mb(import_bytes)
    );

    let data_arg = data.to_string_lossy().into_owned();
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let steps: Vec<(String, Vec<String>)> = vec![
        (
            format!("import {} messages", params.messages),
            vec![
                "memory".into(),
                "import".into(),
                path(&session_file),
                "--session".into(),
                "big".into(),
            ],
        ),
        (
            "export".into(),
            vec![
                "memory".into(),
                "export".into(),
                "--session".into(),
                "big".into(),
                path(&exported),
            ],
        ),
        (
            "show --recent 1".into(),
            vec![
                "memory".into(),
                "show".into(),
                "--session".into(),
                "big".into(),
                "--recent".into(),
                "1".into(),
            ],
        ),
        (
            format!("import {:.0} MB (new session)", mb(import_bytes)),
            vec![
                "memory".into(),
                "import".into(),
                path(&import_file),
                "--session".into(),
                "fresh".into(),
            ],
        ),
    ];
    println!("{:<32} {:>12} {:>10}", "command", "max RSS MB", "wall s");
    let mut over = Vec::new();
    for (name, args) in &steps {
        let (rss_mb, seconds) = measure(&bin, &data_arg, args)?;
        println!("{name:<32} {rss_mb:>12.1} {seconds:>10.2}");
        if rss_mb >= TARGET_MB {
            over.push(name.clone());
        }
    }
    if !same_bytes(&session_file, &exported)? {
        bail!("the export differs from the imported session file");
    }
    println!("export equals the session file byte for byte");
    if !params.keep {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    if !over.is_empty() {
        bail!("peak RSS at or over {TARGET_MB} MB: {}", over.join(", "));
    }
    Ok(())
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// Runs `mnemon --data-dir DATA ARGS` under `/usr/bin/time -v`; returns (max RSS in MB, wall
/// seconds).
fn measure(bin: &Path, data: &str, args: &[String]) -> Result<(f64, f64)> {
    let start = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(bin)
        .arg("--data-dir")
        .arg(data)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running /usr/bin/time -v (GNU time) on mnemon")?;
    let seconds = start.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("mnemon {} failed: {stderr}", args.join(" "));
    }
    let kb: u64 = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("Maximum resident set size (kbytes):"))
        .and_then(|v| v.trim().parse().ok())
        .context("no maximum resident set size in /usr/bin/time -v's report")?;
    Ok((kb as f64 / 1024.0, seconds))
}

/// How much a generated file holds.
#[derive(Clone, Copy)]
enum Limit {
    Messages(usize),
    Bytes(usize),
}

/// Writes a synthetic session in AgentScope 0.0.x's export layout (what `memory export`
/// writes: 4-space indent, no final newline), about 380 bytes per message; ids are
/// `{prefix}` and the index, so two files never share ids. Returns the file's size.
fn write_export(path: &PathBuf, prefix: &str, limit: Limit) -> Result<u64> {
    const WORDS: [&str; 8] = [
        "harbour", "ferry", "tide", "quay", "morning", "report", "boats", "weather",
    ];
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut written = 0usize;
    let mut i = 0usize;
    loop {
        let done = match limit {
            Limit::Messages(n) => i >= n,
            Limit::Bytes(n) => written >= n,
        };
        if done {
            break;
        }
        let mut content = format!("Message {i}:");
        let mut w = i;
        while content.len() < 180 {
            content.push(' ');
            content.push_str(WORDS[w % WORDS.len()]);
            w = w / 3 + 7;
        }
        let (name, role) = if i.is_multiple_of(2) {
            ("Mara", "user")
        } else {
            ("Harbourmaster", "assistant")
        };
        let item = format!(
            "{}{{\n        \"id\": \"{prefix}{i:031}\",\n        \"timestamp\": \"2024-03-05 \
             08:{:02}:{:02}\",\n        \"name\": \"{name}\",\n        \"content\": \"{content}\",\n        \
             \"role\": \"{role}\",\n        \"url\": null\n    }}",
            if i == 0 { "[\n    " } else { ",\n    " },
            (i / 60) % 60,
            i % 60,
        );
        out.write_all(item.as_bytes())?;
        written += item.len();
        i += 1;
    }
    let end: &[u8] = if i == 0 { b"[]" } else { b"\n]" };
    out.write_all(end)?;
    out.flush()?;
    Ok((written + end.len()) as u64)
}

/// Whether two files hold the same bytes, compared in blocks.
fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    let open = |p: &Path| -> Result<BufReader<File>> {
        Ok(BufReader::new(
            File::open(p).with_context(|| format!("opening {}", p.display()))?,
        ))
    };
    let (mut a, mut b) = (open(a)?, open(b)?);
    let (mut x, mut y) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = read_full(&mut a, &mut x)?;
        let m = read_full(&mut b, &mut y)?;
        if n != m || x.get(..n) != y.get(..m) {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or the file ends; returns how many bytes were read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while let Some(rest) = buf.get_mut(n..) {
        if rest.is_empty() {
            break;
        }
        match r.read(rest)? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
