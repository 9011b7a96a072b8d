//! Summary first, rows after (issue 31): the week page's sections open with their counts, a long
//! section has pages of its own (HTML and JSON), and a job page says why the job was flagged.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::Session;
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_reader};
use laneledger_web::{AppState, app};
use tower::ServiceExt;

/// A ledger of the key incident sample and the pin drill, plus `extra` NDJSON.
async fn state(extra: &str) -> (tempfile::TempDir, AppState) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    for f in ["keys-incident-2026-10-17.ndjson", "drill-pin-2026-W48.ndjson"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample-data")
            .join(f);
        let r = std::io::BufReader::new(std::fs::File::open(path).unwrap());
        ingest_reader(&ledger, f, r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    }
    if !extra.is_empty() {
        let r = std::io::Cursor::new(extra.to_string());
        ingest_reader(&ledger, "extra", r, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    }
    let session = Session::new(ledger).await.unwrap();
    (dir, AppState::new(session.clone(), session.thresholds()))
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

/// The HTML of one audit section.
fn section<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<section class=\"audit\" id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no section {id}"));
    let rest = &html[start..];
    &rest[..rest.find("</section>").unwrap()]
}

/// `n` jobs `skr-000`… each retried once on the key that had just refused it, in 2026-W42.
fn same_key_retries(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        let m = i % 60;
        text += &format!(
            "{{\"job_id\":\"skr-{i:03}\",\"idem_key\":\"i-skr-{i:03}\",\"attempt_no\":1,\"lane\":\"free\",\"started_at\":\"2026-10-13T10:{m:02}:00Z\",\"ended_at\":\"2026-10-13T10:{m:02}:01Z\",\"outcome\":\"retryable\",\"http_status\":429,\"provider_code\":1302,\"key_id\":\"k{k}\",\"pool_id\":\"pool-a\",\"model\":\"m-1\"}}\n\
             {{\"job_id\":\"skr-{i:03}\",\"idem_key\":\"i-skr-{i:03}\",\"attempt_no\":2,\"lane\":\"free\",\"started_at\":\"2026-10-13T10:{m:02}:30Z\",\"ended_at\":\"2026-10-13T10:{m:02}:31Z\",\"outcome\":\"ok\",\"http_status\":200,\"artifact_id\":\"a-skr-{i:03}\",\"key_id\":\"k{k}\",\"pool_id\":\"pool-a\",\"model\":\"m-1\"}}\n",
            k = i % 5
        );
    }
    text
}

/// The `<td>` texts of each body row of the page's first table after `from`.
fn first_column(html: &str) -> Vec<String> {
    let body = &html[html.find("<table class=\"dense\">").unwrap()..];
    let body = &body[body.find("<tbody>").unwrap()..body.find("</tbody>").unwrap()];
    body.split("<tr>")
        .skip(1)
        .map(|r| {
            let td = &r[r.find("<td>").unwrap() + 4..];
            let text = &td[..td.find("</td>").unwrap()];
            // A job cell is a link; keep its text.
            match text.find('>') {
                Some(i) => text[i + 1..text.find("</a>").unwrap()].to_string(),
                None => text.to_string(),
            }
        })
        .collect()
}

