//! Ingest one input (a file or stdin) into the ledger in durable batches: attempts with
//! [`ingest_reader`], gate decisions with [`ingest_decisions_reader`], attempts another reader
//! already framed (a mapping's output, a SQLite table) with [`ingest_framed`].
//!
//! The `ingest` folder is the write path, the top of the crate: this file and [`mapping`] (a
//! router's own log, turned into attempts by a YAML mapping). It calls [`crate::storage::ledger`]
//! and may import every folder below it.

pub mod mapping;

use std::io::BufRead;

use crate::error::{Error, Result};
use crate::format::decision::{Decision, DecisionDecoder, IncomingDecision};
use crate::format::parallel::{CHUNK_BYTES, ParallelLineReader};
use crate::format::parse::{AttemptDecoder, Framed, InputFormat, LineReader, RecordDecoder};
use crate::model::record::{Attempt, Reject};
use crate::model::time::format_timestamp;
use crate::progress::Progress;
use crate::storage::ledger::{Counters, Incoming, Ledger, WriteResult};

/// Records per write transaction: each batch is one fsync'd commit. A commit's rows inside the
/// key range held (random ids) make one run: at 40,000 a run starts one tier up from 10,000's, and
/// each of its rows is merged once less (docs/storage.md), with a quarter of the commits.
pub const DEFAULT_BATCH: usize = 40_000;

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
    type Decoder: RecordDecoder<Record: Send + 'static> + 'static;
    /// What the ledger's write call takes (sent to the writing thread).
    type Incoming: Send;
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
    /// Whether [`Kind::write`] hands the records back: then a conflict's identity is formatted
    /// from them afterwards, for the conflicts only, instead of for every record beforehand.
    const HANDS_BACK: bool;
    /// One durable write transaction; the records are handed back (when the write keeps them), so
    /// that the parsing thread, which allocated them, frees them.
    fn write(ledger: &Ledger, batch: Vec<Self::Incoming>) -> Result<(Vec<WriteResult>, Vec<Self::Incoming>)>;
}

struct Attempts;
impl Kind for Attempts {
    type Decoder = AttemptDecoder;
    // Encoded on the writing thread (`Ledger::write_borrowed`): parsing is ingest's busier thread.
    type Incoming = Incoming;
    const HANDS_BACK: bool = true;
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
    fn write(ledger: &Ledger, batch: Vec<Incoming>) -> Result<(Vec<WriteResult>, Vec<Incoming>)> {
        Ok((ledger.write_borrowed(&batch)?, batch))
    }
}

struct Decisions;
impl Kind for Decisions {
    type Decoder = DecisionDecoder;
    type Incoming = IncomingDecision;
    const HANDS_BACK: bool = false;
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
    fn write(ledger: &Ledger, batch: Vec<IncomingDecision>) -> Result<(Vec<WriteResult>, Vec<IncomingDecision>)> {
        Ok((ledger.write_decisions(batch)?, Vec::new()))
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
    mut progress: impl FnMut(u64),
) -> Result<IngestReport> {
    ingest::<Attempts, R>(ledger, source, reader, format, batch, |bytes, _| progress(bytes))
}

/// [`ingest_reader`], telling `progress` the records written so far (accepted, completed,
/// duplicate, conflicting and rejected alike) after each batch commits.
pub fn ingest_reader_with_progress<R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    ingest::<Attempts, R>(ledger, source, reader, format, batch, |_, rows| progress.done(rows))
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
    mut progress: impl FnMut(u64),
) -> Result<IngestReport> {
    ingest::<Decisions, R>(ledger, source, reader, format, batch, |bytes, _| progress(bytes))
}

/// [`ingest_decisions_reader`], telling `progress` the records written so far after each batch
/// commits, as [`ingest_reader_with_progress`] does.
pub fn ingest_decisions_reader_with_progress<R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    progress: &dyn Progress,
) -> Result<IngestReport> {
    ingest::<Decisions, R>(ledger, source, reader, format, batch, |_, rows| progress.done(rows))
}

