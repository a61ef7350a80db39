//! `cargo xtask bench library`: the embedding library's performance report (issue 4,
//! docs/reference/library.md#performance-targets).
//!
//! Generates a seeded synthetic library (100,000 bits × 1536 dims, about 890 MB of JSON) under
//! `target/bench-library/`, then reports in one run: JSON load time, sidecar pack and open
//! times, median query times (bit mode count 10, token mode count 1000) for the exact and fast
//! scans, peak RSS (VmHWM), the ratio against a plain scalar loop over the same matrix, and how
//! opening a directory of library files scales with their number (64 against 256 small files).
//!
//! Timings need an optimised build: a debug xtask re-runs itself with `cargo run --release`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mnemon_library::synthetic::{unit_vector, write_synthetic};
use mnemon_library::{
    AccessPolicy, BLANK_LIBRARY_MODEL, Library, QueryOptions, encode_embedding, wire,
};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Value, json};

const SEED: u64 = 42;
const WARMUPS: usize = 5;

struct Params {
    bits: usize,
    dim: usize,
    queries: usize,
}

fn parse(args: &[String]) -> Result<Params> {
    let mut p = Params {
        bits: 100_000,
        dim: 1536,
        queries: 100,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<usize> {
            it.next()
                .with_context(|| format!("{name} needs a value"))?
                .parse()
                .with_context(|| format!("{name} needs a number"))
        };
        match a.as_str() {
            "--bits" => p.bits = value("--bits")?,
            "--dim" => p.dim = value("--dim")?,
            "--queries" => p.queries = value("--queries")?.max(1),
            other => bail!(
                "unknown argument {other:?}; usage: cargo xtask bench library [--bits N] [--dim D] [--queries Q]"
            ),
        }
    }
    Ok(p)
}

