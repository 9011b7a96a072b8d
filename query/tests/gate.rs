//! Seed 003's dwell gate through SQL: the six sample rows, the injected failures, and the weekly
//! review of `gate_weekly` on sample-data/decisions-2026-W48.ndjson.
//!
//! The expected weekly figures were computed independently of this program (a one-off Python
//! transcription of seed 003's `decide_safe` and the three ratios over the sample file).

mod common;

use datafusion::arrow::array::{AsArray, RecordBatch};
use datafusion::arrow::datatypes::Float64Type;
use datafusion::assert_batches_sorted_eq;
use laneledger_query::review::gate_metrics::FREEZE_ACTION;
use laneledger_query::{AlertState, Error, GateThresholds, Session};
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_decisions_reader};

const SAMPLE: &str = "decisions-2026-W48.ndjson";

fn ingest_text(ledger: &Ledger, text: &str) -> laneledger_store::IngestReport {
    ingest_decisions_reader(ledger, "t", text.as_bytes(), InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap()
}

async fn session_with(text: &str) -> (tempfile::TempDir, Session) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("g.redb")).unwrap();
    let report = ingest_text(&ledger, text);
    assert_eq!(
        report.counters.rejected + report.counters.conflicts,
        0,
        "{:?}",
        report.problems
    );
    (dir, Session::new(ledger).await.unwrap())
}

async fn sample_session() -> (tempfile::TempDir, Session) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("g.redb")).unwrap();
    let path = common::sample(SAMPLE);
    let reader = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
    let report = ingest_decisions_reader(&ledger, SAMPLE, reader, InputFormat::Ndjson, DEFAULT_BATCH, |_| {}).unwrap();
    assert_eq!(
        report.counters.to_string(),
        "accepted 41, completed 0, duplicate deliveries 0, conflicts 0, rejected 0",
        "{:?}",
        report.problems
    );
    (dir, Session::new(ledger).await.unwrap())
}

/// One decision line, seed 003 `Job(queue_age_s, expected_service_s, retry_tax_s,
/// deadline_slack_s)` order, logged as `decision`.
fn line(job: &str, at: &str, job_fields: (f64, f64, f64, f64), decision: &str) -> String {
    let (q, s, t, slack) = job_fields;
    format!(
        r#"{{"job_id":"{job}","decided_at":"{at}","queue_age_s":{q},"expected_service_s":{s},"retry_tax_s":{t},"deadline_slack_s":{slack},"decision":"{decision}"}}"#
    )
}

/// seed 003 `'job=%s dwell=%.0f slack=%.0f decision=%s'` over the rows of a
/// `SELECT dwell_s, deadline_slack_s, expected_decision` answer.
fn seed_lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let dwell = b.column(0).as_primitive::<Float64Type>();
        let slack = b.column(1).as_primitive::<Float64Type>();
        let decision = b.column(2).as_string::<i32>();
        for row in 0..b.num_rows() {
            out.push(format!(
                "job={} dwell={:.0} slack={:.0} decision={}",
                out.len() + 1,
                dwell.value(row),
                slack.value(row),
                decision.value(row)
            ));
        }
    }
    out
}

#[tokio::test]
async fn the_six_seed_samples_read_back_from_sql_as_the_six_expected_lines() {
    // seed 003 `samples`, logged by a router that only ever answered `defer`: the expected
    // decision is recomputed, never taken from the log.
    let samples = [
        (12.0, 8.0, 8.0, 90.0),
        (41.0, 8.0, 8.0, 90.0),
        (20.0, 8.0, 8.0, 30.0),
        (20.0, 8.0, 0.0, 30.0),
        (10.0, 0.0, 8.0, 90.0),
        (10.0, 8.0, 8.0, -1.0),
    ];
    let text: String = samples
        .iter()
        .enumerate()
        .map(|(i, j)| line(&format!("seed-{}", i + 1), "2026-11-23T09:00:00Z", *j, "defer") + "\n")
        .collect();
    let (_d, s) = session_with(&text).await;
    let got = s
        .query("SELECT dwell_s, deadline_slack_s, expected_decision FROM gate_decision ORDER BY job_id")
        .await
        .unwrap();
    assert_eq!(
        seed_lines(&got.batches),
        [
            "job=1 dwell=28 slack=90 decision=admit_free",
            "job=2 dwell=57 slack=90 decision=defer",
            "job=3 dwell=36 slack=30 decision=reserved",
            "job=4 dwell=28 slack=30 decision=admit_free",
            "job=5 dwell=18 slack=90 decision=defer",
            "job=6 dwell=26 slack=-1 decision=defer",
        ]
    );
}

