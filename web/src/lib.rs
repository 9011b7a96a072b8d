//! laneledger's web site: the weekly review, the weeks, the duplicate artifacts and each job's
//! attempts, as plain HTML pages rendered with askama and served by axum.
//!
//! [`app`] builds the [`Router`] (tests drive it with `tower::ServiceExt::oneshot`); [`serve`]
//! binds an address and runs it until Ctrl-C or SIGTERM. Every figure comes from the query layer
//! ([`laneledger_query::Session`]): the views `weekly_metrics` and `duplicate_artifact`, and the
//! ledger's per-job index for a job's attempts. Errors become one readable HTML page each
//! ([`AppError`]); internal details go to the log, never to the page.
//!
//! ```no_run
//! # async fn run() -> Result<(), laneledger_web::Error> {
//! let ledger = laneledger_store::Ledger::open("laneledger.redb")?;
//! let session = laneledger_query::Session::new(ledger).await?;
//! let state = laneledger_web::AppState::new(session, laneledger_query::Thresholds::default());
//! laneledger_web::serve("127.0.0.1:8080".parse().unwrap(), state).await?;
//! # Ok(()) }
//! ```

mod duplicates;
pub mod error;
mod html;
mod job;
pub mod retention;
mod review;
mod sections;
mod weeks;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use laneledger_query::{Session, Thresholds};
use tokio::net::TcpListener;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

pub use error::{AppError, Error, Result};

/// How long one request may take before the site answers 503.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest request body accepted, in bytes (1 MiB); the site only serves `GET` pages.
pub const BODY_LIMIT: usize = 1 << 20;

/// What every handler shares: the query session over the ledger and seed 000's alert thresholds.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The DataFusion session over the ledger (cheap to clone).
    pub session: Session,
    /// The alert thresholds (seed 000 `lane.yaml` `alerts`).
    pub thresholds: Thresholds,
}

impl AppState {
    /// A state over `session` with `thresholds`.
    pub fn new(session: Session, thresholds: Thresholds) -> Self {
        AppState { session, thresholds }
    }
}

/// Pages rendered at once; more requests wait their turn (within the request timeout).
pub const PAGE_CONCURRENCY: usize = 4;

/// The site's router: `/`, `/weeks`, `/weeks/{week}`, `/jobs/{job_id}`, `/duplicates`, and a
/// 404 page for any other path, with a request timeout and a body size limit.
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/", get(review::latest))
        .route("/weeks", get(weeks::list))
        .route("/weeks/{week}", get(review::week))
        .route("/jobs/{job_id}", get(job::show))
        .route("/duplicates", get(duplicates::list))
        .route("/retention", get(retention::page))
        .fallback(error::not_found)
        .layer(RequestBodyLimitLayer::new(BODY_LIMIT))
        // Pages run SQL on a 2-core box: let a few run at once and queue the rest behind them,
        // inside the timeout, rather than all of them slowing to a crawl together.
        .layer(tower::limit::ConcurrencyLimitLayer::new(PAGE_CONCURRENCY))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            REQUEST_TIMEOUT,
        ))
        .with_state(state)
}

/// Binds `addr` and serves [`app`] until Ctrl-C or SIGTERM, then lets requests in flight finish.
///
/// Errors: [`Error::Bind`] when the address cannot be bound, [`Error::Serve`] when serving fails.
pub async fn serve(addr: SocketAddr, state: AppState) -> Result<()> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    tracing::info!("serving on http://{}", listener.local_addr().unwrap_or(addr));
    serve_until(listener, state, shutdown_signal()).await
}

/// Serves [`app`] on an already bound `listener` until `shutdown` completes, then lets requests
/// in flight finish (what [`serve`] does with Ctrl-C and SIGTERM as the signal).
///
/// Errors: [`Error::Serve`] when serving fails.
pub async fn serve_until(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(Error::Serve)
}

/// Completes on Ctrl-C, or on SIGTERM where there is one.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!("cannot listen for Ctrl-C: {e}");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(e) => {
                tracing::warn!("cannot listen for SIGTERM: {e}");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down: finishing requests in flight");
}
