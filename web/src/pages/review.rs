//! `GET /` and `GET /weeks/{week}`: one ISO week's alerts (red ones first), the drill table beside
//! the week before, the audit sections, and every week with data; from the view `weekly_metrics`
//! and the audit tables.

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use laneledger_query::{AlertCheck, Section, WeekMetrics, WeekReview, format_count, format_ratio};

use crate::error::AppError;
use crate::pages::daily::DailyView;
use crate::pages::html::{HtmlTemplate, signed};
use crate::pages::sections::SectionView;
use crate::pages::weeks::{StateView, WeekRow, decimals};
use crate::server::state::AppState;

/// One metric of the drill table: this week, the previous week, the change.
struct MetricRow {
    name: &'static str,
    definition: std::borrow::Cow<'static, str>,
    now: String,
    before: String,
    change: String,
}

/// One alert card.
struct AlertRow {
    /// `cross-lane retries per job`.
    label: &'static str,
    /// `cross_lane_retries_per_job`.
    metric: &'static str,
    value: String,
    threshold: String,
    state: StateView,
    /// The verdict in words: `0.147 is at or below 0.20: pass`.
    verdict: String,
    /// The counts behind the value: `3 of 20 jobs went past the attempt bound`.
    detail: String,
    /// The anchor of the section with the rows behind it.
    section: &'static str,
}
/// The review of one week.
#[derive(Template)]
#[template(path = "review.html")]
struct ReviewPage {
    nav: &'static str,
    title: String,
    week: String,
    week_start: String,
    /// The calendar week before, when a job started in it.
    previous: Option<String>,
    /// The calendar week before, with data or not (`2026-W46`).
    previous_week: String,
    /// The week is still in progress.
    partial: bool,
    /// The Monday the week ends (00:00 UTC), `2026-11-30`.
    week_end: String,
    rows: Vec<MetricRow>,
    /// Every alert, the red ones first.
    alerts: Vec<AlertRow>,
    /// How many alerts fire this week.
    firing: usize,
    /// How many alerts are above their threshold in a week of too few jobs.
    too_few: usize,
    /// Seed 000 query 1's tokens per artifact (÷ `SUM(artifacts)`), this week and the previous.
    seed_q1: String,
    seed_q1_before: String,
    /// Every week, newest first.
    weeks: Vec<WeekRow>,
    /// The audit sections of seeds 000, 002 and 003.
    sections: Vec<SectionView>,
    /// Attempts a day by lane and outcome: the chart and its table.
    daily: DailyView,
    /// The SQL behind the drill table.
    drill_sql: String,
    /// The SQL behind the weeks table.
    weeks_sql: &'static str,
}

/// The page for an empty ledger.
#[derive(Template)]
#[template(path = "empty.html")]
struct EmptyPage {
    nav: &'static str,
    title: &'static str,
}

fn count_row(
    name: &'static str,
    definition: &'static str,
    w: &WeekMetrics,
    p: Option<&WeekMetrics>,
    f: fn(&WeekMetrics) -> i64,
) -> MetricRow {
    MetricRow {
        name,
        definition: definition.into(),
        now: format_count(f(w)),
        before: p.map_or("—".to_string(), |p| format_count(f(p))),
        change: p.map_or("—".to_string(), |p| signed(format_count(f(w) - f(p)))),
    }
}

fn ratio_row(
    name: &'static str,
    definition: &'static str,
    decimals: usize,
    w: &WeekMetrics,
    p: Option<&WeekMetrics>,
    f: fn(&WeekMetrics) -> Option<f64>,
) -> MetricRow {
    let change = match (f(w), p.and_then(f)) {
        (Some(now), Some(before)) => signed(format_ratio(Some(now - before), decimals)),
        _ => "—".to_string(),
    };
    MetricRow {
        name,
        definition: definition.into(),
        now: format_ratio(f(w), decimals),
        before: p.map_or("—".to_string(), |p| format_ratio(f(p), decimals)),
        change,
    }
}

