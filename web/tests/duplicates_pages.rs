//! `/duplicates` pages (issue 31 item 5): 100 keys a page with links between pages, and a week
//! filter, instead of every duplicate of the ledger at once.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::{Session, Thresholds};
use laneledger_store::{Attempt, Incoming, Lane, Ledger, Outcome, parse_timestamp};
use laneledger_web::{AppState, app};
use tower::ServiceExt;

/// One ok attempt of job `job` (key `key`) with artifact `artifact`, started at `at`.
fn attempt(job: &str, key: &str, no: u32, at: &str, artifact: &str) -> Attempt {
    let t = parse_timestamp(at).unwrap();
    Attempt {
        job_id: job.into(),
        idem_key: key.into(),
        attempt_no: no,
        lane: if no == 1 { Lane::Free } else { Lane::Paid },
        started_at: t,
        ended_at: Some(t + 1_000_000),
        outcome: Some(Outcome::Ok),
        tokens_in: Some(10),
        tokens_out: Some(10),
        artifact_id: Some(artifact.into()),
        http_status: None,
        provider_code: None,
        key_id: None,
        pool_id: None,
        model: None,
        attrs: None,
    }
}

/// 2026-W47: 230 keys with two artifacts each (k000…k229); 2026-W48: 3 keys with three each
/// (w000…w002), and 5 keys with one artifact.
async fn state() -> (tempfile::TempDir, AppState) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    let mut attempts = Vec::new();
    for i in 0..230 {
        let (job, key) = (format!("j{i:03}"), format!("k{i:03}"));
        attempts.push(attempt(&job, &key, 1, "2026-11-17T08:00:00Z", &format!("{key}-a")));
        attempts.push(attempt(&job, &key, 2, "2026-11-17T08:10:00Z", &format!("{key}-b")));
    }
    for i in 0..3 {
        let (job, key) = (format!("x{i:03}"), format!("w{i:03}"));
        for no in 1..=3 {
            attempts.push(attempt(&job, &key, no, "2026-11-24T08:00:00Z", &format!("{key}-{no}")));
        }
    }
    for i in 0..5 {
        attempts.push(attempt(
            &format!("s{i}"),
            &format!("s{i}"),
            1,
            "2026-11-24T09:00:00Z",
            "single",
        ));
    }
    let batch = attempts
        .into_iter()
        .enumerate()
        .map(|(i, attempt)| Incoming::Attempt {
            source: "fixture".into(),
            line: i as u64 + 1,
            raw: String::new(),
            attempt,
        })
        .collect();
    ledger.write_batch(batch).unwrap();
    let session = Session::new(ledger).await.unwrap();
    (dir, AppState::new(session, Thresholds::default()))
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

/// The keys a page shows, in order.
fn keys(html: &str) -> Vec<String> {
    html.split("idem_key <code>")
        .skip(1)
        .map(|s| s[..s.find("</code>").unwrap()].to_string())
        .collect()
}

#[tokio::test]
async fn duplicates_come_100_keys_a_page_with_links_between_pages() {
    let (_dir, state) = state().await;
    let (status, html) = get(&state, "/duplicates").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains(
        "<strong>233</strong> idem_keys with more than one artifact, <strong>236</strong> duplicate artifacts in all"
    ), "{html}");
    assert!(html.contains("Keys 1–100 of 233 shown, page 1 of 3."));
    let first = keys(&html);
    assert_eq!(first.len(), 100);
    assert_eq!((first[0].as_str(), first[99].as_str()), ("k000", "k099"));
    assert!(html.contains(r#"<a href="/duplicates?page=2" rel="next">next 100 →</a>"#));
    assert!(html.contains(r#"<a href="/duplicates?page=3">3</a>"#));

    let (_, html) = get(&state, "/duplicates?page=3").await;
    assert!(html.contains("Keys 201–233 of 233 shown, page 3 of 3."));
    let last = keys(&html);
    assert_eq!(last.len(), 33);
    assert_eq!((last[0].as_str(), last[32].as_str()), ("k200", "w002"));
    assert!(html.contains(r#"<a href="/duplicates?page=2" rel="prev">← previous 100</a>"#));
    // A page past the last shows the last.
    let (_, past) = get(&state, "/duplicates?page=9").await;
    assert_eq!(keys(&past), last);

    for bad in ["0", "x", "-1"] {
        let (status, _) = get(&state, &format!("/duplicates?page={bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
}

#[tokio::test]
async fn the_week_filter_shows_that_weeks_keys_only() {
    let (_dir, state) = state().await;
    let (status, html) = get(&state, "/duplicates?week=2026-W48").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<h1>Duplicate artifacts: 2026-W48</h1>"));
    assert!(html.contains(
        "<strong>3</strong> idem_keys with more than one artifact, <strong>6</strong> duplicate artifacts in all"
    ));
    assert_eq!(keys(&html), ["w000", "w001", "w002"]);
    assert!(!html.contains("rel=\"next\""));
    // The week links: the whole ledger, then each week, newest first; the shown one in bold.
    assert!(html.contains(
        r#"Week: <a href="/duplicates">all weeks</a> · <strong>2026-W48</strong> · <a href="/duplicates?week=2026-W47">2026-W47</a></p>"#
    ));
    let (_, w47) = get(&state, "/duplicates?week=2026-W47&page=2").await;
    assert!(w47.contains("Keys 101–200 of 230 shown, page 2 of 3."));
    assert!(
        w47.contains(r#"<a href="/duplicates?week=2026-W47&#38;page=3" rel="next">next 100 →</a>"#),
        "{w47}"
    );
    let (_, empty) = get(&state, "/duplicates?week=2026-W40").await;
    assert!(empty.contains("No duplicate artifacts in 2026-W40"));
    let (status, _) = get(&state, "/duplicates?week=2026-W99").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}
