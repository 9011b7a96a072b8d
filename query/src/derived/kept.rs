//! Derived tables kept up to date by job: a table whose rows each come from the attempts of one
//! job alone (`job_rollup`, `job_week`, and the audits that replay one job: lane policy, same-key
//! retries, the attempt bound, outcome mismatches) declares how its rows are built from whole jobs
//! ([`ByJob::new`]), and is kept chunk by chunk of the attempt cache
//! ([`crate::tables::job_attempt::AttemptCache::chunks`]).
//!
//! A chunk's rows are built once and kept under the chunk's id; after a write the attempt cache
//! rebuilds only the chunks the written attempts fall into (new ids), so only those are built
//! again. A job whose attempts run across a chunk boundary belongs to neither chunk's kept rows:
//! the jobs at every boundary are built again at each read, all in one call (two jobs per chunk,
//! about 1,200 at 10 M attempts). The rows come out in job order, as a build of every attempt
//! at once gives them; `query/tests/materialized.rs` checks each table against a fresh session's
//! after writes and a sweep.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;

use crate::error::{Error, Result};
use crate::tables::job_attempt::{self, AttemptCache};

/// Builds a table's rows from `job_attempt` batches that hold whole jobs in (job_id, attempt_no)
/// order: the rows in job order, each job's together.
pub type BuildFn = Arc<dyn Fn(&[RecordBatch]) -> Result<Vec<RecordBatch>> + Send + Sync>;

/// A derived table kept by job (see the module).
pub struct ByJob {
    schema: SchemaRef,
    columns: Vec<usize>,
    /// The index of the rows' job_id column.
    job_column: usize,
    build: BuildFn,
    /// The rows of each chunk's inner jobs (all but its first and last), by chunk id: the chunks
    /// of the last read only.
    kept: Mutex<HashMap<u64, Vec<RecordBatch>>>,
    /// Chunks built so far (kept rows made, not taken from `kept`).
    chunk_builds: AtomicU64,
}

/// One stretch of the rows, in job order: a chunk's inner jobs, or one job at a chunk boundary.
enum Piece {
    Inner(usize),
    Boundary(usize),
}

impl ByJob {
    /// A table of `schema` whose rows `build` makes from the `job_attempt` `columns` (job_id
    /// among them), each row naming its job in column `job_column`.
    pub fn new(schema: SchemaRef, columns: &[usize], job_column: usize, build: BuildFn) -> Self {
        ByJob {
            schema,
            columns: columns.to_vec(),
            job_column,
            build,
            kept: Mutex::default(),
            chunk_builds: AtomicU64::new(0),
        }
    }

    /// How many chunks this table has built since it was made (a chunk taken from the kept rows
    /// is not counted).
    pub fn chunk_builds(&self) -> u64 {
        self.chunk_builds.load(Ordering::Relaxed)
    }

    /// The table's rows at the ledger's current write generation.
    pub fn rows(&self, attempts: &AttemptCache) -> Result<Vec<RecordBatch>> {
        let (chunks, ids) = attempts.chunks(&self.columns)?;
        self.rows_of(&chunks, &ids)
    }

