//! The `job_attempt` table (SPEC 3): the ledger's attempts as Arrow, seed 000's columns first.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int64Builder, RecordBatch, RecordBatchOptions, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use laneledger_store::{AttemptChanges, AttemptChunk, Ledger, StoredAttempt, StoredAttemptRef, decode_attempt_ref};

use crate::error::Result;
use crate::tables::labels::{LabelBuilder, labels_type};

/// The most rows per Arrow batch a scan decodes and builds (the attempt cache holds them cut
/// into chunks of [`CHUNK_ROWS`]).
pub const BATCH_ROWS: usize = 65_536;

/// How many columns `job_attempt` has.
pub const COLUMNS: usize = 18;

/// The columns `job_rollup` and `idem_artifacts` are computed from: job_id, idem_key, attempt_no,
/// lane, tokens_in, tokens_out, artifact_id (indexes into [`schema()`]).
pub const ROLLUP_COLUMNS: [usize; 7] = [0, 1, 2, 3, 7, 8, 9];

/// `batch`'s column `name` (a `job_attempt` batch, whole or projected).
/// Errors: [`crate::Error::Internal`] when the batch has no such column.
pub fn column<'b>(batch: &'b RecordBatch, name: &str) -> Result<&'b ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| crate::Error::Internal(format!("job_attempt batch without {name}")))
}

/// The key columns job_id and attempt_no, which every cached projection keeps.
const KEY_COLUMNS: [usize; 2] = [0, 2];

/// The columns a second scan at one write generation reads: every one but `attrs` (free JSON
/// text, read only when asked for). The weekly review reads 15 of the 18 columns over a dozen
/// queries, each asking for a few; without this each new set of columns is another scan of the
/// whole ledger (about 2.5 s at 10 M attempts).
pub const WIDE_COLUMNS: [usize; 17] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 17];

/// `Timestamp(Microsecond, "UTC")`, the type of every timestamp column.
pub fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// `job_attempt`'s schema: job_id, idem_key, attempt_no, lane, started_at, ended_at, outcome,
/// tokens_in, tokens_out, artifact_id (seed 000), then http_status, provider_code, key_id,
/// pool_id, model, error_kind (seed 002 `error_kind`), attrs (JSON text), ingested_at. The six
/// columns of few distinct values (lane, outcome, key_id, pool_id, model, error_kind) are
/// dictionaries ([`labels_type`]): SQL reads them as text, and the attempts held in memory
/// keep a 4-byte key a row for each instead of a copy of the text.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job_id", DataType::Utf8, false),
        Field::new("idem_key", DataType::Utf8, false),
        Field::new("attempt_no", DataType::Int64, false),
        Field::new("lane", labels_type(), false),
        Field::new("started_at", timestamp_type(), false),
        Field::new("ended_at", timestamp_type(), true),
        Field::new("outcome", labels_type(), true),
        Field::new("tokens_in", DataType::Int64, false),
        Field::new("tokens_out", DataType::Int64, false),
        Field::new("artifact_id", DataType::Utf8, true),
        Field::new("http_status", DataType::Int64, true),
        Field::new("provider_code", DataType::Int64, true),
        Field::new("key_id", labels_type(), true),
        Field::new("pool_id", labels_type(), true),
        Field::new("model", labels_type(), true),
        Field::new("error_kind", labels_type(), true),
        Field::new("attrs", DataType::Utf8, true),
        Field::new("ingested_at", timestamp_type(), false),
    ]))
}

/// [`schema()`] with every text column plain `Utf8`: the columns of the files `export` and
/// `retain --archive` write, the same whichever version of laneledger wrote them.
pub fn plain_schema() -> SchemaRef {
    let fields: Vec<Field> = schema()
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Dictionary(_, v) => f.as_ref().clone().with_data_type(v.as_ref().clone()),
            _ => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new(fields))
}

/// `batch` (of [`schema()`]) with its dictionary columns written out as plain text
/// ([`plain_schema`]).
pub fn plain(batch: &RecordBatch) -> Result<RecordBatch> {
    let plain = plain_schema();
    let columns = batch
        .columns()
        .iter()
        .zip(plain.fields())
        .map(|(c, f)| datafusion::arrow::compute::cast(c, f.data_type()))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(datafusion::error::DataFusionError::from)?;
    Ok(RecordBatch::try_new(plain, columns).map_err(datafusion::error::DataFusionError::from)?)
}

pub use laneledger_store::policy::refusal::error_kind_of;

/// Column builders for `job_attempt`.
struct Builders {
    job_id: StringBuilder,
    idem_key: StringBuilder,
    attempt_no: Int64Builder,
    lane: LabelBuilder,
    started_at: TimestampMicrosecondBuilder,
    ended_at: TimestampMicrosecondBuilder,
    outcome: LabelBuilder,
    tokens_in: Int64Builder,
    tokens_out: Int64Builder,
    artifact_id: StringBuilder,
    http_status: Int64Builder,
    provider_code: Int64Builder,
    key_id: LabelBuilder,
    pool_id: LabelBuilder,
    model: LabelBuilder,
    error_kind: LabelBuilder,
    attrs: StringBuilder,
    ingested_at: TimestampMicrosecondBuilder,
    rows: usize,
    /// Which of `schema()`'s columns are built; the others stay empty.
    want: [bool; COLUMNS],
}

impl Builders {
    /// Builders for every column, whose fixed-width columns have room for `rows` rows.
    fn with_capacity(rows: usize) -> Self {
        Self::for_columns(rows, [true; COLUMNS])
    }

