//! Cost and latency of a week (issue 31): spend from lane.yaml prices and routers' own costs,
//! latency percentiles and the time to first token, on ledgers made to show each case.

use laneledger_query::{Section, Session};
use laneledger_store::ingest::mapping::source::SourceReader;
use laneledger_store::ingest::mapping::{InputShape, Mapping, ingest_mapped};
use laneledger_store::{DEFAULT_BATCH, LaneConfig, Ledger};

mod common;

/// Monday 2026-11-23 00:00:00 UTC (ISO week 2026-W48), µs.
const MONDAY: i64 = 1_795_392_000_000_000;
const WEEK: &str = "2026-W48";

/// A time `ms` milliseconds after the fixture's Monday, RFC 3339.
fn t(ms: i64) -> String {
    laneledger_store::format_timestamp(MONDAY + ms * 1_000)
}

/// One attempt line: job, attempt_no, idem key, lane, model, start and end (ms after Monday;
/// no end when `None`), tokens in and out, and extra JSON members.
#[allow(clippy::too_many_arguments)]
fn at(
    job: &str,
    no: u32,
    key: &str,
    lane: &str,
    model: &str,
    start_ms: i64,
    end_ms: Option<i64>,
    tokens: (i64, i64),
    extra: &str,
) -> String {
    let end = end_ms.map_or(String::new(), |e| format!(r#","ended_at":"{}""#, t(e)));
    format!(
        r#"{{"job_id":"{job}","idem_key":"{key}","attempt_no":{no},"lane":"{lane}","model":"{model}","started_at":"{}"{end},"tokens_in":{},"tokens_out":{}{extra}}}"#,
        t(start_ms),
        tokens.0,
        tokens.1
    )
}

async fn session(lines: &[String], config: &str) -> (tempfile::TempDir, Session) {
    let (dir, ledger) = common::ledger_of_lines(lines);
    let config = LaneConfig::from_yaml_str(config, "lane.yaml").unwrap();
    (dir, Session::with_config(ledger, config).await.unwrap())
}

fn section<'a>(sections: &'a [Section], id: &str) -> &'a Section {
    sections
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no section {id}"))
}

fn rows(s: &Section) -> Vec<Vec<String>> {
    s.rows
        .iter()
        .map(|r| r.iter().map(|c| c.clone().unwrap_or_else(|| "—".into())).collect())
        .collect()
}

const PRICES: &str = "\
prices:
  currency: USD
  models:
    big: {input_per_million: 10, output_per_million: 30}
  lanes:
    paid: {input_per_million: 1, output_per_million: 2}
";

/// Five attempts: a free one no price covers, a `big` one at its model's price, two `small` ones
/// at the paid lane's price (the second returned a duplicate artifact of the same key), and a
/// `big` one whose router reported its cost.
fn priced_week() -> Vec<String> {
    vec![
        at(
            "j1",
            1,
            "k1",
            "free",
            "small",
            0,
            Some(1_000),
            (1_000, 0),
            r#","outcome":"retryable""#,
        ),
        at(
            "j1",
            2,
            "k1",
            "paid",
            "big",
            2_000,
            Some(3_000),
            (100_000, 10_000),
            r#","outcome":"ok","artifact_id":"a1""#,
        ),
        at(
            "j2",
            1,
            "k2",
            "paid",
            "small",
            0,
            Some(100_000),
            (200_000, 50_000),
            r#","outcome":"ok","artifact_id":"a2""#,
        ),
        at(
            "j3",
            1,
            "k2",
            "paid",
            "small",
            0,
            Some(200_000),
            (100_000, 100_000),
            r#","outcome":"ok","artifact_id":"a3""#,
        ),
        at(
            "j4",
            1,
            "k4",
            "paid",
            "big",
            0,
            Some(4_000),
            (1_000_000, 1_000_000),
            r#","outcome":"ok","artifact_id":"a4","response_cost":0.25"#,
        ),
    ]
}

