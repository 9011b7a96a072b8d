//! `job_week`: each job's ISO week (SPEC 4), the week of its first attempt's `started_at`,
//! materialized by one pass over the sorted attempts and kept by job ([`kept`]).
//!
//! [`crate::derived::views::JOB_WEEK_VIEW`] keeps the SQL it reproduces:
//!
//! ```sql
//! SELECT job_id,
//!        date_trunc('week', MIN(started_at)) AS week_start,
//!        to_char(MIN(started_at), '%G-W%V')  AS iso_week
//! FROM job_attempt
//! GROUP BY job_id
//! ```
//!
//! Grouping every attempt by job_id with a hash table is what made the weekly review run out of
//! query memory at 10 M attempts; the attempts already come in (job_id, attempt_no) order, so one
//! walk finds each job's earliest start. `query/tests/sqlite_differential.rs` checks the rows
//! against DataFusion running the SQL text.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, AsArray, RecordBatch, StringBuilder, TimestampMicrosecondBuilder};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef, TimestampMicrosecondType};

use crate::derived::kept::ByJob;
use crate::error::Result;
use crate::tables::job_attempt::{self, BATCH_ROWS, timestamp_type};

/// `2026-W47` for µs since the epoch.
pub fn iso_week_of(micros: i64) -> String {
    use chrono::Datelike;
    let t = chrono::DateTime::<chrono::Utc>::from_timestamp_micros(micros).unwrap_or_default();
    let w = t.iso_week();
    format!("{}-W{:02}", w.year(), w.week())
}

/// The columns [`job_weeks`] reads: job_id, attempt_no (the cache's key) and started_at.
pub const COLUMNS: [usize; 3] = [0, 2, 4];

/// µs in a day.
const DAY_MICROS: i64 = 86_400_000_000;

/// One ISO week: its Monday 00:00 UTC (µs since the epoch) and its label (`2026-W47`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IsoWeek {
    /// Monday 00:00 UTC, µs since the epoch (`date_trunc('week', t)`).
    pub start: i64,
    /// `2026-W47` (`to_char(t, '%G-W%V')`).
    pub label: String,
}

/// Monday 00:00 UTC of the ISO week holding `micros` (µs since the epoch), as µs.
pub fn week_start_of(micros: i64) -> i64 {
    let days = micros.div_euclid(DAY_MICROS);
    // 1970-01-01 was a Thursday: 3 days after a Monday.
    let monday = days - (days + 3).rem_euclid(7);
    monday * DAY_MICROS
}

/// Remembers the weeks asked for: in job order with random ids, consecutive jobs belong to any of
/// the ledger's weeks, and building a label is a date format.
#[derive(Default)]
pub struct WeekCache {
    /// The weeks built, the most recent last; at most [`WeekCache::HELD`].
    held: Vec<IsoWeek>,
}

impl WeekCache {
    /// Weeks held; past it the oldest is dropped (a walk over years of attempts).
    const HELD: usize = 64;

    /// The ISO week holding `micros` (µs since the epoch).
    pub fn week(&mut self, micros: i64) -> &IsoWeek {
        let start = week_start_of(micros);
        let at = match self.held.iter().rposition(|w| w.start == start) {
            Some(at) => at,
            None => {
                if self.held.len() == Self::HELD {
                    self.held.remove(0);
                }
                self.held.push(IsoWeek {
                    start,
                    label: iso_week_of(start),
                });
                self.held.len() - 1
            }
        };
        &self.held[at]
    }
}

/// `job_week`'s schema, as DataFusion types the SQL: job_id Utf8, week_start
/// `Timestamp(µs, "UTC")` (nullable: MIN), iso_week Utf8 (nullable).
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("job_id", datafusion::arrow::datatypes::DataType::Utf8, false),
        Field::new("week_start", timestamp_type(), true),
        Field::new("iso_week", datafusion::arrow::datatypes::DataType::Utf8, true),
    ]))
}

/// One job of the attempts: its id, its earliest `started_at` (µs) and its number of attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStart<'a> {
    /// The job.
    pub job_id: &'a str,
    /// Its earliest `started_at`, µs since the epoch.
    pub first_start: i64,
    /// Its attempts.
    pub attempts: usize,
}

