//! Alerts out (issue 31): a webhook gets one POST when a card turns red, nothing while it stays
//! red (across a restart too), one "cleared" POST when it clears, through a dead receiver's
//! failures, which never hold up a write.

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{Request, StatusCode, header};
use axum::routing::post;
use laneledger_query::{Session, Thresholds};
use laneledger_store::config::{AlertSelection, WebhookConfig};
use laneledger_store::{DEFAULT_BATCH, InputFormat, LaneConfig, Ledger, ingest_reader, parse_timestamp};
use laneledger_web::webhooks::{Evaluation, Notifier, WebhookOptions};
use laneledger_web::{AppState, Auth, Token, Writer, app};
use serde_json::{Value, json};
use tower::ServiceExt;

/// What the receiver got: every body it answered 2xx, and every request it was sent.
#[derive(Default)]
struct Received {
    bodies: Mutex<Vec<Value>>,
    requests: AtomicUsize,
    /// The status it answers with; 0 answers 200 and keeps the body.
    fail_with: AtomicU16,
}

/// A webhook receiver on 127.0.0.1: its URL and what it got.
async fn receiver() -> (String, Arc<Received>) {
    async fn take(State(r): State<Arc<Received>>, body: String) -> StatusCode {
        r.requests.fetch_add(1, Ordering::SeqCst);
        match r.fail_with.load(Ordering::SeqCst) {
            0 => {
                r.bodies.lock().unwrap().push(serde_json::from_str(&body).unwrap());
                StatusCode::OK
            }
            s => StatusCode::from_u16(s).unwrap(),
        }
    }
    let received = Arc::new(Received::default());
    let router = axum::Router::new()
        .route("/hook", post(take))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (url, received)
}

/// The bodies received, each figure rounded to 12 places (the SQL's division may differ from
/// `a / b` in the last bit).
fn bodies(r: &Received) -> Vec<Value> {
    r.bodies.lock().unwrap().iter().cloned().map(rounded).collect()
}

fn rounded(mut body: Value) -> Value {
    if let Some(v) = body["laneledger"]["value"].as_f64() {
        body["laneledger"]["value"] = json!((v * 1e12).round() / 1e12);
    }
    body
}

/// `n` jobs from `from` with one free attempt that produced an artifact, started at `start`.
fn clean_jobs(from: usize, n: usize, start: &str) -> String {
    (from..from + n)
        .map(|i| {
            format!(
                r#"{{"job_id":"clean-{i}","idem_key":"ci-{i}","attempt_no":1,"lane":"free","started_at":"{start}","ended_at":"{start}","outcome":"ok","tokens_in":10,"tokens_out":5,"artifact_id":"ca-{i}","http_status":200}}"#
            ) + "\n"
        })
        .collect()
}

/// `n` jobs whose free attempt was ambiguous and whose paid attempt produced the artifact: each
/// a cross-lane retry, which the lane policy allows (an ambiguous outcome pins a job to paid).
fn cross_lane_jobs(n: usize, start: &str) -> String {
    (0..n)
        .map(|i| {
            format!(
                r#"{{"job_id":"cross-{i}","idem_key":"xi-{i}","attempt_no":1,"lane":"free","started_at":"{start}","ended_at":"{start}","outcome":"ambiguous","tokens_in":10,"tokens_out":0}}
{{"job_id":"cross-{i}","idem_key":"xi-{i}","attempt_no":2,"lane":"paid","started_at":"{start}","ended_at":"{start}","outcome":"ok","tokens_in":10,"tokens_out":5,"artifact_id":"xa-{i}","http_status":200}}
"#
            )
        })
        .collect()
}

