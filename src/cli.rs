//! The command line (SPEC 8).

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// An embedded ledger database for LLM job attempts: ingest router logs, query them with SQL,
/// review the week.
#[derive(Debug, Parser)]
#[command(name = "laneledger", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The ledger file shared by most commands.
#[derive(Debug, clap::Args)]
pub struct DbArg {
    /// The ledger file.
    #[arg(long, default_value = "laneledger.redb")]
    pub db: PathBuf,
}

/// The server's access rules and limits, for `serve` and `demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArgs {
    /// A file holding the bearer token that writes (and, with --read-token, reads) need; else the
    /// LANELEDGER_TOKEN environment variable. Without a token, writes are off and only loopback
    /// addresses may be served.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Reads (pages, GET APIs, /v1/sql, /metrics) need the token too, as Bearer or as the HTTP
    /// Basic password. Always so on an address other than loopback.
    #[arg(long)]
    pub read_token: bool,
    /// The largest request body in bytes, before and after gzip (413 past it).
    #[arg(long, default_value_t = 16 << 20)]
    pub body_limit: usize,
    /// The most records one write request may hold (413 past it).
    #[arg(long, default_value_t = 100_000)]
    pub max_records: usize,
    /// Seconds one request may take (408 past it).
    #[arg(long, default_value_t = 30.0)]
    pub request_timeout: f64,
    /// Seconds one SQL statement may run (408 past it).
    #[arg(long, default_value_t = 20.0)]
    pub sql_timeout: f64,
    /// Bytes of memory the SQL operators (sorts, joins, aggregates) may hold; a query that needs
    /// more fails with 422 "resources exhausted".
    #[arg(long, default_value_t = laneledger_query::session::QUERY_MEMORY_BYTES)]
    pub sql_memory: usize,
    /// The most rows a statement's answer gives (/v1/sql, /sql); past it the answer is cut and
    /// says so (JSON "cut", the laneledger-cut header).
    #[arg(long, default_value_t = laneledger_query::session::MAX_RESULT_ROWS)]
    pub sql_max_rows: usize,
    /// The most bytes (in Arrow memory) a statement's answer gives; past it the answer is cut
    /// and says so.
    #[arg(long, default_value_t = laneledger_query::session::MAX_RESULT_BYTES)]
    pub sql_max_result_bytes: usize,
    /// Requests that run SQL (pages, /v1/review, /v1/sql, /metrics) served at once; more wait.
    #[arg(long, default_value_t = 4)]
    pub query_concurrency: usize,
    /// Write requests served at once; more wait.
    #[arg(long, default_value_t = 64)]
    pub write_concurrency: usize,
    /// Write requests waiting for the writer before more are answered 503 with Retry-After.
    #[arg(long, default_value_t = 64)]
    pub write_queue: usize,
    /// Requests that run SQL waiting for a turn (see --query-concurrency) before more are
    /// answered 503 with Retry-After.
    #[arg(long, default_value_t = 32)]
    pub query_queue: usize,
    /// Seconds a connection has to send a request's head, from its accept (the first request) or
    /// from the previous answer; past it the connection is closed.
    #[arg(long, default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds a kept-alive connection with no request in flight stays open after its last answer.
    #[arg(long, default_value_t = 5.0)]
    pub keep_alive_timeout: f64,
    /// Seconds the server waits for the next part of a request body; past it the request fails
    /// (400) and the connection is closed.
    #[arg(long, default_value_t = 10.0)]
    pub body_timeout: f64,
    /// Open connections at most (lowered to fit the open-file limit); past it a new connection is
    /// closed at once.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// `POST /v1/traces`: where a span carries no idempotency key (attribute
    /// `laneledger.idem_key`), use its trace id, as `?idem_fallback=1` does per request. Each such
    /// attempt says so in `attrs.idem_key_from`, and the review counts them.
    #[arg(long)]
    pub otlp_idem_fallback: bool,
}

/// Input formats for `ingest`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum FormatArg {
    /// One JSON object a line.
    Ndjson,
    /// A header row, then one record a row.
    Csv,
    /// A SQLite database file holding a `job_attempt` ledger table (job_id, idem_key,
    /// attempt_no, lane, started_at, …): one attempt a row.
    Sqlite,
}

