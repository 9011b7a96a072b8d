//! Every redb table of the ledger, declared once.
//!
//! Values are postcard-encoded versioned enums ([`crate::record::AttemptRecord`] and friends), so a
//! later release reads what this one wrote; `meta["format_version"]` says which versions may occur.

use redb::{MultimapTableDefinition, TableDefinition};

/// The newest on-disk format this build writes and reads. Version 2 added the hash chain
/// ([`CHAIN`], [`CHAIN_CHECKPOINT`]), the retention tables and the verify log; a version 1 file is
/// migrated when it is opened (its records are chained in table order, see [`crate::chain`]).
pub const FORMAT_VERSION: u64 = 2;

/// `format_version` and other single values.
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Attempts keyed by (job_id, attempt_no): the ledger's order, and the index for one job's attempts.
pub const ATTEMPT: TableDefinition<(&str, u32), &[u8]> = TableDefinition::new("attempt");
/// idem_key → (job_id, attempt_no) of each attempt that carries it.
pub const ATTEMPT_BY_IDEM_KEY: MultimapTableDefinition<&str, (&str, u32)> =
    MultimapTableDefinition::new("attempt_by_idem_key");
/// Conflicting records, in arrival order (key: arrival number from 1).
pub const ATTEMPT_CONFLICT: TableDefinition<u64, &[u8]> = TableDefinition::new("attempt_conflict");
/// Rejected lines, in arrival order (key: arrival number from 1).
pub const INGEST_REJECT: TableDefinition<u64, &[u8]> = TableDefinition::new("ingest_reject");
/// Running totals: see [`crate::ledger::Counters`].
pub const COUNTER: TableDefinition<&str, u64> = TableDefinition::new("counter");
/// Gate decisions (SPEC 1.2, seed 003) keyed by (job_id, decided_at µs since the epoch, UTC): the
/// ledger's order, and the index for one job's decisions.
pub const DECISION: TableDefinition<(&str, i64), &[u8]> = TableDefinition::new("decision");
/// Conflicting decision records, in arrival order (key: arrival number from 1).
pub const DECISION_CONFLICT: TableDefinition<u64, &[u8]> = TableDefinition::new("decision_conflict");
/// The hash chain (see [`crate::chain`]): entry position from 1 → the postcard-encoded
/// [`crate::chain::ChainEntry`] followed by its SHA-256 (32 bytes).
pub const CHAIN: TableDefinition<u64, &[u8]> = TableDefinition::new("chain");
/// Checkpoints a retention sweep left where it removed a run of chain entries, keyed by the run's
/// first position; never removed (see [`crate::chain::Checkpoint`]).
pub const CHAIN_CHECKPOINT: TableDefinition<u64, &[u8]> = TableDefinition::new("chain_checkpoint");
/// The retention sweeps (SPEC 6), keyed by sweep number from 1 ([`crate::retention::SweepRecord`]).
pub const RETENTION_SWEEP: TableDefinition<u64, &[u8]> = TableDefinition::new("retention_sweep");
/// The weekly figures of an ISO week, taken before a sweep removed any of its rows, keyed by
/// `2026-W47` ([`crate::retention::WeekFigures`]).
pub const WEEK_SNAPSHOT: TableDefinition<&str, &[u8]> = TableDefinition::new("week_snapshot");
/// Each `verify` run, keyed by run number from 1 ([`crate::chain::VerifyRun`]); outside the chain.
pub const VERIFY_RUN: TableDefinition<u64, &[u8]> = TableDefinition::new("verify_run");