fn ingest(ledger: &Ledger, ndjson: &str) {
    let s = ingest_reader(
        ledger,
        "test",
        std::io::Cursor::new(ndjson.to_string()),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    assert_eq!(s.problems, Vec::<String>::new());
}

/// Thursday of 2026-W47, and a start time in it.
const NOW: &str = "2026-11-19T12:00:00Z";
const START: &str = "2026-11-18T10:00:00Z";

fn now() -> i64 {
    parse_timestamp(NOW).unwrap()
}

fn hook(url: &str, alerts: AlertSelection) -> WebhookConfig {
    WebhookConfig {
        url: url.to_string(),
        site_url: Some("http://review.example.com:8080/".to_string()),
        alerts,
    }
}

fn quick() -> WebhookOptions {
    WebhookOptions {
        tries: 2,
        backoff: Duration::from_millis(10),
        connect_timeout: Duration::from_secs(2),
        total_timeout: Duration::from_secs(5),
        ..WebhookOptions::default()
    }
}

fn notifier(session: &Session, thresholds: Thresholds, url: &str) -> Notifier {
    Notifier::new(
        session.clone(),
        thresholds,
        &[hook(url, AlertSelection::All)],
        "http://127.0.0.1:8080",
        quick(),
    )
}

const LINK: &str = "http://review.example.com:8080/weeks/2026-W47#alert-cross_lane_retries_per_job";

/// The body posted for the cross-lane alert of 2026-W47.
fn cross_lane_body(red: bool, jobs: i64, value: f64, shown: &str, threshold: f64) -> Value {
    let (head, figure) = if red {
        ("Alert", format!("{shown}, above its threshold of {threshold}"))
    } else {
        ("Cleared", format!("{shown}, at or below its threshold of {threshold}"))
    };
    let detail = format!("6 of {jobs} jobs had attempts on both lanes");
    rounded(json!({
        "text": format!("{head}, week 2026-W47: cross-lane retries per job is {figure}. {detail}. <{LINK}|Open the week's review>"),
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": format!(
            "*{head}* · week 2026-W47\n*cross-lane retries per job*: {figure}\n{detail}\n<{LINK}|Open the week's review>"
        )}}],
        "laneledger": {
            "state": if red { "red" } else { "cleared" },
            "week": "2026-W47",
            "alert": "cross_lane_retries_per_job",
            "label": "cross-lane retries per job",
            "value": value,
            "threshold": threshold,
            "detail": detail,
            "url": LINK,
        },
    }))
}

