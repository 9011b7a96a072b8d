//! Table-driven SQL on the sample data: each case is a query and its exact rows.

mod common;

use datafusion::assert_batches_sorted_eq;
use laneledger_query::{Error, OutputFormat, Session, Thresholds, format_result};

struct TestCase {
    query: &'static str,
    expected: &'static [&'static str],
}

async fn session(files: &[&str]) -> (tempfile::TempDir, Session) {
    let (dir, ledger) = common::ledger_from(files);
    (dir, Session::new(ledger).await.unwrap())
}

const DRILLS: [&str; 2] = ["drill-nopin-2026-W47.ndjson", "drill-pin-2026-W48.ndjson"];

#[tokio::test]
async fn sql_cases_on_the_two_drills() {
    let (_d, s) = session(&DRILLS).await;
    let cases = [
        TestCase {
            query: "SELECT iso_week, jobs, free_attempts, paid_attempts, total_tokens, unique_accepted_artifacts,
                           duplicate_artifacts, cross_lane_jobs FROM weekly_metrics",
            expected: &[
                "+----------+------+---------------+---------------+--------------+---------------------------+---------------------+-----------------+",
                "| iso_week | jobs | free_attempts | paid_attempts | total_tokens | unique_accepted_artifacts | duplicate_artifacts | cross_lane_jobs |",
                "+----------+------+---------------+---------------+--------------+---------------------------+---------------------+-----------------+",
                "| 2026-W47 | 300  | 410           | 5             | 334000       | 300                       | 21                  | 5               |",
                "| 2026-W48 | 300  | 378           | 44            | 355200       | 300                       | 0                   | 44              |",
                "+----------+------+---------------+---------------+--------------+---------------------------+---------------------+-----------------+",
            ],
        },
        TestCase {
            query: "SELECT lane, outcome, COUNT(*) AS n FROM job_attempt WHERE job_id LIKE 'pin-%' GROUP BY lane, outcome",
            expected: &[
                "+------+-----------+-----+",
                "| lane | outcome   | n   |",
                "+------+-----------+-----+",
                "| free | ambiguous | 19  |",
                "| free | ok        | 256 |",
                "| free | permanent | 5   |",
                "| free | retryable | 98  |",
                "| paid | ok        | 44  |",
                "+------+-----------+-----+",
            ],
        },
        TestCase {
            query: "SELECT error_kind, COUNT(*) AS n FROM job_attempt GROUP BY error_kind",
            expected: &[
                "+------------+-----+",
                "| error_kind | n   |",
                "+------------+-----+",
                "| ok         | 600 |",
                "| request    | 10  |",
                "| transient  | 227 |",
                "+------------+-----+",
            ],
        },
        TestCase {
            query: "SELECT * FROM job_rollup WHERE job_id = 'pin-job-000001'",
            expected: &[
                "+----------------+-----------------+---------------+---------------+--------+-----------+",
                "| job_id         | idem_key        | free_attempts | paid_attempts | tokens | artifacts |",
                "+----------------+-----------------+---------------+---------------+--------+-----------+",
                "| pin-job-000001 | pin-idem-000001 | 1             | 1             | 2000   | 1         |",
                "+----------------+-----------------+---------------+---------------+--------+-----------+",
            ],
        },
        TestCase {
            query: "SELECT COUNT(*) AS n FROM attempt_conflict UNION ALL SELECT COUNT(*) FROM ingest_reject",
            expected: &["+---+", "| n |", "+---+", "| 0 |", "| 0 |", "+---+"],
        },
        TestCase {
            query: "SELECT COUNT(DISTINCT idem_key) AS keys, COUNT(*) AS rows FROM duplicate_artifact",
            expected: &[
                "+------+------+",
                "| keys | rows |",
                "+------+------+",
                "| 21   | 42   |",
                "+------+------+",
            ],
        },
    ];
    for case in cases {
        let got = s.query(case.query).await.unwrap();
        assert_batches_sorted_eq!(case.expected, &got.batches);
    }
}

