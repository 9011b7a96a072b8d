//! The site's pages over a small hand-written ledger: status codes and the key figures in the HTML.

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use laneledger_query::{Session, Thresholds};
use laneledger_store::{Attempt, Incoming, Lane, Ledger, Outcome, parse_timestamp};
use laneledger_web::{AppState, app};
use tempfile::TempDir;
use tower::ServiceExt;

fn ts(s: &str) -> i64 {
    parse_timestamp(s).expect("fixture timestamp")
}

#[allow(clippy::too_many_arguments)]
fn attempt(
    job_id: &str,
    idem_key: &str,
    attempt_no: u32,
    lane: Lane,
    (started, ended): (&str, &str),
    outcome: Outcome,
    (tokens_in, tokens_out): (u64, u64),
    artifact_id: Option<&str>,
) -> Attempt {
    Attempt {
        job_id: job_id.into(),
        idem_key: idem_key.into(),
        attempt_no,
        lane,
        started_at: ts(started),
        ended_at: Some(ts(ended)),
        outcome: Some(outcome),
        tokens_in: Some(tokens_in),
        tokens_out: Some(tokens_out),
        artifact_id: artifact_id.map(Into::into),
        http_status: None,
        provider_code: None,
        key_id: None,
        pool_id: None,
        model: None,
        attrs: None,
    }
}

/// Two ISO weeks.
///
/// 2026-W46: j1 (free ok), j2 (free retryable, free ok): 2 jobs, 3 free, 0 paid, 1,600 tokens,
/// 2 accepted artifacts, no duplicate, no cross-lane job.
///
/// 2026-W47: j3 (free ambiguous with a late artifact, then paid ok: a duplicate artifact for
/// k3), j4 (free ok), j5 (free 429/1305, paid ok), `job/7 <b>&` (paid ok): 4 jobs, 3 free,
/// 3 paid, 4,400 tokens, 4 accepted artifacts, 1 duplicate (25.00 per 100 jobs), 2 cross-lane
/// jobs (0.500 per job), 5 artifacts by seed query 1 (880.0 tokens per artifact).
fn fixture() -> Vec<Attempt> {
    use Lane::{Free, Paid};
    use Outcome::{Ambiguous, Ok, Retryable};
    let mut j5_refused = attempt(
        "j5",
        "key #5/ä",
        1,
        Free,
        ("2026-11-18T09:00:00Z", "2026-11-18T09:00:01Z"),
        Retryable,
        (0, 0),
        None,
    );
    j5_refused.http_status = Some(429);
    j5_refused.provider_code = Some(1305);
    j5_refused.key_id = Some("key-a".into());
    j5_refused.pool_id = Some("pool-1".into());
    j5_refused.model = Some("glm-4.6".into());
    vec![
        attempt(
            "j1",
            "k1",
            1,
            Free,
            ("2026-11-10T09:00:00Z", "2026-11-10T09:00:20Z"),
            Ok,
            (300, 500),
            Some("a1"),
        ),
        // Written before attempt 1: the page must still list attempts in attempt_no order.
        attempt(
            "j2",
            "k2",
            2,
            Free,
            ("2026-11-11T10:01:00Z", "2026-11-11T10:01:30Z"),
            Ok,
            (200, 600),
            Some("a2"),
        ),
        attempt(
            "j2",
            "k2",
            1,
            Free,
            ("2026-11-11T10:00:00Z", "2026-11-11T10:00:02Z"),
            Retryable,
            (0, 0),
            None,
        ),
        attempt(
            "j3",
            "k3",
            2,
            Paid,
            ("2026-11-17T08:01:00Z", "2026-11-17T08:01:40Z"),
            Ok,
            (400, 800),
            Some("a3-paid"),
        ),
        attempt(
            "j3",
            "k3",
            1,
            Free,
            ("2026-11-17T08:00:00Z", "2026-11-17T08:00:30Z"),
            Ambiguous,
            (300, 500),
            Some("a3-free"),
        ),
        attempt(
            "j4",
            "k4",
            1,
            Free,
            ("2026-11-17T09:00:00Z", "2026-11-17T09:00:25Z"),
            Ok,
            (300, 500),
            Some("a4"),
        ),
        j5_refused,
        attempt(
            "j5",
            "key #5/ä",
            2,
            Paid,
            ("2026-11-18T09:00:10Z", "2026-11-18T09:00:50Z"),
            Ok,
            (400, 800),
            Some("a5"),
        ),
        attempt(
            "job/7 <b>&",
            "k7",
            1,
            Paid,
            ("2026-11-19T12:00:00Z", "2026-11-19T12:00:20Z"),
            Ok,
            (100, 300),
            Some("a7"),
        ),
    ]
}

