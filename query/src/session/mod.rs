//! The DataFusion session over the ledger: tables, views, SQLite's `SUM`, and the one door for
//! user SQL, which is read-only; and the results as text ([`output`]).
//!
//! Imports: [`crate::derived`], [`crate::tables`], [`crate::engine`], and the crate root's
//! [`crate::error`] and [`crate::words`].

pub mod output;

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{ArrayData, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::context::{SQLOptions, SessionConfig, SessionContext};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use futures::StreamExt;
use laneledger_store::{LaneConfig, Ledger};

use crate::derived::per_read::{PerRead, PerReads, Upkeep};
use crate::derived::views::VIEWS;
use crate::derived::{idem_artifacts, job_rollup, job_week, week_attempt, week_rollup};
use crate::engine::executor::Executor;
use crate::engine::sqlite_sum::sqlite_sum;
use crate::error::{Error, Result};
use crate::tables::ledger_table::{LedgerTable, ReadFn};
use crate::tables::{attempt_conflict, decision_conflict, gate_decision, ingest_reject, job_attempt, retention_tables};

/// The tables every session has: (name, one-line description).
pub const TABLES: [(&str, &str); 9] = [
    (
        "job_attempt",
        "one row per attempt: job, idempotency key, lane, times, outcome, tokens, artifact, then refusal detail, error_kind, attrs, ingested_at",
    ),
    (
        "idem_artifacts",
        "distinct artifacts per idempotency key (keys with at least one), materialized per write",
    ),
    (
        "attempt_conflict",
        "attempt records that differed from the row in force, with the differing field names",
    ),
    (
        "gate_decision",
        "one row per dwell gate admission decision, with dwell_s and expected_decision",
    ),
    (
        "decision_conflict",
        "decision records that differed from the row in force, with the differing field names",
    ),
    (
        "ingest_reject",
        "lines that could not be read, with source, line, field and reason",
    ),
    (
        "retention_sweep",
        "one row per retention sweep: when, cutoff, jobs and rows removed, archive, digest",
    ),
    (
        "week_snapshot",
        "weekly_metrics rows kept for ISO weeks whose attempts a sweep removed",
    ),
    (
        "verify_run",
        "each laneledger verify: when, clean or not, the first bad record",
    ),
];

/// The memory DataFusion's operators may hold for queries (sorts, joins, aggregates): 2 GiB.
/// A query that needs more fails with a "resources exhausted" error.
pub const QUERY_MEMORY_BYTES: usize = 2 << 30;
/// The largest answer a query may return, in Arrow bytes: 256 MiB. Past it the query stops with
/// [`Error::ResultTooLarge`]; add a `LIMIT` or aggregate.
pub const MAX_RESULT_BYTES: usize = 256 << 20;
/// The longest SQL text taken: 64 KiB.
pub const MAX_SQL_BYTES: usize = 64 << 10;
/// The most SQL tokens taken: 4,000. Planning costs grow faster than the text: a 30,000-term
/// `1+1+…` takes gigabytes, so a statement this large is refused before it is planned.
pub const MAX_SQL_TOKENS: usize = 4_000;

/// Caps on the answer of a user's statement ([`Session::query_capped`]): past either, the answer
/// is cut there and says so ([`Cut`]), instead of the statement failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResultLimits {
    /// The most rows an answer keeps: by default 1,000,000.
    pub max_rows: usize,
    /// The most Arrow bytes an answer keeps: by default [`MAX_RESULT_BYTES`].
    pub max_bytes: usize,
}

/// The default [`ResultLimits::max_rows`].
pub const MAX_RESULT_ROWS: usize = 1_000_000;

impl Default for ResultLimits {
    fn default() -> Self {
        ResultLimits {
            max_rows: MAX_RESULT_ROWS,
            max_bytes: MAX_RESULT_BYTES,
        }
    }
}

/// Where an answer was cut: it holds its first `rows` rows, and more followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Cut {
    /// The rows the answer keeps.
    pub rows: usize,
    /// Which cap cut it: `rows` or `bytes`.
    pub limit: &'static str,
    /// That cap's value (rows, or bytes).
    pub max: usize,
}

