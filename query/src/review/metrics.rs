//! The weekly review: seed 000's drill table for one ISO week (SPEC 4), with an alert for each
//! audit (seed 000's two thresholds, one per audit section of the review, seed 003's gate) marked
//! pass or alert, and the change from the week before.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int64Type, TimestampMicrosecondType};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::session::Session;
use crate::words::{format_count, format_ratio};

/// The alert thresholds (`lane.yaml` `alerts`): an alert fires when the week's value is above.
/// Seed 000 gives the first two; the others are one per audit of the review.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// `alerts.cross_lane_retries_per_job`: 0.20 (a ratio of jobs).
    pub cross_lane_retries_per_job: f64,
    /// `alerts.duplicate_artifacts_per_100_jobs`: 1 (duplicates per 100 jobs).
    pub duplicate_artifacts_per_100_jobs: f64,
    /// `alerts.lane_policy_violations_per_100_jobs`: 1.
    pub lane_policy_violations_per_100_jobs: f64,
    /// `lanes.audit`: false turns the lane policy audit off, and with it its alert.
    pub lane_policy_audit: bool,
    /// `alerts.late_duplicates_per_100_jobs`: 0.
    pub late_duplicates_per_100_jobs: f64,
    /// `alerts.refusals_per_100_attempts`: 50.
    pub refusals_per_100_attempts: f64,
    /// `alerts.same_key_retries_per_100_refusals`: 0.
    pub same_key_retries_per_100_refusals: f64,
    /// `alerts.key_rest_violations_per_100_keyed_attempts`: 1.
    pub key_rest_violations_per_100_keyed_attempts: f64,
    /// `alerts.pool_overload_episodes_per_week`: 0.
    pub pool_overload_episodes_per_week: f64,
    /// `alerts.jobs_past_attempt_bound_per_100_jobs`: 0.
    pub jobs_past_attempt_bound_per_100_jobs: f64,
    /// `alerts.outcome_mismatches_per_100_refusals`: 0.
    pub outcome_mismatches_per_100_refusals: f64,
    /// `alerts.gate_decision_mismatches_per_100_decisions`: 0.
    pub gate_decision_mismatches_per_100_decisions: f64,
    /// `alerts.min_jobs`: 20. A week with fewer jobs shows its ratios, but one above its
    /// threshold is [`AlertState::TooFewJobs`], not an alert.
    pub min_jobs: i64,
    /// `alerts.data_quality_findings_per_100_attempts`: 1.
    pub data_quality_findings_per_100_attempts: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds::from(&laneledger_store::LaneConfig::default())
    }
}

impl From<&laneledger_store::LaneConfig> for Thresholds {
    /// lane.yaml's `alerts` section.
    fn from(c: &laneledger_store::LaneConfig) -> Self {
        let a = &c.alerts;
        Thresholds {
            cross_lane_retries_per_job: a.cross_lane_retries_per_job,
            duplicate_artifacts_per_100_jobs: a.duplicate_artifacts_per_100_jobs,
            lane_policy_violations_per_100_jobs: a.lane_policy_violations_per_100_jobs,
            lane_policy_audit: c.lanes.audit,
            late_duplicates_per_100_jobs: a.late_duplicates_per_100_jobs,
            refusals_per_100_attempts: a.refusals_per_100_attempts,
            same_key_retries_per_100_refusals: a.same_key_retries_per_100_refusals,
            key_rest_violations_per_100_keyed_attempts: a.key_rest_violations_per_100_keyed_attempts,
            pool_overload_episodes_per_week: a.pool_overload_episodes_per_week,
            jobs_past_attempt_bound_per_100_jobs: a.jobs_past_attempt_bound_per_100_jobs,
            outcome_mismatches_per_100_refusals: a.outcome_mismatches_per_100_refusals,
            gate_decision_mismatches_per_100_decisions: a.gate_decision_mismatches_per_100_decisions,
            min_jobs: i64::try_from(a.min_jobs).unwrap_or(i64::MAX),
            data_quality_findings_per_100_attempts: a.data_quality_findings_per_100_attempts,
        }
    }
}

impl Session {
    /// seed 000's alert thresholds from the config's `alerts`.
    pub fn thresholds(&self) -> Thresholds {
        Thresholds::from(self.config())
    }
}

/// One week's counts from the audit tables, the numerators and denominators of the audits'
/// alerts (jobs and attempts come from [`WeekMetrics`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AuditCounts {
    /// Distinct jobs with a row in `lane_policy_violation`.
    pub lane_policy_jobs: i64,
    /// Rows of `duplicate_reconciliation` whose class is `window too short`.
    pub late_duplicates: i64,
    /// Refused attempts (Σ `refusal_by_kind.attempts`).
    pub refusals: i64,
    /// Rows of `same_key_retry`.
    pub same_key_retries: i64,
    /// Rows of `key_rest_violation`.
    pub key_rest_violations: i64,
    /// Attempts that name a `key_id`.
    pub keyed_attempts: i64,
    /// Rows of `pool_overload_episode`.
    pub overload_episodes: i64,
    /// Rows of `attempt_bound_exceeded` (one a job).
    pub jobs_past_bound: i64,
    /// Rows of `outcome_mismatch`.
    pub outcome_mismatches: i64,
    /// Rows of `data_quality`.
    pub data_quality_findings: i64,
}

