//! Errors of the JSON API: a status and `{"error": "…"}`, never an HTML page.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One failed API request: the status, the message, and how long to wait before a retry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// Seconds to wait before retrying (`Retry-After`), for 503.
    pub retry_after_s: Option<u32>,
}

impl ApiError {
    /// An error with `status` and `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// 400 Bad Request.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    /// 500, with the details logged and a generic message shown.
    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!("internal error: {e}");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal error; see the server log")
    }
}

impl From<laneledger_query::Error> for ApiError {
    /// A user's mistake is 4xx: read-only or unplannable SQL and bad week labels 400, an unknown
    /// week 404, a query past its memory or result limit or failing as it runs 422; a statement
    /// that panicked is 500 saying the statement failed; a ledger failure is 500.
    fn from(e: laneledger_query::Error) -> Self {
        use laneledger_query::Error as Q;
        match &e {
            Q::ReadOnly(_) | Q::Plan(_) | Q::BadWeek(_) => Self::bad_request(e.to_string()),
            Q::UnknownWeek(_) => Self::new(StatusCode::NOT_FOUND, e.to_string()),
            Q::ResultTooLarge(_) | Q::Execution(_) => Self::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
            Q::Panicked(what) => {
                tracing::error!("a SQL statement panicked: {what}");
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
            }
            _ => Self::internal(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(serde_json::json!({ "error": self.message }))).into_response();
        if let Some(s) = self.retry_after_s {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_that_panicked_is_a_500_saying_the_statement_failed() {
        let e = ApiError::from(laneledger_query::Error::Panicked("offset overflow".into()));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            e.message,
            "the statement failed: it stopped on an internal error (offset overflow); the details are in the log"
        );
    }
}
