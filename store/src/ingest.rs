//! Ingest one input (a file or stdin) into the ledger in durable batches: attempts with
//! [`ingest_reader`], gate decisions with [`ingest_decisions_reader`].

use std::io::BufRead;

use crate::decision::{Decision, DecisionDecoder, IncomingDecision};
use crate::error::{Error, Result};
use crate::ledger::{Counters, Incoming, Ledger, WriteResult};
use crate::parse::{AttemptDecoder, Framed, InputFormat, LineReader, RecordDecoder};
use crate::record::{Attempt, Reject};
use crate::time::format_timestamp;

/// Records per write transaction: each batch is one fsync'd commit.
pub const DEFAULT_BATCH: usize = 10_000;

/// What one ingest did: the totals, and a line per problem (`FILE:LINE: field: reason`, or the
/// conflict and the fields it names), in input order.
#[derive(Debug, Default, Clone)]
pub struct IngestReport {
    /// Totals of the write results.
    pub counters: Counters,
    /// One message per rejected line or conflicting record.
    pub problems: Vec<String>,
}

/// A record kind the ledger ingests: how it is decoded, offered, written and named in messages.
trait Kind {
    /// The decoder of one line or row.
    type Decoder: RecordDecoder;
    /// What the ledger's write call takes.
    type Incoming;
    /// A parsed record with its origin.
    fn incoming(
        source: &str,
        line: u64,
        raw: String,
        record: <Self::Decoder as RecordDecoder>::Record,
    ) -> Self::Incoming;
    /// A line already known to be bad.
    fn reject(r: Reject) -> Self::Incoming;
    /// The record's identity for a conflict message: `job j1 attempt 2`.
    fn identity(i: &Self::Incoming) -> Option<String>;
    /// One durable write transaction.
    fn write(ledger: &Ledger, batch: Vec<Self::Incoming>) -> Result<Vec<WriteResult>>;
}

struct Attempts;
impl Kind for Attempts {
    type Decoder = AttemptDecoder;
    type Incoming = Incoming;
    fn incoming(source: &str, line: u64, raw: String, attempt: Attempt) -> Incoming {
        Incoming::Attempt {
            source: source.to_string(),
            line,
            raw,
            attempt,
        }
    }
    fn reject(r: Reject) -> Incoming {
        Incoming::Reject(r)
    }
    fn identity(i: &Incoming) -> Option<String> {
        match i {
            Incoming::Attempt { attempt, .. } => Some(format!("job {} attempt {}", attempt.job_id, attempt.attempt_no)),
            Incoming::Reject(_) => None,
        }
    }
    fn write(ledger: &Ledger, batch: Vec<Incoming>) -> Result<Vec<WriteResult>> {
        ledger.write_batch(batch)
    }
}

struct Decisions;
impl Kind for Decisions {
    type Decoder = DecisionDecoder;
    type Incoming = IncomingDecision;
    fn incoming(source: &str, line: u64, raw: String, decision: Decision) -> IncomingDecision {
        IncomingDecision::Decision {
            source: source.to_string(),
            line,
            raw,
            decision,
        }
    }
    fn reject(r: Reject) -> IncomingDecision {
        IncomingDecision::Reject(r)
    }
    fn identity(i: &IncomingDecision) -> Option<String> {
        match i {
            IncomingDecision::Decision { decision, .. } => Some(format!(
                "job {} decision at {}",
                decision.job_id,
                format_timestamp(decision.decided_at)
            )),
            IncomingDecision::Reject(_) => None,
        }
    }
    fn write(ledger: &Ledger, batch: Vec<IncomingDecision>) -> Result<Vec<WriteResult>> {
        ledger.write_decisions(batch)
    }
}

/// Reads every attempt record (SPEC 1.1) of `reader` and writes them in batches of `batch`
/// records, each one durable redb commit.
///
/// `source` names the input in rejects and messages (`FILE:LINE: field: reason`, or
/// `FILE:LINE: conflict: job J attempt N differs in F; the first row stays`). `progress` is called
/// after each batch with the bytes read so far. Errors: [`Error::Input`] when the input cannot be
/// read (the batches already committed stay), or a storage error.
pub fn ingest_reader<R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    progress: impl FnMut(u64),
) -> Result<IngestReport> {
    ingest::<Attempts, R>(ledger, source, reader, format, batch, progress)
}

/// Reads every gate decision (SPEC 1.2) of `reader` and writes them in batches of `batch` records,
/// as [`ingest_reader`] does for attempts: same framing, same problem lines (a conflict reads
/// `FILE:LINE: conflict: job J decision at T differs in F; the first row stays`).
pub fn ingest_decisions_reader<R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    progress: impl FnMut(u64),
) -> Result<IngestReport> {
    ingest::<Decisions, R>(ledger, source, reader, format, batch, progress)
}

fn ingest<K: Kind, R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    mut progress: impl FnMut(u64),
) -> Result<IngestReport> {
    let mut report = IngestReport::default();
    let mut records: LineReader<R, K::Decoder> = LineReader::new(source, reader, format);
    let mut pending: Vec<K::Incoming> = Vec::with_capacity(batch);
    let mut lines: Vec<u64> = Vec::with_capacity(batch);
    loop {
        let next = records.next();
        let done = next.is_none();
        match next {
            Some(Ok(Framed::Record { line, raw, record })) => {
                lines.push(line);
                pending.push(K::incoming(source, line, raw, record));
            }
            Some(Ok(Framed::Reject(r))) => {
                lines.push(r.line);
                pending.push(K::reject(r));
            }
            Some(Err(error)) => {
                flush::<K>(ledger, source, &mut pending, &mut lines, &mut report)?;
                return Err(Error::Input {
                    source_name: source.to_string(),
                    error,
                });
            }
            None => {}
        }
        if pending.len() >= batch || (done && !pending.is_empty()) {
            flush::<K>(ledger, source, &mut pending, &mut lines, &mut report)?;
            progress(records.bytes_read());
        }
        if done {
            return Ok(report);
        }
    }
}

fn flush<K: Kind>(
    ledger: &Ledger,
    source: &str,
    pending: &mut Vec<K::Incoming>,
    lines: &mut Vec<u64>,
    report: &mut IngestReport,
) -> Result<()> {
    let names: Vec<Option<String>> = pending.iter().map(K::identity).collect();
    let results = K::write(ledger, std::mem::take(pending))?;
    for ((result, line), name) in results.iter().zip(lines.drain(..)).zip(names) {
        report.counters.add(result);
        match result {
            WriteResult::Rejected { field: Some(f), reason } => {
                report.problems.push(format!("{source}:{line}: {f}: {reason}"))
            }
            WriteResult::Rejected { field: None, reason } => report.problems.push(format!("{source}:{line}: {reason}")),
            WriteResult::Conflict { fields } => report.problems.push(format!(
                "{source}:{line}: conflict: {} differs in {}; the first row stays",
                name.unwrap_or_default(),
                fields.join(", ")
            )),
            _ => {}
        }
    }
    Ok(())
}