/// The queries behind [`AuditCounts`]: (field, SQL with `{where}` for the week filter, which is
/// empty or `AND iso_week = '…'`). Each answers `iso_week, n`.
const AUDIT_COUNT_SQL: [(&str, &str); 10] = [
    (
        "lane_policy_jobs",
        "SELECT iso_week, COUNT(DISTINCT job_id) AS n FROM lane_policy_violation WHERE TRUE {where} GROUP BY iso_week",
    ),
    (
        "late_duplicates",
        "SELECT iso_week, COUNT(*) AS n FROM duplicate_reconciliation WHERE class = 'window too short' {where} GROUP BY iso_week",
    ),
    (
        "refusals",
        "SELECT iso_week, CAST(SUM(attempts) AS BIGINT) AS n FROM refusal_by_kind WHERE TRUE {where} GROUP BY iso_week",
    ),
    (
        "same_key_retries",
        "SELECT iso_week, COUNT(*) AS n FROM same_key_retry WHERE TRUE {where} GROUP BY iso_week",
    ),
    (
        "key_rest_violations",
        "SELECT iso_week, COUNT(*) AS n FROM key_rest_violation WHERE TRUE {where} GROUP BY iso_week",
    ),
    (
        "keyed_attempts",
        "SELECT arrow_cast(iso_week, 'Utf8') AS iso_week, n FROM (SELECT iso_week, COUNT(key_id) AS n FROM week_attempt WHERE TRUE {where} GROUP BY iso_week)",
    ),
    (
        "overload_episodes",
        "SELECT iso_week, COUNT(*) AS n FROM pool_overload_episode WHERE TRUE {where} GROUP BY iso_week",
    ),
    (
        "jobs_past_bound",
        "SELECT iso_week, COUNT(*) AS n FROM attempt_bound_exceeded WHERE TRUE {where} GROUP BY iso_week",
    ),
    (
        "outcome_mismatches",
        "SELECT iso_week, COUNT(*) AS n FROM outcome_mismatch WHERE TRUE {where} GROUP BY iso_week",
    ),
    (
        "data_quality_findings",
        "SELECT iso_week, COUNT(*) AS n FROM data_quality WHERE TRUE {where} GROUP BY iso_week",
    ),
];

impl AuditCounts {
    fn set(&mut self, field: &str, n: i64) {
        match field {
            "lane_policy_jobs" => self.lane_policy_jobs = n,
            "late_duplicates" => self.late_duplicates = n,
            "refusals" => self.refusals = n,
            "same_key_retries" => self.same_key_retries = n,
            "key_rest_violations" => self.key_rest_violations = n,
            "keyed_attempts" => self.keyed_attempts = n,
            "overload_episodes" => self.overload_episodes = n,
            "jobs_past_bound" => self.jobs_past_bound = n,
            "outcome_mismatches" => self.outcome_mismatches = n,
            "data_quality_findings" => self.data_quality_findings = n,
            _ => {}
        }
    }
}

/// One week's row of `weekly_metrics` (SPEC 4). Counts are whole numbers; tokens are tokens.
/// A ratio is `None` when its denominator is 0 (shown as "—").
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeekMetrics {
    /// `2026-W47`.
    pub iso_week: String,
    /// Monday 00:00 UTC of the week, RFC 3339.
    pub week_start: String,
    /// Distinct job_id whose first attempt started in the week.
    pub jobs: i64,
    /// Attempts on the free lane.
    pub free_attempts: i64,
    /// Attempts on the paid lane.
    pub paid_attempts: i64,
    /// Σ (tokens_in + tokens_out), tokens.
    pub total_tokens: i64,
    /// Distinct idem_key with at least one artifact.
    pub unique_accepted_artifacts: i64,
    /// Σ over idem_key of (distinct artifact_id − 1).
    pub duplicate_artifacts: i64,
    /// Jobs with both a free and a paid attempt.
    pub cross_lane_jobs: i64,
    /// Σ over jobs of distinct artifacts (seed 000 `SUM(artifacts)`).
    pub artifacts: i64,
    /// total tokens ÷ unique accepted artifacts (the drill table's row).
    pub tokens_per_accepted_artifact: Option<f64>,
    /// total tokens ÷ `SUM(artifacts)` (the seed's first query; counts duplicates).
    pub tokens_per_artifact: Option<f64>,
    /// 100 × duplicate artifacts ÷ jobs.
    pub duplicate_artifacts_per_100_jobs: Option<f64>,
    /// cross-lane jobs ÷ jobs.
    pub cross_lane_retries_per_job: Option<f64>,
    /// The week's spend ([`crate::review::cost`]): filled in the review's weeks, `None` in the weeks list
    /// and for a week a retention sweep touched (its removed attempts' costs were not kept).
    pub spend: Option<crate::review::cost::WeekSpend>,
}

