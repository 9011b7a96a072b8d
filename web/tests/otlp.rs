//! `POST /v1/traces` in-process: OTLP/HTTP exports in protobuf and JSON (gzip too) land as
//! attempts through the built-in `otlp` mapping, with the answers the OTLP/HTTP spec gives
//! (`ExportTraceServiceResponse`, `partial_success`, `google.rpc.Status`), and every unknown
//! `/v1/` path is a JSON 404.

use std::io::Write;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::Ledger;
use laneledger_web::api::otlp::RpcStatus;
use laneledger_web::{AppState, Auth, Options, Token, Writer, WriterThread, app};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status, span};
use prost::Message;
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "otlp-token-0123456789abcdef";
const TRACE: &str = "5b8efff798038103d269b633813fc60c";
const PARENT: &str = "eee19b7ec3c1b173";
const FIRST: &str = "eee19b7ec3c1b174";
const SECOND: &str = "eee19b7ec3c1b175";

struct Server {
    app: Router,
    ledger: Ledger,
    _dir: tempfile::TempDir,
    _writer: WriterThread,
}

async fn server() -> Server {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("otlp.redb")).unwrap();
    let session = Session::new(ledger.clone()).await.unwrap();
    let (writer, thread) = Writer::spawn(ledger.clone(), 64).unwrap();
    let auth = Auth {
        token: Some(Token::new(TOKEN).unwrap()),
        reads_need_token: false,
    };
    let state = AppState::new(session.clone(), session.thresholds())
        .with_writer(writer, auth)
        .with_options(Options::default());
    Server {
        app: app(state),
        ledger,
        _dir: dir,
        _writer: thread,
    }
}

struct Reply {
    status: StatusCode,
    content_type: String,
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

async fn send(app: &Router, req: Request<Body>) -> Reply {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes().to_vec();
    Reply {
        status,
        content_type,
        body,
    }
}

/// A POST to `path` with the token, `content_type`, and gzip when `gzip`.
fn post(path: &str, content_type: &str, gzip: bool, body: Vec<u8>) -> Request<Body> {
    let mut b = Request::post(path)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, content_type);
    let body = if gzip {
        b = b.header(header::CONTENT_ENCODING, "gzip");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&body).unwrap();
        enc.finish().unwrap()
    } else {
        body
    };
    b.body(Body::from(body)).unwrap()
}

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

fn i(x: i64) -> any_value::Value {
    any_value::Value::IntValue(x)
}

