//! laneledger's web site: the weekly review, the weeks, the duplicate artifacts and each job's
//! attempts, as plain HTML pages rendered with askama and served by axum.
//!
//! [`app`] builds the [`Router`] (tests drive it with `tower::ServiceExt::oneshot`); [`serve`]
//! binds an address and runs it until Ctrl-C or SIGTERM. Every figure comes from the query layer
//! ([`laneledger_query::Session`]): the views `weekly_metrics` and `duplicate_artifact`, and the
//! ledger's per-job index for a job's attempts. Errors become one readable HTML page each
//! ([`AppError`]); internal details go to the log, never to the page.
//!
//! The folders, each importing only those listed after it: [`pages`] (the HTML pages) →
//! [`api`] (the JSON routes) → [`server`] (connections, bodies, tokens, SQL turns, the writer,
//! [`AppState`]); [`error`] and [`api_error`] (an HTML page and a JSON answer for each error)
//! and [`webhooks`] (alerts posted out) sit beside them. This file wires them into one router.
//!
//! ```no_run
//! # async fn run() -> Result<(), laneledger_web::Error> {
//! let ledger = laneledger_store::Ledger::open("laneledger.redb")?;
//! let session = laneledger_query::Session::new(ledger).await?;
//! let state = laneledger_web::AppState::new(session, laneledger_query::Thresholds::default());
//! laneledger_web::serve("127.0.0.1:8080".parse().unwrap(), state).await?;
//! # Ok(()) }
//! ```

pub mod api;
pub mod api_error;
pub mod error;
pub mod pages;
pub mod server;
pub mod webhooks;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use api::{cli_api, ingest_api, otlp, read_api};
use pages::{downloads, duplicates, job, retention, review, section_page, sql_page, weeks, whatif};
use server::{admission, auth, connections};

pub use api_error::ApiError;
pub use error::{AppError, Error, Result};
pub use server::auth::{Auth, Token};
pub use server::state::{AppState, Options};
pub use server::writer::{Writer, WriterThread};

/// The site's router.
///
/// - Pages: `/`, `/weeks`, `/weeks/{week}`, `/jobs/{job_id}`, `/duplicates`, `/sql`, and a 404
///   page for any other path; each page's tables as CSV or JSON under `…/tables/{name}.{csv,json}`.
/// - Reads: `GET /v1/review`, `POST /v1/sql`, `GET /metrics` (open, or the token with
///   [`Auth::reads_need_token`]); `GET /healthz` (always open).
/// - Writes: `POST /v1/attempts`, `POST /v1/decisions`, `POST /v1/traces` (OTLP/HTTP) (the
///   bearer token).
/// - Any other `/v1/` path is a JSON 404.
///
/// Every route has the body limit (413), the body read timeout, the request timeout (408) and a
/// JSON 500 for a handler that panics; SQL-running routes (with a bounded queue, 503 past it)
/// and write routes each have their own concurrency limit.
pub fn app(state: AppState) -> Router {
    let o = state.options;
    let auth = state.auth.clone();
    let reads = Router::new()
        .route("/", get(review::latest))
        .route("/weeks", get(weeks::list))
        .route("/weeks/{week}", get(review::week))
        .route("/weeks/{week}/whatif", get(whatif::page))
        .route("/weeks/{week}/tables/{file}", get(downloads::week_file))
        .route("/weeks/{week}/sections/{id}", get(section_page::page))
        .route("/weeks/tables/{file}", get(downloads::weeks_file))
        .route("/jobs/{job_id}", get(job::show))
        .route("/jobs/{job_id}/tables/{file}", get(downloads::job_file))
        .route("/duplicates/tables/{file}", get(downloads::duplicates_file))
        .route("/duplicates", get(duplicates::list))
        .route("/sql", get(sql_page::page))
        .route("/v1/review", get(read_api::review))
        .route("/v1/export", get(cli_api::export))
        .route("/v1/verify", post(cli_api::verify))
        .route("/v1/whatif", get(whatif::api))
        .route("/v1/sections/{id}", get(section_page::api))
        .route("/v1/sql", post(read_api::sql))
        .route("/v1/jobs/{job_id}/attempts", get(read_api::job_attempts))
        .route("/v1/idem/{idem_key}/attempts", get(read_api::idem_attempts))
        .route("/metrics", get(read_api::metrics))
        .route("/retention", get(retention::page))
        .fallback(error::not_found)
        // Pages run SQL on a 2-core box: let a few run at once and queue some behind them,
        // inside the timeout, rather than all of them slowing to a crawl together; past the
        // queue, 503 with Retry-After.
        .layer(from_fn_with_state(
            Arc::new(admission::Admission::new(o.query_concurrency, o.query_queue)),
            admission::admit,
        ))
        .layer(from_fn_with_state(auth.clone(), auth::require_read));
    let writes = Router::new()
        .route("/v1/attempts", post(ingest_api::post_attempts))
        .route("/v1/traces", post(otlp::post_traces))
        .route("/v1/decisions", post(ingest_api::post_decisions))
        .layer(tower::limit::ConcurrencyLimitLayer::new(o.write_concurrency.max(1)))
        .layer(from_fn_with_state(auth, auth::require_write));
    Router::new()
        .route("/healthz", get(read_api::healthz))
        .merge(writes)
        .merge(reads)
        .layer(DefaultBodyLimit::max(o.body_limit))
        .layer(RequestBodyLimitLayer::new(o.body_limit))
        .layer(from_fn_with_state(o.body_timeout, connections::body_timeout))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            o.request_timeout,
        ))
        // A handler that panics answers a JSON 500; the server goes on.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(
            connections::panic_answer,
        ))
        .with_state(state)
}

/// Binds `addr` and serves [`app`] until Ctrl-C or SIGTERM, then lets requests in flight finish.
///
/// Errors: [`Error::Bind`] when the address cannot be bound, [`Error::Serve`] when serving fails.
pub async fn serve(addr: SocketAddr, state: AppState) -> Result<()> {
    connections::raise_fd_limit();
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    tracing::info!("serving on http://{}", listener.local_addr().unwrap_or(addr));
    serve_until(listener, state, shutdown_signal()).await
}

/// Serves [`app`] on an already bound `listener` until `shutdown` completes, then lets requests
/// in flight finish (what [`serve`] does with Ctrl-C and SIGTERM as the signal).
///
/// Connections are bounded as [`server`] says. Never fails once the listener is bound (a failed
/// accept is logged and retried); the `Result` is kept for callers.
pub async fn serve_until(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let options = state.options;
    connections::run(listener, app(state), options, shutdown).await;
    Ok(())
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