/// An alert's state for the week.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertState {
    /// At or below the threshold.
    Pass,
    /// Above the threshold.
    Alert,
    /// The ratio has no denominator this week.
    NoData,
    /// Above the threshold, but from fewer jobs than `alerts.min_jobs`: shown, not an alert.
    TooFewJobs,
}

impl AlertState {
    /// `pass`, `alert`, `no data` or `too few jobs`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Pass => "pass",
            AlertState::Alert => "alert",
            AlertState::NoData => "no data",
            AlertState::TooFewJobs => "too few jobs",
        }
    }
}

/// One metric checked against its threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertCheck {
    /// The metric's name, also its `lane.yaml` key and (prefixed `laneledger_`) its `/metrics`
    /// gauge, e.g. `same_key_retries_per_100_refusals`.
    pub metric: &'static str,
    /// The metric in words, e.g. `same-key retries per 100 refusals`.
    pub label: &'static str,
    /// This week's value.
    pub value: Option<f64>,
    /// The threshold; the alert fires above it.
    pub threshold: f64,
    /// Pass, alert or no data.
    pub state: AlertState,
    /// The counts behind the value, in words: `3 retries on the key that had just refused, of
    /// 30 refused attempts`.
    pub detail: String,
    /// The id of the review section that lists the rows behind it (an anchor on the week page).
    pub section: &'static str,
}

/// A metric's words and the review section behind it.
pub fn alert_label(metric: &str) -> (&'static str, &'static str) {
    match metric {
        "cross_lane_retries_per_job" => ("cross-lane retries per job", "drill"),
        "duplicate_artifacts_per_100_jobs" => ("duplicate artifacts per 100 jobs", "drill"),
        "lane_policy_violations_per_100_jobs" => (
            "jobs with a lane policy violation per 100 jobs",
            "lane_policy_violation",
        ),
        "late_duplicates_per_100_jobs" => (
            "duplicates past the reconcile window per 100 jobs",
            "duplicate_reconciliation",
        ),
        "refusals_per_100_attempts" => ("refused attempts per 100 attempts", "refusal_by_kind"),
        "same_key_retries_per_100_refusals" => (
            "retries on the key that just refused, per 100 refusals",
            "same_key_retry",
        ),
        "key_rest_violations_per_100_keyed_attempts" => (
            "keys used inside their rest, per 100 keyed attempts",
            "key_rest_violation",
        ),
        "pool_overload_episodes_per_week" => ("pool overload episodes in the week", "pool_overload_episode"),
        "jobs_past_attempt_bound_per_100_jobs" => {
            ("jobs past the attempt bound per 100 jobs", "attempt_bound_exceeded")
        }
        "outcome_mismatches_per_100_refusals" => (
            "outcomes that contradict the refusal, per 100 refusals",
            "outcome_mismatch",
        ),
        "free_admit_miss_rate" => (
            "free admits that missed their slack (freeze the dwell gate)",
            "gate_ratios",
        ),
        "data_quality_findings_per_100_attempts" => ("data quality findings per 100 attempts", "data_quality"),
        "gate_decision_mismatches_per_100_decisions" => (
            "gate decisions unlike the safe decision, per 100 decisions",
            "gate_decision_mismatch",
        ),
        _ => ("alert", "drill"),
    }
}

/// Decimals a metric's value is shown with (in `review`, on the pages).
pub fn alert_decimals(metric: &str) -> usize {
    match metric {
        "cross_lane_retries_per_job" | "free_admit_miss_rate" => 3,
        "pool_overload_episodes_per_week" => 0,
        _ => 2,
    }
}

/// The review of one ISO week.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeekReview {
    /// The week's figures.
    pub week: WeekMetrics,
    /// The figures of the calendar week before it ([`WeekReview::previous_week`]); `None` when
    /// no job started in that week: it is shown as empty, and no change is computed against it.
    pub previous: Option<WeekMetrics>,
    /// The ISO week before `week` (`2026-W01`'s is the last week of 2025), with data or not.
    pub previous_week: String,
    /// The week is still in progress: its end (Monday 00:00 UTC of the next week) is after
    /// now ([`crate::Session::now_micros`]), so its counts will still grow.
    pub partial: bool,
    /// Every alert of the week, in a fixed order ([`week_alerts`]); red ones are those whose
    /// state is [`AlertState::Alert`].
    pub alerts: Vec<AlertCheck>,
}

