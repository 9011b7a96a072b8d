//! Every redb table of the ledger, declared once.
//!
//! Values are postcard-encoded versioned enums ([`crate::record::AttemptRecord`] and friends), so a
//! later release reads what this one wrote; `meta["format_version"]` says which versions may occur.

use redb::{MultimapTableDefinition, TableDefinition};

/// The newest on-disk format this build writes and reads.
pub const FORMAT_VERSION: u64 = 1;

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