/// Issue 2 item 6: reviewing the two 300-job files reproduces seed 000's drill table.
#[tokio::test]
async fn the_sample_drills_reproduce_seed_000s_drill_table() {
    let (_d, s) = session(&DRILLS).await;
    let t = Thresholds::default();
    let nopin = s.review(Some("2026-W47"), &t).await.unwrap();
    let pin = s.review(None, &t).await.unwrap();
    assert_eq!(pin.week.iso_week, "2026-W48");
    assert_eq!(pin.previous.as_ref().unwrap().iso_week, "2026-W47");

    let (n, p) = (&nopin.week, &pin.week);
    assert_eq!((n.unique_accepted_artifacts, p.unique_accepted_artifacts), (300, 300));
    assert_eq!(p.duplicate_artifacts, 0);
    // Seed: 15. One ambiguous first call in 20 over 300 jobs: 15 ± 3.8 (one standard deviation).
    assert_eq!(n.duplicate_artifacts, 21);
    // Seed: 375 free, 46 paid for pin.
    assert_eq!((p.free_attempts, p.paid_attempts), (378, 44));
    assert_eq!((n.free_attempts, n.paid_attempts), (410, 5));
    // Seed: 1,184 (pin) and 1,120 (no pin), within 5%.
    assert_eq!(p.tokens_per_accepted_artifact, Some(1184.0));
    let np = n.tokens_per_accepted_artifact.unwrap();
    assert!((np / 1120.0 - 1.0).abs() < 0.05, "{np}");
    assert_eq!(format!("{np:.1}"), "1113.3");
    // Seed: 0.15 (pin), 0.02 (no pin).
    assert_eq!(format!("{:.3}", p.cross_lane_retries_per_job.unwrap()), "0.147");
    assert_eq!(format!("{:.3}", n.cross_lane_retries_per_job.unwrap()), "0.017");
    // Alerts: no pin has 7 duplicates per 100 jobs (> 1: alert), 36 of 300 jobs on the wrong
    // lane, 7 duplicates past the reconcile window and 2 pool overload episodes; pin passes all.
    let states = |r: &laneledger_query::WeekReview| {
        r.alerts
            .iter()
            .map(|a| (a.metric, a.state.as_str()))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        states(&nopin),
        [
            ("cross_lane_retries_per_job", "pass"),
            ("duplicate_artifacts_per_100_jobs", "alert"),
            ("lane_policy_violations_per_100_jobs", "alert"),
            ("late_duplicates_per_100_jobs", "alert"),
            ("refusals_per_100_attempts", "pass"),
            ("same_key_retries_per_100_refusals", "pass"),
            ("key_rest_violations_per_100_keyed_attempts", "pass"),
            ("pool_overload_episodes_per_week", "alert"),
            ("jobs_past_attempt_bound_per_100_jobs", "pass"),
            ("outcome_mismatches_per_100_refusals", "pass"),
            ("data_quality_findings_per_100_attempts", "pass"),
        ]
    );
    let values: Vec<Option<f64>> = nopin.alerts.iter().map(|a| a.value).collect();
    assert_eq!(values[2], Some(12.0));
    assert_eq!(format!("{:.4}", values[3].unwrap()), "2.3333");
    assert_eq!(values[7], Some(2.0));
    assert!(
        pin.alerts.iter().all(|a| a.state.as_str() == "pass"),
        "{:?}",
        pin.alerts
    );
    assert_eq!(pin.alerts.len(), 11);
    assert_eq!(n.duplicate_artifacts_per_100_jobs, Some(7.0));
}

#[tokio::test]
async fn the_trace_week_is_iso_week_2023_w46() {
    let (_d, s) = session(&["trace-code-2023-11-16.ndjson", "trace-conv-2023-11-16.ndjson"]).await;
    let weeks = s.weeks().await.unwrap();
    assert_eq!(weeks.len(), 1);
    assert_eq!(weeks[0].iso_week, "2023-W46");
    assert_eq!(weeks[0].week_start, "2023-11-13T00:00:00Z");
    assert_eq!(weeks[0].jobs, 8819 + 19366);
    assert_eq!(weeks[0].unique_accepted_artifacts, 8819 + 19366);
    assert_eq!(weeks[0].duplicate_artifacts, 0);
}

