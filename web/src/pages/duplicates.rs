//! `GET /duplicates`: every idem_key with more than one artifact, and its artifacts, from the
//! view `duplicate_artifact` (seed 000's second rollup query, row by row): [`KEYS_PER_PAGE`] keys
//! a page (`?page=N`), over the whole ledger or the keys of one ISO week (`?week=2026-W47`).

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Query, State};
use laneledger_query::{OutputFormat, format_count, format_result};
use laneledger_store::format_timestamp;
use serde::Deserialize;

use crate::error::{AppError, Error};
use crate::pages::html::HtmlTemplate;
use crate::pages::html::or_dash;
use crate::server::state::AppState;

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

/// Keys shown on one page of `/duplicates`.
pub(crate) const KEYS_PER_PAGE: usize = 100;

/// The `WHERE` of the page's queries: every key, or (`week`) the keys with an artifact from a
/// job of that ISO week (the week of the job's first attempt).
fn key_filter(week: Option<&str>) -> String {
    match week {
        None => String::new(),
        Some(w) => format!(
            "WHERE idem_key IN (SELECT d.idem_key FROM duplicate_artifact d JOIN job_week w ON d.job_id = w.job_id WHERE w.iso_week = '{w}')"
        ),
    }
}

/// The rows of the keys numbered `from + 1 ..= from + KEYS_PER_PAGE` in idem_key order.
fn page_sql(week: Option<&str>, from: usize) -> String {
    format!(
        "SELECT idem_key, artifact_id, job_id, attempt_no, lane, outcome, ended_at_us FROM (\
         SELECT idem_key, artifact_id, job_id, attempt_no, lane, outcome, CAST(ended_at AS BIGINT) AS ended_at_us, \
         DENSE_RANK() OVER (ORDER BY idem_key) AS key_no FROM duplicate_artifact {}) \
         WHERE key_no > {from} AND key_no <= {} \
         ORDER BY idem_key, ended_at_us NULLS LAST, job_id, attempt_no",
        key_filter(week),
        from + KEYS_PER_PAGE
    )
}

/// The keys and duplicate artifacts in all (`keys`, `duplicates`).
fn totals_sql(week: Option<&str>) -> String {
    format!(
        "SELECT COUNT(*) AS keys, CAST(COALESCE(SUM(n - 1), 0) AS BIGINT) AS duplicates FROM (\
         SELECT idem_key, COUNT(DISTINCT artifact_id) AS n FROM duplicate_artifact {} GROUP BY idem_key)",
        key_filter(week)
    )
}

/// A link of the page: its label, its URL, whether it is the one shown.
struct Link {
    label: String,
    href: String,
    current: bool,
}

/// The duplicates page.
#[derive(Template)]
#[template(path = "duplicates.html")]
struct DuplicatesPage {
    nav: &'static str,
    title: String,
    /// The week shown, or `None` for the whole ledger.
    week: Option<String>,
    keys: String,
    /// Σ over the keys of (distinct artifact_id − 1).
    duplicates: String,
    groups: Vec<KeyGroup>,
    /// The first and last key shown (1-based), and the keys in all.
    first: usize,
    last: usize,
    total_keys: usize,
    /// Keys a page ([`KEYS_PER_PAGE`]).
    per_page: usize,
    /// Page `page` of `pages`.
    page: usize,
    pages: usize,
    /// The whole ledger, then each week with data.
    weeks: Vec<Link>,
    /// The previous and next page, when there are.
    previous_page: Option<String>,
    next_page: Option<String>,
    /// Every page, when there are a few (else only previous and next).
    page_links: Vec<Link>,
    /// The page's query.
    sql: String,
}

/// `/duplicates` with `week` and `page`.
fn href(week: Option<&str>, page: usize) -> String {
    let mut q = Vec::new();
    if let Some(w) = week {
        q.push(format!("week={w}"));
    }
    if page > 1 {
        q.push(format!("page={page}"));
    }
    if q.is_empty() {
        "/duplicates".to_string()
    } else {
        format!("/duplicates?{}", q.join("&"))
    }
}

/// `GET /duplicates[?week=2026-W47][&page=N]`: 400 for a bad week label or page number.
pub(crate) async fn list(
    State(state): State<AppState>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<HtmlTemplate<impl Template>, AppError> {
    // Every part of the page reads one write generation (Session::pinned).
    let session = state.session.pinned();
    let week = params.get("week").filter(|w| !w.is_empty()).cloned();
    if let Some(w) = &week {
        laneledger_query::review::metrics::parse_iso_week(w)?;
    }
    let page = match params.get("page") {
        None => 1,
        Some(p) => p
            .parse::<usize>()
            .ok()
            .filter(|&p| p >= 1)
            .ok_or_else(|| AppError::BadPath(format!("{p:?} is not a page number: pages count from 1")))?,
    };
    let week = week.as_deref();
    let totals = session.query(&totals_sql(week)).await?;
    let totals: Vec<HashMap<String, i64>> =
        serde_json::from_str(&format_result(&totals, OutputFormat::Json)?).map_err(Error::from)?;
    let total_keys = totals.first().and_then(|t| t.get("keys")).copied().unwrap_or(0).max(0) as usize;
    let duplicates = totals.first().and_then(|t| t.get("duplicates")).copied().unwrap_or(0);
    let pages = total_keys.div_ceil(KEYS_PER_PAGE).max(1);
    let page = page.min(pages);
    let from = (page - 1) * KEYS_PER_PAGE;
    let sql = page_sql(week, from);
    let result = session.query(&sql).await?;
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
    let mut weeks = vec![Link {
        label: "all weeks".to_string(),
        href: href(None, 1),
        current: week.is_none(),
    }];
    weeks.extend(session.weeks().await?.iter().rev().map(|m| Link {
        label: m.iso_week.clone(),
        href: href(Some(&m.iso_week), 1),
        current: week == Some(m.iso_week.as_str()),
    }));
    let page_links = if pages <= 20 {
        (1..=pages)
            .map(|p| Link {
                label: p.to_string(),
                href: href(week, p),
                current: p == page,
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(HtmlTemplate(DuplicatesPage {
        nav: "duplicates",
        title: match week {
            Some(w) => format!("Duplicate artifacts: {w}"),
            None => "Duplicate artifacts".to_string(),
        },
        week: week.map(String::from),
        keys: format_count(i64::try_from(total_keys).unwrap_or(i64::MAX)),
        duplicates: format_count(duplicates),
        first: if groups.is_empty() { 0 } else { from + 1 },
        last: from + groups.len(),
        total_keys,
        groups,
        per_page: KEYS_PER_PAGE,
        page,
        pages,
        weeks,
        previous_page: (page > 1).then(|| href(week, page - 1)),
        next_page: (page < pages).then(|| href(week, page + 1)),
        page_links,
        sql,
    }))
}