/// Runs the benchmark. `args` are the words after `bench library`.
pub(crate) fn run(args: &[String]) -> Result<()> {
    let params = parse(args)?;
    if crate::cargo::rerun_bench_in_release("library", args)? {
        return Ok(());
    }
    measure(&params)
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// A `/proc/self/status` field in kB (Linux), or 0.
fn proc_status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Resets VmHWM to the current RSS (Linux `clear_refs` 5), so later peaks exclude generation.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn mb(kb: u64) -> f64 {
    kb as f64 / 1024.0
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn args_for(q: &[f32], count: i64, count_type: &str) -> Map<String, Value> {
    let v = json!({
        "version": 1,
        "query_embedding_model": BLANK_LIBRARY_MODEL,
        "query_embedding": encode_embedding(q),
        "count": count,
        "count_type": count_type,
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Median latency over the queries after warm-ups, and the results' bits.
fn time_queries(
    lib: &Library,
    queries: &[Map<String, Value>],
    options: &QueryOptions,
) -> Result<(Duration, Vec<Value>)> {
    let policy = AccessPolicy::default();
    for q in queries.iter().take(WARMUPS) {
        wire::query(lib, q, &policy, options)?;
    }
    let mut times = Vec::with_capacity(queries.len());
    let mut results = Vec::with_capacity(queries.len());
    for q in queries {
        let start = Instant::now();
        let mut r = wire::query(lib, q, &policy, options)?;
        times.push(start.elapsed());
        results.push(r.shift_remove("bits").unwrap_or(Value::Null));
    }
    Ok((median(times), results))
}

/// The baseline: one thread, a plain scalar loop over every row, then a full sort for the top 10.
fn scalar_top10(lib: &Library, q: &[f32]) -> Vec<usize> {
    let m = lib.embeddings();
    let mut scored: Vec<(f32, usize)> = (0..m.rows())
        .map(|i| (mnemon_vector::scalar_dot(m.row(i).unwrap_or(&[]), q), i))
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(10).map(|(_, i)| i).collect()
}

fn measure(p: &Params) -> Result<()> {
    let dir = workspace_root().join("target").join("bench-library");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("library-{}x{}-seed{SEED}.json", p.bits, p.dim));
    let done_marker = file.with_extension("json.done");
    if !done_marker.exists() {
        println!("generating {} ...", file.display());
        let start = Instant::now();
        let _ = std::fs::remove_file(mnemon_library::sidecar_path(&file));
        let f = std::fs::File::create(&file)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 22, f);
        write_synthetic(&mut w, BLANK_LIBRARY_MODEL, p.bits, p.dim, SEED)?;
        std::io::Write::flush(&mut w)?;
        std::fs::write(&done_marker, "")?;
        println!("  generated in {:.1} s", start.elapsed().as_secs_f64());
    }
    let size = std::fs::metadata(&file)?.len();
    // Warm the page cache, as the target assumes.
    let _ = std::fs::read(&file).map(drop);

    let hwm_resettable = reset_peak_rss();
    let rss_before = proc_status_kb("VmRSS:");
    let start = Instant::now();
    let lib = Library::open_with(
        &file,
        &mnemon_library::OpenOptions {
            ignore_sidecar: true,
            ..Default::default()
        },
    )?;
    let load = start.elapsed();
    let hwm_load = proc_status_kb("VmHWM:");
    if lib.len() != p.bits {
        bail!("loaded {} bits, expected {}", lib.len(), p.bits);
    }

    let mut rng = ChaCha8Rng::seed_from_u64(SEED + 1);
    let vectors: Vec<Vec<f32>> = (0..p.queries + WARMUPS)
        .map(|_| unit_vector(&mut rng, p.dim))
        .collect();
    let bit10: Vec<_> = vectors.iter().map(|q| args_for(q, 10, "bit")).collect();
    let tok1000: Vec<_> = vectors.iter().map(|q| args_for(q, 1000, "token")).collect();
    let exact = QueryOptions::default();
    let fast = QueryOptions {
        fast: true,
        ..QueryOptions::default()
    };
    let (exact_bit, exact_bit_results) = time_queries(&lib, &bit10, &exact)?;
    let (exact_tok, exact_tok_results) = time_queries(&lib, &tok1000, &exact)?;
    let hwm_queries = proc_status_kb("VmHWM:");

    let start = Instant::now();
    time_queries(&lib, &bit10[..1], &fast)?;
    let quantize = start.elapsed();
    let (fast_bit, fast_bit_results) = time_queries(&lib, &bit10, &fast)?;
    let (fast_tok, fast_tok_results) = time_queries(&lib, &tok1000, &fast)?;
    let same = |a: &[Value], b: &[Value]| a.iter().zip(b).filter(|(x, y)| x == y).count();
    let fast_bit_same = same(&exact_bit_results, &fast_bit_results);
    let fast_tok_same = same(&exact_tok_results, &fast_tok_results);

    let scalar_runs = 10.min(vectors.len());
    let mut scalar_times = Vec::new();
    let mut scalar_agrees = 0;
    for (q, r) in vectors.iter().zip(&exact_bit_results).take(scalar_runs) {
        let start = Instant::now();
        let top = scalar_top10(&lib, q);
        scalar_times.push(start.elapsed());
        let texts: Vec<&Value> = r
            .as_array()
            .map(|b| b.iter().map(|x| &x["text"]).collect())
            .unwrap_or_default();
        let bits = lib.bits().collect::<Vec<_>>();
        let scalar_texts: Vec<Value> = top
            .iter()
            .map(|&i| Value::from(bits[i].text().unwrap_or_default()))
            .collect();
        if texts.iter().copied().eq(scalar_texts.iter()) {
            scalar_agrees += 1;
        }
    }
    let scalar = median(scalar_times);
    let hwm_all = proc_status_kb("VmHWM:");

    let start = Instant::now();
    lib.pack(&file)?;
    let pack = start.elapsed();
    drop(lib);
    let start = Instant::now();
    let packed = Library::open(&file)?;
    let sidecar_open = start.elapsed();
    let policy = AccessPolicy::default();
    let sidecar_matches =
        wire::query(&packed, &bit10[0], &policy, &exact)?["bits"] == exact_bit_results[0];
    let (sidecar_bit, _) = time_queries(&packed, &bit10, &exact)?;

    let dir_opens = directory_opens(&dir)?;

    println!();
    println!(
        "Embedding library benchmark: {} bits x {} dims, {:.0} MB JSON, kernel {}, {} threads",
        p.bits,
        p.dim,
        size as f64 / 1e6,
        mnemon_vector::kernel_name(),
        rayon_threads()
    );
    println!(
        "  JSON load (warm cache)            {:>9.1} ms   target <= 1500 ms",
        ms(load)
    );
    println!(
        "  exact query, bit  count 10 (med)  {:>9.2} ms   target <= 30 ms",
        ms(exact_bit)
    );
    println!(
        "  exact query, token count 1000     {:>9.2} ms",
        ms(exact_tok)
    );
    println!(
        "  fast  query, bit  count 10 (med)  {:>9.2} ms   target <= 10 ms; same bits as exact: {fast_bit_same}/{}",
        ms(fast_bit),
        bit10.len()
    );
    println!(
        "  fast  query, token count 1000     {:>9.2} ms   same bits as exact: {fast_tok_same}/{}",
        ms(fast_tok),
        tok1000.len()
    );
    println!(
        "  fast-mode int8 index build        {:>9.1} ms   (first fast query)",
        ms(quantize)
    );
    println!(
        "  scalar loop baseline, top 10      {:>9.1} ms   exact is {:.1}x faster; top-10 agrees {scalar_agrees}/{scalar_runs}",
        ms(scalar),
        scalar.as_secs_f64() / exact_bit.as_secs_f64().max(1e-9)
    );
    println!("  sidecar pack                      {:>9.1} ms", ms(pack));
    println!(
        "  sidecar open (mmap)               {:>9.2} ms   target <= 50 ms; query matches: {sidecar_matches}",
        ms(sidecar_open)
    );
    println!(
        "  exact bit query on sidecar (med)  {:>9.2} ms",
        ms(sidecar_bit)
    );
    println!(
        "  RSS before load                   {:>9.0} MB",
        mb(rss_before)
    );
    println!(
        "  peak RSS after load               {:>9.0} MB{}",
        mb(hwm_load),
        if hwm_resettable {
            ""
        } else {
            " (VmHWM not resettable: includes generation)"
        }
    );
    println!(
        "  peak RSS, load + {} queries      {:>9.0} MB   target <= 1200 MB",
        p.queries,
        mb(hwm_queries)
    );
    println!(
        "  peak RSS incl. fast index         {:>9.0} MB",
        mb(hwm_all)
    );
    let [(few, few_time), (many, many_time)] = dir_opens;
    let ratio = many_time.as_secs_f64() / few_time.as_secs_f64().max(1e-9);
    let linear = many as f64 / few as f64;
    println!(
        "  directory open, {few} / {many} files      {:>6.0} / {:.0} ms   {ratio:.1}x for {linear:.0}x the files; target <= {:.0}x (linear)",
        ms(few_time),
        ms(many_time),
        1.5 * linear
    );
    Ok(())
}

/// Bits per file and dimension of the directory-open scaling runs: small files, as a directory
/// of many documents' libraries holds.
const DIR_BITS: usize = 50;
const DIR_DIM: usize = 1536;

/// [`Library::open_dir`] of a directory of 64 files and of one of 256 (each file `DIR_BITS`
/// bits of `DIR_DIM` dimensions, its own seed): the time of each, best of three. Merging file
/// after file must cost in proportion to what is merged, so the second takes about four times
/// the first (docs/reference/host.md#serving-libraries).
fn directory_opens(root: &Path) -> Result<[(usize, Duration); 2]> {
    let mut out = [(64, Duration::ZERO), (256, Duration::ZERO)];
    for (files, best) in &mut out {
        let dir = root.join(format!("dir-{files}x{DIR_BITS}x{DIR_DIM}"));
        let done_marker = dir.join(".done");
        if !done_marker.exists() {
            std::fs::create_dir_all(&dir)?;
            for f in 0..*files {
                let file = std::fs::File::create(dir.join(format!("part-{f:04}.json")))?;
                let mut w = std::io::BufWriter::new(file);
                write_synthetic(
                    &mut w,
                    BLANK_LIBRARY_MODEL,
                    DIR_BITS,
                    DIR_DIM,
                    SEED + 100 + f as u64,
                )?;
                std::io::Write::flush(&mut w)?;
            }
            std::fs::write(&done_marker, "")?;
        }
        *best = Duration::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            let lib = Library::open_dir(&dir)?;
            *best = (*best).min(start.elapsed());
            // Every file's urls repeat (`doc/0` …), their texts differ: every bit is kept.
            if lib.len() != *files * DIR_BITS {
                bail!(
                    "{} holds {} bits, expected {}",
                    dir.display(),
                    lib.len(),
                    *files * DIR_BITS
                );
            }
        }
    }
    Ok(out)
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
