//! The `decision_conflict` table: gate decision records that differed from the row in force
//! (SPEC 2, SPEC 3).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use laneledger_store::Ledger;

use crate::error::Result;
use crate::tables::job_attempt::timestamp_type;

/// conflict_no (arrival order from 1), received_at, source, line, job_id, decided_at (the
/// identity it claims), fields (the differing field names, comma-separated), raw (the record as it
/// arrived).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("conflict_no", DataType::Int64, false),
        Field::new("received_at", timestamp_type(), false),
        Field::new("source", DataType::Utf8, false),
        Field::new("line", DataType::Int64, false),
        Field::new("job_id", DataType::Utf8, false),
        Field::new("decided_at", timestamp_type(), false),
        Field::new("fields", DataType::Utf8, false),
        Field::new("raw", DataType::Utf8, false),
    ]))
}

/// Every kept decision conflict as one batch.
pub fn scan(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let rows = ledger.decision_conflicts()?;
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(1..=rows.len() as i64)),
        Arc::new(TimestampMicrosecondArray::from_iter_values(rows.iter().map(|c| c.received_at)).with_timezone("UTC")),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|c| c.source.as_str()))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|c| c.line as i64))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|c| c.job_id.as_str()))),
        Arc::new(TimestampMicrosecondArray::from_iter_values(rows.iter().map(|c| c.decided_at)).with_timezone("UTC")),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|c| c.fields.join(",")))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|c| c.raw.as_str()))),
    ];
    Ok(vec![
        RecordBatch::try_new(schema(), cols).map_err(datafusion::error::DataFusionError::from)?,
    ])
}
