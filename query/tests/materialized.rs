//! The materialized `job_rollup`, `idem_artifacts`, `job_week` and `week_rollup`, the plan rewrite onto `idem_artifacts`, the
//! one-job point read, and the parallel scan: exact rows, and freshness after each write.

mod common;

use laneledger_query::Session;
use laneledger_query::derived::views::SEED_Q2_DUPLICATES;
use laneledger_store::drill::Policy;
// The drill's generator, seeded: a failing random sequence can be run again.
use laneledger_store::drill::SplitMix64 as Rng;
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_reader};

/// Eight attempts: k1 has artifacts a1, a1 (again, on job j2) and b1; k2 none; k3 c3 twice on one
/// job; j4 is paid only with absent token counts.
const ROWS: &str = r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T10:00:00Z","ended_at":"2026-11-16T10:00:05Z","outcome":"ambiguous","tokens_in":100,"tokens_out":10,"artifact_id":"a1"}
{"job_id":"j1","idem_key":"k1","attempt_no":2,"lane":"paid","started_at":"2026-11-16T10:01:00Z","ended_at":"2026-11-16T10:01:05Z","outcome":"ok","tokens_in":100,"tokens_out":20,"artifact_id":"b1"}
{"job_id":"j2","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T11:00:00Z","ended_at":"2026-11-16T11:00:05Z","outcome":"ok","tokens_in":1,"tokens_out":2,"artifact_id":"a1"}
{"job_id":"j3","idem_key":"k2","attempt_no":1,"lane":"free","started_at":"2026-11-16T12:00:00Z","ended_at":"2026-11-16T12:00:05Z","outcome":"retryable","tokens_in":5,"tokens_out":0}
{"job_id":"j3","idem_key":"k2","attempt_no":2,"lane":"free","started_at":"2026-11-16T12:01:00Z","ended_at":"2026-11-16T12:01:05Z","outcome":"permanent","tokens_in":5,"tokens_out":0}
{"job_id":"j5","idem_key":"k3","attempt_no":1,"lane":"free","started_at":"2026-11-16T13:00:00Z","ended_at":"2026-11-16T13:00:05Z","outcome":"ambiguous","tokens_in":7,"tokens_out":3,"artifact_id":"c3"}
{"job_id":"j5","idem_key":"k3","attempt_no":2,"lane":"paid","started_at":"2026-11-16T13:01:00Z","ended_at":"2026-11-16T13:01:05Z","outcome":"ok","tokens_in":7,"tokens_out":3,"artifact_id":"c3"}
{"job_id":"j4","idem_key":"k4","attempt_no":1,"lane":"paid","started_at":"2026-11-16T14:00:00Z"}
"#;

fn ingest(ledger: &Ledger, ndjson: &str) {
    let report = ingest_reader(
        ledger,
        "test",
        std::io::Cursor::new(ndjson.to_string()),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    assert_eq!(
        report.counters.rejected + report.counters.conflicts,
        0,
        "{:?}",
        report.problems
    );
}

fn small() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("t.redb")).unwrap();
    ingest(&ledger, ROWS);
    (dir, ledger)
}

/// The rows of `sql`, each cell as text (`NULL` for a null), in the order returned.
async fn rows(session: &Session, sql: &str) -> Vec<Vec<String>> {
    text_rows(&session.query(sql).await.unwrap())
}

/// The rows of an answer, each cell as text, in order.
fn text_rows(result: &laneledger_query::QueryResult) -> Vec<Vec<String>> {
    let text = laneledger_query::format_result(result, laneledger_query::OutputFormat::Csv).unwrap();
    text.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// A retention sweep at `now` (RFC 3339) of the attempts older than `days`.
async fn sweep(session: &Session, now: &str, days: u32) {
    let now = laneledger_store::parse_timestamp(now).unwrap();
    let rule = laneledger_store::storage::retention::RetentionRule {
        days,
        reconcile_window_s: 900,
    };
    let opts = laneledger_query::archive::retention::SweepOptions::new(rule);
    laneledger_query::archive::retention::sweep(session, now, &opts)
        .await
        .unwrap();
}

async fn plan(session: &Session, sql: &str) -> String {
    rows(session, &format!("EXPLAIN {sql}")).await.concat().join(" ")
}

#[tokio::test]
async fn job_rollup_has_the_seed_views_rows_in_job_order() {
    let (_d, ledger) = small();
    let session = Session::new(ledger).await.unwrap();
    assert_eq!(
        rows(&session, "SELECT * FROM job_rollup").await,
        [
            ["j1", "k1", "1", "1", "230", "2"],
            ["j2", "k1", "1", "0", "3", "1"],
            ["j3", "k2", "2", "0", "10", "0"],
            ["j4", "k4", "0", "1", "0", "0"],
            ["j5", "k3", "1", "1", "20", "1"],
        ]
    );
}

#[tokio::test]
async fn idem_artifacts_counts_distinct_artifacts_of_keys_that_have_one() {
    let (_d, ledger) = small();
    let session = Session::new(ledger).await.unwrap();
    let mut got = rows(&session, "SELECT idem_key, artifacts FROM idem_artifacts").await;
    got.sort();
    assert_eq!(got, [["k1", "2"], ["k3", "1"]]);
}

#[tokio::test]
async fn seed_q2_is_read_from_idem_artifacts_and_other_shapes_are_not() {
    let (_d, ledger) = common::ledger_from(&["drill-nopin-2026-W47.ndjson"]);
    let session = Session::new(ledger).await.unwrap();
    assert!(plan(&session, SEED_Q2_DUPLICATES).await.contains("idem_artifacts"));
    // The same question with one more filter term: grouped by DataFusion, not rewritten.
    let other = "SELECT idem_key, COUNT(DISTINCT artifact_id) AS n FROM job_attempt
                 WHERE artifact_id IS NOT NULL AND attempt_no > 0 GROUP BY idem_key HAVING n > 1";
    assert!(!plan(&session, other).await.contains("idem_artifacts"));
    let mut rewritten = rows(&session, SEED_Q2_DUPLICATES).await;
    let mut grouped = rows(&session, other).await;
    rewritten.sort();
    grouped.sort();
    // 21 duplicate artifacts over 21 idem_keys (the nopin drill's figure), each with 2.
    assert_eq!(rewritten.len(), 21);
    assert!(rewritten.iter().all(|r| r[1] == "2"), "{rewritten:?}");
    assert_eq!(rewritten, grouped);
    // A count of something else, or grouping by more, is left alone.
    for sql in [
        "SELECT idem_key, COUNT(DISTINCT job_id) FROM job_attempt WHERE artifact_id IS NOT NULL GROUP BY idem_key",
        "SELECT idem_key, lane, COUNT(DISTINCT artifact_id) FROM job_attempt WHERE artifact_id IS NOT NULL GROUP BY idem_key, lane",
        "SELECT idem_key, COUNT(DISTINCT artifact_id) FROM job_attempt GROUP BY idem_key",
    ] {
        assert!(!plan(&session, sql).await.contains("idem_artifacts"), "{sql}");
    }
}

#[tokio::test]
async fn materializations_see_each_acknowledged_write() {
    let (_d, ledger) = small();
    let session = Session::new(ledger.clone()).await.unwrap();
    assert_eq!(rows(&session, SEED_Q2_DUPLICATES).await, [["k1", "2"]]);
    assert_eq!(
        rows(&session, "SELECT artifacts FROM job_rollup WHERE job_id = 'j5'").await,
        [["1"]]
    );
    // A third artifact for k1 and a second distinct one for k3, on new attempts.
    ingest(
        &ledger,
        r#"{"job_id":"j5","idem_key":"k3","attempt_no":3,"lane":"paid","started_at":"2026-11-16T13:02:00Z","ended_at":"2026-11-16T13:02:05Z","outcome":"ok","tokens_in":1,"tokens_out":1,"artifact_id":"d3"}
{"job_id":"j6","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T15:00:00Z","ended_at":"2026-11-16T15:00:05Z","outcome":"ok","tokens_in":1,"tokens_out":1,"artifact_id":"e1"}
"#,
    );
    let mut q2 = rows(&session, SEED_Q2_DUPLICATES).await;
    q2.sort();
    assert_eq!(q2, [["k1", "3"], ["k3", "2"]]);
    assert_eq!(
        rows(&session, "SELECT tokens, artifacts FROM job_rollup WHERE job_id = 'j5'").await,
        [["22", "2"]]
    );
    assert_eq!(rows(&session, "SELECT COUNT(*) FROM job_rollup").await, [["6"]]);
}

/// Queries whose answers a session that merges writes into the columns it holds must give
/// exactly as a fresh session does: whole rows in key order, the materialized tables, seed 000's
/// two queries, the weekly figures.
const AFTER_WRITES: [&str; 6] = [
    "SELECT * FROM job_attempt ORDER BY job_id, attempt_no",
    "SELECT * FROM job_rollup",
    "SELECT * FROM idem_artifacts ORDER BY idem_key",
    "SELECT * FROM week_rollup",
    "SELECT * FROM job_week ORDER BY job_id",
    "SELECT COUNT(*), SUM(tokens_in), COUNT(ended_at) FROM job_attempt",
];

async fn answers(session: &Session) -> Vec<Vec<Vec<String>>> {
    let mut out = Vec::new();
    for sql in AFTER_WRITES {
        out.push(rows(session, sql).await);
    }
    let mut q2 = rows(session, SEED_Q2_DUPLICATES).await;
    q2.sort();
    out.push(q2);
    out
}

/// After a write, a session reads only the attempts the write inserted or completed and merges
/// them into the Arrow columns it holds (no scan of the ledger), and answers exactly as a new
/// session that scans; a retention sweep, which removes rows, makes it scan again.
#[tokio::test]
async fn a_session_merges_each_write_into_its_columns_and_answers_as_a_fresh_one() {
    let (_d, ledger) = common::ledger_from_drill(600, Policy::NoPin, 5);
    let session = Session::new(ledger.clone()).await.unwrap();
    let first = answers(&session).await;
    assert_eq!(first, answers(&Session::new(ledger.clone()).await.unwrap()).await);
    let scans = session.attempt_scans();
    let computes = session.idem_artifacts_computes();
    let at = |job: &str, no: u32, rest: &str| {
        format!(
            r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"paid","started_at":"2026-11-03T10:00:00Z"{rest}}}"#
        )
    };
    let done = r#","ended_at":"2026-11-03T10:00:09Z","outcome":"ok","tokens_in":40,"tokens_out":2,"artifact_id":"x-1""#;
    let writes = [
        // New jobs before every held key, between two held jobs, after every one; an open attempt.
        [
            at("a-first", 1, done),
            at("g-000100-b", 1, done),
            at("z-last", 1, ""),
            at("g-000300", 9, ""),
        ]
        .join("\n"),
        // The open attempts completed, a new attempt of an existing job, one delivered again.
        [
            at("z-last", 1, done),
            at("g-000300", 9, done),
            at("g-000001", 7, done),
            at("a-first", 1, done),
            // A second artifact for a drill idem_key, and the first again under another job.
            r#"{"job_id":"b-dup","idem_key":"g-idem-000100","attempt_no":1,"lane":"paid","started_at":"2026-11-03T10:00:00Z","artifact_id":"x-2"}"#.to_string(),
            r#"{"job_id":"b-dup","idem_key":"g-idem-000100","attempt_no":2,"lane":"paid","started_at":"2026-11-03T10:00:00Z","artifact_id":"x-2"}"#.to_string(),
        ]
        .join("\n"),
        // Only a duplicate: nothing changes.
        at("a-first", 1, done),
    ];
    for (i, w) in writes.iter().enumerate() {
        ingest(&ledger, w);
        let fresh = Session::new(ledger.clone()).await.unwrap();
        assert_eq!(answers(&session).await, answers(&fresh).await, "after write {}", i + 1);
        assert_eq!(
            session.attempt_scans(),
            scans,
            "after write {}: merged, not scanned",
            i + 1
        );
        assert_eq!(
            session.idem_artifacts_computes(),
            computes,
            "after write {}: idem_artifacts brought up to date, not computed again",
            i + 1
        );
    }
    assert_eq!(session.attempt_merges(), 2, "the duplicate-only write changed no row");
    assert_ne!(answers(&session).await, first);

    // A sweep removes rows: the columns are read again.
    sweep(&session, "2027-06-01T00:00:00Z", 30).await;
    let fresh = Session::new(ledger.clone()).await.unwrap();
    assert_eq!(answers(&session).await, answers(&fresh).await, "after the sweep");
    assert!(session.attempt_scans() > scans, "a sweep makes the session scan");
    assert!(
        session.idem_artifacts_computes() > computes,
        "and compute idem_artifacts again"
    );
    assert_eq!(session.attempt_merges(), 2);
}

