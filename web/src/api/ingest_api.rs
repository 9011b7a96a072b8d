//! `POST /v1/attempts` and `POST /v1/decisions`: routers write over HTTP.
//!
//! The body is NDJSON, a JSON array, or CSV (`Content-Type: text/csv`), optionally gzip
//! (`Content-Encoding: gzip`). Every record is decoded by SPEC 1's rules and offered to the
//! [`Writer`](crate::server::writer::Writer), which commits it with SPEC 2's write rules in a group
//! commit. The reply is sent only once the batch is durable, and carries one result per record,
//! in body order (`accepted`, `completed`, `duplicate`, `conflict` with the differing fields,
//! `rejected` with field and reason), and the totals. Status 200 when every record was taken or
//! was a duplicate; 207 when some were in conflict or rejected (those are kept in
//! `attempt_conflict`/`decision_conflict` and `ingest_reject`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use laneledger_store::format::decision::DecisionDecoder;
use laneledger_store::format::parse::{AttemptDecoder, Framed, RecordDecoder};
use laneledger_store::{Counters, Incoming, IncomingDecision, WriteResult, format_timestamp};
use serde_json::{Map, Value};

use crate::api_error::ApiError;
use crate::server::body::{BodyError, body_format, count_records, decompress, frame_into};
use crate::server::state::AppState;
use crate::server::writer::{Batch, SubmitError};

/// A record kind that can be posted.
trait PostKind {
    type Decoder: RecordDecoder;
    /// The route, for `source` in rejects and conflicts.
    const ROUTE: &'static str;
    /// The record's identity fields for its result line.
    fn identity(record: &<Self::Decoder as RecordDecoder>::Record, out: &mut Map<String, Value>);
    /// One record as the writer takes it.
    type Item;
    /// One framed record as the writer takes it.
    fn item(source: &str, framed: Framed<<Self::Decoder as RecordDecoder>::Record>) -> Self::Item;
    /// The records as a writer batch.
    fn batch(items: Vec<Self::Item>) -> Batch;
}

struct Attempts;
impl PostKind for Attempts {
    type Decoder = AttemptDecoder;
    const ROUTE: &'static str = "POST /v1/attempts";
    fn identity(a: &laneledger_store::Attempt, out: &mut Map<String, Value>) {
        out.insert("job_id".into(), a.job_id.clone().into());
        out.insert("attempt_no".into(), a.attempt_no.into());
    }
    type Item = Incoming;
    fn item(source: &str, framed: Framed<laneledger_store::Attempt>) -> Incoming {
        attempt_item(source, framed)
    }
    fn batch(items: Vec<Incoming>) -> Batch {
        Batch::Attempts(items)
    }
}

/// One framed attempt as the writer takes it.
fn attempt_item(source: &str, framed: Framed<laneledger_store::Attempt>) -> Incoming {
    match framed {
        Framed::Record { line, raw, record } => Incoming::Attempt {
            source: source.to_string(),
            line,
            raw,
            attempt: record,
        },
        Framed::Reject(r) => Incoming::Reject(r),
    }
}

/// Framed attempts (native, or a mapping's output) as one writer batch, in order.
pub(crate) fn attempt_batch(source: &str, framed: Vec<Framed<laneledger_store::Attempt>>) -> Batch {
    Batch::Attempts(framed.into_iter().map(|f| attempt_item(source, f)).collect())
}

struct Decisions;
impl PostKind for Decisions {
    type Decoder = DecisionDecoder;
    const ROUTE: &'static str = "POST /v1/decisions";
    fn identity(d: &laneledger_store::Decision, out: &mut Map<String, Value>) {
        out.insert("job_id".into(), d.job_id.clone().into());
        out.insert("decided_at".into(), format_timestamp(d.decided_at).into());
    }
    type Item = IncomingDecision;
    fn item(source: &str, framed: Framed<laneledger_store::Decision>) -> IncomingDecision {
        match framed {
            Framed::Record { line, raw, record } => IncomingDecision::Decision {
                source: source.to_string(),
                line,
                raw,
                decision: record,
            },
            Framed::Reject(r) => IncomingDecision::Reject(r),
        }
    }
    fn batch(items: Vec<IncomingDecision>) -> Batch {
        Batch::Decisions(items)
    }
}

/// `POST /v1/attempts`: attempt records (SPEC 1.1); with `?mapping=NAME`, a router's own records
/// through a built-in mapping ([`crate::api::mapped_api`]).
pub async fn post_attempts(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match query.get("mapping") {
        Some(name) => crate::api::mapped_api::post(state, name, &query, headers, body)
            .await
            .into_response(),
        None => post::<Attempts>(state, headers, body).await.into_response(),
    }
}

/// `POST /v1/decisions`: gate decisions (SPEC 1.2, seed 003).
pub async fn post_decisions(State(state): State<AppState>, headers: HeaderMap, body: Bytes) -> Response {
    post::<Decisions>(state, headers, body).await.into_response()
}

