//! `POST /v1/traces`: an OTLP/HTTP trace receiver, so an OpenTelemetry SDK or Collector exporter
//! can send GenAI spans to laneledger unchanged.
//!
//! The body is an `ExportTraceServiceRequest` in protobuf (`Content-Type: application/x-protobuf`)
//! or in OTLP/JSON (`application/json`), optionally gzip (`Content-Encoding: gzip`), within the
//! server's body limit. Each span is flattened into the JSON object the built-in `otlp` mapping
//! reads ([`laneledger_store::ingest::mapping::otlp`]; a protobuf request is first turned into its
//! OTLP/JSON form, so both encodings give the same objects), mapped to attempts (spans that are
//! not GenAI calls are skipped, not rejected) and written through the [`Writer`](crate::server::writer::Writer)
//! like `POST /v1/attempts`: the answer comes once the batch is durable.
//!
//! The answer is the OTLP/HTTP one: 200 with an `ExportTraceServiceResponse` in the request's
//! encoding, empty when every span was taken (or was a duplicate delivery or skipped), else with
//! `partial_success` giving the count of rejected spans (mapping rejects, write rejects and
//! conflicts) and the first reasons. A body that cannot be decoded is 400 with a
//! `google.rpc.Status` (protobuf for protobuf requests, JSON `{"code":3,"message":…}` otherwise);
//! an unsupported `Content-Type` or `Content-Encoding` is 415, a body past the limit 413, a full
//! write queue 503 with `Retry-After`, each with a JSON `Status`.
//!
//! Attempt numbers of OTLP spans are derived from the ledger (a retry is a sibling span), so the
//! map-and-write of one request holds [`AppState::derive_lock`](crate::server::state::AppState) until the writer
//! answers: two exports of one trace cannot both take the same next number.

use std::collections::HashMap;
use std::sync::OnceLock;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use laneledger_store::WriteResult;
use laneledger_store::format::parse::Framed;
use laneledger_store::ingest::mapping::otlp::spans_from_json;
use laneledger_store::ingest::mapping::{Mapping, SourceRecord};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Map, Value, json};

use crate::api::ingest_api::{attempt_batch, request_id};
use crate::server::body::{BodyError, decompress};
use crate::server::state::AppState;
use crate::server::writer::SubmitError;

/// The route, for `source` in rejects and conflicts.
const ROUTE: &str = "POST /v1/traces";

/// How many reasons `partial_success.error_message` quotes.
const REASONS_SHOWN: usize = 3;

/// `google.rpc.Status`, the body of an OTLP/HTTP error (its `details` are not sent).
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    /// The gRPC status code (3 invalid argument, 8 resource exhausted, 13 internal, 14 unavailable).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// What went wrong, for a person.
    #[prost(string, tag = "2")]
    pub message: String,
}

/// The two OTLP/HTTP encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Protobuf,
    Json,
}

/// The request's encoding from its `Content-Type`, `None` for any other media type.
fn encoding(headers: &HeaderMap) -> Option<Encoding> {
    let ct = headers.get(header::CONTENT_TYPE)?.to_str().ok()?;
    let media = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match media.as_str() {
        "application/x-protobuf" | "application/protobuf" => Some(Encoding::Protobuf),
        "application/json" => Some(Encoding::Json),
        _ => None,
    }
}

/// A failed export: the HTTP status, the gRPC code and the message, answered as a `Status` in
/// the request's encoding (JSON when the encoding is unknown).
#[derive(Debug)]
struct OtlpError {
    status: StatusCode,
    code: i32,
    message: String,
    retry_after_s: Option<u32>,
}

impl OtlpError {
    fn new(status: StatusCode, code: i32, message: impl Into<String>) -> Self {
        OtlpError {
            status,
            code,
            message: message.into(),
            retry_after_s: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, 3, message)
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!("internal error in {ROUTE}: {e}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            13,
            "internal error; see the server log",
        )
    }

