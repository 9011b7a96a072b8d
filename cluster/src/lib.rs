//! laneledger's SQL on an Apache DataFusion Ballista cluster, over the Parquet files that
//! `laneledger export --format parquet` and `laneledger retain --archive` write.
//!
//! - [`run_scheduler`] and [`run_executor`] are Ballista's own scheduler and executor processes, with
//!   laneledger's SQLite-style `sum` registered in the scheduler's sessions ([`laneledger_session`])
//!   and in the executors' function registry ([`function_registry`]).
//! - [`connect`] is the client: a Ballista context with the same `sum`, one `job_attempt` listing
//!   table over every data folder, the ledger's tables an export writes under `ledger/`
//!   (`gate_decision`, `week_snapshot`, `retention_sweep`) when the folders hold them, and the
//!   views created from the very text the embedded session uses ([`laneledger_query::derived::views`]).
//! - [`CHECKS`] and [`differential`] compare the cluster's answers with another engine's, as text.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use ballista::prelude::SessionContextExt;
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_executor::executor_process::{ExecutorProcessConfig, start_executor_process};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::scheduler_process::start_server;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl};
use datafusion::execution::{FunctionRegistry, SessionState};
use datafusion::prelude::{SessionConfig, SessionContext};
use laneledger_query::derived::views;
use laneledger_query::sqlite_sum;

/// Errors of the cluster client and processes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `--data` folder that does not exist or holds no `day=YYYY-MM-DD` folders, or an executor
    /// work folder that cannot be created.
    #[error("{path}: {reason}")]
    Data {
        /// The folder given.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Two data folders whose files have different columns (exports of different laneledger versions).
    #[error(
        "{first} and {other} hold different job_attempt columns; export both with the same laneledger version\n  {first}: {first_columns}\n  {other}: {other_columns}"
    )]
    SchemaMismatch {
        /// The first data folder.
        first: PathBuf,
        /// Its columns.
        first_columns: String,
        /// The folder that differs.
        other: PathBuf,
        /// Its columns.
        other_columns: String,
    },
    /// SQL that needs a table or view only the ledger holds.
    #[error("{0}")]
    LedgerOnly(String),
    /// `--view` with a name no view has.
    #[error("no view {name:?}; the views on the cluster are {available}")]
    UnknownView {
        /// The name given.
        name: String,
        /// The views that exist.
        available: String,
    },
    /// A DataFusion or Ballista error (planning, a failed task, an unreachable scheduler).
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// A Ballista process error.
    #[error("{0}")]
    Ballista(#[from] ballista_core::error::BallistaError),
    /// The embedded engine's error, when it is the reference of a differential.
    #[error("embedded engine: {0}")]
    Embedded(String),
    /// A scheduler URL or bind address that does not parse.
    #[error("{0}")]
    Address(String),
}

/// The stack of every runtime thread of the scheduler, executors and client: planning and
/// decoding the plans of `weekly_metrics` (`week_rollup` and `week_snapshot` in a union) and
/// `gate_weekly` recurse deeper than tokio's 2 MiB default allows in a debug build.
pub const STACK_BYTES: usize = 64 << 20;

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// The views created on the cluster, in creation order: (name, SQL), the embedded session's text.
/// `job_rollup`, `job_week` and `week_rollup` are tables the embedded session materializes from
/// the same definitions; here they are views.
pub const CLUSTER_VIEWS: [(&str, &str); 4] = [
    ("job_rollup", views::SEED_JOB_ROLLUP_VIEW),
    ("job_week", views::JOB_WEEK_VIEW),
    ("week_rollup", views::WEEK_ROLLUP_VIEW),
    ("duplicate_artifact", views::DUPLICATE_ARTIFACT_VIEW),
];