fn drill_rows(w: &WeekMetrics, p: Option<&WeekMetrics>) -> Vec<MetricRow> {
    vec![
        count_row(
            "jobs",
            "distinct job_id whose first attempt started in the week",
            w,
            p,
            |m| m.jobs,
        ),
        count_row(
            "unique accepted artifacts",
            "distinct idem_key with at least one artifact_id",
            w,
            p,
            |m| m.unique_accepted_artifacts,
        ),
        count_row("free attempts", "attempts on the free lane", w, p, |m| m.free_attempts),
        count_row("paid attempts", "attempts on the paid lane", w, p, |m| m.paid_attempts),
        count_row(
            "total tokens",
            "Σ (tokens_in + tokens_out) over all attempts",
            w,
            p,
            |m| m.total_tokens,
        ),
        ratio_row(
            "tokens per accepted artifact",
            "total tokens ÷ unique accepted artifacts",
            1,
            w,
            p,
            |m| m.tokens_per_accepted_artifact,
        ),
        count_row(
            "duplicate artifacts",
            "Σ over idem_key of (distinct artifact_id − 1)",
            w,
            p,
            |m| m.duplicate_artifacts,
        ),
        ratio_row(
            "duplicate artifacts per 100 jobs",
            "100 × duplicate artifacts ÷ jobs",
            decimals("duplicate_artifacts_per_100_jobs"),
            w,
            p,
            |m| m.duplicate_artifacts_per_100_jobs,
        ),
        ratio_row(
            "cross-lane retries per job",
            "jobs with both a free and a paid attempt ÷ jobs",
            decimals("cross_lane_retries_per_job"),
            w,
            p,
            |m| m.cross_lane_retries_per_job,
        ),
    ]
    .into_iter()
    .chain(spend_rows(w, p))
    .collect()
}

/// The drill table's spend rows: spend, spend per accepted artifact, spend of duplicate artifacts.
/// The definition names what the figure leaves out (unpriced attempts), so that a partial bill is
/// never read as the whole one.
fn spend_rows(w: &WeekMetrics, p: Option<&WeekMetrics>) -> Vec<MetricRow> {
    type Figure = fn(&laneledger_query::review::cost::WeekSpend) -> Option<f64>;
    let basis = w.spend.as_ref().map_or_else(
        || "no spend kept for this week (a retention sweep removed some of its attempts)".to_string(),
        |s| s.basis(),
    );
    let rows: [(&'static str, &'static str, Figure); 3] = [
        (
            "spend",
            "Σ cost of the attempts: the router's reported cost, else tokens at lane.yaml prices",
            |s| s.spend,
        ),
        (
            "spend per accepted artifact",
            "spend ÷ unique accepted artifacts",
            |s| s.spend_per_accepted_artifact,
        ),
        (
            "spend of duplicate artifacts",
            "Σ cost of the attempts that returned an idem_key's second or later artifact",
            |s| s.duplicate_artifact_spend,
        ),
    ];
    rows.into_iter()
        .enumerate()
        .map(|(i, (name, definition, f))| {
            let now = w.spend.as_ref().map(|s| (s.money(f(s)), f(s)));
            let before = p.and_then(|p| p.spend.as_ref()).map(|s| (s.money(f(s)), f(s)));
            let change = match (&now, &before) {
                (Some((_, Some(a))), Some((_, Some(b)))) => signed(format_ratio(Some(a - b), 4)),
                _ => "—".to_string(),
            };
            MetricRow {
                name,
                definition: if i == 0 {
                    format!("{definition}; {basis}").into()
                } else {
                    definition.into()
                },
                now: now.map_or("—".to_string(), |n| n.0),
                before: before.map_or("—".to_string(), |b| b.0),
                change,
            }
        })
        .collect()
}

/// A threshold as the seed writes it: `0.20`, `1`.
pub(crate) fn threshold_text(t: f64) -> String {
    if t.fract() == 0.0 {
        format!("{t:.0}")
    } else {
        format!("{t:.2}")
    }
}

/// An alert's verdict in words, with the figure and the threshold.
fn verdict(value: &str, threshold: &str, state: laneledger_query::AlertState) -> String {
    match state {
        laneledger_query::AlertState::Pass => format!("{value} is at or below {threshold}: pass"),
        laneledger_query::AlertState::Alert => format!("{value} is above {threshold}: ALERT"),
        laneledger_query::AlertState::NoData => "nothing to divide by this week: no data".to_string(),
        laneledger_query::AlertState::TooFewJobs => {
            format!("{value} is above {threshold}, from too few jobs to raise an alert")
        }
    }
}

