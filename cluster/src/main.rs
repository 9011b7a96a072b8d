//! `laneledger-cluster`: laneledger's SQL on an Apache DataFusion Ballista cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use laneledger_cluster::{ExecutorOptions, Policy, SchedulerOptions};
use laneledger_query::OutputFormat;

/// laneledger's SQL (the same views, the SQLite-style sum) on a Ballista cluster, over the Parquet
/// files `laneledger export --format parquet` and `laneledger retain --archive` write.
#[derive(Parser)]
#[command(name = "laneledger-cluster", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a Ballista scheduler with laneledger's functions (gRPC, /healthz and /readyz on one port).
    Scheduler {
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0:50050")]
        bind: SocketAddr,
        /// The host executors reach this scheduler at.
        #[arg(long, default_value = "localhost")]
        external_host: String,
        /// Executors that must be registered before /readyz answers 200.
        #[arg(long, default_value_t = 1)]
        min_executors: usize,
        /// Task scheduling policy (each executor's --policy must be the same).
        #[arg(long, value_enum, default_value = "push-staged")]
        policy: Policy,
    },
    /// Run a Ballista executor with laneledger's functions.
    Executor {
        /// The scheduler: df://HOST:PORT (port 50050 when left out).
        #[arg(long, default_value = "df://localhost:50050")]
        scheduler: String,
        /// Address to listen on.
        #[arg(long, default_value = "0.0.0.0")]
        bind_host: String,
        /// Arrow Flight port (shuffle data and results are fetched from it).
        #[arg(long, default_value_t = 50051)]
        port: u16,
        /// gRPC port the scheduler pushes tasks to.
        #[arg(long, default_value_t = 50052)]
        grpc_port: u16,
        /// The host the scheduler, the other executors and clients reach this executor at.
        #[arg(long)]
        external_host: Option<String>,
        /// Tasks run at once (0: one per CPU).
        #[arg(long, default_value_t = 0)]
        vcores: usize,
        /// Folder for shuffle files (a fresh temp folder when left out).
        #[arg(long)]
        work_dir: Option<PathBuf>,
        /// Task scheduling policy: the scheduler's.
        #[arg(long, value_enum, default_value = "push-staged")]
        policy: Policy,
    },
    /// Run SQL (or a view) on the cluster over the data folders, and print the answer.
    Query {
        #[command(flatten)]
        target: Target,
        /// Run `SELECT * FROM NAME` for a view (job_rollup, job_week, week_rollup, duplicate_artifact;
        /// weekly_metrics and gate_weekly when the export folders hold ledger/week_snapshot and
        /// ledger/gate_decision).
        #[arg(long, conflicts_with = "sql")]
        view: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// The SQL (it may start with a `--` comment).
        #[arg(required_unless_present = "view", allow_hyphen_values = true)]
        sql: Option<String>,
    },
    /// Run seed 000's two queries, the views (weekly_metrics and gate_weekly too when the export
    /// folders hold the ledger's tables) and a per-day rollup on the cluster and in this process
    /// over the same data folders (or on --ledger), and print whether each answer is the same (exit 1
    /// if any differs).
    Check {
        #[command(flatten)]
        target: Target,
        /// Compare with the embedded engine on this ledger (which must hold exactly the attempts of
        /// the data folders) instead of with DataFusion in this process over the same folders.
        #[arg(long)]
        ledger: Option<PathBuf>,
    },
}