#[tokio::test]
async fn the_injected_stuck_attempt_and_a_zero_service_guess_give_defer() {
    let text = format!(
        "{}\n{}\n",
        line("stuck", "2026-11-23T09:00:00Z", (50.0, 8.0, 8.0, 40.0), "admit_free"),
        line("zero", "2026-11-23T09:00:01Z", (10.0, 0.0, 8.0, 90.0), "admit_free"),
    );
    let (_d, s) = session_with(&text).await;
    let got = s
        .query(
            "SELECT job_id, dwell_s, deadline_slack_s, decision, expected_decision, decision <> expected_decision AS mismatch
             FROM gate_decision",
        )
        .await
        .unwrap();
    assert_batches_sorted_eq!(
        [
            "+--------+---------+------------------+------------+-------------------+----------+",
            "| job_id | dwell_s | deadline_slack_s | decision   | expected_decision | mismatch |",
            "+--------+---------+------------------+------------+-------------------+----------+",
            "| stuck  | 66.0    | 40.0             | admit_free | defer             | true     |",
            "| zero   | 18.0    | 90.0             | admit_free | defer             | true     |",
            "+--------+---------+------------------+------------+-------------------+----------+",
        ],
        &got.batches
    );
}

#[tokio::test]
async fn gate_decision_columns_defaults_and_decision_conflicts() {
    let first = r#"{"job_id":"j1","decided_at":"2026-11-23T09:00:00Z","queue_age_s":41,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"max_queue_age_s":45,"decision":"admit_free","router":"r1"}"#;
    let ended = r#"{"job_id":"j1","decided_at":"2026-11-23T10:00:00+01:00","queue_age_s":41,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"max_queue_age_s":45,"decision":"admit_free","slack_miss":true,"retry_count":2}"#;
    let other = line("j2", "2026-11-23T09:00:05Z", (41.0, 8.0, 8.0, 90.0), "defer");
    let changed = other.replace("\"defer\"", "\"reserved\"");
    let (_d, s) = session_with(&format!("{first}\n{ended}\n{other}\n")).await;
    assert_eq!(ingest_text(s.ledger(), &changed).counters.conflicts, 1);
    let names: Vec<String> = s
        .query("SELECT * FROM gate_decision")
        .await
        .unwrap()
        .schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    assert_eq!(
        names,
        [
            "job_id",
            "decided_at",
            "queue_age_s",
            "expected_service_s",
            "retry_tax_s",
            "deadline_slack_s",
            "max_queue_age_s",
            "decision",
            "retry_count",
            "slack_miss",
            "reserved_service_s",
            "dwell_s",
            "expected_decision",
            "attrs",
            "ingested_at"
        ]
    );
    let got = s
        .query(
            "SELECT job_id, decided_at, max_queue_age_s, decision, retry_count, slack_miss, reserved_service_s,
                    expected_decision, attrs
             FROM gate_decision",
        )
        .await
        .unwrap();
    assert_batches_sorted_eq!(
        [
            "+--------+----------------------+-----------------+------------+-------------+------------+--------------------+-------------------+-----------------+",
            "| job_id | decided_at           | max_queue_age_s | decision   | retry_count | slack_miss | reserved_service_s | expected_decision | attrs           |",
            "+--------+----------------------+-----------------+------------+-------------+------------+--------------------+-------------------+-----------------+",
            "| j1     | 2026-11-23T09:00:00Z | 45.0            | admit_free | 2           | true       | 8.0                | admit_free        | {\"router\":\"r1\"} |",
            "| j2     | 2026-11-23T09:00:05Z | 30.0            | defer      | 0           |            | 8.0                | defer             |                 |",
            "+--------+----------------------+-----------------+------------+-------------+------------+--------------------+-------------------+-----------------+",
        ],
        &got.batches
    );
    let got = s
        .query("SELECT conflict_no, line, job_id, decided_at, fields FROM decision_conflict")
        .await
        .unwrap();
    assert_batches_sorted_eq!(
        [
            "+-------------+------+--------+----------------------+----------+",
            "| conflict_no | line | job_id | decided_at           | fields   |",
            "+-------------+------+--------+----------------------+----------+",
            "| 1           | 1    | j2     | 2026-11-23T09:00:05Z | decision |",
            "+-------------+------+--------+----------------------+----------+",
        ],
        &got.batches
    );
}

