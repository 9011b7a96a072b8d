//! laneledger's query layer: SQL over the ledger with Apache DataFusion.
//!
//! A [`Session`] registers the ledger's tables (`job_attempt`, `attempt_conflict`,
//! `ingest_reject`, `gate_decision`, `decision_conflict`, and SPEC 6's `retention_sweep`, `week_snapshot`,
//! `verify_run`) as Arrow tables read afresh at each query, replaces `SUM` with SQLite's
//! boolean-summing rule ([`sqlite_sum()`]), materializes seed 000's `job_rollup` view
//! ([`derived::job_rollup`]), `idem_artifacts` ([`derived::idem_artifacts`]), `job_week`
//! ([`derived::job_week`]) and `week_rollup` ([`derived::week_rollup`]) once per write, creates the
//! review views ([`derived::views`]), and runs user SQL read-only ([`Session::query`]).
//! [`review::metrics`] turns `weekly_metrics` into the weekly review; [`review::gate_metrics`] turns
//! `gate_weekly` into seed 003's dwell gate review. [`archive::export`] writes `job_attempt` as
//! Parquet, Arrow IPC or CSV files partitioned by day (SPEC 8 export; also the retention archive of
//! SPEC 6).
//!
//! The folders, bottom to top; a file imports only from its own folder and the folders below it
//! (the crate root's `error.rs` and `words.rs` are the bottom, and `error.rs` imports nothing of
//! the crate):
//!
//! 1. [`error`], [`words`] (files at the root): the one error enum; numbers in words.
//! 2. [`engine`]: DataFusion runtime pieces that know nothing of the ledger (the SQL threads,
//!    stopping a plan, bounded string functions, SQLite's `SUM`, planning hints).
//! 3. [`tables`]: the ledger's tables as DataFusion providers (`job_attempt`, `gate_decision`,
//!    the conflicts and rejects, SPEC 6's tables).
//! 4. [`derived`]: tables computed from them (`job_rollup`, `idem_artifacts`, `job_week`,
//!    `week_rollup`), the views' SQL, the audits.
//! 5. [`session`]: the [`Session`] that registers everything and runs SQL; result formatting.
//! 6. [`review`]: the weekly review built on the session (metrics, gate, cost, sections, findings,
//!    what-if).
//! 7. [`archive`]: exports and retention sweeps.
//!
//! ```no_run
//! # async fn run() -> Result<(), laneledger_query::Error> {
//! let ledger = laneledger_store::Ledger::open("laneledger.redb")?;
//! let session = laneledger_query::Session::new(ledger).await?;
//! let result = session.query(laneledger_query::derived::views::SEED_Q1_TOKENS_PER_ARTIFACT).await?;
//! print!("{}", laneledger_query::format_result(&result, laneledger_query::OutputFormat::Table)?);
//! # Ok(()) }
//! ```

pub mod error;
pub mod words;

pub mod engine;

pub mod tables;

pub mod derived;

pub mod session;

pub mod review;

pub mod archive;

pub use archive::export::{ExportFormat, ExportSummary, ExportedFile, ExportedTable};
pub use derived::per_read::Upkeep;
pub use engine::executor::Executor;
pub use engine::sqlite_sum::sqlite_sum;
pub use error::{Error, ExportWriteError, Result};
pub use review::findings::Finding;
pub use review::gate_metrics::{GateReview, GateThresholds, GateWeek};
pub use review::metrics::{AlertCheck, AlertState, Thresholds, WeekMetrics, WeekReview};
pub use review::sections::{Group, Section, SectionPage, Summary, review_document, section_text};
pub use session::output::{OutputFormat, TextStream, format_result, text_cells, text_table};
pub use session::{Cut, QueryResult, QueryStream, ResultLimits, Session, TABLES};
pub use words::{format_count, format_ratio};