impl WeekReview {
    /// The alerts that fire this week, in order.
    pub fn firing(&self) -> impl Iterator<Item = &AlertCheck> {
        self.alerts.iter().filter(|a| a.state == AlertState::Alert)
    }
}

/// `metric` checked against `threshold`: above fires, no value is "no data".
pub(crate) fn check(metric: &'static str, value: Option<f64>, threshold: f64, detail: String) -> AlertCheck {
    let state = match value {
        None => AlertState::NoData,
        Some(v) if v > threshold => AlertState::Alert,
        Some(_) => AlertState::Pass,
    };
    let (label, section) = alert_label(metric);
    AlertCheck {
        metric,
        label,
        value,
        threshold,
        state,
        detail,
        section,
    }
}

/// 100 × `n` ÷ `of`; `None` when `of` is 0.
fn per_100(n: i64, of: i64) -> Option<f64> {
    (of > 0).then(|| 100.0 * n as f64 / of as f64)
}

/// Seed 000's two alerts for one week's figures.
pub fn alerts(m: &WeekMetrics, t: &Thresholds) -> Vec<AlertCheck> {
    vec![
        check(
            "cross_lane_retries_per_job",
            m.cross_lane_retries_per_job,
            t.cross_lane_retries_per_job,
            format!(
                "{} of {} jobs had attempts on both lanes",
                format_count(m.cross_lane_jobs),
                format_count(m.jobs)
            ),
        ),
        check(
            "duplicate_artifacts_per_100_jobs",
            m.duplicate_artifacts_per_100_jobs,
            t.duplicate_artifacts_per_100_jobs,
            format!(
                "{} duplicate artifacts in {} jobs",
                format_count(m.duplicate_artifacts),
                format_count(m.jobs)
            ),
        ),
    ]
}

/// The audits' alerts for one week: its figures `m` and its audit counts `c`.
pub fn audit_alerts(m: &WeekMetrics, c: &AuditCounts, t: &Thresholds) -> Vec<AlertCheck> {
    let attempts = m.free_attempts + m.paid_attempts;
    let n = format_count;
    vec![
        if t.lane_policy_audit {
            check(
                "lane_policy_violations_per_100_jobs",
                per_100(c.lane_policy_jobs, m.jobs),
                t.lane_policy_violations_per_100_jobs,
                format!(
                    "{} of {} jobs had an attempt on the wrong lane",
                    n(c.lane_policy_jobs),
                    n(m.jobs)
                ),
            )
        } else {
            // Turned off in lane.yaml: no figure, so never an alert.
            check(
                "lane_policy_violations_per_100_jobs",
                None,
                t.lane_policy_violations_per_100_jobs,
                "off: lanes.audit is false in lane.yaml, so the lane policy is not replayed".to_string(),
            )
        },
        check(
            "late_duplicates_per_100_jobs",
            per_100(c.late_duplicates, m.jobs),
            t.late_duplicates_per_100_jobs,
            format!(
                "{} duplicate artifacts came after the reconcile window, in {} jobs",
                n(c.late_duplicates),
                n(m.jobs)
            ),
        ),
        check(
            "refusals_per_100_attempts",
            per_100(c.refusals, attempts),
            t.refusals_per_100_attempts,
            format!("{} of {} attempts were refused", n(c.refusals), n(attempts)),
        ),
        check(
            "same_key_retries_per_100_refusals",
            per_100(c.same_key_retries, c.refusals),
            t.same_key_retries_per_100_refusals,
            format!(
                "{} retries went to the key that had just refused, of {} refused attempts",
                n(c.same_key_retries),
                n(c.refusals)
            ),
        ),
        check(
            "key_rest_violations_per_100_keyed_attempts",
            per_100(c.key_rest_violations, c.keyed_attempts),
            t.key_rest_violations_per_100_keyed_attempts,
            format!(
                "{} uses of a key inside its rest, of {} attempts that name a key",
                n(c.key_rest_violations),
                n(c.keyed_attempts)
            ),
        ),
        check(
            "pool_overload_episodes_per_week",
            Some(c.overload_episodes as f64),
            t.pool_overload_episodes_per_week,
            match c.overload_episodes {
                1 => "1 pool overload episode".to_string(),
                e => format!("{} pool overload episodes", n(e)),
            },
        ),
        check(
            "jobs_past_attempt_bound_per_100_jobs",
            per_100(c.jobs_past_bound, m.jobs),
            t.jobs_past_attempt_bound_per_100_jobs,
            format!(
                "{} of {} jobs went past the attempt bound",
                n(c.jobs_past_bound),
                n(m.jobs)
            ),
        ),
        check(
            "outcome_mismatches_per_100_refusals",
            per_100(c.outcome_mismatches, c.refusals),
            t.outcome_mismatches_per_100_refusals,
            format!(
                "{} outcomes contradict the refusal's code, of {} refused attempts",
                n(c.outcome_mismatches),
                n(c.refusals)
            ),
        ),
        check(
            "data_quality_findings_per_100_attempts",
            per_100(c.data_quality_findings, attempts),
            t.data_quality_findings_per_100_attempts,
            format!(
                "{} data quality findings, of {} attempts",
                n(c.data_quality_findings),
                n(attempts)
            ),
        ),
    ]
}

