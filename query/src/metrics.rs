//! The weekly review: seed 000's drill table for one ISO week (SPEC 4), with seed 000's two alert
//! thresholds marked pass or alert, and the change from the week before.

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{Float64Type, Int64Type, TimestampMicrosecondType};
use serde::Serialize;

use crate::error::{Error, Result};
use crate::session::Session;

/// Seed 000's alert thresholds (`lane.yaml` `alerts`): an alert fires when the value is above.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Thresholds {
    /// `alerts.cross_lane_retries_per_job`: 0.20 (a ratio of jobs).
    pub cross_lane_retries_per_job: f64,
    /// `alerts.duplicate_artifacts_per_100_jobs`: 1 (duplicates per 100 jobs).
    pub duplicate_artifacts_per_100_jobs: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            cross_lane_retries_per_job: 0.20,
            duplicate_artifacts_per_100_jobs: 1.0,
        }
    }
}

impl From<&laneledger_store::LaneConfig> for Thresholds {
    /// lane.yaml's `alerts` section.
    fn from(c: &laneledger_store::LaneConfig) -> Self {
        Thresholds {
            cross_lane_retries_per_job: c.alerts.cross_lane_retries_per_job,
            duplicate_artifacts_per_100_jobs: c.alerts.duplicate_artifacts_per_100_jobs,
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
}

impl AlertState {
    /// `pass`, `alert` or `no data`.
    pub fn as_str(self) -> &'static str {
        match self {
            AlertState::Pass => "pass",
            AlertState::Alert => "alert",
            AlertState::NoData => "no data",
        }
    }
}

/// One metric checked against its threshold.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertCheck {
    /// The seed's metric name, e.g. `cross_lane_retries_per_job`.
    pub metric: &'static str,
    /// This week's value.
    pub value: Option<f64>,
    /// The threshold; the alert fires above it.
    pub threshold: f64,
    /// Pass, alert or no data.
    pub state: AlertState,
}

/// The review of one ISO week.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WeekReview {
    /// The week's figures.
    pub week: WeekMetrics,
    /// The figures of the week before it that has data, if any.
    pub previous: Option<WeekMetrics>,
    /// Seed 000's two alerts, then seed 003's free-admit miss rate when the week has gate decisions.
    pub alerts: Vec<AlertCheck>,
}

fn check(metric: &'static str, value: Option<f64>, threshold: f64) -> AlertCheck {
    let state = match value {
        None => AlertState::NoData,
        Some(v) if v > threshold => AlertState::Alert,
        Some(_) => AlertState::Pass,
    };
    AlertCheck {
        metric,
        value,
        threshold,
        state,
    }
}

/// Seed 000's alerts for one week's figures.
pub fn alerts(m: &WeekMetrics, t: &Thresholds) -> Vec<AlertCheck> {
    vec![
        check(
            "cross_lane_retries_per_job",
            m.cross_lane_retries_per_job,
            t.cross_lane_retries_per_job,
        ),
        check(
            "duplicate_artifacts_per_100_jobs",
            m.duplicate_artifacts_per_100_jobs,
            t.duplicate_artifacts_per_100_jobs,
        ),
    ]
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
    }
}

/// The SQL behind the weeks list (also shown on the site).
pub const WEEKS_SQL: &str = "SELECT * FROM weekly_metrics ORDER BY week_start";