fn bytes(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// The agent's parent span: not a model call, so the mapping skips it.
fn parent_span(job: &str) -> Span {
    Span {
        trace_id: bytes(TRACE),
        span_id: bytes(PARENT),
        name: "run job".into(),
        kind: 1,
        start_time_unix_nano: 1_760_709_601_000_000_000,
        end_time_unix_nano: 1_760_709_614_000_000_000,
        attributes: vec![kv("laneledger.job_id", s(job))],
        ..Default::default()
    }
}

/// Try 1: refused with a 429 (status ERROR, `error.type` 429), new attribute names.
fn refused_span(job: &str, idem: &str) -> Span {
    Span {
        trace_id: bytes(TRACE),
        span_id: bytes(FIRST),
        parent_span_id: bytes(PARENT),
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
            kv("laneledger.job_id", s(job)),
            kv("laneledger.idem_key", s(idem)),
        ],
        events: vec![span::Event {
            time_unix_nano: 1_760_709_602_800_000_000,
            name: "exception".into(),
            attributes: vec![kv(
                "exception.message",
                s(r#"{"error":{"code":"1305","message":"busy"}}"#),
            )],
            ..Default::default()
        }],
        status: Some(Status {
            message: "rate limited".into(),
            code: 2,
        }),
        ..Default::default()
    }
}

/// Try 2: ok, with tokens and a response id; the older attribute names (`gen_ai.system`,
/// `prompt_tokens` / `completion_tokens`).
fn ok_span(job: &str, idem: &str) -> Span {
    Span {
        trace_id: bytes(TRACE),
        span_id: bytes(SECOND),
        parent_span_id: bytes(PARENT),
        name: "chat glm-4.6".into(),
        kind: 3,
        start_time_unix_nano: 1_760_709_606_000_000_000,
        end_time_unix_nano: 1_760_709_613_500_000_000,
        attributes: vec![
            kv("gen_ai.operation.name", s("chat")),
            kv("gen_ai.system", s("z_ai")),
            kv("gen_ai.request.model", s("glm-4.6")),
            kv("gen_ai.response.id", s("chatcmpl-abc")),
            kv("gen_ai.usage.prompt_tokens", i(1500)),
            kv("gen_ai.usage.completion_tokens", i(700)),
            kv("laneledger.job_id", s(job)),
            kv("laneledger.idem_key", s(idem)),
        ],
        status: Some(Status {
            message: String::new(),
            code: 1,
        }),
        ..Default::default()
    }
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

/// The same spans in OTLP/JSON, written by hand as an exporter would (hex ids, enum integers,
/// 64-bit integers as strings).
fn json_request(job: &str, idem: &str) -> Vec<u8> {
    json!({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "bee-runner"}}]},
        "scopeSpans": [{"scope": {"name": "my.genai.instrumentation", "version": "1.0.0"}, "spans": [
            {"traceId": TRACE, "spanId": PARENT, "name": "run job", "kind": 1,
             "startTimeUnixNano": "1760709601000000000", "endTimeUnixNano": "1760709614000000000",
             "attributes": [{"key": "laneledger.job_id", "value": {"stringValue": job}}]},
            {"traceId": TRACE, "spanId": FIRST, "parentSpanId": PARENT, "name": "chat glm-4.6", "kind": 3,
             "startTimeUnixNano": "1760709602000000000", "endTimeUnixNano": "1760709602800000000",
             "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.provider.name", "value": {"stringValue": "z_ai"}},
                {"key": "gen_ai.request.model", "value": {"stringValue": "glm-4.6"}},
                {"key": "server.address", "value": {"stringValue": "api.z.ai"}},
                {"key": "error.type", "value": {"stringValue": "429"}},
                {"key": "laneledger.job_id", "value": {"stringValue": job}},
                {"key": "laneledger.idem_key", "value": {"stringValue": idem}}],
             "events": [{"name": "exception", "timeUnixNano": "1760709602800000000", "attributes": [
                {"key": "exception.message", "value": {"stringValue": "{\"error\":{\"code\":\"1305\",\"message\":\"busy\"}}"}}]}],
             "status": {"code": 2, "message": "rate limited"}},
            {"traceId": TRACE, "spanId": SECOND, "parentSpanId": PARENT, "name": "chat glm-4.6", "kind": 3,
             "startTimeUnixNano": "1760709606000000000", "endTimeUnixNano": "1760709613500000000",
             "attributes": [
                {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                {"key": "gen_ai.system", "value": {"stringValue": "z_ai"}},
                {"key": "gen_ai.request.model", "value": {"stringValue": "glm-4.6"}},
                {"key": "gen_ai.response.id", "value": {"stringValue": "chatcmpl-abc"}},
                {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "1500"}},
                {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": "700"}},
                {"key": "laneledger.job_id", "value": {"stringValue": job}},
                {"key": "laneledger.idem_key", "value": {"stringValue": idem}}],
             "status": {"code": 1}}
        ]}]
    }]})
    .to_string()
    .into_bytes()
}

/// The typed fields of a job's stored attempts (attrs checked apart).
fn stored(ledger: &Ledger, job: &str) -> Vec<Value> {
    ledger
        .job_attempts(job)
        .unwrap()
        .iter()
        .map(|s| {
            let a = &s.attempt;
            json!({
                "job_id": a.job_id, "idem_key": a.idem_key, "attempt_no": a.attempt_no,
                "lane": a.lane.as_str(), "started_at": a.started_at, "ended_at": a.ended_at,
                "outcome": a.outcome.map(|o| o.as_str()), "tokens_in": a.tokens_in, "tokens_out": a.tokens_out,
                "artifact_id": a.artifact_id, "http_status": a.http_status, "provider_code": a.provider_code,
                "pool_id": a.pool_id, "model": a.model,
            })
        })
        .collect()
}