async fn state_with(attempts: Vec<Attempt>) -> (TempDir, AppState) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ledger = Ledger::open(dir.path().join("ledger.redb")).expect("open ledger");
    if !attempts.is_empty() {
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
        ledger.write_batch(batch).expect("write fixture");
    }
    let session = Session::new(ledger).await.expect("session");
    // The fixture's weeks hold a few jobs each: judge their ratios as those of any week.
    let thresholds = Thresholds {
        min_jobs: 1,
        ..Thresholds::default()
    };
    (dir, AppState::new(session, thresholds))
}

async fn get(state: &AppState, uri: &str) -> (StatusCode, String) {
    let response = app(state.clone())
        .oneshot(Request::get(uri).body(Body::empty()).expect("request"))
        .await
        .expect("infallible");
    let status = response.status();
    let bytes = response.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8(bytes.to_vec()).expect("utf-8"))
}

/// The text of an HTML fragment: tags dropped, whitespace trimmed.
fn text(fragment: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in fragment.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `<td>` texts of each `<tr>` inside the first `<tbody>` after `after`.
fn body_rows(html: &str, after: &str) -> Vec<Vec<String>> {
    let start = html.find(after).expect("anchor");
    let body = &html[start..];
    let body = &body[body.find("<tbody>").expect("tbody")..];
    let body = &body[..body.find("</tbody>").expect("/tbody")];
    body.split("<tr")
        .skip(1)
        .map(|tr| {
            tr.split("<td")
                .skip(1)
                .map(|td| text(&td[td.find('>').expect("td >") + 1..td.find("</td>").expect("/td")]))
                .collect()
        })
        .collect()
}

/// The `<td>` texts of the drill-table row named `name`.
fn metric(html: &str, name: &str) -> Vec<String> {
    let needle = format!(">{name}</th>");
    let start = html.find(&needle).unwrap_or_else(|| panic!("no row {name}"));
    let row = &html[start..];
    let row = &row[..row.find("</tr>").expect("/tr")];
    row.split("<td")
        .skip(1)
        .map(|td| text(&td[td.find('>').expect(">") + 1..td.find("</td>").expect("/td")]))
        .take(3)
        .collect()
}

#[tokio::test]
async fn the_front_page_reviews_the_latest_week_beside_the_one_before() {
    let (_dir, state) = state_with(fixture()).await;
    let (status, html) = get(&state, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("<h1>Weekly review: 2026-W47 (latest week)</h1>"),
        "{html}"
    );
    // W47: seed 000's two, one job sent free after a refusal that pins (j5), and j5's overload.
    assert!(html.contains("<strong>4 alerts this week</strong>"), "{html}");
    assert_eq!(metric(&html, "jobs"), ["4", "2", "+2"]);
    assert_eq!(metric(&html, "unique accepted artifacts"), ["4", "2", "+2"]);
    assert_eq!(metric(&html, "free attempts"), ["3", "3", "0"]);
    assert_eq!(metric(&html, "paid attempts"), ["3", "0", "+3"]);
    assert_eq!(metric(&html, "total tokens"), ["4,400", "1,600", "+2,800"]);
    assert_eq!(
        metric(&html, "tokens per accepted artifact"),
        ["1,100.0", "800.0", "+300.0"]
    );
    assert_eq!(metric(&html, "duplicate artifacts"), ["1", "0", "+1"]);
    assert_eq!(
        metric(&html, "duplicate artifacts per 100 jobs"),
        ["25.00", "0.00", "+25.00"]
    );
    assert_eq!(
        metric(&html, "cross-lane retries per job"),
        ["0.500", "0.000", "+0.500"]
    );
    assert!(html.contains(
        "Tokens per artifact, counting each job's distinct artifacts (duplicates included): <strong>880.0</strong>"
    ));
    // Seed 000's two alerts fire this week, each with its value and threshold, in words and colour.
    let alerts = &html
        [html.find("<h2>Alerts</h2>").expect("alerts")..html.find("<h2 id=\"drill\">Drill table</h2>").expect("drill")];
    assert_eq!(
        alerts.matches(r#"<span class="badge alert">ALERT</span>"#).count(),
        4,
        "{alerts}"
    );
    assert!(alerts.contains("0.500<span>alert above 0.20</span>"), "{alerts}");
    assert!(alerts.contains("25.00<span>alert above 1</span>"), "{alerts}");
    // Every week, newest first, links to its review.
    let w47 = html
        .find(r#"<a href="/weeks/2026-W47">2026-W47</a>"#)
        .expect("W47 link");
    let w46 = html
        .find(r#"<a href="/weeks/2026-W46">2026-W46</a>"#)
        .expect("W46 link");
    assert!(w47 < w46);
}

#[tokio::test]
async fn a_chosen_week_has_its_own_review_and_passing_alerts() {
    let (_dir, state) = state_with(fixture()).await;
    let (status, html) = get(&state, "/weeks/2026-W46").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<h1>Weekly review: 2026-W46</h1>"));
    assert!(html.contains("no attempts in 2026-W45"));
    assert_eq!(metric(&html, "jobs"), ["2", "—", "—"]);
    assert_eq!(metric(&html, "total tokens"), ["1,600", "—", "—"]);
    assert_eq!(metric(&html, "cross-lane retries per job"), ["0.000", "—", "—"]);
    let alerts = &html
        [html.find("<h2>Alerts</h2>").expect("alerts")..html.find("<h2 id=\"drill\">Drill table</h2>").expect("drill")];
    assert!(html.contains("<strong>No alert this week</strong>"));
    // No attempt names a key or was refused: the three rates over them have no data.
    assert_eq!(
        alerts.matches(r#"<span class="badge pass">pass</span>"#).count(),
        8,
        "{alerts}"
    );
    assert_eq!(
        alerts.matches(r#"<span class="badge nodata">no data</span>"#).count(),
        3,
        "{alerts}"
    );
    assert!(!alerts.contains("ALERT"));
}

#[tokio::test]
async fn a_bad_week_label_is_a_400_page_and_an_unknown_week_a_404_page() {
    let (_dir, state) = state_with(fixture()).await;
    for label in ["nonsense", "2026-W54", "2026-47", "2021-W53"] {
        let (status, html) = get(&state, &format!("/weeks/{label}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{label}");
        assert!(
            html.contains("<h1 style=\"margin-top: 4px\">Not an ISO week</h1>"),
            "{html}"
        );
        assert!(html.contains("400 Bad Request"));
    }
    let (status, html) = get(&state, "/weeks/2026-W01").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("Week not found"));
    assert!(html.contains("ISO week 2026-W01"));
}

#[tokio::test]
async fn the_weeks_page_lists_every_week_with_its_alert_states() {
    let (_dir, state) = state_with(fixture()).await;
    let (status, html) = get(&state, "/weeks").await;
    assert_eq!(status, StatusCode::OK);
    let rows = body_rows(&html, "<h1>Weeks</h1>");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0],
        [
            "2026-11-16",
            "4",
            "4,400",
            "1,100.0",
            "1",
            "25.00 ALERT",
            "0.500 ALERT",
            "4 ALERT cross-lane retries per job; duplicate artifacts per 100 jobs; jobs with a lane policy violation per 100 jobs; pool overload episodes in the week"
        ]
    );
    assert_eq!(
        rows[1],
        [
            "2026-11-09",
            "2",
            "1,600",
            "800.0",
            "0",
            "0.00 pass",
            "0.000 pass",
            "none of 11"
        ]
    );
}

#[tokio::test]
async fn a_job_page_lists_its_attempts_in_attempt_no_order() {
    let (_dir, state) = state_with(fixture()).await;
    let (status, html) = get(&state, "/jobs/j3").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<h1>Job j3</h1>"));
    let rows = body_rows(&html, "<h2>Attempts</h2>");
    let detail = body_rows(&html, "<h2>Provider answer and key</h2>");
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0],
        [
            "1",
            "free",
            "2026-11-17T08:00:00Z",
            "2026-11-17T08:00:30Z",
            "30.0",
            "ambiguous",
            "300",
            "500",
            "a3-free"
        ]
    );
    assert_eq!(detail[0], ["1", "—", "—", "—", "—", "—", "—"]);
    assert_eq!(
        rows[1],
        [
            "2",
            "paid",
            "2026-11-17T08:01:00Z",
            "2026-11-17T08:01:40Z",
            "40.0",
            "ok",
            "400",
            "800",
            "a3-paid"
        ]
    );
    assert_eq!(detail[1], ["2", "—", "—", "—", "—", "—", "—"]);
    assert!(html.contains(r#"<a href="/weeks/2026-W47">2026-W47</a>"#));
    assert!(html.contains("2,000"));

    let (status, html) = get(&state, "/jobs/j5").await;
    assert_eq!(status, StatusCode::OK);
    let rows = body_rows(&html, "<h2>Attempts</h2>");
    let detail = body_rows(&html, "<h2>Provider answer and key</h2>");
    assert_eq!(
        rows[0],
        [
            "1",
            "free",
            "2026-11-18T09:00:00Z",
            "2026-11-18T09:00:01Z",
            "1.0",
            "retryable",
            "0",
            "0",
            "—"
        ]
    );
    assert_eq!(
        detail[0],
        ["1", "429", "1305", "transient", "key-a", "pool-1", "glm-4.6"]
    );
    // The written-out-of-order job too.
    let (_, html) = get(&state, "/jobs/j2").await;
    let rows = body_rows(&html, "<h1>Job j2</h1>");
    assert_eq!(rows.iter().map(|r| r[0].as_str()).collect::<Vec<_>>(), ["1", "2"]);
}

#[tokio::test]
async fn job_ids_are_percent_encoded_in_links_and_escaped_in_pages() {
    let (_dir, state) = state_with(fixture()).await;
    let (status, html) = get(&state, "/jobs/job%2F7%20%3Cb%3E%26").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("Job job/7 &#60;b&#62;&#38;"), "{html}");
    assert!(!html.contains("<b>&"));
}

#[tokio::test]
async fn an_unknown_job_or_path_is_a_404_page() {
    let (_dir, state) = state_with(fixture()).await;
    let (status, html) = get(&state, "/jobs/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("Job not found"));
    assert!(html.contains("404 Not Found"));
    let (status, html) = get(&state, "/no/such/page").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(html.contains("Page not found"));
    assert!(html.contains("<nav"), "the 404 page keeps the site's navigation");
}

#[tokio::test]
async fn the_duplicates_page_lists_each_key_with_its_artifacts() {
    let (_dir, state) = state_with(fixture()).await;
    let (status, html) = get(&state, "/duplicates").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<h1>Duplicate artifacts</h1>"));
    assert!(html.contains(
        "<strong>1</strong> idem_key with more than one artifact, <strong>1</strong> duplicate artifact in all"
    ));
    assert!(html.contains("idem_key <code>k3</code>"));
    let rows = body_rows(&html, "idem_key <code>k3</code>");
    assert_eq!(
        rows,
        [
            ["a3-free", "j3", "1", "free", "ambiguous", "2026-11-17T08:00:30Z"],
            ["a3-paid", "j3", "2", "paid", "ok", "2026-11-17T08:01:40Z"],
        ]
    );
    assert!(html.contains(r#"<a href="/jobs/j3">j3</a>"#));
    assert!(!html.contains("k4"));
}

#[tokio::test]
async fn an_empty_ledger_says_how_to_ingest() {
    let (_dir, state) = state_with(Vec::new()).await;
    let (status, html) = get(&state, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("<h1>No data yet</h1>"));
    assert!(html.contains("laneledger ingest FILE"));
    let (status, html) = get(&state, "/duplicates").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("No duplicate artifacts"));
    let (status, html) = get(&state, "/weeks").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("The ledger holds no attempts yet"));
    let (status, _) = get(&state, "/weeks/2026-W47").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_duplicate_links_to_its_job_even_with_a_slash_in_the_job_id() {
    let mut attempts = fixture();
    // `job/7 <b>&` delivers a third artifact for k3.
    attempts[8].idem_key = "k3".into();
    let (_dir, state) = state_with(attempts).await;
    let (_, html) = get(&state, "/duplicates").await;
    assert!(
        html.contains(
            "<strong>1</strong> idem_key with more than one artifact, <strong>2</strong> duplicate artifacts in all"
        ),
        "{html}"
    );
    let link = r#"<a href="/jobs/job%2F7%20%3Cb%3E%26">job/7 &#60;b&#62;&#38;</a>"#;
    assert!(html.contains(link), "{html}");
    let (status, html) = get(&state, "/jobs/job%2F7%20%3Cb%3E%26").await;
    assert_eq!(status, StatusCode::OK);
    assert!(html.contains("a7"));
}

#[tokio::test]
async fn smoke_the_site_answers_over_tcp_and_shuts_down_gracefully() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_dir, state) = state_with(fixture()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(laneledger_web::serve_until(listener, state, async {
        let _ = stopped.await;
    }));
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("write");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read");
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
    assert!(response.contains("content-type: text/html; charset=utf-8"));
    assert!(response.contains("<h1>Weekly review: 2026-W47 (latest week)</h1>"));
    stop.send(()).expect("stop");
    server.await.expect("join").expect("serve");
}