/// Columns first asked for after writes were merged into the held ones are cut into the same
/// chunks (the cache cuts a scan every 16,384 rows; merged chunks are longer), so a query mixing them
/// lines up (found by a break-test: a 422 "all columns in a record batch must have the specified
/// row count", then a panic).
#[tokio::test]
async fn columns_first_read_after_merges_line_up_with_the_merged_ones() {
    let (_d, ledger) = common::ledger_from_drill(48_000, Policy::NoPin, 9);
    let session = Session::new(ledger.clone()).await.unwrap();
    let count = "SELECT COUNT(*) FROM job_rollup";
    let wide = "SELECT COUNT(*), SUM(tokens_in), COUNT(ended_at), COUNT(artifact_id), MAX(model) FROM job_attempt";
    let rows_before = rows(&session, "SELECT COUNT(*) FROM job_attempt").await;
    assert!(
        rows_before[0][0].parse::<usize>().unwrap() > 65_536,
        "{rows_before:?}: two chunks at least"
    );
    rows(&session, count).await;
    let line = |job: &str, no: u32| {
        format!(
            r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"free","started_at":"2026-11-04T10:00:00Z","ended_at":"2026-11-04T10:00:03Z","outcome":"ok","tokens_in":5,"tokens_out":1,"artifact_id":"a-{job}"}}"#
        )
    };
    // Into the first chunk, then (after the wide query) into the last one.
    ingest(&ledger, &line("g-job-000001x", 1));
    let fresh = Session::new(ledger.clone()).await.unwrap();
    assert_eq!(rows(&session, count).await, rows(&fresh, count).await);
    assert_eq!(rows(&session, wide).await, rows(&fresh, wide).await);
    ingest(&ledger, &line("g-job-047999", 5));
    let fresh = Session::new(ledger.clone()).await.unwrap();
    let all = [
        count,
        wide,
        "SELECT * FROM job_attempt ORDER BY job_id, attempt_no",
        "SELECT * FROM job_rollup ORDER BY job_id",
    ];
    for sql in all {
        // Not assert_eq!: a failure would print some 68,000 rows.
        assert!(rows(&session, sql).await == rows(&fresh, sql).await, "{sql}");
    }
    assert_eq!(session.attempt_merges(), 2);
}

#[tokio::test]
async fn a_job_id_filter_reads_that_job_only_and_answers_as_a_scan_would() {
    let (_d, ledger) = small();
    let session = Session::new(ledger).await.unwrap();
    let want = [["j1", "1", "a1"], ["j1", "2", "b1"]];
    for sql in [
        "SELECT job_id, attempt_no, artifact_id FROM job_attempt WHERE job_id = 'j1' ORDER BY attempt_no",
        "SELECT job_id, attempt_no, artifact_id FROM job_attempt WHERE 'j1' = job_id ORDER BY attempt_no",
        // Not a point read (an OR): the full scan gives the same rows.
        "SELECT job_id, attempt_no, artifact_id FROM job_attempt WHERE job_id = 'j1' OR job_id = 'nope' ORDER BY attempt_no",
        // The point read's rows still pass the other filters.
        "SELECT job_id, attempt_no, artifact_id FROM job_attempt WHERE job_id = 'j1' AND lane IN ('free', 'paid') ORDER BY attempt_no",
    ] {
        assert_eq!(rows(&session, sql).await, want, "{sql}");
    }
    // The equality reaches the table (so its scan reads the key range); the OR does not.
    let pushed = plan(&session, "SELECT attempt_no FROM job_attempt WHERE job_id = 'j1'").await;
    assert!(
        pushed.contains("partial_filters=[job_attempt.job_id = Utf8("),
        "{pushed}"
    );
    let not_pushed = plan(
        &session,
        "SELECT attempt_no FROM job_attempt WHERE job_id = 'j1' OR job_id = 'x'",
    )
    .await;
    assert!(!not_pushed.contains("partial_filters"), "{not_pushed}");
    assert!(
        rows(&session, "SELECT * FROM job_attempt WHERE job_id = 'absent'")
            .await
            .is_empty()
    );
    assert_eq!(
        rows(
            &session,
            "SELECT COUNT(*) FROM job_attempt WHERE job_id = 'j1' AND attempt_no = 2"
        )
        .await,
        [["1"]]
    );
}

