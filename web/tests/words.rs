//! Words for the users (issue 31 item 9): the pages and the review's JSON speak the reviewer's
//! language. No source's name ("seed 000", "SPEC 4"), no function of a source (`decide_safe`,
//! `next_lane`) and no source file name reaches a page; those stay in code comments.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::{DEFAULT_BATCH, InputFormat, LaneConfig, Ledger, ingest_decisions_reader, ingest_reader};
use laneledger_web::{AppState, app};
use tower::ServiceExt;

/// What no product text may hold (compared lowercased).
const FORBIDDEN: [&str; 12] = [
    "seed 0",
    "seed's",
    "seeds'",
    "the seed ",
    "spec 1",
    "spec 2",
    "spec 3",
    "spec 4",
    "spec 5",
    "spec 6",
    "decide_safe",
    "next_lane",
];

/// Source file names: a word ending in `.rs` or `.py`.
fn file_names(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "<>\"'()`,;".contains(c))
        .map(|w| w.trim_end_matches(['.', ':']))
        .filter(|w| (w.ends_with(".rs") || w.ends_with(".py")) && w.len() > 3)
        .map(String::from)
        .collect()
}

#[tokio::test]
async fn pages_and_the_review_speak_the_reviewers_language() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    let sample = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample-data");
    for f in [
        "drill-nopin-2026-W47.ndjson",
        "drill-pin-2026-W48.ndjson",
        "keys-incident-2026-10-17.ndjson",
    ] {
        let r = std::io::BufReader::new(std::fs::File::open(sample.join(f)).unwrap());
        ingest_reader(&ledger, f, r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    }
    let r = std::io::BufReader::new(std::fs::File::open(sample.join("decisions-2026-W48.ndjson")).unwrap());
    ingest_decisions_reader(&ledger, "decisions", r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    let config = LaneConfig::load(Some(&sample.join("lane.yaml"))).unwrap();
    let session = Session::with_config(ledger, config).await.unwrap();
    let state = AppState::new(session.clone(), session.thresholds());
    let pages = [
        ("/", StatusCode::OK),
        ("/weeks", StatusCode::OK),
        ("/weeks/2026-W42", StatusCode::OK),
        ("/weeks/2026-W47", StatusCode::OK),
        ("/duplicates", StatusCode::OK),
        ("/sql", StatusCode::OK),
        (
            "/sql?q=SELECT+lane%2C+COUNT(*)+FROM+job_attempt+GROUP+BY+lane",
            StatusCode::OK,
        ),
        ("/jobs/bee-spin", StatusCode::OK),
        ("/jobs/pin-job-000001", StatusCode::OK),
        ("/retention", StatusCode::OK),
        ("/jobs/no-such-job", StatusCode::NOT_FOUND),
        ("/weeks/2026-W01", StatusCode::NOT_FOUND),
        ("/weeks/nonsense", StatusCode::BAD_REQUEST),
        ("/v1/review?week=2026-W42", StatusCode::OK),
        ("/v1/review?week=2026-W48", StatusCode::OK),
        ("/metrics?week=2026-W42", StatusCode::OK),
    ];
    for (uri, want) in pages {
        let resp = app(state.clone())
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(resp.status(), want, "{uri}");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(body.to_vec()).unwrap();
        let lower = text.to_lowercase();
        for word in FORBIDDEN {
            if let Some(at) = lower.find(word) {
                let from = lower[..at].char_indices().rev().nth(80).map_or(0, |(i, _)| i);
                panic!("{uri} says {word:?}: …{}…", &text[from..(at + 40).min(text.len())]);
            }
        }
        assert_eq!(file_names(&text), Vec::<String>::new(), "{uri}");
    }
    // The text review too.
    let review = session.review(Some("2026-W42"), &session.thresholds()).await.unwrap();
    let text = review.to_text().to_lowercase();
    for word in FORBIDDEN {
        assert!(!text.contains(word), "review text says {word:?}");
    }
    assert_eq!(
        file_names("see query/src/review/metrics.rs, or x.py. Or 3.5 rs"),
        ["query/src/review/metrics.rs", "x.py"]
    );
}
