//! The web crate's errors: [`Error`] for what fails inside, [`AppError`] for what a visitor sees.
//!
//! Each [`AppError`] becomes one status and one readable HTML page in a single exhaustive `match`
//! ([`AppError::into_response`]); an internal failure is logged with its details and shown as a
//! generic 500 page.

use std::net::SocketAddr;

use askama::Template;
use axum::extract::rejection::PathRejection;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Response};

/// `Result` with the web crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can fail inside the site (the visitor sees [`AppError::Internal`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The query layer failed.
    #[error(transparent)]
    Query(#[from] laneledger_query::Error),
    /// The ledger failed.
    #[error(transparent)]
    Store(#[from] laneledger_store::Error),
    /// A page template failed to render.
    #[error("rendering a page: {0}")]
    Render(#[from] askama::Error),
    /// A query result did not have the shape the page expects.
    #[error("reading a query result: {0}")]
    Decode(#[from] serde_json::Error),
    /// A blocking ledger read panicked or was cancelled.
    #[error("a ledger read did not finish: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed while serving.
    #[error("serving: {0}")]
    Serve(#[source] std::io::Error),
}

/// A failed request, as the visitor sees it: one status and one HTML page.
#[derive(Debug)]
#[non_exhaustive]
pub enum AppError {
    /// The week label is not `YYYY-Www` (400).
    BadWeek(String),
    /// The path could not be read, e.g. bad percent-encoding (400).
    BadPath(String),
    /// No job's first attempt falls in this ISO week (404).
    UnknownWeek(String),
    /// The ledger has no attempt for this job (404).
    UnknownJob(String),
    /// No page at this path (404).
    NoRoute(String),
    /// Something failed inside; logged, shown as a generic page (500).
    Internal(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        match e {
            Error::Query(q) => AppError::from(q),
            other => AppError::Internal(other),
        }
    }
}

impl From<laneledger_query::Error> for AppError {
    fn from(e: laneledger_query::Error) -> Self {
        match e {
            laneledger_query::Error::BadWeek(label) => AppError::BadWeek(label),
            laneledger_query::Error::UnknownWeek(label) => AppError::UnknownWeek(label),
            other => AppError::Internal(Error::Query(other)),
        }
    }
}

impl From<PathRejection> for AppError {
    fn from(e: PathRejection) -> Self {
        AppError::BadPath(e.body_text())
    }
}

/// The error page: a status, a title and a sentence on what to do next.
#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    nav: &'static str,
    title: &'static str,
    status: String,
    message: String,
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let (status, title, message) = match self {
            AppError::BadWeek(label) => (
                StatusCode::BAD_REQUEST,
                "Not an ISO week",
                format!(
                    "{label:?} is not an ISO week label. Labels look like 2026-W47: \
                     a four-digit year, -W, and a two-digit week that exists in that year."
                ),
            ),
            AppError::BadPath(reason) => (
                StatusCode::BAD_REQUEST,
                "Bad address",
                format!("This address cannot be read: {reason}."),
            ),
            AppError::UnknownWeek(label) => (
                StatusCode::NOT_FOUND,
                "Week not found",
                format!(
                    "The ledger holds no job whose first attempt started in ISO week {label}. \
                     The Weeks page lists every week with data."
                ),
            ),
            AppError::UnknownJob(job_id) => (
                StatusCode::NOT_FOUND,
                "Job not found",
                format!("The ledger holds no attempt for job {job_id:?}."),
            ),
            AppError::NoRoute(path) => (
                StatusCode::NOT_FOUND,
                "Page not found",
                format!("There is no page at {path}. The links above lead to every page."),
            ),
            AppError::Internal(e) => {
                tracing::error!(error = %e, "request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The server could not build this page. The details are in the server's log.".to_string(),
                )
            }
        };
        let page = ErrorPage {
            nav: "",
            title,
            status: format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or("")),
            message,
        };
        match page.render() {
            Ok(html) => (status, Html(html)).into_response(),
            Err(e) => {
                tracing::error!(error = %e, "rendering the error page failed");
                (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], title).into_response()
            }
        }
    }
}

/// The fallback handler: any path without a page is a 404 page, and any `/v1/` path without a
/// route a JSON 404 (API clients never get an HTML page).
pub(crate) async fn not_found(method: Method, uri: Uri) -> Response {
    let path = uri.path();
    if path == "/v1" || path.starts_with("/v1/") {
        return crate::api_error::ApiError::new(StatusCode::NOT_FOUND, format!("no API route {method} {path}"))
            .into_response();
    }
    AppError::NoRoute(path.to_string()).into_response()
}
