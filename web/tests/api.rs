//! The HTTP API in-process: writes (idempotency, conflicts, races, auth, hostile bodies), SQL
//! (read-only, limits), review, metrics, health, and read tokens. Issue 4's "Must show" items.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::{LaneConfig, Ledger};
use laneledger_web::{AppState, Auth, Options, Token, Writer, WriterThread, app};
use serde_json::Value;
use tower::ServiceExt;

const TOKEN: &str = "test-token-0123456789abcdef";

struct Server {
    app: Router,
    ledger: Ledger,
    _dir: tempfile::TempDir,
    _writer: WriterThread,
}

async fn server_with(auth: Auth, options: Options, memory: usize) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("api.redb")).unwrap();
    let session = Session::with_memory_limit(ledger.clone(), LaneConfig::default(), memory)
        .await
        .unwrap();
    let (writer, thread) = Writer::spawn(ledger.clone(), 64).unwrap();
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

async fn server() -> Server {
    server_with(
        Auth {
            token: Some(Token::new(TOKEN).unwrap()),
            reads_need_token: false,
        },
        Options::default(),
        laneledger_query::session::QUERY_MEMORY_BYTES,
    )
    .await
}

/// A response: status, headers, body text.
struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }
}

async fn send(app: &Router, req: Request<Body>) -> Reply {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        headers,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn post(path: &str, auth: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut b = Request::post(path);
    if let Some(a) = auth {
        b = b.header(header::AUTHORIZATION, a);
    }
    b.body(body.into()).unwrap()
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// Attempt `i` of a generated set: every field set, so any change is a conflict.
fn attempt(i: usize) -> Value {
    serde_json::json!({
        "job_id": format!("job-{i:06}"),
        "idem_key": format!("idem-{i:06}"),
        "attempt_no": 1,
        "lane": if i.is_multiple_of(3) { "paid" } else { "free" },
        "started_at": format!("2026-11-23T{:02}:{:02}:{:02}Z", (i / 3600) % 24, (i / 60) % 60, i % 60),
        "ended_at": format!("2026-11-23T{:02}:{:02}:{:02}.5Z", (i / 3600) % 24, (i / 60) % 60, i % 60),
        "outcome": "ok",
        "tokens_in": 100 + i,
        "tokens_out": 700,
        "artifact_id": format!("art-{i:06}"),
    })
}

fn ndjson(rows: impl IntoIterator<Item = Value>) -> String {
    rows.into_iter().map(|v| format!("{v}\n")).collect()
}

fn results(reply: &Reply) -> Vec<String> {
    reply.json()["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["result"].as_str().unwrap().to_string())
        .collect()
}

/// One number from `/v1/sql`.
async fn sql_number(app: &Router, sql: &str) -> i64 {
    let body = serde_json::json!({ "sql": sql }).to_string();
    let r = send(app, post("/v1/sql", None, body)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let row = &r.json()["rows"][0];
    row.as_object().unwrap().values().next().unwrap().as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_attempts_sent_twice_are_stored_once() {
    let s = server().await;
    for pass in 0..2 {
        for chunk in (0..10_000).collect::<Vec<_>>().chunks(500) {
            let body = ndjson(chunk.iter().map(|&i| attempt(i)));
            let r = send(&s.app, post("/v1/attempts", Some(&bearer()), body)).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            let want = if pass == 0 { "accepted" } else { "duplicate" };
            assert!(results(&r).iter().all(|x| x == want), "pass {pass}: {}", r.text);
            assert_eq!(r.json()["results"].as_array().unwrap().len(), 500);
            assert_eq!(r.json()["durable"], true);
        }
    }
    assert_eq!(s.ledger.attempt_count().unwrap(), 10_000);
    let c = s.ledger.counters().unwrap();
    assert_eq!(
        (c.accepted, c.duplicates, c.conflicts, c.rejected),
        (10_000, 10_000, 0, 0)
    );
    assert_eq!(
        sql_number(&s.app, "SELECT COUNT(*) - COUNT(DISTINCT idem_key) FROM job_attempt").await,
        0
    );
    assert_eq!(sql_number(&s.app, "SELECT COUNT(*) FROM job_attempt").await, 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resends_with_one_changed_field_are_conflicts_naming_it() {
    let s = server().await;
    let body = ndjson((0..1_000).map(attempt));
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), body)).await;
    assert_eq!(r.status, StatusCode::OK);
    let fields = [
        "lane",
        "tokens_in",
        "tokens_out",
        "outcome",
        "artifact_id",
        "ended_at",
        "idem_key",
    ];
    let changed: Vec<Value> = (0..1_000)
        .map(|i| {
            let mut a = attempt(i);
            let f = fields[i % fields.len()];
            a[f] = match f {
                "lane" => Value::from(if i % 3 == 0 { "free" } else { "paid" }),
                "tokens_in" => Value::from(5 + i),
                "tokens_out" => Value::from(1),
                "outcome" => Value::from("ambiguous"),
                "artifact_id" => Value::from(format!("other-{i}")),
                "ended_at" => Value::from("2026-11-24T00:00:00Z"),
                _ => Value::from(format!("other-idem-{i}")),
            };
            a
        })
        .collect();
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), ndjson(changed))).await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS);
    let v = r.json();
    assert_eq!(v["totals"]["conflicts"], 1_000);
    for (i, res) in v["results"].as_array().unwrap().iter().enumerate() {
        assert_eq!(res["result"], "conflict", "{res}");
        assert_eq!(res["fields"], serde_json::json!([fields[i % fields.len()]]), "{res}");
        assert_eq!(res["line"], i + 1);
        assert_eq!(res["job_id"], format!("job-{i:06}"));
    }
    assert_eq!(s.ledger.attempt_count().unwrap(), 1_000);
    assert_eq!(s.ledger.conflicts().unwrap().len(), 1_000);
    assert_eq!(sql_number(&s.app, "SELECT COUNT(*) FROM attempt_conflict").await, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_clients_racing_on_one_attempt_make_one_row() {
    let s = server().await;
    let body = ndjson([attempt(7)]);
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let app = s.app.clone();
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let r = send(&app, post("/v1/attempts", Some(&bearer()), body)).await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text);
            results(&r).remove(0)
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    assert_eq!(answers.iter().filter(|a| *a == "accepted").count(), 1, "{answers:?}");
    assert_eq!(answers.iter().filter(|a| *a == "duplicate").count(), 31, "{answers:?}");
    assert_eq!(s.ledger.attempt_count().unwrap(), 1);
}

#[tokio::test]
async fn every_bad_credential_is_401_on_every_write_route_and_writes_nothing() {
    let s = server().await;
    let bad: [Option<String>; 6] = [
        None,
        Some(format!("Basic {TOKEN}")),
        Some("Bearer wrong-token-0123456789abcdef".into()),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        Some(format!("Bearer {TOKEN}x")),
        Some("Bearer ".into()),
    ];
    let decision = r#"{"job_id":"j1","decided_at":"2026-11-23T10:00:00Z","queue_age_s":1,"expected_service_s":2,"retry_tax_s":1,"deadline_slack_s":60,"decision":"admit_free"}"#;
    for route in ["/v1/attempts", "/v1/decisions"] {
        let body = if route == "/v1/attempts" {
            ndjson([attempt(1)])
        } else {
            format!("{decision}\n")
        };
        for auth in &bad {
            let r = send(&s.app, post(route, auth.as_deref(), body.clone())).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{route} {auth:?}: {}", r.text);
            assert!(r.headers.contains_key(header::WWW_AUTHENTICATE));
        }
    }
    assert_eq!(s.ledger.counters().unwrap().total(), 0);
    assert_eq!(s.ledger.decision_counters().unwrap().total(), 0);
    // The right token writes both kinds.
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), ndjson([attempt(1)]))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = send(&s.app, post("/v1/decisions", Some(&bearer()), format!("{decision}\n"))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json()["results"][0]["result"], "accepted");
    assert_eq!(r.json()["results"][0]["decided_at"], "2026-11-23T10:00:00Z");
    assert_eq!(s.ledger.decision_count().unwrap(), 1);
}

