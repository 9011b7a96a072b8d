//! Every table of the week page and of the weeks index as a file: CSV (RFC 4180 with a header
//! row) or JSON (an array of objects), from the same query that fills the table on the page,
//! formatted as [`laneledger_query::format_result`] does. The tables read by one statement (every
//! week table but the sections computed in Rust, and the duplicates) are streamed batch by batch
//! ([`laneledger_query::Session::query_stream`]), so a table larger than a query's answer may hold
//! still downloads whole.
//!
//! - `GET /weeks/{week}/tables/{name}.csv` and `.json`: `drill` (the week and the one before it
//!   in `weekly_metrics`), `daily` (attempts a day by lane and outcome), each audit section by
//!   its id (all its rows, where the page shows the first 100), and `weeks`.
//! - `GET /weeks/tables/{name}.csv` and `.json`: `weeks` and `gate_weeks`.
//! - `GET /jobs/{job_id}/tables/attempts.csv` and `.json`: a job's attempts, through SQL.
//! - `GET /duplicates/tables/duplicates.csv` and `.json`: the duplicates page's rows.

use axum::body::{Body, Bytes};
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use laneledger_query::review::gate_metrics::GATE_WEEKS_SQL;
use laneledger_query::review::metrics::WEEKS_SQL;
use laneledger_query::{OutputFormat, QueryResult, Session, TextStream, format_result, text_table};

use crate::error::{AppError, Error};
use crate::pages::duplicates::DUPLICATES_SQL;
use crate::server::state::AppState;

/// Sections the query layer computes in Rust from several queries: their download is the table
/// as the page shows it. Every other section's download runs its SQL.
const COMPUTED_SECTIONS: [&str; 4] = [
    "free_lane_bet",
    "gate_ratios",
    "spend_by_lane_model",
    "latency_by_lane_model",
];

/// The SQL of a week's drill table: the week's row of `weekly_metrics` and the previous week's
/// with data, newest first.
pub(crate) fn drill_sql(week: &str) -> String {
    format!(
        "SELECT * FROM weekly_metrics\n\
         WHERE week_start <= (SELECT week_start FROM weekly_metrics WHERE iso_week = '{week}')\n\
         ORDER BY week_start DESC\n\
         LIMIT 2"
    )
}

/// A download's format, from the file name's extension.
#[derive(Clone, Copy)]
enum Format {
    Csv,
    Json,
}

impl Format {
    fn output(self) -> OutputFormat {
        match self {
            Format::Csv => OutputFormat::Csv,
            Format::Json => OutputFormat::Json,
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8; header=present",
            Format::Json => "application/json",
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Format::Csv => "csv",
            Format::Json => "json",
        }
    }
}

/// `daily.csv` → (`daily`, CSV); `None` for another extension.
fn split_file(file: &str) -> Option<(&str, Format)> {
    let (name, ext) = file.rsplit_once('.')?;
    let format = match ext {
        "csv" => Format::Csv,
        "json" => Format::Json,
        _ => return None,
    };
    Some((name, format))
}

/// The file as a response: its content type, and a download named `filename`.
fn file_response(result: &QueryResult, format: Format, stem: &str) -> Result<Response, AppError> {
    let body = format_result(result, format.output()).map_err(Error::from)?;
    Ok(with_file_headers(body.into_response(), format, stem))
}

/// `response` with the file's content type, as a download named `stem` and the format's extension.
fn with_file_headers(mut response: Response, format: Format, stem: &str) -> Response {
    let disposition = format!("attachment; filename=\"{stem}.{}\"", format.extension());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(format.content_type()));
    match HeaderValue::from_str(&disposition) {
        Ok(v) => {
            headers.insert(header::CONTENT_DISPOSITION, v);
        }
        Err(e) => tracing::warn!("content disposition {disposition:?}: {e}"),
    }
    response
}

/// A table of the week page: computed by the query layer, or the SQL that reads it.
pub(crate) enum WeekTable {
    /// A section computed in Rust from several queries, as the page shows it.
    Computed(QueryResult),
    /// The statement whose answer is the table.
    Sql(String),
}

/// The week page's table `name` for `week` (a week with data); `None` when the page has no such
/// table.
pub(crate) async fn week_table(session: &Session, week: &str, name: &str) -> Result<Option<WeekTable>, Error> {
    let sql = match name {
        "drill" => drill_sql(week),
        "daily" => crate::pages::daily::daily_sql(week),
        "weeks" => WEEKS_SQL.to_string(),
        _ => {
            let sections = session.audit_sections(week).await?;
            let Some(s) = sections.into_iter().find(|s| s.id == name) else {
                return Ok(None);
            };
            if COMPUTED_SECTIONS.contains(&s.id) {
                return Ok(Some(WeekTable::Computed(text_table(&s.columns, &s.rows)?)));
            }
            s.sql
        }
    };
    Ok(Some(WeekTable::Sql(sql)))
}