/// What an input file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    /// Attempt records (one a model call, the rows of `job_attempt`).
    Attempts,
    /// Gate decisions (the dwell gate's admissions, the rows of `gate_decision`).
    Decisions,
}

/// Output formats for `sql`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SqlFormat {
    /// An aligned text table.
    Table,
    /// RFC 4180 CSV with a header row.
    Csv,
    /// A JSON array of objects.
    Json,
}

/// Output formats for `review`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReviewFormat {
    /// Aligned text.
    Text,
    /// JSON.
    Json,
}

/// File formats for `export`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ExportFormatArg {
    /// Apache Parquet, Snappy-compressed (`.parquet`).
    Parquet,
    /// Arrow IPC file (`.arrow`).
    Arrow,
    /// RFC 4180 CSV with a header row (`.csv`).
    Csv,
}

/// The drill's routing policy.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PolicyArg {
    /// Pin to paid after an ambiguous or permanent outcome, one idempotency key per job.
    Pin,
    /// Retry free, no pin.
    Nopin,
}

/// How the drill spells job numbers in its ids.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum IdsArg {
    /// Zero-padded, in arrival order (`job-000042`).
    Sequential,
    /// 16 hex digits, in no order (`job-e220a8397b1dcdaf`).
    Random,
}

/// The order the drill writes its attempts in.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum OrderArg {
    /// Job by job, each job's attempts together.
    Job,
    /// By started_at, jobs interleaved, as a router logs them.
    Time,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Ingest attempt records (or, with --kind decisions, gate decisions) from NDJSON or CSV files
    /// (`-` for stdin). Exit 0 when every record was taken or was a duplicate, 3 when some were
    /// rejected or in conflict, 1 on an I/O error.
    Ingest {
        #[command(flatten)]
        db: DbArg,
        /// What the files hold.
        #[arg(long, value_enum, default_value = "attempts")]
        kind: KindArg,
        /// lane.yaml, checked before anything is written (its settings apply when the ledger is
        /// read: review, serve).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The input format; by default `.csv` files are CSV and everything else NDJSON.
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
        /// With --format sqlite: the table to read (`job_attempt` by default).
        #[arg(long)]
        table: Option<String>,
        /// Read a router's own log through a mapping: a built-in name (otlp, litellm,
        /// litellm-spendlogs, openrouter, langfuse) or a mapping file (YAML). A folder is read as
        /// its `.json`, `.ndjson`, `.jsonl`, `.csv` and `.parquet` files, in name order.
        #[arg(long, value_name = "NAME|FILE.yaml")]
        mapping: Option<String>,
        /// With --mapping: where a record carries no idempotency key, use the request id the
        /// mapping declares as its fallback (a trace id, a generation id). Each such attempt says
        /// so in `attrs.idem_key_from`, and the review counts them: duplicates across client
        /// retries cannot be seen through such a key.
        #[arg(long)]
        idem_fallback: bool,
        /// With --mapping: write nothing; print, per attempt field, the share of records where
        /// it was found, and the first mapped records.
        #[arg(long)]
        dry_run: bool,
        /// Records per write transaction, 1–1,000,000: each batch is one fsync'd commit, and a
        /// record is durable (and counted) once its batch has committed.
        #[arg(long, default_value_t = laneledger_store::DEFAULT_BATCH as u32,
              value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        batch: u32,
        /// Leave the file as the commits left it. By default, once every input is in, the file's
        /// free pages are given back as `laneledger compact` does (10 M drill attempts: about 1 s,
        /// 44% of the file).
        #[arg(long)]
        no_compact: bool,
        /// Files to read; `-` reads stdin.
        #[arg(required = true)]
        files: Vec<String>,
    },
    /// Run one read-only SQL statement over the ledger.
    Sql {
        #[command(flatten)]
        db: DbArg,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: SqlFormat,
        /// Seconds the statement may run; past it it is stopped and `sql` exits 5. 0: no limit.
        #[arg(long, default_value_t = 60.0)]
        timeout: f64,
        /// Bytes of memory the SQL operators (sorts, joins, aggregates) may hold; a statement that
        /// needs more fails with "resources exhausted" (exit 1).
        #[arg(long, default_value_t = laneledger_query::session::QUERY_MEMORY_BYTES)]
        memory: usize,
        /// The most rows printed; past it the answer is cut there and a line on stderr says so
        /// (the exit code stays 0). `laneledger export` writes whole tables.
        #[arg(long, default_value_t = laneledger_query::session::MAX_RESULT_ROWS)]
        max_rows: usize,
        /// The most bytes (in Arrow memory) of answer kept; past it the answer is cut there and a
        /// line on stderr says so.
        #[arg(long, default_value_t = laneledger_query::session::MAX_RESULT_BYTES)]
        max_result_bytes: usize,
        /// The statement, e.g. "SELECT * FROM job_rollup LIMIT 5"; `-` reads it from stdin.
        #[arg(allow_hyphen_values = true)]
        sql: String,
    },
    /// Print the weekly review of one ISO week: its alerts (the firing ones first), the drill
    /// table beside the week before, and each audit's rows.
    Review {
        #[command(flatten)]
        db: DbArg,
        /// The ISO week, e.g. 2026-W47; the latest week with data by default.
        #[arg(long)]
        week: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: ReviewFormat,
        /// lane.yaml (thresholds, windows, key rests); the documented defaults when absent.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// What-if: decide one week again under another lane.yaml. The week's gate decisions are
    /// decided again under the other gate caps (exactly), and its jobs are routed again under the
    /// other lane policy with outcomes drawn from the week's own outcome rates (seeded: the same
    /// seed gives the same figures), each beside the week as logged and as today's settings give.
    Whatif {
        #[command(flatten)]
        db: DbArg,
        /// The ISO week, e.g. 2026-W48.
        #[arg(long)]
        week: String,
        /// The changed lane.yaml (`lanes.free.max_attempts`, `lanes.free.pin_on`,
        /// `lanes.paid.max_attempts`, `keys.max_attempts_per_turn`, `gate.max_queue_age_s`,
        /// `gate.reserved_service_s` are read). Change one setting at a time.
        #[arg(long)]
        config: PathBuf,
        /// Today's lane.yaml, to compare with; the documented defaults when absent.
        #[arg(long, value_name = "LANE_YAML")]
        base: Option<PathBuf>,
        /// The replay's random seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Output format.
        #[arg(long, value_enum, default_value = "text")]
        format: ReviewFormat,
    },
    /// Serve the review site, the read APIs and (with a token) the write APIs. A second process
    /// on the same ledger file is refused. SIGTERM or Ctrl-C stops it after the requests in flight
    /// are answered and every acknowledged batch is committed.
    Serve {
        #[command(flatten)]
        db: DbArg,
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
        /// lane.yaml (thresholds, windows, key rests); the documented defaults when absent.
        #[arg(long)]
        config: Option<PathBuf>,
        #[command(flatten)]
        server: ServerArgs,
        /// Run a retention sweep this often while serving: `90s`, `30m`, `1h`, `1d`;
        /// `0` turns it off.
        #[arg(long, default_value = "1h", value_parser = parse_every)]
        retain_every: std::time::Duration,
    },
    /// Remove finished jobs older than the retention window, archiving them first when
    /// asked; each sweep that removes something leaves a `retention_sweep` row.
    Retain {
        #[command(flatten)]
        db: DbArg,
        /// Days to keep; lane.yaml `retention.days` (30) by default.
        #[arg(long)]
        days: Option<u32>,
        /// Print what would be removed; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Archive what is removed first, as Parquet partitioned by day, under DIR/sweep-NNNNNN.
        #[arg(long, value_name = "DIR")]
        archive: Option<PathBuf>,
        /// lane.yaml (`retention.days`, `reconcile.late_completion_window_s`).
        #[arg(long)]
        config: Option<PathBuf>,
        /// The sweep's clock (RFC 3339), for tests; the system clock by default.
        #[arg(long, hide = true)]
        now: Option<String>,
    },
    /// Give the ledger file's free pages back to the file system (after a bulk ingest or a
    /// retention sweep): redb moves the pages in use down and cuts off the free end. Records, the
    /// chain and its tip are unchanged. Needs the file to itself: not while `serve` runs on it
    Compact {
        #[command(flatten)]
        db: DbArg,
    },
    /// Check the ledger's hash chain and every record against it; exit 0 when clean, 4 when a
    /// record was changed, removed, added or reordered (the first one is named).
    Verify {
        #[command(flatten)]
        db: DbArg,
        /// The time logged for this run (RFC 3339), for tests; the system clock by default.
        #[arg(long, hide = true)]
        now: Option<String>,
    },
    /// Generate the lane drill as attempt NDJSON, synthetic or replaying a request trace.
    Drill {
        /// Jobs to generate (with --trace: at most this many trace rows; all by default).
        #[arg(long, required_unless_present = "trace")]
        jobs: Option<usize>,
        /// The routing policy.
        #[arg(long, value_enum)]
        policy: PolicyArg,
        /// The random seed; the same seed gives the same output.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// When the first job starts (RFC 3339).
        #[arg(long, default_value = "2026-11-16T00:00:00Z")]
        start: String,
        /// Days the synthetic jobs are spread over.
        #[arg(long, default_value_t = 5.0)]
        days: f64,
        /// Replay a request trace (CSV: TIMESTAMP,ContextTokens,GeneratedTokens); the output keeps
        /// the trace's line ends and final-newline framing.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Prefix of job_id, idem_key and artifact_id.
        #[arg(long, default_value = "")]
        job_prefix: String,
        /// How job numbers are spelled in job_id, idem_key and artifact_id: `sequential`
        /// (`job-000042`, in arrival order) or `random` (`job-` and 16 hex digits, in no order,
        /// like the UUIDs most routers write).
        #[arg(long, value_enum, default_value = "sequential")]
        ids: IdsArg,
        /// The order of the attempts: `job` (each job's attempts together, job after job) or
        /// `time` (the same attempts by started_at, as a router logs them: jobs interleave and a
        /// retry comes after what other jobs started meanwhile; ties in job order, then attempt_no).
        #[arg(long, value_enum, default_value = "job")]
        order: OrderArg,
        /// Write here instead of stdout.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Export the attempts (the `job_attempt` table) as files partitioned by UTC day of
    /// started_at: OUT/day=YYYY-MM-DD/attempts.{parquet,arrow,csv}. Parquet also writes the
    /// ledger's gate_decision (by UTC day of decided_at), week_snapshot and retention_sweep under
    /// OUT/ledger/. A rerun into the same folder overwrites its files. Exit 0 when written, 2 on a
    /// bad --since/--until or lane.yaml, 1 on an I/O error.
    Export {
        #[command(flatten)]
        db: DbArg,
        /// The file format.
        #[arg(long, value_enum)]
        format: ExportFormatArg,
        /// The output folder (created when missing).
        #[arg(long)]
        out: PathBuf,
        /// Only attempts that started at or after this time: RFC 3339, or YYYY-MM-DD for
        /// midnight UTC.
        #[arg(long)]
        since: Option<String>,
        /// Only attempts that started before this time: RFC 3339, or YYYY-MM-DD for midnight UTC.
        #[arg(long)]
        until: Option<String>,
        /// lane.yaml: its gate defaults fill the exported gate_decision where a decision logged
        /// none, as in SQL; the documented defaults when absent.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List the built-in mappings (routers' logs `ingest --mapping` reads), or print one as YAML
    /// to copy and edit: `laneledger mappings litellm > my-litellm.yaml`.
    Mappings {
        /// The built-in mapping to print.
        name: Option<String>,
    },
    /// Build a ledger from sample-data/ in a temporary folder and serve it (with
    /// sample-data/lane.yaml when there is one).
    Demo {
        /// The address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
        /// The sample data folder.
        #[arg(long)]
        data: Option<PathBuf>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

/// Parses `--retain-every`: a whole number with `s`, `m`, `h` or `d`, or `0` for off.
pub fn parse_every(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let (n, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 90s, 30m, 1h or 1d"))?;
    let secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("{text:?} is not a duration like 90s, 30m, 1h or 1d")),
    };
    Ok(std::time::Duration::from_secs(n.saturating_mul(secs)))
}