/// The views over the ledger's exported tables, in creation order: (name, the table it needs, SQL),
/// the embedded session's text. Each is created when its table is registered
/// ([`register_ledger_tables`]).
pub const LEDGER_VIEWS: [(&str, &str, &str); 2] = [
    ("weekly_metrics", "week_snapshot", views::WEEKLY_METRICS_VIEW),
    ("gate_weekly", "gate_decision", views::GATE_WEEKLY_VIEW),
];

/// The file every attempts file of an export or an archive sweep has as its name
/// (`DIR/day=YYYY-MM-DD/attempts.parquet`); `job_attempt` reads only these, so the ledger's tables
/// under `DIR/ledger/` are never taken for attempts.
pub const ATTEMPTS_FILE: &str = "attempts.parquet";

/// The ledger's tables a Parquet export writes under `DIR/ledger/TABLE/`, with their columns (the
/// embedded session's).
pub fn ledger_tables() -> [(&'static str, arrow::datatypes::SchemaRef); 3] {
    use laneledger_query::tables::{gate_decision, retention_tables};
    [
        ("gate_decision", gate_decision::schema()),
        ("week_snapshot", retention_tables::week_snapshot_schema()),
        ("retention_sweep", retention_tables::sweep_schema()),
    ]
}

/// Tables and views of the embedded session that the cluster may not have, with what each needs
/// that only the ledger holds. The first five come from `laneledger export --format parquet`
/// (`DIR/ledger/…`) and are refused only when the data folders lack them ([`refuse_ledger_only`]).
pub const LEDGER_ONLY: [(&str, &str); 10] = [
    (
        "weekly_metrics",
        "week_snapshot (the weekly figures kept when a retention sweep removed attempts)",
    ),
    ("gate_weekly", "gate_decision (the admission gate's decisions)"),
    ("week_snapshot", "week_snapshot itself"),
    ("gate_decision", "gate_decision itself"),
    ("retention_sweep", "retention_sweep (the sweeps' own log)"),
    (
        "idem_artifacts",
        "idem_artifacts (use job_attempt: SELECT DISTINCT idem_key, artifact_id …)",
    ),
    (
        "attempt_conflict",
        "attempt_conflict (records that differed from the row in force)",
    ),
    (
        "decision_conflict",
        "decision_conflict (decision records that differed)",
    ),
    ("ingest_reject", "ingest_reject (lines that could not be read)"),
    ("verify_run", "verify_run (the verify log)"),
];

/// laneledger's functions, registered on a built state (registering through
/// `SessionStateBuilder::with_aggregate_functions` would replace DataFusion's list).
fn register_functions(state: &mut SessionState) -> datafusion::error::Result<()> {
    state.register_udaf(Arc::new(sqlite_sum()))?;
    Ok(())
}

/// The scheduler's session builder: Ballista's default session, plus laneledger's `sum`. The
/// scheduler decodes each plan and plans its stages in such a session (adaptive planning included).
pub fn laneledger_session(config: SessionConfig) -> datafusion::error::Result<SessionState> {
    let mut state = ballista_core::utils::default_session_builder(config)?;
    register_functions(&mut state)?;
    Ok(state)
}

/// The executors' function registry: DataFusion's built-ins, with `sum` replaced by laneledger's
/// SQLite-style `sum` (it also sums booleans), under the same name the plans carry.
pub fn function_registry() -> BallistaFunctionRegistry {
    let mut registry = BallistaFunctionRegistry::default();
    let sum = sqlite_sum();
    registry
        .aggregate_functions
        .insert(sum.name().to_string(), Arc::new(sum));
    registry
}

/// How the scheduler hands tasks to executors; the scheduler's and every executor's must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    /// The scheduler pushes tasks to executors (Ballista's default).
    PushStaged,
    /// Executors poll the scheduler for tasks.
    PullStaged,
}

impl From<Policy> for TaskSchedulingPolicy {
    fn from(p: Policy) -> Self {
        match p {
            Policy::PushStaged => TaskSchedulingPolicy::PushStaged,
            Policy::PullStaged => TaskSchedulingPolicy::PullStaged,
        }
    }
}

