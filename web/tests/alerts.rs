//! Every audit has an alert (issue 31): on the sample data, the key incident week 2026-W42 opens
//! with red cards for its key audits, in the page, `review` text and JSON, `/metrics` and the
//! weeks index; a week of clean traffic has no red card and says so.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::{DEFAULT_BATCH, InputFormat, LaneConfig, Ledger, ingest_decisions_reader, ingest_reader};
use laneledger_web::{AppState, app};
use tempfile::TempDir;
use tower::ServiceExt;

fn sample(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sample-data")
        .join(name)
}

/// A ledger of `files` from sample-data/ (and the gate decisions when `decisions`), read with
/// sample-data/lane.yaml.
async fn state(files: &[&str], decisions: bool) -> (TempDir, AppState) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    for f in files {
        let r = std::io::BufReader::new(std::fs::File::open(sample(f)).unwrap());
        ingest_reader(&ledger, f, r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    }
    if decisions {
        let r = std::io::BufReader::new(std::fs::File::open(sample("decisions-2026-W48.ndjson")).unwrap());
        ingest_decisions_reader(&ledger, "decisions", r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    }
    let config = LaneConfig::load(Some(&sample("lane.yaml"))).unwrap();
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

/// The alert cards of a week page, in page order: (metric, state class, value, threshold).
fn cards(html: &str) -> Vec<(String, String, String, String)> {
    html.split("<section class=\"card ")
        .skip(1)
        .map(|card| {
            let class = card[..card.find('"').unwrap()].to_string();
            let id = &card[card.find("id=\"alert-").unwrap() + 10..];
            let metric = id[..id.find('"').unwrap()].to_string();
            let v = &card[card.find("<p class=\"value\">").unwrap() + 17..];
            let value = v[..v.find("<span>").unwrap()].to_string();
            let t = &v[v.find("<span>alert above ").unwrap() + 18..];
            let threshold = t[..t.find("</span>").unwrap()].to_string();
            (metric, class, value, threshold)
        })
        .collect()
}

fn card(metric: &str, class: &str, value: &str, threshold: &str) -> (String, String, String, String) {
    (metric.into(), class.into(), value.into(), threshold.into())
}

const ALL: [&str; 3] = [
    "drill-nopin-2026-W47.ndjson",
    "drill-pin-2026-W48.ndjson",
    "keys-incident-2026-10-17.ndjson",
];

#[tokio::test]
async fn the_key_incident_week_opens_with_red_cards_for_its_key_audits() {
    let (_dir, state) = state(&ALL, true).await;
    let (status, html) = get(&state, "/weeks/2026-W42").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("<strong>7 alerts this week</strong>, shown first in red; the 4 others"),
        "{html}"
    );
    // The summary comes before the cards, the cards before every table.
    let summary = html.find("id=\"alert-summary\"").unwrap();
    let first_card = html.find("<section class=\"card ").unwrap();
    assert!(summary < first_card && first_card < html.find("<table").unwrap());
    assert_eq!(
        cards(&html),
        [
            // 1 of 20 jobs sent an attempt to the wrong lane.
            card("lane_policy_violations_per_100_jobs", "alert", "5.00", "1"),
            // 30 of 49 attempts refused.
            card("refusals_per_100_attempts", "alert", "61.22", "50"),
            // 3 retries on the key that had just refused, of 30 refusals.
            card("same_key_retries_per_100_refusals", "alert", "10.00", "0"),
            // 3 uses of a key inside its rest, of 49 keyed attempts.
            card("key_rest_violations_per_100_keyed_attempts", "alert", "6.12", "1"),
            card("pool_overload_episodes_per_week", "alert", "1", "0"),
            // The nine-attempt job.
            card("jobs_past_attempt_bound_per_100_jobs", "alert", "5.00", "0"),
            // A spent quota sent as retryable, and one more: 2 of 30 refusals.
            card("outcome_mismatches_per_100_refusals", "alert", "6.67", "0"),
            card("cross_lane_retries_per_job", "pass", "0.150", "0.20"),
            card("duplicate_artifacts_per_100_jobs", "pass", "0.00", "1"),
            card("late_duplicates_per_100_jobs", "pass", "0.00", "0"),
            card("data_quality_findings_per_100_attempts", "pass", "0.00", "1"),
        ]
    );
    assert!(html.contains("3 retries went to the key that had just refused, of 30 refused attempts"));
    assert!(html.contains("<a href=\"#same_key_retry\">retries on the key that just refused, per 100 refusals</a>"));

    // The weeks index names the week's red alerts.
    let (_, weeks) = get(&state, "/weeks").await;
    let row = &weeks[weeks.find("<a href=\"/weeks/2026-W42\">").unwrap()..];
    let row = &row[..row.find("</tr>").unwrap()];
    assert!(row.contains("<span class=\"badge alert\">7 ALERT</span>"), "{row}");
    assert!(row.contains("<a href=\"/weeks/2026-W42#pool_overload_episode\">pool overload episodes in the week</a>"));
    let w48 = &weeks[weeks.find("<a href=\"/weeks/2026-W48\">").unwrap()..];
    let w48 = &w48[..w48.find("</tr>").unwrap()];
    // The pin week's only red alerts are the gate's (its decisions file).
    assert!(w48.contains("<span class=\"badge alert\">2 ALERT</span>"), "{w48}");

    // review --format json / GET /v1/review.
    let (status, json) = get(&state, "/v1/review?week=2026-W42").await;
    assert_eq!(status, StatusCode::OK);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        doc["alerting"],
        serde_json::json!([
            "lane_policy_violations_per_100_jobs",
            "refusals_per_100_attempts",
            "same_key_retries_per_100_refusals",
            "key_rest_violations_per_100_keyed_attempts",
            "pool_overload_episodes_per_week",
            "jobs_past_attempt_bound_per_100_jobs",
            "outcome_mismatches_per_100_refusals"
        ])
    );
    let same_key = doc["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["metric"] == "same_key_retries_per_100_refusals")
        .unwrap();
    assert_eq!(same_key["value"], 10.0);
    assert_eq!(same_key["threshold"], 0.0);
    assert_eq!(same_key["state"], "alert");

    // review (text).
    let review = state.session.review(Some("2026-W42"), &state.thresholds).await.unwrap();
    let text = review.to_text();
    assert!(text.contains("7 alerts this week:\n  ALERT jobs with a lane policy violation per 100 jobs: 1 of 20 jobs had an attempt on the wrong lane\n"), "{text}");
    assert!(
        text.contains("  pool_overload_episodes_per_week                     1  threshold > 0      ALERT\n"),
        "{text}"
    );

    // /metrics.
    let (status, metrics) = get(&state, "/metrics?week=2026-W42").await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        "laneledger_same_key_retries_per_100_refusals{week=\"2026-W42\"} 10",
        "laneledger_same_key_retries_per_100_refusals_threshold 0",
        "laneledger_pool_overload_episodes_per_week{week=\"2026-W42\"} 1",
        "laneledger_alert{metric=\"outcome_mismatches_per_100_refusals\",week=\"2026-W42\"} 1",
        "laneledger_alert{metric=\"late_duplicates_per_100_jobs\",week=\"2026-W42\"} 0",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} not in\n{metrics}");
    }
    assert_eq!(
        metrics
            .lines()
            .filter(|l| l.starts_with("laneledger_alert{") && l.ends_with(" 1"))
            .count(),
        7
    );
}

