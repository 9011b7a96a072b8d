//! `GET /weeks`: every ISO week with data, one row a week, from the view `weekly_metrics`.

use askama::Template;
use axum::extract::State;
use laneledger_query::metrics::alerts;
use laneledger_query::{AlertState, Thresholds, WeekMetrics, format_count, format_ratio};

use crate::AppState;
use crate::error::AppError;
use crate::html::HtmlTemplate;

/// An alert's state in words and as a CSS class (pass green, ALERT red, no data grey).
pub(crate) struct StateView {
    /// `pass`, `ALERT` or `no data`.
    pub word: &'static str,
    /// `pass`, `alert` or `nodata`.
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
        }
    }
}

/// Decimals shown for a ratio metric, as `laneledger review` shows them.
pub(crate) fn decimals(metric: &str) -> usize {
    match metric {
        "cross_lane_retries_per_job" => 3,
        "duplicate_artifacts_per_100_jobs" => 2,
        "free_admit_miss_rate" => 3,
        _ => 1,
    }
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
    /// The week the page is about (highlighted).
    pub current: bool,
}

impl WeekRow {
    /// The row for `m`, its alerts checked against `t`.
    pub(crate) fn new(m: &WeekMetrics, t: &Thresholds, current: bool) -> Self {
        let mut cross = AlertState::NoData;
        let mut dup = AlertState::NoData;
        for a in alerts(m, t) {
            match a.metric {
                "cross_lane_retries_per_job" => cross = a.state,
                "duplicate_artifacts_per_100_jobs" => dup = a.state,
                _ => {}
            }
        }
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
            duplicates_state: dup.into(),
            cross_lane_per_job: format_ratio(m.cross_lane_retries_per_job, decimals("cross_lane_retries_per_job")),
            cross_lane_state: cross.into(),
            current,
        }
    }
}

/// The weeks page.
#[derive(Template)]
#[template(path = "weeks.html")]
struct WeeksPage {
    nav: &'static str,
    title: &'static str,
    /// Newest first.
    weeks: Vec<WeekRow>,
}

/// `GET /weeks`.
pub(crate) async fn list(State(state): State<AppState>) -> Result<HtmlTemplate<impl Template>, AppError> {
    let weeks = state.session.weeks().await?;
    let rows = weeks
        .iter()
        .rev()
        .map(|m| WeekRow::new(m, &state.thresholds, false))
        .collect();
    Ok(HtmlTemplate(WeeksPage {
        nav: "weeks",
        title: "Weeks",
        weeks: rows,
    }))
}
