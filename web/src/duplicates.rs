//! `GET /duplicates`: every idem_key with more than one artifact, and its artifacts, from the
//! view `duplicate_artifact` (seed 000's second rollup query, row by row).

use askama::Template;
use axum::extract::State;
use laneledger_query::{OutputFormat, format_count, format_result};
use laneledger_store::format_timestamp;
use serde::Deserialize;

use crate::AppState;
use crate::error::{AppError, Error};
use crate::html::HtmlTemplate;
use crate::html::or_dash;

/// The page's query: the view's rows, `ended_at` as µs so it prints like every other time.
pub(crate) const DUPLICATES_SQL: &str = "SELECT idem_key, artifact_id, job_id, attempt_no, lane, outcome, \
     CAST(ended_at AS BIGINT) AS ended_at_us \
     FROM duplicate_artifact \
     ORDER BY idem_key, ended_at_us NULLS LAST, job_id, attempt_no";

/// One row of [`DUPLICATES_SQL`].
#[derive(Deserialize)]
struct Row {
    idem_key: String,
    artifact_id: String,
    job_id: String,
    attempt_no: i64,
    lane: String,
    outcome: Option<String>,
    ended_at_us: Option<i64>,
}

/// One artifact of a duplicated key.
struct ArtifactRow {
    artifact_id: String,
    job_id: String,
    attempt_no: i64,
    lane: String,
    outcome: String,
    ended_at: String,
}

/// One idem_key with more than one artifact.
struct KeyGroup {
    idem_key: String,
    /// Distinct artifact_id of the key.
    artifacts: usize,
    rows: Vec<ArtifactRow>,
}

/// The duplicates page.
#[derive(Template)]
#[template(path = "duplicates.html")]
struct DuplicatesPage {
    nav: &'static str,
    title: &'static str,
    keys: String,
    /// Σ over the keys of (distinct artifact_id − 1).
    duplicates: String,
    groups: Vec<KeyGroup>,
    /// The page's query.
    sql: &'static str,
}

/// `GET /duplicates`.
pub(crate) async fn list(State(state): State<AppState>) -> Result<HtmlTemplate<impl Template>, AppError> {
    let result = state.session.query(DUPLICATES_SQL).await?;
    let json = format_result(&result, OutputFormat::Json)?;
    let rows: Vec<Row> = serde_json::from_str(&json).map_err(Error::from)?;
    let mut groups: Vec<KeyGroup> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for r in rows {
        if groups.last().is_none_or(|g| g.idem_key != r.idem_key) {
            seen.clear();
            groups.push(KeyGroup {
                idem_key: r.idem_key.clone(),
                artifacts: 0,
                rows: Vec::new(),
            });
        }
        let Some(group) = groups.last_mut() else {
            continue;
        };
        if !seen.contains(&r.artifact_id) {
            seen.push(r.artifact_id.clone());
            group.artifacts += 1;
        }
        group.rows.push(ArtifactRow {
            artifact_id: r.artifact_id,
            job_id: r.job_id,
            attempt_no: r.attempt_no,
            lane: r.lane,
            outcome: or_dash(r.outcome),
            ended_at: r.ended_at_us.map_or_else(|| "open".to_string(), format_timestamp),
        });
    }
    let duplicates: usize = groups.iter().map(|g| g.artifacts.saturating_sub(1)).sum();
    Ok(HtmlTemplate(DuplicatesPage {
        nav: "duplicates",
        title: "Duplicate artifacts",
        keys: format_count(i64::try_from(groups.len()).unwrap_or(i64::MAX)),
        duplicates: format_count(i64::try_from(duplicates).unwrap_or(i64::MAX)),
        groups,
        sql: DUPLICATES_SQL,
    }))
}
