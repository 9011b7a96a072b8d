//! Cost and latency on the site (issue 31): the demo's pin week priced by sample-data/lane.yaml
//! shows its spend in the drill table and in `/metrics`, its latency section downloads as CSV;
//! without prices no spend is shown and every attempt is counted as unpriced.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::{DEFAULT_BATCH, InputFormat, LaneConfig, Ledger, ingest_reader};
use laneledger_web::{AppState, app};
use tempfile::TempDir;
use tower::ServiceExt;

fn sample(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sample-data")
        .join(name)
}

/// The pin week (2026-W48) read with `config`.
async fn state(config: LaneConfig) -> (TempDir, AppState) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("c.redb")).unwrap();
    let f = "drill-pin-2026-W48.ndjson";
    let r = std::io::BufReader::new(std::fs::File::open(sample(f)).unwrap());
    ingest_reader(&ledger, f, r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    let session = Session::with_config(ledger, config).await.unwrap();
    let thresholds = session.thresholds();
    (dir, AppState::new(session, thresholds))
}

async fn get(state: &AppState, uri: &str) -> (StatusCode, String) {
    let resp = app(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The value of the `/metrics` sample whose name and labels are `series`.
fn sample_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

#[tokio::test]
async fn the_pin_week_priced_shows_its_spend_on_the_page_and_in_metrics() {
    let (_d, state) = state(LaneConfig::load(Some(&sample("lane.yaml"))).unwrap()).await;
    // 44 paid attempts, 30,800 tokens in and 22,000 out at 3 and 15 per million: 0.0924 + 0.33;
    // 378 free attempts at 0.
    let (status, metrics) = get(&state, "/metrics?week=2026-W48").await;
    assert_eq!(status, StatusCode::OK);
    let spend = sample_value(&metrics, r#"laneledger_spend{week="2026-W48"}"#).unwrap();
    assert!((spend - 0.4224).abs() < 1e-12, "{spend}");
    // No duplicate artifact in the pin week.
    assert_eq!(
        sample_value(&metrics, r#"laneledger_duplicate_artifact_spend{week="2026-W48"}"#),
        Some(0.0)
    );
    for (by, n) in [("router", 0.0), ("lane_yaml", 422.0), ("unpriced", 0.0)] {
        let series = format!(r#"laneledger_attempts_priced{{by="{by}",week="2026-W48"}}"#);
        assert_eq!(sample_value(&metrics, &series), Some(n), "{series}");
    }
    assert_eq!(
        sample_value(&metrics, r#"laneledger_spend_currency{currency="USD"}"#),
        Some(1.0)
    );

    let (status, page) = get(&state, "/weeks/2026-W48").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("<td class=\"num\">0.4224 USD</td>"), "no spend cell");
    assert!(page.contains("422 attempts: 0 priced by their router, 422 by lane.yaml prices, 0 unpriced"));
    assert!(page.contains("Latency by lane and model"));

    let (status, csv) = get(&state, "/weeks/2026-W48/tables/latency_by_lane_model.csv").await;
    assert_eq!(status, StatusCode::OK);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "lane,model,attempts,timed,open,left_out,p50_s,p95_s,p99_s,first_token_sent,ttft_p50_s,ttft_p95_s"
    );
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[1].starts_with("free,free-model,378,378,0,0,"), "{csv}");
    assert!(lines[2].starts_with("paid,paid-model,44,44,0,0,"), "{csv}");
    assert!(lines[2].ends_with(",0,not sent,not sent"), "{csv}");
}

#[tokio::test]
async fn without_prices_there_is_no_spend_and_every_attempt_is_unpriced() {
    let (_d, state) = state(LaneConfig::default()).await;
    let (_, metrics) = get(&state, "/metrics?week=2026-W48").await;
    assert!(!metrics.contains("laneledger_spend{"), "{metrics}");
    assert!(!metrics.contains("laneledger_spend_currency"), "{metrics}");
    assert_eq!(
        sample_value(&metrics, r#"laneledger_attempts_priced{by="unpriced",week="2026-W48"}"#),
        Some(422.0)
    );
    let (_, page) = get(&state, "/weeks/2026-W48").await;
    assert!(page.contains("422 attempts: 0 priced by their router, 0 by lane.yaml prices, 422 unpriced"));
    assert!(!page.contains(" USD</td>"));
}
