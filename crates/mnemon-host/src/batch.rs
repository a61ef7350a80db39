//! Scans of concurrent queries, answered together: one pass over the matrix scores every row for
//! all the exact queries waiting, and one pass over the int8 copy bounds every row for all the
//! fast queries waiting (docs/reference/library.md#index-and-performance: a scan is bound by
//! memory bandwidth, so a large library answers several queries a pass for little more than the
//! cost of one; the kernels are register-blocked, so the arithmetic of a full batch stays close
//! to the memory's pace).
//!
//! Only the scoring (exact) or the pre-scan (fast) is shared. Each request plans its query before and builds and serialises
//! its result after, on its own blocking task, so a query with a huge result never holds up
//! the others' scans.

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use mnemon_library::Prescan;

use crate::source::Snapshot;

/// At most this many queries share one pass; beyond it the arithmetic, not the memory traffic,
/// sets the pace.
const MAX_BATCH: usize = 16;

/// What a job asks for, and where the answer goes.
enum Reply {
    /// Every row's exact score ([`mnemon_library::Library::scores_many`]).
    Scores(oneshot::Sender<Vec<f32>>),
    /// The fast query's int8 pre-scan ([`mnemon_library::Library::prescan_many`]).
    Prescan(oneshot::Sender<Prescan>),
}

/// One query's scan, waiting for its batch.
struct Job {
    snapshot: Arc<Snapshot>,
    vector: Vec<f32>,
    reply: Reply,
}

impl Job {
    /// Whether `self` and `other` can share a pass: the same library snapshot and the same
    /// kind of scan.
    fn shares_pass_with(&self, other: &Job) -> bool {
        Arc::ptr_eq(&self.snapshot, &other.snapshot)
            && matches!(
                (&self.reply, &other.reply),
                (Reply::Scores(_), Reply::Scores(_)) | (Reply::Prescan(_), Reply::Prescan(_))
            )
    }
}

/// The queue of scans and the thread that runs them.
pub(crate) struct ScanBatcher {
    jobs: mpsc::Sender<Job>,
}

impl ScanBatcher {
    /// Starts the scanning thread. It ends when the batcher is dropped.
    pub(crate) fn start() -> std::io::Result<ScanBatcher> {
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("mnemon-scan".into())
            .spawn(move || run(&queue))?;
        Ok(ScanBatcher { jobs })
    }

    /// Every row's score against `vector` in the snapshot's library, computed in a pass shared
    /// with the other queries waiting. `None` if the scanning thread is gone (it only stops when
    /// the host does); the caller then scores on its own.
    pub(crate) async fn scores(
        &self,
        snapshot: Arc<Snapshot>,
        vector: Vec<f32>,
    ) -> Option<Vec<f32>> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                snapshot,
                vector,
                reply: Reply::Scores(reply),
            })
            .ok()?;
        answer.await.ok()
    }

    /// The int8 pre-scan of a fast query's `vector` in the snapshot's library, computed in a
    /// pass shared with the other fast queries waiting. `None` if the scanning thread is gone;
    /// the caller then pre-scans on its own.
    pub(crate) async fn prescan(
        &self,
        snapshot: Arc<Snapshot>,
        vector: Vec<f32>,
    ) -> Option<Prescan> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                snapshot,
                vector,
                reply: Reply::Prescan(reply),
            })
            .ok()?;
        answer.await.ok()
    }
}