/// The gate's alert on decisions that differ from the safe decision, for a week with decisions.
pub fn gate_mismatch_alert(g: &crate::GateWeek, t: &Thresholds) -> AlertCheck {
    check(
        "gate_decision_mismatches_per_100_decisions",
        per_100(g.decision_mismatches, g.decisions),
        t.gate_decision_mismatches_per_100_decisions,
        format!(
            "{} of {} gate decisions differ from the safe decision",
            format_count(g.decision_mismatches),
            format_count(g.decisions)
        ),
    )
}

/// Every alert of one week, in the review's order: seed 000's two, the audits', then the gate's
/// two when the week has gate decisions (`gate`). In a week with fewer jobs than
/// `t.min_jobs`, a ratio above its threshold is [`AlertState::TooFewJobs`] instead of an alert.
pub fn week_alerts(
    m: &WeekMetrics,
    c: &AuditCounts,
    gate: Option<&crate::GateWeek>,
    t: &Thresholds,
    gate_t: &crate::GateThresholds,
) -> Vec<AlertCheck> {
    let mut out = alerts(m, t);
    out.extend(audit_alerts(m, c, t));
    if m.jobs < t.min_jobs {
        for a in out.iter_mut() {
            // A count a week divides by nothing; the gate's ratios (below) divide by decisions.
            if a.state == AlertState::Alert && a.metric != "pool_overload_episodes_per_week" {
                a.state = AlertState::TooFewJobs;
                a.detail += &format!(
                    "; only {} jobs, fewer than the {} a week needs to raise an alert (alerts.min_jobs)",
                    format_count(m.jobs),
                    format_count(t.min_jobs)
                );
            }
        }
    }
    if let Some(g) = gate {
        out.push(crate::review::gate_metrics::gate_alert(g, gate_t));
        out.push(gate_mismatch_alert(g, t));
    }
    out
}

/// Checks an ISO week label `YYYY-Www` (W01–W53, and a week that exists in that year).
pub fn parse_iso_week(label: &str) -> Result<(i32, u32)> {
    let bad = || Error::BadWeek(label.to_string());
    let (y, w) = label.split_once("-W").ok_or_else(bad)?;
    if y.len() != 4 || w.len() != 2 {
        return Err(bad());
    }
    let year: i32 = y.parse().map_err(|_| bad())?;
    let week: u32 = w.parse().map_err(|_| bad())?;
    chrono::NaiveDate::from_isoywd_opt(year, week, chrono::Weekday::Mon).ok_or_else(bad)?;
    Ok((year, week))
}

/// The Monday an ISO week starts.
pub(crate) fn week_monday(year: i32, week: u32) -> Result<chrono::NaiveDate> {
    chrono::NaiveDate::from_isoywd_opt(year, week, chrono::Weekday::Mon)
        .ok_or_else(|| Error::BadWeek(format!("{year}-W{week:02}")))
}

/// The ISO week before `label`: `2026-W47` → `2026-W46`, `2027-W01` → `2026-W53`.
pub fn previous_iso_week(label: &str) -> Result<String> {
    let (y, w) = parse_iso_week(label)?;
    let before = week_monday(y, w)? - chrono::Days::new(7);
    let iso = chrono::Datelike::iso_week(&before);
    Ok(format!("{}-W{:02}", iso.year(), iso.week()))
}

/// When the ISO week `label` ends: Monday 00:00 UTC of the week after, µs since the epoch.
pub fn week_end_micros(label: &str) -> Result<i64> {
    let (y, w) = parse_iso_week(label)?;
    let next = week_monday(y, w)? + chrono::Days::new(7);
    Ok(next.and_time(chrono::NaiveTime::MIN).and_utc().timestamp_micros())
}

/// Whether the ISO week `label` is still in progress at `now` (µs): its end is after now.
/// A label that is not an ISO week is not partial.
pub fn week_is_partial(label: &str, now: i64) -> bool {
    week_end_micros(label).is_ok_and(|end| end > now)
}

/// An Int64 cell by column name; 0 when absent or NULL.
pub(crate) fn i64_col(b: &RecordBatch, name: &str, row: usize) -> i64 {
    b.column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<Int64Type>())
        .filter(|c| c.is_valid(row))
        .map_or(0, |c| c.value(row))
}