    fn into_response(self, enc: Option<Encoding>) -> Response {
        let mut r = match enc {
            Some(Encoding::Protobuf) => {
                let body = RpcStatus {
                    code: self.code,
                    message: self.message,
                }
                .encode_to_vec();
                (self.status, [(header::CONTENT_TYPE, "application/x-protobuf")], body).into_response()
            }
            _ => (
                self.status,
                axum::Json(json!({"code": self.code, "message": self.message})),
            )
                .into_response(),
        };
        if let Some(s) = self.retry_after_s {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

impl From<BodyError> for OtlpError {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::TooLarge(_) => Self::new(StatusCode::PAYLOAD_TOO_LARGE, 8, e.to_string()),
            BodyError::Encoding(_) => Self::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, 3, e.to_string()),
            BodyError::Gzip(_) | BodyError::Array(_) | BodyError::Empty => Self::bad_request(e.to_string()),
        }
    }
}

impl From<SubmitError> for OtlpError {
    fn from(e: SubmitError) -> Self {
        match e {
            // The OTLP exporters retry 503 after `Retry-After`.
            SubmitError::QueueFull(_) | SubmitError::Stopped => OtlpError {
                retry_after_s: Some(1),
                ..Self::new(StatusCode::SERVICE_UNAVAILABLE, 14, e.to_string())
            },
            SubmitError::Storage(_) => Self::internal(e),
        }
    }
}

/// `POST /v1/traces`: OTLP/HTTP traces (protobuf or JSON, gzip or not). `?idem_fallback=1`
/// allows the `otlp` mapping's declared idempotency-key fallback (the trace id), as the
/// server-wide option [`Options::otlp_idem_fallback`](crate::server::state::Options) does.
pub async fn post_traces(
    State(state): State<AppState>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(enc) = encoding(&headers) else {
        let got = headers
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let message = match got {
            Some(ct) => {
                format!("Content-Type {ct:?} is not supported; send application/x-protobuf or application/json")
            }
            None => "no Content-Type; send application/x-protobuf or application/json".to_string(),
        };
        return OtlpError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, 3, message).into_response(None);
    };
    let fallback = state.options.otlp_idem_fallback || crate::api::mapped_api::yes(&query, "idem_fallback");
    match export(state, enc, fallback, headers, body).await {
        Ok(reply) => {
            let partial = (reply.rejected > 0).then(|| ExportTracePartialSuccess {
                rejected_spans: reply.rejected as i64,
                error_message: reply.message.clone(),
            });
            match enc {
                Encoding::Protobuf => {
                    let body = ExportTraceServiceResponse {
                        partial_success: partial,
                    }
                    .encode_to_vec();
                    (StatusCode::OK, [(header::CONTENT_TYPE, "application/x-protobuf")], body).into_response()
                }
                Encoding::Json => {
                    // proto3 JSON: an int64 is a decimal string.
                    let body = match partial {
                        Some(p) => json!({"partialSuccess": {
                            "rejectedSpans": p.rejected_spans.to_string(),
                            "errorMessage": p.error_message,
                        }}),
                        None => json!({}),
                    };
                    (StatusCode::OK, axum::Json(body)).into_response()
                }
            }
        }
        Err(e) => e.into_response(Some(enc)),
    }
}

/// What one export did.
#[derive(Debug, Default)]
struct ExportReply {
    /// Spans rejected by the mapping or the write rules, or in conflict with a stored attempt.
    rejected: u64,
    /// Why, the first few of them.
    message: String,
}