#[test]
fn the_parallel_scan_returns_every_attempt_in_key_order_across_chunks() {
    // 50,000 jobs give ~71,000 attempts: more than one 65,536-row chunk.
    let (_d, ledger) = common::ledger_from_drill(50_000, Policy::NoPin, 7);
    let batches = laneledger_query::tables::job_attempt::scan(&ledger).unwrap();
    assert!(batches.len() >= 2, "{} batches", batches.len());
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(total as u64, ledger.attempt_count().unwrap());
    let mut keys = Vec::with_capacity(total);
    for b in &batches {
        use datafusion::arrow::array::AsArray;
        let job = b.column(0).as_string::<i32>();
        let no = b.column(2).as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        for i in 0..b.num_rows() {
            keys.push((job.value(i).to_string(), no.value(i)));
        }
    }
    assert!(
        keys.windows(2).all(|w| w[0] < w[1]),
        "rows out of (job_id, attempt_no) order"
    );
    // The same rows, one by one, from the ledger itself.
    let mut from_ledger = Vec::with_capacity(total);
    ledger
        .for_each_attempt(|s| from_ledger.push((s.attempt.job_id, i64::from(s.attempt.attempt_no))))
        .unwrap();
    assert_eq!(keys, from_ledger);
}

#[tokio::test]
async fn columns_built_by_different_queries_line_up_with_a_full_read() {
    let (_d, ledger) = small();
    let session = Session::new(ledger).await.unwrap();
    // Each query builds the columns it reads; later ones add to what the cache holds.
    let first = rows(&session, "SELECT job_id, attempt_no, outcome FROM job_attempt").await;
    let second = rows(
        &session,
        "SELECT job_id, attempt_no, tokens_in, outcome, model FROM job_attempt",
    )
    .await;
    let count = rows(&session, "SELECT COUNT(*) FROM job_attempt").await;
    let all = rows(
        &session,
        "SELECT job_id, attempt_no, tokens_in, outcome, model, lane, ingested_at FROM job_attempt",
    )
    .await;
    assert_eq!(count, [["8"]]);
    assert_eq!(all.len(), 8);
    for (i, row) in all.iter().enumerate() {
        assert_eq!(first[i], [row[0].clone(), row[1].clone(), row[3].clone()]);
        assert_eq!(second[i], row[..5].to_vec());
    }
    assert_eq!(all[0][..5], ["j1", "1", "100", "ambiguous", ""]);
    assert_eq!(all[7][..6], ["j5", "2", "7", "ok", "", "paid"]);
    // The first query scanned for its columns; the second, asking for more, read every column
    // but attrs; so the last query's lane and ingested_at were already there.
    assert_eq!(session.attempt_scans(), 2);
    let attrs = rows(&session, "SELECT attrs FROM job_attempt WHERE attrs IS NOT NULL").await;
    assert!(attrs.is_empty());
    assert_eq!(session.attempt_scans(), 3, "attrs is read only when asked for");
}

/// The weekly review with its sections reads the ledger once: every column in one scan, attrs
/// with them, which the cost sections read for a router's own cost and time to first token (other
/// queries read attrs only when they name it); and it answers exactly what the review and the
/// sections asked for one by one answer.
#[tokio::test]
async fn the_review_with_its_sections_scans_once_and_answers_as_its_parts_do() {
    let (_d, ledger) = common::ledger_from(&["drill-nopin-2026-W47.ndjson", "drill-pin-2026-W48.ndjson"]);
    for week in [Some("2026-W47"), Some("2026-W48"), None] {
        let together = Session::new(ledger.clone()).await.unwrap();
        let thresholds = together.thresholds();
        let (review, sections) = together.review_with_sections(week, &thresholds).await.unwrap();
        assert_eq!(together.attempt_scans(), 1, "{week:?}");
        assert_eq!(review.week.iso_week, week.unwrap_or("2026-W48"));
        let apart = Session::new(ledger.clone()).await.unwrap();
        let review_alone = apart.review(week, &thresholds).await.unwrap();
        let sections_alone = apart.audit_sections(&review_alone.week.iso_week).await.unwrap();
        assert_eq!(
            laneledger_query::review_document(&review, &sections),
            laneledger_query::review_document(&review_alone, &sections_alone),
            "{week:?}"
        );
        // Alone, the review scans for its drill table's columns, then the sections for the rest.
        assert_eq!(apart.attempt_scans(), 2, "{week:?}");
        // A command's session builds each of its nine tables once (seven audits, data_quality,
        // week_rollup), for the week, and answers the same.
        let command = per_read_session(&ledger).await;
        let (review, sections) = command.review_with_sections(week, &thresholds).await.unwrap();
        assert_eq!(command.attempt_scans(), 1, "{week:?}");
        assert_eq!(command.per_read_builds(), 9, "{week:?}");
        assert_eq!(
            laneledger_query::review_document(&review, &sections),
            laneledger_query::review_document(&review_alone, &sections_alone),
            "per read, {week:?}"
        );
        command.review_with_sections(week, &thresholds).await.unwrap();
        assert_eq!(command.per_read_builds(), 9, "{week:?}: the answers kept");
    }
}

/// A session that builds its tables per read, as the commands that answer once take.
async fn per_read_session(ledger: &Ledger) -> Session {
    laneledger_query::Session::with_upkeep(
        ledger.clone(),
        laneledger_store::LaneConfig::default(),
        laneledger_query::session::QUERY_MEMORY_BYTES,
        laneledger_query::Upkeep::PerRead,
    )
    .await
    .unwrap()
}

/// `job_week` and `week_rollup` at the edges: a job whose retry crosses into the next ISO week
/// stays in its first attempt's week with all its attempts; a job whose lowest attempt_no started
/// later than another of its attempts takes the earliest start; an idem_key's artifacts are
/// counted per week, so a key with one artifact in each of two weeks is no duplicate in either.
#[tokio::test]
async fn job_week_and_week_rollup_follow_each_jobs_first_start() {
    const EDGES: &str = r#"{"job_id":"jx","idem_key":"kx","attempt_no":1,"lane":"free","started_at":"2026-11-22T23:59:00Z","ended_at":"2026-11-22T23:59:30Z","outcome":"ambiguous","tokens_in":10,"tokens_out":0,"artifact_id":"x1"}
{"job_id":"jx","idem_key":"kx","attempt_no":2,"lane":"paid","started_at":"2026-11-23T00:01:00Z","ended_at":"2026-11-23T00:01:30Z","outcome":"ok","tokens_in":10,"tokens_out":0,"artifact_id":"x2"}
{"job_id":"jy","idem_key":"kx","attempt_no":1,"lane":"free","started_at":"2026-11-23T01:00:00Z","ended_at":"2026-11-23T01:00:30Z","outcome":"ok","tokens_in":10,"tokens_out":0,"artifact_id":"x1"}
{"job_id":"jz","idem_key":"kz","attempt_no":1,"lane":"free","started_at":"2026-11-30T00:10:00Z","ended_at":"2026-11-30T00:10:30Z","outcome":"retryable","tokens_in":10,"tokens_out":0}
{"job_id":"jz","idem_key":"kz","attempt_no":2,"lane":"free","started_at":"2026-11-29T23:50:00Z","ended_at":"2026-11-29T23:50:30Z","outcome":"retryable","tokens_in":10,"tokens_out":0}
"#;
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("w.redb")).unwrap();
    ingest(&ledger, EDGES);
    let session = Session::new(ledger).await.unwrap();
    assert_eq!(
        rows(
            &session,
            "SELECT job_id, to_char(week_start, '%Y-%m-%d'), iso_week FROM job_week ORDER BY job_id"
        )
        .await,
        [
            ["jx", "2026-11-16", "2026-W47"],
            ["jy", "2026-11-23", "2026-W48"],
            ["jz", "2026-11-23", "2026-W48"],
        ]
    );
    // iso_week, jobs, free, paid, tokens, unique accepted, duplicates, cross-lane jobs,
    // artifacts, then the four ratios.
    assert_eq!(
        rows(
            &session,
            "SELECT * EXCLUDE (week_start) FROM week_rollup ORDER BY week_start"
        )
        .await,
        [
            [
                "2026-W47", "1", "1", "1", "20", "1", "1", "1", "2", "20.0", "10.0", "100.0", "1.0"
            ],
            [
                "2026-W48", "2", "3", "0", "30", "1", "0", "0", "1", "30.0", "30.0", "0.0", "0.0"
            ],
        ]
    );
    assert_eq!(
        rows(
            &session,
            "SELECT * FROM weekly_metrics EXCEPT SELECT * FROM week_rollup"
        )
        .await,
        Vec::<Vec<String>>::new()
    );
}