/// The scheduler's settings.
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// Address to listen on (gRPC, `/healthz`, `/readyz`).
    pub bind: SocketAddr,
    /// The host executors and clients reach this scheduler at.
    pub external_host: String,
    /// Executors that must be registered before `/readyz` answers 200.
    pub min_executors: usize,
    /// Task scheduling policy.
    pub policy: Policy,
}

/// Runs a Ballista scheduler with laneledger's functions until the process ends.
pub async fn run_scheduler(opts: SchedulerOptions) -> Result<()> {
    let config = SchedulerConfig {
        bind_host: opts.bind.ip().to_string(),
        bind_port: opts.bind.port(),
        external_host: opts.external_host,
        scheduling_policy: opts.policy.into(),
        min_ready_executors: opts.min_executors,
        override_session_builder: Some(Arc::new(laneledger_session)),
        ..Default::default()
    };
    let cluster = BallistaCluster::new_from_config(&config).await?;
    start_server(cluster, opts.bind, Arc::new(config)).await?;
    Ok(())
}

/// An executor's settings.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// The scheduler's host.
    pub scheduler_host: String,
    /// The scheduler's port.
    pub scheduler_port: u16,
    /// Address to listen on.
    pub bind_host: String,
    /// Arrow Flight port: shuffle data and results are fetched from it.
    pub port: u16,
    /// gRPC port the scheduler pushes tasks to (push-staged policy).
    pub grpc_port: u16,
    /// The host the scheduler, other executors and clients reach this executor at.
    pub external_host: Option<String>,
    /// Tasks run at once (0: one per CPU).
    pub vcores: usize,
    /// Folder for shuffle files (a fresh temp folder when `None`).
    pub work_dir: Option<PathBuf>,
    /// Task scheduling policy: must be the scheduler's.
    pub policy: Policy,
}

/// Runs a Ballista executor with laneledger's functions until the process ends (or Ctrl-C).
pub async fn run_executor(opts: ExecutorOptions) -> Result<()> {
    if let Some(dir) = &opts.work_dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::Data {
            path: dir.clone(),
            reason: format!("cannot create the executor's work folder: {e}"),
        })?;
    }
    let config = ExecutorProcessConfig {
        scheduler_host: opts.scheduler_host,
        scheduler_port: opts.scheduler_port,
        // Retry while the scheduler starts, rather than failing at once.
        scheduler_connect_timeout_seconds: 60,
        bind_host: opts.bind_host,
        port: opts.port,
        grpc_port: opts.grpc_port,
        external_host: opts.external_host,
        vcores: opts.vcores,
        work_dir: opts.work_dir.map(|p| p.display().to_string()),
        task_scheduling_policy: opts.policy.into(),
        override_function_registry: Some(Arc::new(function_registry())),
        ..Default::default()
    };
    start_executor_process(Arc::new(config)).await?;
    Ok(())
}

/// Expands the `--data` folders: an export folder or an archive sweep folder (`DIR/day=…/*.parquet`)
/// is taken as it is; a retention archive root (`DIR/sweep-NNNNNN/day=…`) becomes its sweep folders,
/// in name order. Paths are made absolute, since the scheduler and executors list and read them.
///
/// Errors: [`Error::Data`] for a folder that is missing or holds neither.
pub fn data_folders(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for dir in dirs {
        let abs = std::path::absolute(dir).map_err(|e| Error::Data {
            path: dir.clone(),
            reason: e.to_string(),
        })?;
        let children = subfolders(&abs).map_err(|e| Error::Data {
            path: dir.clone(),
            reason: format!("cannot read the folder: {e}"),
        })?;
        if children.iter().any(|c| c.starts_with("day=")) {
            out.push(abs);
            continue;
        }
        let sweeps: Vec<&String> = children.iter().filter(|c| c.starts_with("sweep-")).collect();
        if sweeps.is_empty() {
            return Err(Error::Data {
                path: dir.clone(),
                reason: "holds no day=YYYY-MM-DD folders (write one with `laneledger export --format parquet DIR`) \
                         and no sweep-NNNNNN folders (a `laneledger retain --archive DIR` root)"
                    .into(),
            });
        }
        for s in sweeps {
            out.push(abs.join(s));
        }
    }
    Ok(out)
}