async fn export(
    state: AppState,
    enc: Encoding,
    fallback: bool,
    headers: HeaderMap,
    body: Bytes,
) -> Result<ExportReply, OtlpError> {
    let Some(writer) = state.writer.clone() else {
        return Err(OtlpError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            14,
            "this server takes no writes",
        ));
    };
    let source = format!("{ROUTE} {}", request_id(&headers));
    let limit = state.options.body_limit;
    // Decompressing and decoding a large body is CPU work: keep it off the async workers.
    let spans = tokio::task::spawn_blocking(move || -> Result<Vec<Value>, OtlpError> {
        let bytes = decompress(&headers, &body, limit)?;
        decode(enc, &bytes).map_err(OtlpError::bad_request)
    })
    .await
    .map_err(OtlpError::internal)??;
    if spans.is_empty() {
        return Ok(ExportReply::default());
    }
    if spans.len() > state.options.max_records {
        return Err(OtlpError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            3,
            format!(
                "the export holds {} spans, more than the {} a request may hold (--max-records); send smaller batches",
                spans.len(),
                state.options.max_records
            ),
        ));
    }
    let mut mapping = otlp_mapping()?;
    mapping.allow_idem_fallback(fallback);
    // Derived attempt numbers read the ledger: hold the lock from the read to the commit.
    let serialized = state.derive_lock.lock().await;
    let ledger = state.session.ledger().clone();
    let (batch, lines) = tokio::task::spawn_blocking(move || {
        let records = spans
            .into_iter()
            .enumerate()
            .map(|(i, value)| SourceRecord {
                line: i as u64 + 1,
                raw: value.to_string(),
                value,
            })
            .collect();
        let mapped = mapping.map(&source, records, &ledger);
        let lines: Vec<u64> = mapped
            .framed
            .iter()
            .map(|f| match f {
                Framed::Record { line, .. } => *line,
                Framed::Reject(r) => r.line,
            })
            .collect();
        let batch = attempt_batch(&source, mapped.framed);
        (batch, lines)
    })
    .await
    .map_err(OtlpError::internal)?;
    if batch.is_empty() {
        return Ok(ExportReply::default());
    }
    let results = writer.submit(batch).await?;
    drop(serialized);
    let mut reasons = Vec::new();
    for (result, line) in results.iter().zip(lines) {
        match result {
            WriteResult::Rejected { field, reason } => reasons.push(match field {
                Some(f) => format!("span {line}: {f}: {reason}"),
                None => format!("span {line}: {reason}"),
            }),
            WriteResult::Conflict { fields } => reasons.push(format!(
                "span {line}: differs from the stored attempt in {}",
                fields.join(", ")
            )),
            WriteResult::Accepted | WriteResult::Completed { .. } | WriteResult::Duplicate => {}
        }
    }
    let rejected = reasons.len() as u64;
    let mut message = String::new();
    if rejected > 0 {
        let spans = if rejected == 1 { "span" } else { "spans" };
        message = format!(
            "{rejected} {spans} not written (each is kept in ingest_reject or attempt_conflict): {}",
            reasons[..reasons.len().min(REASONS_SHOWN)].join("; ")
        );
        if reasons.len() > REASONS_SHOWN {
            message.push_str(&format!("; and {} more", reasons.len() - REASONS_SHOWN));
        }
    }
    Ok(ExportReply { rejected, message })
}

/// The built-in `otlp` mapping, read once.
fn otlp_mapping() -> Result<Mapping, OtlpError> {
    static OTLP: OnceLock<Result<Mapping, String>> = OnceLock::new();
    OTLP.get_or_init(|| Mapping::resolve("otlp").map_err(|e| e.to_string()))
        .clone()
        .map_err(OtlpError::internal)
}

/// The body's spans as flat span objects, or why the body is not an `ExportTraceServiceRequest`.
fn decode(enc: Encoding, bytes: &[u8]) -> Result<Vec<Value>, String> {
    let json = match enc {
        Encoding::Protobuf => {
            let request = ExportTraceServiceRequest::decode(bytes)
                .map_err(|e| format!("the body is not a protobuf ExportTraceServiceRequest: {e}"))?;
            request_json(&request)?
        }
        Encoding::Json => {
            let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            serde_json::from_slice(bytes).map_err(|e| format!("the body is not valid JSON: {e}"))?
        }
    };
    spans_from_json(&json)
}