/// From `weeks` (oldest first): the one labelled `week`, or the latest when `None`, and the one
/// before it. Errors: [`Error::BadWeek`], or [`Error::UnknownWeek`] when it is not there.
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
    Ok((weeks[idx].clone(), idx.checked_sub(1).map(|i| weeks[i].clone())))
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
    /// Between them the review's queries read every column of `job_attempt` but `attrs`, a few at
    /// a time; they are read first, in one scan of the ledger
    /// ([`crate::job_attempt::WIDE_COLUMNS`]), instead of one scan per new set of columns. With
    /// a week named, the drill table and the sections are built at the same time (on two cores,
    /// `week_rollup`'s walk beside the audits').
    ///
    /// Errors: those of [`Session::review`] and [`Session::audit_sections`].
    pub async fn review_with_sections(
        &self,
        week: Option<&str>,
        thresholds: &Thresholds,
    ) -> Result<(WeekReview, Vec<crate::Section>)> {
        let attempts = self.attempts.clone();
        tokio::task::spawn_blocking(move || attempts.columns(&crate::job_attempt::WIDE_COLUMNS))
            .await
            .map_err(|e| Error::Internal(format!("column read: {e}")))??;
        let (review, sections) = match week {
            Some(w) => futures::try_join!(self.review(Some(w), thresholds), self.audit_sections(w))?,
            None => {
                let review = self.review(None, thresholds).await?;
                let sections = self.audit_sections(&review.week.iso_week).await?;
                (review, sections)
            }
        };
        // The sections belong under the review's own label of the week, should it spell the
        // asked label another way.
        if week.is_some_and(|w| w != review.week.iso_week) {
            let sections = self.audit_sections(&review.week.iso_week).await?;
            return Ok((review, sections));
        }
        Ok((review, sections))
    }

    /// The review of `week` (`2026-W47`), or of the latest week with data when `None`.
    ///
    /// Errors: [`Error::BadWeek`] for a label that is not an ISO week, [`Error::UnknownWeek`] when
    /// the ledger holds no job whose first attempt falls in it (or holds no attempt at all).
    pub async fn review(&self, week: Option<&str>, thresholds: &Thresholds) -> Result<WeekReview> {
        let (m, previous) = pick_week(&self.weeks().await?, week, |m: &WeekMetrics| &m.iso_week)?;
        let mut alerts = alerts(&m, thresholds);
        // Seed 003's freeze alert, when gate decisions were logged that week.
        if let Some(g) = self.gate_weeks().await?.iter().find(|g| g.iso_week == m.iso_week) {
            alerts.push(crate::gate_metrics::gate_alert(g, &self.gate_thresholds()));
        }
        Ok(WeekReview {
            alerts,
            previous,
            week: m,
        })
    }
}

/// A ratio for people: `—` when it has no denominator, else `decimals` places with thousands
/// separators (`1,184.0`).
pub fn format_ratio(v: Option<f64>, decimals: usize) -> String {
    match v {
        None => "—".to_string(),
        Some(x) => group_thousands(&format!("{x:.decimals$}")),
    }
}

/// A count with thousands separators (`355,200`).
pub fn format_count(n: i64) -> String {
    group_thousands(&n.to_string())
}

fn group_thousands(s: &str) -> String {
    let (sign, rest) = s.strip_prefix('-').map_or(("", s), |r| ("-", r));
    let (int, frac) = rest.split_once('.').map_or((rest, None), |(i, f)| (i, Some(f)));
    let mut out = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{out}.{f}"),
        None => format!("{sign}{out}"),
    }
}

impl WeekReview {
    /// The review as aligned text: the drill table with the week before beside it, then the alerts.
    pub fn to_text(&self) -> String {
        let w = &self.week;
        let p = self.previous.as_ref();
        let mut s = format!(
            "ISO week {} (jobs whose first attempt started from {})\n\n",
            w.iso_week, w.week_start
        );
        let head_prev = p.map_or("—".to_string(), |p| p.iso_week.clone());
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
        for (name, now, before) in rows {
            s += &format!("{name:<34} {now:>12} {before:>12}\n");
        }
        s += &format!(
            "\n(seed 000 query 1, dividing by SUM(artifacts): tokens per artifact {})\n\nalerts\n",
            format_ratio(w.tokens_per_artifact, 1)
        );
        for a in &self.alerts {
            let decimals = if a.metric == "duplicate_artifacts_per_100_jobs" {
                2
            } else {
                3
            };
            s += &format!(
                "  {:<34} {:>8}  threshold > {:<6} {}\n",
                a.metric,
                format_ratio(a.value, decimals),
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
    fn ratios_without_denominator_show_a_dash() {
        assert_eq!(format_ratio(None, 1), "—");
        assert_eq!(format_ratio(Some(1184.0), 1), "1,184.0");
        assert_eq!(format_ratio(Some(0.15), 3), "0.150");
        assert_eq!(format_count(355_200), "355,200");
        assert_eq!(format_count(-1_000), "-1,000");
        assert_eq!(format_count(999), "999");
    }

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
            check("x", Some(0.20), t.cross_lane_retries_per_job).state,
            AlertState::Pass
        );
        assert_eq!(
            check("x", Some(0.21), t.cross_lane_retries_per_job).state,
            AlertState::Alert
        );
        assert_eq!(check("x", None, 1.0).state, AlertState::NoData);
    }
}