/// A Float64 cell by column name; `None` when absent or NULL.
pub(crate) fn f64_col(b: &RecordBatch, name: &str, row: usize) -> Option<f64> {
    b.column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<Float64Type>())
        .filter(|c| c.is_valid(row))
        .map(|c| c.value(row))
}

/// The `iso_week` and `week_start` (RFC 3339) cells of a weekly view's row.
pub(crate) fn week_cols(b: &RecordBatch, row: usize) -> (String, String) {
    let iso_week = b
        .column_by_name("iso_week")
        .and_then(|c| c.as_string_opt::<i32>())
        .map_or(String::new(), |c| c.value(row).to_string());
    let week_start = b
        .column_by_name("week_start")
        .and_then(|c| c.as_primitive_opt::<TimestampMicrosecondType>())
        .map_or(String::new(), |c| laneledger_store::format_timestamp(c.value(row)));
    (iso_week, week_start)
}

fn week_from_row(b: &RecordBatch, row: usize) -> WeekMetrics {
    let (iso_week, week_start) = week_cols(b, row);
    WeekMetrics {
        iso_week,
        week_start,
        jobs: i64_col(b, "jobs", row),
        free_attempts: i64_col(b, "free_attempts", row),
        paid_attempts: i64_col(b, "paid_attempts", row),
        total_tokens: i64_col(b, "total_tokens", row),
        unique_accepted_artifacts: i64_col(b, "unique_accepted_artifacts", row),
        duplicate_artifacts: i64_col(b, "duplicate_artifacts", row),
        cross_lane_jobs: i64_col(b, "cross_lane_jobs", row),
        artifacts: i64_col(b, "artifacts", row),
        tokens_per_accepted_artifact: f64_col(b, "tokens_per_accepted_artifact", row),
        tokens_per_artifact: f64_col(b, "tokens_per_artifact", row),
        duplicate_artifacts_per_100_jobs: f64_col(b, "duplicate_artifacts_per_100_jobs", row),
        cross_lane_retries_per_job: f64_col(b, "cross_lane_retries_per_job", row),
        spend: None,
    }
}

/// The SQL behind the weeks list (also shown on the site).
pub const WEEKS_SQL: &str = "SELECT * FROM weekly_metrics ORDER BY week_start";

/// From `weeks` (oldest first): the one labelled `week`, or the latest when `None`, and the
/// calendar week before it when `weeks` holds it (an empty week is not skipped for an older one).
/// Errors: [`Error::BadWeek`], or [`Error::UnknownWeek`] when it is not there.
pub(crate) fn pick_week<T: Clone>(
    weeks: &[T],
    week: Option<&str>,
    label: impl Fn(&T) -> &str,
) -> Result<(T, Option<T>)> {
    if let Some(w) = week {
        parse_iso_week(w)?;
    }
    let idx = match week {
        Some(w) => weeks.iter().position(|m| label(m) == w),
        None => weeks.len().checked_sub(1),
    }
    .ok_or_else(|| Error::UnknownWeek(week.unwrap_or("(latest)").to_string()))?;
    let before = previous_iso_week(label(&weeks[idx]))?;
    let previous = weeks[..idx].iter().rev().find(|m| label(m) == before.as_str()).cloned();
    Ok((weeks[idx].clone(), previous))
}