#[tokio::test]
async fn user_sql_is_read_only() {
    let (_d, s) = session(&["drill-pin-2026-W48.ndjson"]).await;
    for sql in [
        "CREATE TABLE t (a INT)",
        "CREATE VIEW v AS SELECT 1",
        "DROP VIEW job_rollup",
        "INSERT INTO job_attempt SELECT * FROM job_attempt",
        "DELETE FROM job_attempt",
        "COPY job_attempt TO '/tmp/out.csv'",
        "SET datafusion.execution.batch_size = 1",
        "CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '/etc/passwd'",
    ] {
        match s.query(sql).await {
            Err(Error::ReadOnly(m)) => assert!(m.contains("not supported"), "{sql}: {m}"),
            other => panic!("{sql}: expected a read-only refusal, got {other:?}"),
        }
    }
    match s.query("SELECT 1; DROP VIEW job_rollup").await {
        Err(Error::Plan(m)) => assert!(m.contains("single SQL statement"), "{m}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let passwd = s.query("SELECT * FROM '/etc/passwd'").await;
    assert!(
        matches!(&passwd, Err(Error::Plan(m)) if m.contains("not found")),
        "{passwd:?}"
    );
    // Still intact.
    assert_eq!(s.query("SELECT * FROM job_rollup").await.unwrap().num_rows(), 300);
}

#[tokio::test]
async fn a_ratio_without_denominator_is_null_and_an_unknown_week_is_an_error() {
    let (_d, s) = session(&DRILLS).await;
    assert!(matches!(
        s.review(Some("2026-W01"), &Thresholds::default()).await,
        Err(Error::UnknownWeek(_))
    ));
    assert!(matches!(
        s.review(Some("W47"), &Thresholds::default()).await,
        Err(Error::BadWeek(_))
    ));
    let empty = tempfile::tempdir().unwrap();
    let s2 = Session::new(laneledger_store::Ledger::open(empty.path().join("e.redb")).unwrap())
        .await
        .unwrap();
    assert!(matches!(
        s2.review(None, &Thresholds::default()).await,
        Err(Error::UnknownWeek(_))
    ));
    let r = s2
        .query(laneledger_query::derived::views::SEED_Q1_TOKENS_PER_ARTIFACT)
        .await
        .unwrap();
    let formatted = laneledger_query::format_result(&r, laneledger_query::OutputFormat::Csv).unwrap();
    assert_eq!(formatted, "tokens_per_artifact,cross_lane_per_job\r\n,\r\n");
}

/// An acknowledged record is in the next query's answer, though scans reuse cached batches.
#[tokio::test]
async fn a_record_acknowledged_is_visible_to_the_next_query() {
    let (_d, ledger) = common::ledger_from(&["drill-pin-2026-W48.ndjson"]);
    let s = Session::new(ledger.clone()).await.unwrap();
    let count = |s: &Session| {
        let s = s.clone();
        async move {
            let r = s.query("SELECT COUNT(*) AS n FROM job_attempt").await.unwrap();
            laneledger_query::format_result(&r, laneledger_query::OutputFormat::Csv).unwrap()
        }
    };
    assert_eq!(count(&s).await, "n\r\n422\r\n");
    assert_eq!(count(&s).await, "n\r\n422\r\n");
    let line = r#"{"job_id":"fresh","idem_key":"k","attempt_no":1,"lane":"free","started_at":"2026-11-23T10:00:00Z"}"#;
    laneledger_store::ingest_reader(
        &ledger,
        "t",
        line.as_bytes(),
        laneledger_store::InputFormat::Ndjson,
        10,
        |_| {},
    )
    .unwrap();
    assert_eq!(count(&s).await, "n\r\n423\r\n");
    let r = s
        .query("SELECT job_id, free_attempts FROM job_rollup WHERE job_id = 'fresh'")
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 1);
}

#[tokio::test]
async fn a_users_answer_past_its_caps_is_cut_and_says_where() {
    use laneledger_query::{Cut, ResultLimits};
    let (_d, s) = session(&[]).await;
    let limits = |max_rows, max_bytes| ResultLimits { max_rows, max_bytes };
    let sql = "SELECT value FROM generate_series(1, 10) ORDER BY value";
    let (r, cut) = s.query_capped(sql, limits(4, 1 << 20)).await.unwrap();
    assert_eq!(r.num_rows(), 4);
    let cut = cut.unwrap();
    assert_eq!(
        cut,
        Cut {
            rows: 4,
            limit: "rows",
            max: 4
        }
    );
    assert_eq!(
        cut.notice(),
        "the answer was cut after 4 rows: it reached the limit of 4 rows; add a LIMIT or aggregate, or use laneledger export for whole tables"
    );
    assert_eq!(
        format_result(&r, OutputFormat::Csv).unwrap(),
        "value\r\n1\r\n2\r\n3\r\n4\r\n"
    );
    // Exactly at the cap, or under it, nothing is cut.
    for max_rows in [10, 11] {
        let (r, cut) = s.query_capped(sql, limits(max_rows, 1 << 20)).await.unwrap();
        assert_eq!((r.num_rows(), cut), (10, None));
    }
    // 8,192 rows of 1,000 bytes pass 1 MiB in the first batch: nothing is kept.
    let wide = "SELECT repeat('x', 1000) AS s FROM generate_series(1, 100000)";
    let (r, cut) = s.query_capped(wide, limits(1_000_000, 1 << 20)).await.unwrap();
    assert_eq!(r.num_rows(), 0);
    let cut = cut.unwrap();
    assert_eq!(
        cut,
        Cut {
            rows: 0,
            limit: "bytes",
            max: 1 << 20
        }
    );
    assert_eq!(
        cut.notice(),
        "the answer was cut after 0 rows: it reached the limit of 1 MiB; add a LIMIT or aggregate, or use laneledger export for whole tables"
    );
    // The internal path keeps its all-or-nothing answer.
    assert_eq!(s.query(sql).await.unwrap().num_rows(), 10);
}
