//! The threads user SQL runs on: a Tokio runtime of its own, apart from the caller's.
//!
//! DataFusion's operators are CPU-bound, and a join or an aggregate over a cross product can run
//! for minutes between two points where it gives its thread back. On the threads of the HTTP
//! server that would stop every other request, `/healthz` and the timers included (the timer of
//! the SQL timeout too). So, as DataFusion's `thread_pools` example and InfluxDB 3's dedicated
//! executor do, each statement is planned and run on a separate multi-thread runtime with its own
//! OS threads, and its answer comes back to the caller over the task's join handle.
//!
//! A caller that stops waiting (a timeout, a client gone) drops the future of [`Executor::run`],
//! which aborts the task: its plan's stream is dropped at the next point where it yields (every
//! DataFusion operator does between batches), and with it the tasks the plan spawned (DataFusion's
//! `SpawnedTask` and `JoinSet` abort on drop). A panic inside the statement is caught by the
//! runtime and comes back as [`Error::Panicked`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::runtime::{Handle, Runtime};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};

/// Stack of each SQL thread: deep expressions are planned recursively, and the refusal of one too
/// deep must come before the stack runs out (as the command's own thread, `src/main.rs`).
pub const SQL_THREAD_STACK_BYTES: usize = 256 << 20;

/// A runtime for SQL on threads of its own (cheap to clone: clones share it).
#[derive(Clone)]
pub struct Executor {
    handle: Handle,
    _runtime: Arc<Owned>,
    /// The CPU time of the runtime's threads, workers and blocking ones.
    threads: Arc<Threads>,
}

/// The `/proc` paths (`/proc/PID/task/TID`) of the live threads of a runtime, and the CPU ticks
/// of those that ended.
#[derive(Default)]
struct Threads {
    live: std::sync::Mutex<Vec<std::path::PathBuf>>,
    ended_ticks: std::sync::atomic::AtomicU64,
}

/// This thread's `/proc` path (Linux: `/proc/thread-self` links to `PID/task/TID`).
fn this_thread() -> Option<std::path::PathBuf> {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .map(|link| std::path::Path::new("/proc").join(link))
}

/// The user and system CPU ticks of the thread at `path` (a `/proc/PID/task/TID`).
fn ticks_of(path: &std::path::Path) -> Option<u64> {
    let stat = std::fs::read_to_string(path.join("stat")).ok()?;
    // The fields after the command name, which is in parentheses and may hold spaces: utime and
    // stime are the 12th and 13th of them.
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").finish_non_exhaustive()
    }
}

/// The runtime, shut down without waiting when the last [`Executor`] goes (possibly from inside
/// another runtime, where a plain drop would panic).
struct Owned(Option<Runtime>);

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Executor {
    /// A runtime of `threads` worker threads (at least 1) named `laneledger-sql`.
    ///
    /// Errors: [`Error::Internal`] when the threads cannot be started.
    pub fn new(threads: usize) -> Result<Self> {
        let paths: Arc<Threads> = Arc::default();
        let (started, stopped) = (paths.clone(), paths.clone());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads.max(1))
            .thread_name("laneledger-sql")
            .thread_stack_size(SQL_THREAD_STACK_BYTES)
            .on_thread_start(move || {
                if let (Some(me), Ok(mut live)) = (this_thread(), started.live.lock()) {
                    live.push(me);
                }
            })
            .on_thread_stop(move || {
                // Its ticks move to the ended count, so the total never goes back.
                if let (Some(me), Ok(mut live)) = (this_thread(), stopped.live.lock()) {
                    live.retain(|p| *p != me);
                    let ticks = ticks_of(&me).unwrap_or(0);
                    stopped.ended_ticks.fetch_add(ticks, Ordering::Relaxed);
                }
            })
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("starting the SQL threads: {e}")))?;
        Ok(Executor {
            handle: runtime.handle().clone(),
            _runtime: Arc::new(Owned(Some(runtime))),
            threads: paths,
        })
    }

    /// The CPU time (user and system, in clock ticks, 100 a second on Linux) the runtime's threads
    /// have used, the ones that ended included; `None` where `/proc` does not tell.
    pub fn cpu_ticks(&self) -> Option<u64> {
        let live = self.threads.live.lock().ok()?;
        let mut total = None;
        for p in live.iter() {
            if let Some(ticks) = ticks_of(p) {
                total = Some(total.unwrap_or(0) + ticks);
            }
        }
        total.map(|t| t + self.threads.ended_ticks.load(Ordering::Relaxed))
    }

    /// A runtime with one worker thread per core.
    ///
    /// Errors: [`Error::Internal`] when the threads cannot be started.
    pub fn per_core() -> Result<Self> {
        Self::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
    }

    /// Runs the future `work` makes on this runtime's threads and waits for its answer. Dropping
    /// the returned future raises the stop flag `work` is given (for the plan's operators to
    /// check, see [`crate::engine::stop`]) and aborts the task; a panic inside it is [`Error::Panicked`].
    pub fn run<T, F>(&self, work: impl FnOnce(Arc<AtomicBool>) -> F) -> Running<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        Running {
            task: self.handle.spawn(work(stop.clone())),
            stop,
        }
    }
}

/// The answer of work running on an [`Executor`]; dropped before it completes, the work is
/// stopped and aborted.
#[must_use = "dropping it aborts the work"]
pub struct Running<T> {
    task: JoinHandle<Result<T>>,
    stop: Arc<AtomicBool>,
}

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.abort();
    }
}

impl<T> Future for Running<T> {
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.task).poll(cx).map(|joined| match joined {
            Ok(answer) => answer,
            Err(e) if e.is_panic() => {
                let payload = e.into_panic();
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                Err(Error::Panicked(what))
            }
            Err(e) => Err(Error::Internal(format!("the statement was cancelled: {e}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn work_runs_on_other_threads_and_a_blocked_worker_does_not_stop_the_caller() {
        let exec = Executor::new(1).unwrap();
        let caller = std::thread::current().id();
        let on = exec
            .run(|_| async move { Ok(std::thread::current().id()) })
            .await
            .unwrap();
        assert_ne!(on, caller);
        // The only SQL thread spins for 300 ms without yielding; the caller's timer still fires.
        let busy = exec.run(|_| async {
            let start = std::time::Instant::now();
            while start.elapsed() < Duration::from_millis(300) {
                std::hint::spin_loop();
            }
            Ok(7)
        });
        let t = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(t.elapsed() < Duration::from_millis(200), "{:?}", t.elapsed());
        assert_eq!(busy.await.unwrap(), 7);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn dropping_the_answer_aborts_the_work() {
        let exec = Executor::new(1).unwrap();
        let finished = Arc::new(AtomicBool::new(false));
        let f = finished.clone();
        let running = exec.run(|_| async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            f.store(true, Ordering::SeqCst);
            Ok(())
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(running);
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!finished.load(Ordering::SeqCst));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_panic_is_an_error() {
        let exec = Executor::new(1).unwrap();
        let r: Result<()> = exec.run(|_| async { panic!("boom {}", 42) }).await;
        match r {
            Err(Error::Panicked(what)) => assert_eq!(what, "boom 42"),
            other => panic!("{other:?}"),
        }
    }
}