/// What the two tries of `job` must be once stored.
fn two_tries(job: &str, idem: &str) -> Vec<Value> {
    vec![
        json!({
            "job_id": job, "idem_key": idem, "attempt_no": 1, "lane": "paid",
            "started_at": 1_760_709_602_000_000i64, "ended_at": 1_760_709_602_800_000i64,
            "outcome": "retryable", "tokens_in": null, "tokens_out": null, "artifact_id": null,
            "http_status": 429, "provider_code": 1305, "pool_id": "api.z.ai", "model": "glm-4.6",
        }),
        json!({
            "job_id": job, "idem_key": idem, "attempt_no": 2, "lane": "paid",
            "started_at": 1_760_709_606_000_000i64, "ended_at": 1_760_709_613_500_000i64,
            "outcome": "ok", "tokens_in": 1500, "tokens_out": 700, "artifact_id": "chatcmpl-abc",
            "http_status": null, "provider_code": null, "pool_id": null, "model": "glm-4.6",
        }),
    ]
}

#[tokio::test]
async fn a_protobuf_export_lands_as_two_tries_and_a_repost_adds_nothing() {
    let srv = server().await;
    let job = "job-pb";
    let body = request(vec![
        parent_span(job),
        refused_span(job, "idem-pb"),
        ok_span(job, "idem-pb"),
    ])
    .encode_to_vec();
    for _ in 0..2 {
        let r = send(
            &srv.app,
            post("/v1/traces", "application/x-protobuf", false, body.clone()),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.content_type, "application/x-protobuf");
        // Every span taken (the parent skipped): no partial_success, an empty message.
        assert_eq!(
            ExportTraceServiceResponse::decode(&r.body[..]).unwrap(),
            ExportTraceServiceResponse { partial_success: None }
        );
        assert_eq!(r.body, b"");
        assert_eq!(stored(&srv.ledger, job), two_tries(job, "idem-pb"));
    }
    // The span's identity and what the mapping did not use are kept in attrs.
    let attempts = srv.ledger.job_attempts(job).unwrap();
    let attrs: Value = serde_json::from_str(attempts[1].attempt.attrs.as_deref().unwrap()).unwrap();
    for (key, want) in [
        ("traceId", json!(TRACE)),
        ("spanId", json!(SECOND)),
        ("parentSpanId", json!(PARENT)),
        ("idem_key_from", json!("/attributes/laneledger.idem_key")),
        ("mapping", json!("otlp")),
        ("status", json!({"code": 1})),
    ] {
        assert_eq!(attrs[key], want, "{key} in {attrs}");
    }
    // The parent span wrote nothing anywhere: only the two model calls are attempts.
    assert_eq!(srv.ledger.counters().unwrap().accepted, 2);
}

#[tokio::test]
async fn a_gzip_json_export_lands_the_same() {
    let srv = server().await;
    let job = "job-json";
    let r = send(
        &srv.app,
        post("/v1/traces", "application/json", true, json_request(job, "idem-json")),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.content_type, "application/json");
    assert_eq!(r.json(), json!({}));
    assert_eq!(stored(&srv.ledger, job), two_tries(job, "idem-json"));
    // The same spans again, as protobuf this time: all duplicate deliveries.
    let body = request(vec![
        parent_span(job),
        refused_span(job, "idem-json"),
        ok_span(job, "idem-json"),
    ])
    .encode_to_vec();
    let r = send(&srv.app, post("/v1/traces", "application/x-protobuf", true, body)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, b"");
    assert_eq!(stored(&srv.ledger, job), two_tries(job, "idem-json"));
}

