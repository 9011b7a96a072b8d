//! `GET /weeks`: every ISO week with data, one row a week, from the view `weekly_metrics`, and
//! the trend of each alert ratio against its threshold (seed 000's two from `weekly_metrics`,
//! seed 003's free-admit miss rate from `gate_weekly`).

use askama::Template;
use axum::extract::State;
use laneledger_query::{AlertCheck, AlertState, WeekMetrics, format_count, format_ratio};

use crate::error::{AppError, Error};
use crate::pages::html::HtmlTemplate;
use crate::pages::review::threshold_text;
use crate::pages::trends::{TrendView, trend_chart};
use crate::server::state::AppState;

/// An alert's state in words and as a CSS class (pass green, ALERT red, no data grey, too few
/// jobs amber).
pub(crate) struct StateView {
    /// `pass`, `ALERT`, `no data` or `too few jobs`.
    pub word: &'static str,
    /// `pass`, `alert`, `nodata` or `fewjobs`.
    pub class: &'static str,
}

impl From<AlertState> for StateView {
    fn from(s: AlertState) -> Self {
        match s {
            AlertState::Pass => StateView {
                word: "pass",
                class: "pass",
            },
            AlertState::Alert => StateView {
                word: "ALERT",
                class: "alert",
            },
            AlertState::NoData => StateView {
                word: "no data",
                class: "nodata",
            },
            AlertState::TooFewJobs => StateView {
                word: "too few jobs",
                class: "fewjobs",
            },
        }
    }
}

/// Decimals shown for a ratio metric, as `laneledger review` shows them.
pub(crate) fn decimals(metric: &str) -> usize {
    laneledger_query::review::metrics::alert_decimals(metric)
}

/// One line of a weeks table.
pub(crate) struct WeekRow {
    pub iso_week: String,
    /// The Monday the week starts, `2026-11-16`.
    pub monday: String,
    pub jobs: String,
    pub total_tokens: String,
    pub tokens_per_accepted_artifact: String,
    pub duplicate_artifacts: String,
    pub duplicates_per_100_jobs: String,
    pub duplicates_state: StateView,
    pub cross_lane_per_job: String,
    pub cross_lane_state: StateView,
    /// The alerts that fire in the week, in words, with the section anchor behind each.
    pub firing: Vec<(&'static str, &'static str)>,
    /// Alerts checked in the week.
    pub checked: usize,
    /// The week the page is about (highlighted).
    pub current: bool,
    /// The week is still in progress at the session's "now".
    pub partial: bool,
}

impl WeekRow {
    /// The row for `m`, with the week's `alerts` (every one, [`laneledger_query::review::metrics::week_alerts`]);
    /// `now` (µs) tells whether the week is still in progress.
    pub(crate) fn new(m: &WeekMetrics, alerts: &[AlertCheck], current: bool, now: i64) -> Self {
        let state_of = |metric: &str| {
            alerts
                .iter()
                .find(|a| a.metric == metric)
                .map_or(AlertState::NoData, |a| a.state)
        };
        WeekRow {
            iso_week: m.iso_week.clone(),
            monday: m.week_start.get(..10).unwrap_or(&m.week_start).to_string(),
            jobs: format_count(m.jobs),
            total_tokens: format_count(m.total_tokens),
            tokens_per_accepted_artifact: format_ratio(m.tokens_per_accepted_artifact, 1),
            duplicate_artifacts: format_count(m.duplicate_artifacts),
            duplicates_per_100_jobs: format_ratio(
                m.duplicate_artifacts_per_100_jobs,
                decimals("duplicate_artifacts_per_100_jobs"),
            ),
            duplicates_state: state_of("duplicate_artifacts_per_100_jobs").into(),
            cross_lane_per_job: format_ratio(m.cross_lane_retries_per_job, decimals("cross_lane_retries_per_job")),
            cross_lane_state: state_of("cross_lane_retries_per_job").into(),
            firing: alerts
                .iter()
                .filter(|a| a.state == AlertState::Alert)
                .map(|a| (a.label, a.section))
                .collect(),
            checked: alerts.len(),
            current,
            partial: laneledger_query::review::metrics::week_is_partial(&m.iso_week, now),
        }
    }
}

/// The weeks table's rows, newest first: `weeks` (oldest first) with their alerts `by_week`
/// ([`laneledger_query::Session::alerts_by_week`]); `current` is highlighted, and a week still
/// in progress at `now` (µs) is marked partial.
pub(crate) fn week_rows(
    weeks: &[WeekMetrics],
    by_week: &[(String, Vec<AlertCheck>)],
    current: Option<&str>,
    now: i64,
) -> Vec<WeekRow> {
    weeks
        .iter()
        .rev()
        .map(|m| {
            let alerts = by_week
                .iter()
                .find(|(w, _)| *w == m.iso_week)
                .map_or(&[][..], |(_, a)| a.as_slice());
            WeekRow::new(m, alerts, current == Some(m.iso_week.as_str()), now)
        })
        .collect()
}

