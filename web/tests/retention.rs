//! `/retention` over a small ledger swept at an injected clock: exact figures in the HTML.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_query::archive::retention::{SweepOptions, SweepOutcome, sweep};
use laneledger_store::storage::retention::RetentionRule;
use laneledger_store::{Attempt, Incoming, Lane, Ledger, Outcome, parse_timestamp};
use laneledger_web::pages::retention::{Clock, spawn_schedule};
use laneledger_web::{AppState, app};
use tower::ServiceExt;

fn ts(s: &str) -> i64 {
    parse_timestamp(s).unwrap()
}

fn attempt(job_id: &str, attempt_no: u32, started: &str, ended: Option<&str>) -> Incoming {
    Incoming::Attempt {
        source: "fixture".into(),
        line: 1,
        raw: String::new(),
        attempt: Attempt {
            job_id: job_id.into(),
            idem_key: format!("k-{job_id}"),
            attempt_no,
            lane: Lane::Free,
            started_at: ts(started),
            ended_at: ended.map(ts),
            outcome: ended.map(|_| Outcome::Ok),
            tokens_in: Some(500),
            tokens_out: Some(300),
            artifact_id: None,
            http_status: None,
            provider_code: None,
            key_id: None,
            pool_id: None,
            model: None,
            attrs: None,
        },
    }
}

/// Two finished old jobs (3 attempts), an old open attempt (started before the cutoff, within the
/// 7-day grace period: kept), a recent job (2 attempts).
fn fixture() -> Vec<Incoming> {
    vec![
        attempt("old-1", 1, "2026-09-01T10:00:00Z", Some("2026-09-01T10:00:30Z")),
        attempt("old-1", 2, "2026-09-01T10:01:00Z", Some("2026-09-01T10:01:20Z")),
        attempt("old-2", 1, "2026-09-02T11:00:00Z", Some("2026-09-02T11:00:10Z")),
        attempt("open-1", 1, "2026-09-28T08:00:00Z", None),
        attempt("new-1", 1, "2026-10-20T09:00:00Z", Some("2026-10-20T09:00:40Z")),
        attempt("new-1", 2, "2026-10-20T09:01:00Z", Some("2026-10-20T09:01:05Z")),
    ]
}

async fn get(router: axum::Router, uri: &str) -> (StatusCode, String) {
    let response = router
        .oneshot(Request::get(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// The text of the page: tags dropped, whitespace collapsed.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn retention_page_shows_the_cutoff_days_sweeps_and_last_verify() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    ledger.write_batch(fixture()).unwrap();
    let session = Session::new(ledger.clone()).await.unwrap();

    // The digest of what the sweep will remove, from the stored bytes: old-1 #1, #2, old-2 #1.
    let mut removed = Vec::new();
    {
        let txn = ledger.database().begin_read().unwrap();
        let rows = laneledger_store::storage::attempt_store::read_rows(&txn).unwrap();
        for (job_id, attempt_no) in [("old-1", 1), ("old-1", 2), ("old-2", 1)] {
            let v = rows.get(job_id, attempt_no).unwrap().unwrap();
            removed.extend_from_slice(&(v.len() as u64).to_le_bytes());
            removed.extend_from_slice(&v);
        }
    }
    let digest = laneledger_store::storage::chain::to_hex(&laneledger_store::storage::chain::sha256(&removed));

    let swept_at = ts("2026-10-31T00:00:00Z");
    let rule = RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    };
    let SweepOutcome::Swept { record, .. } = sweep(&session, swept_at, &SweepOptions::new(rule)).await.unwrap() else {
        panic!("nothing swept")
    };
    assert_eq!(record.digest, digest);
    let report = ledger.verify().unwrap();
    ledger.record_verify(swept_at, &report).unwrap();

    let state = AppState::new(session, laneledger_query::Thresholds::default());
    let router = app(state).layer(axum::Extension(Clock(ts("2026-11-01T00:00:00Z"))));
    let (status, html) = get(router, "/retention").await;
    assert_eq!(status, StatusCode::OK);
    let page = text(&html);
    for expected in [
        "oldest attempt held 2026-09-28T08:00:00Z (3 attempts held)",
        "retention 30 days",
        "cutoff 2026-10-02T00:00:00Z",
        "a sweep now would remove 0 jobs, 0 attempts (kept: 1 old job with an open attempt, 0 inside a reconcile window)",
        "next sweep none scheduled in this process",
        "2026-09-28 1 before the cutoff",
        "2026-10-20 2 inside the window",
        &format!("1 2026-10-31T00:00:00Z 2026-10-01T00:00:00Z 30 2 3 2026-W36 — {digest}"),
        &format!(
            "clean at 2026-10-31T00:00:00Z: {} chain entries, {} records, tip {}",
            report.entries, report.records, report.tip
        ),
    ] {
        assert!(page.contains(expected), "missing {expected:?} in {page}");
    }
    assert_eq!(
        report.records,
        3 + 1 + 1 + 1,
        "3 attempts, the sweep row, a week snapshot, a checkpoint"
    );
    assert!(html.contains(r#"<a href="/retention" aria-current="page">Retention</a>"#));
    assert!(html.contains("SELECT * FROM retention_sweep ORDER BY sweep_no DESC"));
}

#[tokio::test]
async fn a_scheduled_sweep_shows_when_it_is_due() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("s.redb")).unwrap();
    ledger.write_batch(fixture()).unwrap();
    let session = Session::new(ledger).await.unwrap();
    let state = AppState::new(session, laneledger_query::Thresholds::default());
    assert!(spawn_schedule(state.clone(), Duration::ZERO).is_none());
    let handle = spawn_schedule(state.clone(), Duration::from_secs(3_600)).unwrap();
    // The schedule registers itself as soon as its task runs.
    let mut page = String::new();
    for _ in 0..100 {
        let (status, html) = get(app(state.clone()), "/retention").await;
        assert_eq!(status, StatusCode::OK);
        page = text(&html);
        if page.contains("next sweep due at") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    handle.abort();
    assert!(page.contains("(every 1h, serve --retain-every )"), "{page}");
    assert!(page.contains("next sweep due at 20"), "{page}");
}
