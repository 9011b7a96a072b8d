//! The door of the requests that run SQL: `--query-concurrency` of them run at once, up to
//! `--query-queue` more wait their turn, and past that a request is answered 503 at once, with
//! `Retry-After`, instead of joining an unbounded queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use crate::api_error::ApiError;

/// Seconds a client refused for a full queue is told to wait (`Retry-After`).
pub const RETRY_AFTER_S: u32 = 1;

/// The running and waiting SQL requests.
#[derive(Debug)]
pub struct Admission {
    running: Semaphore,
    concurrency: usize,
    waiting: AtomicUsize,
    queue: usize,
}

impl Admission {
    /// `concurrency` requests at once (at least 1), `queue` more waiting.
    pub fn new(concurrency: usize, queue: usize) -> Self {
        let concurrency = concurrency.max(1);
        Admission {
            running: Semaphore::new(concurrency),
            concurrency,
            waiting: AtomicUsize::new(0),
            queue,
        }
    }

    /// Requests waiting for a turn now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// Counts a waiting request out when it stops waiting (its turn came, or it was dropped).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The middleware: runs the request when a turn is free, waits in the queue when there is room,
/// else answers 503 with `Retry-After`.
pub async fn admit(State(door): State<Arc<Admission>>, request: Request, next: Next) -> Response {
    let _turn = match door.running.try_acquire() {
        Ok(turn) => turn,
        Err(_) => {
            if door.waiting.fetch_add(1, Ordering::SeqCst) >= door.queue {
                door.waiting.fetch_sub(1, Ordering::SeqCst);
                let mut e = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the server is busy: {} requests that run SQL are running and {} waiting, the most it \
                         queues (--query-queue); retry in {RETRY_AFTER_S} s",
                        door.concurrency, door.queue
                    ),
                );
                e.retry_after_s = Some(RETRY_AFTER_S);
                return e.into_response();
            }
            let _waiting = Waiting(&door.waiting);
            match door.running.acquire().await {
                Ok(turn) => turn,
                Err(e) => return ApiError::internal(e).into_response(),
            }
        }
    };
    next.run(request).await
}
