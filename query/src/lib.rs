//! laneledger's query layer: SQL over the ledger with Apache DataFusion.
//!
//! A [`Session`] registers the ledger's tables (`job_attempt`, `attempt_conflict`,
//! `ingest_reject`, `gate_decision`, `decision_conflict`, and SPEC 6's `retention_sweep`, `week_snapshot`,
//! `verify_run`) as Arrow tables read afresh at each query, replaces `SUM` with SQLite's
//! boolean-summing rule ([`sqlite_sum()`]), materializes seed 000's `job_rollup` view
//! ([`job_rollup`]), `idem_artifacts` ([`idem_artifacts`]), `job_week` ([`job_week`]) and `week_rollup`
//! ([`week_rollup`]) once per write, creates the review views ([`views`]), and runs user SQL read-only ([`Session::query`]).
//! [`metrics`] turns `weekly_metrics` into the weekly review; [`gate_metrics`] turns `gate_weekly`
//! into seed 003's dwell gate review. [`export`] writes `job_attempt` as Parquet, Arrow IPC or
//! CSV files partitioned by day (SPEC 8 export; also the retention archive of SPEC 6).
//!
//! ```no_run
//! # async fn run() -> Result<(), laneledger_query::Error> {
//! let ledger = laneledger_store::Ledger::open("laneledger.redb")?;
//! let session = laneledger_query::Session::new(ledger).await?;
//! let result = session.query(laneledger_query::views::SEED_Q1_TOKENS_PER_ARTIFACT).await?;
//! print!("{}", laneledger_query::format_result(&result, laneledger_query::OutputFormat::Table)?);
//! # Ok(()) }
//! ```

pub mod attempt_conflict;
pub mod audits;
pub mod bounded_aggregates;
pub mod bounded_strings;
mod cache_lock;
pub mod cost;
pub mod decision_conflict;
pub mod error;
pub mod executor;
pub mod export;
pub mod findings;
pub mod gate_decision;
pub mod gate_metrics;
pub mod hints;
pub mod idem_artifacts;
pub mod ingest_reject;
pub mod job_attempt;
pub mod job_rollup;
pub mod job_week;
pub mod ledger_table;
pub mod metrics;
pub mod output;
pub mod parquet_source;
pub mod retention;
pub mod sections;
pub mod session;
pub mod sqlite_sum;
pub mod stop;
pub mod views;
pub mod week_rollup;
pub mod whatif;
pub mod words;

pub use error::{Error, ExportWriteError, Result};
pub use executor::Executor;
pub use export::{ExportFormat, ExportSummary, ExportedFile, ExportedTable};
pub use findings::Finding;
pub use gate_metrics::{GateReview, GateThresholds, GateWeek};
pub use metrics::{AlertCheck, AlertState, Thresholds, WeekMetrics, WeekReview, format_count, format_ratio};
pub use output::{OutputFormat, format_result, text_cells, text_table};
pub use sections::{Group, Section, SectionPage, Summary, review_document, section_text};
pub use session::{Cut, QueryResult, ResultLimits, Session, TABLES};
pub use sqlite_sum::sqlite_sum;