#[tokio::test]
async fn the_incident_weeks_sections_open_with_their_counts() {
    let (_d, st) = state("").await;
    let (status, html) = get(&st, "/weeks/2026-W42").await;
    assert_eq!(status, StatusCode::OK);
    let pool = section(&html, "pool_overload_episode");
    let counts = pool.find("<strong>In all, by pool_id</strong>").expect(pool);
    assert!(counts < pool.find("<strong>The rows</strong>").unwrap());
    assert!(
        pool.contains(
            r#"<tr><td>pool-2</td><td class="num">1</td><td class="num">16</td><td class="num">10</td></tr>"#
        ),
        "{pool}"
    );
    let same = section(&html, "same_key_retry");
    assert!(same.contains("<strong>In all, by key_id, pool_id, model and previous_kind</strong>"));
    assert!(same.contains(r#"<tr><td>p2-key-9</td><td>pool-2</td><td>glm-4.6</td><td>transient</td><td class="num">2</td><td class="num">1</td></tr>"#), "{same}");
    assert!(same.contains(r#"<tr><td>p1-key-17</td><td>pool-1</td><td>glm-4.6</td><td>quota</td><td class="num">1</td><td class="num">1</td></tr>"#));
    let bound = section(&html, "attempt_bound_exceeded");
    assert!(
        bound.contains(r#"<tr><td>ok</td><td class="num">1</td><td class="num">9</td><td class="num">9</td></tr>"#)
    );
    // No row, no counts; nothing is cut, so no link to further pages.
    let dup = section(&html, "duplicate_reconciliation");
    assert!(dup.contains("None this week.") && !dup.contains("In all, by"));
    assert!(!html.contains("/sections/"));
    // The clean pin week: no counts anywhere in the key audits.
    let (_, clean) = get(&st, "/weeks/2026-W48").await;
    for id in [
        "same_key_retry",
        "key_rest_violation",
        "pool_overload_episode",
        "outcome_mismatch",
    ] {
        assert!(!section(&clean, id).contains("In all, by"), "{id}");
    }
}

#[tokio::test]
async fn a_long_section_pages_its_rows() {
    let (_d, st) = state(&same_key_retries(250)).await;
    let (_, week) = get(&st, "/weeks/2026-W42").await;
    let same = section(&week, "same_key_retry");
    assert!(same.contains(r#"<span class="count">253</span>"#), "{same}");
    assert!(
        same.contains(r#"<a href="/weeks/2026-W42/sections/same_key_retry?page=2" rel="next">the next page →</a>"#)
    );

    // 253 rows by job_id: bee-9967 twice, bee-quota, then skr-000…skr-249.
    let mut all: Vec<String> = vec!["bee-9967".into(), "bee-9967".into(), "bee-quota".into()];
    all.extend((0..250).map(|i| format!("skr-{i:03}")));
    all.sort();
    let (status, p2) = get(&st, "/weeks/2026-W42/sections/same_key_retry?page=2").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        p2.contains("Rows <strong>101–200</strong> of <strong>253</strong>, page 2 of 3."),
        "{p2}"
    );
    assert_eq!(first_column(&p2), all[100..200]);
    assert!(p2.contains(r#"<a href="/weeks/2026-W42/sections/same_key_retry" rel="prev">"#));
    assert!(p2.contains(r#"<a href="/weeks/2026-W42/sections/same_key_retry?page=3" rel="next">"#));
    assert!(p2.contains(r#"<a href="/jobs/skr-150">skr-150</a>"#));
    assert!(p2.contains("<strong>In all, by key_id, pool_id, model and previous_kind</strong>"));
    let (_, p3) = get(&st, "/weeks/2026-W42/sections/same_key_retry?page=3").await;
    assert!(p3.contains("Rows <strong>201–253</strong> of <strong>253</strong>, page 3 of 3."));
    assert_eq!(first_column(&p3), all[200..253]);
    let (_, past) = get(&st, "/weeks/2026-W42/sections/same_key_retry?page=9").await;
    assert_eq!(first_column(&past), all[200..253]);

    // The same page as JSON.
    let (status, json) = get(&st, "/v1/sections/same_key_retry?week=2026-W42&page=2").await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        (&v["week"], &v["page"], &v["pages"], &v["per_page"], &v["first_row"]),
        (&"2026-W42".into(), &2.into(), &3.into(), &100.into(), &100.into())
    );
    let rows = v["section"]["rows"].as_array().unwrap();
    let jobs: Vec<&str> = rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(jobs, all[100..200]);
    assert_eq!(v["section"]["total_rows"], 253);
    assert_eq!(
        v["section"]["summary"]["rows"][0],
        serde_json::json!(["k0", "pool-a", "m-1", "transient", "50", "50"])
    );

    // Bad page numbers, bad weeks and unknown sections.
    assert_eq!(
        get(&st, "/weeks/2026-W42/sections/same_key_retry?page=0").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&st, "/weeks/2026-W42/sections/no_such").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&st, "/weeks/2026-W99/sections/same_key_retry").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        get(&st, "/weeks/2025-W01/sections/same_key_retry").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&st, "/v1/sections/no_such?week=2026-W42").await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&st, "/v1/sections/same_key_retry?page=x").await.0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn a_job_page_says_why_the_job_was_flagged() {
    let (_d, st) = state("").await;
    let (status, html) = get(&st, "/jobs/bee-quota").await;
    assert_eq!(status, StatusCode::OK);
    let at = html.find(r#"<h2 id="findings">Why this job was flagged</h2>"#).unwrap();
    assert!(at < html.find("<h2>Timeline</h2>").unwrap());
    assert!(html.contains("<strong>4 findings</strong>"), "{html}");
    for (id, title, attempt, words) in [
        (
            "same_key_retry",
            "Retries on the key that just refused",
            "2",
            "sent to key p1-key-17 right after that key refused the previous attempt (quota, HTTP 429, code 1308)",
        ),
        (
            "outcome_mismatch",
            "Outcomes that contradict the refusal",
            "1",
            "logged retryable for a quota refusal (HTTP 429, code 1308): a spent quota closes the key for the long break: not retryable on it",
        ),
        (
            "outcome_mismatch",
            "Outcomes that contradict the refusal",
            "2",
            "logged retryable for a quota refusal (HTTP 429, code 1308): a spent quota closes the key for the long break: not retryable on it",
        ),
    ] {
        let row = format!(
            "<td class=\"nowrap\"><a href=\"/weeks/2026-W42#{id}\">{title}</a></td>\n      <td class=\"nowrap\">2026-W42</td>\n      <td class=\"num\">{attempt}</td>\n      <td>{words}</td>"
        );
        assert!(html.contains(&row), "missing {row}");
    }
    assert!(
        html.contains(r#"<a href="/weeks/2026-W42#key_rest_violation">Keys used inside their rest or long break</a>"#)
    );
    // A job of the overload whose retry went to another pool: nothing to say.
    let (_, clean) = get(&st, "/jobs/bee-1408-01").await;
    assert!(clean.contains("<strong>No finding</strong>"));
    assert!(!clean.contains("findings</strong>"));
}
