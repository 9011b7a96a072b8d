//! The `job_attempt` table (SPEC 3): the ledger's attempts as Arrow, seed 000's columns first.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use laneledger_store::policy::refusal::ErrorKind;
use laneledger_store::{AttemptChunk, Ledger, StoredAttempt, StoredAttemptRef, decode_attempt_ref};

use crate::error::Result;

/// Rows per Arrow batch.
pub const BATCH_ROWS: usize = 65_536;

/// `Timestamp(Microsecond, "UTC")`, the type of every timestamp column.
pub fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// `job_attempt`'s schema: job_id, idem_key, attempt_no, lane, started_at, ended_at, outcome,
/// tokens_in, tokens_out, artifact_id (seed 000), then http_status, provider_code, key_id,
/// pool_id, model, error_kind (seed 002 `error_kind`), attrs (JSON text), ingested_at.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job_id", DataType::Utf8, false),
        Field::new("idem_key", DataType::Utf8, false),
        Field::new("attempt_no", DataType::Int64, false),
        Field::new("lane", DataType::Utf8, false),
        Field::new("started_at", timestamp_type(), false),
        Field::new("ended_at", timestamp_type(), true),
        Field::new("outcome", DataType::Utf8, true),
        Field::new("tokens_in", DataType::Int64, false),
        Field::new("tokens_out", DataType::Int64, false),
        Field::new("artifact_id", DataType::Utf8, true),
        Field::new("http_status", DataType::Int64, true),
        Field::new("provider_code", DataType::Int64, true),
        Field::new("key_id", DataType::Utf8, true),
        Field::new("pool_id", DataType::Utf8, true),
        Field::new("model", DataType::Utf8, true),
        Field::new("error_kind", DataType::Utf8, true),
        Field::new("attrs", DataType::Utf8, true),
        Field::new("ingested_at", timestamp_type(), false),
    ]))
}

/// seed 002 `error_kind(http_status, provider_code)` where either is present, else `None`;
/// an absent one counts as 0, as the seed's "0 when there is none".
pub fn error_kind_of(http_status: Option<u16>, provider_code: Option<u32>) -> Option<ErrorKind> {
    if http_status.is_none() && provider_code.is_none() {
        return None;
    }
    Some(laneledger_store::policy::refusal::classify(
        u32::from(http_status.unwrap_or(0)),
        provider_code.unwrap_or(0),
    ))
}

/// Column builders for `job_attempt`.
struct Builders {
    job_id: StringBuilder,
    idem_key: StringBuilder,
    attempt_no: Int64Builder,
    lane: StringBuilder,
    started_at: TimestampMicrosecondBuilder,
    ended_at: TimestampMicrosecondBuilder,
    outcome: StringBuilder,
    tokens_in: Int64Builder,
    tokens_out: Int64Builder,
    artifact_id: StringBuilder,
    http_status: Int64Builder,
    provider_code: Int64Builder,
    key_id: StringBuilder,
    pool_id: StringBuilder,
    model: StringBuilder,
    error_kind: StringBuilder,
    attrs: StringBuilder,
    ingested_at: TimestampMicrosecondBuilder,
    rows: usize,
}

impl Builders {
    /// Builders whose fixed-width columns have room for `rows` rows before they grow.
    fn with_capacity(rows: usize) -> Self {
        let ts = || TimestampMicrosecondBuilder::with_capacity(rows).with_timezone("UTC");
        Builders {
            job_id: StringBuilder::new(),
            idem_key: StringBuilder::new(),
            attempt_no: Int64Builder::with_capacity(rows),
            lane: StringBuilder::new(),
            started_at: ts(),
            ended_at: ts(),
            outcome: StringBuilder::new(),
            tokens_in: Int64Builder::with_capacity(rows),
            tokens_out: Int64Builder::with_capacity(rows),
            artifact_id: StringBuilder::new(),
            http_status: Int64Builder::with_capacity(rows),
            provider_code: Int64Builder::with_capacity(rows),
            key_id: StringBuilder::new(),
            pool_id: StringBuilder::new(),
            model: StringBuilder::new(),
            error_kind: StringBuilder::new(),
            attrs: StringBuilder::new(),
            ingested_at: ts(),
            rows: 0,
        }
    }

