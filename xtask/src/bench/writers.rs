//! `cargo xtask bench writers`: concurrent durable writes from one process to one SQLite file,
//! across stores and namespaces, as a server of several tenants makes them
//! (docs/ARCHITECTURE.md, mnemon-db: writers take turns; mnemon-memory: the shared file).
//!
//! Each run writes to a fresh file under `target/bench-writers/`, at the default durability
//! (`full`: an acknowledged write is on disk), from threads that each make `--writes` writes,
//! one at a time: memory adds of one message (concurrent adds share commits through the group
//! commit) and puts of one small asset (a commit each):
//!
//! 1. **one namespace, 4 adders**: the baseline, four writers sharing commits;
//! 2. **4 namespaces, 1 adder each**: four tenants. Their store handles share the file's memory
//!    writer, so they should add about as fast as the baseline: the verdict asks for at least
//!    [`SHARED_RATIO`] of it, in the same round;
//! 3. **2 asset putters + 2 adders**, one namespace: a put waits for its turn behind the batch
//!    of adds in progress, not behind the stream of adds: the verdict asks that at most
//!    [`MOST_ADDS_PER_PUT`] adds complete while one put waits (before writers took turns, a put
//!    polled SQLite's lock and waited for thousands).
//!
//! 4. **256 namespaces open, 4 adders over all of them**: every store of 256 namespaces opened
//!    on the file at once (`mnemon_ops::Stores`, as `mnemon serve` opens its tenants'), then
//!    four adders each cycling over every namespace. The verdict asks that the open
//!    namespaces hold at most [`MOST_FDS_PER_NAMESPACE`] file descriptors each (their handles
//!    share the file's connections: before, each held six) and add at least
//!    [`SHARED_RATIO`] of run 1's rate.
//!
//! The four runs alternate `--rounds` times, and each round is judged on its own. Timings
//! need an optimised build: a debug xtask re-runs itself with `cargo run --release`. The machine
//! is shared and noisy (its disk's `fdatasync` sets the rates): report ranges.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mnemon_memory::{Memory, MsgInput, Namespace, Scope, SqliteMemoryOptions, SqliteMemoryStore};
use mnemon_ops::{OpenOptions, Stores};
use mnemon_store::{AssetStore, SqliteAssetOptions, SqliteAssetStore};
use mnemon_types::Asset;

use crate::cargo;

const USAGE: &str = "usage: cargo xtask bench writers [--writes N] [--rounds R] [--keep]";

/// Run 2's rate over run 1's, at least.
const SHARED_RATIO: f64 = 0.8;

/// Memory adds completed while one asset put waited, at most (run 3).
const MOST_ADDS_PER_PUT: usize = 8;

/// Writer threads of each run.
const THREADS: usize = 4;

/// Namespaces open at once in run 4 (`mnemon serve` keeps 256 open by default).
const NAMESPACES: usize = 256;

/// File descriptors each open namespace may hold, at most, in run 4.
const MOST_FDS_PER_NAMESPACE: f64 = 0.25;

struct Params {
    writes: usize,
    rounds: usize,
    keep: bool,
}

fn parse(args: &[String]) -> Result<Params> {
    let mut p = Params {
        writes: 1_000,
        rounds: 3,
        keep: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut number = |name: &str, range: std::ops::RangeInclusive<usize>| -> Result<usize> {
            let value = it
                .next()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))?;
            let n: usize = value
                .parse()
                .with_context(|| format!("{name} {value:?} is not a count\n{USAGE}"))?;
            if !range.contains(&n) {
                bail!(
                    "{name} must be from {} to {}\n{USAGE}",
                    range.start(),
                    range.end()
                );
            }
            Ok(n)
        };
        match arg.as_str() {
            "--writes" => p.writes = number("--writes", 10..=100_000)?,
            "--rounds" => p.rounds = number("--rounds", 1..=20)?,
            "--keep" => p.keep = true,
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown option {other:?}\n{USAGE}"),
        }
    }
    Ok(p)
}

