//! `POST /v1/attempts?mapping=NAME`: a webhook logger's body (LiteLLM's generic API logger as
//! `json_array` or `ndjson`, gzip or not, a CSV dump) through a built-in mapping, with the
//! per-record results of native posts.

use std::io::Write;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::{LaneConfig, Ledger};
use laneledger_web::{AppState, Auth, Options, Token, Writer, WriterThread, app};
use serde_json::{Value, json};
use tower::ServiceExt;

const TOKEN: &str = "test-token-0123456789abcdef";
const LITELLM: &str = include_str!("../../sample-data/routers/litellm.ndjson");

struct Server {
    app: Router,
    ledger: Ledger,
    _dir: tempfile::TempDir,
    _writer: WriterThread,
}

async fn server() -> Server {
    server_with(Options::default()).await
}

async fn server_with(options: Options) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("m.redb")).unwrap();
    let session = Session::with_config(ledger.clone(), LaneConfig::default())
        .await
        .unwrap();
    let (writer, thread) = Writer::spawn(ledger.clone(), 64).unwrap();
    let auth = Auth {
        token: Some(Token::new(TOKEN).unwrap()),
        reads_need_token: false,
    };
    let state = AppState::new(session.clone(), session.thresholds())
        .with_writer(writer, auth)
        .with_options(options);
    Server {
        app: app(state),
        ledger,
        _dir: dir,
        _writer: thread,
    }
}

async fn post(app: &Router, path: &str, body: Vec<u8>, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut req = Request::post(path).header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = app.clone().oneshot(req.body(Body::from(body)).unwrap()).await.unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

fn results(v: &Value) -> Vec<(u64, String, u64, String)> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap(),
                r["job_id"].as_str().unwrap_or("").to_string(),
                r["attempt_no"].as_u64().unwrap_or(0),
                r["result"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_generic_logger_json_array_then_ndjson_gzip_again() {
    let s = server().await;
    // LiteLLM's default log_format json_array: the batch as one JSON array.
    let array: Vec<Value> = LITELLM.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let (status, v) = post(
        &s.app,
        "/v1/attempts?mapping=litellm&idem_fallback=1",
        serde_json::to_vec(&array).unwrap(),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(
        v["totals"],
        json!({"accepted": 4, "completed": 0, "duplicates": 0, "conflicts": 0, "rejected": 0})
    );
    assert_eq!(
        results(&v),
        vec![
            (1, "trace-7f3a".into(), 1, "accepted".into()),
            (2, "trace-7f3a".into(), 2, "accepted".into()),
            (3, "trace-7f3a".into(), 3, "accepted".into()),
            (4, "trace-90c1".into(), 1, "accepted".into()),
        ]
    );
    // The same calls again as gzip'd NDJSON: duplicates, the numbers they got the first time.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(LITELLM.as_bytes()).unwrap();
    let (status, v) = post(
        &s.app,
        "/v1/attempts?mapping=litellm&idem_fallback=1",
        gz.finish().unwrap(),
        &[("content-encoding", "gzip")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["totals"]["duplicates"], 4);
    let stored = s.ledger.job_attempts("trace-7f3a").unwrap();
    assert_eq!(
        stored
            .iter()
            .map(|a| (a.attempt.attempt_no, a.attempt.http_status, a.attempt.provider_code))
            .collect::<Vec<_>>(),
        vec![
            (1, Some(429), Some(1305)),
            (2, Some(429), Some(1305)),
            (3, Some(200), None)
        ]
    );
}

#[tokio::test]
async fn records_without_a_key_are_rejected_unless_the_fallback_is_allowed() {
    let s = server().await;
    let (status, v) = post(&s.app, "/v1/attempts?mapping=litellm", LITELLM.as_bytes().to_vec(), &[]).await;
    assert_eq!(status, StatusCode::MULTI_STATUS, "{v}");
    let last = &v["results"][3];
    assert_eq!(last["result"], "rejected");
    assert_eq!(last["field"], "idem_key");
    assert!(last["reason"].as_str().unwrap().contains("idem_fallback=1"), "{last}");
    // A bad line among good ones: it is rejected by line, the others are taken.
    let body = format!("{}\nnot json\n", LITELLM.lines().next().unwrap());
    let (status, v) = post(&s.app, "/v1/attempts?mapping=litellm", body.into_bytes(), &[]).await;
    assert_eq!(status, StatusCode::MULTI_STATUS, "{v}");
    assert_eq!(results(&v)[0].3, "duplicate");
    assert_eq!(results(&v)[1], (2, String::new(), 0, "rejected".into()));
}

#[tokio::test]
async fn a_csv_dump_and_unknown_mappings() {
    let s = server().await;
    let csv = include_str!("../../sample-data/routers/litellm-spendlogs.csv");
    let (status, v) = post(
        &s.app,
        "/v1/attempts?mapping=litellm-spendlogs",
        csv.as_bytes().to_vec(),
        &[("content-type", "text/csv")],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["totals"]["accepted"], 2);
    // Only built-in names: a client never names a file on the server.
    let (status, v) = post(&s.app, "/v1/attempts?mapping=/etc/passwd", b"{}".to_vec(), &[]).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        v["error"],
        "no built-in mapping \"/etc/passwd\": one of otlp, litellm, litellm-spendlogs, openrouter, langfuse"
    );
}

#[tokio::test]
async fn a_body_past_the_record_cap_is_413_naming_it() {
    let s = server_with(Options {
        max_records: 3,
        ..Options::default()
    })
    .await;
    let (status, v) = post(&s.app, "/v1/attempts?mapping=litellm", LITELLM.as_bytes().to_vec(), &[]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        v["error"],
        "the body holds 4 records, more than the 3 a request may hold (--max-records); split it"
    );
    assert!(s.ledger.job_attempts("trace-7f3a").unwrap().is_empty());
}