    fn push(&mut self, s: StoredAttemptRef<'_>) {
        let a = &s.attempt;
        self.job_id.append_value(a.job_id);
        self.idem_key.append_value(a.idem_key);
        self.attempt_no.append_value(i64::from(a.attempt_no));
        self.lane.append_value(a.lane.as_str());
        self.started_at.append_value(a.started_at);
        self.ended_at.append_option(a.ended_at);
        self.outcome.append_option(a.outcome.map(|o| o.as_str()));
        self.tokens_in.append_value(a.tokens_in.unwrap_or(0) as i64);
        self.tokens_out.append_value(a.tokens_out.unwrap_or(0) as i64);
        self.artifact_id.append_option(a.artifact_id);
        self.http_status.append_option(a.http_status.map(i64::from));
        self.provider_code.append_option(a.provider_code.map(i64::from));
        self.key_id.append_option(a.key_id);
        self.pool_id.append_option(a.pool_id);
        self.model.append_option(a.model);
        self.error_kind
            .append_option(error_kind_of(a.http_status, a.provider_code).map(|k| k.as_str()));
        self.attrs.append_option(a.attrs);
        self.ingested_at.append_value(s.ingested_at);
        self.rows += 1;
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(self.job_id.finish()),
            Arc::new(self.idem_key.finish()),
            Arc::new(self.attempt_no.finish()),
            Arc::new(self.lane.finish()),
            Arc::new(self.started_at.finish()),
            Arc::new(self.ended_at.finish()),
            Arc::new(self.outcome.finish()),
            Arc::new(self.tokens_in.finish()),
            Arc::new(self.tokens_out.finish()),
            Arc::new(self.artifact_id.finish()),
            Arc::new(self.http_status.finish()),
            Arc::new(self.provider_code.finish()),
            Arc::new(self.key_id.finish()),
            Arc::new(self.pool_id.finish()),
            Arc::new(self.model.finish()),
            Arc::new(self.error_kind.finish()),
            Arc::new(self.attrs.finish()),
            Arc::new(self.ingested_at.finish()),
        ];
        self.rows = 0;
        Ok(RecordBatch::try_new(schema.clone(), cols).map_err(datafusion::error::DataFusionError::from)?)
    }
}

/// Accumulates attempts into `job_attempt` batches of at most [`BATCH_ROWS`] rows.
pub struct Batcher {
    schema: SchemaRef,
    builders: Builders,
    out: Vec<RecordBatch>,
}

impl Default for Batcher {
    /// A batcher with room for a full batch of [`BATCH_ROWS`] rows.
    fn default() -> Self {
        Batcher::with_capacity(BATCH_ROWS)
    }
}

impl Batcher {
    /// A batcher whose builders start with room for `rows` rows (at most [`BATCH_ROWS`]) and
    /// grow as needed: many small batchers, one a day for `export`, stay small.
    pub fn with_capacity(rows: usize) -> Self {
        Batcher {
            schema: schema(),
            builders: Builders::with_capacity(rows.min(BATCH_ROWS)),
            out: Vec::new(),
        }
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> usize {
        self.out.iter().map(RecordBatch::num_rows).sum::<usize>() + self.builders.rows
    }

    /// Adds one attempt.
    pub fn push(&mut self, s: &StoredAttempt) -> Result<()> {
        self.push_ref(s.as_ref())
    }

    /// Adds one attempt read in place ([`decode_attempt_ref`]).
    pub fn push_ref(&mut self, s: StoredAttemptRef<'_>) -> Result<()> {
        self.builders.push(s);
        if self.builders.rows == BATCH_ROWS {
            self.out.push(self.builders.finish(&self.schema)?);
        }
        Ok(())
    }

    /// The batches (at least one, possibly empty).
    pub fn finish(mut self) -> Result<Vec<RecordBatch>> {
        if self.builders.rows > 0 || self.out.is_empty() {
            self.out.push(self.builders.finish(&self.schema)?);
        }
        Ok(self.out)
    }
}

/// Converts stored attempts to `job_attempt` batches.
pub fn to_batches<'a>(rows: impl IntoIterator<Item = &'a StoredAttempt>) -> Result<Vec<RecordBatch>> {
    let mut b = Batcher::default();
    for s in rows {
        b.push(s)?;
    }
    b.finish()
}