impl Cut {
    /// One sentence for people: where the answer was cut and what to do.
    pub fn notice(&self) -> String {
        let rows = crate::words::format_count(self.rows as i64);
        let what = match self.limit {
            "rows" => format!("{} rows", crate::words::format_count(self.max as i64)),
            _ => format!("{} MiB", self.max >> 20),
        };
        let noun = if self.rows == 1 { "row" } else { "rows" };
        format!(
            "the answer was cut after {rows} {noun}: it reached the limit of {what}; add a LIMIT or aggregate, or use laneledger export for whole tables"
        )
    }
}

/// A query's answer: its schema and its rows as Arrow batches.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// The result schema.
    pub schema: SchemaRef,
    /// The rows.
    pub batches: Vec<RecordBatch>,
}

impl QueryResult {
    /// The number of rows.
    pub fn num_rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// A DataFusion session whose tables read the ledger afresh at every query.
#[derive(Clone)]
pub struct Session {
    ctx: SessionContext,
    ledger: Ledger,
    config: Arc<LaneConfig>,
    memo: Arc<Mutex<Memo>>,
    /// The Arrow columns of the attempts, shared by every table built from them.
    pub(crate) attempts: Arc<job_attempt::AttemptCache>,
    /// `idem_artifacts`, kept up to date from the rows each write changed.
    idem_artifacts: Arc<idem_artifacts::IdemArtifactsMemo>,
    /// `week_attempt`'s `iso_week`, kept by chunk: also what the cost fold picks a week's
    /// attempts by.
    pub(crate) week_column: Arc<week_attempt::WeekColumn>,
    /// The tables built for each read's week ([`Upkeep::PerRead`]; none with
    /// [`Upkeep::Incremental`]).
    per_reads: Arc<PerReads>,
    /// The threads user SQL is planned and run on, apart from the caller's ([`Executor`]).
    pub(crate) executor: Executor,
    /// "Now" for telling a week in progress ([`Session::now_micros`]): `None` is the wall clock.
    now: Option<i64>,
    /// The write generation this session's reads reflect at least, when pinned
    /// ([`Session::pinned`]); `None`: each read the ledger's generation at its start.
    pin: Option<u64>,
}

/// The environment variable that sets "now" (RFC 3339) for the review's partial weeks, in place
/// of the wall clock: for tests and for reviewing a ledger as it stood at a past time.
pub const NOW_ENV: &str = "LANELEDGER_NOW";

/// Results derived from the ledger (weeks, review sections), remembered until its next write.
#[derive(Default)]
struct Memo {
    generation: u64,
    entries: HashMap<String, Arc<dyn Any + Send + Sync>>,
}

/// Entries a memo keeps before it starts over.
const MEMO_ENTRIES: usize = 256;

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("ledger", &self.ledger).finish()
    }
}

fn read_only() -> SQLOptions {
    SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false)
}

impl Session {
    /// A session with the seeds' settings ([`LaneConfig::default`]).
    pub async fn new(ledger: Ledger) -> Result<Self> {
        Self::with_config(ledger, LaneConfig::default()).await
    }

    /// Registers `job_attempt`, `attempt_conflict`, `ingest_reject`, the audit tables of
    /// [`crate::derived::audits`] with `config`'s settings, SQLite's `SUM`, and the views of
    /// [`crate::derived::views`] (seed 000's `job_rollup` from its own `CREATE VIEW` text).
    pub async fn with_config(ledger: Ledger, config: LaneConfig) -> Result<Self> {
        Self::with_memory_limit(ledger, config, QUERY_MEMORY_BYTES).await
    }

    /// [`Session::with_config`] with `memory_bytes` for the operators' memory instead of
    /// [`QUERY_MEMORY_BYTES`]. Past it a query fails with "resources exhausted"
    /// ([`Error::Execution`]); nothing spills to disk.
    pub async fn with_memory_limit(ledger: Ledger, config: LaneConfig, memory_bytes: usize) -> Result<Self> {
        Self::with_upkeep(ledger, config, memory_bytes, Upkeep::Incremental).await
    }

