//! The `job_attempt` table (SPEC 3): the ledger's attempts as Arrow, seed 000's columns first.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use laneledger_store::policy::refusal::ErrorKind;
use laneledger_store::{Ledger, StoredAttempt};

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

    fn push(&mut self, s: &StoredAttempt) {
        let a = &s.attempt;
        self.job_id.append_value(&a.job_id);
        self.idem_key.append_value(&a.idem_key);
        self.attempt_no.append_value(i64::from(a.attempt_no));
        self.lane.append_value(a.lane.as_str());
        self.started_at.append_value(a.started_at);
        self.ended_at.append_option(a.ended_at);
        self.outcome.append_option(a.outcome.map(|o| o.as_str()));
        self.tokens_in.append_value(a.tokens_in.unwrap_or(0) as i64);
        self.tokens_out.append_value(a.tokens_out.unwrap_or(0) as i64);
        self.artifact_id.append_option(a.artifact_id.as_deref());
        self.http_status.append_option(a.http_status.map(i64::from));
        self.provider_code.append_option(a.provider_code.map(i64::from));
        self.key_id.append_option(a.key_id.as_deref());
        self.pool_id.append_option(a.pool_id.as_deref());
        self.model.append_option(a.model.as_deref());
        self.error_kind
            .append_option(error_kind_of(a.http_status, a.provider_code).map(|k| k.as_str()));
        self.attrs.append_option(a.attrs.as_deref());
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

/// Reads every attempt of the ledger, in (job_id, attempt_no) order, into `job_attempt` batches.
pub fn scan(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let mut b = Batcher::default();
    let mut result = Ok(());
    ledger.for_each_attempt(|s| {
        if result.is_ok() {
            result = b.push(&s);
        }
    })?;
    result?;
    b.finish()
}
