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

pub mod admission;
pub mod api_error;
pub mod auth;
pub mod body;
mod charts;
pub mod cli_api;
mod daily;
mod downloads;
mod duplicates;
pub mod error;
mod html;
pub mod ingest_api;
mod job;
pub mod mapped_api;
pub mod otlp;
pub mod read_api;
pub mod retention;
mod review;
mod section_page;
mod sections;
pub mod server;
mod sql_page;
mod timeline;
mod trends;
pub mod webhooks;
mod weeks;
pub mod whatif;
pub mod writer;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use laneledger_query::{Session, Thresholds};
use tokio::net::TcpListener;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

pub use api_error::ApiError;
pub use auth::{Auth, Token};
pub use error::{AppError, Error, Result};
pub use writer::{Writer, WriterThread};

/// The server's limits; every one is a `laneledger serve` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The largest request body, in bytes, before and after gzip (413 past it). Default 16 MiB.
    pub body_limit: usize,
    /// The most records one write request may hold (413 past it). Default 100,000.
    pub max_records: usize,
    /// How long one request may take (408 past it). Default 30 s.
    pub request_timeout: Duration,
    /// How long one SQL statement may run (`/v1/sql`, `/sql`; 408 past it). Default 20 s.
    pub sql_timeout: Duration,
    /// The rows and Arrow bytes a user's statement (`/v1/sql`, `/sql`) answers; past either the
    /// answer is cut there and says so. Default 1,000,000 rows and 256 MiB.
    pub sql_result: laneledger_query::ResultLimits,
    /// Requests that run SQL (pages, `/v1/review`, `/v1/sql`, `/metrics`) served at once; more wait.
    /// Default 4.
    pub query_concurrency: usize,
    /// Write requests served at once; more wait. Default 64.
    pub write_concurrency: usize,
    /// Requests that run SQL waiting for one of the `query_concurrency` turns; past it 503 with
    /// `Retry-After`. Default 32.
    pub query_queue: usize,
    /// The head of a request must arrive within it, counted from the accept for a connection's
    /// first request and from the previous answer for the next; else the connection is closed.
    /// Default 10 s.
    pub header_timeout: Duration,
    /// A connection with no request in flight is closed this long after its last answer.
    /// Default 5 s.
    pub keep_alive_timeout: Duration,
    /// The longest wait for the next part of a request body; past it the request fails (400) and
    /// the connection is closed. Default 10 s.
    pub body_timeout: Duration,
    /// Open connections; past it (or past the open-file limit less a reserve) a new connection
    /// is closed at once. Default 4,096.
    pub max_connections: usize,
    /// `POST /v1/traces` may take the `otlp` mapping's idempotency-key fallback (the trace id)
    /// for every request, as `?idem_fallback=1` does for one. Default false.
    pub otlp_idem_fallback: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            body_limit: 16 << 20,
            max_records: 100_000,
            request_timeout: Duration::from_secs(30),
            sql_timeout: Duration::from_secs(20),
            sql_result: laneledger_query::ResultLimits::default(),
            query_concurrency: 4,
            write_concurrency: 64,
            query_queue: 32,
            header_timeout: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(10),
            max_connections: 4096,
            otlp_idem_fallback: false,
        }
    }
}

/// What every handler shares: the query session over the ledger, seed 000's alert thresholds,
/// the writer (when the server takes writes), the access rules and the limits.
#[derive(Debug, Clone)]
pub struct AppState {
    /// The DataFusion session over the ledger (cheap to clone).
    pub session: Session,
    /// The alert thresholds (seed 000 `lane.yaml` `alerts`).
    pub thresholds: Thresholds,
    /// The group-commit writer; `None` serves reads only.
    pub writer: Option<Writer>,
    /// Who may write and read.
    pub auth: Arc<Auth>,
    /// The limits.
    pub options: Options,
    /// Held from the ledger read to the commit by writes whose attempt numbers are derived from
    /// the ledger (`POST /v1/traces`), so two of them cannot take the same next number.
    pub(crate) derive_lock: Arc<tokio::sync::Mutex<()>>,
}

impl AppState {
    /// A read-only state over `session` with `thresholds`, open reads and the default limits.
    pub fn new(session: Session, thresholds: Thresholds) -> Self {
        AppState {
            session,
            thresholds,
            writer: None,
            auth: Arc::default(),
            options: Options::default(),
            derive_lock: Arc::default(),
        }
    }

    /// The same state taking writes through `writer`, for holders of `auth`'s token.
    pub fn with_writer(mut self, writer: Writer, auth: Auth) -> Self {
        self.writer = Some(writer);
        self.auth = Arc::new(auth);
        self
    }

    /// The same state with other access rules.
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = Arc::new(auth);
        self
    }

    /// The same state with other limits.
    pub fn with_options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }
}

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
        .layer(from_fn_with_state(o.body_timeout, server::body_timeout))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            o.request_timeout,
        ))
        // A handler that panics answers a JSON 500; the server goes on.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(server::panic_answer))
        .with_state(state)
}

/// Binds `addr` and serves [`app`] until Ctrl-C or SIGTERM, then lets requests in flight finish.
///
/// Errors: [`Error::Bind`] when the address cannot be bound, [`Error::Serve`] when serving fails.
pub async fn serve(addr: SocketAddr, state: AppState) -> Result<()> {
    server::raise_fd_limit();
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
    server::run(listener, app(state), options, shutdown).await;
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