/// Each job of `attempts` in job_id order, from `job_attempt` batches in (job_id, attempt_no)
/// order with at least [`COLUMNS`].
///
/// Errors: a batch without those columns ([`crate::Error::Internal`]).
pub fn first_starts(attempts: &[RecordBatch]) -> Result<Vec<JobStart<'_>>> {
    let mut out: Vec<JobStart<'_>> = Vec::new();
    for batch in attempts {
        let job_id = job_attempt::column(batch, "job_id")?.as_string::<i32>();
        let started_at = job_attempt::column(batch, "started_at")?.as_primitive::<TimestampMicrosecondType>();
        for i in 0..batch.num_rows() {
            let (id, t) = (job_id.value(i), started_at.value(i));
            match out.last_mut() {
                Some(j) if j.job_id == id => {
                    j.first_start = j.first_start.min(t);
                    j.attempts += 1;
                }
                _ => out.push(JobStart {
                    job_id: id,
                    first_start: t,
                    attempts: 1,
                }),
            }
        }
    }
    Ok(out)
}

/// The `job_week` rows of `attempts` (see [`first_starts`]), one per job in job_id order, in
/// batches of at most [`BATCH_ROWS`] rows (at least one, possibly empty).
///
/// Errors: as [`first_starts`].
pub fn job_weeks(attempts: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let jobs = first_starts(attempts)?;
    let schema = schema();
    let mut weeks = WeekCache::default();
    let mut out = Vec::new();
    for chunk in jobs.chunks(BATCH_ROWS) {
        let mut job_id = StringBuilder::with_capacity(chunk.len(), chunk.iter().map(|j| j.job_id.len()).sum());
        let mut week_start = TimestampMicrosecondBuilder::with_capacity(chunk.len()).with_timezone("UTC");
        let mut iso_week = StringBuilder::with_capacity(chunk.len(), chunk.len() * 8);
        for j in chunk {
            let w = weeks.week(j.first_start);
            job_id.append_value(j.job_id);
            week_start.append_value(w.start);
            iso_week.append_value(&w.label);
        }
        let cols: Vec<ArrayRef> = vec![
            Arc::new(job_id.finish()),
            Arc::new(week_start.finish()),
            Arc::new(iso_week.finish()),
        ];
        out.push(RecordBatch::try_new(schema.clone(), cols).map_err(datafusion::error::DataFusionError::from)?);
    }
    if out.is_empty() {
        out.push(RecordBatch::new_empty(schema));
    }
    Ok(out)
}

/// `job_week` kept by job ([`crate::derived::kept`]): after a write only the chunks of the
/// attempt cache the write fell into are walked again.
pub fn kept() -> ByJob {
    ByJob::new(
        schema(),
        &COLUMNS,
        0,
        Arc::new(|attempts: &[RecordBatch]| job_weeks(attempts)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micros(rfc3339: &str) -> i64 {
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_micros()
    }

    #[test]
    fn week_starts_on_monday_utc() {
        // 2026-11-16 is a Monday; its whole week maps to it, the next Monday starts the next.
        let monday = micros("2026-11-16T00:00:00Z");
        assert_eq!(week_start_of(monday), monday);
        assert_eq!(week_start_of(micros("2026-11-22T23:59:59.999999Z")), monday);
        assert_eq!(
            week_start_of(micros("2026-11-23T00:00:00Z")),
            micros("2026-11-23T00:00:00Z")
        );
        // Before the epoch, too: 1969-12-31 (a Wednesday) is in the week of Monday 1969-12-29.
        assert_eq!(
            week_start_of(micros("1969-12-31T12:00:00Z")),
            micros("1969-12-29T00:00:00Z")
        );
        let mut cache = WeekCache::default();
        assert_eq!(cache.week(monday).label, "2026-W47");
        // ISO week 1 of 2027 starts on Monday 2027-01-04; 2027-01-03 is still 2026-W53.
        assert_eq!(cache.week(micros("2027-01-03T10:00:00Z")).label, "2026-W53");
        assert_eq!(cache.week(micros("2027-01-04T00:00:00Z")).label, "2027-W01");
        // Weeks asked for again in any order keep their labels.
        assert_eq!(cache.week(micros("2026-11-18T00:00:00Z")).label, "2026-W47");
        assert_eq!(cache.week(micros("2027-01-05T00:00:00Z")).label, "2027-W01");
        for day in 0..500 {
            let t = micros("2026-01-01T12:00:00Z") + day * DAY_MICROS;
            assert_eq!(cache.week(t).label, iso_week_of(t));
        }
        assert_eq!(cache.held.len(), WeekCache::HELD);
    }
}