    /// [`Session::with_memory_limit`], its derived tables kept as `upkeep` says: a session that
    /// answers one command and exits takes [`Upkeep::PerRead`], and holds no table's rows for
    /// weeks it does not read.
    pub async fn with_upkeep(ledger: Ledger, config: LaneConfig, memory_bytes: usize, upkeep: Upkeep) -> Result<Self> {
        use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
        let df_config = SessionConfig::new().with_information_schema(true);
        // Sorts, joins and aggregates fail cleanly past the limit, instead of the process being
        // killed; with no disk manager they cannot fill the disk with spill files either.
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(memory_bytes, 1.0)
            .with_disk_manager_builder(DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled))
            .build_arc()?;
        let ctx = SessionContext::new_with_config_rt(df_config, runtime);
        ctx.register_udaf(sqlite_sum());
        crate::engine::bounded_strings::register(&ctx);
        crate::engine::bounded_aggregates::register(&ctx);
        // One Arrow copy of the attempts per write generation, shared by job_attempt and the
        // job_rollup materialized from it.
        let attempts = Arc::new(job_attempt::AttemptCache::new(ledger.clone()));
        let idem_memo = Arc::new(idem_artifacts::IdemArtifactsMemo::default());
        let per_reads = Arc::new(PerReads::default());
        let tables: Vec<(&str, SchemaRef, ReadFn)> = vec![
            // Kept by job: only the chunks a write changed are built again.
            (
                "job_rollup",
                job_rollup::schema(),
                kept_read(job_rollup::kept(), &attempts),
            ),
            ("job_week", job_week::schema(), kept_read(job_week::kept(), &attempts)),
            ("week_rollup", week_rollup::schema(), {
                let attempts = attempts.clone();
                match upkeep {
                    // Kept by chunk: a write's rows are summed in, not every attempt again.
                    Upkeep::Incremental => {
                        let kept = week_rollup::Kept::default();
                        Arc::new(move |_: &Ledger| kept.rows(&attempts))
                    }
                    Upkeep::PerRead => {
                        let table = Arc::new(PerRead::new("week_rollup", &week_rollup::COLUMNS, |source, _| {
                            week_rollup::week_rollup_by_hash(source.batches)
                        }));
                        per_reads.add(table.clone(), false);
                        Arc::new(move |l: &Ledger| table.rows(l, &attempts, None))
                    }
                }
            }),
            (idem_artifacts::TABLE, idem_artifacts::schema(), {
                let attempts = attempts.clone();
                // Brought up to date from the rows each write changed.
                let memo = idem_memo.clone();
                Arc::new(move |_: &Ledger| memo.table(&attempts))
            }),
            (
                "attempt_conflict",
                attempt_conflict::schema(),
                Arc::new(attempt_conflict::scan),
            ),
            ("ingest_reject", ingest_reject::schema(), Arc::new(ingest_reject::scan)),
            ("gate_decision", gate_decision::schema(), {
                let gate = config.gate.clone();
                gate_decision::read_fn(move || gate_decision::GateDefaults {
                    max_queue_age_s: gate.max_queue_age_s,
                    reserved_service_s: gate.reserved_service_s,
                })
            }),
            (
                "decision_conflict",
                decision_conflict::schema(),
                Arc::new(decision_conflict::scan),
            ),
            (
                "retention_sweep",
                retention_tables::sweep_schema(),
                Arc::new(retention_tables::scan_sweeps),
            ),
            (
                "week_snapshot",
                retention_tables::week_snapshot_schema(),
                Arc::new(retention_tables::scan_week_snapshots),
            ),
            (
                "verify_run",
                retention_tables::verify_run_schema(),
                Arc::new(retention_tables::scan_verify_runs),
            ),
        ];
        // job_attempt builds only the columns each query reads, cached per write generation.
        let job_attempt_table = LedgerTable::projected(job_attempt::schema(), ledger.clone(), {
            let attempts = attempts.clone();
            Arc::new(move |_: &Ledger, columns: &[usize]| attempts.columns(columns))
        })
        .sorted_by(&["job_id", "attempt_no"])
        .with_job_read(Arc::new(|l: &Ledger, job_id: &str| {
            job_attempt::to_batches(&l.job_attempts(job_id)?)
        }));
        ctx.register_table("job_attempt", Arc::new(job_attempt_table))?;
        // The same arrays with each job's ISO week in front.
        let week_column = Arc::new(week_attempt::WeekColumn::default());
        let week_attempt_table = LedgerTable::projected(week_attempt::schema(), ledger.clone(), {
            let (attempts, weeks) = (attempts.clone(), week_column.clone());
            Arc::new(move |_: &Ledger, columns: &[usize]| weeks.read(&attempts, columns))
        })
        .with_week_columns({
            let (attempts, weeks) = (attempts.clone(), week_column.clone());
            Arc::new(move |_: &Ledger, columns: &[usize], week: &str| weeks.read_week(&attempts, columns, Some(week)))
        })
        .sorted_by(&["job_id", "attempt_no"]);
        ctx.register_table(week_attempt::TABLE, Arc::new(week_attempt_table))?;
        for (name, schema, read) in tables {
            let mut table = LedgerTable::new(schema, ledger.clone(), read);
            if matches!(name, "job_rollup" | "job_week") {
                table = table.sorted_by(&["job_id"]);
            }
            let table = Arc::new(table);
            if name == idem_artifacts::TABLE {
                ctx.add_analyzer_rule(Arc::new(idem_artifacts::IdemArtifactsRule::new(table.clone())));
            }
            ctx.register_table(name, table)?;
        }
        crate::derived::audits::register(
            &ctx,
            &ledger,
            &attempts,
            &week_column,
            &crate::derived::audits::AuditSettings::from(&config),
            upkeep,
            &per_reads,
        )?;
        // job_rollup, job_week and week_rollup are materialized natively above; the other views
        // are created from their SQL text.
        for (_, sql) in VIEWS {
            ctx.sql(sql).await?.collect().await?;
        }
        crate::derived::audits::create_views(&ctx).await?;
        Ok(Session {
            ctx,
            ledger,
            config: Arc::new(config),
            memo: Arc::default(),
            attempts,
            idem_artifacts: idem_memo,
            week_column,
            per_reads,
            executor: Executor::per_core()?,
            now: match std::env::var(NOW_ENV) {
                Ok(v) => Some(
                    laneledger_store::parse_timestamp(&v)
                        .map_err(|e| Error::BadTimeRange(format!("{NOW_ENV}: {e}")))?,
                ),
                Err(_) => None,
            },
            pin: None,
        })
    }

    /// This session pinned to the ledger's write generation now: its reads take the cached
    /// columns and tables at that generation or newer instead of catching up with each write that
    /// lands meanwhile ([`crate::engine::read_floor`]). A page or a review reads through one
    /// pinned session, so that under routers posting all day it catches up once and its parts are
    /// built from the same attempts. A record acknowledged before the pin is in every answer; one
    /// acknowledged after it may not be. Pinning a pinned session keeps its generation.
    pub fn pinned(&self) -> Session {
        Session {
            pin: Some(self.pin.unwrap_or_else(|| self.ledger.generation())),
            ..self.clone()
        }
    }

    /// The generation this session's reads must reflect at least: its pin, else the ledger's now.
    fn floor(&self) -> u64 {
        self.pin.unwrap_or_else(|| self.ledger.generation())
    }

    /// `read` (synchronous, over the cached columns), to run on another thread at this session's
    /// floor.
    pub(crate) fn read_at_floor<T, F: FnOnce() -> T>(&self, read: F) -> impl FnOnce() -> T + use<T, F> {
        let pin = self.pin;
        move || crate::engine::read_floor::with_floor(pin, read)
    }

    /// Builds this session's per-read tables ([`Upkeep::PerRead`]) for ISO week `week` (`2026-W47`)
    /// at its floor, spread over the cores, ahead of the queries that read them; nothing with
    /// [`Upkeep::Incremental`]. Errors: a build's.
    pub(crate) async fn prepare_week(&self, week: &str) -> Result<()> {
        let (per_reads, ledger, attempts, week) = (
            self.per_reads.clone(),
            self.ledger.clone(),
            self.attempts.clone(),
            week.to_string(),
        );
        let pin = self.pin;
        tokio::task::spawn_blocking(move || per_reads.prepare(&ledger, &attempts, &week, pin))
            .await
            .map_err(|e| Error::Internal(format!("per-read build: {e}")))?
    }

    /// How many times this session's per-read tables ([`Upkeep::PerRead`]) were built, in all:
    /// for tests that a command builds each table once.
    pub fn per_read_builds(&self) -> u64 {
        self.per_reads.builds()
    }

    /// This session with "now" fixed at `micros` (µs since the epoch) instead of the wall clock.
    pub fn with_now(mut self, micros: i64) -> Self {
        self.now = Some(micros);
        self
    }

    /// "Now", µs since the epoch: [`Session::with_now`]'s, else [`NOW_ENV`]'s when it was set
    /// at the session's start, else the wall clock. A week whose end is after it is partial.
    pub fn now_micros(&self) -> i64 {
        self.now.unwrap_or_else(laneledger_store::now_micros)
    }

    /// How many times this session has scanned the ledger's attempts into Arrow columns (once
    /// per write generation for a query mix, twice at most: see
    /// [`job_attempt::AttemptCache::columns`]).
    pub fn attempt_scans(&self) -> u64 {
        self.attempts.scans()
    }

    /// How many writes this session merged into the attempts' Arrow columns it held, reading
    /// only the attempts each write inserted or completed, instead of scanning them all again
    /// (see [`job_attempt::AttemptCache`]).
    pub fn attempt_merges(&self) -> u64 {
        self.attempts.merges()
    }

    /// How many times this session has computed `idem_artifacts` from every attempt, instead of
    /// bringing it up to date from the rows the writes since changed (see
    /// [`idem_artifacts::IdemArtifactsMemo`]).
    pub fn idem_artifacts_computes(&self) -> u64 {
        self.idem_artifacts.computes()
    }

    /// The CPU time, in clock ticks (100 a second on Linux), that this session's SQL threads have
    /// used ([`Executor::cpu_ticks`]); `None` where `/proc` does not tell.
    pub fn sql_cpu_ticks(&self) -> Option<u64> {
        self.executor.cpu_ticks()
    }

    /// The lane.yaml settings this session applies.
    pub fn config(&self) -> &LaneConfig {
        &self.config
    }

    /// `compute`'s answer for `key`, remembered until the ledger's next write (its generation);
    /// a pinned session takes one remembered at its pin or later.
    pub(crate) async fn memo<T, Fut>(&self, key: String, compute: impl FnOnce() -> Fut) -> Result<T>
    where
        T: Clone + Send + Sync + 'static,
        Fut: Future<Output = Result<T>>,
    {
        // Taken before computing: the answer reflects this generation at least.
        let label = self.floor();
        if let Ok(m) = self.memo.lock()
            && m.generation >= label
            && let Some(v) = m.entries.get(&key).and_then(|v| v.downcast_ref::<T>())
        {
            return Ok(v.clone());
        }
        let value = compute().await?;
        if let Ok(mut m) = self.memo.lock() {
            if m.generation < label || m.entries.len() >= MEMO_ENTRIES {
                m.entries.clear();
                m.generation = label;
            }
            // Answers older than the memo's are not kept.
            if m.generation == label {
                m.entries.insert(key, Arc::new(value.clone()));
            }
        }
        Ok(value)
    }

    /// The ledger this session reads.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Runs one user statement, read-only: DDL, DML, `COPY` and `SET` are refused with
    /// [`Error::ReadOnly`], and more than one statement is a [`Error::Plan`] error.
    pub async fn query(&self, sql: &str) -> Result<QueryResult> {
        check_size(sql)?;
        // Planned and run on the SQL threads: a plan that keeps its thread for minutes holds up
        // none of the caller's, and dropping this future stops it (see [`Executor`]).
        let (ctx, pin) = (self.ctx.clone(), self.pin);
        let sql = sql.to_string();
        self.executor
            .run(move |stop| async move { run_statement(&ctx, pin, &sql, &stop, None).await })
            .await
            .map(|(result, _)| result)
    }

    /// [`Session::query`] for a user's statement: an answer past `limits` is cut there, and the
    /// [`Cut`] says where, instead of the statement failing.
    pub async fn query_capped(&self, sql: &str, limits: ResultLimits) -> Result<(QueryResult, Option<Cut>)> {
        check_size(sql)?;
        let (ctx, pin) = (self.ctx.clone(), self.pin);
        let sql = sql.to_string();
        self.executor
            .run(move |stop| async move { run_statement(&ctx, pin, &sql, &stop, Some(limits)).await })
            .await
    }

    /// Runs one statement, read-only as [`Session::query`], and hands its answer over batch by
    /// batch as the plan makes them, with no cap on its size: for downloads of whole tables. At
    /// most [`STREAM_BATCHES`] batches wait for the reader; a reader that takes none for
    /// `patience` stops the statement, and so does dropping the stream.
    ///
    /// Errors: those of planning ([`Session::query`]'s); a failure while it runs ends the stream
    /// with that error.
    pub async fn query_stream(&self, sql: &str, patience: std::time::Duration) -> Result<QueryStream> {
        check_size(sql)?;
        let (ctx, pin) = (self.ctx.clone(), self.pin);
        let sql = sql.to_string();
        let (batches_tx, batches) = tokio::sync::mpsc::channel(STREAM_BATCHES);
        let (schema_tx, schema) = tokio::sync::oneshot::channel();
        let stalled = Arc::new(AtomicBool::new(false));
        let gave_up = stalled.clone();
        let mut work = self.executor.run(move |stop| async move {
            let (schema, mut stream) = match start_statement(&ctx, pin, &sql, &stop).await {
                Ok(started) => started,
                Err(e) => {
                    let _ = schema_tx.send(Err(e));
                    return Ok(());
                }
            };
            let _ = schema_tx.send(Ok(schema));
            while let Some(batch) = stream.next().await {
                let failed = batch.is_err();
                let batch = batch.map_err(Error::from);
                match batches_tx.send_timeout(batch, patience).await {
                    Err(tokio::sync::mpsc::error::SendTimeoutError::Timeout(_)) => {
                        gave_up.store(true, std::sync::atomic::Ordering::Release);
                        break;
                    }
                    Err(_) => break,
                    Ok(()) if failed => break,
                    Ok(()) => {}
                }
            }
            Ok(())
        });
        match schema.await {
            Ok(schema) => Ok(QueryStream {
                schema: schema?,
                batches,
                stalled: Some((stalled, patience)),
                _work: work,
            }),
            // The task ended without a word: it panicked (or the runtime is going).
            Err(_) => {
                (&mut work).await?;
                Err(Error::Internal("the statement stopped before its answer began".into()))
            }
        }
    }
}

