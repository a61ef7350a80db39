//! Exact scans of concurrent queries, answered together: one pass over the matrix scores every row
//! for all the queries waiting (docs/reference/library.md#index-and-performance: the scan is bound
//! by memory bandwidth, so a large library answers several queries a pass for little more than the
//! cost of one).
//!
//! Only the scoring is shared. Each request plans its query before and builds and serialises
//! its result after, on its own blocking task, so a query with a huge result never holds up
//! the others' scans.

use std::sync::Arc;
use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::source::Snapshot;

/// At most this many queries share one pass; beyond it the arithmetic, not the memory traffic,
/// sets the pace.
const MAX_BATCH: usize = 16;

/// One query's scan, waiting for its batch.
struct Job {
    snapshot: Arc<Snapshot>,
    vector: Vec<f32>,
    reply: oneshot::Sender<Vec<f32>>,
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
                reply,
            })
            .ok()?;
        answer.await.ok()
    }
}

/// Takes the waiting jobs, up to [`MAX_BATCH`], and scores them in one pass per snapshot (a
/// reload can leave requests on the previous one); while a pass runs, new jobs queue up for the
/// next.
fn run(queue: &mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        while let Some(snapshot) = jobs.first().map(|job| Arc::clone(&job.snapshot)) {
            let (same, rest): (Vec<Job>, Vec<Job>) = jobs
                .into_iter()
                .partition(|job| Arc::ptr_eq(&job.snapshot, &snapshot));
            jobs = rest;
            let vectors: Vec<&[f32]> = same.iter().map(|job| job.vector.as_slice()).collect();
            // Planned vectors have the library's dimension; if one did not, the whole batch is
            // refused and each requester scores on its own, where the error is its own.
            let Ok(scores) = snapshot.library.scores_many(&vectors) else {
                continue;
            };
            tracing::trace!(queries = same.len(), "scanned together");
            for (job, scores) in same.into_iter().zip(scores) {
                // A requester that went away no longer needs its scores.
                let _ = job.reply.send(scores);
            }
        }
    }
}
