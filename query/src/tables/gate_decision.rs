//! The `gate_decision` table (SPEC 3, 5.3): the ledger's gate decisions as Arrow, SPEC 1.2's fields
//! first, then seed 003's `dwell` and `decide_safe` recomputed for each row.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use laneledger_store::policy::gate::DEFAULT_MAX_QUEUE_AGE_S;
use laneledger_store::{DEFAULT_RESERVED_SERVICE_S, Ledger, StoredDecision};

use crate::error::Result;
use crate::tables::job_attempt::{BATCH_ROWS, timestamp_type};
use crate::tables::ledger_table::ReadFn;

/// The `lane.yaml` gate defaults that SQL shows where a decision logged none (SPEC 7), in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateDefaults {
    /// `gate.max_queue_age_s`: the queue-age cap, seconds (seed 003 `max_queue_age_s = 30.0`).
    pub max_queue_age_s: f64,
    /// `gate.reserved_service_s`: a reserved worker's service time, seconds (8).
    pub reserved_service_s: f64,
}

impl Default for GateDefaults {
    /// 30 s and 8 s, the seed's values ([`DEFAULT_MAX_QUEUE_AGE_S`], [`DEFAULT_RESERVED_SERVICE_S`]).
    fn default() -> Self {
        GateDefaults {
            max_queue_age_s: DEFAULT_MAX_QUEUE_AGE_S,
            reserved_service_s: DEFAULT_RESERVED_SERVICE_S,
        }
    }
}

/// `gate_decision`'s schema: job_id, decided_at, queue_age_s, expected_service_s, retry_tax_s,
/// deadline_slack_s, max_queue_age_s (default applied), decision, retry_count (0 when absent),
/// slack_miss (NULL until known), reserved_service_s (default applied) — SPEC 1.2's order, every
/// duration in seconds as `Float64` — then dwell_s (seed 003 `dwell`), expected_decision (seed 003
/// `decide_safe` with the row's cap), attrs (JSON text), ingested_at.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job_id", DataType::Utf8, false),
        Field::new("decided_at", timestamp_type(), false),
        Field::new("queue_age_s", DataType::Float64, false),
        Field::new("expected_service_s", DataType::Float64, false),
        Field::new("retry_tax_s", DataType::Float64, false),
        Field::new("deadline_slack_s", DataType::Float64, false),
        Field::new("max_queue_age_s", DataType::Float64, false),
        Field::new("decision", DataType::Utf8, false),
        Field::new("retry_count", DataType::Int64, false),
        Field::new("slack_miss", DataType::Boolean, true),
        Field::new("reserved_service_s", DataType::Float64, false),
        Field::new("dwell_s", DataType::Float64, false),
        Field::new("expected_decision", DataType::Utf8, false),
        Field::new("attrs", DataType::Utf8, true),
        Field::new("ingested_at", timestamp_type(), false),
    ]))
}

/// Column builders for `gate_decision`.
struct Builders {
    job_id: StringBuilder,
    decided_at: TimestampMicrosecondBuilder,
    queue_age_s: Float64Builder,
    expected_service_s: Float64Builder,
    retry_tax_s: Float64Builder,
    deadline_slack_s: Float64Builder,
    max_queue_age_s: Float64Builder,
    decision: StringBuilder,
    retry_count: Int64Builder,
    slack_miss: BooleanBuilder,
    reserved_service_s: Float64Builder,
    dwell_s: Float64Builder,
    expected_decision: StringBuilder,
    attrs: StringBuilder,
    ingested_at: TimestampMicrosecondBuilder,
    rows: usize,
}

impl Builders {
    fn new() -> Self {
        let ts = || TimestampMicrosecondBuilder::new().with_timezone("UTC");
        Builders {
            job_id: StringBuilder::new(),
            decided_at: ts(),
            queue_age_s: Float64Builder::new(),
            expected_service_s: Float64Builder::new(),
            retry_tax_s: Float64Builder::new(),
            deadline_slack_s: Float64Builder::new(),
            max_queue_age_s: Float64Builder::new(),
            decision: StringBuilder::new(),
            retry_count: Int64Builder::new(),
            slack_miss: BooleanBuilder::new(),
            reserved_service_s: Float64Builder::new(),
            dwell_s: Float64Builder::new(),
            expected_decision: StringBuilder::new(),
            attrs: StringBuilder::new(),
            ingested_at: ts(),
            rows: 0,
        }
    }

