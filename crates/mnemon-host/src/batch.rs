//! Scans of concurrent queries, shared: a scanning thread walks the library block by block,
//! and every query waiting at that moment gets the block scored for it, its exact scores
//! (exact queries) or its int8 bounds (fast queries) (docs/reference/host.md#shared-scans). A
//! scan is bound by memory bandwidth, so a block read once for all the queries costs little
//! more than for one, and the kernels are register-blocked, so the arithmetic of many queries
//! stays close to the memory's pace.
//!
//! A query joins the scan at the block it has reached and leaves once it has seen every block
//! (`mnemon_library::ScanJob`), so it never waits for a pass to finish before its own starts:
//! with closed-loop clients, whose next queries arrive one by one as their answers go out,
//! passes that each cover the whole library served one or two queries each.
//!
//! Only the scoring (exact) or the pre-scan (fast) is shared. Each request plans its query
//! before and builds and serialises its result after, on its own blocking task, so a query with
//! a huge result never holds up the others' scans.

use std::ops::Range;
use std::sync::Arc;
use std::sync::mpsc;

use tokio::sync::oneshot;

use mnemon_library::{Prescan, ScanJob, ScanKind};

use crate::source::Snapshot;

/// At most this many queries are in the scan at once; more wait for a place. The host's
/// default query slots ([`crate::HostOptions::max_concurrent_queries`]) are as many.
const MAX_ACTIVE: usize = 16;

/// A scan goes through a library in about this many blocks, so a query joining it waits at
/// most a block's time before its first rows are scored.
const BLOCKS_PER_SCAN: usize = 32;

/// Blocks are at least this many rows: each step costs a dispatch to the thread pool, and
/// smaller blocks would not split over its threads.
const MIN_BLOCK_ROWS: usize = 4096;

/// What a job asks for, and where the answer goes.
enum Reply {
    /// Every row's exact score ([`mnemon_library::Library::scores_many`]).
    Scores(oneshot::Sender<Vec<f32>>),
    /// The fast query's int8 pre-scan ([`mnemon_library::Library::prescan_many`]).
    Prescan(oneshot::Sender<Prescan>),
}

/// One query's scan, waiting to join: made by the requester
/// ([`mnemon_library::Library::scan_job`]: the query quantised, the output allocated), so the
/// scanning thread, which every query present waits on, only adds it.
struct Job {
    snapshot: Arc<Snapshot>,
    /// What the scan computes for the query: exact scores for a [`Reply::Scores`], a
    /// pre-scan for a [`Reply::Prescan`].
    scan: ScanJob,
    reply: Reply,
}

/// The queue of scans and the threads that run them.
pub(crate) struct ScanBatcher {
    jobs: mpsc::Sender<Job>,
    /// The scans' own threads, one per core: the scanning loop runs on one of them, and each
    /// block's tasks are split between it and the others (docs/reference/host.md#shared-scans).
    /// On a thread outside the pool, every block was a hand-off: the loop woke the global
    /// pool's workers and slept until they were done, two wake-ups and context switches per
    /// block, some 3,600 blocks a second under load. Inside, the loop works on its block
    /// itself and the others steal from it. Dropping the pool ends its threads once the loop
    /// has returned (when `jobs` is dropped).
    _pool: rayon::ThreadPool,
}

