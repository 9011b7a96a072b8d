//! Ingest one input (a file or stdin) into the ledger in durable batches: attempts with
//! [`ingest_reader`], gate decisions with [`ingest_decisions_reader`].

use std::io::BufRead;

use crate::decision::{IncomingDecision, decision_reader};
use crate::error::{Error, Result};
use crate::ledger::{Counters, Incoming, Ledger, WriteResult};
use crate::parse::{AttemptReader, Framed, InputFormat, Parsed};
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

/// Reads every record of `reader` and writes them in batches of `batch` records.
///
/// `source` names the input in rejects and messages. `progress` is called after each batch with
/// the bytes read so far. Errors: [`Error::Input`] when the input cannot be read (the batches
/// already committed stay), or a storage error.
pub fn ingest_reader<R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    mut progress: impl FnMut(u64),
) -> Result<IngestReport> {
    let mut report = IngestReport::default();
    let mut records = AttemptReader::new(source, reader, format);
    let mut pending: Vec<Incoming> = Vec::with_capacity(batch);
    let mut lines: Vec<u64> = Vec::with_capacity(batch);
    loop {
        let next = records.next();
        let done = next.is_none();
        match next {
            Some(Ok(Parsed::Record { line, raw, attempt })) => {
                lines.push(line);
                pending.push(Incoming::Attempt {
                    source: source.to_string(),
                    line,
                    raw,
                    attempt,
                });
            }
            Some(Ok(Parsed::Reject(r))) => {
                lines.push(r.line);
                pending.push(Incoming::Reject(r));
            }
            Some(Err(error)) => {
                flush(ledger, source, &mut pending, &mut lines, &mut report)?;
                return Err(Error::Input {
                    source_name: source.to_string(),
                    error,
                });
            }
            None => {}
        }
        if pending.len() >= batch || (done && !pending.is_empty()) {
            flush(ledger, source, &mut pending, &mut lines, &mut report)?;
            progress(records.bytes_read());
        }
        if done {
            return Ok(report);
        }
    }
}

fn flush(
    ledger: &Ledger,
    source: &str,
    pending: &mut Vec<Incoming>,
    lines: &mut Vec<u64>,
    report: &mut IngestReport,
) -> Result<()> {
    let keys: Vec<Option<(String, u32)>> = pending
        .iter()
        .map(|i| match i {
            Incoming::Attempt { attempt, .. } => Some((attempt.job_id.clone(), attempt.attempt_no)),
            Incoming::Reject(_) => None,
        })
        .collect();
    let results = ledger.write_batch(std::mem::take(pending))?;
    for ((result, line), key) in results.iter().zip(lines.drain(..)).zip(keys) {
        report.counters.add(result);
        match result {
            WriteResult::Rejected { field: Some(f), reason } => {
                report.problems.push(format!("{source}:{line}: {f}: {reason}"))
            }
            WriteResult::Rejected { field: None, reason } => report.problems.push(format!("{source}:{line}: {reason}")),
            WriteResult::Conflict { fields } => {
                let (job, no) = key.unwrap_or_default();
                report.problems.push(format!(
                    "{source}:{line}: conflict: job {job} attempt {no} differs in {}; the first row stays",
                    fields.join(", ")
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads every gate decision (SPEC 1.2) of `reader` and writes them in batches of `batch` records,
/// as [`ingest_reader`] does for attempts: same framing, same problem lines
/// (`FILE:LINE: field: reason`, or `FILE:LINE: conflict: job J decision at T differs in F; the first
/// row stays`).
///
/// `source` names the input in rejects and messages. `progress` is called after each batch with
/// the bytes read so far. Errors: [`Error::Input`] when the input cannot be read (the batches
/// already committed stay), or a storage error.
pub fn ingest_decisions_reader<R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    mut progress: impl FnMut(u64),
) -> Result<IngestReport> {
    let mut report = IngestReport::default();
    let mut records = decision_reader(source, reader, format);
    let mut pending: Vec<IncomingDecision> = Vec::with_capacity(batch);
    let mut lines: Vec<u64> = Vec::with_capacity(batch);
    loop {
        let next = records.next();
        let done = next.is_none();
        match next {
            Some(Ok(Framed::Record { line, raw, record })) => {
                lines.push(line);
                pending.push(IncomingDecision::Decision {
                    source: source.to_string(),
                    line,
                    raw,
                    decision: record,
                });
            }
            Some(Ok(Framed::Reject(r))) => {
                lines.push(r.line);
                pending.push(IncomingDecision::Reject(r));
            }
            Some(Err(error)) => {
                flush_decisions(ledger, source, &mut pending, &mut lines, &mut report)?;
                return Err(Error::Input {
                    source_name: source.to_string(),
                    error,
                });
            }
            None => {}
        }
        if pending.len() >= batch || (done && !pending.is_empty()) {
            flush_decisions(ledger, source, &mut pending, &mut lines, &mut report)?;
            progress(records.bytes_read());
        }
        if done {
            return Ok(report);
        }
    }
}

fn flush_decisions(
    ledger: &Ledger,
    source: &str,
    pending: &mut Vec<IncomingDecision>,
    lines: &mut Vec<u64>,
    report: &mut IngestReport,
) -> Result<()> {
    let keys: Vec<Option<(String, i64)>> = pending
        .iter()
        .map(|i| match i {
            IncomingDecision::Decision { decision, .. } => Some((decision.job_id.clone(), decision.decided_at)),
            IncomingDecision::Reject(_) => None,
        })
        .collect();
    let results = ledger.write_decisions(std::mem::take(pending))?;
    for ((result, line), key) in results.iter().zip(lines.drain(..)).zip(keys) {
        report.counters.add(result);
        match result {
            WriteResult::Rejected { field: Some(f), reason } => {
                report.problems.push(format!("{source}:{line}: {f}: {reason}"))
            }
            WriteResult::Rejected { field: None, reason } => report.problems.push(format!("{source}:{line}: {reason}")),
            WriteResult::Conflict { fields } => {
                let (job, at) = key.unwrap_or_default();
                report.problems.push(format!(
                    "{source}:{line}: conflict: job {job} decision at {} differs in {}; the first row stays",
                    format_timestamp(at),
                    fields.join(", ")
                ))
            }
            _ => {}
        }
    }
    Ok(())
}