    /// The rows of `chunks` (batches in (job_id, attempt_no) order across them, `ids[k]` the id
    /// of chunk `k`), equal row for row to `build` of every chunk at once.
    ///
    /// Errors: `build`'s, or [`Error::Internal`] when `ids` and `chunks` differ in length.
    pub fn rows_of(&self, chunks: &[RecordBatch], ids: &[u64]) -> Result<Vec<RecordBatch>> {
        if ids.len() != chunks.len() {
            return Err(Error::Internal("a kept table needs a chunk id for each chunk".into()));
        }
        let mut kept = crate::engine::cache_lock::lock_or_reset(&self.kept, HashMap::new);
        let mut old = std::mem::take(&mut *kept);
        let mut pieces: Vec<Piece> = Vec::with_capacity(3 * chunks.len());
        let mut boundary: Vec<RecordBatch> = Vec::with_capacity(2 * chunks.len());
        let mut boundary_jobs: Vec<&str> = Vec::with_capacity(2 * chunks.len());
        let mut inner: Vec<Vec<RecordBatch>> = vec![Vec::new(); chunks.len()];
        // (chunk, its inner jobs' rows) of the chunks not kept.
        let mut to_build: Vec<(usize, RecordBatch)> = Vec::new();
        for (k, (chunk, &id)) in chunks.iter().zip(ids).enumerate() {
            let n = chunk.num_rows();
            if n == 0 {
                continue;
            }
            let jobs = job_attempt::column(chunk, "job_id")?.as_string::<i32>();
            let first = jobs.value(0);
            let head = (0..n).take_while(|&i| jobs.value(i) == first).count();
            if boundary_jobs.last() != Some(&first) {
                pieces.push(Piece::Boundary(boundary_jobs.len()));
                boundary_jobs.push(first);
            }
            boundary.push(chunk.slice(0, head));
            if head == n {
                // One job fills the chunk: it may go on in the next one.
                continue;
            }
            let last = jobs.value(n - 1);
            let tail = (0..n).take_while(|&i| jobs.value(n - 1 - i) == last).count();
            match old.remove(&id) {
                Some(rows) => inner[k] = rows,
                None if head + tail == n => {}
                None => to_build.push((k, chunk.slice(head, n - head - tail))),
            }
            pieces.push(Piece::Inner(k));
            pieces.push(Piece::Boundary(boundary_jobs.len()));
            boundary_jobs.push(last);
            boundary.push(chunk.slice(n - tail, tail));
        }
        // The chunks new to this table, side by side.
        self.chunk_builds.fetch_add(to_build.len() as u64, Ordering::Relaxed);
        let built = crate::engine::parallel::map(&to_build, |(_, slice)| (self.build)(std::slice::from_ref(slice)))?;
        for ((k, _), rows) in to_build.iter().zip(built) {
            inner[*k] = rows;
        }
        for piece in &pieces {
            if let Piece::Inner(k) = *piece {
                kept.insert(ids[k], inner[k].clone());
            }
        }
        drop(kept);
        let built = match boundary.is_empty() {
            true => Vec::new(),
            false => (self.build)(&boundary)?,
        };
        // The boundary jobs' rows, in job order: each job's are the next ones naming it.
        let mut cursor = Rows::new(&built, self.job_column)?;
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Inner(k) => out.extend(inner[k].iter().filter(|b| b.num_rows() > 0).cloned()),
                Piece::Boundary(j) => cursor.take_job(boundary_jobs[j], &mut out),
            }
        }
        if cursor.left() {
            return Err(Error::Internal(
                "a kept table's build gave rows out of job order".into(),
            ));
        }
        if out.is_empty() {
            out.push(RecordBatch::new_empty(self.schema.clone()));
        }
        Ok(out)
    }
}

/// A walk over rows in job order that hands out each job's rows as slices.
struct Rows<'a> {
    batches: &'a [RecordBatch],
    jobs: Vec<&'a datafusion::arrow::array::StringArray>,
    /// (batch, row) of the next row.
    at: (usize, usize),
}