/// One batch on its way to the writing thread: the records, their line numbers, their names for
/// conflict messages (empty when the write hands the records back, [`Kind::HANDS_BACK`]), and
/// the input bytes read when it was cut (for `progress`, beside the records written).
type Batch<I> = (Vec<I>, Vec<u64>, Vec<Option<String>>, u64);
/// A batch written: its results beside its line numbers, names and bytes read, and the records
/// themselves when the write handed them back (dropped on the parsing thread).
type Written<I> = (Vec<WriteResult>, Vec<u64>, Vec<Option<String>>, u64, Vec<I>);

/// Frames `reader` and writes its records ([`ingest_feed`]): an NDJSON input decoded on
/// [`decode_threads`] threads by a [`ParallelLineReader`] when there are two or more, else on this
/// thread by a [`LineReader`].
fn ingest<K: Kind, R: BufRead>(
    ledger: &Ledger,
    source: &str,
    reader: R,
    format: InputFormat,
    batch: usize,
    progress: impl FnMut(u64, u64),
) -> Result<IngestReport> {
    match (format, decode_threads()) {
        (InputFormat::Ndjson, threads @ 2..) => {
            let records: ParallelLineReader<R, K::Decoder> =
                ParallelLineReader::new(source, reader, threads, CHUNK_BYTES);
            ingest_feed::<K, _>(ledger, source, records, batch, progress)
        }
        _ => {
            let records: LineReader<R, K::Decoder> = LineReader::new(source, reader, format);
            ingest_feed::<K, _>(ledger, source, records, batch, progress)
        }
    }
}

/// How many threads decode an input's lines: `LANELEDGER_DECODE_THREADS` when set, else one per
/// core but the one the writing thread keeps busy. 1 decodes on the framing thread: on two cores
/// the framing-and-decoding thread and the writing thread already keep both busy, and more
/// threads only add switching (measured in BENCHMARKS.md).
pub fn decode_threads() -> usize {
    std::env::var("LANELEDGER_DECODE_THREADS")
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .filter(|&t| t > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map_or(1, usize::from)
                .saturating_sub(1)
                .max(1)
        })
}

/// Where [`ingest_feed`] takes its records from: the next one (an `Err` stops the ingest) and
/// how far the input has been read, for `progress`.
trait Feed<T>: Iterator<Item = std::io::Result<Framed<T>>> {
    /// Bytes read so far (a [`LineReader`]), or records yielded so far (framed records).
    fn position(&self) -> u64;
}

impl<R: BufRead, D: RecordDecoder> Feed<D::Record> for LineReader<R, D> {
    fn position(&self) -> u64 {
        self.bytes_read()
    }
}

impl<R: BufRead, D> Feed<D::Record> for ParallelLineReader<R, D>
where
    D: RecordDecoder + 'static,
    D::Record: Send + 'static,
{
    fn position(&self) -> u64 {
        self.bytes_read()
    }
}

/// Records already framed by their source, counted as they are yielded.
struct Counted<I> {
    inner: I,
    yielded: u64,
}

impl<T, I: Iterator<Item = std::io::Result<Framed<T>>>> Iterator for Counted<I> {
    type Item = std::io::Result<Framed<T>>;
    fn next(&mut self) -> Option<Self::Item> {
        let next = self.inner.next();
        self.yielded += u64::from(next.is_some());
        next
    }
}

impl<T, I: Iterator<Item = std::io::Result<Framed<T>>>> Feed<T> for Counted<I> {
    fn position(&self) -> u64 {
        self.yielded
    }
}

/// Writes attempts that another reader already framed (a mapping's output, a SQLite table's
/// rows) in batches of `batch` records, each one durable redb commit, through the same write
/// rules and problem lines as [`ingest_reader`]: each `Framed::Record`'s `line` and `raw` are
/// what a conflict or a reject names and keeps. `progress` is called after each batch with the
/// number of records read so far.
pub fn ingest_framed(
    ledger: &Ledger,
    source: &str,
    records: impl Iterator<Item = Framed<Attempt>>,
    batch: usize,
    progress: impl FnMut(u64),
) -> Result<IngestReport> {
    try_ingest_framed(ledger, source, records.map(Ok), batch, progress)
}

