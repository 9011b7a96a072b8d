//! `GET /jobs/{job_id}`: one job's attempts in `attempt_no` order, read from the ledger's
//! primary key (a blocking redb read, run off the async runtime).

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use chrono::{DateTime, Datelike};
use laneledger_query::format_count;
use laneledger_query::tables::job_attempt::error_kind_of;
use laneledger_store::{StoredAttempt, format_timestamp};

use crate::error::{AppError, Error};
use crate::pages::html::{HtmlTemplate, or_dash};
use crate::server::state::AppState;

/// One attempt, ready to show.
struct AttemptRow {
    attempt_no: u32,
    lane: &'static str,
    started_at: String,
    ended_at: String,
    duration_s: String,
    outcome: String,
    tokens_in: String,
    tokens_out: String,
    artifact_id: String,
    http_status: String,
    provider_code: String,
    error_kind: String,
    key_id: String,
    pool_id: String,
    model: String,
}

impl From<&StoredAttempt> for AttemptRow {
    fn from(s: &StoredAttempt) -> Self {
        let a = &s.attempt;
        AttemptRow {
            attempt_no: a.attempt_no,
            lane: a.lane.as_str(),
            started_at: format_timestamp(a.started_at),
            ended_at: a.ended_at.map_or_else(|| "open".to_string(), format_timestamp),
            duration_s: or_dash(
                a.ended_at
                    .map(|end| format!("{:.1}", (end - a.started_at) as f64 / 1e6)),
            ),
            outcome: or_dash(a.outcome.map(|o| o.as_str())),
            tokens_in: or_dash(a.tokens_in.map(|n| format_count(n as i64))),
            tokens_out: or_dash(a.tokens_out.map(|n| format_count(n as i64))),
            artifact_id: or_dash(a.artifact_id.as_deref()),
            http_status: or_dash(a.http_status),
            provider_code: or_dash(a.provider_code),
            error_kind: or_dash(error_kind_of(a.http_status, a.provider_code).map(|k| k.as_str())),
            key_id: or_dash(a.key_id.as_deref()),
            pool_id: or_dash(a.pool_id.as_deref()),
            model: or_dash(a.model.as_deref()),
        }
    }
}

/// One audit finding about the job, ready to show.
struct FindingRow {
    /// The audit's title.
    title: &'static str,
    /// The section on its week's page.
    href: String,
    week: String,
    attempt_no: String,
    words: String,
}

/// One job's page.
#[derive(Template)]
#[template(path = "job.html")]
struct JobPage {
    nav: &'static str,
    title: String,
    job_id: String,
    /// The job's idempotency keys (one, unless a router changed it).
    idem_keys: Vec<String>,
    /// The ISO week of the first attempt, which the job counts in.
    week: String,
    total_tokens: String,
    /// The lanes in attempt order, `free → free → paid`.
    lanes: String,
    attempts: Vec<AttemptRow>,
    /// Why the job was flagged: every audit row that names it.
    findings: Vec<FindingRow>,
    /// The attempts on a timeline, an inline `<svg>`.
    timeline: String,
    /// The same attempts through SQL (the download's query).
    sql: String,
}

/// The ISO week label (`2026-W47`) of a time in µs since the epoch.
fn iso_week_of(micros: i64) -> String {
    DateTime::from_timestamp_micros(micros).map_or_else(String::new, |t| {
        let w = t.iso_week();
        format!("{:04}-W{:02}", w.year(), w.week())
    })
}

/// `GET /jobs/{job_id}`; 404 when the ledger has no attempt for the job.
pub(crate) async fn show(
    State(state): State<AppState>,
    job_id: Result<Path<String>, PathRejection>,
) -> Result<HtmlTemplate<impl Template>, AppError> {
    let Path(job_id) = job_id?;
    let ledger = state.session.ledger().clone();
    let id = job_id.clone();
    let attempts = tokio::task::spawn_blocking(move || ledger.job_attempts(&id))
        .await
        .map_err(Error::from)?
        .map_err(Error::from)?;
    let Some(first_start) = attempts.iter().map(|s| s.attempt.started_at).min() else {
        return Err(AppError::UnknownJob(job_id));
    };
    let mut idem_keys: Vec<String> = Vec::new();
    for s in &attempts {
        if !idem_keys.contains(&s.attempt.idem_key) {
            idem_keys.push(s.attempt.idem_key.clone());
        }
    }
    let tokens: u64 = attempts
        .iter()
        .map(|s| s.attempt.tokens_in.unwrap_or(0) + s.attempt.tokens_out.unwrap_or(0))
        .sum();
    let lanes: Vec<&str> = attempts.iter().map(|s| s.attempt.lane.as_str()).collect();
    let timeline = crate::pages::timeline::timeline(&job_id, &attempts).map_err(Error::from)?;
    // The job's own week (its first attempt's) holds its attempt audits; the weeks of its gate
    // decisions are added by the query layer.
    let findings = state
        .session
        .job_findings(&job_id, &[iso_week_of(first_start)])
        .await?
        .into_iter()
        .map(|f| FindingRow {
            title: f.title,
            href: format!(
                "/weeks/{}#{}",
                crate::pages::sections::encode_segment(&f.week),
                f.section
            ),
            week: f.week,
            attempt_no: or_dash(f.attempt_no),
            words: f.words,
        })
        .collect();
    Ok(HtmlTemplate(JobPage {
        nav: "",
        title: format!("Job {job_id}"),
        idem_keys,
        week: iso_week_of(first_start),
        total_tokens: format_count(i64::try_from(tokens).unwrap_or(i64::MAX)),
        lanes: lanes.join(" → "),
        attempts: attempts.iter().map(AttemptRow::from).collect(),
        findings,
        timeline,
        sql: crate::pages::downloads::job_sql(&job_id),
        job_id,
    }))
}