#[tokio::test]
async fn a_card_turning_red_posts_once_and_clearing_posts_once_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let (url, received) = receiver().await;
    let ledger = Ledger::open(&path).unwrap();
    ingest(&ledger, &clean_jobs(0, 20, START));
    let session = Session::with_config(ledger.clone(), LaneConfig::default())
        .await
        .unwrap();
    let t = session.thresholds();

    // Clean traffic: every card passes, nothing is posted.
    assert_eq!(
        notifier(&session, t, &url).evaluate(now()).await.unwrap(),
        Evaluation::default()
    );
    assert_eq!(received.requests.load(Ordering::SeqCst), 0);

    // 6 of 26 jobs retried across lanes: 0.231 > 0.20, the one card that turns red.
    ingest(&ledger, &cross_lane_jobs(6, START));
    let n = notifier(&session, t, &url);
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation { sent: 1, pending: 0 });
    assert_eq!(bodies(&received), [cross_lane_body(true, 26, 6.0 / 26.0, "0.231", 0.2)]);
    // Still red: nothing more.
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation::default());

    // A restart: the file remembers what was posted.
    drop((n, session, ledger));
    let ledger = Ledger::open(&path).unwrap();
    let session = Session::with_config(ledger.clone(), LaneConfig::default())
        .await
        .unwrap();
    assert_eq!(
        notifier(&session, t, &url).evaluate(now()).await.unwrap(),
        Evaluation::default()
    );
    assert_eq!(received.requests.load(Ordering::SeqCst), 1);

    // 5 more clean jobs: 6 of 31, 0.194, clears it.
    ingest(&ledger, &clean_jobs(20, 5, START));
    let n = notifier(&session, t, &url);
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation { sent: 1, pending: 0 });
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation::default());
    assert_eq!(
        bodies(&received),
        [
            cross_lane_body(true, 26, 6.0 / 26.0, "0.231", 0.2),
            cross_lane_body(false, 31, 6.0 / 31.0, "0.194", 0.2),
        ]
    );

    // A week later the week is the previous one, still evaluated; two weeks later it is not.
    let later = now() + 7 * 86_400 * 1_000_000;
    assert_eq!(n.evaluate(later).await.unwrap(), Evaluation::default());
    assert_eq!(received.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_changed_threshold_clears_the_alert_and_only_named_alerts_are_posted() {
    let dir = tempfile::tempdir().unwrap();
    let (url, received) = receiver().await;
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    ingest(&ledger, &(clean_jobs(0, 20, START) + &cross_lane_jobs(6, START)));
    let session = Session::with_config(ledger, LaneConfig::default()).await.unwrap();
    let t = session.thresholds();
    assert_eq!(notifier(&session, t, &url).evaluate(now()).await.unwrap().sent, 1);

    // lane.yaml now says 0.5: the card is green again, and the webhook is told so.
    let raised = Thresholds {
        cross_lane_retries_per_job: 0.5,
        ..t
    };
    assert_eq!(notifier(&session, raised, &url).evaluate(now()).await.unwrap().sent, 1);
    assert_eq!(notifier(&session, raised, &url).evaluate(now()).await.unwrap().sent, 0);
    assert_eq!(
        bodies(&received),
        [
            cross_lane_body(true, 26, 6.0 / 26.0, "0.231", 0.2),
            cross_lane_body(false, 26, 6.0 / 26.0, "0.231", 0.5),
        ]
    );

    // A second webhook that asks only for the refusals alert gets nothing for this card.
    let (other_url, other) = receiver().await;
    let only = Notifier::new(
        session.clone(),
        t,
        &[hook(
            &other_url,
            AlertSelection::Only(vec!["refusals_per_100_attempts".into()]),
        )],
        "http://127.0.0.1:8080",
        quick(),
    );
    assert_eq!(only.evaluate(now()).await.unwrap(), Evaluation::default());
    assert_eq!(other.requests.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_failing_receiver_is_tried_again_at_the_next_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let (url, received) = receiver().await;
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    ingest(&ledger, &(clean_jobs(0, 20, START) + &cross_lane_jobs(6, START)));
    let session = Session::with_config(ledger, LaneConfig::default()).await.unwrap();
    let n = notifier(&session, session.thresholds(), &url);

    // 503 twice (2 tries), and the change stays to be posted.
    received.fail_with.store(503, Ordering::SeqCst);
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation { sent: 0, pending: 1 });
    assert_eq!(received.requests.load(Ordering::SeqCst), 2);
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation { sent: 0, pending: 1 });
    assert_eq!(received.requests.load(Ordering::SeqCst), 4);
    // It answers again: posted once.
    received.fail_with.store(0, Ordering::SeqCst);
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation { sent: 1, pending: 0 });
    assert_eq!(n.evaluate(now()).await.unwrap(), Evaluation::default());
    assert_eq!(received.requests.load(Ordering::SeqCst), 5);
    assert_eq!(bodies(&received), [cross_lane_body(true, 26, 6.0 / 26.0, "0.231", 0.2)]);

    // Nobody listening at all: refused at once, pending.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed_url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let dead = notifier(&session, session.thresholds(), &closed_url);
    assert_eq!(dead.evaluate(now()).await.unwrap(), Evaluation { sent: 0, pending: 1 });
}

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// A server state over a new ledger taking writes, with the webhook loop over it.
async fn serving(url: &str, dir: &tempfile::TempDir) -> (AppState, tokio::task::JoinHandle<()>) {
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    let session = Session::with_config(ledger.clone(), LaneConfig::default())
        .await
        .unwrap();
    let (writer, _thread) = Writer::spawn(ledger, 8).unwrap();
    let state = AppState::new(session.clone(), session.thresholds()).with_writer(
        writer,
        Auth {
            token: Some(Token::new(TOKEN).unwrap()),
            reads_need_token: false,
        },
    );
    let options = WebhookOptions {
        debounce: Duration::from_millis(100),
        total_timeout: Duration::from_secs(60),
        ..quick()
    };
    let task = Notifier::new(
        session.clone(),
        session.thresholds(),
        &[hook(url, AlertSelection::All)],
        "http://127.0.0.1:8080",
        options,
    )
    .spawn()
    .unwrap();
    (state, task)
}

