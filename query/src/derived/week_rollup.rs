//! `week_rollup`: seed 000's drill table for every ISO week of the attempts (SPEC 4), materialized
//! once per write generation by one pass over the sorted attempts. `weekly_metrics` is this table
//! with the weeks a retention sweep touched replaced by their `week_snapshot` rows.
//!
//! [`crate::derived::views::WEEK_ROLLUP_VIEW`] keeps the SQL it reproduces (over `job_attempt` joined to
//! `job_week`); `query/tests/sqlite_differential.rs` checks the rows against DataFusion running
//! that text. The SQL groups every attempt twice (by job, then by idem_key) and holds a distinct
//! set per group, which ran out of query memory at 10 M attempts. Here each job's attempts are
//! adjacent, so a job's figures are kept one job at a time; only the (week, idem_key) pairs with an
//! artifact are held, with their distinct artifacts.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Builder, Int64Builder, RecordBatch, StringBuilder, TimestampMicrosecondBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimestampMicrosecondType};
use datafusion::common::HashMap;

use crate::derived::job_week::WeekCache;
use crate::error::Result;
use crate::tables::job_attempt::{self, timestamp_type};

/// The columns [`week_rollup`] reads: job_id, idem_key, attempt_no, lane, started_at, tokens_in,
/// tokens_out, artifact_id (indexes into [`crate::tables::job_attempt::schema`]).
pub const COLUMNS: [usize; 8] = [0, 1, 2, 3, 4, 7, 8, 9];

/// `week_rollup`'s schema (and `weekly_metrics`'), with the types and nullability DataFusion
/// gives the SQL: iso_week, week_start, jobs, free_attempts, paid_attempts, total_tokens (tokens),
/// unique_accepted_artifacts, duplicate_artifacts, cross_lane_jobs, artifacts, then the four
/// ratios as Float64 (NULL when the denominator is 0).
pub fn schema() -> SchemaRef {
    let int = |name: &str, nullable: bool| Field::new(name, DataType::Int64, nullable);
    let ratio = |name: &str| Field::new(name, DataType::Float64, true);
    Arc::new(Schema::new(vec![
        Field::new("iso_week", DataType::Utf8, true),
        Field::new("week_start", timestamp_type(), true),
        int("jobs", false),
        int("free_attempts", true),
        int("paid_attempts", true),
        int("total_tokens", true),
        int("unique_accepted_artifacts", false),
        int("duplicate_artifacts", false),
        int("cross_lane_jobs", true),
        int("artifacts", true),
        ratio("tokens_per_accepted_artifact"),
        ratio("tokens_per_artifact"),
        ratio("duplicate_artifacts_per_100_jobs"),
        ratio("cross_lane_retries_per_job"),
    ]))
}

/// One idem_key's distinct artifacts within a week.
struct KeyArtifacts<'a> {
    first: &'a str,
    more: Vec<&'a str>,
}

/// One week's sums while the jobs are walked.
#[derive(Default)]
struct Week<'a> {
    label: String,
    jobs: i64,
    free: i64,
    paid: i64,
    tokens: i64,
    /// Σ over jobs of each job's distinct artifacts.
    artifacts: i64,
    cross_lane: i64,
    /// (idem_key → its distinct artifacts) for the attempts with an artifact.
    keys: HashMap<&'a str, KeyArtifacts<'a>>,
}

/// One job's figures while its attempts are walked.
#[derive(Default)]
struct Job<'a> {
    job_id: &'a str,
    first_start: i64,
    free: i64,
    paid: i64,
    tokens: i64,
}

impl<'a> Job<'a> {
    /// Adds the job to its week; `artifacts` holds (idem_key, artifact_id) of each of its
    /// attempts with an artifact (a buffer the walk reuses from job to job).
    fn close(self, artifacts: &[(&'a str, &'a str)], weeks: &mut BTreeMap<i64, Week<'a>>, cache: &mut WeekCache) {
        let w = cache.week(self.first_start);
        let week = weeks.entry(w.start).or_insert_with(|| Week {
            label: w.label.clone(),
            ..Week::default()
        });
        week.jobs += 1;
        week.free += self.free;
        week.paid += self.paid;
        week.tokens += self.tokens;
        week.cross_lane += i64::from(self.free > 0 && self.paid > 0);
        let mut distinct = 0;
        for (i, &(key, artifact)) in artifacts.iter().enumerate() {
            // A job has a few attempts: a look back is cheaper than a set.
            if !artifacts[..i].iter().any(|&(_, a)| a == artifact) {
                distinct += 1;
            }
            let k = week.keys.entry(key).or_insert(KeyArtifacts {
                first: artifact,
                more: Vec::new(),
            });
            if k.first != artifact && !k.more.contains(&artifact) {
                k.more.push(artifact);
            }
        }
        week.artifacts += distinct;
    }
}

