//! Tables computed from the ledger's tables: the materialized `job_rollup`, `idem_artifacts`,
//! `job_week`, `week_attempt` and `week_rollup`, the SQL text of every view ([`views`]), and the policy audits
//! ([`audits`]); the tables whose rows each come from one job are kept up to date by job
//! ([`kept`]).
//!
//! Imports: [`crate::tables`], [`crate::engine`], and the crate root's [`crate::error`] and
//! [`crate::words`].

pub mod audits;
pub mod idem_artifacts;
pub mod job_rollup;
pub mod job_week;
pub mod kept;
pub mod per_read;
pub mod views;
pub mod week_attempt;
pub mod week_rollup;