#[tokio::test]
async fn without_a_token_writes_are_off() {
    let s = server_with(Auth::default(), Options::default(), 64 << 20).await;
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), ndjson([attempt(1)]))).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert_eq!(s.ledger.counters().unwrap().total(), 0);
}

#[tokio::test]
async fn hostile_bodies_get_rejections_or_400_never_a_panic() {
    let s = server_with(
        Auth {
            token: Some(Token::new(TOKEN).unwrap()),
            reads_need_token: false,
        },
        Options {
            body_limit: 64 << 10,
            ..Options::default()
        },
        64 << 20,
    )
    .await;
    // One good line among the bad: the good one lands, each bad one is rejected with a reason.
    let good = attempt(1).to_string();
    let deep = format!("{}{}", "{\"a\":".repeat(10_000), "1".to_string() + &"}".repeat(10_000));
    let lines: Vec<Vec<u8>> = vec![
        b"{\"job_id\":\"j\xff\",\"idem_key\":\"k\"}".to_vec(),
        good.replace("\"tokens_out\":700", "\"tokens_out\":NaN").into_bytes(),
        good.replace("\"tokens_out\":700", "\"tokens_out\":1e400").into_bytes(),
        good.replace("\"lane\":\"free\"", "\"lane\":\"free\",\"lane\":\"paid\"")
            .into_bytes(),
        deep.into_bytes(),
        good.clone().into_bytes(),
    ];
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), lines.join(&b'\n'))).await;
    assert_eq!(r.status, StatusCode::MULTI_STATUS, "{}", r.text);
    assert_eq!(
        results(&r),
        ["rejected", "rejected", "rejected", "rejected", "rejected", "accepted"]
    );
    let v = r.json();
    assert_eq!(v["results"][0]["reason"], "not valid UTF-8");
    assert!(
        v["results"][3]["reason"].as_str().unwrap().contains("duplicate"),
        "{}",
        v["results"][3]
    );
    assert_eq!(s.ledger.attempt_count().unwrap(), 1);
    assert_eq!(s.ledger.rejects().unwrap().len(), 5);
    assert!(s.ledger.rejects().unwrap()[0].source.starts_with("POST /v1/attempts "));

    // A JSON array that is not valid JSON is one 400, and nothing is written.
    for body in ["[{\"a\": NaN}]", "[1e400", "[{\"a\":1},"] {
        let r = send(&s.app, post("/v1/attempts", Some(&bearer()), body)).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text);
    }
    // Over the limit: 413, whether sent plain or as gzip that inflates past it.
    let big = "x".repeat(65 << 10);
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), big.clone())).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(big.as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let req = Request::post("/v1/attempts")
        .header(header::AUTHORIZATION, bearer())
        .header(header::CONTENT_ENCODING, "gzip")
        .body(Body::from(gz))
        .unwrap();
    assert_eq!(send(&s.app, req).await.status, StatusCode::PAYLOAD_TOO_LARGE);
    // gzip of good records is taken.
    let gz = {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(ndjson([attempt(2), attempt(3)]).as_bytes()).unwrap();
        e.finish().unwrap()
    };
    let req = Request::post("/v1/attempts")
        .header(header::AUTHORIZATION, bearer())
        .header(header::CONTENT_ENCODING, "gzip")
        .body(Body::from(gz))
        .unwrap();
    let r = send(&s.app, req).await;
    assert_eq!(
        (r.status, results(&r)),
        (StatusCode::OK, vec!["accepted".to_string(); 2])
    );
    // A JSON array of records is taken like NDJSON.
    let arr = serde_json::to_string(&vec![attempt(4), attempt(5)]).unwrap();
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), arr)).await;
    assert_eq!(
        (r.status, results(&r)),
        (StatusCode::OK, vec!["accepted".to_string(); 2])
    );
    assert_eq!(s.ledger.attempt_count().unwrap(), 5);
    // An empty body: 400.
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), "\n")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
}

