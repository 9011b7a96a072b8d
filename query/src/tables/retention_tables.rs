//! SPEC 6's tables: `retention_sweep` (one row per sweep), `week_snapshot` (the weekly figures
//! kept for weeks whose rows were swept; `weekly_metrics` shows them for those weeks) and
//! `verify_run` (each `laneledger verify`). The sweep itself is [`crate::archive::retention`].

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use laneledger_store::Ledger;
use laneledger_store::storage::chain::VerifyRun;
use laneledger_store::storage::retention::{SweepRecord, WeekFigures};

use crate::error::Result;
use crate::tables::job_attempt::timestamp_type;

fn batch(schema: SchemaRef, cols: Vec<ArrayRef>) -> Result<Vec<RecordBatch>> {
    Ok(vec![
        RecordBatch::try_new(schema, cols).map_err(datafusion::error::DataFusionError::from)?,
    ])
}

fn ts(values: impl Iterator<Item = i64>) -> ArrayRef {
    Arc::new(TimestampMicrosecondArray::from_iter_values(values).with_timezone("UTC"))
}

/// `retention_sweep`: sweep_no, swept_at, cutoff (timestamps), days, reconcile_window_s (seconds),
/// jobs_removed, rows_removed, archive (NULL when none), digest (SHA-256 hex of the removed
/// records), checkpoints (chain runs removed), weeks_snapshotted (comma-separated ISO weeks),
/// jobs_abandoned (of jobs_removed, those with an attempt left open past the grace period).
pub fn sweep_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("sweep_no", DataType::Int64, false),
        Field::new("swept_at", timestamp_type(), false),
        Field::new("cutoff", timestamp_type(), false),
        Field::new("days", DataType::Int64, false),
        Field::new("reconcile_window_s", DataType::Int64, false),
        Field::new("jobs_removed", DataType::Int64, false),
        Field::new("rows_removed", DataType::Int64, false),
        Field::new("archive", DataType::Utf8, true),
        Field::new("digest", DataType::Utf8, false),
        Field::new("checkpoints", DataType::Int64, false),
        Field::new("weeks_snapshotted", DataType::Utf8, false),
        Field::new("jobs_abandoned", DataType::Int64, false),
    ]))
}

/// Every sweep as one batch.
pub fn scan_sweeps(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let r = ledger.sweeps()?;
    let int = |f: fn(&SweepRecord) -> i64| -> ArrayRef { Arc::new(Int64Array::from_iter_values(r.iter().map(f))) };
    batch(
        sweep_schema(),
        vec![
            int(|s| s.sweep_no as i64),
            ts(r.iter().map(|s| s.swept_at)),
            ts(r.iter().map(|s| s.cutoff)),
            int(|s| i64::from(s.days)),
            int(|s| i64::from(s.reconcile_window_s)),
            int(|s| s.jobs_removed as i64),
            int(|s| s.rows_removed as i64),
            Arc::new(r.iter().map(|s| s.archive.as_deref()).collect::<StringArray>()),
            Arc::new(StringArray::from_iter_values(r.iter().map(|s| s.digest.as_str()))),
            int(|s| s.checkpoints as i64),
            Arc::new(StringArray::from_iter_values(
                r.iter().map(|s| s.weeks_snapshotted.join(",")),
            )),
            int(|s| s.jobs_abandoned as i64),
        ],
    )
}

/// `week_snapshot`: `weekly_metrics`' columns, then snapshot_at and sweep_no.
pub fn week_snapshot_schema() -> SchemaRef {
    let mut fields = vec![
        Field::new("iso_week", DataType::Utf8, false),
        Field::new("week_start", timestamp_type(), false),
    ];
    for name in [
        "jobs",
        "free_attempts",
        "paid_attempts",
        "total_tokens",
        "unique_accepted_artifacts",
        "duplicate_artifacts",
        "cross_lane_jobs",
        "artifacts",
    ] {
        fields.push(Field::new(name, DataType::Int64, false));
    }
    for name in [
        "tokens_per_accepted_artifact",
        "tokens_per_artifact",
        "duplicate_artifacts_per_100_jobs",
        "cross_lane_retries_per_job",
    ] {
        fields.push(Field::new(name, DataType::Float64, true));
    }
    fields.push(Field::new("snapshot_at", timestamp_type(), false));
    fields.push(Field::new("sweep_no", DataType::Int64, false));
    Arc::new(Schema::new(fields))
}

/// Every week snapshot as one batch.
pub fn scan_week_snapshots(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let w = ledger.week_snapshots()?;
    let int = |f: fn(&WeekFigures) -> i64| -> ArrayRef { Arc::new(Int64Array::from_iter_values(w.iter().map(f))) };
    let float =
        |f: fn(&WeekFigures) -> Option<f64>| -> ArrayRef { Arc::new(w.iter().map(f).collect::<Float64Array>()) };
    batch(
        week_snapshot_schema(),
        vec![
            Arc::new(StringArray::from_iter_values(w.iter().map(|x| x.iso_week.as_str()))),
            ts(w.iter().map(|x| x.week_start)),
            int(|x| x.jobs),
            int(|x| x.free_attempts),
            int(|x| x.paid_attempts),
            int(|x| x.total_tokens),
            int(|x| x.unique_accepted_artifacts),
            int(|x| x.duplicate_artifacts),
            int(|x| x.cross_lane_jobs),
            int(|x| x.artifacts),
            float(|x| x.tokens_per_accepted_artifact),
            float(|x| x.tokens_per_artifact),
            float(|x| x.duplicate_artifacts_per_100_jobs),
            float(|x| x.cross_lane_retries_per_job),
            ts(w.iter().map(|x| x.snapshot_at)),
            int(|x| x.sweep_no as i64),
        ],
    )
}

/// `verify_run`: run_no, verified_at, clean, entries, records, tip (hex), first_bad (NULL when
/// clean).
pub fn verify_run_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("run_no", DataType::Int64, false),
        Field::new("verified_at", timestamp_type(), false),
        Field::new("clean", DataType::Boolean, false),
        Field::new("entries", DataType::Int64, false),
        Field::new("records", DataType::Int64, false),
        Field::new("tip", DataType::Utf8, false),
        Field::new("first_bad", DataType::Utf8, true),
    ]))
}

/// Every verify run as one batch.
pub fn scan_verify_runs(ledger: &Ledger) -> Result<Vec<RecordBatch>> {
    let r = ledger.verify_runs()?;
    let int = |f: fn(&VerifyRun) -> i64| -> ArrayRef { Arc::new(Int64Array::from_iter_values(r.iter().map(f))) };
    batch(
        verify_run_schema(),
        vec![
            int(|v| v.run_no as i64),
            ts(r.iter().map(|v| v.at)),
            Arc::new(r.iter().map(|v| Some(v.clean)).collect::<BooleanArray>()),
            int(|v| v.entries as i64),
            int(|v| v.records as i64),
            Arc::new(StringArray::from_iter_values(r.iter().map(|v| v.tip.as_str()))),
            Arc::new(r.iter().map(|v| v.first_bad.as_deref()).collect::<StringArray>()),
        ],
    )
}