/// The cells after `name` on the review text's row of that name.
fn text_row(text: &str, name: &str) -> Vec<String> {
    let line = text
        .lines()
        .find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with("  ")))
        .unwrap_or_else(|| panic!("no row {name}"));
    line[name.len()..].split_whitespace().map(String::from).collect()
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

#[tokio::test]
async fn spend_from_prices_and_router_costs_with_unpriced_attempts_counted() {
    let (_d, s) = session(&priced_week(), PRICES).await;
    let review = s.review(Some(WEEK), &s.thresholds()).await.unwrap();
    let spend = review.week.spend.clone().unwrap();
    // j1#2: (100,000 × 10 + 10,000 × 30) / 1e6 = 1.3; j2: (200,000 × 1 + 50,000 × 2) / 1e6 = 0.3;
    // j3: (100,000 + 200,000) / 1e6 = 0.3; j4: the router's 0.25, not the table's 40.
    assert!(close(spend.spend, 2.15), "{spend:?}");
    // Three keys with an artifact (k1, k2, k4).
    assert!(close(spend.spend_per_accepted_artifact, 2.15 / 3.0), "{spend:?}");
    // k2's second artifact (a3, landed 100 s after a2) is the duplicate: j3's 0.3.
    assert!(close(spend.duplicate_artifact_spend, 0.3), "{spend:?}");
    assert_eq!(
        (
            spend.attempts,
            spend.router_priced_attempts,
            spend.table_priced_attempts,
            spend.unpriced_attempts
        ),
        (5, 1, 3, 1)
    );
    assert_eq!(spend.currency.as_deref(), Some("USD"));
    assert_eq!(spend.money(spend.spend), "2.1500 USD");

    let text = review.to_text();
    assert_eq!(text_row(&text, "spend"), ["2.1500", "USD", "—"], "{text}");
    assert_eq!(
        text_row(&text, "spend per accepted artifact"),
        ["0.7167", "USD", "—"],
        "{text}"
    );
    assert_eq!(
        text_row(&text, "spend of duplicate artifacts"),
        ["0.3000", "USD", "—"],
        "{text}"
    );
    assert!(
        text.contains("(spend of 5 attempts: 1 priced by their router, 3 by lane.yaml prices, 1 unpriced)"),
        "{text}"
    );
    let doc = serde_json::to_value(&review.week).unwrap();
    assert_eq!(doc["spend"]["unpriced_attempts"], 1);
    assert_eq!(doc["spend"]["router_priced_attempts"], 1);

    let sections = s.audit_sections(WEEK).await.unwrap();
    let by_model = section(&sections, "spend_by_lane_model");
    assert_eq!(
        rows(by_model),
        vec![
            vec!["free", "small", "1", "1,000", "0", "0", "0", "1", "unpriced"],
            vec![
                "paid",
                "big",
                "2",
                "1,100,000",
                "1,010,000",
                "1",
                "1",
                "0",
                "1.5500 USD"
            ],
            vec!["paid", "small", "2", "300,000", "150,000", "0", "2", "0", "0.6000 USD"],
        ]
    );
}

#[tokio::test]
async fn without_prices_only_router_costs_count_and_nothing_is_guessed() {
    // The same week with no prices: only j4's router cost is spend; the others are unpriced.
    let (_d, s) = session(&priced_week(), "").await;
    let spend = s.week_cost(WEEK).await.unwrap().spend;
    assert!(close(spend.spend, 0.25), "{spend:?}");
    assert!(close(spend.duplicate_artifact_spend, 0.0), "{spend:?}");
    assert_eq!((spend.router_priced_attempts, spend.unpriced_attempts), (1, 4));
    assert_eq!(spend.currency, None);
    assert_eq!(spend.money(spend.spend), "0.2500");

    // No router cost either: no spend at all, every attempt unpriced, no free lane taken as 0.
    let lines: Vec<String> = priced_week().into_iter().take(4).collect();
    let (_d, s) = session(&lines, "").await;
    let review = s.review(Some(WEEK), &s.thresholds()).await.unwrap();
    let spend = review.week.spend.clone().unwrap();
    assert_eq!(
        (
            spend.spend,
            spend.spend_per_accepted_artifact,
            spend.duplicate_artifact_spend
        ),
        (None, None, None)
    );
    assert_eq!(spend.unpriced_attempts, 4);
    let text = review.to_text();
    assert_eq!(text_row(&text, "spend"), ["—", "—"], "{text}");
}

