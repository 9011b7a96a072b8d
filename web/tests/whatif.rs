//! The what-if page and its JSON twin (issue 31 item 7) on the demo's pin week 2026-W48: the
//! form's settings replace the server's lane.yaml one at a time, the lane replay and the gate's
//! decisions answer with exact figures, the week page links there, and bad input is refused in
//! words (HTML for the page, JSON for `/v1`).

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

/// The demo's two drill weeks and the pin week's gate decisions, read with sample-data/lane.yaml.
async fn state() -> (TempDir, AppState) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    for f in ["drill-pin-2026-W48.ndjson", "drill-nopin-2026-W47.ndjson"] {
        let r = std::io::BufReader::new(std::fs::File::open(sample(f)).unwrap());
        ingest_reader(&ledger, f, r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    }
    let r = std::io::BufReader::new(std::fs::File::open(sample("decisions-2026-W48.ndjson")).unwrap());
    ingest_decisions_reader(&ledger, "decisions", r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    let config = LaneConfig::load(Some(&sample("lane.yaml"))).unwrap();
    let session = Session::with_config(ledger, config).await.unwrap();
    let thresholds = session.thresholds();
    (dir, AppState::new(session, thresholds))
}

async fn get(state: &AppState, uri: &str) -> (StatusCode, String, String) {
    let resp = app(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let kind = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, kind, String::from_utf8(body.to_vec()).unwrap())
}

/// The rows of the table with `id`: each row's cells as text (tags dropped).
fn table(html: &str, id: &str) -> Vec<Vec<String>> {
    let start = html
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no table {id}"));
    let body = &html[start..];
    let body = &body[body.find("<tbody>").unwrap()..body.find("</tbody>").unwrap()];
    body.split("<tr>")
        .skip(1)
        .map(|row| {
            row.split(['<'])
                .filter_map(|part| part.split_once('>').map(|(_, text)| text.trim()))
                .filter(|t| !t.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect()
}

fn row<'a>(rows: &'a [Vec<String>], name: &str) -> &'a [String] {
    &rows
        .iter()
        .find(|r| r[0] == name)
        .unwrap_or_else(|| panic!("no row {name}: {rows:?}"))[1..]
}

#[tokio::test]
async fn pin_on_none_on_the_page_moves_as_retry_free_no_pin() {
    let (_dir, state) = state().await;
    let (status, _, html) = get(&state, "/weeks/2026-W48/whatif?pin_on=").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("<code>lanes.free.pin_on</code> [ambiguous, permanent] → <strong>[]</strong>"),
        "{html}"
    );
    let lane = table(&html, "whatif-lane");
    assert_eq!(row(&lane, "free attempts"), ["378", "378", "401"]);
    assert_eq!(row(&lane, "paid attempts"), ["44", "45", "26"]);
    assert_eq!(row(&lane, "total tokens"), ["355,200", "356,400", "352,000"]);
    assert_eq!(
        row(&lane, "tokens per accepted artifact"),
        ["1,184.0", "1,188.0", "1,173.3"]
    );
    assert_eq!(row(&lane, "duplicate artifacts"), ["0", "0", "20"]);
    assert_eq!(row(&lane, "cross-lane retries per job"), ["0.147", "0.150", "0.087"]);
    assert_eq!(row(&lane, "unique accepted artifacts"), ["300", "300", "300"]);
    let rates = table(&html, "whatif-rates");
    assert_eq!(
        rates[0],
        [
            "free lane, a job&#39;s first call",
            "300",
            "66.0%",
            "26.0%",
            "6.3%",
            "1.7%"
        ]
    );
    // The gate is not touched by a lane setting.
    assert!(html.contains("<p id=\"whatif-flips\">No decision changes.</p>"));
}

#[tokio::test]
async fn max_attempts_1_and_a_gate_cap_on_the_page() {
    let (_dir, state) = state().await;
    let (status, _, html) = get(&state, "/weeks/2026-W48/whatif?max_attempts=1").await;
    assert_eq!(status, StatusCode::OK);
    let lane = table(&html, "whatif-lane");
    assert_eq!(row(&lane, "free attempts"), ["378", "378", "300"]);
    assert_eq!(row(&lane, "paid attempts"), ["44", "45", "101"]);
    assert_eq!(row(&lane, "cross-lane retries per job"), ["0.147", "0.150", "0.337"]);

    let (status, _, html) = get(&state, "/weeks/2026-W48/whatif?max_queue_age_s=40").await;
    assert_eq!(status, StatusCode::OK);
    let gate = table(&html, "whatif-gate");
    assert_eq!(row(&gate, "admit_free"), ["20", "18", "21"]);
    assert_eq!(row(&gate, "defer"), ["12", "14", "8"]);
    assert_eq!(row(&gate, "reserved"), ["9", "9", "12"]);
    assert_eq!(row(&gate, "÷ free admits"), ["0.200", "0.111", "0.095"]);
    assert_eq!(row(&gate, "÷ defers"), ["0.500", "0.571", "0.500"]);
    assert_eq!(row(&gate, "÷ reserved shifts"), ["0.667", "0.667", "0.667"]);
    assert!(html.contains(
        "Decisions that change:\n<strong>3</strong> defer → admit_free, <strong>3</strong> defer → reserved.</p>"
    ));
    // The form shows the value asked for, and today's settings elsewhere.
    assert!(html.contains("name=\"max_queue_age_s\" value=\"40\""));
    assert!(html.contains("name=\"pin_on\" value=\"ambiguous,permanent\""));

    // Today's settings: nothing changes.
    let (_, _, html) = get(&state, "/weeks/2026-W48/whatif").await;
    assert!(html.contains("Nothing differs from today's settings yet"));
    assert_eq!(
        row(&table(&html, "whatif-lane"), "free attempts"),
        ["378", "378", "378"]
    );

    // The week page links to it.
    let (_, _, week) = get(&state, "/weeks/2026-W48").await;
    assert!(week.contains("<a href=\"/weeks/2026-W48/whatif\">What if</a>"));
}

#[tokio::test]
async fn the_json_twin_gives_the_same_figures_and_the_same_seed_the_same_answer() {
    let (_dir, state) = state().await;
    let (status, kind, body) = get(&state, "/v1/whatif?week=2026-W48&pin_on=&seed=0").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(kind, "application/json");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["lane"]["with_change"]["free_attempts"], 401);
    assert_eq!(v["lane"]["with_change"]["duplicate_artifacts"], 20);
    assert_eq!(v["lane"]["now"]["paid_attempts"], 45);
    let (_, _, again) = get(&state, "/v1/whatif?week=2026-W48&pin_on=&seed=0").await;
    assert_eq!(body, again);
    let (_, _, other) = get(&state, "/v1/whatif?week=2026-W48&pin_on=&seed=3").await;
    assert_ne!(body, other);
}

