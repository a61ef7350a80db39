//! How fast a server can check keys: a cached key (the steady state of a server), a wrong
//! secret, a malformed string, and a cache miss (one SQLite row read per check).

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use mnemon_keys::{KeyStore, KeyStoreOptions, Role};

fn authenticate(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mnemon.sqlite3");
    let keys = KeyStore::open_sqlite(&path, KeyStoreOptions::default()).unwrap();
    let created = keys
        .create(&"bench".parse().unwrap(), Role::Write, "bench")
        .unwrap();
    let key = created.key().to_owned();
    let wrong = format!("{}0", &key[..key.len() - 1]);
    let wrong = if wrong == key {
        format!("{}1", &key[..key.len() - 1])
    } else {
        wrong
    };
    keys.authenticate(&key).unwrap();

    let mut group = c.benchmark_group("authenticate");
    group.bench_function("cached", |b| b.iter(|| keys.authenticate(&key).unwrap()));
    group.bench_function("wrong_secret_cached", |b| {
        b.iter(|| keys.authenticate(&wrong).unwrap_err())
    });
    group.bench_function("malformed", |b| {
        b.iter(|| keys.authenticate("Bearer nonsense").unwrap_err())
    });
    // The server's steady state: cached checks from several threads at once (2 cores here).
    for threads in [2usize, 8] {
        group.bench_function(format!("cached_{threads}_threads"), |b| {
            b.iter_custom(|iters| {
                let per_thread = iters.div_ceil(threads as u64);
                let start = Instant::now();
                std::thread::scope(|scope| {
                    for _ in 0..threads {
                        scope.spawn(|| {
                            for _ in 0..per_thread {
                                keys.authenticate(&key).unwrap();
                            }
                        });
                    }
                });
                // Time per check, all threads together.
                start
                    .elapsed()
                    .div_f64((per_thread * threads as u64) as f64 / iters as f64)
            })
        });
    }
    let uncached = KeyStore::open_sqlite(
        &path,
        KeyStoreOptions {
            cache_ttl: Duration::ZERO,
            ..KeyStoreOptions::default()
        },
    )
    .unwrap();
    group.bench_function("sqlite_uncached", |b| {
        b.iter(|| uncached.authenticate(&key).unwrap())
    });
    group.finish();
}

criterion_group!(benches, authenticate);
criterion_main!(benches);