/// The latencies of one kind of write in one run.
#[derive(Default)]
struct Latencies {
    micros: Vec<u64>,
}

impl Latencies {
    fn push(&mut self, elapsed: Duration) {
        self.micros
            .push(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }

    fn extend(&mut self, other: Latencies) {
        self.micros.extend(other.micros);
    }

    /// `p50 / p99 / max` in ms.
    fn summary(&mut self) -> String {
        self.micros.sort_unstable();
        let at = |q: f64| {
            let n = self.micros.len();
            if n == 0 {
                return 0.0;
            }
            let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
            self.micros.get(i).copied().unwrap_or(0) as f64 / 1000.0
        };
        format!("{:.2} / {:.2} / {:.2}", at(0.5), at(0.99), at(1.0))
    }
}

/// Waits for writer threads and merges their latencies; the first error (or panic) fails all.
fn joined(handles: Vec<std::thread::ScopedJoinHandle<'_, Result<Latencies>>>) -> Result<Latencies> {
    let mut all = Latencies::default();
    for handle in handles {
        all.extend(
            handle
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("a writer panicked")))?,
        );
    }
    Ok(all)
}

fn memory_store(path: &Path, namespace: &str) -> Result<std::sync::Arc<SqliteMemoryStore>> {
    let namespace: Namespace = namespace.parse()?;
    Ok(SqliteMemoryStore::open(
        path,
        SqliteMemoryOptions {
            namespace,
            ..SqliteMemoryOptions::default()
        },
    )?)
}

fn message(n: usize) -> MsgInput {
    serde_json::json!({"id": format!("m{n}"), "name": "user", "role": "user",
                       "content": format!("note {n}")})
    .into()
}

/// `writes` single-message adds to session `session` of `store`, one at a time, counting each
/// in `added`.
fn add_loop(
    store: &std::sync::Arc<SqliteMemoryStore>,
    session: &str,
    writes: usize,
    added: &AtomicUsize,
) -> Result<Latencies> {
    let memory = store.memory(Scope::session(session))?;
    let mut latencies = Latencies::default();
    for n in 0..writes {
        let start = Instant::now();
        memory.add(vec![message(n)])?;
        latencies.push(start.elapsed());
        added.fetch_add(1, Ordering::SeqCst);
    }
    Ok(latencies)
}

/// Runs 1 and 2: `THREADS` adders, in one namespace or one each; (adds/s, latencies).
fn adders(dir: &Path, namespaces: usize, writes: usize) -> Result<(f64, Latencies)> {
    let path = dir.join("mnemon.sqlite3");
    let stores = (0..namespaces)
        .map(|i| memory_store(&path, &format!("tenant-{i}")))
        .collect::<Result<Vec<_>>>()?;
    let added = AtomicUsize::new(0);
    let start = Instant::now();
    let all = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (stores, added) = (&stores, &added);
                scope.spawn(move || {
                    let store = stores
                        .get(t % stores.len())
                        .context("a writer without a store")?;
                    add_loop(store, &format!("s{t}"), writes, added)
                })
            })
            .collect();
        joined(handles)
    })?;
    let wall = start.elapsed();
    Ok((all.micros.len() as f64 / wall.as_secs_f64(), all))
}

/// Run 3's figures.
struct Mixed {
    puts: Latencies,
    adds: Latencies,
    most_adds_per_put: usize,
}

