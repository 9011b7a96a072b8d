//! `week_attempt`: every attempt of `job_attempt` with its job's ISO week in front (`iso_week`, the
//! week of the job's first `started_at`, as `job_week` gives it), so that a week's attempts are
//! `WHERE iso_week = '2026-W47'` instead of a join of every attempt with `job_week`:
//!
//! ```sql
//! SELECT w.iso_week, a.* FROM job_attempt a JOIN job_week w ON a.job_id = w.job_id
//! ```
//!
//! The attempt columns are the attempt cache's own arrays (no copy); only `iso_week` is built,
//! as a dictionary (4 bytes a row) kept by chunk id ([`WeekColumn`]). A job whose attempts run
//! across a chunk boundary takes the earliest start of all its chunks' rows at each read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, DictionaryArray, Int32Array, RecordBatch, StringArray,
};
use datafusion::arrow::compute::kernels::cmp::eq;
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef, TimestampMicrosecondType};

use crate::derived::job_week::{WeekCache, iso_week_of, week_start_of};
use crate::error::{Error, Result};
use crate::tables::job_attempt::{self, AttemptCache};

/// The table's name.
pub const TABLE: &str = "week_attempt";

/// `iso_week`'s type: a dictionary of the week labels, one key a row.
pub fn week_type() -> DataType {
    DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8))
}

/// iso_week, then every column of [`job_attempt::schema`].
pub fn schema() -> SchemaRef {
    let mut fields = vec![Arc::new(Field::new("iso_week", week_type(), false))];
    fields.extend(job_attempt::schema().fields().iter().cloned());
    Arc::new(Schema::new(fields))
}

/// The week column of one chunk as its own rows give it: each job's week from the earliest start
/// among its rows in this chunk, and what the jobs at its two ends need to be mended with.
struct ChunkWeeks {
    /// Week label of each row, as keys into `labels`.
    keys: Int32Array,
    labels: Vec<String>,
    /// `labels` as the dictionary's values, built once.
    values: ArrayRef,
    /// The first job: id, earliest start in this chunk, rows.
    first: (String, i64, usize),
    /// The last job (the first again in a chunk of one job).
    last: (String, i64, usize),
}

/// `iso_week` of the attempt cache's chunks, kept by chunk id: after a write only the chunks the
/// write changed are walked again.
#[derive(Default)]
pub struct WeekColumn {
    kept: Mutex<HashMap<u64, Arc<ChunkWeeks>>>,
    builds: AtomicU64,
}

/// The attempt columns [`WeekColumn`] reads: job_id, started_at.
const WEEK_COLUMNS: [usize; 2] = [0, 4];

impl WeekColumn {
    /// How many chunks this column has walked since it was made.
    pub fn chunk_builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    /// The `week_attempt` columns `columns` (indexes into [`schema`], in that order) at the
    /// ledger's current generation, one batch a chunk of the attempt cache.
    ///
    /// Errors: the cache's.
    pub fn read(&self, attempts: &AttemptCache, columns: &[usize]) -> Result<Vec<RecordBatch>> {
        Ok(self
            .read_week(attempts, columns, None)?
            .into_iter()
            .map(|(b, _)| b)
            .collect())
    }

