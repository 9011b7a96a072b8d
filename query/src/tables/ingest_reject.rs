//! The `ingest_reject` table: lines that could not be read, with their reason (SPEC 2).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use laneledger_store::Ledger;

use crate::error::Result;
use crate::tables::job_attempt::timestamp_type;

/// reject_no (arrival order from 1), received_at, source, line, field (NULL when no single field
/// is at fault), reason, raw (the line as it arrived, lossy UTF-8).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("reject_no", DataType::Int64, false),
        Field::new("received_at", timestamp_type(), false),
        Field::new("source", DataType::Utf8, false),
        Field::new("line", DataType::Int64, false),
        Field::new("field", DataType::Utf8, true),
        Field::new("reason", DataType::Utf8, false),
        Field::new("raw", DataType::Utf8, false),
    ]))
}

/// Every kept reject as one batch.
pub fn scan(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let rows = ledger.rejects()?;
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(1..=rows.len() as i64)),
        Arc::new(TimestampMicrosecondArray::from_iter_values(rows.iter().map(|r| r.received_at)).with_timezone("UTC")),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.source.as_str()))),
        Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.line as i64))),
        Arc::new(rows.iter().map(|r| r.field.as_deref()).collect::<StringArray>()),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.reason.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.raw.as_str()))),
    ];
    Ok(vec![
        RecordBatch::try_new(schema(), cols).map_err(datafusion::error::DataFusionError::from)?,
    ])
}
