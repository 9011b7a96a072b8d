//! `job_rollup`: seed 000's view, materialized once per write generation by one pass over the
//! sorted attempts instead of a hash aggregation per query.
//!
//! The seed defines it as (and [`crate::views::SEED_JOB_ROLLUP_VIEW`] keeps the text verbatim):
//!
//! ```sql
//! SELECT job_id,
//!        MAX(idem_key)                   AS idem_key,
//!        SUM(lane = 'free')              AS free_attempts,
//!        SUM(lane = 'paid')              AS paid_attempts,
//!        SUM(tokens_in + tokens_out)     AS tokens,
//!        COUNT(DISTINCT artifact_id)     AS artifacts
//! FROM job_attempt
//! GROUP BY job_id;
//! ```
//!
//! `job_attempt`'s batches come in (job_id, attempt_no) order ([`crate::job_attempt::scan`]), so
//! each job's attempts are adjacent: [`rollup`] walks them once, keeping one job's figures at a
//! time (a job has a handful of attempts, so its distinct artifacts are a short list). The rows
//! come out in job_id order. Seed queries over `job_rollup` (q1) then aggregate one row per job
//! instead of grouping every attempt again; `query/tests/sqlite_differential.rs` checks the rows
//! against SQLite running the seed's view text, and against DataFusion running it too.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Builder, RecordBatch, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::error::Result;
use crate::job_attempt::{self, BATCH_ROWS};

/// `job_rollup`'s schema, with the types and nullability DataFusion gives the seed's view:
/// job_id Utf8, idem_key Utf8 (MAX), free_attempts, paid_attempts and tokens Int64 (SQLite-rule
/// SUM, nullable), artifacts Int64 (COUNT, never NULL).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job_id", DataType::Utf8, false),
        Field::new("idem_key", DataType::Utf8, true),
        Field::new("free_attempts", DataType::Int64, true),
        Field::new("paid_attempts", DataType::Int64, true),
        Field::new("tokens", DataType::Int64, true),
        Field::new("artifacts", DataType::Int64, false),
    ]))
}

/// One job's figures while its attempts are walked.
#[derive(Default)]
struct Job<'a> {
    job_id: &'a str,
    idem_key: &'a str,
    free: i64,
    paid: i64,
    tokens: i64,
    /// The distinct non-NULL artifact_ids seen so far.
    artifacts: Vec<&'a str>,
}

struct Out {
    job_id: StringBuilder,
    idem_key: StringBuilder,
    free: Int64Builder,
    paid: Int64Builder,
    tokens: Int64Builder,
    artifacts: Int64Builder,
    rows: usize,
    batches: Vec<RecordBatch>,
    schema: SchemaRef,
}

impl Out {
    fn new() -> Self {
        let mut out = Out {
            job_id: StringBuilder::new(),
            idem_key: StringBuilder::new(),
            free: Int64Builder::new(),
            paid: Int64Builder::new(),
            tokens: Int64Builder::new(),
            artifacts: Int64Builder::new(),
            rows: 0,
            batches: Vec::new(),
            schema: schema(),
        };
        out.make_room();
        out
    }

    /// Fresh builders with room for a batch of typical ids (`finish` leaves them with none), so
    /// the buffers are not grown and copied row by row.
    fn make_room(&mut self) {
        self.job_id = StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 16);
        self.idem_key = StringBuilder::with_capacity(BATCH_ROWS, BATCH_ROWS * 16);
        self.free = Int64Builder::with_capacity(BATCH_ROWS);
        self.paid = Int64Builder::with_capacity(BATCH_ROWS);
        self.tokens = Int64Builder::with_capacity(BATCH_ROWS);
        self.artifacts = Int64Builder::with_capacity(BATCH_ROWS);
    }

    fn push(&mut self, j: &Job<'_>) -> Result<()> {
        self.job_id.append_value(j.job_id);
        self.idem_key.append_value(j.idem_key);
        self.free.append_value(j.free);
        self.paid.append_value(j.paid);
        self.tokens.append_value(j.tokens);
        self.artifacts.append_value(j.artifacts.len() as i64);
        self.rows += 1;
        if self.rows == BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(self.job_id.finish()),
            Arc::new(self.idem_key.finish()),
            Arc::new(self.free.finish()),
            Arc::new(self.paid.finish()),
            Arc::new(self.tokens.finish()),
            Arc::new(self.artifacts.finish()),
        ];
        self.rows = 0;
        self.make_room();
        self.batches
            .push(RecordBatch::try_new(self.schema.clone(), cols).map_err(datafusion::error::DataFusionError::from)?);
        Ok(())
    }
}

/// The `job_rollup` rows of `attempts` (`job_attempt` batches in (job_id, attempt_no) order, as
/// [`crate::job_attempt::scan`] returns them), one per job in job_id order, in batches of at most
/// [`BATCH_ROWS`] rows (at least one, possibly empty).
///
/// `tokens` adds `tokens_in + tokens_out` (tokens; absent counts are 0, the seed's `DEFAULT 0`);
/// `artifacts` counts distinct non-NULL artifact_ids, as `COUNT(DISTINCT artifact_id)` does.
///
/// Errors: a batch without `job_attempt`'s columns ([`crate::Error::Internal`]).
pub fn rollup(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let mut out = Out::new();
    let mut job: Option<Job<'_>> = None;
    for batch in attempts {
        let column = |name: &str| job_attempt::column(batch, name);
        let job_id = column("job_id")?.as_string::<i32>();
        let idem_key = column("idem_key")?.as_string::<i32>();
        let lane = column("lane")?.as_string::<i32>();
        let tokens_in = column("tokens_in")?.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        let tokens_out = column("tokens_out")?.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        let artifact_id = column("artifact_id")?.as_string::<i32>();
        for i in 0..batch.num_rows() {
            let id = job_id.value(i);
            let j = match &mut job {
                Some(j) if j.job_id == id => j,
                _ => {
                    if let Some(done) = job.take() {
                        out.push(&done)?;
                    }
                    job.insert(Job {
                        job_id: id,
                        idem_key: idem_key.value(i),
                        ..Job::default()
                    })
                }
            };
            let key = idem_key.value(i);
            if key > j.idem_key {
                j.idem_key = key;
            }
            match lane.value(i) {
                "free" => j.free += 1,
                "paid" => j.paid += 1,
                _ => {}
            }
            j.tokens += tokens_in.value(i) + tokens_out.value(i);
            if artifact_id.is_valid(i) {
                let a = artifact_id.value(i);
                if !j.artifacts.contains(&a) {
                    j.artifacts.push(a);
                }
            }
        }
    }
    if let Some(done) = job.take() {
        out.push(&done)?;
    }
    if out.rows > 0 || out.batches.is_empty() {
        out.flush()?;
    }
    Ok(out.batches)
}