#[tokio::test]
async fn tries_sent_in_two_exports_are_numbered_across_them() {
    let srv = server().await;
    let job = "job-split";
    for span in [refused_span(job, "idem-split"), ok_span(job, "idem-split")] {
        let r = send(
            &srv.app,
            post(
                "/v1/traces",
                "application/x-protobuf",
                false,
                request(vec![span]).encode_to_vec(),
            ),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body, b"");
    }
    assert_eq!(stored(&srv.ledger, job), two_tries(job, "idem-split"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_exports_of_one_job_take_distinct_numbers() {
    let srv = server().await;
    let job = "job-race";
    let a = post(
        "/v1/traces",
        "application/x-protobuf",
        false,
        request(vec![refused_span(job, "idem-race")]).encode_to_vec(),
    );
    let b = post(
        "/v1/traces",
        "application/x-protobuf",
        false,
        request(vec![ok_span(job, "idem-race")]).encode_to_vec(),
    );
    let (ra, rb) = tokio::join!(send(&srv.app, a), send(&srv.app, b));
    assert_eq!((ra.status, rb.status), (StatusCode::OK, StatusCode::OK));
    // Neither was turned down (a shared number would have made one a conflict).
    assert_eq!((ra.body.as_slice(), rb.body.as_slice()), (&b""[..], &b""[..]));
    // Whichever export came first took number 1; the other took 2.
    let mut numbers: Vec<(String, u32)> = srv
        .ledger
        .job_attempts(job)
        .unwrap()
        .iter()
        .map(|s| (s.attempt.outcome.unwrap().as_str().to_string(), s.attempt.attempt_no))
        .collect();
    numbers.sort_by_key(|(_, n)| *n);
    let nos: Vec<u32> = numbers.iter().map(|(_, n)| *n).collect();
    assert_eq!(nos, [1, 2], "{numbers:?}");
}

#[tokio::test]
async fn spans_without_an_idempotency_key_are_rejected_unless_the_fallback_is_allowed() {
    let srv = server().await;
    let job = "job-nokey";
    let strip = |mut span: Span| {
        span.attributes.retain(|kv| kv.key != "laneledger.idem_key");
        span
    };
    let body = request(vec![
        parent_span(job),
        strip(refused_span(job, "")),
        strip(ok_span(job, "")),
    ])
    .encode_to_vec();
    let r = send(
        &srv.app,
        post("/v1/traces", "application/x-protobuf", false, body.clone()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let partial = ExportTraceServiceResponse::decode(&r.body[..])
        .unwrap()
        .partial_success
        .expect("partial_success");
    assert_eq!(partial.rejected_spans, 2);
    assert!(
        partial
            .error_message
            .starts_with("2 spans not written (each is kept in ingest_reject or attempt_conflict): span 2: idem_key: "),
        "{}",
        partial.error_message
    );
    assert!(
        partial.error_message.contains("; span 3: idem_key: "),
        "{}",
        partial.error_message
    );
    assert_eq!(srv.ledger.job_attempts(job).unwrap().len(), 0);

    // The same export as JSON: the answer is the JSON encoding of the same response.
    let mut v: Value = serde_json::from_slice(&json_request(job, "x")).unwrap();
    for span in v["resourceSpans"][0]["scopeSpans"][0]["spans"].as_array_mut().unwrap() {
        span["attributes"]
            .as_array_mut()
            .unwrap()
            .retain(|kv| kv["key"] != "laneledger.idem_key");
    }
    let json_body = v.to_string().into_bytes();
    let r = send(
        &srv.app,
        post("/v1/traces", "application/json", false, json_body.clone()),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let j = r.json();
    assert_eq!(j["partialSuccess"]["rejectedSpans"], "2", "{j}");
    assert_eq!(
        j["partialSuccess"]["errorMessage"].as_str().unwrap(),
        partial.error_message
    );

    // With ?idem_fallback=1 the trace id is the key, marked as a fallback.
    let r = send(
        &srv.app,
        post("/v1/traces?idem_fallback=1", "application/x-protobuf", false, body),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, b"");
    let keys: Vec<(u32, String)> = srv
        .ledger
        .job_attempts(job)
        .unwrap()
        .iter()
        .map(|s| (s.attempt.attempt_no, s.attempt.idem_key.clone()))
        .collect();
    let key = format!("fallback:{TRACE}");
    assert_eq!(keys, [(1, key.clone()), (2, key)]);
}

#[tokio::test]
async fn bad_bodies_are_400_with_a_status() {
    let srv = server().await;
    let r = send(
        &srv.app,
        post("/v1/traces", "application/json", false, b"{\"resourceSpans\":".to_vec()),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.content_type, "application/json");
    let j = r.json();
    assert_eq!(j["code"], 3);
    assert_eq!(
        j["message"],
        "the body is not valid JSON: EOF while parsing a value at line 1 column 17"
    );
    assert_eq!(j.as_object().unwrap().len(), 2);

    let bad_id = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"eee19b7ec3c1b174"}]}]}]}"#;
    let r = send(&srv.app, post("/v1/traces", "application/json", false, bad_id.to_vec())).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json(),
        json!({"code": 3, "message": "resourceSpans[0].scopeSpans[0].spans[0].traceId: not hex or base64 of 16 bytes: \"zz\""})
    );

    let r = send(
        &srv.app,
        post(
            "/v1/traces",
            "application/x-protobuf",
            false,
            b"\x0a\xff\xff\xff".to_vec(),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.content_type, "application/x-protobuf");
    let status = RpcStatus::decode(&r.body[..]).unwrap();
    assert_eq!(status.code, 3);
    assert!(
        status
            .message
            .starts_with("the body is not a protobuf ExportTraceServiceRequest: "),
        "{}",
        status.message
    );

    // `Content-Encoding: gzip` on a body that is not gzip.
    let mut gz = Vec::new();
    for (ct, body) in [
        ("application/json", &b"{}"[..]),
        ("application/x-protobuf", &b"\x0a\x00"[..]),
    ] {
        let mut req = post("/v1/traces", ct, false, body.to_vec());
        req.headers_mut()
            .insert(header::CONTENT_ENCODING, "gzip".parse().unwrap());
        gz.push(send(&srv.app, req).await);
    }
    let pb = gz.pop().unwrap();
    assert_eq!(pb.status, StatusCode::BAD_REQUEST);
    let status = RpcStatus::decode(&pb.body[..]).unwrap();
    assert!(
        status.message.starts_with("the gzip body cannot be read: "),
        "{}",
        status.message
    );
    for r in gz {
        assert_eq!(r.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.json()["code"], 3);
        assert!(
            r.json()["message"]
                .as_str()
                .unwrap()
                .starts_with("the gzip body cannot be read: "),
            "{}",
            r.json()
        );
    }

    let r = send(&srv.app, post("/v1/traces", "text/plain", false, b"hello".to_vec())).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        r.json(),
        json!({"code": 3, "message": "Content-Type \"text/plain\" is not supported; send application/x-protobuf or application/json"})
    );
    // Nothing of it was written.
    assert_eq!(srv.ledger.counters().unwrap().accepted, 0);
}