impl Session {
    /// The rows of a weekly view (`sql`), one `T` a row, remembered under `key` until the next write.
    pub(crate) async fn weekly_rows<T: Clone + Send + Sync + 'static>(
        &self,
        key: &str,
        sql: &str,
        from_row: fn(&RecordBatch, usize) -> T,
    ) -> Result<Vec<T>> {
        self.memo(key.to_string(), || async {
            let result = self.query(sql).await?;
            Ok(result
                .batches
                .iter()
                .flat_map(|b| (0..b.num_rows()).map(move |row| from_row(b, row)))
                .collect())
        })
        .await
    }

    /// Every ISO week with attempts, oldest first.
    pub async fn weeks(&self) -> Result<Vec<WeekMetrics>> {
        self.weekly_rows("weeks", WEEKS_SQL, week_from_row).await
    }

    /// The review of `week` (`2026-W47`), or of the latest week with data when `None`, with
    /// the week's audit sections ([`Session::audit_sections`]): what `laneledger review`,
    /// `GET /v1/review` and the week pages show.
    ///
    /// Between them the review's queries read every column of `job_attempt`, a few at a time
    /// (`attrs` for the week's cost: a router's own cost and time to first token); they are read
    /// first, in one scan of the ledger, instead of one scan per new set of columns. Then a
    /// session that builds its tables per read builds the week's all together
    /// ([`Session::prepare_week`]), and the drill table and the sections are read at the same
    /// time.
    ///
    /// Errors: those of [`Session::review`] and [`Session::audit_sections`].
    pub async fn review_with_sections(
        &self,
        week: Option<&str>,
        thresholds: &Thresholds,
    ) -> Result<(WeekReview, Vec<crate::Section>)> {
        // One pin for the whole review: its queries catch up with the writes once, not each.
        let this = &self.pinned();
        let attempts = this.attempts.clone();
        let every: Vec<usize> = (0..crate::tables::job_attempt::schema().fields().len()).collect();
        let read = this.read_at_floor(move || attempts.columns(&every));
        tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| Error::Internal(format!("column read: {e}")))??;
        // The week's per-read tables built together, the slowest first, on every core
        // ([`Session::prepare_week`]): the latest week is known once the weeks are.
        let latest;
        let week = match week {
            Some(w) => {
                parse_iso_week(w)?;
                w
            }
            None => {
                latest = pick_week(&this.weeks().await?, None, |m: &WeekMetrics| &m.iso_week)?
                    .0
                    .iso_week;
                &latest
            }
        };
        this.prepare_week(week).await?;
        let (review, sections) = futures::try_join!(this.review(Some(week), thresholds), this.audit_sections(week))?;
        // The sections belong under the review's own label of the week, should it spell the
        // asked label another way.
        if week != review.week.iso_week {
            let sections = this.audit_sections(&review.week.iso_week).await?;
            return Ok((review, sections));
        }
        Ok((review, sections))
    }

    /// The review of `week` (`2026-W47`), or of the latest week with data when `None`.
    ///
    /// Errors: [`Error::BadWeek`] for a label that is not an ISO week, [`Error::UnknownWeek`] when
    /// the ledger holds no job whose first attempt falls in it (or holds no attempt at all).
    pub async fn review(&self, week: Option<&str>, thresholds: &Thresholds) -> Result<WeekReview> {
        // One pin for all its reads ([`Session::pinned`]).
        let this = &self.pinned();
        let (mut m, mut previous) = pick_week(&this.weeks().await?, week, |m: &WeekMetrics| &m.iso_week)?;
        this.add_spend(&mut m).await?;
        if let Some(p) = previous.as_mut() {
            this.add_spend(p).await?;
        }
        let counts = this.audit_counts(Some(&m.iso_week)).await?;
        let counts = counts.get(&m.iso_week).copied().unwrap_or_default();
        let gate_weeks = this.gate_weeks().await?;
        let gate = gate_weeks.iter().find(|g| g.iso_week == m.iso_week);
        let alerts = week_alerts(&m, &counts, gate, thresholds, &this.gate_thresholds());
        Ok(WeekReview {
            alerts,
            previous,
            previous_week: previous_iso_week(&m.iso_week)?,
            partial: week_is_partial(&m.iso_week, this.now_micros()),
            week: m,
        })
    }

    /// Every week's alerts, oldest first (the weeks index): one count query per audit over
    /// every week, remembered until the next write.
    pub async fn alerts_by_week(&self, thresholds: &Thresholds) -> Result<Vec<(String, Vec<AlertCheck>)>> {
        // One pin for all its reads ([`Session::pinned`]).
        let this = &self.pinned();
        let weeks = this.weeks().await?;
        let counts = this.audit_counts(None).await?;
        let gate_weeks = this.gate_weeks().await?;
        let gate_t = this.gate_thresholds();
        Ok(weeks
            .iter()
            .map(|m| {
                let c = counts.get(&m.iso_week).copied().unwrap_or_default();
                let g = gate_weeks.iter().find(|g| g.iso_week == m.iso_week);
                (m.iso_week.clone(), week_alerts(m, &c, g, thresholds, &gate_t))
            })
            .collect())
    }

    /// The audit counts of `week`, or of every week when `None`, by ISO week label.
    pub async fn audit_counts(&self, week: Option<&str>) -> Result<std::collections::HashMap<String, AuditCounts>> {
        if let Some(w) = week {
            parse_iso_week(w)?;
        }
        let key = format!("audit_counts:{}", week.unwrap_or("*"));
        self.memo(key, || async {
            let mut out: std::collections::HashMap<String, AuditCounts> = std::collections::HashMap::new();
            for (field, sql) in AUDIT_COUNT_SQL {
                let filter = week.map(|w| format!("AND iso_week = '{w}'")).unwrap_or_default();
                let result = self.query(&sql.replace("{where}", &filter)).await?;
                for b in &result.batches {
                    for row in 0..b.num_rows() {
                        let (label, _) = week_cols(b, row);
                        out.entry(label).or_default().set(field, i64_col(b, "n", row));
                    }
                }
            }
            Ok(out)
        })
        .await
    }
}