impl ScanBatcher {
    /// Starts the scanning threads. They end when the batcher is dropped.
    pub(crate) fn start() -> std::io::Result<ScanBatcher> {
        let (jobs, queue) = mpsc::channel();
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("mnemon-scan-{i}"))
            .build()
            .map_err(std::io::Error::other)?;
        pool.spawn(move || run(&queue));
        Ok(ScanBatcher { jobs, _pool: pool })
    }

    /// Every row's score against `vector` in the snapshot's library, computed in the walk shared
    /// with the other queries waiting. `None` if the scanning thread is gone (it only stops when
    /// the host does) or the library refuses the vector; the caller then scores on its own,
    /// where the error is its own.
    pub(crate) async fn scores(
        &self,
        snapshot: Arc<Snapshot>,
        vector: Vec<f32>,
    ) -> Option<Vec<f32>> {
        let scan = snapshot.library.scan_job(ScanKind::Scores, vector).ok()?;
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                snapshot,
                scan,
                reply: Reply::Scores(reply),
            })
            .ok()?;
        answer.await.ok()
    }

    /// The int8 pre-scan of a fast query's `vector` in the snapshot's library, computed in a
    /// walk shared with the other queries present: every row's bound, or with
    /// [`ScanKind::PrescanTop`] those that can rank among the best
    /// ([`mnemon_library::Library::prescan_kind`] says which the query needs). `None` if the
    /// scanning thread is gone or the library refuses the vector; the caller then pre-scans on
    /// its own.
    pub(crate) async fn prescan(
        &self,
        snapshot: Arc<Snapshot>,
        vector: Vec<f32>,
        kind: ScanKind,
    ) -> Option<Prescan> {
        let kind = match kind {
            ScanKind::Scores => ScanKind::Prescan,
            pre => pre,
        };
        let scan = snapshot.library.scan_job(kind, vector).ok()?;
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job {
                snapshot,
                scan,
                reply: Reply::Prescan(reply),
            })
            .ok()?;
        answer.await.ok()
    }
}

/// The scans in progress, one per library snapshot (a reload can leave requests on the
/// previous one), each with the queries in it.
struct Scan {
    snapshot: Arc<Snapshot>,
    block_rows: usize,
    blocks: usize,
    /// The block the next step scores.
    next: usize,
    members: Vec<Member>,
}

/// A query in a scan.
struct Member {
    job: ScanJob,
    reply: Reply,
    /// Blocks still to score before the query has seen every row.
    blocks_left: usize,
}

impl Scan {
    fn new(snapshot: Arc<Snapshot>) -> Scan {
        let rows = snapshot.library.len();
        let block_rows = rows.div_ceil(BLOCKS_PER_SCAN).max(MIN_BLOCK_ROWS);
        Scan {
            snapshot,
            block_rows,
            blocks: rows.div_ceil(block_rows),
            next: 0,
            members: Vec::new(),
        }
    }

    /// Rows of block `b`.
    fn block(&self, b: usize) -> Range<usize> {
        let start = b.saturating_mul(self.block_rows);
        start..start.saturating_add(self.block_rows)
    }

    /// Adds a query at the current block.
    fn join(&mut self, job: Job) {
        let member = Member {
            job: job.scan,
            reply: job.reply,
            blocks_left: self.blocks,
        };
        if member.blocks_left == 0 {
            member.answer();
        } else {
            self.members.push(member);
        }
    }

    /// Scores the next block for every query in the scan and answers those that have now seen
    /// every block.
    fn step(&mut self) {
        let rows = self.block(self.next);
        let mut jobs: Vec<&mut ScanJob> = self.members.iter_mut().map(|m| &mut m.job).collect();
        self.snapshot.library.scan_rows(&mut jobs, rows);
        tracing::trace!(
            queries = self.members.len(),
            block = self.next,
            "scanned a block"
        );
        self.next = (self.next + 1) % self.blocks.max(1);
        for member in &mut self.members {
            member.blocks_left = member.blocks_left.saturating_sub(1);
        }
        let (done, left): (Vec<Member>, Vec<Member>) = std::mem::take(&mut self.members)
            .into_iter()
            .partition(|m| m.blocks_left == 0);
        self.members = left;
        for member in done {
            member.answer();
        }
    }
}

impl Member {
    /// Sends the query its answer; a requester that went away no longer needs it. A job
    /// that somehow did not cover every row answers nothing, and its requester scans alone.
    fn answer(self) {
        match self.reply {
            Reply::Scores(reply) => {
                if let Some(scores) = self.job.into_scores() {
                    let _ = reply.send(scores);
                }
            }
            Reply::Prescan(reply) => {
                if let Some(prescan) = self.job.into_prescan() {
                    let _ = reply.send(prescan);
                }
            }
        }
    }
}