/// The answer of `sql` as a download, streamed batch by batch as the statement makes it (a week's
/// key rest violations can run to millions of rows, more than one answer may hold in memory). A
/// failure before the first batch is an error page; one after it ends the transfer unfinished,
/// so the client sees the file is cut. A client that reads nothing for `patience` stops it.
async fn stream_file(
    session: &Session,
    sql: &str,
    format: Format,
    stem: &str,
    patience: std::time::Duration,
) -> Result<Response, AppError> {
    use futures::StreamExt;
    let mut answer = session.query_stream(sql, patience).await.map_err(Error::from)?;
    let mut text = TextStream::new(format.output(), answer.schema.clone()).map_err(Error::from)?;
    let first = match answer.next().await.transpose().map_err(Error::from)? {
        Some(batch) => text.batch(&batch).map_err(Error::from)?,
        None => Vec::new(),
    };
    let rest = futures::stream::unfold(Some((answer, text)), |state| async move {
        let (mut answer, mut text) = state?;
        Some(match answer.next().await {
            Some(Ok(batch)) => (text.batch(&batch).map(Bytes::from), Some((answer, text))),
            Some(Err(e)) => (Err(e), None),
            None => (text.finish().map(Bytes::from), None),
        })
    });
    let body = futures::stream::once(async move { Ok(Bytes::from(first)) }).chain(rest);
    Ok(with_file_headers(Body::from_stream(body).into_response(), format, stem))
}

/// `GET /weeks/{week}/tables/{file}`: a table of the week page as CSV or JSON; 400 for a bad
/// week label, 404 for a week without data or a table the page does not have.
pub(crate) async fn week_file(
    State(state): State<AppState>,
    uri: Uri,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, AppError> {
    // Every part of the page reads one write generation (Session::pinned).
    let session = state.session.pinned();
    let Path((week, file)) = path?;
    let Some((name, format)) = split_file(&file) else {
        return Err(AppError::NoRoute(uri.path().to_string()));
    };
    // A bad label is a 400, a week without data a 404, as for the page.
    session.review(Some(&week), &state.thresholds).await?;
    let stem = format!("laneledger-{week}-{name}");
    match week_table(&session, &week, name).await? {
        Some(WeekTable::Computed(result)) => file_response(&result, format, &stem),
        Some(WeekTable::Sql(sql)) => stream_file(&session, &sql, format, &stem, state.options.request_timeout).await,
        None => Err(AppError::NoRoute(uri.path().to_string())),
    }
}

/// `GET /weeks/tables/{file}`: the weeks index's tables, `weeks` (seed 000's drill table, a row a
/// week) and `gate_weeks` (seed 003's ratios, a row a week), as CSV or JSON.
pub(crate) async fn weeks_file(
    State(state): State<AppState>,
    uri: Uri,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AppError> {
    let Path(file) = path?;
    let sql = match split_file(&file) {
        Some(("weeks", _)) => WEEKS_SQL,
        Some(("gate_weeks", _)) => GATE_WEEKS_SQL,
        _ => return Err(AppError::NoRoute(uri.path().to_string())),
    };
    let Some((name, format)) = split_file(&file) else {
        return Err(AppError::NoRoute(uri.path().to_string()));
    };
    let result = state.session.query(sql).await.map_err(Error::from)?;
    file_response(&result, format, &format!("laneledger-{name}"))
}

/// The SQL of a job's attempts as the job page lists them, in `attempt_no` order.
pub(crate) fn job_sql(job_id: &str) -> String {
    format!(
        "SELECT attempt_no, lane, started_at, ended_at, outcome, tokens_in, tokens_out, artifact_id,\n       \
         http_status, provider_code, error_kind, key_id, pool_id, model\n\
         FROM job_attempt\n\
         WHERE job_id = '{}'\n\
         ORDER BY attempt_no",
        job_id.replace('\'', "''")
    )
}

/// A file name part from `s`: ASCII letters, digits, `.`, `_` and `-` kept, anything else `_`.
fn file_part(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `GET /jobs/{job_id}/tables/{file}`: the job's attempts (`attempts.csv`, `attempts.json`);
/// 404 for a job the ledger does not hold or another table.
pub(crate) async fn job_file(
    State(state): State<AppState>,
    uri: Uri,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Response, AppError> {
    let Path((job_id, file)) = path?;
    let Some(("attempts", format)) = split_file(&file) else {
        return Err(AppError::NoRoute(uri.path().to_string()));
    };
    let result = state.session.query(&job_sql(&job_id)).await.map_err(Error::from)?;
    if result.num_rows() == 0 {
        return Err(AppError::UnknownJob(job_id));
    }
    file_response(
        &result,
        format,
        &format!("laneledger-job-{}-attempts", file_part(&job_id)),
    )
}

/// `GET /duplicates/tables/{file}`: the duplicates page's rows (`duplicates.csv`, `.json`).
pub(crate) async fn duplicates_file(
    State(state): State<AppState>,
    uri: Uri,
    path: Result<Path<String>, PathRejection>,
) -> Result<Response, AppError> {
    let Path(file) = path?;
    let Some(("duplicates", format)) = split_file(&file) else {
        return Err(AppError::NoRoute(uri.path().to_string()));
    };
    stream_file(
        &state.session,
        DUPLICATES_SQL,
        format,
        "laneledger-duplicates",
        state.options.request_timeout,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_split_into_table_and_format() {
        assert!(matches!(split_file("daily.csv"), Some(("daily", Format::Csv))));
        assert!(matches!(split_file("a.b.json"), Some(("a.b", Format::Json))));
        assert!(split_file("daily.xlsx").is_none());
        assert!(split_file("daily").is_none());
    }

    #[test]
    fn job_ids_are_quoted_in_sql_and_cleaned_in_file_names() {
        assert!(job_sql("it's").contains("WHERE job_id = 'it''s'"));
        assert_eq!(file_part("job/7 <b>&ä"), "job_7__b___");
    }
}