    /// [`WeekColumn::read`] of the chunks holding rows whose `iso_week` is `week`, when given,
    /// each with the mask of those rows (`None`: every row), found by the week's dictionary key:
    /// a query of one week filters by 4-byte keys instead of comparing the label row by row, and
    /// its other conditions see only that week's rows. The scan applies the masks as it reads
    /// ([`crate::tables::ledger_table::MaskedBatches`]), a chunk at a time, so that no copy of
    /// the week is held whole.
    ///
    /// Errors: the cache's.
    pub fn read_week(
        &self,
        attempts: &AttemptCache,
        columns: &[usize],
        week: Option<&str>,
    ) -> Result<Vec<(RecordBatch, Option<BooleanArray>)>> {
        let wants_week = columns.contains(&0) || week.is_some();
        let mut wanted: Vec<usize> = columns.iter().filter(|&&c| c > 0).map(|&c| c - 1).collect();
        if wants_week {
            wanted.extend(WEEK_COLUMNS);
        }
        wanted.sort_unstable();
        wanted.dedup();
        let (chunks, ids) = attempts.chunks(&wanted)?;
        let weeks = match wants_week {
            true => self.weeks(&chunks, &ids)?,
            false => Vec::new(),
        };
        let schema = Arc::new(
            schema()
                .project(columns)
                .map_err(datafusion::error::DataFusionError::from)?,
        );
        let mut out = Vec::with_capacity(chunks.len());
        for (k, chunk) in chunks.iter().enumerate() {
            // The rows of `week`: none, all, or some (a mask of the chunk's rows).
            let mask = match week {
                None => None,
                Some(w) => match week_mask(&weeks[k], w)? {
                    Pick::None => continue,
                    Pick::All => None,
                    Pick::Some(mask) => Some(mask),
                },
            };
            let cols: Vec<ArrayRef> = columns
                .iter()
                .map(|&c| match c {
                    0 => weeks[k].clone(),
                    c => chunk
                        .column(wanted.iter().position(|&w| w == c - 1).expect("read"))
                        .clone(),
                })
                .collect();
            let options = datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(chunk.num_rows()));
            let batch = RecordBatch::try_new_with_options(schema.clone(), cols, &options)
                .map_err(datafusion::error::DataFusionError::from)?;
            out.push((batch, mask));
        }
        if out.is_empty() {
            out.push((RecordBatch::new_empty(schema), None));
        }
        Ok(out)
    }

    /// The week of each row of `chunks` (as [`WeekColumn::weeks`] takes them), to look up row by
    /// row: for the derived tables whose rows show their job's week.
    pub(crate) fn labels(&self, chunks: &[RecordBatch], ids: &[u64]) -> Result<RowWeeks> {
        let weeks = self
            .weeks(chunks, ids)?
            .iter()
            .map(|w| {
                w.as_dictionary_opt::<Int32Type>()
                    .cloned()
                    .ok_or_else(|| Error::Internal("iso_week is not a dictionary".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RowWeeks { weeks })
    }

    /// The week column of each of `chunks` (job_id and started_at among their columns, rows in
    /// (job_id, attempt_no) order across them), `ids[k]` the id of chunk `k`: the whole attempt
    /// cache, as one read gave it.
    fn weeks(&self, chunks: &[RecordBatch], ids: &[u64]) -> Result<Vec<ArrayRef>> {
        let mut own: Vec<Option<Arc<ChunkWeeks>>> = {
            let held = crate::engine::cache_lock::lock_or_reset(&self.kept, HashMap::new);
            ids.iter().map(|id| held.get(id).cloned()).collect()
        };
        // The chunks new to the column, walked side by side.
        let new: Vec<usize> = (0..own.len()).filter(|&k| own[k].is_none()).collect();
        self.builds.fetch_add(new.len() as u64, Ordering::Relaxed);
        let walked = crate::engine::parallel::map(&new, |&k| chunk_weeks(&chunks[k]))?;
        for (k, w) in new.into_iter().zip(walked) {
            own[k] = Some(Arc::new(w));
        }
        let own: Vec<Arc<ChunkWeeks>> = own.into_iter().flatten().collect();
        {
            let mut held = crate::engine::cache_lock::lock_or_reset(&self.kept, HashMap::new);
            *held = ids.iter().copied().zip(own.iter().cloned()).collect();
        }
        // The earliest start of each job that runs across a boundary, over all its chunks.
        let mut first_start: Vec<(i64, i64)> = own.iter().map(|w| (w.first.1, w.last.1)).collect();
        let mut k = 0;
        while k < own.len() {
            // Chunks k..=m hold one job at their joins.
            let mut m = k;
            let mut earliest = own[k].last.1;
            while m + 1 < own.len() && own[m + 1].first.0 == own[k].last.0 && !own[k].last.0.is_empty() {
                m += 1;
                earliest = earliest.min(own[m].first.1);
                if own[m].first.2 < chunks[m].num_rows() {
                    break;
                }
            }
            if m > k {
                first_start[k].1 = earliest;
                for (j, start) in first_start.iter_mut().enumerate().take(m + 1).skip(k + 1) {
                    start.0 = earliest;
                    if own[j].first.2 == chunks[j].num_rows() {
                        start.1 = earliest;
                    }
                }
            }
            k = m.max(k + 1);
        }
        own.iter()
            .zip(first_start)
            .map(|(w, (first, last))| mended(w, first, last))
            .collect()
    }
}

/// Each row's job's ISO week, chunk by chunk ([`WeekColumn::labels`]).
pub(crate) struct RowWeeks {
    weeks: Vec<DictionaryArray<Int32Type>>,
}

impl RowWeeks {
    /// How many chunks' weeks are held.
    pub(crate) fn chunks(&self) -> usize {
        self.weeks.len()
    }

    /// The week of row `i` of chunk `k`. Errors: [`Error::Internal`] past the chunks read.
    pub(crate) fn get(&self, k: usize, i: usize) -> Result<&str> {
        let w = self
            .weeks
            .get(k)
            .ok_or_else(|| Error::Internal(format!("no week column for chunk {k}")))?;
        Ok(w.values().as_string::<i32>().value(w.keys().value(i) as usize))
    }
}

/// One job's rows in a chunk: (first row, end, earliest start).
type JobRun = (usize, usize, i64);

/// [`ChunkWeeks`] of one chunk.
fn chunk_weeks(chunk: &RecordBatch) -> Result<ChunkWeeks> {
    let job_id = job_attempt::column(chunk, "job_id")?.as_string::<i32>();
    let started = job_attempt::column(chunk, "started_at")?.as_primitive::<TimestampMicrosecondType>();
    let n = chunk.num_rows();
    let mut keys: Vec<i32> = Vec::with_capacity(n);
    let mut labels: Vec<String> = Vec::new();
    let mut cache = WeekCache::default();
    // (first row, end, earliest start) of the chunk's first job and of its last.
    let (mut first, mut last): (Option<JobRun>, Option<JobRun>) = (None, None);
    let mut at = 0;
    while at < n {
        let id = job_id.value(at);
        let (mut end, mut earliest) = (at, i64::MAX);
        while end < n && job_id.value(end) == id {
            earliest = earliest.min(started.value(end));
            end += 1;
        }
        let key = label_key(&mut labels, &cache.week(earliest).label);
        keys.extend(std::iter::repeat_n(key, end - at));
        first.get_or_insert((at, end, earliest));
        last = Some((at, end, earliest));
        at = end;
    }
    let end = |j: Option<JobRun>| match j {
        Some((from, to, earliest)) => (job_id.value(from).to_string(), earliest, to - from),
        None => (String::new(), i64::MAX, 0),
    };
    Ok(ChunkWeeks {
        keys: Int32Array::from(keys),
        values: Arc::new(StringArray::from(labels.clone())),
        labels,
        first: end(first),
        last: end(last),
    })
}

/// Which rows of a chunk a week filter keeps.
enum Pick {
    None,
    All,
    Some(BooleanArray),
}

/// The rows of `weeks` (a chunk's `iso_week`) whose label is `week`.
fn week_mask(weeks: &ArrayRef, week: &str) -> Result<Pick> {
    let weeks = weeks
        .as_dictionary_opt::<Int32Type>()
        .ok_or_else(|| Error::Internal("iso_week is not a dictionary".into()))?;
    let labels = weeks.values().as_string::<i32>();
    let Some(key) = (0..labels.len()).find(|&k| labels.is_valid(k) && labels.value(k) == week) else {
        return Ok(Pick::None);
    };
    let keys = weeks.keys();
    let mask = eq(keys, &Int32Array::new_scalar(key as i32)).map_err(datafusion::error::DataFusionError::from)?;
    // iso_week is never null; a null key would be no match.
    Ok(match mask.true_count() {
        0 => Pick::None,
        n if n == keys.len() && keys.null_count() == 0 => Pick::All,
        _ => Pick::Some(mask),
    })
}

/// The key of `label` in `labels`, added when new.
fn label_key(labels: &mut Vec<String>, label: &str) -> i32 {
    match labels.iter().position(|l| l == label) {
        Some(k) => k as i32,
        None => {
            labels.push(label.to_string());
            (labels.len() - 1) as i32
        }
    }
}

/// `w`'s week column with its first job's rows in the week of `first` and its last job's in the
/// week of `last` (earliest starts over every chunk the job runs across).
fn mended(w: &ChunkWeeks, first: i64, last: i64) -> Result<ArrayRef> {
    let n = w.keys.len();
    // Labels added for a mended job, after the chunk's own.
    let mut labels: Option<Vec<String>> = None;
    let mut keys: Option<Vec<i32>> = None;
    for (range, own, earliest) in [(0..w.first.2, w.first.1, first), (n - w.last.2..n, w.last.1, last)] {
        let start = week_start_of(earliest);
        if range.is_empty() || week_start_of(own) == start {
            continue;
        }
        let key = label_key(labels.get_or_insert_with(|| w.labels.clone()), &iso_week_of(start));
        keys.get_or_insert_with(|| w.keys.values().to_vec())[range].fill(key);
    }
    let keys = keys.map_or_else(|| w.keys.clone(), Int32Array::from);
    let values: ArrayRef = labels.map_or_else(|| w.values.clone(), |l| Arc::new(StringArray::from(l)));
    let array = DictionaryArray::<Int32Type>::try_new(keys, values).map_err(|e| Error::Internal(e.to_string()))?;
    Ok(Arc::new(array))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::TimestampMicrosecondArray;

    fn micros(rfc3339: &str) -> i64 {
        laneledger_store::parse_timestamp(rfc3339).unwrap()
    }

    /// A chunk of (job_id, started_at) rows.
    fn chunk(rows: &[(&str, &str)]) -> RecordBatch {
        let jobs: ArrayRef = Arc::new(StringArray::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
        let starts = TimestampMicrosecondArray::from(rows.iter().map(|r| micros(r.1)).collect::<Vec<_>>());
        let starts: ArrayRef = Arc::new(starts.with_timezone("UTC"));
        let schema = Schema::new(vec![
            Field::new("job_id", DataType::Utf8, false),
            Field::new("started_at", job_attempt::timestamp_type(), false),
        ]);
        RecordBatch::try_new(Arc::new(schema), vec![jobs, starts]).unwrap()
    }

    fn labels(weeks: &[ArrayRef]) -> Vec<Vec<String>> {
        weeks
            .iter()
            .map(|w| {
                let w = w.as_any_dictionary();
                let values = w.values().as_string::<i32>();
                w.normalized_keys()
                    .iter()
                    .map(|&k| values.value(k).to_string())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_job_across_chunk_boundaries_takes_its_earliest_start_in_every_chunk() {
        // W47 is 2026-11-16..22, W46 the week before, W48 the week after.
        let (w46, w47, w48) = ("2026-11-12T09:00:00Z", "2026-11-18T09:00:00Z", "2026-11-24T09:00:00Z");
        let chunks = vec![
            // b starts in W47 here, but its attempt in the next chunk started in W46.
            chunk(&[("a", w47), ("a", w48), ("b", w47)]),
            chunk(&[("b", w46), ("b", w48), ("c", w48)]),
            // c fills a chunk of its own, and its earliest start is two chunks on.
            chunk(&[("c", w48)]),
            chunk(&[("c", w46), ("d", w48), ("d", w47)]),
        ];
        let column = WeekColumn::default();
        let weeks = column.weeks(&chunks, &[1, 2, 3, 4]).unwrap();
        assert_eq!(
            labels(&weeks),
            vec![
                vec!["2026-W47", "2026-W47", "2026-W46"],
                vec!["2026-W46", "2026-W46", "2026-W46"],
                vec!["2026-W46"],
                vec!["2026-W46", "2026-W47", "2026-W47"],
            ]
        );
        assert_eq!(column.chunk_builds(), 4);
        // The same chunks again are taken from what was kept; a changed chunk is walked again,
        // and its neighbours' boundary jobs follow it.
        column.weeks(&chunks, &[1, 2, 3, 4]).unwrap();
        assert_eq!(column.chunk_builds(), 4);
        let mut changed = chunks.clone();
        changed[1] = chunk(&[("b", w48), ("b", w48), ("c", w48)]);
        let weeks = column.weeks(&changed, &[1, 5, 3, 4]).unwrap();
        assert_eq!(column.chunk_builds(), 5);
        assert_eq!(labels(&weeks)[0], vec!["2026-W47", "2026-W47", "2026-W47"]);
        assert_eq!(labels(&weeks)[1], vec!["2026-W47", "2026-W47", "2026-W46"]);
    }
}
