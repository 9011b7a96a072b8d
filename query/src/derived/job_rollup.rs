//! `job_rollup`: seed 000's view, materialized once per write generation by one pass over the
//! sorted attempts instead of a hash aggregation per query.
//!
//! The seed defines it as (and [`crate::derived::views::SEED_JOB_ROLLUP_VIEW`] keeps the text verbatim):
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
//! `job_attempt`'s batches come in (job_id, attempt_no) order ([`crate::tables::job_attempt::scan`]), so
//! each job's attempts are adjacent: [`rollup`] walks them once, keeping one job's figures at a
//! time (a job has a handful of attempts, so its distinct artifacts are a short list). The rows
//! come out in job_id order. Seed queries over `job_rollup` (q1) then aggregate one row per job
//! instead of grouping every attempt again; `query/tests/sqlite_differential.rs` checks the rows
//! against SQLite running the seed's view text, and against DataFusion running it too.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Builder, RecordBatch, StringBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::derived::kept::ByJob;
use crate::error::Result;
use crate::tables::job_attempt::{self, BATCH_ROWS};
use crate::tables::labels::Text;

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
    /// Rows each batch's builders have room for.
    room: usize,
}

impl Out {
    /// Builders for the rollup of `rows` attempts (at most that many jobs).
    fn new(rows: usize) -> Self {
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
            room: rows.clamp(1, BATCH_ROWS),
        };
        out.make_room();
        out
    }

    /// Fresh builders with room for a batch of typical ids (`finish` leaves them with none), so
    /// the buffers are not grown and copied row by row.
    fn make_room(&mut self) {
        let n = self.room;
        self.job_id = StringBuilder::with_capacity(n, n * 16);
        self.idem_key = StringBuilder::with_capacity(n, n * 16);
        self.free = Int64Builder::with_capacity(n);
        self.paid = Int64Builder::with_capacity(n);
        self.tokens = Int64Builder::with_capacity(n);
        self.artifacts = Int64Builder::with_capacity(n);
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
/// [`crate::tables::job_attempt::scan`] returns them), one per job in job_id order, in batches of at most
/// [`BATCH_ROWS`] rows (at least one, possibly empty).
///
/// `tokens` adds `tokens_in + tokens_out` (tokens; absent counts are 0, the seed's `DEFAULT 0`);
/// `artifacts` counts distinct non-NULL artifact_ids, as `COUNT(DISTINCT artifact_id)` does.
///
/// Errors: a batch without `job_attempt`'s columns ([`crate::Error::Internal`]).
pub fn rollup(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let mut out = Out::new(attempts.iter().map(RecordBatch::num_rows).sum());
    let mut job: Option<Job<'_>> = None;
    for batch in attempts {
        let column = |name: &str| job_attempt::column(batch, name);
        let job_id = column("job_id")?.as_string::<i32>();
        let idem_key = column("idem_key")?.as_string::<i32>();
        let lane = Text::of(column("lane")?)?;
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

/// `job_rollup` kept by job ([`crate::derived::kept`]): after a write only the chunks of the
/// attempt cache the write fell into are rolled up again.
pub fn kept() -> ByJob {
    ByJob::new(
        schema(),
        &job_attempt::ROLLUP_COLUMNS,
        0,
        Arc::new(|attempts: &[RecordBatch]| rollup(attempts)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};

    /// One attempt of the rollup's columns: (job_id, lane, tokens_in, artifact_id).
    type Row<'a> = (&'a str, &'a str, i64, Option<&'a str>);

    /// Attempts of the rollup's columns.
    fn attempts(rows: &[Row<'_>]) -> RecordBatch {
        let s = job_attempt::schema();
        let schema = Arc::new(s.project(&job_attempt::ROLLUP_COLUMNS).unwrap());
        let col = |f: &dyn Fn(&Row<'_>) -> Option<String>| -> ArrayRef {
            Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
        };
        let ints = |f: &dyn Fn(usize) -> i64| -> ArrayRef {
            Arc::new(Int64Array::from((0..rows.len()).map(f).collect::<Vec<_>>()))
        };
        RecordBatch::try_new(
            schema,
            vec![
                col(&|r| Some(r.0.to_string())),
                col(&|r| Some(format!("k-{}", r.0))),
                ints(&|i| i as i64 + 1),
                datafusion::arrow::compute::cast(
                    &col(&|r| Some(r.1.to_string())),
                    &crate::tables::labels::labels_type(),
                )
                .unwrap(),
                ints(&|i| rows[i].2),
                ints(&|_| 1),
                col(&|r| r.3.map(str::to_string)),
            ],
        )
        .unwrap()
    }

    fn text(batches: &[RecordBatch]) -> String {
        datafusion::arrow::util::pretty::pretty_format_batches(batches)
            .unwrap()
            .to_string()
    }

    #[test]
    fn chunked_rollup_equals_the_whole_walk_for_every_cut_and_reuses_untouched_chunks() {
        // Job b runs across three chunks in the cuts below; c has two artifacts, one repeated.
        let all = attempts(&[
            ("a", "free", 1, Some("x")),
            ("b", "free", 2, None),
            ("b", "paid", 4, Some("y")),
            ("b", "paid", 8, Some("y")),
            ("b", "free", 16, Some("z")),
            ("c", "free", 32, Some("u")),
            ("c", "paid", 64, Some("u")),
            ("d", "paid", 128, None),
        ]);
        let whole = text(&rollup(std::slice::from_ref(&all)).unwrap());
        for cuts in [
            vec![],
            vec![1],
            vec![2],
            vec![2, 3],
            vec![1, 3, 5],
            vec![4, 6, 7],
            vec![1, 2, 3, 4, 5, 6, 7],
        ] {
            let mut chunks = Vec::new();
            let mut at = 0;
            for &c in cuts.iter().chain([8].iter()) {
                chunks.push(all.slice(at, c - at));
                at = c;
            }
            let ids: Vec<u64> = (0..chunks.len() as u64).collect();
            let table = kept();
            assert_eq!(text(&table.rows_of(&chunks, &ids).unwrap()), whole, "cuts {cuts:?}");
            // Again with the same ids: answered from the kept rows, the same rows.
            assert_eq!(
                text(&table.rows_of(&chunks, &ids).unwrap()),
                whole,
                "cuts {cuts:?}, again"
            );
        }
        // One chunk replaced (a write merged into it, a new id): the other's rows are the kept
        // ones, and kept rows of other attempts under a reused id show that they are. Job b is
        // inside the first chunk (a before it, c after): its row is kept with the chunk.
        let table = kept();
        let first = vec![all.slice(0, 6), all.slice(6, 2)];
        table.rows_of(&first, &[1, 2]).unwrap();
        let changed = attempts(&[
            ("a", "free", 1, Some("x")),
            ("b", "free", 2, None),
            ("b", "paid", 4, Some("y")),
            ("b", "paid", 8, Some("y")),
            ("b", "free", 16, Some("z")),
            ("b", "paid", 1000, Some("w")),
            ("c", "free", 32, Some("u")),
        ]);
        let got = text(&table.rows_of(&[changed.clone(), first[1].clone()], &[3, 2]).unwrap());
        let want = text(&rollup(&[changed.clone(), first[1].clone()]).unwrap());
        assert_eq!(got, want);
        let stale = kept();
        stale.rows_of(&first, &[1, 2]).unwrap();
        let wrong = text(&stale.rows_of(&[changed, first[1].clone()], &[1, 2]).unwrap());
        assert_ne!(wrong, want, "an id seen before is answered from the kept rows");
        assert!(
            got.contains("| b      | k-b      | 2             | 3             | 1035   | 3         |"),
            "{got}"
        );
    }
}
