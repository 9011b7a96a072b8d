//! The one writer: a thread that owns every write to the ledger and commits the batches of many
//! concurrent requests together (group commit).
//!
//! Handlers [`Writer::submit`] a batch and await its results; the writer thread takes every batch
//! waiting in the queue (up to [`MAX_GROUP_RECORDS`] records), applies SPEC 2's write rules to
//! them in arrival order in one redb write transaction per record kind, commits (an fsync), and
//! only then answers each request. redb is never called on an async worker thread. A full queue
//! is refused at once ([`SubmitError::QueueFull`], answered 503 with `Retry-After`), never waited
//! on without bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;

use laneledger_store::{Incoming, IncomingDecision, Ledger, WriteResult};
use tokio::sync::{mpsc, oneshot};

/// The most records committed in one group: a group stops growing once it holds this many.
pub const MAX_GROUP_RECORDS: usize = 20_000;

/// Batches waiting for the writer, by default; past it a submit is refused with
/// [`SubmitError::QueueFull`].
pub const DEFAULT_QUEUE_BATCHES: usize = 64;

/// One request's records, all of one kind, in body order.
#[derive(Debug)]
pub enum Batch {
    /// Attempt records (SPEC 1.1) and the lines that failed to parse.
    Attempts(Vec<Incoming>),
    /// Gate decisions (SPEC 1.2) and the lines that failed to parse.
    Decisions(Vec<IncomingDecision>),
}

impl Batch {
    /// Records in the batch.
    pub fn len(&self) -> usize {
        match self {
            Batch::Attempts(v) => v.len(),
            Batch::Decisions(v) => v.len(),
        }
    }

    /// True when the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a batch was not committed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue holds its limit of batches; retry after a moment (HTTP 503, `Retry-After: 1`).
    #[error("the write queue is full ({0} batches waiting); retry shortly")]
    QueueFull(usize),
    /// The writer has stopped (the server is shutting down); nothing of the batch was written.
    #[error("the writer has stopped; nothing of the batch was written")]
    Stopped,
    /// The ledger refused the commit; nothing of the batch was written.
    #[error("the ledger could not commit the batch: {0}")]
    Storage(String),
}

/// Where a batch's results (or the commit's error) go.
type Reply = oneshot::Sender<Result<Vec<WriteResult>, String>>;

struct Job {
    batch: Batch,
    reply: Reply,
}

/// Counters of the writer's work since the server started (for `/metrics`).
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Batches submitted and committed.
    pub batches: AtomicU64,
    /// Records in those batches.
    pub records: AtomicU64,
    /// redb commits made (one per record kind per group).
    pub commits: AtomicU64,
    /// Submits refused because the queue was full.
    pub queue_full: AtomicU64,
    /// Commits that failed.
    pub failed_commits: AtomicU64,
    /// Total time spent committing, in microseconds.
    pub commit_micros: AtomicU64,
}

/// A handle to the writer thread. Cheap to clone; the thread stops once every handle is dropped
/// and the queue is drained (see [`WriterThread::join`]).
#[derive(Debug, Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
    capacity: usize,
    stats: Arc<WriterStats>,
}

/// The writer thread, to be joined at shutdown so that every batch it took is committed and
/// answered before the process exits.
#[derive(Debug)]
pub struct WriterThread(JoinHandle<()>);

impl WriterThread {
    /// Waits until the writer has drained its queue and stopped (every [`Writer`] must be dropped
    /// first, or this waits for ever).
    pub fn join(self) {
        if self.0.join().is_err() {
            tracing::error!("the writer thread panicked");
        }
    }
}

impl Writer {
    /// Starts the writer thread over `ledger` with room for `queue` waiting batches.
    ///
    /// Errors: the OS could not start a thread.
    pub fn spawn(ledger: Ledger, queue: usize) -> std::io::Result<(Writer, WriterThread)> {
        let queue = queue.max(1);
        let (tx, rx) = mpsc::channel(queue);
        let stats = Arc::new(WriterStats::default());
        let thread_stats = stats.clone();
        let handle = std::thread::Builder::new()
            .name("laneledger-writer".into())
            .spawn(move || run(ledger, rx, &thread_stats))?;
        Ok((
            Writer {
                tx,
                capacity: queue,
                stats,
            },
            WriterThread(handle),
        ))
    }

    /// Queues `batch` and waits until it is committed: one [`WriteResult`] per record, in order.
    ///
    /// Errors: [`SubmitError::QueueFull`] at once when the queue is full, [`SubmitError::Stopped`]
    /// when the writer is gone, [`SubmitError::Storage`] when the commit failed (nothing of the
    /// batch was written).
    pub async fn submit(&self, batch: Batch) -> Result<Vec<WriteResult>, SubmitError> {
        let n = batch.len() as u64;
        let (reply, answer) = oneshot::channel();
        match self.tx.try_send(Job { batch, reply }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.stats.queue_full.fetch_add(1, Ordering::Relaxed);
                return Err(SubmitError::QueueFull(self.capacity));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(SubmitError::Stopped),
        }
        match answer.await {
            Ok(Ok(results)) => {
                self.stats.batches.fetch_add(1, Ordering::Relaxed);
                self.stats.records.fetch_add(n, Ordering::Relaxed);
                Ok(results)
            }
            Ok(Err(e)) => Err(SubmitError::Storage(e)),
            Err(_) => Err(SubmitError::Stopped),
        }
    }

    /// Batches waiting in the queue now.
    pub fn queue_depth(&self) -> usize {
        self.capacity - self.tx.capacity()
    }

    /// The queue's limit, in batches.
    pub fn queue_capacity(&self) -> usize {
        self.capacity
    }