impl<'a> Rows<'a> {
    fn new(batches: &'a [RecordBatch], job_column: usize) -> Result<Self> {
        let jobs = batches
            .iter()
            .map(|b| {
                b.columns()
                    .get(job_column)
                    .and_then(|c| c.as_string_opt::<i32>())
                    .ok_or_else(|| Error::Internal(format!("a kept table's column {job_column} is not its job_id")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Rows {
            batches,
            jobs,
            at: (0, 0),
        })
    }

    /// Moves the rows naming `job` at the walk's place to `out`.
    fn take_job(&mut self, job: &str, out: &mut Vec<RecordBatch>) {
        while self.at.0 < self.batches.len() {
            let (b, from) = self.at;
            let ids = self.jobs[b];
            let mut to = from;
            while to < ids.len() && ids.is_valid(to) && ids.value(to) == job {
                to += 1;
            }
            if to > from {
                out.push(self.batches[b].slice(from, to - from));
            }
            if to < ids.len() {
                self.at = (b, to);
                return;
            }
            self.at = (b + 1, 0);
        }
    }

    /// Whether rows are left after the last job.
    fn left(&self) -> bool {
        let (b, row) = self.at;
        self.batches.get(b).is_some_and(|batch| batch.num_rows() > row)
            || self.batches.iter().skip(b + 1).any(|batch| batch.num_rows() > 0)
    }
}

/// The rows of `batches` whose column `column` (Utf8) is `value`: one ISO week's rows of a table
/// with an `iso_week` column.
///
/// Errors: [`Error::Internal`] when the column is not text.
pub fn rows_where(batches: &[RecordBatch], column: usize, value: &str) -> Result<Vec<RecordBatch>> {
    use datafusion::arrow::array::{Scalar, StringArray};
    let value = Scalar::new(StringArray::from(vec![value]));
    let mut out = Vec::with_capacity(batches.len());
    for b in batches {
        let c = b
            .columns()
            .get(column)
            .filter(|c| c.as_string_opt::<i32>().is_some())
            .ok_or_else(|| Error::Internal(format!("column {column} is not text")))?;
        let keep = datafusion::arrow::compute::kernels::cmp::eq(c, &value)
            .map_err(datafusion::error::DataFusionError::from)?;
        let kept = datafusion::arrow::compute::filter_record_batch(b, &keep)
            .map_err(datafusion::error::DataFusionError::from)?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    /// Attempts of two columns: job_id, tokens.
    fn attempts(rows: &[(&str, i64)]) -> RecordBatch {
        RecordBatch::try_from_iter([
            (
                "job_id",
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.0))) as ArrayRef,
            ),
            (
                "tokens_in",
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))) as _,
            ),
        ])
        .unwrap()
    }

    /// A sparse per-job table: one row (job_id, attempts, tokens) for each job with more than one
    /// attempt, as an audit flags only some jobs.
    fn table() -> ByJob {
        let schema = Arc::new(Schema::new(vec![
            Field::new("job_id", DataType::Utf8, false),
            Field::new("attempts", DataType::Int64, false),
            Field::new("tokens", DataType::Int64, false),
        ]));
        let out = schema.clone();
        ByJob::new(
            schema,
            &[0, 7],
            0,
            Arc::new(move |batches: &[RecordBatch]| {
                let mut jobs: Vec<(String, i64, i64)> = Vec::new();
                for b in batches {
                    let ids = b.column(0).as_string::<i32>();
                    let tokens = b.column(1).as_primitive::<datafusion::arrow::datatypes::Int64Type>();
                    for i in 0..b.num_rows() {
                        match jobs.last_mut() {
                            Some(j) if j.0 == ids.value(i) => {
                                j.1 += 1;
                                j.2 += tokens.value(i);
                            }
                            _ => jobs.push((ids.value(i).to_string(), 1, tokens.value(i))),
                        }
                    }
                }
                jobs.retain(|j| j.1 > 1);
                Ok(vec![
                    RecordBatch::try_new(
                        out.clone(),
                        vec![
                            Arc::new(StringArray::from_iter_values(jobs.iter().map(|j| j.0.as_str()))),
                            Arc::new(Int64Array::from_iter_values(jobs.iter().map(|j| j.1))),
                            Arc::new(Int64Array::from_iter_values(jobs.iter().map(|j| j.2))),
                        ],
                    )
                    .unwrap(),
                ])
            }),
        )
    }

    fn text(batches: &[RecordBatch]) -> String {
        datafusion::arrow::util::pretty::pretty_format_batches(batches)
            .unwrap()
            .to_string()
    }

    /// The whole build of `all`, the answer every cut into chunks must give.
    fn whole(t: &ByJob, all: &RecordBatch) -> String {
        text(&(t.build)(std::slice::from_ref(all)).unwrap())
    }

    #[test]
    fn every_cut_into_chunks_gives_the_whole_builds_rows_and_a_second_read_builds_nothing() {
        // Jobs of 1 to 4 attempts, so that cuts fall inside jobs, between them, and chunks hold a
        // single job or a piece of one.
        let rows: Vec<(String, i64)> = (0..9)
            .flat_map(|j| (0..(j % 4 + 1)).map(move |a| (format!("j{j}"), 10 * j + a)))
            .collect();
        let refs: Vec<(&str, i64)> = rows.iter().map(|(j, t)| (j.as_str(), *t)).collect();
        let all = attempts(&refs);
        let n = all.num_rows();
        for first in 1..n {
            for second in first..n {
                let cuts = [0, first, second, n];
                let chunks: Vec<RecordBatch> = cuts.windows(2).map(|w| all.slice(w[0], w[1] - w[0])).collect();
                let ids: Vec<u64> = (1..=3).collect();
                let t = table();
                assert_eq!(
                    text(&t.rows_of(&chunks, &ids).unwrap()),
                    whole(&t, &all),
                    "cuts {cuts:?}"
                );
                let builds = t.chunk_builds();
                assert_eq!(
                    text(&t.rows_of(&chunks, &ids).unwrap()),
                    whole(&t, &all),
                    "cuts {cuts:?}, again"
                );
                assert_eq!(t.chunk_builds(), builds, "cuts {cuts:?}: the second read is kept rows");
            }
        }
    }

    #[test]
    fn a_chunk_with_a_new_id_is_built_again_and_only_it() {
        let t = table();
        let before = attempts(&[
            ("a", 1),
            ("a", 2),
            ("b", 3),
            ("c", 4),
            ("c", 5),
            ("d", 6),
            ("e", 7),
            ("e", 8),
            ("f", 9),
        ]);
        let chunks = vec![before.slice(0, 5), before.slice(5, 4)];
        t.rows_of(&chunks, &[1, 2]).unwrap();
        assert_eq!(t.chunk_builds(), 2);
        // A write lands in the first chunk: a retry of b, a new job bb with two attempts.
        let after = attempts(&[
            ("a", 1),
            ("a", 2),
            ("b", 3),
            ("b", 30),
            ("bb", 1),
            ("bb", 2),
            ("c", 4),
            ("c", 5),
        ]);
        let changed = vec![after.clone(), chunks[1].clone()];
        let got = text(&t.rows_of(&changed, &[3, 2]).unwrap());
        assert_eq!(
            got,
            whole(
                &t,
                &datafusion::arrow::compute::concat_batches(&after.schema(), &changed).unwrap()
            )
        );
        assert_eq!(t.chunk_builds(), 3, "chunk 2's rows were kept");
        for job in ["a", "b", "bb", "c", "e"] {
            assert!(got.contains(&format!("| {job} ")), "{job}: {got}");
        }
        // Kept rows are found by id: rows kept under an id that now names other rows would show.
        let stale = table();
        stale.rows_of(&chunks, &[1, 2]).unwrap();
        let wrong = text(&stale.rows_of(&changed, &[1, 2]).unwrap());
        assert!(!wrong.contains("| bb "), "{wrong}");
    }

    #[test]
    fn rows_where_keeps_one_weeks_rows() {
        let b = attempts(&[("2026-W46", 1), ("2026-W47", 2), ("2026-W46", 3)]);
        let got = rows_where(&[b.clone(), b.slice(1, 1)], 0, "2026-W46").unwrap();
        assert_eq!(got.iter().map(RecordBatch::num_rows).collect::<Vec<_>>(), vec![2]);
        assert!(rows_where(&[b], 1, "x").is_err(), "tokens_in is not text");
    }
}