/// `a / b` as SQL's `CAST(a AS DOUBLE) / NULLIF(b, 0)`.
fn ratio(a: f64, b: i64) -> Option<f64> {
    (b != 0).then(|| a / b as f64)
}

/// The `week_rollup` rows of `attempts` (`job_attempt` batches in (job_id, attempt_no) order with
/// at least [`COLUMNS`]), one per ISO week in week_start order, in one batch.
///
/// A job belongs to the week of its earliest `started_at`. `total_tokens` adds `tokens_in +
/// tokens_out` (tokens); `artifacts` sums each job's distinct artifact_ids (seed 000
/// `SUM(artifacts)`); `unique_accepted_artifacts` counts the week's idem_keys with an artifact and
/// `duplicate_artifacts` their distinct artifacts beyond the first.
///
/// Errors: a batch without those columns ([`crate::Error::Internal`]).
pub fn week_rollup(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let mut weeks: BTreeMap<i64, Week<'_>> = BTreeMap::new();
    let mut cache = WeekCache::default();
    let mut job: Option<Job<'_>> = None;
    let mut artifacts: Vec<(&str, &str)> = Vec::new();
    for batch in attempts {
        let column = |name: &str| job_attempt::column(batch, name);
        let job_id = column("job_id")?.as_string::<i32>();
        let idem_key = column("idem_key")?.as_string::<i32>();
        let lane = column("lane")?.as_string::<i32>();
        let started_at = column("started_at")?.as_primitive::<TimestampMicrosecondType>();
        let tokens_in = column("tokens_in")?.as_primitive::<Int64Type>();
        let tokens_out = column("tokens_out")?.as_primitive::<Int64Type>();
        let artifact_id = column("artifact_id")?.as_string::<i32>();
        for i in 0..batch.num_rows() {
            let (id, t) = (job_id.value(i), started_at.value(i));
            let j = match &mut job {
                Some(j) if j.job_id == id => j,
                _ => {
                    if let Some(done) = job.take() {
                        done.close(&artifacts, &mut weeks, &mut cache);
                        artifacts.clear();
                    }
                    job.insert(Job {
                        job_id: id,
                        first_start: t,
                        ..Job::default()
                    })
                }
            };
            j.first_start = j.first_start.min(t);
            match lane.value(i) {
                "free" => j.free += 1,
                "paid" => j.paid += 1,
                _ => {}
            }
            j.tokens += tokens_in.value(i) + tokens_out.value(i);
            if artifact_id.is_valid(i) {
                artifacts.push((idem_key.value(i), artifact_id.value(i)));
            }
        }
    }
    if let Some(done) = job.take() {
        done.close(&artifacts, &mut weeks, &mut cache);
    }
    let n = weeks.len();
    let mut iso_week = StringBuilder::with_capacity(n, n * 8);
    let mut week_start = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut ints: Vec<Int64Builder> = (0..8).map(|_| Int64Builder::with_capacity(n)).collect();
    let mut ratios: Vec<Float64Builder> = (0..4).map(|_| Float64Builder::with_capacity(n)).collect();
    for (start, w) in &weeks {
        let unique = w.keys.len() as i64;
        let duplicates: i64 = w.keys.values().map(|k| k.more.len() as i64).sum();
        iso_week.append_value(&w.label);
        week_start.append_value(*start);
        let figures = [
            w.jobs,
            w.free,
            w.paid,
            w.tokens,
            unique,
            duplicates,
            w.cross_lane,
            w.artifacts,
        ];
        for (b, v) in ints.iter_mut().zip(figures) {
            b.append_value(v);
        }
        let values = [
            ratio(w.tokens as f64, unique),
            ratio(w.tokens as f64, w.artifacts),
            ratio(100.0 * duplicates as f64, w.jobs),
            ratio(w.cross_lane as f64, w.jobs),
        ];
        for (b, v) in ratios.iter_mut().zip(values) {
            b.append_option(v);
        }
    }
    let mut cols: Vec<ArrayRef> = vec![Arc::new(iso_week.finish()), Arc::new(week_start.finish())];
    cols.extend(ints.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    cols.extend(ratios.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
    Ok(vec![
        RecordBatch::try_new(schema(), cols).map_err(datafusion::error::DataFusionError::from)?,
    ])
}