/// Run 3: two putters and two adders in one namespace.
fn mixed(dir: &Path, writes: usize) -> Result<Mixed> {
    let path = dir.join("mnemon.sqlite3");
    let memory = memory_store(&path, "default")?;
    let assets = SqliteAssetStore::open_with(&path, SqliteAssetOptions::default())?;
    let added = AtomicUsize::new(0);
    let most = AtomicUsize::new(0);
    let (puts, adds) = std::thread::scope(|scope| -> Result<(Latencies, Latencies)> {
        let adders: Vec<_> = (0..2)
            .map(|t| {
                let (memory, added) = (&memory, &added);
                scope.spawn(move || add_loop(memory, &format!("s{t}"), writes, added))
            })
            .collect();
        let putters: Vec<_> = (0..2)
            .map(|t| {
                let (assets, added, most) = (&assets, &added, &most);
                scope.spawn(move || -> Result<Latencies> {
                    let mut latencies = Latencies::default();
                    for n in 0..writes {
                        let asset = Asset::from_json(serde_json::json!(
                            {"asset_id": format!("a{t}-{n}"), "content": {"n": n}}))?;
                        let before = added.load(Ordering::SeqCst);
                        let start = Instant::now();
                        assets.put(&asset)?;
                        latencies.push(start.elapsed());
                        let during = added.load(Ordering::SeqCst).saturating_sub(before);
                        most.fetch_max(during, Ordering::SeqCst);
                    }
                    Ok(latencies)
                })
            })
            .collect();
        let puts = joined(putters)?;
        let adds = joined(adders)?;
        Ok((puts, adds))
    })?;
    Ok(Mixed {
        puts,
        adds,
        most_adds_per_put: most.load(Ordering::SeqCst),
    })
}

/// Run 4's figures.
struct Many {
    /// File descriptors the process held more with the namespaces open, per namespace.
    fds_per_namespace: f64,
    /// Opening one namespace's stores, on average.
    open_each: Duration,
    rate: f64,
    adds: Latencies,
}

/// The process's open file descriptors.
fn open_fds() -> Result<usize> {
    Ok(std::fs::read_dir("/proc/self/fd")
        .context("counting open files (/proc/self/fd)")?
        .count())
}

/// Run 4: [`NAMESPACES`] namespaces' stores open at once, `THREADS` adders cycling over them.
fn many(dir: &Path, writes: usize) -> Result<Many> {
    let before = open_fds()?;
    let started = Instant::now();
    let tenants = (0..NAMESPACES)
        .map(|i| {
            let options = OpenOptions::default().with_namespace(format!("tenant-{i}").parse()?);
            Ok(Stores::open_with(dir, &options)?)
        })
        .collect::<Result<Vec<_>>>()?;
    let open_each = started.elapsed() / NAMESPACES as u32;
    // Each namespace's asset and artifact stores used, as a tenant's first requests would.
    for stores in &tenants {
        stores.assets().get("none")?;
        stores.artifacts().scopes()?;
    }
    let fds_per_namespace = open_fds()?.saturating_sub(before) as f64 / NAMESPACES as f64;
    // Each writer's session in every namespace, made before the clock starts (creating a
    // session is a write of its own): what is timed is the adds, as in run 1.
    let sessions = (0..THREADS)
        .map(|t| {
            tenants
                .iter()
                .map(|stores| Ok(stores.memory(Scope::session(format!("s{t}")))?))
                .collect::<Result<Vec<_>>>()
        })
        .collect::<Result<Vec<_>>>()?;
    let started = Instant::now();
    let adds = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .iter()
            .map(|mine| {
                scope.spawn(move || -> Result<Latencies> {
                    let mut latencies = Latencies::default();
                    for n in 0..writes {
                        let memory = mine.get(n % mine.len()).context("no namespace")?;
                        let start = Instant::now();
                        memory.add(vec![message(n)])?;
                        latencies.push(start.elapsed());
                    }
                    Ok(latencies)
                })
            })
            .collect();
        joined(handles)
    })?;
    let wall = started.elapsed();
    Ok(Many {
        fds_per_namespace,
        open_each,
        rate: adds.micros.len() as f64 / wall.as_secs_f64(),
        adds,
    })
}

