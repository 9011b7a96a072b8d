//! laneledger's store: an append-only redb ledger of LLM job attempts.
//!
//! Routers send attempt records (SPEC 1.1) as NDJSON or CSV; [`format::parse`] reads them, the
//! [`Ledger`] applies the write rules of SPEC 2 (duplicate delivery, completion, conflict,
//! reject) in one durable redb transaction per batch, and readers scan it in
//! (job_id, attempt_no) order or look up one job or one idempotency key by index. Gate decisions
//! (SPEC 1.2, seed 003) go through the same framing and rules: [`format::decision`],
//! [`storage::decision_ledger`], [`ingest_decisions_reader`].
//! The seeds' pure policy rules live in [`policy`]. No Arrow, no async runtime here.
//!
//! # The folders, in import order
//!
//! Each folder imports only from the folders above it in this list (and from [`error`], the
//! crate's error type, and [`progress`], how long work reports how far it has come); none imports
//! from a folder below it.
//!
//! 1. [`model`] — what a record is (attempt, lane, timestamps) and SPEC 2's merge of two reports.
//! 2. [`policy`] — the seeds' pure routing rules (lane, refusal, dwell gate).
//! 3. [`config`] — `lane.yaml`, typed, with its prices.
//! 4. [`format`](mod@format) — decoding records from NDJSON, CSV and SQLite.
//! 5. [`drill`] — the drill generator and the what-if replay (pure, no storage).
//! 6. [`storage`] — the redb file: tables, the [`Ledger`], blocks, the hash chain, indexes,
//!    retention.
//! 7. [`ingest`] — the write path from a reader or a router's log (mappings) into the [`Ledger`].
//!
//! The main types are re-exported here, at the crate root.
//!
//! ```no_run
//! use laneledger_store::{ingest_reader, InputFormat, Ledger, DEFAULT_BATCH};
//! let ledger = Ledger::open("laneledger.redb")?;
//! let input = std::io::BufReader::new(std::fs::File::open("attempts.ndjson").unwrap());
//! let report = ingest_reader(&ledger, "attempts.ndjson", input, InputFormat::Ndjson, DEFAULT_BATCH, |_| {})?;
//! println!("{}", report.counters);
//! # Ok::<(), laneledger_store::Error>(())
//! ```

// The folders, lowest first. A folder imports only from the folders before it (and from
// `error`); none imports from a folder after it.
pub mod config;
pub mod drill;
pub mod error;
pub mod format;
pub mod ingest;
pub mod model;
pub mod policy;
pub mod progress;
pub mod storage;

pub use config::LaneConfig;
pub use error::{Error, Result};
pub use format::decision::{
    DEFAULT_RESERVED_SERVICE_S, Decision, DecisionConflict, DecisionReader, IncomingDecision, StoredDecision,
    decision_reader,
};
pub use format::parse::{AttemptReader, Framed, InputFormat, LineReader, Parsed, RecordDecoder};
pub use ingest::{
    DEFAULT_BATCH, IngestReport, ingest_decisions_reader, ingest_decisions_reader_with_progress, ingest_framed,
    ingest_reader, ingest_reader_with_progress, try_ingest_framed,
};
pub use model::record::{Attempt, AttemptRef, Conflict, Lane, Outcome, Reject, StoredAttempt, StoredAttemptRef};
pub use model::time::{format_timestamp, now_micros, parse_timestamp};
pub use progress::{Progress, Silent};
pub use storage::chain::AttemptChanges;
pub use storage::ledger::{
    AttemptChunk, AttemptSnapshot, Counters, Incoming, Ledger, LedgerDb, WriteResult, decode_attempt_ref,
};
