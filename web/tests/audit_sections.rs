//! The week page's audit sections on the sample data: seed 002's incident file flags each lapse
//! and links it to its job; a clean week says so.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_decisions_reader, ingest_reader};
use laneledger_web::{AppState, app};
use tower::ServiceExt;

async fn page(uri: &str) -> (StatusCode, String) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    for f in [
        "drill-nopin-2026-W47.ndjson",
        "drill-pin-2026-W48.ndjson",
        "keys-incident-2026-10-17.ndjson",
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample-data")
            .join(f);
        let r = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        ingest_reader(&ledger, f, r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data/decisions-2026-W48.ndjson");
    let r = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    ingest_decisions_reader(&ledger, "decisions", r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    let session = Session::new(ledger).await.unwrap();
    let state = AppState::new(session.clone(), session.thresholds());
    let resp = app(state)
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// The HTML of one audit section.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<section class=\"audit\" id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no section {id}"));
    let rest = &html[start..];
    &rest[..rest.find("</section>").unwrap()]
}

#[tokio::test]
async fn each_flagged_lapse_of_seed_002s_incident_links_to_its_job() {
    let (status, html) = page("/weeks/2026-W42").await;
    assert_eq!(status, StatusCode::OK);
    for h in ["Lanes and duplicates", "Key refusals"] {
        assert!(html.contains(&format!("<h2>{h}</h2>")), "{h}");
    }
    let same = section(&html, "same_key_retry");
    assert!(same.contains(r#"<span class="count">3</span>"#), "{same}");
    assert_eq!(same.matches(r#"<a href="/jobs/bee-9967">bee-9967</a>"#).count(), 2);
    assert!(same.contains(r#"<a href="/jobs/bee-quota">bee-quota</a>"#));
    let rest = section(&html, "key_rest_violation");
    assert!(rest.contains(r#"<span class="count">3</span>"#));
    assert!(rest.contains("long break"));
    let pool = section(&html, "pool_overload_episode");
    assert!(pool.contains(r#"<span class="count">1</span>"#));
    assert!(pool.contains("<td>pool-2</td>") && pool.contains("<td>16</td>") && pool.contains("<td>10</td>"));
    let bound = section(&html, "attempt_bound_exceeded");
    assert!(bound.contains(r#"<a href="/jobs/bee-spin">bee-spin</a>"#) && bound.contains("<td>9</td>"));
    let mismatch = section(&html, "outcome_mismatch");
    assert!(mismatch.contains(r#"<span class="count">2</span>"#) && mismatch.contains("<td>1308</td>"));
    let lane = section(&html, "lane_policy_violation");
    assert!(lane.contains(r#"<a href="/jobs/bee-9967">bee-9967</a>"#) && lane.contains("past the free budget"));
    // The SQL behind each section is one click away and runs as is.
    assert!(lane.contains("<summary>SQL</summary><pre>SELECT job_id, attempt_no, lane, expected_lane, kind, reason FROM lane_policy_violation WHERE iso_week = &#39;2026-W42&#39;"), "{lane}");
    assert!(section(&html, "duplicate_reconciliation").contains("None this week."));
}

#[tokio::test]
async fn the_nopin_week_shows_its_lane_violations_and_the_reconcile_split() {
    let (status, html) = page("/weeks/2026-W47").await;
    assert_eq!(status, StatusCode::OK);
    assert!(section(&html, "lane_policy_violation").contains(r#"<span class="count">51</span>"#));
    let rec = section(&html, "duplicate_reconciliation");
    assert!(rec.contains(r#"<span class="count">21</span>"#));
    // The counts by class come first, the rows after them.
    let rows = &rec[rec.find("<strong>The rows</strong>").unwrap()..];
    assert_eq!(rows.matches("<td>reconcilable</td>").count(), 14);
    assert_eq!(rows.matches("<td>window too short</td>").count(), 7);
    assert!(section(&html, "same_key_retry").contains("None this week."));
}

#[tokio::test]
async fn the_demo_week_shows_the_gate_ratios_and_the_freeze_alert() {
    let (status, html) = page("/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<h2>Dwell gate</h2>"));
    assert!(html.contains("free admits that missed their slack (freeze the dwell gate)"));
    let ratios = section(&html, "gate_ratios");
    for cells in [
        "<td>free admits that missed slack ÷ free admits</td><td>4</td><td>20</td><td>0.200</td><td>&#62; 0.01</td><td>ALERT: freeze dwell_gate_enabled</td>",
        "<td>defers that would have fit a reserved worker ÷ defers</td><td>6</td><td>12</td><td>0.500</td>",
        "<td>reserved shifts whose dwell without the retry tax fits ÷ reserved</td><td>6</td><td>9</td><td>0.667</td>",
        "<td>decisions that differ from the safe decision</td><td>4</td><td>41</td>",
    ] {
        assert!(ratios.contains(cells), "missing {cells} in {ratios}");
    }
    let misses = section(&html, "gate_free_admit_miss");
    assert!(misses.contains(r#"<span class="count">4</span>"#));
    assert!(misses.contains(r#"<a href="/jobs/pin-job-000031">pin-job-000031</a>"#));
    assert!(section(&html, "gate_decision_mismatch").contains(r#"<span class="count">4</span>"#));
    // The drill week's own figures are untouched by the decisions.
    assert!(html.contains("1,184.0"));
}
