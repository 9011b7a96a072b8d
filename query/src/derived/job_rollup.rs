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

use crate::error::Result;
use crate::tables::job_attempt::{self, BATCH_ROWS};

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

/// The `job_rollup` rows of each chunk of attempts, by chunk id
/// ([`crate::tables::job_attempt::AttemptCache::chunks`]), kept from one call of [`rollup_chunks`] to the
/// next: a chunk the attempt cache did not rebuild since (a write merged into other chunks) is
/// not walked again. Only the chunks of the last call are kept.
#[derive(Default)]
pub struct RollupMemo {
    chunks: std::sync::Mutex<std::collections::HashMap<u64, Vec<RecordBatch>>>,
}

/// How many rows at the start (`from_end` false) or the end of `chunk` belong to `job_id`.
fn run_of(chunk: &RecordBatch, job_id: &str, from_end: bool) -> Result<usize> {
    let ids = job_attempt::column(chunk, "job_id")?.as_string::<i32>();
    let n = ids.len();
    let at = |i: usize| if from_end { n - 1 - i } else { i };
    Ok((0..n).take_while(|&i| ids.value(at(i)) == job_id).count())
}

/// The job_id of row `i` of rollup rows `rows` (batches in order).
fn job_at(rows: &[RecordBatch], mut i: usize) -> Result<String> {
    for b in rows {
        if i < b.num_rows() {
            return Ok(b.column(0).as_string::<i32>().value(i).to_string());
        }
        i -= b.num_rows();
    }
    Err(crate::Error::Internal("job_rollup row past the end".into()))
}

/// Rows `from..to` of rollup rows `rows` (batches in order), as slices of them.
fn rows_between(rows: &[RecordBatch], from: usize, to: usize, out: &mut Vec<RecordBatch>) {
    let mut at = 0;
    for b in rows {
        let (lo, hi) = (from.max(at), to.min(at + b.num_rows()));
        if lo < hi {
            out.push(b.slice(lo - at, hi - lo));
        }
        at += b.num_rows();
    }
}

/// [`rollup`] of `attempts` (chunks in (job_id, attempt_no) order, `ids[k]` the id of chunk
/// `k`), walking only the chunks `memo` does not hold from its last call; equal to
/// `rollup(attempts)` row for row.
///
/// Each chunk's jobs are rolled up apart; a job whose attempts run across a chunk boundary is
/// rolled up again from its attempts on both sides. After a write the attempt cache rebuilds
/// only the chunks the write fell into, so the rollup of 10 M attempts after a one-attempt write
/// walks one chunk ([`crate::tables::job_attempt::BATCH_ROWS`] attempts or so) instead of all.
/// Errors: [`rollup`]'s, or [`crate::Error::Internal`] when `ids` and `attempts` differ in length.
pub fn rollup_chunks(memo: &RollupMemo, attempts: &[RecordBatch], ids: &[u64]) -> Result<Vec<RecordBatch>> {
    if ids.len() != attempts.len() {
        return Err(crate::Error::Internal("job_rollup: a chunk id for each chunk".into()));
    }
    let mut kept = crate::engine::cache_lock::lock_or_reset(&memo.chunks, Default::default);
    let mut old = std::mem::take(&mut *kept);
    let mut per_chunk: Vec<Vec<RecordBatch>> = Vec::with_capacity(attempts.len());
    for (chunk, id) in attempts.iter().zip(ids) {
        per_chunk.push(match old.remove(id) {
            Some(rows) => rows,
            None => rollup(std::slice::from_ref(chunk))?,
        });
    }
    *kept = ids.iter().copied().zip(per_chunk.iter().cloned()).collect();
    drop(kept);

    let mut out: Vec<RecordBatch> = Vec::new();
    // The last job seen, held back until the next chunk shows whether it goes on: its id and
    // its attempts so far (slices of the chunks).
    let mut open: Option<(String, Vec<RecordBatch>)> = None;
    for (chunk, rows) in attempts.iter().zip(&per_chunk) {
        let total: usize = rows.iter().map(RecordBatch::num_rows).sum();
        if total == 0 {
            continue;
        }
        let mut from = 0;
        if let Some((job, mut parts)) = open.take() {
            if job_at(rows, 0)? == job {
                let head = run_of(chunk, &job, false)?;
                parts.push(chunk.slice(0, head));
                if head == chunk.num_rows() {
                    open = Some((job, parts));
                    continue;
                }
                from = 1;
            }
            out.extend(rollup(&parts)?);
        }
        rows_between(rows, from, total - 1, &mut out);
        let last = job_at(rows, total - 1)?;
        let tail = run_of(chunk, &last, true)?;
        open = Some((last, vec![chunk.slice(chunk.num_rows() - tail, tail)]));
    }
    if let Some((_, parts)) = open {
        out.extend(rollup(&parts)?);
    }
    if out.is_empty() {
        out.push(RecordBatch::new_empty(schema()));
    }
    Ok(out)
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
                col(&|r| Some(r.1.to_string())),
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
            let memo = RollupMemo::default();
            assert_eq!(
                text(&rollup_chunks(&memo, &chunks, &ids).unwrap()),
                whole,
                "cuts {cuts:?}"
            );
            // Again with the same ids: answered from the memo, the same rows.
            assert_eq!(
                text(&rollup_chunks(&memo, &chunks, &ids).unwrap()),
                whole,
                "cuts {cuts:?}, again"
            );
        }
        // One chunk replaced (a write merged into it, a new id): the other's rows come from the
        // memo, and a memo entry of other rows under a reused id shows that they do.
        let memo = RollupMemo::default();
        let first = vec![all.slice(0, 3), all.slice(3, 5)];
        rollup_chunks(&memo, &first, &[1, 2]).unwrap();
        let changed = attempts(&[
            ("a", "free", 1, Some("x")),
            ("a", "paid", 1000, Some("w")),
            ("b", "free", 2, None),
            ("b", "paid", 4, Some("y")),
        ]);
        let got = text(&rollup_chunks(&memo, &[changed.clone(), first[1].clone()], &[3, 2]).unwrap());
        let want = text(&rollup(&[changed.clone(), first[1].clone()]).unwrap());
        assert_eq!(got, want);
        let stale = RollupMemo::default();
        rollup_chunks(&stale, &first, &[1, 2]).unwrap();
        let wrong = text(&rollup_chunks(&stale, &[changed, first[1].clone()], &[1, 2]).unwrap());
        assert_ne!(wrong, want, "an id seen before is answered from the memo");
        assert!(
            got.contains("| a      | k-a      | 1             | 1             | 1003   | 2         |"),
            "{got}"
        );
    }
}
