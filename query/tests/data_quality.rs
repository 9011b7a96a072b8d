//! `data_quality`: one made case per kind, each found with its exact row and nothing else found;
//! clean drills give no row; the section, the alert and the free-lane p95 that leaves out an
//! impossible latency.

mod common;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Int64Type, TimestampMicrosecondType};
use laneledger_query::Session;
use laneledger_query::derived::audits::iso_week_of;
use laneledger_store::drill::Policy;
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, format_timestamp, ingest_decisions_reader, ingest_reader};

/// Monday 2026-11-23 00:00:00 UTC (ISO week 2026-W48), µs.
const W48: i64 = 1_795_392_000_000_000;

/// A timestamp `s` seconds after the fixture's Monday.
fn t(s: i64) -> String {
    format_timestamp(W48 + s * 1_000_000)
}

/// An attempt line: job, attempt_no, lane, start and end (seconds after Monday), outcome, extra
/// JSON members (tokens, artifact, …).
fn at(job: &str, no: u32, start_s: i64, end_s: i64, outcome: &str, extra: &str) -> String {
    format!(
        r#"{{"job_id":"{job}","idem_key":"k-{job}","attempt_no":{no},"lane":"free","started_at":"{}","ended_at":"{}","outcome":"{outcome}"{extra}}}"#,
        t(start_s),
        t(end_s)
    )
}

const TOKENS: &str = r#","tokens_in":500,"tokens_out":300"#;