/// The request's id: the client's `X-Request-Id` when it is short printable ASCII, else one made
/// here (`<µs since the epoch>-<n>`).
pub(crate) fn request_id(headers: &HeaderMap) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "{}-{}",
                laneledger_store::now_micros(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            )
        })
}

impl From<BodyError> for ApiError {
    fn from(e: BodyError) -> Self {
        let status = match e {
            BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Encoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            BodyError::Gzip(_) | BodyError::Array(_) | BodyError::Empty => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.to_string())
    }
}

impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::QueueFull(_) | SubmitError::Stopped => ApiError {
                retry_after_s: Some(1),
                ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            },
            SubmitError::Storage(_) => ApiError::internal(e),
        }
    }
}

async fn post<K: PostKind>(state: AppState, headers: HeaderMap, body: Bytes) -> Result<Response, ApiError> {
    let Some(writer) = state.writer.clone() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server takes no writes",
        ));
    };
    let id = request_id(&headers);
    let source = format!("{} {id}", K::ROUTE);
    let limit = state.options.body_limit;
    let max_records = state.options.max_records;
    // Decompressing and decoding a large body is CPU work: keep it off the async workers.
    let (batch, idents) = tokio::task::spawn_blocking({
        let source = source.clone();
        move || -> Result<_, ApiError> {
            let bytes = decompress(&headers, &body, limit)?;
            let format = body_format(&headers, &bytes);
            let records = count_records(format, &bytes);
            too_many_records(records, max_records)?;
            // Each result line starts with the record's line and, when it parsed, its identity
            // (an empty map for a reject: it allocates nothing). Records are framed straight into
            // the writer's shape, with room made once.
            let mut idents: Vec<Ident> = Vec::with_capacity(records);
            let items = frame_into::<K::Decoder, _>(&source, format, &bytes, records, |f| {
                idents.push(match &f {
                    Framed::Record { line, record, .. } => {
                        let mut m = Map::new();
                        K::identity(record, &mut m);
                        (*line, m)
                    }
                    Framed::Reject(r) => (r.line, Map::new()),
                });
                K::item(&source, f)
            })?;
            Ok((K::batch(items), idents))
        }
    })
    .await
    .map_err(ApiError::internal)??;
    let results = writer.submit(batch).await?;
    Ok(answer(&id, &results, idents))
}

/// 413 when a body holds more than `max` records, naming the limit.
pub(crate) fn too_many_records(records: usize, max: usize) -> Result<(), ApiError> {
    if records > max {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the body holds {records} records, more than the {max} a request may hold (--max-records); split it"
            ),
        ));
    }
    Ok(())
}

/// The start of one result line: the record's line, and its identity fields when it parsed (empty
/// for a reject, so a body of bad records costs no allocation per record here).
pub(crate) type Ident = (u64, Map<String, Value>);

/// Rejected records answered in full; past them, only counted by field and reason.
pub const REJECTS_IN_FULL: usize = 100;

/// The reply to a write: one result per record (its line, its identity when it parsed, and what
/// the write rules did), the totals; 200 when every record was taken or was a duplicate, 207 when
/// some were in conflict or rejected. Past the first [`REJECTS_IN_FULL`] rejected records, the
/// others are left out of `results` and counted in `more_rejected` (`{"field: reason": n}`), so
/// a body of a million bad records does not get a million result lines.
pub(crate) fn answer(id: &str, results: &[WriteResult], idents: Vec<Ident>) -> Response {
    let mut totals = Counters::default();
    let mut more_rejected: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    let lines: Vec<Value> = results
        .iter()
        .zip(idents)
        .filter_map(|(result, (line, identity))| {
            totals.add(result);
            if let WriteResult::Rejected { field, reason } = result
                && totals.rejected > REJECTS_IN_FULL as u64
            {
                let key = match field {
                    Some(f) => format!("{f}: {reason}"),
                    None => reason.clone(),
                };
                *more_rejected.entry(key).or_default() += 1;
                return None;
            }
            let mut m = Map::new();
            m.insert("line".into(), line.into());
            m.extend(identity);
            if let Ok(Value::Object(fields)) = serde_json::to_value(result) {
                m.extend(fields);
            }
            Some(Value::Object(m))
        })
        .collect();
    let all_taken = totals.conflicts == 0 && totals.rejected == 0;
    let status = if all_taken {
        StatusCode::OK
    } else {
        StatusCode::MULTI_STATUS
    };
    let mut reply = serde_json::json!({
        "request_id": id,
        "durable": true,
        "totals": totals,
        "results": lines,
    });
    if !more_rejected.is_empty() {
        reply["more_rejected"] = serde_json::json!(more_rejected);
    }
    (status, Json(reply)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::header;

    #[test]
    fn a_full_queue_is_503_with_retry_after() {
        let r = ApiError::from(SubmitError::QueueFull(64)).into_response();
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let r = ApiError::from(BodyError::TooLarge(10)).into_response();
        assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let r = ApiError::from(BodyError::Encoding("br".into())).into_response();
        assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
}