async fn sql(app: &Router, sql: &str) -> Reply {
    send(
        app,
        post("/v1/sql", None, serde_json::json!({ "sql": sql }).to_string()),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_sql_is_read_only_and_bounded() {
    // 16 MiB for operators, so that a cross join's sort runs out quickly.
    let s = server_with(
        Auth {
            token: Some(Token::new(TOKEN).unwrap()),
            reads_need_token: false,
        },
        Options::default(),
        16 << 20,
    )
    .await;
    let r = send(
        &s.app,
        post("/v1/attempts", Some(&bearer()), ndjson((0..3_000).map(attempt))),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    let refused = [
        "CREATE EXTERNAL TABLE p (a TEXT) STORED AS CSV LOCATION '/etc/passwd'",
        "COPY job_attempt TO '/tmp/laneledger-copy.csv'",
        "COPY (SELECT 1) TO '/tmp/laneledger-copy.csv' STORED AS CSV",
        "INSERT INTO job_attempt SELECT * FROM job_attempt",
        "DROP VIEW job_rollup",
        "DROP TABLE job_attempt",
        "SET datafusion.execution.batch_size = 1",
        "SELECT * FROM '/etc/passwd'",
        "SELECT 1; SELECT 2",
        "SELECT 1; DROP VIEW job_rollup",
    ];
    for q in refused {
        let r = sql(&s.app, q).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{q}: {}", r.text);
        assert!(r.json()["error"].as_str().is_some());
    }
    assert!(!std::path::Path::new("/tmp/laneledger-copy.csv").exists());
    let terms = format!("SELECT {}", vec!["1"; 5_000].join("+"));
    assert_eq!(sql(&s.app, &terms).await.status, StatusCode::BAD_REQUEST);
    let nested = format!("SELECT {}1{}", "(".repeat(2_000), ")".repeat(2_000));
    assert_eq!(sql(&s.app, &nested).await.status, StatusCode::BAD_REQUEST);
    let subqueries = format!(
        "SELECT * FROM {}job_attempt{}",
        "(SELECT * FROM ".repeat(300),
        ") t".repeat(300)
    );
    assert_eq!(sql(&s.app, &subqueries).await.status, StatusCode::BAD_REQUEST);
    // 9 million rows to sort: past 16 MiB, a clean 422.
    let r = sql(
        &s.app,
        "SELECT a.job_id, b.job_id AS other FROM job_attempt a CROSS JOIN job_attempt b ORDER BY 1, 2",
    )
    .await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.text);
    assert!(
        r.json()["error"].as_str().unwrap().contains("esources exhausted"),
        "{}",
        r.text
    );
    // The server still answers, and still refuses nothing it should take.
    let r = send(&s.app, Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["attempts"], 3_000);
    let r = sql(
        &s.app,
        "SELECT lane, COUNT(*) AS n FROM job_attempt GROUP BY lane ORDER BY lane",
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.json()["rows"],
        serde_json::json!([{"lane": "free", "n": 2000}, {"lane": "paid", "n": 1000}])
    );
    assert_eq!(r.json()["row_count"], 2);
    assert_eq!(
        r.json()["columns"][1],
        serde_json::json!({"name": "n", "type": "Int64"})
    );
    // CSV on request.
    let req = Request::post("/v1/sql")
        .header(header::ACCEPT, "text/csv")
        .body(Body::from(
            serde_json::json!({"sql": "SELECT lane, COUNT(*) AS n FROM job_attempt GROUP BY lane ORDER BY lane"})
                .to_string(),
        ))
        .unwrap();
    let r = send(&s.app, req).await;
    assert_eq!(r.text, "lane,n\r\nfree,2000\r\npaid,1000\r\n");
    assert_eq!(r.headers[header::CONTENT_TYPE], "text/csv; charset=utf-8");
    // Not JSON, or an unknown field: 400.
    assert_eq!(
        send(&s.app, post("/v1/sql", None, "SELECT 1")).await.status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        send(&s.app, post("/v1/sql", None, r#"{"sql":"SELECT 1","x":1}"#))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn a_slow_request_is_408() {
    let s = server_with(
        Auth::default(),
        Options {
            sql_timeout: Duration::from_millis(1),
            ..Options::default()
        },
        64 << 20,
    )
    .await;
    // A query that needs far longer than a millisecond.
    let r = sql(&s.app, "SELECT COUNT(*) FROM generate_series(1, 50000000) a").await;
    assert_eq!(r.status, StatusCode::REQUEST_TIMEOUT, "{}", r.text);
    assert!(r.json()["error"].as_str().unwrap().contains("longer than 0.001 s"));

    // The request timeout covers every route.
    let s = server_with(
        Auth::default(),
        Options {
            request_timeout: Duration::from_millis(1),
            ..Options::default()
        },
        64 << 20,
    )
    .await;
    let r = sql(&s.app, "SELECT COUNT(*) FROM generate_series(1, 50000000) a").await;
    assert_eq!(r.status, StatusCode::REQUEST_TIMEOUT, "{}", r.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn review_metrics_and_health_read_the_ledger() {
    let s = server().await;
    // Week 2026-W48: 4 jobs, one of which retried on the paid lane; one idem_key got two artifacts.
    let mut rows: Vec<Value> = (0..4).map(attempt).collect();
    let mut paid = attempt(1);
    paid["attempt_no"] = 2.into();
    paid["lane"] = "paid".into();
    paid["artifact_id"] = "art-dup".into();
    rows.push(paid);
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), ndjson(rows))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);

    let r = send(
        &s.app,
        Request::get("/v1/review?week=2026-W48").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = r.json();
    assert_eq!(v["week"]["iso_week"], "2026-W48");
    assert_eq!(v["week"]["jobs"], 4);
    assert_eq!(v["week"]["cross_lane_jobs"], 1);
    assert_eq!(v["week"]["duplicate_artifacts"], 1);
    assert_eq!(v["week"]["cross_lane_retries_per_job"], 0.25);
    assert_eq!(v["alerts"][0]["metric"], "cross_lane_retries_per_job");
    // Above its threshold, but from 4 jobs, fewer than alerts.min_jobs (20): not an alert.
    assert_eq!(v["alerts"][0]["state"], "too_few_jobs");
    assert_eq!(v["previous_week"], "2026-W47");
    assert!(v["previous"].is_null());
    assert!(v["sections"].is_array());
    let bad = send(
        &s.app,
        Request::get("/v1/review?week=2026-48").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let none = send(
        &s.app,
        Request::get("/v1/review?week=2020-W01").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(none.status, StatusCode::NOT_FOUND);

    let r = send(
        &s.app,
        Request::get("/metrics?week=2026-W48").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers[header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    for line in [
        "laneledger_attempt_records_total{result=\"accepted\"} 5",
        "laneledger_attempts 5",
        "laneledger_http_write_records_total 5",
        "laneledger_week_has_data{week=\"2026-W48\"} 1",
        "laneledger_cross_lane_retries_per_job{week=\"2026-W48\"} 0.25",
        "laneledger_cross_lane_retries_per_job_threshold 0.2",
        "laneledger_duplicate_artifacts_per_100_jobs{week=\"2026-W48\"} 25",
        "laneledger_alert{metric=\"cross_lane_retries_per_job\",week=\"2026-W48\"} 0",
        "laneledger_week_jobs{week=\"2026-W48\"} 4",
        "laneledger_min_jobs 20",
    ] {
        assert!(r.text.lines().any(|l| l == line), "no {line:?} in\n{}", r.text);
    }
    let r = send(
        &s.app,
        Request::get("/metrics?week=2020-W01").body(Body::empty()).unwrap(),
    )
    .await;
    assert!(
        r.text.contains("laneledger_week_has_data{week=\"2020-W01\"} 0"),
        "{}",
        r.text
    );

    let r = send(&s.app, Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["status"], "ok");
    assert_eq!(r.json()["attempts"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sql_page_shows_the_answer_and_the_examples() {
    let s = server().await;
    send(
        &s.app,
        post("/v1/attempts", Some(&bearer()), ndjson((0..6).map(attempt))),
    )
    .await;
    let q = "SELECT lane, COUNT(*) AS attempts FROM job_attempt GROUP BY lane ORDER BY lane";
    let uri = format!("/sql?q={}", q.replace(' ', "+").replace('*', "%2A").replace(',', "%2C"));
    let r = send(&s.app, Request::get(uri).body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(r.text.contains("2 rows"), "{}", r.text);
    assert!(r.text.contains(r#"<td>free</td><td class="num">4</td>"#), "{}", r.text);
    assert!(r.text.contains(r#"<td>paid</td><td class="num">2</td>"#), "{}", r.text);
    for view in [
        "job_rollup",
        "weekly_metrics",
        "duplicate_artifact",
        "job_attempt",
        "ingest_reject",
    ] {
        assert!(r.text.contains(&format!("<code>{view}</code>")), "{view}");
    }
    let r = send(
        &s.app,
        Request::get("/sql?q=DROP+VIEW+job_rollup").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("read-only"), "{}", r.text);
}

#[tokio::test]
async fn a_read_token_guards_pages_and_read_apis() {
    let s = server_with(
        Auth {
            token: Some(Token::new(TOKEN).unwrap()),
            reads_need_token: true,
        },
        Options::default(),
        64 << 20,
    )
    .await;
    for path in ["/", "/weeks", "/sql", "/metrics", "/v1/review"] {
        let r = send(&s.app, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{path}");
        assert!(
            r.headers[header::WWW_AUTHENTICATE]
                .to_str()
                .unwrap()
                .starts_with("Basic"),
            "{path}"
        );
    }
    let r = send(&s.app, post("/v1/sql", None, r#"{"sql":"SELECT 1"}"#)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(&s.app, post("/v1/sql", Some(&bearer()), r#"{"sql":"SELECT 1 AS one"}"#)).await;
    assert_eq!(r.status, StatusCode::OK);
    use base64::Engine;
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("reviewer:{TOKEN}"))
    );
    let r = send(
        &s.app,
        Request::get("/weeks")
            .header(header::AUTHORIZATION, basic)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    // /healthz stays open for load balancers.
    let r = send(&s.app, Request::get("/healthz").body(Body::empty()).unwrap()).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_jobs_attempts_are_read_by_key_and_fresh_after_each_write() {
    let s = server().await;
    let get = |path: String| Request::get(path).body(Body::empty()).unwrap();
    // Nothing yet: 200 with no attempts.
    let r = send(&s.app, get("/v1/jobs/job-000004/attempts".into())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(r.json(), serde_json::json!({ "job_id": "job-000004", "attempts": [] }));
    let r = send(
        &s.app,
        post("/v1/attempts", Some(&bearer()), ndjson((0..10).map(attempt))),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // A second attempt of job 4 on the paid lane, refused with a 429.
    let mut second = attempt(4);
    second["attempt_no"] = 2.into();
    second["lane"] = "paid".into();
    second["http_status"] = 429.into();
    second["artifact_id"] = "art-000004-2".into();
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), ndjson([second]))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = send(&s.app, get("/v1/jobs/job-000004/attempts".into())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let body = r.json();
    let attempts = body["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    let first = &attempts[0];
    assert_eq!(first["job_id"], "job-000004");
    assert_eq!(first["idem_key"], "idem-000004");
    assert_eq!(first["attempt_no"], 1);
    assert_eq!(first["lane"], "free");
    assert_eq!(first["started_at"], "2026-11-23T00:00:04Z");
    assert_eq!(first["ended_at"], "2026-11-23T00:00:04.500000Z");
    assert_eq!(first["tokens_in"], 104);
    assert_eq!(first["tokens_out"], 700);
    assert_eq!(first["artifact_id"], "art-000004");
    assert_eq!(first["error_kind"], serde_json::Value::Null);
    assert!(first["ingested_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(attempts[1]["attempt_no"], 2);
    assert_eq!(attempts[1]["lane"], "paid");
    assert_eq!(attempts[1]["http_status"], 429);
    assert_eq!(attempts[1]["error_kind"], "transient");
    // The same job through SQL (a point read on job_id) gives the same two rows.
    assert_eq!(
        sql_number(&s.app, "SELECT COUNT(*) FROM job_attempt WHERE job_id = 'job-000004'").await,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idem_keys_attempts_across_jobs_are_read_through_the_index() {
    let s = server().await;
    let get = |path: String| Request::get(path).body(Body::empty()).unwrap();
    let r = send(&s.app, get("/v1/idem/idem-000004/attempts".into())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert_eq!(
        r.json(),
        serde_json::json!({ "idem_key": "idem-000004", "attempts": [] })
    );
    let r = send(
        &s.app,
        post("/v1/attempts", Some(&bearer()), ndjson((0..10).map(attempt))),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    // Job 11 redoes job 4's work under the same idem_key, in a later commit, with a second
    // artifact: a duplicate artifact in seed 000's terms.
    let mut again = attempt(11);
    again["idem_key"] = "idem-000004".into();
    let mut retry = attempt(11);
    retry["idem_key"] = "idem-000004".into();
    retry["attempt_no"] = 2.into();
    retry["artifact_id"] = "art-000011-2".into();
    let r = send(&s.app, post("/v1/attempts", Some(&bearer()), ndjson([again, retry]))).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = send(&s.app, get("/v1/idem/idem-000004/attempts".into())).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let body = r.json();
    assert_eq!(body["idem_key"], "idem-000004");
    let found: Vec<(String, u64, String)> = body["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["job_id"].as_str().unwrap().to_string(),
                a["attempt_no"].as_u64().unwrap(),
                a["artifact_id"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        found,
        [
            ("job-000004".to_string(), 1, "art-000004".to_string()),
            ("job-000011".to_string(), 1, "art-000011".to_string()),
            ("job-000011".to_string(), 2, "art-000011-2".to_string()),
        ]
    );
    assert_eq!(body["attempts"][0]["tokens_in"], 104);
    assert!(body["attempts"][2]["ingested_at"].as_str().unwrap().ends_with('Z'));
    // Another key is not mixed in, and a key that was never written has no attempts.
    let r = send(&s.app, get("/v1/idem/idem-000005/attempts".into())).await;
    assert_eq!(r.json()["attempts"].as_array().unwrap().len(), 1);
    let r = send(&s.app, get("/v1/idem/idem-0000/attempts".into())).await;
    assert_eq!(r.json()["attempts"], serde_json::json!([]));
}
