//! A mapped input written to the ledger: source records are mapped a chunk at a time and handed
//! to the ingest pipeline, so a large export streams through in bounded memory.
//!
//! Derived attempt numbers read the job's attempts already in the ledger. The pipeline writes a
//! chunk while the next is mapped, so the attempts of this input not yet committed are kept
//! beside the ledger's ([`Overlay`]) and the numbers are those one whole-file pass would give.

use std::collections::HashMap;

use super::engine::{PriorAttempt, PriorAttempts, SourceRecord};
use super::source::Item;
use super::{Mapping, attempt_key};
use crate::error::Result;
use crate::format::parse::Framed;
use crate::ingest::{IngestReport, try_ingest_framed};
use crate::model::record::Attempt;
use crate::storage::ledger::Ledger;

/// Source records mapped per chunk.
const CHUNK: usize = 4096;

/// What a mapped ingest did, beyond the write results.
#[derive(Debug, Default, Clone)]
pub struct MappedReport {
    /// The write results and problems, as for a native input.
    pub ingest: IngestReport,
    /// Records the mapping's filter left out.
    pub skipped: u64,
    /// Attempts whose idempotency key is the declared fallback.
    pub idem_fallback: u64,
}

/// The ledger's attempts of a job, plus those this input mapped and has not yet seen committed.
struct Overlay<'a> {
    ledger: Option<&'a dyn PriorAttempts>,
    mapped: HashMap<String, Vec<PriorAttempt>>,
}

impl PriorAttempts for Overlay<'_> {
    fn attempts_of(&self, job_id: &str) -> Vec<PriorAttempt> {
        let mut out = self.ledger.map(|l| l.attempts_of(job_id)).unwrap_or_default();
        if let Some(mine) = self.mapped.get(job_id) {
            for p in mine {
                if !out.iter().any(|o| o.attempt_no == p.attempt_no) {
                    out.push(p.clone());
                }
            }
        }
        out
    }
}

/// Maps `records` a chunk at a time (see the module doc).
pub struct MappedFeed<'a, I: Iterator<Item = std::io::Result<Item>>> {
    mapping: &'a Mapping,
    source: String,
    records: I,
    overlay: Overlay<'a>,
    ready: std::vec::IntoIter<Framed<Attempt>>,
    failed: Option<std::io::Error>,
    /// Filled as chunks are mapped.
    pub skipped: u64,
    /// Filled as chunks are mapped.
    pub idem_fallback: u64,
    /// Attempts mapped, and how often each field was found.
    pub found: std::collections::BTreeMap<&'static str, u64>,
    /// Attempts mapped (records and rejects).
    pub attempts: u64,
}

impl<'a, I: Iterator<Item = std::io::Result<Item>>> MappedFeed<'a, I> {
    /// Maps `records` of input `source`; `prior` is the ledger (or `None` for a dry run on no
    /// ledger).
    pub fn new(mapping: &'a Mapping, source: &str, records: I, prior: Option<&'a dyn PriorAttempts>) -> Self {
        MappedFeed {
            mapping,
            source: source.to_string(),
            records,
            overlay: Overlay {
                ledger: prior,
                mapped: HashMap::new(),
            },
            ready: Vec::new().into_iter(),
            failed: None,
            skipped: 0,
            idem_fallback: 0,
            found: Default::default(),
            attempts: 0,
        }
    }

    /// Maps the next chunk into `ready`; false at the end of input.
    fn fill(&mut self) -> bool {
        let mut chunk: Vec<SourceRecord> = Vec::with_capacity(CHUNK);
        let mut out: Vec<Framed<Attempt>> = Vec::new();
        let mut framing_rejects: Vec<Framed<Attempt>> = Vec::new();
        for item in self.records.by_ref() {
            match item {
                Ok(Ok(r)) => chunk.push(r),
                Ok(Err(reject)) => framing_rejects.push(Framed::Reject(reject)),
                Err(e) => {
                    self.failed = Some(e);
                    break;
                }
            }
            if chunk.len() >= CHUNK {
                break;
            }
        }
        if chunk.is_empty() && framing_rejects.is_empty() {
            return false;
        }
        let mapped = self.mapping.map(&self.source, chunk, &self.overlay);
        self.skipped += mapped.skipped;
        self.idem_fallback += mapped.idem_fallback;
        self.attempts += mapped.attempts;
        for (k, v) in &mapped.found {
            *self.found.entry(k).or_default() += v;
        }
        if self.mapping.derives_attempt_numbers() {
            for f in &mapped.framed {
                if let Framed::Record { record: a, .. } = f {
                    self.overlay
                        .mapped
                        .entry(a.job_id.clone())
                        .or_default()
                        .push(PriorAttempt {
                            attempt_no: a.attempt_no,
                            started_at: a.started_at,
                            attempt_key: a.attrs.as_deref().and_then(attempt_key),
                        });
                }
            }
        }
        // Framing rejects (a line that is not JSON) keep their place among the mapped records,
        // by line: a source's lines only grow.
        let mut mapped_iter = mapped.framed.into_iter().peekable();
        for reject in framing_rejects {
            let line = framed_line(&reject);
            while let Some(m) = mapped_iter.next_if(|m| framed_line(m) < line) {
                out.push(m);
            }
            out.push(reject);
        }
        out.extend(mapped_iter);
        self.ready = out.into_iter();
        true
    }
}

fn framed_line(f: &Framed<Attempt>) -> u64 {
    match f {
        Framed::Record { line, .. } => *line,
        Framed::Reject(r) => r.line,
    }
}

impl<I: Iterator<Item = std::io::Result<Item>>> Iterator for MappedFeed<'_, I> {
    type Item = std::io::Result<Framed<Attempt>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(f) = self.ready.next() {
                return Some(Ok(f));
            }
            if let Some(e) = self.failed.take() {
                return Some(Err(e));
            }
            if !self.fill() {
                return None;
            }
        }
    }
}

/// Maps every record of one input and writes the attempts in batches of `batch`, each one
/// durable commit, by the same write rules as a native input; `progress` gets records done.
///
/// Errors: [`crate::Error::Input`] when the input cannot be read (committed batches stay), or a
/// storage error.
pub fn ingest_mapped(
    ledger: &Ledger,
    mapping: &Mapping,
    source: &str,
    records: impl Iterator<Item = std::io::Result<Item>>,
    batch: usize,
    progress: impl FnMut(u64),
) -> Result<MappedReport> {
    let mut feed = MappedFeed::new(mapping, source, records, Some(ledger));
    let ingest = try_ingest_framed(ledger, source, &mut feed, batch, progress)?;
    Ok(MappedReport {
        ingest,
        skipped: feed.skipped,
        idem_fallback: feed.idem_fallback,
    })
}