    /// Builders that fill only the columns `want` marks; the fixed-width ones have room for `rows`.
    fn for_columns(rows: usize, want: [bool; COLUMNS]) -> Self {
        let cap = |i: usize| if want[i] { rows } else { 0 };
        let ts = |i: usize| TimestampMicrosecondBuilder::with_capacity(cap(i)).with_timezone("UTC");
        let text = |i: usize| StringBuilder::with_capacity(cap(i), cap(i) * 12);
        let label = |i: usize| LabelBuilder::with_capacity(cap(i));
        Builders {
            job_id: text(0),
            idem_key: text(1),
            attempt_no: Int64Builder::with_capacity(cap(2)),
            lane: label(3),
            started_at: ts(4),
            ended_at: ts(5),
            outcome: label(6),
            tokens_in: Int64Builder::with_capacity(cap(7)),
            tokens_out: Int64Builder::with_capacity(cap(8)),
            artifact_id: text(9),
            http_status: Int64Builder::with_capacity(cap(10)),
            provider_code: Int64Builder::with_capacity(cap(11)),
            key_id: label(12),
            pool_id: label(13),
            model: label(14),
            error_kind: label(15),
            attrs: text(16),
            ingested_at: ts(17),
            rows: 0,
            want,
        }
    }

    fn push(&mut self, s: StoredAttemptRef<'_>) {
        let a = &s.attempt;
        let w = self.want;
        if w[0] {
            self.job_id.append_value(a.job_id);
        }
        if w[1] {
            self.idem_key.append_value(a.idem_key);
        }
        if w[2] {
            self.attempt_no.append_value(i64::from(a.attempt_no));
        }
        if w[3] {
            self.lane.append_static(a.lane.as_str());
        }
        if w[4] {
            self.started_at.append_value(a.started_at);
        }
        if w[5] {
            self.ended_at.append_option(a.ended_at);
        }
        if w[6] {
            self.outcome.append_static_option(a.outcome.map(|o| o.as_str()));
        }
        if w[7] {
            self.tokens_in.append_value(a.tokens_in.unwrap_or(0) as i64);
        }
        if w[8] {
            self.tokens_out.append_value(a.tokens_out.unwrap_or(0) as i64);
        }
        if w[9] {
            self.artifact_id.append_option(a.artifact_id);
        }
        if w[10] {
            self.http_status.append_option(a.http_status.map(i64::from));
        }
        if w[11] {
            self.provider_code.append_option(a.provider_code.map(i64::from));
        }
        if w[12] {
            self.key_id.append_option(a.key_id);
        }
        if w[13] {
            self.pool_id.append_option(a.pool_id);
        }
        if w[14] {
            self.model.append_option(a.model);
        }
        if w[15] {
            self.error_kind
                .append_static_option(error_kind_of(a.http_status, a.provider_code).map(|k| k.as_str()));
        }
        if w[16] {
            self.attrs.append_option(a.attrs);
        }
        if w[17] {
            self.ingested_at.append_value(s.ingested_at);
        }
        self.rows += 1;
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let all: Vec<usize> = (0..COLUMNS).collect();
        self.finish_columns(&all, schema)
    }