/// A protobuf request in its OTLP/JSON form (ids in hex, enums and 64-bit integers as the JSON
/// encoding writes them), for [`spans_from_json`]. Errors name an id of the wrong length.
pub fn request_json(request: &ExportTraceServiceRequest) -> Result<Value, String> {
    let mut resource_spans = Vec::with_capacity(request.resource_spans.len());
    for (r, rs) in request.resource_spans.iter().enumerate() {
        let mut out = Map::new();
        if let Some(resource) = &rs.resource {
            out.insert(
                "resource".into(),
                json!({"attributes": key_values(&resource.attributes)}),
            );
        }
        let mut scope_spans = Vec::with_capacity(rs.scope_spans.len());
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            let mut scope = Map::new();
            if let Some(sc) = &ss.scope {
                scope.insert("scope".into(), json!({"name": sc.name, "version": sc.version}));
            }
            let mut spans = Vec::with_capacity(ss.spans.len());
            for (i, span) in ss.spans.iter().enumerate() {
                spans.push(span_json(
                    span,
                    &format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"),
                )?);
            }
            scope.insert("spans".into(), spans.into());
            scope_spans.push(Value::Object(scope));
        }
        out.insert("scopeSpans".into(), scope_spans.into());
        resource_spans.push(Value::Object(out));
    }
    Ok(json!({ "resourceSpans": resource_spans }))
}

/// One protobuf span in OTLP/JSON.
fn span_json(span: &Span, path: &str) -> Result<Value, String> {
    let mut out = Map::new();
    for (key, bytes, len) in [
        ("traceId", &span.trace_id, 16),
        ("spanId", &span.span_id, 8),
        ("parentSpanId", &span.parent_span_id, 8),
    ] {
        if !bytes.is_empty() && bytes.len() != len {
            return Err(format!("{path}.{key}: {} bytes; it must have {len}", bytes.len()));
        }
        out.insert(key.into(), hex(bytes).into());
    }
    out.insert("name".into(), span.name.clone().into());
    out.insert("kind".into(), span.kind.into());
    out.insert("startTimeUnixNano".into(), span.start_time_unix_nano.to_string().into());
    out.insert("endTimeUnixNano".into(), span.end_time_unix_nano.to_string().into());
    out.insert("attributes".into(), key_values(&span.attributes));
    let events: Vec<Value> = span
        .events
        .iter()
        .map(|e| {
            json!({
                "timeUnixNano": e.time_unix_nano.to_string(),
                "name": e.name,
                "attributes": key_values(&e.attributes),
            })
        })
        .collect();
    out.insert("events".into(), events.into());
    if let Some(status) = &span.status {
        out.insert("status".into(), json!({"message": status.message, "code": status.code}));
    }
    Ok(Value::Object(out))
}

/// `KeyValue`s in OTLP/JSON (`[{key, value}]`).
fn key_values(kvs: &[KeyValue]) -> Value {
    kvs.iter()
        .map(|kv| json!({"key": kv.key, "value": kv.value.as_ref().map_or(json!({}), any_value_json)}))
        .collect::<Vec<_>>()
        .into()
}

/// One `AnyValue` in OTLP/JSON: `intValue` a decimal string, `bytesValue` base64, a double that is
/// not finite `"NaN"`, `"Infinity"` or `"-Infinity"`; a profiling string-table index is empty.
fn any_value_json(v: &AnyValue) -> Value {
    use any_value::Value as V;
    match &v.value {
        None | Some(V::StringValueStrindex(_)) => json!({}),
        Some(V::StringValue(s)) => json!({"stringValue": s}),
        Some(V::BoolValue(b)) => json!({"boolValue": b}),
        Some(V::IntValue(i)) => json!({"intValue": i.to_string()}),
        Some(V::DoubleValue(d)) => match serde_json::Number::from_f64(*d) {
            Some(n) => json!({"doubleValue": n}),
            None if d.is_nan() => json!({"doubleValue": "NaN"}),
            None if *d > 0.0 => json!({"doubleValue": "Infinity"}),
            None => json!({"doubleValue": "-Infinity"}),
        },
        Some(V::ArrayValue(a)) => {
            json!({"arrayValue": {"values": a.values.iter().map(any_value_json).collect::<Vec<_>>()}})
        }
        Some(V::KvlistValue(kv)) => json!({"kvlistValue": {"values": key_values(&kv.values)}}),
        Some(V::BytesValue(b)) => json!({"bytesValue": base64::engine::general_purpose::STANDARD.encode(b)}),
    }
}