/// Batches a [`QueryStream`] holds ready for its reader.
pub const STREAM_BATCHES: usize = 4;

/// The answer of [`Session::query_stream`]: its schema, then its batches as they come.
/// Dropping it stops the statement.
pub struct QueryStream {
    /// The answer's schema.
    pub schema: SchemaRef,
    batches: tokio::sync::mpsc::Receiver<Result<RecordBatch>>,
    /// Raised when the statement stopped because the reader took nothing for the patience given;
    /// `None` once that was told.
    stalled: Option<(Arc<AtomicBool>, std::time::Duration)>,
    _work: crate::engine::executor::Running<()>,
}

impl futures::Stream for QueryStream {
    type Item = Result<RecordBatch>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.batches.poll_recv(cx) {
            // The batches ran out early: an error, so the answer is not taken for whole.
            std::task::Poll::Ready(None) => match self.stalled.take() {
                Some((stalled, patience)) if stalled.load(std::sync::atomic::Ordering::Acquire) => {
                    std::task::Poll::Ready(Some(Err(Error::ReaderStalled(patience))))
                }
                _ => std::task::Poll::Ready(None),
            },
            other => other,
        }
    }
}

/// The read of a table kept by job ([`crate::derived::kept`]) from the session's attempts.
fn kept_read(table: crate::derived::kept::ByJob, attempts: &Arc<job_attempt::AttemptCache>) -> ReadFn {
    let attempts = attempts.clone();
    Arc::new(move |_: &Ledger| table.rows(&attempts))
}