#[tokio::test]
async fn silly_values_are_refused_in_words() {
    let (_dir, state) = state().await;
    for (uri, message) in [
        (
            "/v1/whatif?week=2026-W48&max_attempts=1000",
            "max_attempts must be a whole number of attempts from 0 to 20, not \"1000\"",
        ),
        (
            "/v1/whatif?week=2026-W48&reserved_service_s=-1",
            "reserved_service_s must be a number of seconds from 0 to 86400, not \"-1\"",
        ),
        (
            "/v1/whatif?week=2026-W48&pin_on=sometimes",
            "pin_on takes outcomes from ok, retryable, ambiguous, permanent (comma-separated), not \"sometimes\"",
        ),
        ("/v1/whatif?pin_on=", "week is required, e.g. ?week=2026-W48"),
        (
            "/v1/whatif?week=2026-48",
            "\"2026-48\" is not an ISO week like 2026-W47",
        ),
    ] {
        let (status, kind, body) = get(&state, uri).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri}");
        assert_eq!(kind, "application/json");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"], message, "{uri}");
    }
    let (status, _, body) = get(&state, "/v1/whatif?week=2026-W49").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, "{\"error\":\"no data for ISO week 2026-W49\"}");

    let (status, kind, html) = get(&state, "/weeks/2026-W48/whatif?max_attempts=1000").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(kind.starts_with("text/html"));
    assert!(html.contains(
        "<strong>Cannot use these settings</strong>: max_attempts must be a whole number of attempts from 0 to 20, not &#34;1000&#34;."
    ), "{html}");
    assert!(html.contains("<form method=\"get\" action=\"/weeks/2026-W48/whatif\""));
    let (status, _, _) = get(&state, "/weeks/2026-W49/whatif").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
