//! `lane_policy_violation` (SPEC 5.1): replaying each job's attempts in attempt_no order through
//! seed 000 `next_lane`, an attempt whose lane differs from `next_lane`'s answer.
//!
//! Two kinds: `free_where_paid` — a free attempt after an ambiguous or permanent outcome, once
//! pinned, or past the free budget; `paid_where_free` — paying before the free lane's budget was
//! spent, with nothing that pins. The replay keeps `next_lane`'s own `pinned` answer, so once a
//! job should have been pinned, every later free attempt is flagged too.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use laneledger_store::Lane;
use laneledger_store::policy::lane::PIN_ON;

use super::rows::{int, text};
use super::{AuditAttempt, AuditSettings, Snapshot};
use crate::error::Result;

/// iso_week, job_id, attempt_no, lane, expected_lane, kind (`free_where_paid` |
/// `paid_where_free`), reason, previous_outcome, free_attempts_before.
pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("iso_week", DataType::Utf8, false),
        Field::new("job_id", DataType::Utf8, false),
        Field::new("attempt_no", DataType::Int64, false),
        Field::new("lane", DataType::Utf8, false),
        Field::new("expected_lane", DataType::Utf8, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("reason", DataType::Utf8, false),
        Field::new("previous_outcome", DataType::Utf8, true),
        Field::new("free_attempts_before", DataType::Int64, false),
    ]))
}

/// One flagged attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The attempt's row in the [`Snapshot`].
    pub row: usize,
    /// The job.
    pub job_id: String,
    /// The attempt.
    pub attempt_no: u32,
    /// The lane it ran on.
    pub lane: &'static str,
    /// What seed 000 `next_lane` answered.
    pub expected_lane: &'static str,
    /// `free_where_paid` or `paid_where_free`.
    pub kind: &'static str,
    /// Why `next_lane` answered so.
    pub reason: String,
    /// The outcome of the attempt before, if any.
    pub previous_outcome: Option<&'static str>,
    /// Free attempts before this one.
    pub free_attempts_before: u32,
}

/// seed 000 `next_lane`, with lane.yaml's budget and pin_on list. With the seed's settings it is
/// exactly `laneledger_store::policy::lane::next_lane`.
fn next_lane(free_attempts: u32, pinned: bool, last: &str, s: &AuditSettings) -> (&'static str, bool) {
    if s.pin_on.iter().map(String::as_str).eq(PIN_ON) {
        return laneledger_store::policy::lane::next_lane(free_attempts, pinned, last, s.max_free_attempts);
    }
    if pinned || s.pin_on.iter().any(|p| p == last) || free_attempts >= s.max_free_attempts {
        return ("paid", true);
    }
    ("free", false)
}

/// Replays one job's attempts (in attempt_no order) and returns its violations.
pub fn replay(attempts: &[AuditAttempt<'_>], s: &AuditSettings) -> Vec<Violation> {
    let mut out = Vec::new();
    let (mut free, mut pinned, mut last) = (0u32, false, None::<&'static str>);
    for a in attempts {
        let (expected, pin) = next_lane(free, pinned, last.unwrap_or(""), s);
        let lane = a.lane.as_str();
        if lane != expected {
            let (kind, reason) = if a.lane == Lane::Free {
                let why = if pinned {
                    "once pinned, a job stays on paid".to_string()
                } else if let Some(o) = last.filter(|o| s.pin_on.iter().any(|p| p == o)) {
                    format!("a free attempt after an {o} outcome: pin to paid")
                } else {
                    format!(
                        "past the free budget: {free} of {} free attempts used",
                        s.max_free_attempts
                    )
                };
                ("free_where_paid", why)
            } else {
                (
                    "paid_where_free",
                    format!(
                        "paid before the free budget was spent ({free} of {} free attempts), with nothing that pins",
                        s.max_free_attempts
                    ),
                )
            };
            out.push(Violation {
                row: a.row,
                job_id: a.job_id.to_string(),
                attempt_no: a.attempt_no,
                lane,
                expected_lane: expected,
                kind,
                reason,
                previous_outcome: last,
                free_attempts_before: free,
            });
        }
        pinned = pin;
        if a.lane == Lane::Free {
            free += 1;
        }
        last = a.outcome.map(|o| o.as_str());
    }
    out
}

/// The `lane_policy_violation` rows of the snapshot: every week's, or (`week`) one ISO week's.
pub fn build(snap: &Snapshot, s: &AuditSettings, week: Option<&str>) -> Result<RecordBatch> {
    let mut v: Vec<Violation> = Vec::new();
    snap.for_each_job(week, |job| v.extend(replay(job, s)));
    let cols = vec![
        text(v.iter().map(|x| Some(snap.week(x.row)))),
        text(v.iter().map(|x| Some(x.job_id.as_str()))),
        int(v.iter().map(|x| Some(i64::from(x.attempt_no)))),
        text(v.iter().map(|x| Some(x.lane))),
        text(v.iter().map(|x| Some(x.expected_lane))),
        text(v.iter().map(|x| Some(x.kind))),
        text(v.iter().map(|x| Some(x.reason.as_str()))),
        text(v.iter().map(|x| x.previous_outcome)),
        int(v.iter().map(|x| Some(i64::from(x.free_attempts_before)))),
    ];
    Ok(RecordBatch::try_new(schema(), cols).map_err(datafusion::error::DataFusionError::from)?)
}