/// Refuses SQL past [`MAX_SQL_BYTES`] or [`MAX_SQL_TOKENS`], before it is planned.
fn check_size(sql: &str) -> Result<()> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(Error::Plan(format!(
            "SQL longer than {MAX_SQL_BYTES} bytes ({})",
            sql.len()
        )));
    }
    let dialect = datafusion::sql::sqlparser::dialect::GenericDialect {};
    let tokens = datafusion::sql::sqlparser::tokenizer::Tokenizer::new(&dialect, sql)
        .tokenize()
        .map_err(|e| Error::Plan(e.to_string()))?;
    let words = tokens
        .iter()
        .filter(|t| !matches!(t, datafusion::sql::sqlparser::tokenizer::Token::Whitespace(_)))
        .count();
    if words > MAX_SQL_TOKENS {
        return Err(Error::Plan(format!(
            "SQL has {words} tokens, more than {MAX_SQL_TOKENS}; split the query"
        )));
    }
    Ok(())
}

/// Plans `sql` (refusing what is not read-only) and starts it: its answer's schema and stream of
/// batches. Every operator of the plan stops once `stop` is up ([`crate::engine::stop`]); with a
/// `pin`, the tables read at that floor ([`crate::engine::read_floor`]).
async fn start_statement(
    ctx: &SessionContext,
    pin: Option<u64>,
    sql: &str,
    stop: &Arc<AtomicBool>,
) -> Result<(SchemaRef, SendableRecordBatchStream)> {
    let mut state = ctx.state();
    if let Some(generation) = pin {
        state
            .config_mut()
            .set_extension(Arc::new(crate::engine::read_floor::Floor(generation)));
    }
    let plan = state
        .create_logical_plan(sql)
        .await
        .map_err(|e| crate::engine::hints::plan_error(ctx, e))?;
    read_only()
        .verify_plan(&plan)
        .map_err(|e| Error::ReadOnly(e.strip_backtrace()))?;
    // The statement runs in `state`, so its scans see the pin.
    let df = datafusion::dataframe::DataFrame::new(state, plan);
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let task = Arc::new(df.task_ctx());
    let plan = crate::engine::stop::checked(df.create_physical_plan().await?, stop)?;
    // A plan of several sorted partitions (a materialized table such as `job_rollup`, held in
    // job order) is merged in that order, so an answer's row order does not depend on which
    // partition's thread ran first.
    let plan = match plan.properties().output_ordering() {
        Some(ordering) if plan.properties().output_partitioning().partition_count() > 1 => Arc::new(
            datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec::new(
                ordering.clone(),
                plan,
            ),
        )
            as Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        _ => plan,
    };
    Ok((schema, datafusion::physical_plan::execute_stream(plan, task)?))
}