/// Bytes as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, InstrumentationScope, KeyValueList};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Status, span};

    fn kv(key: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    fn s(x: &str) -> any_value::Value {
        any_value::Value::StringValue(x.into())
    }

    fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", s("bee-runner"))],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "my.genai.instrumentation".into(),
                        version: "1.0.0".into(),
                        ..Default::default()
                    }),
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn hex_bytes(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The research notes' first span (a 429), built with the protobuf types.
    fn refused() -> Span {
        Span {
            trace_id: hex_bytes("5b8efff798038103d269b633813fc60c"),
            span_id: hex_bytes("eee19b7ec3c1b174"),
            parent_span_id: hex_bytes("eee19b7ec3c1b173"),
            name: "chat glm-4.6".into(),
            kind: 3,
            start_time_unix_nano: 1_760_709_602_000_000_000,
            end_time_unix_nano: 1_760_709_602_800_000_000,
            attributes: vec![
                kv("gen_ai.operation.name", s("chat")),
                kv("gen_ai.provider.name", s("z_ai")),
                kv("gen_ai.request.model", s("glm-4.6")),
                kv("server.address", s("api.z.ai")),
                kv("error.type", s("429")),
            ],
            events: vec![span::Event {
                time_unix_nano: 1_760_709_602_800_000_000,
                name: "exception".into(),
                attributes: vec![kv("exception.message", s("{\"error\":{\"code\":\"1305\"}}"))],
                ..Default::default()
            }],
            status: Some(Status {
                message: "rate limited".into(),
                code: 2,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn protobuf_and_json_give_the_same_span_objects() {
        let pb = request(vec![refused()]).encode_to_vec();
        let from_pb = decode(Encoding::Protobuf, &pb).unwrap();
        let json = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"bee-runner"}}]},
          "scopeSpans":[{"scope":{"name":"my.genai.instrumentation","version":"1.0.0"},"spans":[
          {"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","parentSpanId":"eee19b7ec3c1b173",
           "name":"chat glm-4.6","kind":3,"startTimeUnixNano":"1760709602000000000","endTimeUnixNano":"1760709602800000000",
           "attributes":[{"key":"gen_ai.operation.name","value":{"stringValue":"chat"}},
             {"key":"gen_ai.provider.name","value":{"stringValue":"z_ai"}},
             {"key":"gen_ai.request.model","value":{"stringValue":"glm-4.6"}},
             {"key":"server.address","value":{"stringValue":"api.z.ai"}},
             {"key":"error.type","value":{"stringValue":"429"}}],
           "events":[{"name":"exception","timeUnixNano":"1760709602800000000","attributes":[
             {"key":"exception.message","value":{"stringValue":"{\"error\":{\"code\":\"1305\"}}"}}]}],
           "status":{"code":2,"message":"rate limited"}}]}]}]}"#;
        let from_json = decode(Encoding::Json, json.as_bytes()).unwrap();
        assert_eq!(from_pb, from_json);
        // Same key order too: the stored raw text does not depend on the encoding.
        assert_eq!(from_pb[0].to_string(), from_json[0].to_string());
        assert_eq!(
            from_pb[0],
            json!({
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": "eee19b7ec3c1b174",
                "parentSpanId": "eee19b7ec3c1b173",
                "name": "chat glm-4.6",
                "kind": 3,
                "startTimeUnixNano": "1760709602000000000",
                "endTimeUnixNano": "1760709602800000000",
                "status": {"code": 2, "message": "rate limited"},
                "attributes": {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": "z_ai",
                    "gen_ai.request.model": "glm-4.6",
                    "server.address": "api.z.ai",
                    "error.type": "429"
                },
                "resource": {"service.name": "bee-runner"},
                "scope": {"name": "my.genai.instrumentation", "version": "1.0.0"},
                "events": [{
                    "name": "exception",
                    "timeUnixNano": "1760709602800000000",
                    "attributes": {"exception.message": "{\"error\":{\"code\":\"1305\"}}"}
                }],
                "exception": {"message": "{\"error\":{\"code\":\"1305\"}}"}
            })
        );
    }

    #[test]
    fn protobuf_attribute_values_of_every_kind() {
        use any_value::Value as V;
        let span = Span {
            trace_id: hex_bytes("0af7651916cd43dd8448eb211c80319c"),
            span_id: hex_bytes("b7ad6b7169203331"),
            attributes: vec![
                kv("i", V::IntValue(-5)),
                kv("d", V::DoubleValue(2.0)),
                kv("nan", V::DoubleValue(f64::NAN)),
                kv("inf", V::DoubleValue(f64::NEG_INFINITY)),
                kv("b", V::BoolValue(true)),
                kv("bytes", V::BytesValue(vec![0, 1, 2])),
                kv(
                    "a",
                    V::ArrayValue(ArrayValue {
                        values: vec![AnyValue { value: Some(s("stop")) }, AnyValue { value: None }],
                    }),
                ),
                kv(
                    "kv",
                    V::KvlistValue(KeyValueList {
                        values: vec![kv("x", V::IntValue(1))],
                    }),
                ),
                KeyValue {
                    key: "empty".into(),
                    value: None,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let spans = decode(Encoding::Protobuf, &request(vec![span]).encode_to_vec()).unwrap();
        assert_eq!(
            spans[0]["attributes"],
            json!({"i": -5, "d": 2.0, "nan": "NaN", "inf": "-Infinity", "b": true, "bytes": "AAEC",
                   "a": ["stop", null], "kv": {"x": 1}, "empty": null})
        );
        // No parent, kind, times, status or events: those keys are left out; status code is 0.
        assert_eq!(spans[0].get("parentSpanId"), None);
        assert_eq!(spans[0].get("kind"), None);
        assert_eq!(spans[0].get("startTimeUnixNano"), None);
        assert_eq!(spans[0].get("events"), None);
        assert_eq!(spans[0]["status"], json!({"code": 0}));
    }

    #[test]
    fn bad_bodies_are_errors_naming_the_path() {
        let mut span = refused();
        span.trace_id = vec![1; 11];
        assert_eq!(
            decode(Encoding::Protobuf, &request(vec![refused(), span]).encode_to_vec()).unwrap_err(),
            "resourceSpans[0].scopeSpans[0].spans[1].traceId: 11 bytes; it must have 16"
        );
        let mut span = refused();
        span.span_id.clear();
        assert_eq!(
            decode(Encoding::Protobuf, &request(vec![span]).encode_to_vec()).unwrap_err(),
            "resourceSpans[0].scopeSpans[0].spans[0].spanId: missing"
        );
        assert!(
            decode(Encoding::Protobuf, b"\x0a\xff\xff")
                .unwrap_err()
                .starts_with("the body is not a protobuf ExportTraceServiceRequest: "),
        );
        assert!(
            decode(Encoding::Json, b"{\"resourceSpans\":")
                .unwrap_err()
                .starts_with("the body is not valid JSON: "),
        );
        assert_eq!(
            decode(
                Encoding::Json,
                br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"nothex","spanId":"eee19b7ec3c1b174"}]}]}]}"#
            )
            .unwrap_err(),
            "resourceSpans[0].scopeSpans[0].spans[0].traceId: not hex or base64 of 16 bytes: \"nothex\""
        );
    }

    #[test]
    fn media_types() {
        let with = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
            encoding(&h)
        };
        assert_eq!(with("application/x-protobuf"), Some(Encoding::Protobuf));
        assert_eq!(with("Application/JSON; charset=utf-8"), Some(Encoding::Json));
        assert_eq!(with("text/plain"), None);
        assert_eq!(encoding(&HeaderMap::new()), None);
    }

    #[test]
    fn a_status_decodes_as_google_rpc_status() {
        let r = OtlpError::bad_request("bad").into_response(Some(Encoding::Protobuf));
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert_eq!(r.headers()[header::CONTENT_TYPE], "application/x-protobuf");
        let r = OtlpError::from(SubmitError::QueueFull(64)).into_response(Some(Encoding::Json));
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()[header::RETRY_AFTER], "1");
        let bytes = RpcStatus {
            code: 3,
            message: "bad".into(),
        }
        .encode_to_vec();
        assert_eq!(bytes, b"\x08\x03\x12\x03bad");
    }
}
