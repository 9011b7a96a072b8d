//! laneledger's store: an append-only redb ledger of LLM job attempts.
//!
//! Routers send attempt records (SPEC 1.1) as NDJSON or CSV; [`parse`] reads them, the
//! [`Ledger`] applies the write rules of SPEC 2 (duplicate delivery, completion, conflict,
//! reject) in one durable redb transaction per batch, and readers scan it in
//! (job_id, attempt_no) order or look up one job or one idempotency key by index. Gate decisions
//! (SPEC 1.2, seed 003) go through the same framing and rules: [`decision`], [`decision_ledger`],
//! [`ingest_decisions_reader`].
//! The seeds' pure policy rules live in [`policy`]. No Arrow, no async runtime here.
//!
//! ```no_run
//! use laneledger_store::{ingest_reader, InputFormat, Ledger, DEFAULT_BATCH};
//! let ledger = Ledger::open("laneledger.redb")?;
//! let input = std::io::BufReader::new(std::fs::File::open("attempts.ndjson").unwrap());
//! let report = ingest_reader(&ledger, "attempts.ndjson", input, InputFormat::Ndjson, DEFAULT_BATCH, |_| {})?;
//! println!("{}", report.counters);
//! # Ok::<(), laneledger_store::Error>(())
//! ```

pub mod attempt_block;
pub mod attempt_store;
pub mod chain;
pub mod config;
pub mod decision;
pub mod decision_ledger;
pub mod drill;
pub mod error;
pub mod idem_index;
pub mod ingest;
pub mod lanes;
pub mod ledger;
pub mod mapping;
pub mod parse;
pub mod policy;
pub mod prices;
pub mod record;
mod reject_seen;
pub mod retention;
pub mod sqlite_source;
pub mod tables;
pub mod time;
mod varint;
pub mod webhook_sent;
pub mod whatif;
pub mod write_rules;

pub use chain::AttemptChanges;
pub use config::LaneConfig;
pub use decision::{
    DEFAULT_RESERVED_SERVICE_S, Decision, DecisionConflict, DecisionReader, IncomingDecision, StoredDecision,
    decision_reader,
};
pub use error::{Error, Result};
pub use ingest::{
    DEFAULT_BATCH, IngestReport, ingest_decisions_reader, ingest_framed, ingest_reader, try_ingest_framed,
};
pub use ledger::{AttemptChunk, Counters, Incoming, Ledger, LedgerDb, WriteResult, decode_attempt_ref};
pub use parse::{AttemptReader, Framed, InputFormat, LineReader, Parsed, RecordDecoder};
pub use record::{Attempt, AttemptRef, Conflict, Lane, Outcome, Reject, StoredAttempt, StoredAttemptRef};
pub use time::{format_timestamp, now_micros, parse_timestamp};
