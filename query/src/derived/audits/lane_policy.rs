//! `lane_policy_violation` (SPEC 5.1): replaying each job's attempts in attempt_no order through
//! seed 000 `next_lane`, an attempt whose lane differs from `next_lane`'s answer; with lane.yaml's
//! own `lanes.tiers`, through the same rule over those tiers in order ([`replay`]).
//!
//! Two kinds with the original lanes: `free_where_paid` — a free attempt after an ambiguous or
//! permanent outcome, once pinned, or past the free budget; `paid_where_free` — paying before the
//! free lane's budget was spent, with nothing that pins. With other tiers the kind names the two
//! lanes the same way (`{lane}_where_{expected_lane}`), and `lane_not_configured` flags a lane no
//! tier names. The replay keeps `next_lane`'s own `pinned` answer, so once a job should have been
//! pinned, every later free attempt is flagged too. `lanes.audit: false` turns it off.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use super::rows::{int, text};
use super::{AuditAttempt, AuditSettings, Snapshot};
use crate::error::Result;

/// iso_week, job_id, attempt_no, lane, expected_lane, kind (`free_where_paid` |
/// `paid_where_free`), reason, previous_outcome, free_attempts_before, model.
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
        Field::new("model", DataType::Utf8, true),
    ]))
}

/// One tier of the lane policy: a lane, the attempts a job may use on it, and the outcomes on it
/// that move the job to the next tier (lane.yaml `lanes.tiers`, or free then paid).
#[derive(Debug, Clone, PartialEq)]
pub struct Tier {
    /// The lane's name, as records spell it.
    pub name: String,
    /// Attempts a job may use on this tier before it moves on (not enforced on the last tier).
    pub max_attempts: u32,
    /// Outcomes (`ok | retryable | ambiguous | permanent`) that move a job on at once.
    pub pin_on: Vec<String>,
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
    /// What the replayed policy answered.
    pub expected_lane: &'static str,
    /// `{lane}_where_{expected_lane}` (`free_where_paid`, `paid_where_free` with the original two
    /// lanes), or `lane_not_configured` for a lane no tier names.
    pub kind: String,
    /// Why the policy answered so.
    pub reason: String,
    /// The outcome of the attempt before, if any.
    pub previous_outcome: Option<&'static str>,
    /// Attempts on the first tier (free) before this one.
    pub free_attempts_before: u32,
}

/// The tiers the replay walks: lane.yaml's `lanes.tiers`, or seed 000's free (with the settings'
/// budget and pin_on) then paid.
fn tiers(s: &AuditSettings) -> Vec<Tier> {
    match &s.tiers {
        Some(tiers) if !tiers.is_empty() => tiers.clone(),
        _ => vec![
            Tier {
                name: "free".into(),
                max_attempts: s.max_free_attempts,
                pin_on: s.pin_on.clone(),
            },
            Tier {
                name: "paid".into(),
                max_attempts: 1,
                pin_on: Vec::new(),
            },
        ],
    }
}

/// Why the policy moved a job on before an attempt.
enum Moved {
    /// It stays where it was.
    No,
    /// The previous outcome is in the tier's pin_on.
    Pinned(&'static str),
    /// The tier's budget is spent.
    Budget,
}

/// Replays one job's attempts (in attempt_no order) and returns its violations.
///
/// Generalizes seed 000 `next_lane` to any number of tiers: a job starts on the first tier and
/// only moves down; before each attempt, an outcome in the current tier's pin_on moves it one
/// tier on, and so does a spent budget (again while the next tier's is spent too). With the two
/// tiers free, paid this is `next_lane` exactly (a test keeps the two equal), and the moves
/// follow the policy's answers, not the lanes used: once it should have moved on, every later
/// attempt on an earlier tier is flagged.
pub fn replay(attempts: &[AuditAttempt<'_>], s: &AuditSettings) -> Vec<Violation> {
    if !s.lane_audit {
        return Vec::new();
    }
    let tiers = tiers(s);
    let names: Vec<&'static str> = tiers
        .iter()
        .map(|t| laneledger_store::model::lanes::intern(&t.name).as_str())
        .collect();
    let last_tier = tiers.len() - 1;
    let mut used = vec![0u32; tiers.len()];
    let (mut cur, mut last) = (0usize, None::<&'static str>);
    let mut out = Vec::new();
    for a in attempts {
        let mut expected = cur;
        let mut moved = Moved::No;
        if expected < last_tier {
            if let Some(o) = last.filter(|o| tiers[expected].pin_on.iter().any(|p| p == o)) {
                expected += 1;
                moved = Moved::Pinned(o);
            } else if used[expected] >= tiers[expected].max_attempts {
                expected += 1;
                moved = Moved::Budget;
            }
            while expected < last_tier && used[expected] >= tiers[expected].max_attempts {
                expected += 1;
            }
        }
        let lane = a.lane.as_str();
        let ran = names.iter().position(|n| *n == lane);
        let want = names[expected];
        let finding = match ran {
            None => Some((
                "lane_not_configured".to_string(),
                format!("{lane} is not a tier of lane.yaml ({})", names.join(", ")),
            )),
            Some(i) if i < expected => {
                let why = if i < cur {
                    format!("once pinned, a job stays on {want}")
                } else {
                    match moved {
                        Moved::Pinned(o) => format!("a {lane} attempt after an {o} outcome: pin to {want}"),
                        Moved::Budget | Moved::No => format!(
                            "past the {lane} budget: {} of {} {lane} attempts used",
                            used[i], tiers[i].max_attempts
                        ),
                    }
                };
                Some((format!("{lane}_where_{want}"), why))
            }
            Some(i) if i > expected => Some((
                format!("{lane}_where_{want}"),
                format!(
                    "{lane} before the {want} budget was spent ({} of {} {want} attempts), with nothing that pins",
                    used[expected], tiers[expected].max_attempts
                ),
            )),
            Some(_) => None,
        };
        if let Some((kind, reason)) = finding {
            out.push(Violation {
                row: a.row,
                job_id: a.job_id.to_string(),
                attempt_no: a.attempt_no,
                lane,
                expected_lane: want,
                kind,
                reason,
                previous_outcome: last,
                free_attempts_before: used[0],
            });
        }
        cur = expected;
        if let Some(i) = ran {
            used[i] += 1;
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
        text(v.iter().map(|x| Some(x.kind.as_str()))),
        text(v.iter().map(|x| Some(x.reason.as_str()))),
        text(v.iter().map(|x| x.previous_outcome)),
        int(v.iter().map(|x| Some(i64::from(x.free_attempts_before)))),
        text(v.iter().map(|x| snap.get(x.row).model)),
    ];
    Ok(RecordBatch::try_new(schema(), cols).map_err(datafusion::error::DataFusionError::from)?)
}