/// A read in a table's declared order, over several batches, merges the table's partitions (each
/// in that order) instead of sorting every row again: the sort ran out of query memory on
/// `SELECT * FROM job_attempt ORDER BY job_id, attempt_no` at 1 M attempts.
#[tokio::test]
async fn a_read_in_the_tables_order_merges_its_partitions_instead_of_sorting() {
    let (_d, ledger) = common::ledger_from_drill(48_000, Policy::NoPin, 9);
    let session = Session::new(ledger).await.unwrap();
    let attempts = rows(&session, "SELECT COUNT(*) FROM job_attempt").await[0][0]
        .parse::<usize>()
        .unwrap();
    assert!(attempts > 65_536, "{attempts}: more than one batch");
    for (sql, expected) in [
        (
            "SELECT job_id, attempt_no FROM job_attempt ORDER BY job_id, attempt_no",
            attempts,
        ),
        ("SELECT job_id, 0 FROM job_rollup ORDER BY job_id", 48_000),
    ] {
        let plan = format!("{:?}", rows(&session, &format!("EXPLAIN {sql}")).await);
        assert!(plan.contains("SortPreservingMergeExec"), "{sql}: {plan}");
        assert!(!plan.contains("SortExec"), "{sql}: no sort, {plan}");
        let got = rows(&session, sql).await;
        assert_eq!(got.len(), expected, "{sql}");
        let key = |r: &Vec<String>| (r[0].clone(), r[1].parse::<i64>().unwrap());
        assert!(got.windows(2).all(|w| key(&w[0]) < key(&w[1])), "{sql}: in key order");
    }
}

#[tokio::test]
async fn a_week_filter_on_week_attempt_reads_that_weeks_rows_and_answers_as_the_label_compare_would() {
    let (_dir, ledger, _rng, _jobs) = random_ledger(0x3ee6_a77e, 2_000);
    let session = Session::new(ledger).await.unwrap();
    let weeks: Vec<String> = rows(
        &session,
        "SELECT DISTINCT arrow_cast(iso_week, 'Utf8') AS w FROM week_attempt ORDER BY w",
    )
    .await
    .into_iter()
    .map(|r| r[0].clone())
    .collect();
    assert!(weeks.len() >= 3, "{weeks:?}");
    // `arrow_cast(iso_week, 'Utf8') = …` compares the labels in DataFusion's filter, row by row;
    // `iso_week = …` is the scan's, by the dictionary key.
    let mut seen = 0;
    for week in weeks.iter().map(String::as_str).chain(["2020-W01"]) {
        for shape in [
            "SELECT * FROM week_attempt WHERE {f} ORDER BY job_id, attempt_no",
            "SELECT job_id, attempt_no, lane FROM week_attempt WHERE {f} AND lane = 'paid' ORDER BY job_id, attempt_no",
            "SELECT lane, COUNT(*), SUM(tokens_in) FROM week_attempt WHERE {f} GROUP BY lane ORDER BY lane",
            "SELECT COUNT(*) FROM week_attempt WHERE {f}",
        ] {
            let pushed = rows(&session, &shape.replace("{f}", &format!("iso_week = '{week}'"))).await;
            let compared = rows(
                &session,
                &shape.replace("{f}", &format!("arrow_cast(iso_week, 'Utf8') = '{week}'")),
            )
            .await;
            assert_eq!(pushed, compared, "{week}: {shape}");
            seen += pushed.len();
        }
        let n: usize = rows(
            &session,
            &format!("SELECT COUNT(*) FROM week_attempt WHERE iso_week = '{week}'"),
        )
        .await[0][0]
            .parse()
            .unwrap();
        assert_eq!(n == 0, week == "2020-W01", "{week}");
        // A limit takes that week's first rows in the table's order.
        let first = rows(
            &session,
            &format!("SELECT job_id, attempt_no FROM week_attempt WHERE iso_week = '{week}' LIMIT 3"),
        )
        .await;
        let sorted = rows(
            &session,
            &format!("SELECT job_id, attempt_no FROM week_attempt WHERE iso_week = '{week}' ORDER BY job_id, attempt_no LIMIT 3"),
        )
        .await;
        assert_eq!(first, sorted, "{week}");
    }
    assert!(seen > 2_000, "{seen}");
    // Two weeks at once hold no row.
    let both = format!(
        "SELECT COUNT(*) FROM week_attempt WHERE iso_week = '{}' AND iso_week = '{}'",
        weeks[0], weeks[1]
    );
    assert_eq!(rows(&session, &both).await, [["0"]]);
    // The equality is the scan's own: DataFusion keeps no filter of it.
    let plan = plan(
        &session,
        &format!("SELECT job_id FROM week_attempt WHERE iso_week = '{}'", weeks[1]),
    )
    .await;
    assert!(plan.contains("full_filters=[week_attempt.iso_week = "), "{plan}");
    assert!(!plan.contains("FilterExec"), "{plan}");
}

/// A `LIMIT` without `ORDER BY` or `WHERE` gives the table's first rows in its order, every time
/// (the scan hands over the first batches as one partition), instead of whichever partition
/// DataFusion read first: what someone typing `SELECT * FROM job_attempt LIMIT 10` expects.
#[tokio::test]
async fn a_limit_without_order_by_gives_the_tables_first_rows_in_order() {
    let (_d, ledger) = common::ledger_from_drill(48_000, Policy::NoPin, 9);
    let session = Session::new(ledger).await.unwrap();
    for (table, key) in [("job_attempt", "job_id, attempt_no"), ("job_rollup", "job_id")] {
        let total = rows(&session, &format!("SELECT COUNT(*) FROM {table}")).await[0][0]
            .parse::<usize>()
            .unwrap();
        // 66,000 rows span several chunks of job_attempt.
        for n in [5, 66_000] {
            let got = rows(&session, &format!("SELECT {key} FROM {table} LIMIT {n}")).await;
            let sorted = rows(&session, &format!("SELECT {key} FROM {table} ORDER BY {key} LIMIT {n}")).await;
            let plan = format!(
                "{:?}",
                rows(&session, &format!("EXPLAIN SELECT {key} FROM {table} LIMIT {n}")).await
            );
            assert_eq!(got.len(), n.min(total), "{table} LIMIT {n}");
            assert!(got == sorted, "{table} LIMIT {n}: {plan}");
        }
    }
}

/// A draw below `n`.
fn below(rng: &mut Rng, n: u64) -> u64 {
    rng.next_u64() % n
}

/// One of `of`, drawn.
fn pick<'a>(rng: &mut Rng, of: &[&'a str]) -> &'a str {
    of[below(rng, of.len() as u64) as usize]
}

/// The start of one attempt as a router logs it (no closing brace), with what the audits look at
/// drawn at random: lanes, keys of two pools, times over three ISO weeks; [`ended`] adds the end.
fn random_attempt(rng: &mut Rng, job: &str, idem: &str, no: u32, start_s: i64) -> String {
    let lane = pick(rng, &["free", "free", "paid"]);
    let key = pick(rng, &["k-a", "k-b", "k-c", "k-d"]);
    let pool = if key < "k-c" { "pool-1" } else { "pool-2" };
    format!(
        r#"{{"job_id":"{job}","idem_key":"{idem}","attempt_no":{no},"lane":"{lane}","started_at":"{}","key_id":"{key}","pool_id":"{pool}","model":"m-{lane}""#,
        at_s(start_s)
    )
}