struct TestCase {
    query: &'static str,
    expected: &'static [&'static str],
}

#[tokio::test]
async fn gate_weekly_on_the_sample_week() {
    let (_d, s) = sample_session().await;
    let cases = [
        TestCase {
            query: "SELECT iso_week, week_start, decisions, admit_free, defer, reserved FROM gate_weekly",
            expected: &[
                "+----------+----------------------+-----------+------------+-------+----------+",
                "| iso_week | week_start           | decisions | admit_free | defer | reserved |",
                "+----------+----------------------+-----------+------------+-------+----------+",
                "| 2026-W48 | 2026-11-23T00:00:00Z | 41        | 20         | 12    | 9        |",
                "+----------+----------------------+-----------+------------+-------+----------+",
            ],
        },
        TestCase {
            query: "SELECT free_admit_misses, free_admit_miss_rate, defers_that_fit_reserved,
                           defers_that_fit_reserved_rate, reserved_that_fit_free, reserved_that_fit_free_rate,
                           decision_mismatches
                    FROM gate_weekly",
            expected: &[
                "+-------------------+----------------------+--------------------------+-------------------------------+------------------------+-----------------------------+---------------------+",
                "| free_admit_misses | free_admit_miss_rate | defers_that_fit_reserved | defers_that_fit_reserved_rate | reserved_that_fit_free | reserved_that_fit_free_rate | decision_mismatches |",
                "+-------------------+----------------------+--------------------------+-------------------------------+------------------------+-----------------------------+---------------------+",
                "| 4                 | 0.2                  | 6                        | 0.5                           | 6                      | 0.6666666666666666          | 4                   |",
                "+-------------------+----------------------+--------------------------+-------------------------------+------------------------+-----------------------------+---------------------+",
            ],
        },
        TestCase {
            // Every branch of seed 003 `decide_safe` occurs in the sample.
            query: "SELECT expected_decision, COUNT(*) AS n FROM gate_decision GROUP BY expected_decision",
            expected: &[
                "+-------------------+----+",
                "| expected_decision | n  |",
                "+-------------------+----+",
                "| admit_free        | 18 |",
                "| defer             | 14 |",
                "| reserved          | 9  |",
                "+-------------------+----+",
            ],
        },
        TestCase {
            query: "SELECT job_id, decision, expected_decision FROM gate_decision WHERE decision <> expected_decision",
            expected: &[
                "+----------------+------------+-------------------+",
                "| job_id         | decision   | expected_decision |",
                "+----------------+------------+-------------------+",
                "| pin-job-000031 | admit_free | defer             |",
                "| pin-job-000097 | admit_free | defer             |",
                "| pin-job-000101 | admit_free | reserved          |",
                "| pin-job-000105 | reserved   | admit_free        |",
                "+----------------+------------+-------------------+",
            ],
        },
        TestCase {
            // Every decision is for a job of the pin drill, a few seconds before an attempt.
            query: "SELECT COUNT(DISTINCT job_id) AS jobs, COUNT(*) AS n, MIN(decided_at) AS first,
                           MAX(decided_at) AS last
                    FROM gate_decision",
            expected: &[
                "+------+----+--------------------------+--------------------------+",
                "| jobs | n  | first                    | last                     |",
                "+------+----+--------------------------+--------------------------+",
                "| 40   | 41 | 2026-11-23T01:12:56.252Z | 2026-11-25T20:24:30.764Z |",
                "+------+----+--------------------------+--------------------------+",
            ],
        },
    ];
    for case in cases {
        let got = s.query(case.query).await.unwrap();
        assert_batches_sorted_eq!(case.expected, &got.batches);
    }
}