/// Runs `sql` ([`start_statement`]) and collects its answer, up to [`MAX_RESULT_BYTES`], or
/// `limits` with the answer cut there.
async fn run_statement(
    ctx: &SessionContext,
    pin: Option<u64>,
    sql: &str,
    stop: &Arc<AtomicBool>,
    limits: Option<ResultLimits>,
) -> Result<(QueryResult, Option<Cut>)> {
    let (schema, mut stream) = start_statement(ctx, pin, sql, stop).await?;
    let (mut batches, mut bytes, mut rows) = (Vec::new(), 0usize, 0usize);
    let mut seen = HashSet::new();
    let max_bytes = limits.map_or(MAX_RESULT_BYTES, |l| l.max_bytes);
    let max_rows = limits.map_or(usize::MAX, |l| l.max_rows);
    let mut cut = None;
    while let Some(b) = stream.next().await {
        let b = b?;
        if b.num_rows() == 0 {
            continue;
        }
        if rows == max_rows {
            cut = Some(Cut {
                rows,
                limit: "rows",
                max: max_rows,
            });
            break;
        }
        let b = if rows + b.num_rows() > max_rows {
            // Rows past the cap follow in this very batch: keep its head, and say so.
            cut = Some(Cut {
                rows: max_rows,
                limit: "rows",
                max: max_rows,
            });
            b.slice(0, max_rows - rows)
        } else {
            b
        };
        bytes += unseen_buffer_bytes(&b, &mut seen);
        if bytes > max_bytes {
            match limits {
                None => return Err(Error::ResultTooLarge(MAX_RESULT_BYTES)),
                Some(_) => {
                    cut = Some(Cut {
                        rows,
                        limit: "bytes",
                        max: max_bytes,
                    });
                    break;
                }
            }
        }
        rows += b.num_rows();
        batches.push(b);
        if cut.is_some() {
            break;
        }
    }
    // Dropping the stream here stops the plan's remaining work.
    Ok((QueryResult { schema, batches }, cut))
}