/// Runs the benchmark (see the module documentation).
pub(crate) fn run(args: &[String]) -> Result<()> {
    let p = parse(args)?;
    if cargo::rerun_bench_in_release("writers", args)? {
        return Ok(());
    }
    let root = cargo::target_dir().join("bench-writers");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let fresh = |name: String| -> Result<std::path::PathBuf> {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(dir)
    };
    eprintln!(
        "{} rounds of 4 runs, {} writes per thread, durability full, in {}",
        p.rounds,
        p.writes,
        root.display()
    );
    let mut verdicts = Vec::new();
    let mut rows = Vec::new();
    for round in 1..=p.rounds {
        let (base_rate, mut base) = adders(&fresh(format!("{round}-one"))?, 1, p.writes)?;
        let (shared_rate, mut shared) =
            adders(&fresh(format!("{round}-four"))?, THREADS, p.writes)?;
        let mut mix = mixed(&fresh(format!("{round}-mixed"))?, p.writes)?;
        let mut many = many(&fresh(format!("{round}-many"))?, p.writes)?;
        rows.push(format!(
            "| {round} | 1 namespace, 4 adders | {base_rate:.0} adds/s | {} |",
            base.summary()
        ));
        rows.push(format!(
            "| {round} | 4 namespaces, 1 adder each | {shared_rate:.0} adds/s ({:.2}×) | {} |",
            shared_rate / base_rate,
            shared.summary()
        ));
        rows.push(format!(
            "| {round} | 2 putters + 2 adders | puts {} ms; at most {} adds during a put | adds {} |",
            mix.puts.summary(),
            mix.most_adds_per_put,
            mix.adds.summary()
        ));
        rows.push(format!(
            "| {round} | {NAMESPACES} namespaces open, 4 adders over all | {:.0} adds/s ({:.2}×); \
             {:.2} fds per open namespace, opened in {:.2} ms each | {} |",
            many.rate,
            many.rate / base_rate,
            many.fds_per_namespace,
            many.open_each.as_secs_f64() * 1000.0,
            many.adds.summary()
        ));
        let many_ratio = many.rate / base_rate;
        verdicts.push(format!(
            "round {round}: {NAMESPACES} open namespaces hold {:.2} fds each (≤ \
             {MOST_FDS_PER_NAMESPACE}): {}; their adds at {many_ratio:.2}× one namespace's rate \
             (≥ {SHARED_RATIO}): {}",
            many.fds_per_namespace,
            if many.fds_per_namespace <= MOST_FDS_PER_NAMESPACE {
                "met"
            } else {
                "UNMET"
            },
            if many_ratio >= SHARED_RATIO {
                "met"
            } else {
                "UNMET"
            }
        ));
        let ratio = shared_rate / base_rate;
        verdicts.push(format!(
            "round {round}: 4 namespaces at {ratio:.2}× one namespace's rate (≥ {SHARED_RATIO}): {}; \
             at most {} adds during a put (≤ {MOST_ADDS_PER_PUT}): {}",
            if ratio >= SHARED_RATIO { "met" } else { "UNMET" },
            mix.most_adds_per_put,
            if mix.most_adds_per_put <= MOST_ADDS_PER_PUT {
                "met"
            } else {
                "UNMET"
            }
        ));
    }
    println!("| round | run | rate | p50 / p99 / max ms |");
    println!("|---:|---|---|---|");
    for row in rows {
        println!("{row}");
    }
    for verdict in verdicts {
        println!("{verdict}");
    }
    if !p.keep {
        let _ = std::fs::remove_dir_all(&root);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_and_bad_ones_are_refused() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let p = parse(&args(&["--writes", "50", "--rounds", "2", "--keep"])).unwrap();
        assert_eq!((p.writes, p.rounds, p.keep), (50, 2, true));
        assert!(parse(&args(&["--writes", "0"])).is_err());
        assert!(parse(&args(&["--rounds"])).is_err());
        assert!(parse(&args(&["--bogus"])).is_err());
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut l = Latencies::default();
        for us in [1000, 2000, 3000, 4000] {
            l.push(Duration::from_micros(us));
        }
        assert_eq!(l.summary(), "2.00 / 4.00 / 4.00");
    }
}