/// The weeks page.
#[derive(Template)]
#[template(path = "weeks.html")]
struct WeeksPage {
    nav: &'static str,
    title: &'static str,
    /// Newest first.
    weeks: Vec<WeekRow>,
    /// The alert ratios week by week.
    trends: Vec<TrendView>,
    /// The SQL behind the table and seed 000's charts.
    weeks_sql: &'static str,
}

/// The trend charts: seed 000's two alerts over every week, seed 003's over the weeks with gate
/// decisions (none when no decision was logged).
/// `by_week` gives each week's alert states: a point from too few jobs is drawn as such.
async fn trends(
    state: &AppState,
    weeks: &[WeekMetrics],
    by_week: &[(String, Vec<AlertCheck>)],
) -> Result<Vec<TrendView>, Error> {
    // Every part of the page reads one write generation (Session::pinned).
    let session = state.session.pinned();
    // The weeks whose `metric` is above its threshold from too few jobs.
    let too_few = |metric: &str| -> Vec<String> {
        by_week
            .iter()
            .filter(|(_, alerts)| {
                alerts
                    .iter()
                    .any(|a| a.metric == metric && a.state == AlertState::TooFewJobs)
            })
            .map(|(w, _)| w.clone())
            .collect()
    };
    let t = &state.thresholds;
    let mut out = Vec::new();
    type Pick = fn(&WeekMetrics) -> Option<f64>;
    let seed000: [(&'static str, &'static str, &'static str, f64, Pick); 2] = [
        (
            "cross-lane retries per job",
            "cross_lane_retries_per_job",
            "Jobs with both a free and a paid attempt ÷ jobs, per ISO week of the job's first attempt.",
            t.cross_lane_retries_per_job,
            |m| m.cross_lane_retries_per_job,
        ),
        (
            "duplicate artifacts per 100 jobs",
            "duplicate_artifacts_per_100_jobs",
            "100 × duplicate artifacts (Σ over idem_key of distinct artifact_id − 1) ÷ jobs, per ISO week.",
            t.duplicate_artifacts_per_100_jobs,
            |m| m.duplicate_artifacts_per_100_jobs,
        ),
    ];
    for (title, metric, description, threshold, pick) in seed000 {
        let points: Vec<(String, Option<f64>)> = weeks.iter().map(|m| (m.iso_week.clone(), pick(m))).collect();
        let threshold_s = threshold_text(threshold);
        out.push(TrendView {
            title,
            metric,
            description,
            svg: trend_chart(
                title,
                metric,
                &points,
                &too_few(metric),
                threshold,
                &threshold_s,
                decimals(metric),
            )?,
            threshold: threshold_s,
            sql: format!("SELECT iso_week, {metric} FROM weekly_metrics ORDER BY week_start"),
        });
    }
    let gate = session.gate_weeks().await?;
    if !gate.is_empty() {
        let (title, metric) = ("free admits that missed slack", "free_admit_miss_rate");
        let threshold = session.gate_thresholds().free_admit_miss_rate;
        let threshold_s = threshold_text(threshold);
        let points: Vec<(String, Option<f64>)> = gate
            .iter()
            .map(|g| (g.iso_week.clone(), g.free_admit_miss_rate))
            .collect();
        out.push(TrendView {
            title,
            metric,
            description: "admit_free decisions that recorded slack_miss ÷ admit_free decisions, per ISO week of decided_at, for the weeks with gate decisions (above the threshold, freeze dwell_gate_enabled).",
            svg: trend_chart(
                title,
                metric,
                &points,
                &too_few(metric),
                threshold,
                &threshold_s,
                decimals(metric),
            )?,
            threshold: threshold_s,
            sql: format!("SELECT iso_week, {metric} FROM gate_weekly ORDER BY week_start"),
        });
    }
    Ok(out)
}

/// `GET /weeks`.
pub(crate) async fn list(State(state): State<AppState>) -> Result<HtmlTemplate<impl Template>, AppError> {
    // Every part of the page reads one write generation (Session::pinned).
    let session = state.session.pinned();
    let weeks = session.weeks().await?;
    let by_week = session.alerts_by_week(&state.thresholds).await?;
    let trends = trends(&state, &weeks, &by_week).await?;
    let rows = week_rows(&weeks, &by_week, None, session.now_micros());
    Ok(HtmlTemplate(WeeksPage {
        nav: "weeks",
        title: "Weeks",
        weeks: rows,
        trends,
        weeks_sql: laneledger_query::review::metrics::WEEKS_SQL,
    }))
}