/// Takes the waiting jobs, up to [`MAX_BATCH`], and runs them in one pass per snapshot and kind
/// (a reload can leave requests on the previous snapshot); while a pass runs, new jobs queue up
/// for the next.
///
/// When the last pass served several queries, clients are waiting on each other's passes: the
/// answers of one pass go out together and their clients' next queries come back within a
/// moment of each other. Taking only the first of them would start a pass for one query while
/// the rest queue behind it, and passes would alternate between one query and the others, so
/// the thread waits up to an eighth of the last pass's time ([`gather_window`]) for the rest.
fn run(queue: &mpsc::Receiver<Job>) {
    let mut last = (0usize, Duration::ZERO);
    while let Ok(first) = queue.recv() {
        let deadline = Instant::now() + gather_window(last.0, last.1);
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            let wait = deadline.saturating_duration_since(Instant::now());
            match queue.recv_timeout(wait) {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let started = Instant::now();
        let served = jobs.len();
        while !jobs.is_empty() {
            let lead = jobs.remove(0);
            let (mut same, rest): (Vec<Job>, Vec<Job>) = jobs
                .into_iter()
                .partition(|job| job.shares_pass_with(&lead));
            same.insert(0, lead);
            jobs = rest;
            pass(same);
        }
        last = (served, started.elapsed());
    }
}

/// How long to wait for more queries after the first, given how many the last pass served and
/// how long it took: nothing after a lone query (a single client never waits), else an eighth
/// of the pass, at most [`MAX_GATHER`]: a small share of each query's time, for passes that
/// serve every waiting client at once.
fn gather_window(last_served: usize, last_took: Duration) -> Duration {
    if last_served < 2 {
        return Duration::ZERO;
    }
    (last_took / 8).min(MAX_GATHER)
}

/// The longest [`gather_window`].
const MAX_GATHER: Duration = Duration::from_millis(3);

/// One pass for jobs of one snapshot and one kind.
fn pass(jobs: Vec<Job>) {
    let Some(snapshot) = jobs.first().map(|job| Arc::clone(&job.snapshot)) else {
        return;
    };
    let vectors: Vec<&[f32]> = jobs.iter().map(|job| job.vector.as_slice()).collect();
    match jobs.first().map(|job| &job.reply) {
        Some(Reply::Scores(_)) => {
            // Planned vectors have the library's dimension; if one did not, the whole batch is
            // refused and each requester scores on its own, where the error is its own.
            let Ok(scores) = snapshot.library.scores_many(&vectors) else {
                return;
            };
            tracing::trace!(queries = jobs.len(), "scanned together");
            for (job, scores) in jobs.into_iter().zip(scores) {
                // A requester that went away no longer needs its scores.
                if let Reply::Scores(reply) = job.reply {
                    let _ = reply.send(scores);
                }
            }
        }
        Some(Reply::Prescan(_)) => {
            let prescans = snapshot.library.prescan_many(&vectors);
            tracing::trace!(queries = jobs.len(), "pre-scanned together");
            for (job, prescan) in jobs.into_iter().zip(prescans) {
                if let Reply::Prescan(reply) = job.reply {
                    let _ = reply.send(prescan);
                }
            }
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_only_after_shared_passes() {
        let pass = Duration::from_millis(16);
        assert_eq!(gather_window(0, Duration::ZERO), Duration::ZERO);
        assert_eq!(gather_window(1, pass), Duration::ZERO);
        assert_eq!(gather_window(2, pass), Duration::from_millis(2));
        assert_eq!(gather_window(8, Duration::from_secs(1)), MAX_GATHER);
    }
    use crate::source::{ConfigSource, LibrarySource, Sources};
    use mnemon_library::synthetic::{unit_vector, write_synthetic};
    use mnemon_library::{AccessGrant, QueryRequest, wire};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn snapshot() -> Arc<Snapshot> {
        let mut bytes = Vec::new();
        write_synthetic(&mut bytes, "m", 3000, 40, 9).unwrap();
        let sources = Sources {
            library: LibrarySource::bytes("test", bytes),
            config: ConfigSource::Defaults,
        };
        Arc::new(sources.load().unwrap())
    }

    /// Issue 17 item 0: exact and fast queries sent at once are batched (each kind in its own
    /// pass) and every one gets exactly what it would get alone: the same score bits, and for
    /// fast queries the same result as the query run by itself.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mixed_batches_answer_each_query_as_alone() {
        let snapshot = snapshot();
        let batcher = Arc::new(ScanBatcher::start().unwrap());
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let vectors: Vec<Vec<f32>> = (0..24).map(|_| unit_vector(&mut rng, 40)).collect();
        let mut tasks = tokio::task::JoinSet::new();
        for (i, vector) in vectors.into_iter().enumerate() {
            let (snapshot, batcher) = (Arc::clone(&snapshot), Arc::clone(&batcher));
            tasks.spawn(async move {
                let library = &snapshot.library;
                if i % 2 == 0 {
                    let got = batcher
                        .scores(Arc::clone(&snapshot), vector.clone())
                        .await
                        .unwrap();
                    let alone = library.embeddings().scores(&vector).unwrap();
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&got), bits(&alone));
                } else {
                    let mut request = QueryRequest::new("m", vector.clone(), 7);
                    request.fast = true;
                    let prescan = batcher
                        .prescan(Arc::clone(&snapshot), vector)
                        .await
                        .unwrap();
                    let plan = library.plan(&request, AccessGrant::default()).unwrap();
                    let batched = library.run_prescanned(plan, prescan).unwrap();
                    request.fast = false;
                    let alone = library.query(&request, &AccessGrant::default()).unwrap();
                    assert_eq!(
                        wire::render(&batched).unwrap(),
                        wire::render(&alone).unwrap()
                    );
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }
}