/// [`ingest_framed`] for a source that can fail while it is read (a database file): the first
/// `Err` stops the ingest with [`Error::Input`] naming `source`; the batches already committed
/// stay, as with [`ingest_reader`].
pub fn try_ingest_framed(
    ledger: &Ledger,
    source: &str,
    records: impl Iterator<Item = std::io::Result<Framed<Attempt>>>,
    batch: usize,
    mut progress: impl FnMut(u64),
) -> Result<IngestReport> {
    let feed = Counted {
        inner: records,
        yielded: 0,
    };
    ingest_feed::<Attempts, _>(ledger, source, feed, batch, |read, _| progress(read))
}

/// Reads (parses) on this thread while a second thread writes (and fsyncs) the batch before, so
/// decoding and the commit overlap; batches are written one at a time, in input order, and the
/// report is built in that order as each commit returns. `progress(position, records written)`
/// is called after each commit.
fn ingest_feed<K: Kind, F: Feed<<K::Decoder as RecordDecoder>::Record>>(
    ledger: &Ledger,
    source: &str,
    mut records: F,
    batch: usize,
    mut progress: impl FnMut(u64, u64),
) -> Result<IngestReport> {
    let mut report = IngestReport::default();
    let mut written_rows = 0u64;
    // The attempt runs are merged on a second thread while the batches come; the merge under way
    // at the end is waited for and put in place (or stopped, when the ingest fails).
    let merging = ledger.merges_in_background();
    let report = std::thread::scope(|scope| {
        // At most one batch waits while one is being written: memory stays at two batches.
        let (to_writer, batches) = std::sync::mpsc::sync_channel::<Batch<K::Incoming>>(1);
        let (to_reader, written) = std::sync::mpsc::channel::<Result<Written<K::Incoming>>>();
        scope.spawn(move || {
            for (pending, lines, names, bytes) in batches {
                let result = K::write(ledger, pending).map(|(results, spent)| (results, lines, names, bytes, spent));
                let failed = result.is_err();
                if to_reader.send(result).is_err() || failed {
                    break;
                }
            }
        });
        let mut apply = |w: Result<Written<K::Incoming>>, report: &mut IngestReport| -> Result<()> {
            let (results, lines, names, bytes, spent) = w?;
            let name = |i: usize| match names.get(i) {
                Some(n) => n.clone(),
                None => spent.get(i).and_then(K::identity),
            };
            record_results(source, &results, &lines, name, report);
            drop(spent);
            written_rows += results.len() as u64;
            progress(bytes, written_rows);
            Ok(())
        };
        let mut pending: Vec<K::Incoming> = Vec::with_capacity(batch);
        let mut lines: Vec<u64> = Vec::with_capacity(batch);
        let mut input_error = None;
        let mut write_error = None;
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
                Some(Err(error)) => input_error = Some(error),
                None => {}
            }
            let last = done || input_error.is_some();
            if pending.len() >= batch || (last && !pending.is_empty()) {
                let names: Vec<Option<String>> = match K::HANDS_BACK {
                    true => Vec::new(),
                    false => pending.iter().map(K::identity).collect(),
                };
                // The next batch starts at full capacity: `take` would leave an empty Vec to grow
                // (and move every record again) by doubling.
                let b = (
                    std::mem::replace(&mut pending, Vec::with_capacity(batch)),
                    std::mem::replace(&mut lines, Vec::with_capacity(batch)),
                    names,
                    records.position(),
                );
                // A closed channel means the writer stopped on an error, which `written` holds.
                if to_writer.send(b).is_err() {
                    break;
                }
                while let Ok(w) = written.try_recv() {
                    if let Err(e) = apply(w, &mut report) {
                        write_error = Some(e);
                        break;
                    }
                }
                if write_error.is_some() {
                    break;
                }
            }
            if last {
                break;
            }
        }
        // Wait for every batch sent to be committed (or for the writer's error).
        drop(to_writer);
        for w in written {
            if write_error.is_none()
                && let Err(e) = apply(w, &mut report)
            {
                write_error = Some(e);
            }
        }
        if let Some(e) = write_error {
            return Err(e);
        }
        if let Some(error) = input_error {
            return Err(Error::Input {
                source_name: source.to_string(),
                error,
            });
        }
        Ok(report)
    })?;
    merging.settle()?;
    Ok(report)
}

