//! `POST /v1/attempts?mapping=NAME`: a router's own records (LiteLLM's generic API logger, a
//! webhook) written through a built-in mapping, with the same auth, limits, durability and
//! per-record results as native records.
//!
//! The body is NDJSON, a JSON array or one JSON object (CSV with `Content-Type: text/csv`),
//! gzip or not. `idem_fallback=1` allows the mapping's declared idempotency-key fallback. Only
//! built-in mappings are named over HTTP: a client never names a file on the server.

use std::collections::HashMap;
use std::io::Cursor;

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use laneledger_store::Reject;
use laneledger_store::format::parse::Framed;
use laneledger_store::ingest::mapping::source::SourceReader;
use laneledger_store::ingest::mapping::{BUILTIN, InputShape, Mapping, SourceRecord};
use serde_json::Map;

use crate::api::ingest_api::{Ident, answer, attempt_batch, request_id, too_many_records};
use crate::api_error::ApiError;
use crate::server::body::decompress;
use crate::server::state::AppState;

/// Whether a query parameter says yes.
pub(crate) fn yes(query: &HashMap<String, String>, key: &str) -> bool {
    query
        .get(key)
        .is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes"))
}

/// Maps and writes one body (see the module doc).
pub async fn post(
    state: AppState,
    name: &str,
    query: &HashMap<String, String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let Some(writer) = state.writer.clone() else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server takes no writes",
        ));
    };
    if !BUILTIN.iter().any(|(n, _)| *n == name) {
        let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("no built-in mapping {name:?}: one of {}", names.join(", ")),
        ));
    }
    let mut mapping = Mapping::resolve(name).map_err(ApiError::internal)?;
    mapping.allow_idem_fallback(yes(query, "idem_fallback"));
    let id = request_id(&headers);
    let source = format!("POST /v1/attempts?mapping={name} {id}");
    let limit = state.options.body_limit;
    let max_records = state.options.max_records;
    let csv = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.to_ascii_lowercase().starts_with("text/csv"));
    let shape = match mapping.input() {
        InputShape::Otlp => InputShape::Otlp,
        _ if csv => InputShape::Csv,
        _ => InputShape::Json,
    };
    // Derived attempt numbers read the ledger: hold the lock from the read to the commit.
    let _serialized = state.derive_lock.lock().await;
    let ledger = state.session.ledger().clone();
    let (batch, idents) = tokio::task::spawn_blocking({
        let source = source.clone();
        move || -> Result<_, ApiError> {
            let bytes = decompress(&headers, &body, limit)?;
            let mut records: Vec<SourceRecord> = Vec::new();
            let mut framing_rejects: Vec<Reject> = Vec::new();
            for item in SourceReader::new(source.clone(), Cursor::new(bytes), shape) {
                match item.map_err(ApiError::internal)? {
                    Ok(r) => records.push(r),
                    Err(r) => framing_rejects.push(r),
                }
            }
            // The per-request cap counts what the body holds, before any attempt is built.
            too_many_records(records.len() + framing_rejects.len(), max_records)?;
            if records.is_empty() && framing_rejects.is_empty() {
                return Err(ApiError::new(StatusCode::BAD_REQUEST, "the body holds no record"));
            }
            let mapped = mapping.map(&source, records, &ledger);
            let mut framed: Vec<Framed<laneledger_store::Attempt>> =
                framing_rejects.into_iter().map(Framed::Reject).collect();
            framed.extend(mapped.framed);
            framed.sort_by_key(|f| match f {
                Framed::Record { line, .. } => *line,
                Framed::Reject(r) => r.line,
            });
            let idents: Vec<Ident> = framed
                .iter()
                .map(|f| match f {
                    Framed::Record { line, record, .. } => {
                        let mut m = Map::new();
                        m.insert("job_id".into(), record.job_id.clone().into());
                        m.insert("attempt_no".into(), record.attempt_no.into());
                        (*line, m)
                    }
                    Framed::Reject(r) => (r.line, Map::new()),
                })
                .collect();
            let batch = attempt_batch(&source, framed);
            Ok((batch, idents))
        }
    })
    .await
    .map_err(ApiError::internal)??;
    if idents.is_empty() {
        // Every record was left out by the mapping's filter: nothing to write.
        return Ok(answer(&id, &[], idents));
    }
    let results = writer.submit(batch).await?;
    drop(_serialized);
    Ok(answer(&id, &results, idents))
}