    /// The rows pushed since the last finish as one batch of `columns` (indexes into
    /// `schema()`, in that order; each must be wanted), whose schema is `schema`.
    fn finish_columns(&mut self, columns: &[usize], schema: &SchemaRef) -> Result<RecordBatch> {
        let rows = self.rows;
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
        let picked: Vec<ArrayRef> = columns.iter().map(|&c| cols[c].clone()).collect();
        let options = RecordBatchOptions::new().with_row_count(Some(rows));
        Ok(RecordBatch::try_new_with_options(schema.clone(), picked, &options)
            .map_err(datafusion::error::DataFusionError::from)?)
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
/// of at most [`BATCH_ROWS`] rows (at least one batch, possibly empty): [`scan_columns`] with
/// every column.
pub fn scan(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let all: Vec<usize> = (0..COLUMNS).collect();
    scan_columns(ledger, &all)
}

/// Reads every attempt of the ledger, in (job_id, attempt_no) order, into batches of `columns`
/// only (indexes into [`schema()`], in the order given; the batch schema is that projection), of
/// at most [`BATCH_ROWS`] rows (at least one batch, possibly empty). The values are decoded
/// whole, but only the columns asked for are built, so a query of a few columns holds a few
/// columns in memory.
///
/// One thread per core copies the packed blocks of a key range out of one redb snapshot
/// ([`Ledger::attempt_snapshot`]), merging rows where runs overlap, while one worker per core
/// unpacks and decodes them in place and builds the Arrow columns; the batches come back in key
/// order, so the table's declared order holds. Errors: the first storage or decode error,
/// or [`crate::Error::Internal`] for a column index past [`COLUMNS`].
pub fn scan_columns(ledger: &Ledger, columns: &[usize]) -> Result<Vec<RecordBatch>> {
    Ok(scan_columns_at(ledger, columns)?.0)
}

/// [`scan_columns`], with the chain position of the snapshot read (for
/// [`Ledger::attempt_changes_since`]).
pub fn scan_columns_at(ledger: &Ledger, columns: &[usize]) -> Result<(Vec<RecordBatch>, u64)> {
    if let Some(&bad) = columns.iter().find(|&&c| c >= COLUMNS) {
        return Err(crate::Error::Internal(format!("job_attempt has no column {bad}")));
    }
    let mut want = [false; COLUMNS];
    for &c in columns {
        want[c] = true;
    }
    let schema: SchemaRef = Arc::new(
        schema()
            .project(columns)
            .map_err(datafusion::error::DataFusionError::from)?,
    );
    let workers = crate::engine::parallel::workers();
    // Key ranges for the readers: more than there are readers, so that one that finishes early
    // takes another.
    let snapshot = ledger.attempt_snapshot(workers * SCAN_PARTS_PER_READER)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<((usize, usize), AttemptChunk)>(workers * 2);
    let rx = std::sync::Mutex::new(rx);
    // Decoded chunks go back to the readers to be filled again (see `attempt_chunks_reusing`).
    let (spare_tx, spare_rx) = std::sync::mpsc::channel::<AttemptChunk>();
    let spare_rx = std::sync::Mutex::new(spare_rx);
    let mut batches: Vec<((usize, usize), RecordBatch)> = Vec::new();
    std::thread::scope(|scope| -> Result<()> {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                let (rx, schema, spare_tx) = (&rx, &schema, spare_tx.clone());
                scope.spawn(move || -> Result<Vec<((usize, usize), RecordBatch)>> {
                    let mut out = Vec::new();
                    let mut failed = None;
                    loop {
                        // Take the lock only to receive, so workers decode side by side.
                        let next = rx
                            .lock()
                            .map_err(|_| crate::Error::Internal("scan channel poisoned".into()))?
                            .recv();
                        let Ok((n, mut chunk)) = next else { break };
                        // After an error keep draining, so the readers never block on a full channel.
                        if failed.is_some() {
                            continue;
                        }
                        match decode_chunk(&mut chunk, columns, want, schema) {
                            Ok(batch) => out.push((n, batch)),
                            Err(e) => failed = Some(e),
                        }
                        // The readers may have finished; then the buffer is simply dropped.
                        let _ = spare_tx.send(chunk);
                    }
                    failed.map_or(Ok(out), Err)
                })
            })
            .collect();
        drop(spare_tx);
        // Each reader takes the next key range until none is left: with random ids each range's
        // blocks are unpacked and merged by the thread that reads it, the scan's costliest part.
        let parts: Vec<usize> = (0..snapshot.parts()).collect();
        let read = crate::engine::parallel::map(&parts, |&part| {
            snapshot.chunks(
                part,
                BATCH_ROWS,
                || spare_rx.lock().ok()?.try_recv().ok(),
                |n, chunk| {
                    tx.send(((part, n), chunk))
                        .map_err(|_| crate::Error::Internal("every scan worker stopped".into()))
                },
            )
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
    Ok((out, snapshot.position()))
}

/// Key ranges a scan is cut into per reading thread ([`scan_columns_at`]).
const SCAN_PARTS_PER_READER: usize = 4;

/// One chunk of values, unpacked here, as one batch of `columns`.
fn decode_chunk(
    chunk: &mut AttemptChunk,
    columns: &[usize],
    want: [bool; COLUMNS],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    chunk.unpack()?;
    let mut b = Builders::for_columns(chunk.len(), want);
    for v in chunk.values() {
        b.push(decode_attempt_ref(v)?);
    }
    b.finish_columns(columns, schema)
}

/// The ledger's attempts as Arrow columns ([`scan_columns`]), kept for the write generation they
/// were read at ([`Ledger::generation`]) and brought up to date after any commit, so an
/// acknowledged record is in the next answer. After a write only the attempts it inserted or
/// completed are read from the ledger ([`Ledger::attempt_changes_since`]) and merged into the
/// columns held, in key order; everything is read again only after a retention sweep or a write
/// too large to merge. Only the columns queries asked for are built and kept (plus the key
/// columns job_id and attempt_no); `job_attempt`, `job_rollup` and `idem_artifacts` share one.
pub struct AttemptCache {
    ledger: Ledger,
    cached: std::sync::Mutex<Cached>,
    /// Scans of the ledger made so far.
    scans: std::sync::atomic::AtomicU64,
    /// Writes merged into the columns held so far, instead of a scan.
    merges: std::sync::atomic::AtomicU64,
}

/// The columns read at one generation: each column's arrays, one per chunk of rows, in
/// (job_id, attempt_no) order across the chunks.
#[derive(Default)]
struct Cached {
    generation: Option<u64>,
    /// The chain position of the snapshot the columns hold ([`Ledger::attempt_changes_since`]).
    position: u64,
    /// Rows per chunk.
    chunk_rows: Vec<usize>,
    /// Each chunk's id: new whenever the chunk is built or rebuilt ([`next_chunk_id`]), so a
    /// table computed chunk by chunk knows which chunks it has seen ([`AttemptCache::chunks`]).
    chunk_ids: Vec<u64>,
    columns: std::collections::BTreeMap<usize, Vec<ArrayRef>>,
    /// Which reading of the ledger the columns hold: new whenever they are read whole again
    /// ([`Cached::keep`] into nothing held), kept across merges. A [`Cursor`] names it.
    epoch: u64,
    /// The rows merged into the columns in this epoch, oldest first, at most [`LOG_ROWS`]: what a
    /// table kept up to date by the rows a write changed reads ([`AttemptCache::columns_since`]).
    log: std::collections::VecDeque<StoredAttempt>,
    /// How many rows of this epoch's log were dropped from its front.
    log_dropped: usize,
}

/// The most merged rows [`Cached`] keeps in its log; a table further behind is computed again.
const LOG_ROWS: usize = 1 << 16;

/// Where a table computed from the attempt cache stands: the epoch of the columns it read and
/// how many merged rows of that epoch it has taken ([`AttemptCache::columns_since`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    epoch: u64,
    rows: usize,
}

/// An id no chunk of this process has had.
fn next_chunk_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Rows per chunk of the cache: the scan's batches are cut into slices of this many rows (no
/// copy). A write rebuilds the chunks it falls into, and the tables kept by chunk
/// ([`crate::derived::kept::ByJob`]) build those chunks' rows again: a chunk small enough for that
/// to be cheap after every write, and large enough that what every read does per chunk stays small
/// (chunks of 8,192 made the review after a write no faster, of 4,096 slower; BENCHMARKS.md).
pub const CHUNK_ROWS: usize = 16_384;

/// A chunk that grows past this many rows by merges is cut into chunks of [`CHUNK_ROWS`].
const CHUNK_ROWS_MAX: usize = 2 * CHUNK_ROWS;

/// `batches` in order, each longer than [`CHUNK_ROWS`] cut into slices of that many rows (the
/// last shorter), the others as they are.
fn chunked(batches: Vec<RecordBatch>) -> Vec<RecordBatch> {
    let mut out = Vec::with_capacity(batches.iter().map(|b| b.num_rows().div_ceil(CHUNK_ROWS).max(1)).sum());
    for b in batches {
        let n = b.num_rows();
        match n <= CHUNK_ROWS {
            true => out.push(b),
            false => out.extend((0..n).step_by(CHUNK_ROWS).map(|at| b.slice(at, CHUNK_ROWS.min(n - at)))),
        }
    }
    out
}

impl Cached {
    /// Takes `batches` (of `columns`, in that order), read at chain position `position`, as
    /// this generation's arrays of those columns. When columns are held, `batches` must hold their
    /// rows in the same chunks (a scan at the held position): the chunks keep their ids, so that
    /// the tables kept by chunk id keep what they built from them.
    fn keep(&mut self, columns: &[usize], batches: &[RecordBatch], position: u64) {
        if self.columns.is_empty() {
            // A new reading: merges logged before do not lead to these rows.
            self.epoch = next_chunk_id();
            self.log.clear();
            self.log_dropped = 0;
            self.chunk_ids = batches.iter().map(|_| next_chunk_id()).collect();
        }
        self.position = position;
        self.chunk_rows = batches.iter().map(RecordBatch::num_rows).collect();
        for (i, &c) in columns.iter().enumerate() {
            self.columns
                .insert(c, batches.iter().map(|b| b.column(i).clone()).collect());
        }
    }

    /// Adds the columns of `batches` (of `columns`, in that order) that are not held, cut into
    /// the held chunks: `batches` hold the same rows in the same order (a scan at the held
    /// position), chunked otherwise. Errors: [`crate::Error::Internal`] when the row counts
    /// differ.
    fn adopt(&mut self, columns: &[usize], batches: &[RecordBatch]) -> Result<()> {
        use datafusion::arrow::compute::concat;
        let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if total != self.rows() {
            return Err(crate::Error::Internal(format!(
                "a scan at the held position read {total} attempts, not {}",
                self.rows()
            )));
        }
        for (i, &c) in columns.iter().enumerate() {
            if self.columns.contains_key(&c) {
                continue;
            }
            let mut arrays = Vec::with_capacity(self.chunk_rows.len());
            // (batch, row) where the next chunk starts.
            let (mut b, mut at) = (0, 0);
            for &rows in &self.chunk_rows {
                let mut pieces: Vec<ArrayRef> = Vec::new();
                let mut left = rows;
                while left > 0 {
                    let batch = &batches[b];
                    let take = left.min(batch.num_rows() - at);
                    pieces.push(batch.column(i).slice(at, take));
                    (at, left) = (at + take, left - take);
                    if at == batch.num_rows() {
                        (b, at) = (b + 1, 0);
                    }
                }
                arrays.push(match pieces.len() {
                    1 => pieces.remove(0),
                    _ => {
                        let refs: Vec<&dyn datafusion::arrow::array::Array> =
                            pieces.iter().map(|a| a.as_ref()).collect();
                        concat(&refs).map_err(datafusion::error::DataFusionError::from)?
                    }
                });
            }
            self.columns.insert(c, arrays);
        }
        Ok(())
    }

    /// Rows held.
    fn rows(&self) -> usize {
        self.chunk_rows.iter().sum()
    }

    /// The key (job_id, attempt_no) of row `i` of chunk `k`.
    fn key(&self, k: usize, i: usize) -> Result<(&str, i64)> {
        key_at(&self.columns[&KEY_COLUMNS[0]][k], &self.columns[&KEY_COLUMNS[1]][k], i)
    }

    /// Merges `rows` (the rows in force of attempts a write inserted or completed, in
    /// (job_id, attempt_no) order, each once) into the columns held: a row whose key is held
    /// replaces it, any other is inserted at its place in key order. Only the chunks the rows
    /// fall into are rebuilt; a chunk grown past [`CHUNK_ROWS_MAX`] is cut.
    fn merge(&mut self, rows: &[StoredAttempt]) -> Result<()> {
        use datafusion::arrow::compute::interleave;
        let held: Vec<usize> = self.columns.keys().copied().collect();
        let mut want = [false; COLUMNS];
        for &c in &held {
            want[c] = true;
        }
        let delta_schema: SchemaRef = Arc::new(
            schema()
                .project(&held)
                .map_err(datafusion::error::DataFusionError::from)?,
        );
        let mut b = Builders::for_columns(rows.len(), want);
        for r in rows {
            b.push(r.as_ref());
        }
        let delta = b.finish_columns(&held, &delta_schema)?;
        let at = |c: usize| held.iter().position(|&h| h == c).expect("key columns are held");
        let (delta_jobs, delta_nos) = (delta.column(at(KEY_COLUMNS[0])), delta.column(at(KEY_COLUMNS[1])));
        let delta_key = |d: usize| key_at(delta_jobs, delta_nos, d);
        let chunks = self.chunk_rows.len();
        let mut d = 0;
        let mut k = 0;
        while d < rows.len() {
            // The first chunk whose last key is at or past the row's, or the last chunk.
            while k + 1 < chunks && self.key(k, self.chunk_rows[k] - 1)? < delta_key(d)? {
                k += 1;
            }
            let first = d;
            while d < rows.len() && (k + 1 == chunks || delta_key(d)? <= self.key(k, self.chunk_rows[k] - 1)?) {
                d += 1;
            }
            // Row order of the rebuilt chunk: (0, i) is the chunk's row i, (1, d) the delta's row d.
            let len = self.chunk_rows[k];
            let mut order: Vec<(usize, usize)> = Vec::with_capacity(len + d - first);
            let (mut i, mut j) = (0, first);
            while i < len || j < d {
                let take_old = j == d || (i < len && self.key(k, i)? < delta_key(j)?);
                if take_old {
                    order.push((0, i));
                    i += 1;
                } else {
                    if i < len && self.key(k, i)? == delta_key(j)? {
                        i += 1;
                    }
                    order.push((1, j));
                    j += 1;
                }
            }
            for (ci, c) in held.iter().enumerate() {
                let arrays = self.columns.get_mut(c).expect("held");
                let merged = interleave(&[arrays[k].as_ref(), delta.column(ci).as_ref()], &order)
                    .map_err(datafusion::error::DataFusionError::from)?;
                arrays[k] = merged;
            }
            self.chunk_rows[k] = order.len();
            self.chunk_ids[k] = next_chunk_id();
        }
        if self.chunk_rows.iter().any(|&r| r > CHUNK_ROWS_MAX) {
            self.cut();
        }
        Ok(())
    }

    /// Cuts every chunk longer than [`CHUNK_ROWS_MAX`] into chunks of [`CHUNK_ROWS`] (slices,
    /// no copy).
    fn cut(&mut self) {
        let pieces: Vec<Vec<(usize, usize)>> = self
            .chunk_rows
            .iter()
            .map(|&rows| match rows > CHUNK_ROWS_MAX {
                true => (0..rows)
                    .step_by(CHUNK_ROWS)
                    .map(|at| (at, CHUNK_ROWS.min(rows - at)))
                    .collect(),
                false => vec![(0, rows)],
            })
            .collect();
        for arrays in self.columns.values_mut() {
            *arrays = arrays
                .iter()
                .zip(&pieces)
                .flat_map(|(a, p)| p.iter().map(|&(at, len)| a.slice(at, len)))
                .collect();
        }
        self.chunk_ids = pieces
            .iter()
            .zip(&self.chunk_ids)
            .flat_map(|(p, &id)| {
                let cut = p.len() > 1;
                p.iter().map(move |_| if cut { next_chunk_id() } else { id })
            })
            .collect();
        self.chunk_rows = pieces.iter().flatten().map(|&(_, len)| len).collect();
    }
}

/// The key (job_id, attempt_no) of row `i` of a job_id and an attempt_no array.
fn key_at<'a>(jobs: &'a ArrayRef, nos: &ArrayRef, i: usize) -> Result<(&'a str, i64)> {
    use datafusion::arrow::array::{Array, Int64Array, StringArray};
    let jobs = jobs
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| crate::Error::Internal("job_id is not Utf8".into()))?;
    let nos = nos
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| crate::Error::Internal("attempt_no is not Int64".into()))?;
    if i >= jobs.len() || i >= nos.len() {
        return Err(crate::Error::Internal(format!("no row {i} in a cached chunk")));
    }
    Ok((jobs.value(i), nos.value(i)))
}

