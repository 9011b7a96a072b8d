//! The accept loop: HTTP/1.1 connections bounded in number and in the time they may sit idle.
//!
//! `axum::serve` sets no timeout on reading a request's head, so a client sending one byte a
//! second, or a thousand clients sending nothing, hold their connections (and file descriptors)
//! as long as they like. Here each connection is served by hyper's HTTP/1 connection with
//!
//! - a header-read timeout ([`Options::header_timeout`]): the head of a request must arrive
//!   within it, counted from the accept for the first request (so a connection that says nothing
//!   is closed too) and from the end of the previous answer for the next ones;
//! - a keep-alive idle timeout ([`Options::keep_alive_timeout`]): a connection with no request in
//!   flight is closed that long after its last answer;
//! - a cap on open connections ([`Options::max_connections`], lowered to fit the process's file
//!   descriptor limit): past it a new connection is closed at once, so the accept loop never
//!   stops and the server never runs out of descriptors; the body read timeout is a layer of
//!   [`crate::app`].

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::server::state::Options;

/// File descriptors kept back from the connection cap for the ledger file, the listener, the
/// runtime's own and the standard streams.
pub const FD_RESERVE: u64 = 64;

/// Connections closed at once because the cap was reached, since the process started.
pub static REFUSED_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Raises the soft limit on open file descriptors to the hard limit, and returns the soft limit
/// in force then (`None`: unlimited or unknown).
pub fn raise_fd_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!("cannot raise the open file limit to {:?}: {e}", limit.maximum);
        }
    }
    getrlimit(Resource::Nofile).current
}

/// The open connections allowed: `max`, lowered to fit the soft descriptor limit less
/// [`FD_RESERVE`]; at least 1.
pub fn connection_cap(max: usize) -> usize {
    let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let fit = soft.map_or(usize::MAX, |s| {
        usize::try_from(s.saturating_sub(FD_RESERVE)).unwrap_or(usize::MAX)
    });
    max.min(fit).max(1)
}

/// Serves `router` on `listener` until `shutdown`, then closes idle connections, lets the
/// requests in flight finish and returns.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let cap = connection_cap(options.max_connections);
    tracing::info!("up to {cap} open connections");
    let slots = Arc::new(Semaphore::new(cap));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of descriptors or memory: wait a little rather than spin.
                        tracing::warn!("accepting a connection: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    REFUSED_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                    continue;
                };
                connections.spawn(connection(stream, router.clone(), options, stop_rx.clone(), slot));
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    while connections.join_next().await.is_some() {}
}

/// What a connection's watchdog reads: requests in flight and when the last answer was given.
struct Activity {
    start: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `start` to the end of the last answer (0: none yet).
    last_done_ms: AtomicU64,
}

impl Activity {
    /// Whether an answer was given.
    fn served(&self) -> bool {
        self.last_done_ms.load(Ordering::SeqCst) > 0
    }
}

/// Counts a request in flight until its answer is ready.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(a: &Arc<Activity>) -> Self {
        a.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let ms = self.0.start.elapsed().as_millis() as u64;
        self.0.last_done_ms.store(ms.max(1), Ordering::SeqCst);
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Serves one connection until the client closes it, a timeout closes it, or the server stops.
async fn connection(
    stream: TcpStream,
    router: Router,
    options: Options,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity {
        start: Instant::now(),
        in_flight: AtomicUsize::new(0),
        last_done_ms: AtomicU64::new(0),
    });
    let a = activity.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        let router = router.clone();
        let in_flight = InFlight::enter(&a);
        async move {
            let answer = router.oneshot(request.map(Body::new)).await;
            drop(in_flight);
            answer
        }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let mut closing = false;
    loop {
        let idle_deadline = idle_deadline(&activity, options.keep_alive_timeout);
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::debug!("connection closed: {e}");
                }
                break;
            }
            _ = stop.changed(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            () = tokio::time::sleep_until(idle_deadline.into()), if !closing => {
                if idle_deadline_passed(&activity, options.keep_alive_timeout) {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// When the connection will have been idle for `keep_alive` (a request in flight, or none
/// answered yet: check again after `keep_alive`; the header-read timeout covers the latter).
fn idle_deadline(a: &Activity, keep_alive: Duration) -> Instant {
    if !a.served() || a.in_flight.load(Ordering::SeqCst) > 0 {
        return Instant::now() + keep_alive;
    }
    a.start + Duration::from_millis(a.last_done_ms.load(Ordering::SeqCst)) + keep_alive
}

/// Whether the connection has answered, has no request in flight, and its last answer is
/// `keep_alive` old.
fn idle_deadline_passed(a: &Activity, keep_alive: Duration) -> bool {
    a.served()
        && a.in_flight.load(Ordering::SeqCst) == 0
        && a.start.elapsed() >= Duration::from_millis(a.last_done_ms.load(Ordering::SeqCst)) + keep_alive
}

/// The middleware of [`Options::body_timeout`]: a request body that sends nothing for `limit`
/// fails to read (the handler answers 400, and hyper closes the connection, whose body was not
/// read to its end); [`Options::request_timeout`] bounds the whole.
pub(crate) async fn body_timeout(
    axum::extract::State(limit): axum::extract::State<Duration>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let request = request.map(|body| Body::new(tower_http::timeout::TimeoutBody::new(limit, body)));
    next.run(request).await
}

/// The answer to a handler that panicked: a JSON 500 saying the request failed (the panic and its
/// backtrace went to the log through the panic hook).
pub(crate) fn panic_answer(panic: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    tracing::error!("a request handler panicked: {what}");
    crate::api_error::ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "the request failed: the server stopped on an internal error while answering it; the details are in \
         the server's log",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use http_body_util::BodyExt;

    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_a_json_500() {
        async fn boom() -> &'static str {
            panic!("handler bug")
        }
        let router = Router::new()
            .route("/boom", get(boom))
            .layer(tower_http::catch_panic::CatchPanicLayer::custom(panic_answer));
        let answer = router
            .oneshot(axum::http::Request::get("/boom").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(answer.status(), axum::http::StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(answer.headers()["content-type"], "application/json");
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["error"],
            "the request failed: the server stopped on an internal error while answering it; the details are in \
             the server's log"
        );
    }

    #[test]
    fn the_connection_cap_fits_the_descriptor_limit() {
        let soft = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        assert_eq!(connection_cap(0), 1);
        assert_eq!(connection_cap(10), 10);
        if let Some(soft) = soft {
            let fit = usize::try_from(soft.saturating_sub(FD_RESERVE)).unwrap().max(1);
            assert_eq!(connection_cap(usize::MAX), fit);
        }
    }
}