#[tokio::test]
async fn an_empty_export_is_ok_and_writes_nothing() {
    let srv = server().await;
    let r = send(
        &srv.app,
        post("/v1/traces", "application/x-protobuf", false, Vec::new()),
    )
    .await;
    assert_eq!((r.status, r.body.as_slice()), (StatusCode::OK, &b""[..]));
    let r = send(
        &srv.app,
        post(
            "/v1/traces",
            "application/json",
            false,
            b"{\"resourceSpans\":[]}".to_vec(),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json(), json!({}));
}

#[tokio::test]
async fn traces_need_the_token_and_unknown_api_paths_are_json_404() {
    let srv = server().await;
    let req = Request::post("/v1/traces")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .unwrap();
    let r = send(&srv.app, req).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(r.json()["error"].is_string());

    for (method, path) in [("GET", "/v1/nope"), ("POST", "/v1/nope/deeper"), ("GET", "/v1")] {
        let req = Request::builder().method(method).uri(path).body(Body::empty()).unwrap();
        let r = send(&srv.app, req).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(r.content_type, "application/json", "{path}");
        assert_eq!(r.json(), json!({"error": format!("no API route {method} {path}")}));
    }
    // A page path still gets the HTML 404 page.
    let r = send(&srv.app, Request::get("/nope").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.content_type.starts_with("text/html"), "{}", r.content_type);
}