/// `2026-11-02T00:00:00Z` plus `s` seconds, as RFC 3339.
fn at_s(s: i64) -> String {
    let base = laneledger_store::parse_timestamp("2026-11-02T00:00:00Z").unwrap() / 1_000_000;
    chrono::DateTime::from_timestamp(base + s, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `attempt` (from [`random_attempt`]) ended: an outcome and refusal drawn at random (429, 1305,
/// 401, 400, 500, a 429 logged ok), tokens, and artifacts that differ now and then under one
/// idem_key.
fn ended(rng: &mut Rng, attempt: &str, idem: &str, start_s: i64) -> String {
    let (outcome, status, code) = match below(rng, 8) {
        0 => ("retryable", 429, None),
        1 => ("retryable", 429, Some(1305)),
        2 => ("permanent", 401, None),
        3 => ("retryable", 400, None),
        4 => ("ambiguous", 500, None),
        5 => ("ok", 429, None),
        _ => ("ok", 200, None),
    };
    let mut line = format!(
        r#"{attempt},"ended_at":"{}","outcome":"{outcome}","http_status":{status},"tokens_in":{},"tokens_out":{}"#,
        at_s(start_s + 1 + below(rng, 30) as i64),
        below(rng, 500),
        below(rng, 3) * 100
    );
    if let Some(c) = code {
        line += &format!(r#","provider_code":{c}"#);
    }
    if outcome == "ok" || below(rng, 4) == 0 {
        line += &format!(r#","artifact_id":"art-{idem}-{}""#, below(rng, 2));
    }
    line + "}"
}

/// Every derived table, whole and for one week, sorted: what a session kept up to date by the
/// writes must answer as a fresh one does.
async fn derived(session: &Session, week: &str) -> Vec<(String, Vec<Vec<String>>)> {
    let mut tables = vec![
        "job_rollup",
        "job_week",
        "week_rollup",
        "idem_artifacts",
        "data_quality",
        "week_attempt",
    ];
    let audits = laneledger_query::derived::audits::audit_tables();
    tables.extend(audits.iter().map(|a| a.name));
    let mut out = Vec::new();
    for t in tables {
        let mut sqls = vec![format!("SELECT * FROM {t}")];
        if t != "job_rollup" && t != "idem_artifacts" && t != "job_week" {
            sqls.push(format!("SELECT * FROM {t} WHERE iso_week = '{week}'"));
        }
        for sql in sqls {
            let mut got = rows(session, &sql).await;
            got.sort();
            out.push((sql, got));
        }
    }
    out
}

/// `batches` as [`rows`] gives a query's answer: each row's cells as text, sorted.
fn sorted_text(batches: Vec<datafusion::arrow::array::RecordBatch>) -> Vec<Vec<String>> {
    let schema = batches[0].schema();
    let mut rows = text_rows(&laneledger_query::QueryResult { schema, batches });
    rows.sort();
    rows
}

/// The tables kept by job, `week_rollup` and `data_quality`, built whole from every attempt at
/// once (no chunks, nothing kept, a scan of the ledger rather than the session's merged columns),
/// under the SQL of [`derived`] whose answer they must equal.
fn built_whole(ledger: &Ledger, week: &str) -> Vec<(String, Vec<Vec<String>>)> {
    use laneledger_query::derived::{audits, job_rollup, job_week, week_rollup};
    let all = laneledger_query::tables::job_attempt::scan(ledger).unwrap();
    let mut out = vec![
        (
            "SELECT * FROM job_rollup".to_string(),
            sorted_text(job_rollup::rollup(&all).unwrap()),
        ),
        (
            "SELECT * FROM job_week".to_string(),
            sorted_text(job_week::job_weeks(&all).unwrap()),
        ),
        (
            "SELECT * FROM week_rollup".to_string(),
            sorted_text(week_rollup::week_rollup(&all).unwrap()),
        ),
    ];
    // week_attempt: each attempt with its job's week in front.
    let weeks: std::collections::HashMap<String, String> = sorted_text(job_week::job_weeks(&all).unwrap())
        .into_iter()
        .map(|r| (r[0].clone(), r[2].clone()))
        .collect();
    let attempts = text_rows(&laneledger_query::QueryResult {
        schema: all[0].schema(),
        batches: all.clone(),
    });
    let mut with_week: Vec<Vec<String>> = attempts
        .into_iter()
        .map(|r| std::iter::once(weeks[&r[0]].clone()).chain(r).collect())
        .collect();
    with_week.sort();
    let of_week = with_week.iter().filter(|r| r[0] == week).cloned().collect();
    out.push(("SELECT * FROM week_attempt".to_string(), with_week));
    out.push((format!("SELECT * FROM week_attempt WHERE iso_week = '{week}'"), of_week));
    for (sql, w) in [
        ("SELECT * FROM data_quality".to_string(), None),
        (
            format!("SELECT * FROM data_quality WHERE iso_week = '{week}'"),
            Some(week),
        ),
    ] {
        let batch = audits::data_quality::build(ledger, &all, w).unwrap();
        out.push((sql, sorted_text(vec![batch])));
    }
    let snap = audits::Snapshot::new(&all).unwrap();
    let settings = audits::AuditSettings::default();
    for a in audits::audit_tables() {
        for (sql, w) in [
            (format!("SELECT * FROM {}", a.name), None),
            (
                format!("SELECT * FROM {} WHERE iso_week = '{week}'", a.name),
                Some(week),
            ),
        ] {
            out.push((sql, sorted_text(vec![(a.build)(&snap, &settings, w).unwrap()])));
        }
    }
    out
}

/// Asserts that `got` ([`derived`]) holds the answers of [`built_whole`].
fn assert_as_built_whole(got: &[(String, Vec<Vec<String>>)], ledger: &Ledger, week: &str, when: &str) {
    let whole = built_whole(ledger, week);
    assert_eq!(whole.len(), 21);
    for (sql, rows) in whole {
        let kept = got.iter().find(|(s, _)| *s == sql).map(|(_, r)| r);
        assert_eq!(kept, Some(&rows), "{when}: {sql}");
    }
}

/// A job written by [`new_jobs`]: its id, idem_key, attempts, last attempt's start (seconds after
/// 2026-11-02) and, while its last attempt is open, that attempt as logged (no closing brace).
struct Job {
    id: String,
    idem: String,
    attempts: u32,
    start: i64,
    open: Option<String>,
}

/// A ledger of `n` random jobs ([`new_jobs`]), with the generator and the jobs, to write more.
fn random_ledger(seed: u64, n: usize) -> (tempfile::TempDir, Ledger, Rng, Vec<Job>) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("t.redb")).unwrap();
    let mut rng = Rng::new(seed);
    let mut jobs = Vec::new();
    ingest(&ledger, &new_jobs(&mut rng, &mut jobs, n).join("\n"));
    (dir, ledger, rng, jobs)
}

/// `n` new jobs with random ids, their attempts as NDJSON lines; one in ten ends open. One
/// idem_key in eight is a held job's, so its artifacts may differ (a duplicate).
fn new_jobs(rng: &mut Rng, jobs: &mut Vec<Job>, n: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for _ in 0..n {
        let id = format!("r-{:016x}", rng.next_u64());
        let idem = match jobs.len() {
            held if held > 0 && below(rng, 8) == 0 => jobs[below(rng, held as u64) as usize].idem.clone(),
            _ => format!("i-{id}"),
        };
        // One job in forty goes past the attempt bound (8).
        let attempts = match below(rng, 40) {
            0 => 9 + below(rng, 3) as u32,
            _ => 1 + below(rng, 4) as u32,
        };
        let mut start = below(rng, 21 * 86_400) as i64;
        let mut open = None;
        for no in 1..=attempts {
            if no > 1 {
                start += 1 + below(rng, 120) as i64;
            }
            let attempt = random_attempt(rng, &id, &idem, no, start);
            if no == attempts && below(rng, 10) == 0 {
                lines.push(format!("{attempt}}}"));
                open = Some(attempt);
            } else {
                lines.push(ended(rng, &attempt, &idem, start));
            }
        }
        jobs.push(Job {
            id,
            idem,
            attempts,
            start,
            open,
        });
    }
    lines
}

/// Random sequences of writes (new jobs whose random ids fall anywhere among the held ones,
/// retries of held jobs, completions of open attempts, deliveries again) over more attempts than
/// one chunk of the attempt cache holds, then a sweep: after each, every derived table of the
/// long-lived session, kept by job or built again, equals a fresh session's.
#[tokio::test]
async fn every_derived_table_after_random_writes_and_a_sweep_equals_a_fresh_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("t.redb")).unwrap();
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut jobs: Vec<Job> = Vec::new();
    let first = new_jobs(&mut rng, &mut jobs, 30_000);
    assert!(
        first.len() > laneledger_query::tables::job_attempt::BATCH_ROWS,
        "more than one chunk"
    );
    ingest(&ledger, &first.join("\n"));
    let session = Session::new(ledger.clone()).await.unwrap();
    // A session that keeps only the last answer of each table, through the same writes.
    let per_read = per_read_session(&ledger).await;
    let week = "2026-W46";
    let held = derived(&session, week).await;
    for (sql, rows) in &held {
        assert!(!rows.is_empty(), "{sql}: the random attempts give every table rows");
    }
    assert_as_built_whole(&held, &ledger, week, "at first");
    assert_eq!(held, derived(&Session::new(ledger.clone()).await.unwrap(), week).await);
    assert_eq!(held, derived(&per_read, week).await, "per read, at first");
    // `derived` reads week_rollup whole, and data_quality and the seven audits whole, then for
    // the week: seventeen builds.
    const DERIVED_BUILDS: u64 = 17;
    assert_eq!(per_read.per_read_builds(), DERIVED_BUILDS);
    let review = |s: &Session| {
        let s = s.clone();
        async move {
            let (r, sections) = s.review_with_sections(Some(week), &s.thresholds()).await.unwrap();
            laneledger_query::review_document(&r, &sections)
        }
    };
    assert_eq!(review(&per_read).await, review(&session).await, "the review, at first");
    assert_eq!(
        per_read.per_read_builds(),
        DERIVED_BUILDS,
        "the review reads the week's answers kept"
    );
    for round in 0..3 {
        let n = 1 + below(&mut rng, 40) as usize;
        let mut lines = new_jobs(&mut rng, &mut jobs, n);
        for _ in 0..below(&mut rng, 40) {
            let j = below(&mut rng, jobs.len() as u64) as usize;
            let job = &mut jobs[j];
            match job.open.take() {
                // The open attempt completed.
                Some(open) => lines.push(ended(&mut rng, &open, &job.idem, job.start)),
                // A retry of a held job.
                None => {
                    job.attempts += 1;
                    job.start += 5;
                    let retry = random_attempt(&mut rng, &job.id, &job.idem, job.attempts, job.start);
                    lines.push(ended(&mut rng, &retry, &job.idem, job.start));
                }
            }
        }
        // An attempt logged late, started a week before its job's others: the job's week moves,
        // and with it every row naming the job.
        let j = below(&mut rng, jobs.len() as u64) as usize;
        let job = &mut jobs[j];
        if job.open.is_none() {
            job.attempts += 1;
            let late = random_attempt(&mut rng, &job.id, &job.idem, job.attempts, job.start - 7 * 86_400);
            lines.push(ended(&mut rng, &late, &job.idem, job.start - 7 * 86_400));
        }
        // A line delivered again changes nothing.
        let done: Vec<&String> = first.iter().filter(|l| l.contains("ended_at")).collect();
        lines.push(done[below(&mut rng, done.len() as u64) as usize].clone());
        ingest(&ledger, &lines.join("\n"));
        let fresh = Session::new(ledger.clone()).await.unwrap();
        let kept = derived(&session, week).await;
        assert_as_built_whole(&kept, &ledger, week, &format!("after round {round}"));
        assert_eq!(kept, derived(&fresh, week).await, "after round {round}");
        let builds = per_read.per_read_builds();
        assert_eq!(kept, derived(&per_read, week).await, "per read, after round {round}");
        assert_eq!(
            per_read.per_read_builds(),
            builds + DERIVED_BUILDS,
            "built again after the write"
        );
        assert_eq!(
            review(&per_read).await,
            review(&session).await,
            "the review, after round {round}"
        );
        assert_eq!(per_read.per_read_builds(), builds + DERIVED_BUILDS, "round {round}");
    }
    sweep(&session, "2026-12-01T00:00:00Z", 20).await;
    let fresh = Session::new(ledger.clone()).await.unwrap();
    let kept = derived(&session, "2026-W47").await;
    assert_as_built_whole(&kept, &ledger, "2026-W47", "after the sweep");
    assert_eq!(kept, derived(&fresh, "2026-W47").await, "after the sweep");
    assert_eq!(kept, derived(&per_read, "2026-W47").await, "per read, after the sweep");
}

/// A pinned session (one page, one review) reads the state it found, or a newer one: writes that
/// land meanwhile make it bring neither the columns nor any derived table up to date, while the
/// session itself, unpinned, answers each write as a fresh session does. What a pinned read
/// builds from older columns is never taken for a newer generation's.
#[tokio::test]
async fn a_pinned_session_reads_one_generation_and_the_session_every_write() {
    let (_dir, ledger, mut rng, mut jobs) = random_ledger(0x005e_ed0f_a91a, 3_000);
    let mut write = |n| ingest(&ledger, &new_jobs(&mut rng, &mut jobs, n).join("\n"));
    let fresh = || async { Session::new(ledger.clone()).await.unwrap() };
    let session = fresh().await;
    let week = "2026-W46";
    let at_first = derived(&session, week).await;
    let weeks_at_first = session.weeks().await.unwrap();
    // The cost fold's columns held too (a column not held yet is read from the newest snapshot).
    session.week_cost("2026-W45").await.unwrap();

    let pinned = session.pinned();
    write(30);
    let merges = session.attempt_merges();
    assert_eq!(
        derived(&pinned, week).await,
        at_first,
        "the pinned session reads what it found"
    );
    assert_eq!(pinned.weeks().await.unwrap(), weeks_at_first);
    // Asked for the first time through the pin, so built from the columns it found.
    let other_week = pinned.audit_counts(Some("2026-W47")).await.unwrap();
    let other_cost = pinned.week_cost("2026-W47").await.unwrap().spend;
    assert_eq!(
        session.attempt_merges(),
        merges,
        "no write was merged for the pinned reads"
    );

    let now = fresh().await;
    let after = derived(&now, week).await;
    assert_ne!(after, at_first, "the write changed the week's tables");
    assert_eq!(derived(&session, week).await, after, "the session sees the write");
    assert_eq!(session.weeks().await.unwrap(), now.weeks().await.unwrap());
    assert_ne!(session.weeks().await.unwrap(), weeks_at_first);
    let counts = |s: &Session| {
        let s = s.clone();
        async move { s.audit_counts(Some("2026-W47")).await.unwrap() }
    };
    assert_eq!(
        counts(&session).await,
        counts(&now).await,
        "not the pinned read's counts"
    );
    assert_ne!(counts(&session).await, other_week);
    let cost = now.week_cost("2026-W47").await.unwrap().spend;
    assert_eq!(session.week_cost("2026-W47").await.unwrap().spend, cost);
    assert_ne!(cost, other_cost);
    assert_eq!(session.attempt_merges(), merges + 1);
    assert_eq!(
        derived(&pinned, week).await,
        after,
        "a newer state does for a pinned read"
    );

    // Pinned while the columns lag behind it: its first read catches up past the pin.
    write(30);
    let late = session.pinned();
    write(30);
    let now = fresh().await;
    assert_eq!(derived(&late, week).await, derived(&now, week).await);
    write(30);
    let now = fresh().await;
    assert_eq!(derived(&session, week).await, derived(&now, week).await);
    assert_eq!(session.weeks().await.unwrap(), now.weeks().await.unwrap());
}

/// A streamed answer is the collected one, row for row, in batches as the plan makes them; a
/// reader that takes nothing for longer than its patience gets, after the batches that waited
/// for it, an error rather than a short answer that would pass for whole; a statement that is not
/// read-only is refused before any batch.
#[tokio::test]
async fn a_streamed_answer_equals_the_collected_one_and_a_stalled_reader_gets_an_error() {
    use futures::StreamExt;
    use laneledger_query::Error;
    use laneledger_query::session::STREAM_BATCHES;
    use std::time::Duration;
    let (_d, ledger) = common::ledger_from_drill(36_000, Policy::NoPin, 3);
    let session = Session::new(ledger.clone()).await.unwrap();
    let sql = "SELECT * FROM job_attempt ORDER BY job_id, attempt_no";
    let whole = session.query(sql).await.unwrap();
    let mut stream = session.query_stream(sql, Duration::from_secs(60)).await.unwrap();
    let mut batches = Vec::new();
    while let Some(b) = stream.next().await {
        batches.push(b.unwrap());
    }
    assert!(batches.len() > STREAM_BATCHES + 1, "{} batches", batches.len());
    let streamed = laneledger_query::QueryResult {
        schema: stream.schema.clone(),
        batches,
    };
    assert_eq!(text_rows(&streamed), text_rows(&whole));

    let patience = Duration::from_millis(50);
    let mut stalled = session.query_stream(sql, patience).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (mut rows, mut error) = (0, None);
    while let Some(b) = stalled.next().await {
        match b {
            Ok(b) => rows += b.num_rows(),
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    assert!(rows < whole.num_rows(), "{rows} of {}", whole.num_rows());
    assert!(
        matches!(error, Some(Error::ReaderStalled(d)) if d == patience),
        "{error:?}"
    );
    assert!(stalled.next().await.is_none(), "the error is told once");

    let refused = session.query_stream("DROP TABLE job_attempt", patience).await;
    assert!(matches!(refused, Err(Error::ReadOnly(_))), "{:?}", refused.err());
}

/// `key_rest_violation` declares its rows sorted as the review's section orders them (key,
/// start, job, attempt), so the section and its download merge the table's partitions instead of
/// sorting every row: the rows a read in that order returns are in that order indeed (a false
/// claim would come out of the merge unsorted), for every week and for the whole table.
#[tokio::test]
async fn key_rest_violations_come_in_the_sections_order_without_a_sort() {
    use datafusion::arrow::array::{AsArray, RecordBatch};
    use datafusion::arrow::datatypes::{Int64Type, TimestampMicrosecondType};
    let (_dir, ledger, _, _) = random_ledger(0x6b65_795f_7265_7374, 20_000);
    let session = Session::new(ledger.clone()).await.unwrap();
    let order = "ORDER BY key_id, started_at, job_id, attempt_no";
    for filter in [
        "",
        "WHERE iso_week = '2026-W45'",
        "WHERE iso_week = '2026-W46'",
        "WHERE iso_week = '2026-W47'",
    ] {
        let sql = format!("SELECT key_id, started_at, job_id, attempt_no FROM key_rest_violation {filter} {order}");
        let explained = plan(&session, &sql).await;
        assert!(!explained.contains("SortExec"), "{sql}: {explained}");
        let result = session.query(&sql).await.unwrap();
        let keys: Vec<(String, i64, String, i64)> = result
            .batches
            .iter()
            .flat_map(|b: &RecordBatch| {
                // key_id is a dictionary of the keys.
                let key = datafusion::arrow::compute::cast(b.column(0), &datafusion::arrow::datatypes::DataType::Utf8)
                    .unwrap();
                let key = key.as_string::<i32>();
                let at = b.column(1).as_primitive::<TimestampMicrosecondType>();
                let job = b.column(2).as_string::<i32>();
                let no = b.column(3).as_primitive::<Int64Type>();
                (0..b.num_rows())
                    .map(|i| {
                        (
                            key.value(i).to_string(),
                            at.value(i),
                            job.value(i).to_string(),
                            no.value(i),
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(keys.len() > 1_000, "{sql}: {} rows", keys.len());
        assert!(keys.is_sorted(), "{sql}: rows out of the declared order");
        let count = rows(&session, &format!("SELECT COUNT(*) FROM key_rest_violation {filter}")).await;
        assert_eq!(count, [[keys.len().to_string()]], "{sql}");
    }
}

/// `data_quality` kept by the writes equals the table built whole after each, and builds its
/// artifacts reported twice again only when a write reports, `ok`, an artifact an `ok` attempt
/// had reported, or touches a job those rows name.
#[test]
fn data_quality_builds_its_artifacts_reported_twice_again_only_for_a_write_that_changes_them() {
    use laneledger_query::derived::audits::data_quality::{Kept, build};
    use laneledger_query::tables::job_attempt::{AttemptCache, scan};
    let (_dir, ledger, mut rng, mut jobs) = random_ledger(0x0da7_a0a1, 3_000);
    let cache = AttemptCache::new(ledger.clone());
    let kept = Kept::new(std::sync::Arc::new(
        laneledger_query::derived::week_attempt::WeekColumn::default(),
    ));
    let check = |when: &str| {
        for week in [None, Some("2026-W46"), Some("2026-W47")] {
            let got = kept.rows(&ledger, &cache, week).unwrap();
            let whole = build(&ledger, &scan(&ledger).unwrap(), week).unwrap();
            assert_eq!(sorted_text(got), sorted_text(vec![whole]), "{when}, {week:?}");
        }
    };
    check("at first");
    assert_eq!(kept.twice_builds(), 1);
    // New jobs, each attempt with an artifact of its own: nothing to build again.
    let fresh: Vec<String> = new_jobs(&mut rng, &mut jobs, 20)
        .into_iter()
        .enumerate()
        .map(|(n, l)| l.replace("\"artifact_id\":\"art-", &format!("\"artifact_id\":\"new-{n}-")))
        .collect();
    ingest(&ledger, &fresh.join("\n"));
    check("after new jobs");
    assert_eq!(kept.twice_builds(), 1);
    // A new job reporting, ok, after every held attempt, an artifact an ok attempt of another
    // job reported.
    let held = ledger_rows(&ledger, "ok");
    let (job, art) = held
        .iter()
        .find(|(_, a)| a.is_some())
        .map(|(j, a)| (j.clone(), a.clone().unwrap()))
        .unwrap();
    ingest(
        &ledger,
        &format!(
            r#"{{"job_id":"again-{job}","idem_key":"again","attempt_no":1,"lane":"paid","started_at":"2026-11-28T10:00:00Z","ended_at":"2026-11-28T10:00:05Z","outcome":"ok","tokens_in":3,"tokens_out":4,"artifact_id":"{art}"}}"#
        ),
    );
    check("after an artifact reported again");
    assert_eq!(kept.twice_builds(), 2);
    // A retry of that job, with an artifact of its own: the job is named by a row, so its week
    // may have moved.
    ingest(
        &ledger,
        &format!(
            r#"{{"job_id":"again-{job}","idem_key":"again","attempt_no":2,"lane":"paid","started_at":"2026-11-09T10:00:00Z","ended_at":"2026-11-09T10:00:05Z","outcome":"ok","tokens_in":3,"tokens_out":4,"artifact_id":"own-{job}"}}"#
        ),
    );
    check("after the job's week moved");
    assert_eq!(kept.twice_builds(), 3);
}

/// Each attempt's (job_id, artifact_id) whose outcome is `outcome`, in key order.
fn ledger_rows(ledger: &Ledger, outcome: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    ledger
        .for_each_attempt(|a| {
            if a.attempt.outcome.map(|o| o.as_str()) == Some(outcome) {
                out.push((a.attempt.job_id, a.attempt.artifact_id));
            }
        })
        .unwrap();
    out
}

/// `key_rest_violation` kept by key equals, row for row and in order, the table built whole from
/// a snapshot, and a write builds again only the keys of the jobs it wrote to.
#[test]
fn key_rest_violation_builds_again_only_the_keys_of_the_jobs_a_write_touched() {
    use laneledger_query::derived::audits::{AuditSettings, Snapshot, by_group::ByGroup, refusals};
    use laneledger_query::tables::job_attempt::{AttemptCache, scan};
    let (_dir, ledger, _rng, _jobs) = random_ledger(0x6e57_0001, 3_000);
    let cache = AttemptCache::new(ledger.clone());
    let weeks = std::sync::Arc::new(laneledger_query::derived::week_attempt::WeekColumn::default());
    let kept = ByGroup::key_rests(AuditSettings::default(), weeks);
    let text = |batches: Vec<datafusion::arrow::array::RecordBatch>| {
        text_rows(&laneledger_query::QueryResult {
            schema: refusals::key_rest_schema(),
            batches,
        })
    };
    let check = |when: &str| {
        let snap = Snapshot::new(&scan(&ledger).unwrap()).unwrap();
        for week in [None, Some("2026-W44"), Some("2026-W45"), Some("2026-W46")] {
            let whole = refusals::key_rest_violation(&snap, &AuditSettings::default(), week).unwrap();
            assert_eq!(
                text(kept.rows(&cache, week).unwrap()),
                text(vec![whole]),
                "{when}, {week:?}"
            );
        }
    };
    check("at first");
    assert_eq!(kept.group_builds(), 4, "k-a to k-d");
    // A new job's one attempt, refused on k-a.
    ingest(
        &ledger,
        r#"{"job_id":"solo","idem_key":"solo","attempt_no":1,"lane":"free","started_at":"2026-11-12T10:00:00Z","ended_at":"2026-11-12T10:00:01Z","outcome":"retryable","http_status":429,"key_id":"k-a","pool_id":"pool-1"}"#,
    );
    check("after a new job on k-a");
    assert_eq!(kept.group_builds(), 5);
    // A job with a use flagged on one key gets an attempt on another key, logged late and started
    // a week before its others: its week moves, on the rows of both keys.
    let flagged = text(kept.rows(&cache, None).unwrap());
    let (job, key) = (flagged[0][3].clone(), flagged[0][1].clone());
    let held = ledger.job_attempts(&job).unwrap();
    let other = ["k-a", "k-b", "k-c", "k-d"].into_iter().find(|k| **k != key).unwrap();
    let first = held.iter().map(|a| a.attempt.started_at).min().unwrap();
    let no = held.iter().map(|a| a.attempt.attempt_no).max().unwrap() + 1;
    let at = laneledger_store::format_timestamp(first - 7 * 86_400 * 1_000_000);
    ingest(
        &ledger,
        &format!(
            r#"{{"job_id":"{job}","idem_key":"late","attempt_no":{no},"lane":"paid","started_at":"{at}","outcome":"ok","http_status":200,"key_id":"{other}","pool_id":"pool-2"}}"#
        ),
    );
    let keys: std::collections::BTreeSet<String> = ledger
        .job_attempts(&job)
        .unwrap()
        .into_iter()
        .filter_map(|a| a.attempt.key_id)
        .collect();
    check("after a late attempt moved a job's week");
    assert_eq!(kept.group_builds(), 5 + keys.len() as u64, "the job's keys {keys:?}");
}

/// `duplicate_reconciliation` kept by the writes equals, row for row and in order, the table built
/// whole, and is built again only after a write that gives an idem_key a second artifact or
/// touches a job its rows name.
#[test]
fn duplicate_reconciliation_is_built_again_only_when_a_key_gains_a_second_artifact() {
    use laneledger_query::derived::audits::{AuditSettings, Snapshot, reconcile};
    use laneledger_query::tables::job_attempt::{AttemptCache, scan};
    let (_dir, ledger, mut rng, mut jobs) = random_ledger(0x0ec0_0c11, 3_000);
    let cache = AttemptCache::new(ledger.clone());
    let kept = reconcile::Kept::new(AuditSettings::default());
    let text = |batches: Vec<datafusion::arrow::array::RecordBatch>| {
        text_rows(&laneledger_query::QueryResult {
            schema: reconcile::schema(),
            batches,
        })
    };
    let check = |when: &str| {
        let snap = Snapshot::new(&scan(&ledger).unwrap()).unwrap();
        for week in [None, Some("2026-W45"), Some("2026-W46")] {
            let whole = reconcile::build(&snap, &AuditSettings::default(), week).unwrap();
            assert_eq!(
                text(kept.rows(&cache, week).unwrap()),
                text(vec![whole]),
                "{when}, {week:?}"
            );
        }
    };
    check("at first");
    assert_eq!(kept.builds(), 1);
    // New jobs on keys of their own, every artifact of a key the same: no rows change.
    let fresh: Vec<String> = new_jobs(&mut rng, &mut jobs, 20)
        .into_iter()
        .map(|l| l.replace("-0\"", "-1\""))
        .collect();
    let own: Vec<String> = fresh
        .iter()
        .filter(|l| {
            let job = l.split("\"job_id\":\"").nth(1).unwrap().split('"').next().unwrap();
            l.contains(&format!("\"idem_key\":\"i-{job}\""))
        })
        .cloned()
        .collect();
    assert!(!own.is_empty());
    ingest(&ledger, &own.join("\n"));
    check("after new jobs");
    assert_eq!(kept.builds(), 1);
    // A second artifact under one of those keys, which had one.
    let with_artifact = own.iter().find(|l| l.contains("\"artifact_id\"")).unwrap();
    let key = with_artifact
        .split("\"idem_key\":\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    ingest(
        &ledger,
        &format!(
            r#"{{"job_id":"second-{key}","idem_key":"{key}","attempt_no":1,"lane":"paid","started_at":"2026-11-20T10:00:00Z","ended_at":"2026-11-20T10:00:05Z","outcome":"ok","tokens_in":3,"tokens_out":4,"artifact_id":"second"}}"#
        ),
    );
    check("after a second artifact");
    assert_eq!(kept.builds(), 2);
}

/// `pool_overload_episode` kept by pool equals, row for row and in order, the table built whole
/// from a snapshot, and a write builds again only the pools of the attempts it wrote.
#[test]
fn pool_overload_episodes_are_built_again_only_for_the_pools_a_write_changed() {
    use laneledger_query::derived::audits::{AuditSettings, Snapshot, by_group::ByGroup, refusals};
    use laneledger_query::tables::job_attempt::{AttemptCache, scan};
    let (_dir, ledger, _rng, _jobs) = random_ledger(0x0090_01ed, 3_000);
    let cache = AttemptCache::new(ledger.clone());
    let kept = ByGroup::pool_episodes(AuditSettings::default());
    let text = |batches: Vec<datafusion::arrow::array::RecordBatch>| {
        text_rows(&laneledger_query::QueryResult {
            schema: refusals::overload_schema(),
            batches,
        })
    };
    let check = |when: &str| {
        let snap = Snapshot::new(&scan(&ledger).unwrap()).unwrap();
        for week in [None, Some("2026-W45"), Some("2026-W46")] {
            let whole = refusals::pool_overload_episode(&snap, &AuditSettings::default(), week).unwrap();
            assert_eq!(
                text(kept.rows(&cache, week).unwrap()),
                text(vec![whole]),
                "{when}, {week:?}"
            );
        }
        assert!(!text(kept.rows(&cache, None).unwrap()).is_empty(), "{when}: episodes");
    };
    check("at first");
    assert_eq!(kept.group_builds(), 2, "pool-1 and pool-2");
    // Three keys of pool-1 overloaded inside a minute: a new episode, in pool-1 only.
    let lines: Vec<String> = ["k-a", "k-b", "k-x"]
        .iter()
        .enumerate()
        .map(|(n, key)| {
            format!(
                r#"{{"job_id":"burst-{n}","idem_key":"burst-{n}","attempt_no":1,"lane":"free","started_at":"2026-11-25T10:00:0{n}Z","ended_at":"2026-11-25T10:00:1{n}Z","outcome":"retryable","http_status":429,"provider_code":1305,"key_id":"{key}","pool_id":"pool-1"}}"#
            )
        })
        .collect();
    ingest(&ledger, &lines.join("\n"));
    check("after a burst in pool-1");
    assert_eq!(kept.group_builds(), 3);
    let rows = text(kept.rows(&cache, Some("2026-W48")).unwrap());
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        &rows[0][..6],
        [
            "2026-W48",
            "pool-1",
            "2026-11-25T10:00:10Z",
            "2026-11-25T10:00:12Z",
            "3",
            "3"
        ]
    );
    // An attempt of a key pool-1 has, with no 1305: no pool's episodes can change, none is built.
    ingest(
        &ledger,
        r#"{"job_id":"calm","idem_key":"calm","attempt_no":1,"lane":"free","started_at":"2026-11-25T10:00:05Z","ended_at":"2026-11-25T10:00:06Z","outcome":"retryable","http_status":429,"key_id":"k-a","pool_id":"pool-1"}"#,
    );
    check("after a plain attempt in pool-1");
    assert_eq!(kept.group_builds(), 3);
    // A key new to pool-2, with no 1305: the pool's count of keys (what overloads it) moves.
    ingest(
        &ledger,
        r#"{"job_id":"fresh-key","idem_key":"fresh-key","attempt_no":1,"lane":"free","started_at":"2026-11-25T11:00:00Z","key_id":"k-new","pool_id":"pool-2"}"#,
    );
    check("after a new key in pool-2");
    assert_eq!(kept.group_builds(), 4);
}

/// `week_rollup` kept by chunk equals the table built whole after writes that land inside one
/// chunk, give a held idem_key a second artifact, move a job a week earlier, and complete open
/// attempts; each write sums again only the chunks it changed.
#[test]
fn week_rollup_sums_again_only_the_chunks_a_write_changed() {
    use laneledger_query::derived::week_rollup::{Kept, week_rollup};
    use laneledger_query::tables::job_attempt::{AttemptCache, BATCH_ROWS, CHUNK_ROWS, scan};
    // More attempts than two chunks of the attempt cache hold.
    let (_dir, ledger, mut rng, mut jobs) = random_ledger(0x0eee_7011, 60_000);
    let cache = AttemptCache::new(ledger.clone());
    let kept = Kept::default();
    let check = |when: &str| {
        let got = kept.rows(&cache).unwrap();
        let whole = week_rollup(&scan(&ledger).unwrap()).unwrap();
        assert_eq!(sorted_text(got), sorted_text(whole), "{when}");
    };
    check("at first");
    let chunks = kept.chunk_builds();
    let attempts: usize = scan(&ledger).unwrap().iter().map(|b| b.num_rows()).sum();
    assert!(attempts > 2 * BATCH_ROWS, "{attempts} attempts");
    assert!(chunks >= 2, "{chunks} chunks");
    // The cache holds the scan's batches cut into chunks, which the kept tables build one by one.
    let scanned: Vec<usize> = scan(&ledger).unwrap().iter().map(|b| b.num_rows()).collect();
    assert!(scanned.iter().any(|&n| n > CHUNK_ROWS), "a batch to cut: {scanned:?}");
    let held: Vec<usize> = cache.chunks(&[0, 2]).unwrap().0.iter().map(|b| b.num_rows()).collect();
    assert!(held.iter().all(|&n| n <= CHUNK_ROWS), "{held:?}");
    assert_eq!(held.iter().sum::<usize>(), attempts);
    check("read again");
    assert_eq!(kept.chunk_builds(), chunks, "nothing changed");
    // One new job with a held job's idem_key and an artifact of its own: a duplicate if the held
    // job is in the same week, in one chunk.
    let held = &jobs[7];
    let line = format!(
        r#"{{"job_id":"{}-x","idem_key":"{}","attempt_no":1,"lane":"paid","started_at":"{}","ended_at":"{}","outcome":"ok","tokens_in":5,"tokens_out":6,"artifact_id":"second-artifact"}}"#,
        held.id,
        held.idem,
        at_s(held.start),
        at_s(held.start + 3)
    );
    ingest(&ledger, &line);
    check("after a second artifact under a held key");
    assert_eq!(kept.chunk_builds(), chunks + 1, "the one chunk the job fell in");
    // A late attempt a week before its job's others moves the job to the earlier week.
    let late = &jobs[11];
    let line = format!(
        r#"{{"job_id":"{}","idem_key":"{}","attempt_no":{},"lane":"free","started_at":"{}","ended_at":"{}","outcome":"ok","tokens_in":1,"tokens_out":1,"artifact_id":"late-artifact"}}"#,
        late.id,
        late.idem,
        late.attempts + 1,
        at_s(late.start - 7 * 86_400),
        at_s(late.start - 7 * 86_400 + 2)
    );
    ingest(&ledger, &line);
    check("after a job moved a week earlier");
    assert_eq!(kept.chunk_builds(), chunks + 2);
    // Random writes: new jobs, and the open attempts completed.
    let mut lines = new_jobs(&mut rng, &mut jobs, 40);
    for j in jobs.iter_mut().take(3_000) {
        if let Some(open) = j.open.take() {
            lines.push(ended(&mut rng, &open, &j.idem, j.start));
        }
    }
    ingest(&ledger, &lines.join("\n"));
    check("after new jobs and completions");
}
