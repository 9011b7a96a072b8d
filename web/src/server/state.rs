//! What every handler shares ([`AppState`]) and the server's limits ([`Options`]).

use std::sync::Arc;
use std::time::Duration;

use laneledger_query::{Session, Thresholds};

use crate::server::auth::Auth;
use crate::server::writer::Writer;

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
