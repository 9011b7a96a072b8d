//! `GET /sql?q=…`: a read-only SQL form over the ledger, its answer as a table, and the shipped
//! tables and views as examples to start from.

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use laneledger_query::{TABLES, text_cells};
use serde::Deserialize;

use crate::api::read_api::run_sql;
use crate::pages::html::HtmlTemplate;
use crate::server::state::AppState;

/// Rows shown on the page; the API and the CLI return all of them.
pub const PAGE_ROWS: usize = 500;

/// `?q=` holds the statement.
#[derive(Debug, Deserialize)]
pub struct SqlParams {
    /// The SQL statement.
    pub q: Option<String>,
}

/// A table or view to start from.
struct Example {
    name: &'static str,
    what: &'static str,
    sql: String,
}

/// The answer of a query that ran.
struct Answer {
    columns: Vec<String>,
    /// Whether each column holds numbers (right-aligned).
    numeric: Vec<bool>,
    rows: Vec<Vec<String>>,
    total: usize,
    /// Where the answer was cut at the server's result limits, in words.
    cut: Option<String>,
}

#[derive(Template)]
#[template(path = "sql.html")]
struct SqlPage {
    nav: &'static str,
    title: String,
    sql: String,
    answer: Option<Answer>,
    error: Option<String>,
    tables: Vec<Example>,
    views: Vec<Example>,
    page_rows: usize,
}

/// The views and the tables materialized from view definitions, with a line on each.
const VIEW_NOTES: [(&str, &str); 9] = [
    (
        "job_rollup",
        "each job's attempts by lane, its tokens and its distinct artifacts (materialized per write)",
    ),
    (
        "week_rollup",
        "the drill table from the attempts, one row per ISO week (materialized per write)",
    ),
    (
        "weekly_metrics",
        "week_rollup, with swept weeks as their week_snapshot rows",
    ),
    (
        "duplicate_artifact",
        "each artifact of an idem_key that received more than one",
    ),
    (
        "job_week",
        "the ISO week of each job's first attempt (materialized per write)",
    ),
    ("gate_weekly", "the dwell gate's decisions and ratios per ISO week"),
    ("refusal_by_kind", "refused attempts by error_kind and week"),
    (
        "refusal_by_code",
        "refused attempts by ISO week, HTTP status and provider code",
    ),
    (
        "free_lane_bet",
        "when the free lane is the wrong bet, per ISO week: free p95 latency, ambiguous rate, token delta",
    ),
];

/// The form, and the answer when `q` is given; a refused or failing statement shows its error
/// with status 400 (422 past a limit, 408 past the timeout).
pub async fn page(State(state): State<AppState>, Query(p): Query<SqlParams>) -> Response {
    let sql = p.q.unwrap_or_default();
    let (mut answer, mut error, mut status) = (None, None, StatusCode::OK);
    if !sql.trim().is_empty() {
        match run_sql(&state, &sql).await {
            Ok((result, cut)) => match text_cells(&result, PAGE_ROWS) {
                Ok((columns, rows)) => {
                    answer = Some(Answer {
                        numeric: result
                            .schema
                            .fields()
                            .iter()
                            .map(|f| f.data_type().is_numeric())
                            .collect(),
                        columns,
                        rows,
                        total: result.num_rows(),
                        cut: cut.map(|c| c.notice()),
                    })
                }
                Err(e) => {
                    error = Some(e.to_string());
                    status = StatusCode::UNPROCESSABLE_ENTITY;
                }
            },
            Err(e) => {
                error = Some(e.message);
                status = e.status;
            }
        }
    }
    let example = |name: &'static str, what: &'static str| Example {
        name,
        what,
        sql: format!("SELECT * FROM {name} LIMIT 20"),
    };
    let page = SqlPage {
        nav: "sql",
        title: "SQL".into(),
        sql: if sql.is_empty() {
            laneledger_query::derived::views::SEED_Q1_TOKENS_PER_ARTIFACT.to_string()
        } else {
            sql
        },
        answer,
        error,
        tables: TABLES.iter().map(|(n, w)| example(n, w)).collect(),
        views: VIEW_NOTES.iter().map(|(n, w)| example(n, w)).collect(),
        page_rows: PAGE_ROWS,
    };
    (status, HtmlTemplate(page)).into_response()
}