#[tokio::test]
async fn a_week_of_clean_traffic_has_no_red_card() {
    let (_dir, state) = state(&["drill-pin-2026-W48.ndjson"], false).await;
    let (status, html) = get(&state, "/weeks/2026-W48").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains(
            "<strong>No alert this week</strong>: each of the 11 figures below is at or below its threshold."
        ),
        "{html}"
    );
    let cards = cards(&html);
    assert_eq!(cards.len(), 11);
    assert_eq!(cards.iter().filter(|c| c.1 != "pass").count(), 0, "{cards:?}");
    assert_eq!(cards[4], card("refusals_per_100_attempts", "pass", "28.91", "50"));
    let (_, weeks) = get(&state, "/weeks").await;
    assert!(weeks.contains("<span class=\"badge pass\">none</span> <span class=\"muted small\">of 11</span>"));
    let review = state.session.review(Some("2026-W48"), &state.thresholds).await.unwrap();
    assert_eq!(review.firing().count(), 0);
    assert!(review.to_text().contains("No alert this week"));
}

/// The metric names a PromQL expression uses: its identifiers that start with `laneledger_`
/// (label names and values inside `{...}` and quotes are skipped).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut in_braces, mut in_quotes, mut word) = (false, false, String::new());
    for c in expr.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        if !in_braces && !in_quotes && word.starts_with("laneledger_") {
            out.push(word.clone());
        }
        word.clear();
        match c {
            '"' => in_quotes = !in_quotes,
            '{' if !in_quotes => in_braces = true,
            '}' if !in_quotes => in_braces = false,
            _ => {}
        }
    }
    out
}

#[tokio::test]
async fn the_prometheus_rules_use_only_metrics_that_metrics_serves() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/prometheus-alerts.yml");
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let exprs: Vec<String> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .map(|r| {
            assert!(
                r["alert"].as_str().is_some_and(|a| a.starts_with("Laneledger")),
                "{r:?}"
            );
            r["expr"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(exprs.len(), 15);
    // A week with every figure: the pin week, with gate decisions and refusals.
    let (_dir, state) = state(&ALL, true).await;
    let (status, metrics) = get(&state, "/metrics?week=2026-W48").await;
    assert_eq!(status, StatusCode::OK);
    let served: std::collections::BTreeSet<&str> = metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| &l[..l.find(['{', ' ']).unwrap()])
        .collect();
    let used: std::collections::BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert_eq!(used.len(), 30, "{used:?}");
    for name in &used {
        assert!(served.contains(name.as_str()), "{name} is not in /metrics:\n{metrics}");
    }
    // And every alert /metrics reports has its rule.
    let alerted: Vec<&str> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("laneledger_alert{metric=\""))
        .map(|l| &l[..l.find('"').unwrap()])
        .collect();
    assert_eq!(alerted.len(), 13);
    for metric in alerted {
        assert!(
            used.contains(&format!("laneledger_{metric}_threshold")),
            "{metric} has no rule"
        );
    }
    assert_eq!(
        metric_names("increase(laneledger_attempt_records_total{result=\"rejected\"}[1h]) > 0"),
        ["laneledger_attempt_records_total"]
    );
}