async fn post_attempts(state: &AppState, ndjson: String) -> StatusCode {
    let request = Request::post("/v1/attempts")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(Body::from(ndjson))
        .unwrap();
    app(state.clone()).oneshot(request).await.unwrap().status()
}

/// A start time in the current ISO week of the system clock (the loop evaluates at it), and that
/// week's label.
fn this_week() -> (String, String) {
    let now = laneledger_store::now_micros();
    let week = laneledger_query::derived::audits::iso_week_of(now);
    // An hour ago, or the week's first second when the week is younger than that.
    let (y, w) = laneledger_query::review::metrics::parse_iso_week(&week).unwrap();
    let monday = chrono::NaiveDate::from_isoywd_opt(y, w, chrono::Weekday::Mon).unwrap();
    let monday = monday.and_hms_opt(0, 0, 1).unwrap().and_utc().timestamp_micros();
    let start = (now - 3_600_000_000).max(monday);
    (laneledger_store::format_timestamp(start), week)
}

async fn wait_for(what: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if what() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn serve_posts_once_after_the_write_that_turns_a_card_red() {
    let dir = tempfile::tempdir().unwrap();
    let (url, received) = receiver().await;
    let (state, task) = serving(&url, &dir).await;
    let (start, week) = this_week();
    assert_eq!(post_attempts(&state, clean_jobs(0, 20, &start)).await, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(received.requests.load(Ordering::SeqCst), 0);

    assert_eq!(post_attempts(&state, cross_lane_jobs(6, &start)).await, StatusCode::OK);
    assert!(wait_for(|| received.requests.load(Ordering::SeqCst) == 1).await);
    // Later evaluations (a write of nothing new, and the debounce's turns) post nothing more.
    assert_eq!(post_attempts(&state, clean_jobs(0, 1, &start)).await, StatusCode::OK);
    tokio::time::sleep(Duration::from_millis(600)).await;
    task.abort();
    let got = bodies(&received);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["laneledger"]["state"], "red");
    assert_eq!(got[0]["laneledger"]["week"], week.as_str());
    assert_eq!(got[0]["laneledger"]["alert"], "cross_lane_retries_per_job");
    assert_eq!(got[0]["laneledger"]["value"], json!((6e12_f64 / 26.0).round() / 1e12));
}

#[tokio::test]
async fn a_receiver_that_never_answers_does_not_hold_up_writes() {
    // Takes connections and never answers: each post waits for its 60 s limit.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", silent.local_addr().unwrap());
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = connections.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (state, task) = serving(&url, &dir).await;
    let (start, _) = this_week();
    assert_eq!(
        post_attempts(&state, clean_jobs(0, 20, &start) + &cross_lane_jobs(6, &start)).await,
        StatusCode::OK
    );
    // The post is under way and hangs...
    assert!(wait_for(|| connections.load(Ordering::SeqCst) == 1).await);
    // ...while writes are answered at once, and land.
    let t = Instant::now();
    assert_eq!(post_attempts(&state, clean_jobs(20, 3, &start)).await, StatusCode::OK);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(state.session.ledger().attempt_count().unwrap(), 35);
    task.abort();
}