impl WeekReview {
    /// The review as aligned text: the drill table with the week before beside it, then the alerts.
    pub fn to_text(&self) -> String {
        let w = &self.week;
        let p = self.previous.as_ref();
        let mut s = format!(
            "ISO week {} (jobs whose first attempt started from {})\n",
            w.iso_week, w.week_start
        );
        if self.partial {
            s += "PARTIAL: the week is still in progress; its counts will grow until it ends.\n";
        }
        if p.is_none() {
            s += &format!(
                "No attempts in {}, the week before: no change is computed.\n",
                self.previous_week
            );
        }
        s += "\n";
        let head_prev = self.previous_week.clone();
        s += &format!("{:<34} {:>12} {:>12}\n", "metric", w.iso_week, head_prev);
        let rows: Vec<(&str, String, String)> = vec![
            (
                "jobs",
                format_count(w.jobs),
                p.map_or("—".into(), |p| format_count(p.jobs)),
            ),
            (
                "unique accepted artifacts",
                format_count(w.unique_accepted_artifacts),
                p.map_or("—".into(), |p| format_count(p.unique_accepted_artifacts)),
            ),
            (
                "free attempts",
                format_count(w.free_attempts),
                p.map_or("—".into(), |p| format_count(p.free_attempts)),
            ),
            (
                "paid attempts",
                format_count(w.paid_attempts),
                p.map_or("—".into(), |p| format_count(p.paid_attempts)),
            ),
            (
                "total tokens",
                format_count(w.total_tokens),
                p.map_or("—".into(), |p| format_count(p.total_tokens)),
            ),
            (
                "tokens per accepted artifact",
                format_ratio(w.tokens_per_accepted_artifact, 1),
                p.map_or("—".into(), |p| format_ratio(p.tokens_per_accepted_artifact, 1)),
            ),
            (
                "duplicate artifacts",
                format_count(w.duplicate_artifacts),
                p.map_or("—".into(), |p| format_count(p.duplicate_artifacts)),
            ),
            (
                "duplicate artifacts per 100 jobs",
                format_ratio(w.duplicate_artifacts_per_100_jobs, 2),
                p.map_or("—".into(), |p| format_ratio(p.duplicate_artifacts_per_100_jobs, 2)),
            ),
            (
                "cross-lane retries per job",
                format_ratio(w.cross_lane_retries_per_job, 3),
                p.map_or("—".into(), |p| format_ratio(p.cross_lane_retries_per_job, 3)),
            ),
        ];
        for (name, now, before) in rows.into_iter().chain(crate::review::cost::spend_rows(w, p)) {
            s += &format!("{name:<34} {now:>12} {before:>12}\n");
        }
        s += &format!(
            "\n(tokens per artifact counting each job's artifacts, duplicates included: {})\n\n",
            format_ratio(w.tokens_per_artifact, 1)
        );
        if let Some(spend) = &w.spend {
            s += &format!("(spend of {})\n\n", spend.basis());
        }
        let firing: Vec<&AlertCheck> = self.firing().collect();
        if firing.is_empty() {
            let few = self.alerts.iter().filter(|a| a.state == AlertState::TooFewJobs).count();
            if few == 0 {
                s += "No alert this week: every figure is at or below its threshold.\n\n";
            } else {
                s += &format!(
                    "No alert this week: {} above its threshold from too few jobs to alert (alerts.min_jobs).\n\n",
                    crate::words::counted(few as u64, "figure is", "figures are")
                );
            }
        } else {
            s += &format!(
                "{} this week:\n",
                crate::words::counted(firing.len() as u64, "alert", "alerts")
            );
            for a in &firing {
                s += &format!("  ALERT {}: {}\n", a.label, a.detail);
            }
            s += "\n";
        }
        s += "alerts (red first)\n";
        let ordered = firing
            .iter()
            .copied()
            .chain(self.alerts.iter().filter(|a| a.state != AlertState::Alert));
        for a in ordered {
            s += &format!(
                "  {:<44} {:>8}  threshold > {:<6} {}\n",
                a.metric,
                format_ratio(a.value, alert_decimals(a.metric)),
                a.threshold,
                a.state.as_str().to_uppercase()
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_week_labels() {
        assert_eq!(parse_iso_week("2026-W47").unwrap(), (2026, 47));
        assert!(parse_iso_week("2026-W54").is_err());
        assert!(parse_iso_week("2026-47").is_err());
        assert!(parse_iso_week("2021-W53").is_err());
        assert!(parse_iso_week("2020-W53").is_ok());
    }

    #[test]
    fn alerts_fire_above_the_threshold_only() {
        let t = Thresholds::default();
        assert_eq!(
            check("x", Some(0.20), t.cross_lane_retries_per_job, String::new()).state,
            AlertState::Pass
        );
        assert_eq!(
            check("x", Some(0.21), t.cross_lane_retries_per_job, String::new()).state,
            AlertState::Alert
        );
        assert_eq!(check("x", None, 1.0, String::new()).state, AlertState::NoData);
        assert_eq!(check("x", Some(0.0), 0.0, String::new()).state, AlertState::Pass);
    }
}
