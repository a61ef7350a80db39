//! Crash tests' children: a child process that says when it is ready, then is killed at a
//! chosen moment of its work.
//!
//! A child started by a test binary (debug build, test harness, opening a store, perhaps a
//! PostgreSQL pool) can take from a few milliseconds to over a second to start, depending on
//! the machine and its load. A kill timed from the spawn would then land before any write on
//! a slow machine and prove nothing; timed from the child's [`READY`] line it lands during the
//! writes everywhere.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The line a child prints (and flushes) once its store is open, before its first write.
pub const READY: &str = "READY";

/// How long a child may take to print [`READY`].
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Prints [`READY`] on a line of its own on stdout and flushes it: what a child calls once
/// its store is open. The line starts with a line break, because the test harness (run with
/// `--nocapture`) leaves the line `test <name> ... ` open when the test starts.
pub fn say_ready() {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{READY}").unwrap_or_else(|e| panic!("writing READY: {e}"));
    out.flush()
        .unwrap_or_else(|e| panic!("flushing READY: {e}"));
}

/// Starts `command` with its stdout piped (stderr kept in a file), waits for its [`READY`]
/// line, lets it work for `delay`, kills it with SIGKILL, and returns the lines it printed
/// after `READY` that start with `prefix`, with the prefix taken off: what it acknowledged
/// before the kill.
///
/// Panics when the child ends or stays silent for [`READY_TIMEOUT`] before `READY`, with the
/// end of what it wrote to stderr (why it failed to start).
pub fn kill_after_ready(command: &mut Command, delay: Duration, prefix: &str) -> Vec<String> {
    let stderr = tempfile::NamedTempFile::new()
        .unwrap_or_else(|e| panic!("a file for the child's stderr: {e}"));
    let errors = stderr
        .reopen()
        .unwrap_or_else(|e| panic!("a file for the child's stderr: {e}"));
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(errors)
        .spawn()
        .unwrap_or_else(|e| panic!("starting the child: {e}"));
    let Some(stdout) = child.stdout.take() else {
        panic!("the child's stdout is not piped");
    };
    let (lines, received) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok(line) if line == READY => break,
            Ok(_) => {}
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                let written = std::fs::read(stderr.path()).unwrap_or_default();
                let tail = &written[written.len().saturating_sub(4000)..];
                panic!(
                    "the child did not say {READY} on a line of its own ({e}); its stderr \
                     ends:\n{}",
                    String::from_utf8_lossy(tail)
                );
            }
        }
    }
    std::thread::sleep(delay);
    child
        .kill() // SIGKILL on Unix
        .unwrap_or_else(|e| panic!("killing the child: {e}"));
    child
        .wait()
        .unwrap_or_else(|e| panic!("waiting for the child: {e}"));
    reader
        .join()
        .unwrap_or_else(|_| panic!("the child's reader panicked"));
    received
        .try_iter()
        .filter_map(|line| line.strip_prefix(prefix).map(str::to_owned))
        .collect()
}
