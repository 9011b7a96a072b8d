//! The ledger's tables as DataFusion providers: `job_attempt` and its cache, `gate_decision`,
//! the conflict and reject tables, SPEC 6's `retention_sweep`, `week_snapshot` and `verify_run`
//! ([`retention_tables`]), the provider over a ledger read ([`ledger_table`]), and Parquet
//! exports read as input records ([`parquet_source`]).
//!
//! Imports: [`crate::engine`], and the crate root's [`crate::error`] and [`crate::words`].

pub mod attempt_conflict;
pub mod decision_conflict;
pub mod gate_decision;
pub mod ingest_reject;
pub mod job_attempt;
pub mod labels;
pub mod ledger_table;
pub mod parquet_source;
pub mod retention_tables;
