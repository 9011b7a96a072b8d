//! Runs of attempt rows merged on a second thread while a bulk ingest writes
//! ([`crate::storage::attempt_store`]).
//!
//! A random-id ingest puts nearly every row in its commit's run, and the runs are merged by size
//! tier: each row is read back, unpacked and packed again about three times. On the writer's
//! thread, the ingest's critical path, that was about a quarter of its time, while the second
//! core was half idle. Here the merges read committed snapshots instead: after each commit the
//! merging thread looks for a window of runs due ([`merge_committed`]), merges it, and hands the
//! packed run back; the writer puts it in place at its next commit ([`AttemptWriter::install`]),
//! a few inserts, unless the runs changed since (then the work is dropped and the runs stay).
//! Reads see the same rows either way: a merged run replaces its window in place.
//!
//! [`AttemptWriter::install`]: crate::storage::attempt_store::AttemptWriter::install

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use redb::ReadTransaction;

use crate::error::Result;
use crate::storage::attempt_store::{MergedRun, merge_committed};

/// What the writer tells the merging thread.
enum Told {
    /// A write transaction ended (committed or not); `took` when it took the merged run handed
    /// back before, so that the next snapshot is read after it.
    Ended { took: bool },
    /// Answer [`Answer::Settled`] once the merge under way, if any, is handed back.
    Settle,
}

/// What the merging thread hands back.
enum Answer {
    Merged(Result<MergedRun>),
    Settled,
}

/// The merging thread of one ledger, while a bulk ingest runs.
pub(crate) struct BackgroundMerges {
    to: Option<Sender<Told>>,
    back: Receiver<Answer>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    /// Whether [`BackgroundMerges::take`] handed out a run since the last [`BackgroundMerges::ended`].
    took: bool,
    /// The thread met an error: merges go back to the writer's thread, which meets it again and
    /// reports it.
    failed: bool,
}

impl BackgroundMerges {
    /// Starts the thread; `snapshot` opens a read transaction of the ledger.
    pub(crate) fn start(snapshot: impl Fn() -> Result<ReadTransaction> + Send + 'static) -> Self {
        let (to, told) = channel::<Told>();
        let (answer, back) = channel::<Answer>();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let handle = std::thread::Builder::new()
            .name("run-merges".into())
            .spawn(move || merging(told, answer, snapshot, stopping))
            .expect("spawning the run-merging thread");
        BackgroundMerges {
            to: Some(to),
            back,
            stop,
            handle: Some(handle),
            took: false,
            failed: false,
        }
    }

    /// Whether the writer is to merge its runs itself (the thread failed).
    pub(crate) fn failed(&self) -> bool {
        self.failed
    }

    /// The merged run handed back since the last call, if any.
    pub(crate) fn take(&mut self) -> Option<MergedRun> {
        while let Ok(answer) = self.back.try_recv() {
            match answer {
                Answer::Merged(Ok(run)) => {
                    self.took = true;
                    return Some(run);
                }
                Answer::Merged(Err(_)) => self.failed = true,
                Answer::Settled => {}
            }
        }
        None
    }

    /// Tells the thread a write transaction ended (after its commit, or after it failed).
    pub(crate) fn ended(&mut self) {
        let took = std::mem::take(&mut self.took);
        if let Some(to) = &self.to
            && to.send(Told::Ended { took }).is_err()
        {
            self.failed = true;
        }
    }

    /// Waits for the merge under way, if any, and hands back its run (to install before the
    /// thread stops).
    pub(crate) fn settle(&mut self) -> Option<MergedRun> {
        let mut merged = None;
        let Some(to) = &self.to else { return None };
        if to.send(Told::Settle).is_err() {
            return None;
        }
        while let Ok(answer) = self.back.recv() {
            match answer {
                Answer::Merged(Ok(run)) => merged = Some(run),
                Answer::Merged(Err(_)) => self.failed = true,
                Answer::Settled => break,
            }
        }
        merged
    }
}

impl Drop for BackgroundMerges {
    fn drop(&mut self) {
        // A merge under way stops at its next block; the thread ends when the channel closes.
        self.stop.store(true, Ordering::Relaxed);
        self.to = None;
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

/// The thread: after each write transaction, unless the run it handed back is still to be taken,
/// merges the window due in a new snapshot, if any.
fn merging(
    told: Receiver<Told>,
    answer: Sender<Answer>,
    snapshot: impl Fn() -> Result<ReadTransaction>,
    stop: Arc<AtomicBool>,
) {
    let mut waiting = false;
    while let Ok(t) = told.recv() {
        match t {
            Told::Settle => {
                if answer.send(Answer::Settled).is_err() {
                    return;
                }
                continue;
            }
            Told::Ended { took } => waiting &= !took,
        }
        // Transactions that ended while this thread merged: one snapshot serves them all.
        let mut settle = false;
        while let Ok(t) = told.try_recv() {
            match t {
                Told::Ended { took } => waiting &= !took,
                Told::Settle => settle = true,
            }
        }
        // Settling ends the ingest: no new merge is started for it.
        if !waiting && !settle && !stop.load(Ordering::Relaxed) {
            let merged = snapshot().and_then(|txn| merge_committed(&txn, &stop));
            match merged {
                Ok(None) => {}
                Ok(Some(run)) => {
                    waiting = true;
                    if answer.send(Answer::Merged(Ok(run))).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = answer.send(Answer::Merged(Err(e)));
                    return;
                }
            }
        }
        if settle && answer.send(Answer::Settled).is_err() {
            return;
        }
    }
}