/// Adds one batch's results to `report`, with a problem line for each reject and conflict;
/// `name(i)` is the identity of the batch's record `i` (`job j1 attempt 2`).
fn record_results(
    source: &str,
    results: &[WriteResult],
    lines: &[u64],
    name: impl Fn(usize) -> Option<String>,
    report: &mut IngestReport,
) {
    for (i, (result, line)) in results.iter().zip(lines).enumerate() {
        report.counters.add(result);
        match result {
            WriteResult::Rejected { field: Some(f), reason } => {
                report.problems.push(format!("{source}:{line}: {f}: {reason}"))
            }
            WriteResult::Rejected { field: None, reason } => report.problems.push(format!("{source}:{line}: {reason}")),
            WriteResult::Conflict { fields } => report.problems.push(format!(
                "{source}:{line}: conflict: {} differs in {}; the first row stays",
                name(i).unwrap_or_default(),
                fields.join(", ")
            )),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three commits' worth of NDJSON with every kind of result: new attempts, completions,
    /// duplicate deliveries, conflicts, rejects, blank lines.
    fn input() -> String {
        let mut text = String::new();
        for i in 0..900 {
            let job = format!("j{}", i % 300);
            let line = match i % 9 {
                0 => "{not json".to_string(),
                1 => String::new(),
                _ => format!(
                    r#"{{"job_id":"{job}","attempt_no":{},"idem_key":"k-{job}","lane":"free","started_at":"2026-05-01T10:00:00Z"{}}}"#,
                    1 + (i / 300) % 2,
                    match i % 7 {
                        0 => r#","ended_at":"2026-05-01T10:00:02Z","outcome":"ok""#,
                        1 => r#","tokens_in":7"#,
                        6 => r#","tokens_in":9"#,
                        _ => "",
                    }
                ),
            };
            text.push_str(&line);
            text.push('\n');
        }
        text
    }

    /// What one ingest through `records` did: its totals and problem lines, the rows it left
    /// (record and append order), and the chain's entries and records. The times of arrival,
    /// hashed into the chain, differ between two ingests; the rest must not.
    type Outcome = (Counters, Vec<String>, Vec<(Attempt, u64)>, (u64, u64, u64));

    fn ingest_through<F: Feed<Attempt>>(records: impl FnOnce() -> F) -> Outcome {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
        let report = ingest_feed::<Attempts, _>(&ledger, "in.ndjson", records(), 100, |_, _| {}).unwrap();
        let mut rows = Vec::new();
        ledger.for_each_attempt(|a| rows.push((a.attempt, a.seq))).unwrap();
        let v = ledger.verify().unwrap();
        (
            report.counters,
            report.problems,
            rows,
            (v.entries, v.records, v.problems),
        )
    }

    #[test]
    fn an_input_decoded_on_worker_threads_writes_what_one_thread_writes() {
        let text = input();
        let serial = ingest_through(|| {
            LineReader::<&[u8], AttemptDecoder>::new("in.ndjson", text.as_bytes(), InputFormat::Ndjson)
        });
        let totals = Counters {
            accepted: 534,
            completed: 47,
            duplicates: 95,
            conflicts: 24,
            rejected: 100,
        };
        assert_eq!(
            (serial.0, serial.1.len(), serial.2.len(), serial.3),
            (totals, 124, 534, (705, 658, 0))
        );
        assert_eq!(
            serial.1[1],
            "in.ndjson:10: bad JSON: key must be a string at line 1 column 2"
        );
        assert_eq!(
            serial.1.iter().find(|p| p.contains("conflict")).map(String::as_str),
            Some("in.ndjson:609: conflict: job j8 attempt 1 differs in tokens_in; the first row stays")
        );
        for (threads, chunk) in [(2, 64), (3, 4096)] {
            let parallel = ingest_through(|| {
                ParallelLineReader::<&[u8], AttemptDecoder>::new("in.ndjson", text.as_bytes(), threads, chunk)
            });
            assert_eq!(parallel, serial, "{threads} threads, {chunk}-byte chunks");
        }
    }
}