fn subfolders(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Registers `job_attempt` in `ctx`: one Parquet listing table over every folder (each listed
/// recursively, so every `day=…/attempts.parquet` below it is read, and nothing else), with the
/// columns of the files themselves, which are the embedded `job_attempt`'s. Every folder must have
/// the same columns.
pub async fn register_job_attempt(ctx: &SessionContext, folders: &[PathBuf]) -> Result<()> {
    let options = ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(ATTEMPTS_FILE);
    let state = ctx.state();
    let mut urls = Vec::new();
    let mut first: Option<(PathBuf, arrow::datatypes::SchemaRef)> = None;
    for folder in folders {
        let text = format!("{}/", folder.display().to_string().trim_end_matches('/'));
        let url = ListingTableUrl::parse(&text)?;
        let schema = options.infer_schema(&state, &url).await.map_err(|e| Error::Data {
            path: folder.clone(),
            reason: format!("cannot read its Parquet files: {e}"),
        })?;
        match &first {
            None => first = Some((folder.clone(), schema)),
            Some((first_folder, first_schema)) => {
                if columns(first_schema) != columns(&schema) {
                    return Err(Error::SchemaMismatch {
                        first: first_folder.clone(),
                        first_columns: columns(first_schema),
                        other: folder.clone(),
                        other_columns: columns(&schema),
                    });
                }
            }
        }
        urls.push(url);
    }
    let Some((_, schema)) = first else {
        return Err(Error::Data {
            path: PathBuf::new(),
            reason: "no data folder given (--data DIR)".into(),
        });
    };
    let config = ListingTableConfig::new_with_multi_paths(urls)
        .with_listing_options(options)
        .with_schema(schema);
    ctx.register_table("job_attempt", Arc::new(ListingTable::try_new(config)?))?;
    Ok(())
}

/// An archive sweep folder (`…/sweep-NNNNNN`): it holds attempts only, never the ledger's tables.
fn is_sweep_folder(folder: &Path) -> bool {
    folder
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("sweep-"))
}

/// Registers each of [`ledger_tables`] whose folder `DIR/ledger/TABLE/` every export folder among
/// `folders` holds (archive sweep folders hold none and are not asked), as one Parquet listing
/// table over those folders with the embedded table's columns; returns the names registered. A
/// `gate_decision` folder with no day file is a ledger with no decisions in the export's range:
/// the table is registered, empty. A table some export folder lacks (an export written before
/// laneledger wrote the ledger's tables, or an Arrow/CSV export) is not registered: the queries
/// that read it are refused ([`refuse_ledger_only`]).
pub async fn register_ledger_tables(ctx: &SessionContext, folders: &[PathBuf]) -> Result<Vec<&'static str>> {
    let exports: Vec<&PathBuf> = folders.iter().filter(|f| !is_sweep_folder(f)).collect();
    let mut registered = Vec::new();
    for (name, schema) in ledger_tables() {
        let dirs: Vec<PathBuf> = exports
            .iter()
            .map(|f| f.join(laneledger_query::archive::export::LEDGER_DIR).join(name))
            .collect();
        if dirs.is_empty() || !dirs.iter().all(|d| d.is_dir()) {
            continue;
        }
        let urls = dirs
            .iter()
            .map(|d| ListingTableUrl::parse(format!("{}/", d.display().to_string().trim_end_matches('/'))))
            .collect::<datafusion::error::Result<Vec<_>>>()?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(format!("{name}.parquet"));
        let config = ListingTableConfig::new_with_multi_paths(urls)
            .with_listing_options(options)
            .with_schema(schema);
        ctx.register_table(name, Arc::new(ListingTable::try_new(config)?))?;
        registered.push(name);
    }
    Ok(registered)
}