/// The bytes of the buffers `batch` holds that `seen` has not counted yet: each allocation once
/// (by its address), at its capacity. DataFusion answers with slices that share allocations (a
/// cached scan batch, an aggregate's output cut into `batch_size` rows), and
/// `RecordBatch::get_array_memory_size` counts the whole allocation again for every slice: 5 to
/// 7 times the real size for `SELECT * FROM job_rollup` and `SELECT * FROM job_attempt`, so the
/// 705,000 rows of `job_rollup` at 1 M attempts (about 70 MB) were refused as past 256 MiB.
fn unseen_buffer_bytes(batch: &RecordBatch, seen: &mut HashSet<usize>) -> usize {
    fn walk(data: &ArrayData, seen: &mut HashSet<usize>, total: &mut usize) {
        let nulls = data.nulls().map(|n| n.buffer());
        for buffer in data.buffers().iter().chain(nulls) {
            if seen.insert(buffer.data_ptr().as_ptr() as usize) {
                *total += buffer.capacity();
            }
        }
        for child in data.child_data() {
            walk(child, seen, total);
        }
    }
    let mut total = 0;
    for column in batch.columns() {
        walk(&column.to_data(), seen, &mut total);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};

    #[test]
    fn a_result_cut_into_slices_counts_each_buffer_once() {
        let rows = 100_000;
        let batch = RecordBatch::try_from_iter([
            ("n", Arc::new(Int64Array::from_iter_values(0..rows as i64)) as _),
            (
                "s",
                Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("job-{i:06}")))) as _,
            ),
        ])
        .unwrap();
        let whole: usize = batch
            .columns()
            .iter()
            .map(|c| c.to_data().get_buffer_memory_size())
            .sum();
        // Int64: 800,000 bytes; Utf8: 100,001 offsets of 4 bytes and 1,000,000 bytes of text,
        // in allocations that the builders rounded up.
        assert!(whole >= 800_000 + 400_004 + 1_000_000, "{whole}");
        let slices: Vec<RecordBatch> = (0..rows)
            .step_by(8192)
            .map(|at| batch.slice(at, 8192.min(rows - at)))
            .collect();
        assert_eq!(slices.len(), 13);
        // The overcount this replaces: every slice reports both whole allocations.
        let per_slice: usize = slices.iter().map(RecordBatch::get_array_memory_size).sum();
        assert!(per_slice >= 13 * whole, "{per_slice}");
        let mut seen = HashSet::new();
        let counted: usize = slices.iter().map(|b| unseen_buffer_bytes(b, &mut seen)).sum();
        assert_eq!(counted, whole);
        assert_eq!(unseen_buffer_bytes(&batch, &mut seen), 0, "already counted");
    }
}