/// Reads every attempt of the ledger, in (job_id, attempt_no) order, into `job_attempt` batches
/// of at most [`BATCH_ROWS`] rows (at least one batch, possibly empty).
///
/// This thread copies the raw values out of one redb snapshot ([`Ledger::attempt_chunks`]) while
/// one worker per core decodes them in place and builds the Arrow columns; the batches come back
/// in key order, so the table's declared order holds. Errors: the first storage or decode error.
pub fn scan(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
    let schema = schema();
    let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, AttemptChunk)>(workers * 2);
    let rx = std::sync::Mutex::new(rx);
    let mut batches: Vec<(usize, RecordBatch)> = Vec::new();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (rx, schema) = (&rx, &schema);
                scope.spawn(move || -> Result<Vec<(usize, RecordBatch)>> {
                    let mut out = Vec::new();
                    let mut failed = None;
                    loop {
                        // Take the lock only to receive, so workers decode side by side.
                        let next = rx
                            .lock()
                            .map_err(|_| crate::Error::Internal("scan channel poisoned".into()))?
                            .recv();
                        let Ok((n, chunk)) = next else { break };
                        // After an error keep draining, so the reader never blocks on a full channel.
                        if failed.is_some() {
                            continue;
                        }
                        match decode_chunk(&chunk, schema) {
                            Ok(batch) => out.push((n, batch)),
                            Err(e) => failed = Some(e),
                        }
                    }
                    failed.map_or(Ok(out), Err)
                })
            })
            .collect();
        let read = ledger.attempt_chunks(BATCH_ROWS, |n, chunk| {
            tx.send((n, chunk))
                .map_err(|_| crate::Error::Internal("every scan worker stopped".into()))
        });
        drop(tx);
        let mut first_err = read.err();
        for h in handles {
            match h.join() {
                Ok(Ok(mut out)) => batches.append(&mut out),
                Ok(Err(e)) => first_err = first_err.or(Some(e)),
                Err(_) => first_err = first_err.or(Some(crate::Error::Internal("a scan worker panicked".into()))),
            }
        }
        first_err.map_or(Ok(()), Err)
    })?;
    batches.sort_unstable_by_key(|(n, _)| *n);
    let mut out: Vec<RecordBatch> = batches.into_iter().map(|(_, b)| b).collect();
    if out.is_empty() {
        out.push(RecordBatch::new_empty(schema));
    }
    Ok(out)
}

/// One chunk of raw values as one batch.
fn decode_chunk(chunk: &AttemptChunk, schema: &SchemaRef) -> Result<RecordBatch> {
    let mut b = Builders::with_capacity(chunk.len());
    for v in chunk.values() {
        b.push(decode_attempt_ref(v)?);
    }
    b.finish(schema)
}

/// The ledger's attempts as Arrow batches ([`scan`]), kept for the write generation they were
/// read at ([`Ledger::generation`]) and read again after any commit, so an acknowledged record is
/// in the next answer. `job_attempt` and `job_rollup` share one, so a query that reads both scans
/// the ledger once.
pub struct AttemptCache {
    ledger: Ledger,
    cached: std::sync::Mutex<Option<(u64, Arc<Vec<RecordBatch>>)>>,
}

impl AttemptCache {
    /// An empty cache over `ledger`.
    pub fn new(ledger: Ledger) -> Self {
        AttemptCache {
            ledger,
            cached: std::sync::Mutex::new(None),
        }
    }

    /// The batches at the ledger's current generation (or newer), scanning when a write landed
    /// since the last scan. Concurrent callers wait for one scan instead of each making their own.
    /// Errors: [`scan`]'s.
    pub fn batches(&self) -> Result<Arc<Vec<RecordBatch>>> {
        let mut cached = self
            .cached
            .lock()
            .map_err(|_| crate::Error::Internal("attempt cache poisoned".into()))?;
        // Read the generation before the rows: a write landing meanwhile bumps it, so the entry
        // is never newer than its rows claim.
        let generation = self.ledger.generation();
        if let Some((g, b)) = cached.as_ref()
            && *g == generation
        {
            return Ok(b.clone());
        }
        let batches = Arc::new(scan(&self.ledger)?);
        *cached = Some((generation, batches.clone()));
        Ok(batches)
    }
}