fn review_page(
    review: WeekReview,
    weeks: &[WeekMetrics],
    by_week: &[(String, Vec<AlertCheck>)],
    sections: Vec<Section>,
    daily: DailyView,
    latest: bool,
    now: i64,
) -> ReviewPage {
    let w = &review.week;
    let p = review.previous.as_ref();
    let title = if latest {
        format!("Weekly review: {} (latest week)", w.iso_week)
    } else {
        format!("Weekly review: {}", w.iso_week)
    };
    ReviewPage {
        nav: if latest { "review" } else { "weeks" },
        title,
        week: w.iso_week.clone(),
        week_start: w.week_start.get(..10).unwrap_or(&w.week_start).to_string(),
        previous: p.map(|p| p.iso_week.clone()),
        previous_week: review.previous_week.clone(),
        partial: review.partial,
        week_end: laneledger_query::review::metrics::week_end_micros(&w.iso_week)
            .map(|end| laneledger_store::format_timestamp(end)[..10].to_string())
            .unwrap_or_default(),
        rows: drill_rows(w, p),
        firing: review.firing().count(),
        too_few: review
            .alerts
            .iter()
            .filter(|a| a.state == laneledger_query::AlertState::TooFewJobs)
            .count(),
        alerts: review
            .firing()
            .chain(
                review
                    .alerts
                    .iter()
                    .filter(|a| a.state != laneledger_query::AlertState::Alert),
            )
            .map(|a| {
                let value = format_ratio(a.value, decimals(a.metric));
                let threshold = threshold_text(a.threshold);
                AlertRow {
                    label: a.label,
                    metric: a.metric,
                    verdict: verdict(&value, &threshold, a.state),
                    value,
                    threshold,
                    state: a.state.into(),
                    detail: a.detail.clone(),
                    section: a.section,
                }
            })
            .collect(),
        seed_q1: format_ratio(w.tokens_per_artifact, 1),
        seed_q1_before: p.map_or("—".to_string(), |p| format_ratio(p.tokens_per_artifact, 1)),
        weeks: crate::pages::weeks::week_rows(weeks, by_week, Some(&w.iso_week), now),
        sections: crate::pages::sections::views(sections),
        daily,
        drill_sql: crate::pages::downloads::drill_sql(&w.iso_week),
        weeks_sql: laneledger_query::review::metrics::WEEKS_SQL,
    }
}

/// `GET /`: the latest week's review, or how to ingest when the ledger is empty.
pub(crate) async fn latest(State(state): State<AppState>) -> Result<Response, AppError> {
    // Every part of the page reads one write generation (Session::pinned).
    let session = state.session.pinned();
    let weeks = session.weeks().await?;
    if weeks.is_empty() {
        return Ok(HtmlTemplate(EmptyPage {
            nav: "review",
            title: "No data yet",
        })
        .into_response());
    }
    let (review, sections) = session.review_with_sections(None, &state.thresholds).await?;
    let daily = crate::pages::daily::daily(&session, &review.week.iso_week).await?;
    let by_week = session.alerts_by_week(&state.thresholds).await?;
    let now = session.now_micros();
    Ok(HtmlTemplate(review_page(review, &weeks, &by_week, sections, daily, true, now)).into_response())
}

/// `GET /weeks/{week}`: one week's review; 400 for a bad label, 404 for a week without data.
pub(crate) async fn week(
    State(state): State<AppState>,
    week: Result<Path<String>, PathRejection>,
) -> Result<HtmlTemplate<impl Template>, AppError> {
    // Every part of the page reads one write generation (Session::pinned).
    let session = state.session.pinned();
    let Path(week) = week?;
    let (review, sections) = session.review_with_sections(Some(&week), &state.thresholds).await?;
    let weeks = session.weeks().await?;
    let daily = crate::pages::daily::daily(&session, &review.week.iso_week).await?;
    let by_week = session.alerts_by_week(&state.thresholds).await?;
    let now = session.now_micros();
    Ok(HtmlTemplate(review_page(
        review, &weeks, &by_week, sections, daily, false, now,
    )))
}