fn columns(schema: &arrow::datatypes::SchemaRef) -> String {
    schema
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Creates [`CLUSTER_VIEWS`] in `ctx`, then each of [`LEDGER_VIEWS`] whose table `ctx` has (views
/// live on the client; plans are shipped expanded). `weekly_metrics` only over one ledger's export
/// (`folders` holding one export folder, with or without its archive sweeps): a ledger's
/// `week_snapshot` holds that ledger's figures of the weeks it swept, which do not add up with
/// another ledger's.
pub async fn create_views(ctx: &SessionContext, folders: &[PathBuf]) -> Result<()> {
    for (_, sql) in CLUSTER_VIEWS {
        ctx.sql(sql).await?.collect().await?;
    }
    let ledgers = folders.iter().filter(|f| !is_sweep_folder(f)).count();
    for (view, table, sql) in LEDGER_VIEWS {
        if has(ctx, table) && (view != "weekly_metrics" || ledgers == 1) {
            ctx.sql(sql).await?.collect().await?;
        }
    }
    Ok(())
}

/// Whether `ctx` has a table or view of that name.
fn has(ctx: &SessionContext, name: &str) -> bool {
    ctx.table_exist(name).unwrap_or(false)
}

/// `job_attempt`, the ledger's tables and the views, in `ctx`.
async fn prepare(ctx: &SessionContext, folders: &[PathBuf]) -> Result<()> {
    register_job_attempt(ctx, folders).await?;
    register_ledger_tables(ctx, folders).await?;
    create_views(ctx, folders).await
}

/// A client context on the Ballista scheduler at `url` (`df://host:50050`; the port defaults to
/// 50050), with laneledger's `sum`, `job_attempt` over `folders` and the views. `adaptive` turns
/// Ballista's adaptive planning on (its default) or off. Nothing connects until the first query.
pub async fn connect(url: &str, folders: &[PathBuf], adaptive: bool) -> Result<SessionContext> {
    let ctx = SessionContext::remote(url).await?;
    // After remote(): creating a Ballista context replaces the function list.
    ctx.register_udaf(sqlite_sum());
    if !adaptive {
        ctx.sql("SET ballista.planner.adaptive.enabled = false")
            .await?
            .collect()
            .await?;
    }
    prepare(&ctx, folders).await?;
    Ok(ctx)
}

/// An in-process DataFusion context (no cluster) over the same folders, with the same `sum` and
/// views: the reference `check` compares the cluster with.
pub async fn local(folders: &[PathBuf]) -> Result<SessionContext> {
    let ctx = SessionContext::new();
    ctx.register_udaf(sqlite_sum());
    prepare(&ctx, folders).await?;
    Ok(ctx)
}

/// Refuses SQL that reads a table or view only the ledger holds, naming what is missing.
pub fn refuse_ledger_only(ctx: &SessionContext, sql: &str) -> Result<()> {
    let state = ctx.state();
    let dialect = state.config().options().sql_parser.dialect;
    let statement = state.sql_to_statement(sql, &dialect)?;
    let names: Vec<String> = state
        .resolve_table_references(&statement)?
        .iter()
        .map(|t| t.table().to_ascii_lowercase())
        .collect();
    let missing: Vec<(&str, &str)> = LEDGER_ONLY
        .iter()
        .filter(|(n, _)| names.iter().any(|m| m == n) && !has(ctx, n))
        .copied()
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = missing
        .iter()
        .map(|(view, needs)| missing_line(ctx, view, needs))
        .collect();
    Err(Error::LedgerOnly(format!(
        "this query reads what only the ledger holds; the cluster has {}:\n{}",
        what_the_cluster_has(ctx),
        lines.join("\n")
    )))
}

/// The exported table that a ledger-only name needs, for the ones an export writes.
fn exported_table(name: &str) -> Option<&'static str> {
    match name {
        "weekly_metrics" | "week_snapshot" => Some("week_snapshot"),
        "gate_weekly" | "gate_decision" => Some("gate_decision"),
        "retention_sweep" => Some("retention_sweep"),
        _ => None,
    }
}

/// Why `weekly_metrics` is missing although `week_snapshot` is there: several ledgers' exports.
const SEVERAL_LEDGERS: &str = "weekly_metrics runs over one ledger's export only (with or without its archive): each \
     ledger's week_snapshot holds its own figures of the weeks it swept, which do not add up with another's; \
     query week_rollup over the exports and their archives instead";

/// `  NAME needs WHAT`, and for what an export writes, where the cluster looks for it.
fn missing_line(ctx: &SessionContext, name: &str, needs: &str) -> String {
    if name == "weekly_metrics" && has(ctx, "week_snapshot") {
        return format!("  {SEVERAL_LEDGERS}");
    }
    match exported_table(name) {
        Some(table) => format!(
            "  {name} needs {needs}; every export folder given with --data must hold ledger/{table}/, \
             which `laneledger export --format parquet` writes"
        ),
        None => format!("  {name} needs {needs}"),
    }
}

/// `job_attempt (from the Parquet export) and the views …`, with the ledger's tables `ctx` has.
fn what_the_cluster_has(ctx: &SessionContext) -> String {
    let tables: Vec<&str> = ledger_tables()
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| has(ctx, n))
        .collect();
    let tables = if tables.is_empty() {
        "job_attempt".to_string()
    } else {
        format!("job_attempt, {}", tables.join(", "))
    };
    format!("{tables} (from the Parquet export) and the views {}", view_names(ctx))
}