    fn push(&mut self, s: &StoredDecision, defaults: &GateDefaults) {
        let d = &s.decision;
        self.job_id.append_value(&d.job_id);
        self.decided_at.append_value(d.decided_at);
        self.queue_age_s.append_value(d.queue_age_s);
        self.expected_service_s.append_value(d.expected_service_s);
        self.retry_tax_s.append_value(d.retry_tax_s);
        self.deadline_slack_s.append_value(d.deadline_slack_s);
        self.max_queue_age_s
            .append_value(d.max_queue_age_s.unwrap_or(defaults.max_queue_age_s));
        self.decision.append_value(d.decision.as_str());
        self.retry_count
            .append_value(i64::try_from(d.retry_count.unwrap_or(0)).unwrap_or(i64::MAX));
        self.slack_miss.append_option(d.slack_miss);
        self.reserved_service_s
            .append_value(d.reserved_service_s.unwrap_or(defaults.reserved_service_s));
        self.dwell_s.append_value(d.dwell_s());
        self.expected_decision
            .append_value(d.expected_decision(defaults.max_queue_age_s).as_str());
        self.attrs.append_option(d.attrs.as_deref());
        self.ingested_at.append_value(s.ingested_at);
        self.rows += 1;
    }

    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(self.job_id.finish()),
            Arc::new(self.decided_at.finish()),
            Arc::new(self.queue_age_s.finish()),
            Arc::new(self.expected_service_s.finish()),
            Arc::new(self.retry_tax_s.finish()),
            Arc::new(self.deadline_slack_s.finish()),
            Arc::new(self.max_queue_age_s.finish()),
            Arc::new(self.decision.finish()),
            Arc::new(self.retry_count.finish()),
            Arc::new(self.slack_miss.finish()),
            Arc::new(self.reserved_service_s.finish()),
            Arc::new(self.dwell_s.finish()),
            Arc::new(self.expected_decision.finish()),
            Arc::new(self.attrs.finish()),
            Arc::new(self.ingested_at.finish()),
        ];
        self.rows = 0;
        Ok(RecordBatch::try_new(schema.clone(), cols).map_err(datafusion::error::DataFusionError::from)?)
    }
}

/// Accumulates decisions into `gate_decision` batches of at most [`BATCH_ROWS`] rows.
struct Batcher<'d> {
    schema: SchemaRef,
    builders: Builders,
    defaults: &'d GateDefaults,
    out: Vec<RecordBatch>,
}

impl<'d> Batcher<'d> {
    fn new(defaults: &'d GateDefaults) -> Self {
        Batcher {
            schema: schema(),
            builders: Builders::new(),
            defaults,
            out: Vec::new(),
        }
    }

    fn push(&mut self, s: &StoredDecision) -> Result<()> {
        self.builders.push(s, self.defaults);
        if self.builders.rows == BATCH_ROWS {
            self.out.push(self.builders.finish(&self.schema)?);
        }
        Ok(())
    }

    fn finish(mut self) -> Result<Vec<RecordBatch>> {
        if self.builders.rows > 0 || self.out.is_empty() {
            self.out.push(self.builders.finish(&self.schema)?);
        }
        Ok(self.out)
    }
}

/// Converts stored decisions to `gate_decision` batches of at most [`BATCH_ROWS`] rows (at least
/// one batch, possibly empty), with `defaults` (seconds) where a row logged no cap or no reserved
/// service time.
pub fn to_batches<'a>(
    rows: impl IntoIterator<Item = &'a StoredDecision>,
    defaults: &GateDefaults,
) -> Result<Vec<RecordBatch>> {
    let mut b = Batcher::new(defaults);
    for s in rows {
        b.push(s)?;
    }
    b.finish()
}

/// Reads every decision of the ledger, in (job_id, decided_at) order, into `gate_decision`
/// batches, with `defaults` (seconds) applied where a row logged none.
pub fn scan(ledger: &Ledger, defaults: &GateDefaults) -> Result<Vec<RecordBatch>> {
    let mut b = Batcher::new(defaults);
    let mut result = Ok(());
    ledger.for_each_decision(|d| {
        if result.is_ok() {
            result = b.push(&d);
        }
    })?;
    result?;
    b.finish()
}

/// The table's reader for [`crate::tables::ledger_table::LedgerTable`]: [`scan`] with the defaults that
/// `defaults` returns at each scan (so a reloaded `lane.yaml` applies to the next query).
pub fn read_fn(defaults: impl Fn() -> GateDefaults + Send + Sync + 'static) -> ReadFn {
    Arc::new(move |ledger: &Ledger| scan(ledger, &defaults()))
}