#[tokio::test]
async fn latency_percentiles_leave_out_impossible_times_and_count_them() {
    let ok = r#","outcome":"ok""#;
    let lines = vec![
        // paid/big: 1, 2, 3 and 4 s; one that ended 5 s before it started; one still open.
        at("p1", 1, "kp1", "paid", "big", 0, Some(1_000), (1, 1), ok),
        at("p2", 1, "kp2", "paid", "big", 0, Some(2_000), (1, 1), ok),
        at("p3", 1, "kp3", "paid", "big", 0, Some(3_000), (1, 1), ok),
        at("p4", 1, "kp4", "paid", "big", 0, Some(4_000), (1, 1), ok),
        at("p5", 1, "kp5", "paid", "big", 10_000, Some(5_000), (1, 1), ok),
        at("p6", 1, "kp6", "paid", "big", 0, None, (1, 1), ""),
        // free/small: one of 10.5 s.
        at("f1", 1, "kf1", "free", "small", 0, Some(10_500), (1, 1), ok),
    ];
    let (_d, s) = session(&lines, "").await;
    let cost = s.week_cost(WEEK).await.unwrap();
    assert_eq!(
        rows(&cost.latency_section),
        vec![
            vec![
                "free", "small", "1", "1", "0", "0", "10.500", "10.500", "10.500", "0", "not sent", "not sent"
            ],
            // p50 = 2 + 0.5 × 1; p95 = 3 + 0.85 × 1; p99 = 3 + 0.97 × 1.
            vec![
                "paid", "big", "6", "4", "1", "1", "2.500", "3.850", "3.970", "0", "not sent", "not sent"
            ],
        ]
    );
    // Clean data: nothing left out.
    let (_d, s) = session(&lines[..4], "").await;
    let cost = s.week_cost(WEEK).await.unwrap();
    assert_eq!(
        rows(&cost.latency_section),
        vec![vec![
            "paid", "big", "4", "4", "0", "0", "2.500", "3.850", "3.970", "0", "not sent", "not sent"
        ]]
    );
}

/// A LiteLLM StandardLoggingPayload, as its generic API logger sends it (the fields the mapping
/// reads), `start_s` seconds after Monday.
fn litellm(id: &str, start_s: f64, first_token_s: f64, end_s: f64, stream: &str, cost: f64) -> String {
    let epoch = |s: f64| MONDAY as f64 / 1e6 + s;
    format!(
        r#"{{"id":"{id}","litellm_call_id":"{id}","trace_id":"trace-{id}","call_type":"acompletion","stream":{stream},"status":"success","startTime":{},"endTime":{},"completionStartTime":{},"model":"gpt-4o-mini","model_group":"paid","model_id":"dep-1","prompt_tokens":1000,"completion_tokens":100,"response_cost":{cost},"metadata":{{"spend_logs_metadata":{{"idempotency_key":"idem-{id}"}}}},"response":{{"id":"chatcmpl-{id}"}}}}"#,
        epoch(start_s),
        epoch(end_s),
        epoch(first_token_s)
    )
}