impl AttemptCache {
    /// An empty cache over `ledger`.
    pub fn new(ledger: Ledger) -> Self {
        AttemptCache {
            ledger,
            cached: std::sync::Mutex::new(Cached::default()),
            scans: std::sync::atomic::AtomicU64::new(0),
            merges: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many times this cache has scanned the ledger (each a read of every attempt).
    pub fn scans(&self) -> u64 {
        self.scans.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many writes this cache has merged into the columns it held instead of scanning.
    pub fn merges(&self) -> u64 {
        self.merges.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// [`scan_columns_at`], counted.
    fn scan(&self, columns: &[usize]) -> Result<(Vec<RecordBatch>, u64)> {
        self.scans.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        scan_columns_at(&self.ledger, columns)
    }

    /// Brings `cached` up to the ledger's newest snapshot by merging what was written since its
    /// position. `false` when it cannot (nothing held, a sweep ran, too much changed, or the
    /// chain could not be read): then everything is read again.
    fn catch_up(&self, cached: &mut Cached) -> bool {
        if cached.columns.is_empty() || cached.rows() == 0 {
            return false;
        }
        // Past an eighth of the rows, one parallel scan costs less than reading each by key.
        let limit = (cached.rows() / 8).max(4096);
        match self.ledger.attempt_changes_since(cached.position, limit) {
            Ok(AttemptChanges::Rows { position, rows }) => {
                if !rows.is_empty() {
                    if cached.merge(&rows).is_err() {
                        return false;
                    }
                    cached.log.extend(rows);
                    let over = cached.log.len().saturating_sub(LOG_ROWS);
                    cached.log.drain(..over);
                    cached.log_dropped += over;
                    self.merges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                cached.position = position;
                true
            }
            Ok(AttemptChanges::Rescan) | Err(_) => false,
        }
    }

    /// `columns` (indexes into [`schema()`], in that order) at the ledger's current generation
    /// (or newer), as batches whose schema is that projection. Merges what the writes since the
    /// last call changed (see [`AttemptCache`]), and scans when that cannot be done or a column
    /// was not built yet; a scan for more columns checks that it read the snapshot the held
    /// columns are at (the same chain position: a write between reading the generation and the
    /// snapshot could otherwise pair columns of two snapshots) and starts over when it did not.
    /// The first scan at a generation reads the columns asked for (a query such as seed 000's
    /// q1 keeps its memory to those); a second one reads every column not held yet but `attrs`
    /// ([`WIDE_COLUMNS`]), so a mix of queries scans at most twice between writes.
    /// Concurrent callers wait for one scan instead of each making their own.
    /// Errors: [`scan_columns`]'.
    pub fn columns(&self, columns: &[usize]) -> Result<Vec<RecordBatch>> {
        Ok(self.chunks(columns)?.0)
    }

    /// [`AttemptCache::columns`], with each batch's chunk id beside it: an id names one version
    /// of one chunk, so a table computed chunk by chunk can keep what it computed for the ids it
    /// sees again (see [`crate::derived::kept::ByJob`]).
    pub fn chunks(&self, columns: &[usize]) -> Result<(Vec<RecordBatch>, Vec<u64>)> {
        let mut cached = crate::engine::cache_lock::lock_or_reset(&self.cached, Cached::default);
        self.read(&mut cached, columns)
    }

    /// [`AttemptCache::columns`], with where they stand ([`Cursor`]) and, when `since` is of the
    /// same reading and not too far behind, the rows merged into them since `since`, oldest
    /// first (each in force as merged; a row can come more than once): what a table kept up to
    /// date by the rows each write changed needs, instead of computing itself again from the
    /// columns. `None` when it must compute again: the columns were read again (a retention
    /// sweep, a write too large to merge, a new process) or more than 65,536 rows were merged
    /// since. Errors: [`scan_columns`]'.
    pub fn columns_since(
        &self,
        columns: &[usize],
        since: Option<Cursor>,
    ) -> Result<(Vec<RecordBatch>, Cursor, Option<Vec<StoredAttempt>>)> {
        let (batches, _, cursor, changes) = self.chunks_since(columns, since)?;
        Ok((batches, cursor, changes))
    }

    /// [`AttemptCache::columns_since`] with each batch's chunk id ([`AttemptCache::chunks`]), all
    /// of one read: for a table kept partly by chunk and partly by the rows each write changed.
    #[allow(clippy::type_complexity)]
    pub fn chunks_since(
        &self,
        columns: &[usize],
        since: Option<Cursor>,
    ) -> Result<(Vec<RecordBatch>, Vec<u64>, Cursor, Option<Vec<StoredAttempt>>)> {
        let mut cached = crate::engine::cache_lock::lock_or_reset(&self.cached, Cached::default);
        let (batches, ids) = self.read(&mut cached, columns)?;
        let cursor = Cursor {
            epoch: cached.epoch,
            rows: cached.log_dropped + cached.log.len(),
        };
        let changes = since
            .filter(|s| s.epoch == cursor.epoch && (cached.log_dropped..=cursor.rows).contains(&s.rows))
            .map(|s| cached.log.iter().skip(s.rows - cached.log_dropped).cloned().collect());
        Ok((batches, ids, cursor, changes))
    }

    /// [`AttemptCache::chunks`] under the cache's lock.
    fn read(&self, cached: &mut Cached, columns: &[usize]) -> Result<(Vec<RecordBatch>, Vec<u64>)> {
        // Read the generation before the rows: a write landing meanwhile bumps it, so the entry
        // is never newer than its rows claim.
        let generation = self.ledger.generation();
        // Columns at the read's floor or newer will do: a pinned review reads the state it
        // caught up to once ([`crate::engine::read_floor`]).
        let floor = crate::engine::read_floor::floor_or(generation);
        if cached.generation.is_none_or(|g| g < floor) {
            if self.catch_up(cached) {
                cached.generation = Some(generation);
            } else {
                *cached = Cached {
                    generation: Some(generation),
                    ..Cached::default()
                };
            }
        }
        let missing: Vec<usize> = columns
            .iter()
            .copied()
            .filter(|c| !cached.columns.contains_key(c))
            .collect();
        // Nothing read yet at this generation: scan even for no columns (COUNT(*)), for the row counts.
        if !missing.is_empty() || cached.columns.is_empty() {
            let mut need: Vec<usize> = KEY_COLUMNS.to_vec();
            need.extend(missing.iter().filter(|c| !KEY_COLUMNS.contains(c)));
            if !cached.columns.is_empty() {
                let more: Vec<usize> = WIDE_COLUMNS
                    .iter()
                    .copied()
                    .filter(|c| !need.contains(c) && !cached.columns.contains_key(c))
                    .collect();
                need.extend(more);
            }
            let (fresh, position) = self.scan(&need)?;
            let fresh = chunked(fresh);
            if !cached.columns.is_empty() && position != cached.position {
                // Another snapshot: keep only what this scan read.
                cached.columns.clear();
                let mut all: Vec<usize> = columns.to_vec();
                all.extend(KEY_COLUMNS.iter().filter(|k| !columns.contains(k)));
                let (again, position) = self.scan(&all)?;
                cached.keep(&all, &chunked(again), position);
            } else if !cached.columns.is_empty()
                && !fresh
                    .iter()
                    .map(RecordBatch::num_rows)
                    .eq(cached.chunk_rows.iter().copied())
            {
                // The same snapshot, but the held columns were merged into since their scan, so
                // their chunks are cut elsewhere: cut the new columns the same way.
                cached.adopt(&need, &fresh)?;
            } else {
                cached.keep(&need, &fresh, position);
            }
        }
        let schema: SchemaRef = Arc::new(
            schema()
                .project(columns)
                .map_err(datafusion::error::DataFusionError::from)?,
        );
        let options = |rows| RecordBatchOptions::new().with_row_count(Some(rows));
        let batches = cached
            .chunk_rows
            .iter()
            .enumerate()
            .map(|(k, &rows)| {
                let arrays: Vec<ArrayRef> = columns.iter().map(|c| cached.columns[c][k].clone()).collect();
                Ok(
                    RecordBatch::try_new_with_options(schema.clone(), arrays, &options(rows))
                        .map_err(datafusion::error::DataFusionError::from)?,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((batches, cached.chunk_ids.clone()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array, StringArray};
    use laneledger_store::{Attempt, Lane};

    /// `rows` as `job_attempt` batches cut at lengths taken from `lens` in turn (a 0 makes an empty
    /// batch), the last cut short: for tests of builds that must not care where batches end.
    pub(crate) fn cut(rows: &[StoredAttempt], lens: &[usize]) -> Vec<RecordBatch> {
        let whole = to_batches(rows).unwrap();
        let one = datafusion::arrow::compute::concat_batches(&whole[0].schema(), &whole).unwrap();
        let (mut out, mut at) = (Vec::new(), 0);
        for &len in lens.iter().cycle() {
            let len = len.min(one.num_rows() - at);
            out.push(one.slice(at, len));
            at += len;
            if at == one.num_rows() {
                break;
            }
        }
        out
    }

    /// An open free-lane attempt with idem_key `k-{job_id}` and `tokens_in`, nothing else set
    /// (also the fixture of the tables computed from the cache, e.g. `idem_artifacts`).
    pub(crate) fn stored(job_id: &str, attempt_no: u32, tokens_in: u64) -> StoredAttempt {
        StoredAttempt {
            attempt: Attempt {
                job_id: job_id.into(),
                idem_key: format!("k-{job_id}"),
                attempt_no,
                lane: Lane::Free,
                started_at: 0,
                ended_at: None,
                outcome: None,
                tokens_in: Some(tokens_in),
                tokens_out: None,
                artifact_id: None,
                http_status: None,
                provider_code: None,
                key_id: None,
                pool_id: None,
                model: None,
                attrs: None,
            },
            seq: 0,
            ingested_at: 0,
        }
    }

    /// job_id, attempt_no and tokens_in, as cached: chunks of the given rows.
    const HELD: [usize; 3] = [0, 2, 7];

    /// `rows` as one batch of `columns`, as a scan builds it.
    fn batch(rows: &[StoredAttempt], columns: &[usize]) -> RecordBatch {
        let schema: SchemaRef = Arc::new(schema().project(columns).unwrap());
        let mut want = [false; COLUMNS];
        columns.iter().for_each(|&c| want[c] = true);
        let mut b = Builders::for_columns(rows.len(), want);
        rows.iter().for_each(|r| b.push(r.as_ref()));
        b.finish_columns(columns, &schema).unwrap()
    }

    fn cached(chunks: &[&[(&str, u32)]]) -> Cached {
        let batches: Vec<RecordBatch> = chunks
            .iter()
            .map(|rows| {
                let rows: Vec<StoredAttempt> = rows.iter().map(|&(j, n)| stored(j, n, 1)).collect();
                batch(&rows, &HELD)
            })
            .collect();
        let mut c = Cached::default();
        c.keep(&HELD, &batches, 7);
        c
    }

    /// Each chunk's rows as (job_id, attempt_no, tokens_in).
    fn chunks(c: &Cached) -> Vec<Vec<(String, i64, i64)>> {
        (0..c.chunk_rows.len())
            .map(|k| {
                let jobs = c.columns[&0][k].as_any().downcast_ref::<StringArray>().unwrap();
                let nos = c.columns[&2][k].as_any().downcast_ref::<Int64Array>().unwrap();
                let tokens = c.columns[&7][k].as_any().downcast_ref::<Int64Array>().unwrap();
                assert_eq!(jobs.len(), c.chunk_rows[k]);
                (0..jobs.len())
                    .map(|i| (jobs.value(i).to_string(), nos.value(i), tokens.value(i)))
                    .collect()
            })
            .collect()
    }

    fn rows(r: &[(&str, i64, i64)]) -> Vec<(String, i64, i64)> {
        r.iter().map(|&(j, n, t)| (j.to_string(), n, t)).collect()
    }

    #[test]
    fn a_merge_replaces_held_keys_and_puts_new_ones_in_key_order_in_the_chunk_they_fall_in() {
        let mut c = cached(&[&[("b", 1), ("b", 2), ("d", 1)], &[("f", 1), ("h", 1)]]);
        // Sorted as the ledger hands them over: before everything, a completion of b 2, inside the
        // first chunk, between the chunks, inside the second, after everything.
        let delta = [
            stored("a", 1, 10),
            stored("b", 2, 20),
            stored("c", 1, 30),
            stored("e", 1, 40),
            stored("g", 3, 50),
            stored("z", 1, 60),
        ];
        let ids = c.chunk_ids.clone();
        c.merge(&delta).unwrap();
        assert!(
            c.chunk_ids.iter().zip(&ids).all(|(a, b)| a != b),
            "both chunks rebuilt: new ids"
        );
        assert_eq!(
            chunks(&c),
            [
                rows(&[("a", 1, 10), ("b", 1, 1), ("b", 2, 20), ("c", 1, 30), ("d", 1, 1)]),
                rows(&[("e", 1, 40), ("f", 1, 1), ("g", 3, 50), ("h", 1, 1), ("z", 1, 60)]),
            ]
        );
        assert_eq!(c.chunk_rows, [5, 5]);
        assert_eq!(c.position, 7, "the caller moves the position");
        // A row past the first chunk's last key goes to the front of the next one.
        let ids = c.chunk_ids.clone();
        c.merge(&[stored("d", 2, 70)]).unwrap();
        assert_eq!(c.chunk_ids[0], ids[0], "the first chunk is untouched");
        assert_ne!(c.chunk_ids[1], ids[1]);
        assert_eq!(chunks(&c)[1].first(), Some(&("d".to_string(), 2, 70)));
        assert_eq!(c.chunk_rows, [5, 6]);
    }

    #[test]
    fn columns_scanned_into_the_same_chunks_keep_the_chunk_ids() {
        // A second scan at the held position, cut as the held chunks are: the chunks hold the
        // same rows, so the tables kept by chunk id must not build them again.
        let mut c = cached(&[&[("b", 1), ("d", 1)], &[("f", 1)]]);
        let rows = [stored("b", 1, 11), stored("d", 1, 12), stored("f", 1, 13)];
        let wanted = [0, 2, 8];
        let scan = [batch(&rows[..2], &wanted), batch(&rows[2..], &wanted)];
        let (ids, epoch, position) = (c.chunk_ids.clone(), c.epoch, c.position);
        c.keep(&wanted, &scan, position);
        assert_eq!(c.chunk_ids, ids);
        assert_eq!(c.epoch, epoch);
        assert_eq!(c.columns[&8].len(), 2);
        // Nothing held: a new reading, with new ids.
        let mut fresh = Cached::default();
        fresh.keep(&wanted, &scan, position);
        assert_eq!(fresh.chunk_ids.len(), 2);
        assert!(fresh.chunk_ids.iter().all(|id| !ids.contains(id)));
    }

    #[test]
    fn columns_scanned_after_a_merge_are_cut_into_the_held_chunks() {
        // Held: chunks of 3 and 2 rows, as merges left them; a scan at the same position cuts
        // the same five rows 2 + 3.
        let mut c = cached(&[&[("b", 1), ("b", 2), ("d", 1)], &[("f", 1), ("h", 1)]]);
        let rows = [
            stored("b", 1, 11),
            stored("b", 2, 12),
            stored("d", 1, 13),
            stored("f", 1, 14),
            stored("h", 1, 15),
        ];
        let wanted = [0, 2, 8];
        let rows: Vec<StoredAttempt> = rows
            .into_iter()
            .map(|mut r| {
                r.attempt.tokens_out = r.attempt.tokens_in;
                r
            })
            .collect();
        let scan = [batch(&rows[..2], &wanted), batch(&rows[2..], &wanted)];
        let ids = c.chunk_ids.clone();
        c.adopt(&wanted, &scan).unwrap();
        assert_eq!(c.chunk_rows, [3, 2]);
        assert_eq!(c.chunk_ids, ids, "the held chunks are the same versions");
        let tokens_out: Vec<Vec<i64>> = c.columns[&8]
            .iter()
            .map(|a| a.as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
            .collect();
        assert_eq!(tokens_out, [vec![11, 12, 13], vec![14, 15]]);
        // A scan of other rows is refused rather than misaligned.
        assert!(c.adopt(&[0, 2, 9], &scan[..1]).is_err());
    }

    #[test]
    fn a_scans_batches_are_cut_into_chunks_in_order() {
        let rows: Vec<StoredAttempt> = (0..CHUNK_ROWS + 3)
            .map(|i| stored(&format!("j{i:06}"), 1, i as u64))
            .collect();
        let scan = vec![
            batch(&rows[..CHUNK_ROWS + 1], &HELD),
            batch(&rows[CHUNK_ROWS + 1..], &HELD),
        ];
        let chunks = chunked(scan);
        assert_eq!(
            chunks.iter().map(RecordBatch::num_rows).collect::<Vec<_>>(),
            [CHUNK_ROWS, 1, 2]
        );
        let tokens: Vec<i64> = chunks
            .iter()
            .flat_map(|c| {
                c.column(2)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(tokens, (0..CHUNK_ROWS as i64 + 3).collect::<Vec<_>>());
        let small = vec![batch(&rows[..2], &HELD), batch(&[], &HELD)];
        assert_eq!(
            chunked(small).len(),
            2,
            "batches within a chunk's size are kept as they are"
        );
    }

    #[test]
    fn a_chunk_grown_past_the_limit_is_cut_into_chunk_sized_slices() {
        let n = CHUNK_ROWS_MAX + 1;
        let jobs: Vec<String> = (0..n).map(|i| format!("j{i:07}")).collect();
        let (kept, cut) = (next_chunk_id(), next_chunk_id());
        let mut c = Cached {
            chunk_rows: vec![2, n],
            chunk_ids: vec![kept, cut],
            ..Cached::default()
        };
        c.columns.insert(
            0,
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
                Arc::new(StringArray::from(jobs.clone())),
            ],
        );
        c.columns.insert(
            2,
            vec![
                Arc::new(Int64Array::from(vec![1, 1])) as ArrayRef,
                Arc::new(Int64Array::from((0..n as i64).collect::<Vec<_>>())),
            ],
        );
        c.cut();
        assert_eq!(c.chunk_rows, [2, CHUNK_ROWS, CHUNK_ROWS, 1]);
        assert_eq!(c.chunk_ids[0], kept, "an uncut chunk keeps its id");
        let pieces: std::collections::BTreeSet<u64> = c.chunk_ids[1..].iter().copied().collect();
        assert!(
            pieces.len() == 3 && !pieces.contains(&kept) && !pieces.contains(&cut),
            "{:?}",
            c.chunk_ids
        );
        let last = c.columns[&0][3].as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(last.value(0), jobs[n - 1]);
        assert_eq!(c.key(2, 0).unwrap(), (jobs[CHUNK_ROWS].as_str(), CHUNK_ROWS as i64));
    }
}