#[tokio::test]
async fn the_sample_week_freezes_the_gate_above_one_percent() {
    let (_d, s) = sample_session().await;
    let weeks = s.gate_weeks().await.unwrap();
    assert_eq!(weeks.len(), 1);
    let w = &weeks[0];
    assert_eq!(
        (w.iso_week.as_str(), w.week_start.as_str()),
        ("2026-W48", "2026-11-23T00:00:00Z")
    );
    assert_eq!((w.decisions, w.admit_free, w.defer, w.reserved), (41, 20, 12, 9));
    assert_eq!((w.free_admit_misses, w.free_admit_miss_rate), (4, Some(0.2)));
    assert_eq!(
        (w.defers_that_fit_reserved, w.defers_that_fit_reserved_rate),
        (6, Some(0.5))
    );
    assert_eq!(w.reserved_that_fit_free, 6);
    assert_eq!(w.reserved_that_fit_free_rate, Some(6.0 / 9.0));
    assert_eq!(w.decision_mismatches, 4);

    let review = s.gate_review(None, &GateThresholds::default()).await.unwrap();
    assert_eq!(review.week, *w);
    assert_eq!(review.previous, None);
    assert_eq!(review.alert.metric, "free_admit_miss_rate");
    assert_eq!((review.alert.threshold, review.alert.state), (0.01, AlertState::Alert));
    assert_eq!(review.action, Some(FREEZE_ACTION));
    assert_eq!(FREEZE_ACTION, "freeze dwell_gate_enabled");
    assert!(
        review.to_text().contains("action: freeze dwell_gate_enabled"),
        "{}",
        review.to_text()
    );

    let loose = GateThresholds {
        free_admit_miss_rate: 0.25,
    };
    let review = s.gate_review(Some("2026-W48"), &loose).await.unwrap();
    assert_eq!((review.alert.state, review.action), (AlertState::Pass, None));
}

#[tokio::test]
async fn ratios_without_a_denominator_are_null_and_unknown_weeks_are_errors() {
    // One week of defers only (no free admit, no reserved shift), and an earlier week.
    let text = format!(
        "{}\n{}\n",
        line("a", "2026-11-17T09:00:00Z", (12.0, 8.0, 8.0, 90.0), "admit_free"),
        line("b", "2026-11-23T09:00:00Z", (41.0, 8.0, 8.0, 90.0), "defer"),
    );
    let (_d, s) = session_with(&text).await;
    let got = s
        .query(
            "SELECT iso_week, admit_free, free_admit_miss_rate, defers_that_fit_reserved_rate, reserved_that_fit_free_rate
             FROM gate_weekly",
        )
        .await
        .unwrap();
    assert_batches_sorted_eq!(
        [
            "+----------+------------+----------------------+-------------------------------+-----------------------------+",
            "| iso_week | admit_free | free_admit_miss_rate | defers_that_fit_reserved_rate | reserved_that_fit_free_rate |",
            "+----------+------------+----------------------+-------------------------------+-----------------------------+",
            "| 2026-W47 | 1          | 0.0                  |                               |                             |",
            "| 2026-W48 | 0          |                      | 1.0                           |                             |",
            "+----------+------------+----------------------+-------------------------------+-----------------------------+",
        ],
        &got.batches
    );
    let t = GateThresholds::default();
    let latest = s.gate_review(None, &t).await.unwrap();
    assert_eq!(latest.week.iso_week, "2026-W48");
    assert_eq!(latest.previous.as_ref().map(|p| p.iso_week.as_str()), Some("2026-W47"));
    assert_eq!((latest.alert.state, latest.action), (AlertState::NoData, None));
    assert!(matches!(
        s.gate_review(Some("2026-W01"), &t).await,
        Err(Error::UnknownWeek(_))
    ));
    assert!(matches!(s.gate_review(Some("W48"), &t).await, Err(Error::BadWeek(_))));

    let empty = tempfile::tempdir().unwrap();
    let s2 = Session::new(Ledger::open(empty.path().join("e.redb")).unwrap())
        .await
        .unwrap();
    assert!(s2.gate_weeks().await.unwrap().is_empty());
    assert!(matches!(s2.gate_review(None, &t).await, Err(Error::UnknownWeek(_))));
}