/// Runs the scans: admits waiting queries (up to [`MAX_ACTIVE`] in all), scores one block of
/// each scan in progress, and sleeps only when no query is in any scan.
fn run(queue: &mpsc::Receiver<Job>) {
    let mut scans: Vec<Scan> = Vec::new();
    loop {
        let mut active: usize = scans.iter().map(|s| s.members.len()).sum();
        if active == 0 {
            match queue.recv() {
                Ok(job) => {
                    admit(&mut scans, job);
                    active = 1;
                }
                Err(_) => return,
            }
        }
        while active < MAX_ACTIVE {
            match queue.try_recv() {
                Ok(job) => {
                    admit(&mut scans, job);
                    active += 1;
                }
                Err(_) => break,
            }
        }
        for scan in &mut scans {
            if !scan.members.is_empty() {
                scan.step();
            }
        }
        scans.retain(|s| !s.members.is_empty());
    }
}

/// Puts `job` into the scan of its snapshot, starting one if there is none.
fn admit(scans: &mut Vec<Scan>, job: Job) {
    match scans
        .iter_mut()
        .find(|s| Arc::ptr_eq(&s.snapshot, &job.snapshot))
    {
        Some(scan) => scan.join(job),
        None => {
            let mut scan = Scan::new(Arc::clone(&job.snapshot));
            scan.join(job);
            scans.push(scan);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::source::{ConfigSource, LibrarySource, Sources};
    use mnemon_library::synthetic::{unit_vector, write_synthetic};
    use mnemon_library::{AccessGrant, QueryRequest, wire};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn snapshot() -> Arc<Snapshot> {
        let mut bytes = Vec::new();
        write_synthetic(&mut bytes, "m", 10_000, 40, 9).unwrap();
        let sources = Sources {
            library: LibrarySource::bytes("test", bytes),
            config: ConfigSource::Defaults,
        };
        Arc::new(sources.load().unwrap())
    }

    /// Issue 17 item 0: queries that join the scan one by one, at different blocks, each get
    /// what they would get alone, and the scan goes on for the later ones after the first
    /// leave.
    #[test]
    fn queries_joining_at_different_blocks_answer_as_alone() {
        let snapshot = snapshot();
        let library = &snapshot.library;
        let mut scan = Scan::new(Arc::clone(&snapshot));
        assert_eq!((scan.block_rows, scan.blocks), (MIN_BLOCK_ROWS, 3));
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let vectors: Vec<Vec<f32>> = (0..4).map(|_| unit_vector(&mut rng, 40)).collect();
        let mut answers = Vec::new();
        for (i, vector) in vectors.iter().enumerate() {
            let (reply, answer) = oneshot::channel();
            scan.join(Job {
                snapshot: Arc::clone(&snapshot),
                scan: library.scan_job(ScanKind::Scores, vector.clone()).unwrap(),
                reply: Reply::Scores(reply),
            });
            answers.push(answer);
            // The i-th query joins after i steps: at block i % 3.
            scan.step();
            assert_eq!(scan.members.len(), (i + 1).min(2));
        }
        while !scan.members.is_empty() {
            scan.step();
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (vector, mut answer) in vectors.iter().zip(answers) {
            let got = answer.try_recv().unwrap();
            assert_eq!(
                bits(&got),
                bits(&library.embeddings().scores(vector).unwrap())
            );
        }
    }

    /// Issue 17 item 0: exact and fast queries sent at once share the scan (each kind with its
    /// own kernel) and every one gets exactly what it would get alone: the same score bits, and for
    /// fast queries, with every row's bound or only the best rows', the same result as the query
    /// run by itself.
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
                    let plan = library.plan(&request, AccessGrant::default()).unwrap();
                    // Half the fast queries gather every row's bound, half only the best rows'.
                    let kind = if i % 4 == 1 {
                        ScanKind::Prescan
                    } else {
                        library.prescan_kind(&plan)
                    };
                    if i % 4 == 3 {
                        assert_eq!(kind, ScanKind::PrescanTop(7));
                    }
                    let prescan = batcher
                        .prescan(Arc::clone(&snapshot), vector, kind)
                        .await
                        .unwrap();
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