    /// The writer's counters.
    pub fn stats(&self) -> &WriterStats {
        &self.stats
    }
}

/// The writer loop: take a group, commit it, answer it; until every sender is gone.
fn run(ledger: Ledger, mut rx: mpsc::Receiver<Job>, stats: &WriterStats) {
    while let Some(first) = rx.blocking_recv() {
        let mut records = first.batch.len();
        let mut group = vec![first];
        while records < MAX_GROUP_RECORDS {
            match rx.try_recv() {
                Ok(job) => {
                    records += job.batch.len();
                    group.push(job);
                }
                Err(_) => break,
            }
        }
        commit_group(&ledger, group, stats);
    }
}

/// Commits a group: the attempt batches together in one transaction, then the decision batches
/// in another, each kind in arrival order; then answers every job of the group.
fn commit_group(ledger: &Ledger, group: Vec<Job>, stats: &WriterStats) {
    let mut attempt_jobs = Vec::new();
    let mut attempts = Vec::new();
    let mut decision_jobs = Vec::new();
    let mut decisions = Vec::new();
    for Job { batch, reply } in group {
        match batch {
            // A group's first batch is taken as it is, not copied: a body of 100,000 records
            // is about 30 MB of them.
            Batch::Attempts(v) => {
                attempt_jobs.push((reply, v.len()));
                if attempts.is_empty() {
                    attempts = v;
                } else {
                    attempts.extend(v);
                }
            }
            Batch::Decisions(v) => {
                decision_jobs.push((reply, v.len()));
                if decisions.is_empty() {
                    decisions = v;
                } else {
                    decisions.extend(v);
                }
            }
        }
    }
    if !attempt_jobs.is_empty() {
        let result = timed(stats, || ledger.write_batch(attempts));
        answer(attempt_jobs, result);
    }
    if !decision_jobs.is_empty() {
        let result = timed(stats, || ledger.write_decisions(decisions));
        answer(decision_jobs, result);
    }
}

fn timed(
    stats: &WriterStats,
    commit: impl FnOnce() -> laneledger_store::Result<Vec<WriteResult>>,
) -> laneledger_store::Result<Vec<WriteResult>> {
    let start = std::time::Instant::now();
    let result = commit();
    stats
        .commit_micros
        .fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    match &result {
        Ok(_) => stats.commits.fetch_add(1, Ordering::Relaxed),
        Err(e) => {
            tracing::error!("commit failed: {e}");
            stats.failed_commits.fetch_add(1, Ordering::Relaxed)
        }
    };
    result
}

/// Splits a group's results back into each job's share, in order, and sends them.
fn answer(jobs: Vec<(Reply, usize)>, result: laneledger_store::Result<Vec<WriteResult>>) {
    match result {
        Ok(results) => {
            let mut results = results.into_iter();
            for (reply, n) in jobs {
                // A requester that went away (timeout, closed connection) still had its batch
                // committed; there is no one left to tell.
                let _ = reply.send(Ok(results.by_ref().take(n).collect()));
            }
        }
        Err(e) => {
            let msg = e.to_string();
            for (reply, _) in jobs {
                let _ = reply.send(Err(msg.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laneledger_store::{Attempt, Lane};

    fn attempt(job: &str, n: u32) -> Incoming {
        let line = format!(
            r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{n},"lane":"free","started_at":"2026-11-23T10:00:00Z"}}"#
        );
        let attempt: Attempt = laneledger_store::format::parse::attempt_from_json(&line).unwrap();
        assert_eq!(attempt.lane, Lane::Free);
        Incoming::Attempt {
            source: "test".into(),
            line: 1,
            raw: line,
            attempt,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_batches_each_get_their_own_results_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path().join("w.redb")).unwrap();
        let (writer, thread) = Writer::spawn(ledger.clone(), 64).unwrap();
        let mut tasks = Vec::new();
        for c in 0..8 {
            let w = writer.clone();
            tasks.push(tokio::spawn(async move {
                // Each batch: two new attempts, then the first one again (a duplicate).
                let batch = vec![
                    attempt(&format!("j{c}"), 1),
                    attempt(&format!("j{c}"), 2),
                    attempt(&format!("j{c}"), 1),
                ];
                w.submit(Batch::Attempts(batch)).await.unwrap()
            }));
        }
        for t in tasks {
            assert_eq!(
                t.await.unwrap(),
                vec![WriteResult::Accepted, WriteResult::Accepted, WriteResult::Duplicate]
            );
        }
        assert_eq!(writer.stats().batches.load(Ordering::Relaxed), 8);
        assert_eq!(writer.stats().records.load(Ordering::Relaxed), 24);
        drop(writer);
        thread.join();
        assert_eq!(ledger.attempt_count().unwrap(), 16);
    }

    #[tokio::test]
    async fn a_full_queue_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path().join("w.redb")).unwrap();
        let (tx, _rx) = mpsc::channel(1);
        let writer = Writer {
            tx,
            capacity: 1,
            stats: Arc::default(),
        };
        // Nobody drains this queue: the first batch waits in it, the second is refused.
        let w = writer.clone();
        let first = tokio::spawn(async move { w.submit(Batch::Attempts(vec![attempt("a", 1)])).await });
        while writer.queue_depth() == 0 {
            tokio::task::yield_now().await;
        }
        let second = writer.submit(Batch::Attempts(vec![attempt("b", 1)])).await;
        assert!(matches!(second, Err(SubmitError::QueueFull(1))), "{second:?}");
        assert_eq!(writer.stats().queue_full.load(Ordering::Relaxed), 1);
        first.abort();
        drop(ledger);
    }
}