#[tokio::test]
async fn time_to_first_token_from_a_mapped_litellm_record() {
    // One streamed call (first token 0.25 s in), one not streamed (LiteLLM logs its end time as
    // the first token's: not a time to first token, and left out).
    let text = [
        litellm("s1", 10.0, 10.25, 12.0, "true", 0.0125),
        litellm("n1", 20.0, 23.0, 23.0, "null", 0.0075),
    ]
    .join("\n");
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    let mapping = Mapping::resolve("litellm").unwrap();
    let reader = SourceReader::new("litellm.ndjson", text.as_bytes(), InputShape::Json);
    let report = ingest_mapped(&ledger, &mapping, "litellm.ndjson", reader, DEFAULT_BATCH, |_| {}).unwrap();
    assert_eq!(report.ingest.counters.accepted, 2, "{:?}", report.ingest.problems);
    // A price for the model, which the routers' costs beat.
    let config = LaneConfig::from_yaml_str(
        "prices:\n  models:\n    gpt-4o-mini: {input_per_million: 100, output_per_million: 100}\n",
        "lane.yaml",
    )
    .unwrap();
    let s = Session::with_config(ledger, config).await.unwrap();
    let got = s
        .query("SELECT job_id, attrs FROM job_attempt ORDER BY job_id")
        .await
        .unwrap();
    let attrs = datafusion::arrow::util::pretty::pretty_format_batches(&got.batches)
        .unwrap()
        .to_string();
    assert!(
        attrs.contains(r#""first_token_at":"2026-11-23T00:00:10.250000Z""#),
        "{attrs}"
    );
    assert_eq!(attrs.matches("first_token_at").count(), 1, "{attrs}");

    let cost = s.week_cost(WEEK).await.unwrap();
    assert_eq!(
        rows(&cost.latency_section),
        vec![vec![
            "paid",
            "gpt-4o-mini",
            "2",
            "2",
            "0",
            "0",
            "2.500",
            "2.950",
            "2.990",
            "1",
            "0.250",
            "0.250"
        ]]
    );
    assert!(close(cost.spend.spend, 0.02), "{:?}", cost.spend);
    assert_eq!(
        (cost.spend.router_priced_attempts, cost.spend.table_priced_attempts),
        (2, 0)
    );
}

#[tokio::test]
async fn duplicate_artifacts_are_all_but_the_first_to_land() {
    // Each attempt costs its tokens_in at 1 per million on the paid lane: 1 µ-unit a token, so
    // the duplicates' sum names them. k1: "z" landed first (its larger id does not matter), "a"
    // later: a's two attempts (2 + 4) are duplicates. k2: "b" is open, "c" landed: b (8) is the
    // duplicate. k3: both open: the smaller id, "d", is first: e (16). k4: one artifact, twice
    // (once open): no duplicate. k5: no artifact.
    let ok = |a: &str| format!(r#","outcome":"ok","artifact_id":"{a}""#);
    let lines = vec![
        at("j1", 1, "k1", "paid", "m", 0, Some(1_000), (1, 0), &ok("z")),
        at("j2", 1, "k1", "paid", "m", 0, Some(2_000), (2, 0), &ok("a")),
        at("j3", 1, "k1", "paid", "m", 0, Some(3_000), (4, 0), &ok("a")),
        at("j4", 1, "k2", "paid", "m", 0, None, (8, 0), &ok("b")),
        at("j5", 1, "k2", "paid", "m", 0, Some(9_000), (32, 0), &ok("c")),
        at("j6", 1, "k3", "paid", "m", 0, None, (16, 0), &ok("e")),
        at("j7", 1, "k3", "paid", "m", 0, None, (64, 0), &ok("d")),
        at("j8", 1, "k4", "paid", "m", 0, None, (128, 0), &ok("f")),
        at("j9", 1, "k4", "paid", "m", 0, Some(5_000), (256, 0), &ok("f")),
        at(
            "j10",
            1,
            "k5",
            "paid",
            "m",
            0,
            Some(5_000),
            (512, 0),
            r#","outcome":"retryable""#,
        ),
    ];
    let (_d, s) = session(
        &lines,
        "prices:\n  lanes:\n    paid: {input_per_million: 1, output_per_million: 0}\n",
    )
    .await;
    let spend = s.week_cost(WEEK).await.unwrap().spend;
    assert_eq!(spend.attempts, 10);
    assert!(close(spend.spend, 1023.0 / 1e6), "{spend:?}");
    assert!(close(spend.duplicate_artifact_spend, 30.0 / 1e6), "{spend:?}");
    // Four keys with an artifact.
    assert!(
        close(spend.spend_per_accepted_artifact, 1023.0 / 1e6 / 4.0),
        "{spend:?}"
    );
}