#[derive(Args)]
struct Target {
    /// The scheduler: df://HOST:PORT (port 50050 when left out).
    #[arg(long, default_value = "df://localhost:50050")]
    scheduler: String,
    /// A folder to read into job_attempt; give --data once per folder, all are read as one table:
    /// export folders (DIR/day=YYYY-MM-DD/attempts.parquet, and the ledger's tables under
    /// DIR/ledger/), archive sweep folders (ARCHIVE/sweep-NNNNNN) or archive roots (every sweep
    /// below). Every process of the cluster must see them at the same path.
    #[arg(long = "data", required = true)]
    data: Vec<PathBuf>,
    /// Turn Ballista's adaptive planning off.
    #[arg(long)]
    no_adaptive: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Format {
    Table,
    Csv,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(laneledger_cluster::STACK_BYTES)
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Scheduler {
            bind,
            external_host,
            min_executors,
            policy,
        } => {
            eprintln!("laneledger-cluster scheduler listening on {bind}");
            laneledger_cluster::run_scheduler(SchedulerOptions {
                bind,
                external_host,
                min_executors,
                policy,
            })
            .await
            .with_context(|| format!("scheduler on {bind}"))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Executor {
            scheduler,
            bind_host,
            port,
            grpc_port,
            external_host,
            vcores,
            work_dir,
            policy,
        } => {
            let (scheduler_host, scheduler_port) = laneledger_cluster::scheduler_host_port(&scheduler)?;
            eprintln!(
                "laneledger-cluster executor on {bind_host}:{port} (gRPC {grpc_port}), scheduler {scheduler_host}:{scheduler_port}"
            );
            laneledger_cluster::run_executor(ExecutorOptions {
                scheduler_host,
                scheduler_port,
                bind_host,
                port,
                grpc_port,
                external_host,
                vcores,
                work_dir,
                policy,
            })
            .await
            .with_context(|| format!("executor on port {port}"))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Query {
            target,
            view,
            format,
            sql,
        } => {
            let folders = laneledger_cluster::data_folders(&target.data)?;
            let ctx = laneledger_cluster::connect(&target.scheduler, &folders, !target.no_adaptive).await?;
            let sql = match view {
                Some(name) => laneledger_cluster::view_sql(&ctx, &name)?,
                None => sql.unwrap_or_default(),
            };
            let result = laneledger_cluster::run(&ctx, &sql)
                .await
                .with_context(|| format!("on the cluster at {}", target.scheduler))?;
            let format = match format {
                Format::Table => OutputFormat::Table,
                Format::Csv => OutputFormat::Csv,
                Format::Json => OutputFormat::Json,
            };
            print!("{}", laneledger_query::format_result(&result, format)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { target, ledger } => {
            let folders = laneledger_cluster::data_folders(&target.data)?;
            let ctx = laneledger_cluster::connect(&target.scheduler, &folders, !target.no_adaptive).await?;
            let reference = if ledger.is_some() { "embedded" } else { "in-process" };
            let verdicts = match ledger {
                Some(path) => {
                    let opened = laneledger_store::Ledger::open_to_read(&path)
                        .with_context(|| format!("opening {}", path.display()))?;
                    let session = laneledger_query::Session::new(opened).await?;
                    laneledger_cluster::differential(&ctx, |sql| {
                        let session = session.clone();
                        async move {
                            session
                                .query(sql)
                                .await
                                .map(|r| r.batches)
                                .map_err(|e| laneledger_cluster::Error::Embedded(e.to_string()))
                        }
                    })
                    .await
                }
                None => {
                    let local = laneledger_cluster::local(&folders).await?;
                    laneledger_cluster::differential(&ctx, |sql| {
                        let local = local.clone();
                        async move { Ok(laneledger_cluster::run(&local, sql).await?.batches) }
                    })
                    .await
                }
            }
            .with_context(|| format!("on the cluster at {}", target.scheduler))?;
            for v in &verdicts {
                match &v.difference {
                    None => println!(
                        "same       {:<24} {:>7} rows   cluster {:>6} ms   {reference} {:>6} ms",
                        v.name, v.rows, v.cluster_ms, v.reference_ms
                    ),
                    Some(d) => println!("DIFFERENT  {:<24} {d}", v.name),
                }
            }
            for (view, why) in laneledger_cluster::unchecked(&ctx) {
                println!("not run    {view:<24} {why}");
            }
            let (same, different) = laneledger_cluster::tally(&verdicts);
            println!("{same} same, {different} different");
            Ok(if different == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}