fn view_names(ctx: &SessionContext) -> String {
    CLUSTER_VIEWS
        .iter()
        .map(|(n, _)| *n)
        .chain(LEDGER_VIEWS.iter().map(|(n, _, _)| *n).filter(|n| has(ctx, n)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The SQL `--view NAME` runs: `SELECT * FROM NAME` (ordered by week_start for `week_rollup`),
/// for a view `ctx` has (the views of [`LEDGER_VIEWS`] only when their table was registered).
///
/// Errors: [`Error::LedgerOnly`] for a view that needs a ledger table the data folders do not hold;
/// [`Error::UnknownView`].
pub fn view_sql(ctx: &SessionContext, name: &str) -> Result<String> {
    let lower = name.to_ascii_lowercase();
    let ledger_view = LEDGER_VIEWS.iter().any(|(n, _, _)| *n == lower);
    if CLUSTER_VIEWS.iter().any(|(n, _)| *n == lower) || (ledger_view && has(ctx, &lower)) {
        // A view's own ORDER BY does not order the rows of a query over it on the cluster (its
        // final stage is read partition by partition): order week_rollup here, as the embedded
        // table comes.
        return Ok(if lower == "week_rollup" {
            "SELECT * FROM week_rollup ORDER BY week_start".to_string()
        } else {
            format!("SELECT * FROM {lower}")
        });
    }
    if lower == "weekly_metrics" && has(ctx, "week_snapshot") {
        return Err(Error::LedgerOnly(SEVERAL_LEDGERS.to_string()));
    }
    if let Some((view, needs)) = LEDGER_ONLY.iter().find(|(n, _)| *n == lower && !has(ctx, n)) {
        let where_ = match exported_table(view) {
            Some(table) => format!(
                "which every export folder given with --data must hold as ledger/{table}/ \
                 (`laneledger export --format parquet` writes it)"
            ),
            None => "which only the ledger holds".to_string(),
        };
        return Err(Error::LedgerOnly(format!(
            "{view} does not run on the cluster: it needs {needs}, {where_}; the views on the cluster are {}",
            view_names(ctx)
        )));
    }
    Err(Error::UnknownView {
        name: name.to_string(),
        available: view_names(ctx),
    })
}

/// Runs `sql` (after [`refuse_ledger_only`]) and collects its answer.
pub async fn run(ctx: &SessionContext, sql: &str) -> Result<laneledger_query::QueryResult> {
    refuse_ledger_only(ctx, sql)?;
    let df = ctx.sql(sql).await?;
    let schema = Arc::new(df.schema().as_arrow().clone());
    let batches = df.collect().await?;
    Ok(laneledger_query::QueryResult { schema, batches })
}

/// One query of the differential: a name, its SQL, and whether its rows come in a defined order
/// (otherwise rows are sorted before comparing).
#[derive(Debug, Clone, Copy)]
pub struct Check {
    /// A short name.
    pub name: &'static str,
    /// The SQL, which both engines run as it is.
    pub sql: &'static str,
    /// True when the SQL orders its rows completely.
    pub ordered: bool,
}

/// The per-day rollup of the differential: attempts, free attempts (SQLite-style `SUM` of a
/// boolean), distinct jobs and tokens per UTC day of `started_at`.
pub const DAY_ROLLUP: &str = "SELECT to_char(started_at, '%Y-%m-%d') AS day,
       COUNT(*) AS attempts,
       SUM(lane = 'free') AS free_attempts,
       COUNT(DISTINCT job_id) AS jobs,
       SUM(tokens_in + tokens_out) AS tokens
FROM job_attempt
GROUP BY to_char(started_at, '%Y-%m-%d')
ORDER BY day";

/// The differential's queries over the ledger's exported tables: each runs when the cluster has its
/// view ([`LEDGER_VIEWS`]), after [`CHECKS`].
pub const LEDGER_CHECKS: [Check; 2] = [
    Check {
        name: "weekly_metrics",
        sql: "SELECT * FROM weekly_metrics",
        ordered: false,
    },
    Check {
        name: "gate_weekly",
        sql: "SELECT * FROM gate_weekly",
        ordered: false,
    },
];

/// The [`LEDGER_CHECKS`] that `ctx` cannot run, each with why (the table its view needs).
pub fn unchecked(ctx: &SessionContext) -> Vec<(&'static str, String)> {
    LEDGER_VIEWS
        .iter()
        .filter(|(view, _, _)| !has(ctx, view))
        .map(|(view, table, _)| {
            let why = if *view == "weekly_metrics" && has(ctx, table) {
                "runs over one ledger's export only".to_string()
            } else {
                format!("needs {table}: not every export folder holds ledger/{table}/")
            };
            (*view, why)
        })
        .collect()
}

/// The differential's queries: seed 000's two rollup queries, the views, and a per-day rollup.
pub const CHECKS: [Check; 6] = [
    Check {
        name: "q1 tokens per artifact",
        sql: views::SEED_Q1_TOKENS_PER_ARTIFACT,
        ordered: true,
    },
    Check {
        name: "q2 duplicates",
        sql: views::SEED_Q2_DUPLICATES,
        ordered: false,
    },
    Check {
        name: "job_rollup",
        sql: "SELECT * FROM job_rollup",
        ordered: false,
    },
    Check {
        name: "week_rollup",
        sql: "SELECT * FROM week_rollup",
        ordered: false,
    },
    Check {
        name: "duplicate_artifact",
        sql: "SELECT * FROM duplicate_artifact",
        ordered: false,
    },
    Check {
        name: "day rollup",
        sql: DAY_ROLLUP,
        ordered: true,
    },
];

/// An answer as text: column names, then rows of cells (`NULL` for a null), sorted unless
/// `ordered`. Comparing text leaves out type differences that do not change a value (Utf8 vs
/// Utf8View, Int64 vs UInt64).
pub fn as_text(batches: &[RecordBatch], ordered: bool) -> Result<(Vec<String>, Vec<Vec<String>>)> {
    let options = FormatOptions::default().with_null("NULL");
    let mut names = Vec::new();
    let mut rows = Vec::new();
    for batch in batches {
        if names.is_empty() {
            names = batch.schema().fields().iter().map(|f| f.name().clone()).collect();
        }
        let formatters = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(datafusion::error::DataFusionError::from)?;
        for i in 0..batch.num_rows() {
            rows.push(formatters.iter().map(|f| f.value(i).to_string()).collect::<Vec<_>>());
        }
    }
    if !ordered {
        rows.sort();
    }
    Ok((names, rows))
}

/// One query's verdict in a differential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The check's name.
    pub name: &'static str,
    /// Rows the cluster returned.
    pub rows: usize,
    /// `None` when both answers are the same; otherwise how they differ.
    pub difference: Option<String>,
    /// Milliseconds the cluster took.
    pub cluster_ms: u128,
    /// Milliseconds the reference engine took.
    pub reference_ms: u128,
}

/// Describes how two text answers differ, or `None` when they are the same.
pub fn difference(
    cluster: &(Vec<String>, Vec<Vec<String>>),
    reference: &(Vec<String>, Vec<Vec<String>>),
) -> Option<String> {
    if cluster.1.len() != reference.1.len() {
        return Some(format!(
            "{} rows on the cluster, {} in the reference",
            cluster.1.len(),
            reference.1.len()
        ));
    }
    for (i, (a, b)) in cluster.1.iter().zip(&reference.1).enumerate() {
        if a != b {
            return Some(format!("row {}: cluster {a:?}, reference {b:?}", i + 1));
        }
    }
    None
}

/// Runs every [`CHECKS`] query, then each [`LEDGER_CHECKS`] query whose view the cluster context
/// has, on the cluster and on `reference` (any engine whose answer comes as Arrow batches), and
/// returns the verdicts in order.
pub async fn differential<F, Fut>(cluster: &SessionContext, mut reference: F) -> Result<Vec<Verdict>>
where
    F: FnMut(&'static str) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<RecordBatch>>>,
{
    let mut out = Vec::new();
    let ledger_checks = LEDGER_CHECKS.into_iter().filter(|c| has(cluster, c.name));
    for check in CHECKS.into_iter().chain(ledger_checks) {
        let t = std::time::Instant::now();
        let got = run(cluster, check.sql).await?;
        let cluster_ms = t.elapsed().as_millis();
        let t = std::time::Instant::now();
        let want = reference(check.sql).await?;
        let reference_ms = t.elapsed().as_millis();
        let got_text = as_text(&got.batches, check.ordered)?;
        let want_text = as_text(&want, check.ordered)?;
        out.push(Verdict {
            name: check.name,
            rows: got_text.1.len(),
            difference: difference(&got_text, &want_text),
            cluster_ms,
            reference_ms,
        });
    }
    Ok(out)
}

/// Parses a scheduler URL (`df://host:port`, `http://host:port` or `host:port`) into (host, port);
/// the port defaults to 50050.
pub fn scheduler_host_port(url: &str) -> Result<(String, u16)> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let rest = rest.trim_end_matches('/');
    let (host, port) = match rest.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| Error::Address(format!("{url}: {p:?} is not a port")))?,
        ),
        None => (rest, 50050),
    };
    if host.is_empty() {
        return Err(Error::Address(format!("{url}: no host (write df://HOST:50050)")));
    }
    Ok((host.to_string(), port))
}

/// Counts of a differential's verdicts: (same, different).
pub fn tally(verdicts: &[Verdict]) -> (usize, usize) {
    let same = verdicts.iter().filter(|v| v.difference.is_none()).count();
    (same, verdicts.len() - same)
}