fn art(id: &str) -> String {
    format!(r#"{TOKENS},"artifact_id":"{id}""#)
}

fn ingest(ledger: &Ledger, source: &str, lines: &[String]) -> (u64, u64) {
    let text = lines.join("\n");
    let r = ingest_reader(
        ledger,
        source,
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    (r.counters.conflicts, r.counters.rejected)
}

type Row = (String, String, Option<String>, Option<i64>, String);

async fn rows(s: &Session, sql: &str) -> Vec<Row> {
    let r = s.query(sql).await.unwrap();
    let mut out = Vec::new();
    for b in &r.batches {
        let text = |c: usize, i: usize| {
            let a = b.column(c).as_string::<i32>();
            a.is_valid(i).then(|| a.value(i).to_string())
        };
        let no = b.column(3).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.push((
                text(0, i).unwrap(),
                text(1, i).unwrap(),
                text(2, i),
                no.is_valid(i).then(|| no.value(i)),
                text(4, i).unwrap(),
            ));
        }
    }
    out
}

/// The first cell of the first row, a timestamp, µs.
async fn micros(s: &Session, sql: &str) -> i64 {
    let r = s.query(sql).await.unwrap();
    r.batches[0]
        .column(0)
        .as_primitive::<TimestampMicrosecondType>()
        .value(0)
}

fn row(week: &str, kind: &str, job: Option<&str>, no: Option<i64>, detail: &str) -> Row {
    (
        week.to_string(),
        kind.to_string(),
        job.map(str::to_string),
        no,
        detail.to_string(),
    )
}

const ALL: &str = "SELECT iso_week, kind, job_id, attempt_no, detail FROM data_quality ORDER BY iso_week, kind, job_id, attempt_no, detail";

#[tokio::test]
async fn each_kind_is_found_on_the_case_made_to_show_it_and_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("dq.redb")).unwrap();
    let cut = "logged ok with no artifact_id: perhaps a stream cut short and logged as a success";
    let (conflicts, rejects) = ingest(
        &ledger,
        "attempts.ndjson",
        &[
            // Clean: a retry, then the artifact.
            at("clean", 1, 0, 5, "retryable", TOKENS),
            at("clean", 2, 10, 20, "ok", &art("a-clean")),
            // Attempts 2 and 3 retried inside the router, never logged.
            at("gap", 1, 0, 5, "retryable", TOKENS),
            at("gap", 4, 30, 40, "ok", &art("a-gap")),
            // The first attempt logged is the second.
            at("late", 2, 0, 10, "ok", &art("a-late")),
            // One artifact, reported by two attempts of the job.
            at("twin", 1, 0, 10, "ok", &art("a-twin")),
            at("twin", 2, 15, 20, "ok", r#","tokens_in":900,"tokens_out":350,"artifact_id":"a-twin""#),
            // Not a finding: an ambiguous attempt whose late completion carries the artifact its
            // retry got back under the same key (the reconcile at work).
            at("recon", 1, 0, 300, "ambiguous", &art("a-recon")),
            at("recon", 2, 40, 100, "ok", &art("a-recon")),
            // A stream cut short and logged ok: no artifact; no tokens_out; tokens_out 0.
            at("cut", 1, 0, 10, "ok", TOKENS),
            at("nout", 1, 0, 10, "ok", r#","tokens_in":500,"artifact_id":"a-nout""#),
            at("zout", 1, 0, 10, "ok", r#","tokens_in":500,"tokens_out":0,"artifact_id":"a-zout""#),
            // Ended 12.5 s before it started.
            format!(
                r#"{{"job_id":"back","idem_key":"k-back","attempt_no":1,"lane":"free","started_at":"{}","ended_at":"{}","outcome":"ok"{}}}"#,
                t(100),
                format_timestamp(W48 + 87_500_000),
                art("a-back")
            ),
            // Started long after the ledger took it: a clock far ahead.
            r#"{"job_id":"future","idem_key":"k-future","attempt_no":1,"lane":"free","started_at":"2099-01-05T00:00:00Z","ended_at":"2099-01-05T00:00:10Z","outcome":"ok","tokens_in":500,"tokens_out":300,"artifact_id":"a-future"}"#.to_string(),
            // Keyed by the request id, a declared fallback, on two attempts.
            r#"{"job_id":"fb","idem_key":"fallback:trace-7","attempt_no":1,"lane":"free","started_at":"2026-11-23T00:00:00Z","ended_at":"2026-11-23T00:00:05Z","outcome":"retryable","tokens_in":500,"tokens_out":300}"#.to_string(),
            r#"{"job_id":"fb","idem_key":"fallback:trace-7","attempt_no":2,"lane":"free","started_at":"2026-11-23T00:00:10Z","ended_at":"2026-11-23T00:00:20Z","outcome":"ok","tokens_in":500,"tokens_out":300,"artifact_id":"a-fb"}"#.to_string(),
            // An artifact first reported in the week before, reported again in this one.
            at("prior", 1, -86_400, -86_390, "ok", &art("a-cross")),
            at("again", 1, 50, 60, "ok", &art("a-cross")),
        ]
        .into_iter()
        // Enough clean jobs for the week's ratios to count (alerts.min_jobs).
        .chain((0..12).map(|i| at(&format!("fine-{i:02}"), 1, 200 + i, 210 + i, "ok", &art(&format!("a-fine-{i:02}")))))
        .collect::<Vec<_>>(),
    );
    assert_eq!((conflicts, rejects), (0, 0));
    // The same attempt sent again with other tokens (a conflict), and a line without a UTC offset.
    let (conflicts, rejects) = ingest(
        &ledger,
        "resent.ndjson",
        &[
            at("clean", 2, 10, 20, "ok", r#","tokens_in":500,"tokens_out":301,"artifact_id":"a-clean""#),
            r#"{"job_id":"naive","idem_key":"k-naive","attempt_no":3,"lane":"free","started_at":"2026-11-23T00:00:00"}"#
                .to_string(),
        ],
    );
    assert_eq!((conflicts, rejects), (1, 1));
    let decision = |age: u32| {
        format!(
            r#"{{"job_id":"clean","decided_at":"{}","queue_age_s":{age},"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"decision":"admit_free","retry_count":0}}"#,
            t(0)
        )
    };
    for (source, age) in [("decisions.ndjson", 12), ("decisions-again.ndjson", 13)] {
        let line = decision(age);
        ingest_decisions_reader(
            &ledger,
            source,
            line.as_bytes(),
            InputFormat::Ndjson,
            DEFAULT_BATCH,
            |_| {},
        )
        .unwrap();
    }
    let s = Session::new(ledger).await.unwrap();

    // The times the ledger set: when the future attempt was taken, when the conflicts and the
    // reject arrived (the week they count in).
    let ingested = micros(&s, "SELECT ingested_at FROM job_attempt WHERE job_id = 'future'").await;
    let conflict_at = micros(&s, "SELECT received_at FROM attempt_conflict").await;
    let decision_at = micros(&s, "SELECT received_at FROM decision_conflict").await;
    let reject_at = micros(&s, "SELECT received_at FROM ingest_reject").await;
    let started = laneledger_store::parse_timestamp("2099-01-05T00:00:00Z").unwrap();
    let ahead = laneledger_query::format_ratio(Some((started - ingested) as f64 / 1e6), 1);

    let w48 = "2026-W48";
    let mut expected = vec![
        row(
            w48,
            "artifact_reported_twice",
            Some("again"),
            Some(1),
            "artifact a-cross was already reported by job prior attempt 1; this attempt's 800 tokens are counted a second time",
        ),
        row(
            w48,
            "artifact_reported_twice",
            Some("twin"),
            Some(2),
            "artifact a-twin was already reported by job twin attempt 1; this attempt's 1,250 tokens are counted a second time",
        ),
        row(
            w48,
            "attempt_number_gap",
            Some("gap"),
            Some(4),
            "attempt 4 follows attempt 1: attempts 2–3 were never logged, perhaps retried inside the router's SDK; no row is made up for them",
        ),
        row(
            w48,
            "attempt_number_gap",
            Some("late"),
            Some(2),
            "the job's first logged attempt is attempt 2: attempt 1 was never logged, perhaps retried inside the router's SDK; no row is made up for them",
        ),
        row(
            w48,
            "ended_before_started",
            Some("back"),
            Some(1),
            "ended_at 2026-11-23T00:01:27.500000Z is 12.5 s before started_at 2026-11-23T00:01:40Z; its latency is left out of the latency percentiles",
        ),
        row(
            w48,
            "fallback_idem_key",
            Some("fb"),
            Some(1),
            "the idempotency key fallback:trace-7 came from the request id (a declared fallback), on 2 attempts: retries the client sent as new requests cannot be seen as duplicates",
        ),
        row(w48, "ok_without_artifact", Some("cut"), Some(1), cut),
        row(
            w48,
            "ok_without_tokens_out",
            Some("nout"),
            Some(1),
            "logged ok with tokens_out 0 or none sent: perhaps a stream cut short and logged as a success",
        ),
        row(
            w48,
            "ok_without_tokens_out",
            Some("zout"),
            Some(1),
            "logged ok with tokens_out 0 or none sent: perhaps a stream cut short and logged as a success",
        ),
        row(
            "2099-W02",
            "started_after_ingest",
            Some("future"),
            Some(1),
            &format!(
                "started_at 2099-01-05T00:00:00Z is {ahead} s after the ledger took the attempt's first record ({})",
                format_timestamp(ingested)
            ),
        ),
        row(
            &iso_week_of(conflict_at),
            "conflict_received",
            Some("clean"),
            Some(2),
            &format!(
                "line 1 of resent.ndjson, received {}, disagreed with the attempt in force on tokens_out; kept as conflict 1, the attempt unchanged",
                format_timestamp(conflict_at)
            ),
        ),
        row(
            &iso_week_of(decision_at),
            "decision_conflict_received",
            Some("clean"),
            None,
            &format!(
                "line 1 of decisions-again.ndjson, received {}, disagreed with the gate decision in force (decided 2026-11-23T00:00:00Z) on queue_age_s; kept as decision conflict 1, the decision unchanged",
                format_timestamp(decision_at)
            ),
        ),
        row(
            &iso_week_of(reject_at),
            "reject_received",
            Some("naive"),
            Some(3),
            &format!(
                "line 2 of resent.ndjson, received {}, could not be read (started_at: timestamp has no UTC offset (add Z or +HH:MM)); kept as reject 1",
                format_timestamp(reject_at)
            ),
        ),
    ];
    expected.sort();
    assert_eq!(rows(&s, ALL).await, expected);

    // One week's rows, as the review asks for them, are the whole table's rows of that week: the
    // artifact first reported the week before is still found.
    let w48_rows: Vec<Row> = expected.iter().filter(|r| r.0 == w48).cloned().collect();
    assert_eq!(w48_rows.len(), 9);
    let one_week = format!(
        "SELECT iso_week, kind, job_id, attempt_no, detail FROM data_quality WHERE iso_week = '{w48}' ORDER BY iso_week, kind, job_id, attempt_no, detail"
    );
    assert_eq!(rows(&s, &one_week).await, w48_rows);
    // The week before has the first report of a-cross, which is no finding.
    assert_eq!(
        rows(
            &s,
            "SELECT iso_week, kind, job_id, attempt_no, detail FROM data_quality WHERE iso_week = '2026-W47'"
        )
        .await,
        []
    );

    // The free-lane p95 leaves out the attempt that ended before it started, and says so.
    let bet = s
        .query("SELECT free_latency_left_out, free_p95_latency_s FROM free_lane_bet WHERE iso_week = '2026-W48'")
        .await
        .unwrap();
    let b = &bet.batches[0];
    assert_eq!(b.column(0).as_primitive::<Int64Type>().value(0), 1);
    let p95 = b
        .column(1)
        .as_primitive::<datafusion::arrow::datatypes::Float64Type>()
        .value(0);
    assert!(p95 > 0.0, "{p95}");

    // The alert: 9 findings in 2026-W48's 28 attempts.
    let review = s.review(Some(w48), &s.thresholds()).await.unwrap();
    let dq = review
        .alerts
        .iter()
        .find(|a| a.metric == "data_quality_findings_per_100_attempts")
        .unwrap();
    assert_eq!((review.week.jobs, review.week.free_attempts), (23, 28));
    assert_eq!(dq.value, Some(100.0 * 9.0 / 28.0));
    assert_eq!(dq.threshold, 1.0);
    assert_eq!(dq.state.as_str(), "alert");
    assert_eq!(dq.section, "data_quality");
    assert!(dq.detail.starts_with("9 data quality findings"), "{}", dq.detail);

    // The week page's section: the counts by kind, then the rows.
    let sections = s.audit_sections(w48).await.unwrap();
    let section = sections.iter().find(|x| x.id == "data_quality").unwrap();
    assert_eq!(section.columns, ["kind", "job_id", "attempt_no", "detail"]);
    assert_eq!(section.total_rows, 9);
    let mut by_kind: Vec<Vec<Option<String>>> = w48_rows
        .iter()
        .map(|r| {
            vec![
                Some(r.1.clone()),
                r.2.clone(),
                r.3.map(|n| n.to_string()),
                Some(r.4.clone()),
            ]
        })
        .collect();
    by_kind.sort();
    assert_eq!(section.rows, by_kind);
    let summary = section.summary.as_ref().unwrap();
    assert_eq!(summary.columns, ["kind", "findings", "jobs"]);
    let counts: Vec<Vec<Option<String>>> = [
        ("artifact_reported_twice", "2", "2"),
        ("attempt_number_gap", "2", "2"),
        ("ok_without_tokens_out", "2", "2"),
        ("ended_before_started", "1", "1"),
        ("fallback_idem_key", "1", "1"),
        ("ok_without_artifact", "1", "1"),
    ]
    .iter()
    .map(|(k, n, j)| vec![Some(k.to_string()), Some(n.to_string()), Some(j.to_string())])
    .collect();
    assert_eq!(summary.rows, counts);
    // The job page says why the job was flagged.
    let findings = s.job_findings("gap", &[w48.to_string()]).await.unwrap();
    let said: Vec<(&str, Option<&str>, &str)> = findings
        .iter()
        .map(|f| (f.section, f.attempt_no.as_deref(), f.words.as_str()))
        .collect();
    assert_eq!(
        said,
        [(
            "data_quality",
            Some("4"),
            "attempt number gap: attempt 4 follows attempt 1: attempts 2–3 were never logged, perhaps retried inside the router's SDK; no row is made up for them"
        )]
    );
    let bet = sections.iter().find(|x| x.id == "free_lane_bet").unwrap();
    let measured = bet.rows[0][1].as_deref().unwrap();
    assert!(
        measured.ends_with(" (1 attempt that ended before it started left out)"),
        "{measured}"
    );
}

#[tokio::test]
async fn clean_drills_have_no_finding() {
    let (_d, ledger) = common::ledger_from(&["drill-pin-2026-W48.ndjson", "drill-nopin-2026-W47.ndjson"]);
    let s = Session::new(ledger).await.unwrap();
    assert_eq!(rows(&s, ALL).await, []);
    let review = s.review(Some("2026-W48"), &s.thresholds()).await.unwrap();
    let dq = review
        .alerts
        .iter()
        .find(|a| a.metric == "data_quality_findings_per_100_attempts")
        .unwrap();
    assert_eq!((dq.value, dq.state.as_str()), (Some(0.0), "pass"));
    let bet = s
        .query("SELECT free_latency_left_out FROM free_lane_bet WHERE iso_week = '2026-W48'")
        .await
        .unwrap();
    assert_eq!(bet.batches[0].column(0).as_primitive::<Int64Type>().value(0), 0);

    let (_d, ledger) = common::ledger_from_drill(2_000, Policy::Pin, 7);
    let s = Session::new(ledger).await.unwrap();
    assert_eq!(rows(&s, ALL).await, []);
}
