//! Summary first, rows after (issue 31): each audit section opens with its rows counted by what
//! matters for it, pages past its first 100 rows, and a job's findings gather every audit row
//! that names it.

mod common;

use laneledger_query::{Section, Session};
use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_reader};

/// The incident week of the key refusal sample.
const INCIDENT: &str = "2026-W42";

fn find<'a>(sections: &'a [Section], id: &str) -> &'a Section {
    sections
        .iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("no section {id}"))
}

/// A section's summary as (columns, rows), NULL as `—`.
fn summary(s: &Section) -> (Vec<String>, Vec<Vec<String>>) {
    let sum = s.summary.as_ref().unwrap_or_else(|| panic!("{} has no summary", s.id));
    let rows = sum
        .rows
        .iter()
        .map(|r| r.iter().map(|c| c.clone().unwrap_or_else(|| "—".into())).collect())
        .collect();
    (sum.columns.clone(), rows)
}

fn strings(rows: &[&[&str]]) -> Vec<Vec<String>> {
    rows.iter().map(|r| r.iter().map(|c| c.to_string()).collect()).collect()
}

async fn incident() -> (tempfile::TempDir, Session) {
    let (dir, ledger) = common::ledger_from(&["keys-incident-2026-10-17.ndjson", "drill-pin-2026-W48.ndjson"]);
    (dir, Session::new(ledger).await.unwrap())
}

#[tokio::test]
async fn the_incident_weeks_sections_open_with_exact_counts() {
    let (_d, s) = incident().await;
    let sections = s.audit_sections(INCIDENT).await.unwrap();

    let (cols, rows) = summary(find(&sections, "same_key_retry"));
    assert_eq!(cols, ["key_id", "pool_id", "model", "previous_kind", "retries", "jobs"]);
    assert_eq!(
        rows,
        strings(&[
            &["p2-key-9", "pool-2", "glm-4.6", "transient", "2", "1"],
            &["p1-key-17", "pool-1", "glm-4.6", "quota", "1", "1"],
        ])
    );
    let sum = find(&sections, "same_key_retry").summary.clone().unwrap();
    assert_eq!((sum.groups, sum.total_rows), (4, 2));
    assert_eq!(
        laneledger_query::review::sections::summary_groups(&sum),
        ["key_id", "pool_id", "model", "previous_kind"]
    );

    let (cols, rows) = summary(find(&sections, "key_rest_violation"));
    assert_eq!(
        cols,
        ["key_id", "pool_id", "model", "rest", "uses", "jobs", "most_early_s"]
    );
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][..6], ["p2-key-9", "pool-2", "glm-4.6", "rest", "2", "1"]);
    assert_eq!(rows[1][..6], ["p1-key-17", "pool-1", "glm-4.6", "long break", "1", "1"]);

    let (cols, rows) = summary(find(&sections, "pool_overload_episode"));
    assert_eq!(cols, ["pool_id", "episodes", "refusals_1305", "most_keys"]);
    assert_eq!(rows, strings(&[&["pool-2", "1", "16", "10"]]));

    let (cols, rows) = summary(find(&sections, "attempt_bound_exceeded"));
    assert_eq!(cols, ["last_outcome", "jobs", "attempts", "most_attempts"]);
    assert_eq!(rows, strings(&[&["ok", "1", "9", "9"]]));

    let (cols, rows) = summary(find(&sections, "outcome_mismatch"));
    assert_eq!(cols, ["reason", "error_kind", "model", "attempts", "jobs"]);
    assert_eq!(
        rows,
        strings(&[&[
            "a spent quota closes the key for the long break: not retryable on it",
            "quota",
            "glm-4.6",
            "2",
            "1"
        ]])
    );

    let (cols, rows) = summary(find(&sections, "lane_policy_violation"));
    assert_eq!(cols, ["kind", "reason", "model", "violations", "jobs"]);
    assert_eq!(
        rows,
        strings(&[&[
            "free_where_paid",
            "past the free budget: 2 of 2 free attempts used",
            "glm-4.6",
            "1",
            "1"
        ]])
    );

    // Refusals by kind, split by pool and model: 16 overload refusals and bee-9967's three on
    // pool-2, the rate-limited spin on both pools, the spent quota and the refused key on pool-1.
    let (cols, rows) = summary(find(&sections, "refusal_by_kind"));
    assert_eq!(cols, ["error_kind", "pool_id", "model", "attempts", "keys"]);
    assert_eq!(
        rows,
        strings(&[
            &["transient", "pool-2", "glm-4.6", "19", "10"],
            &["transient", "paid-pool", "glm-4.6-paid", "6", "4"],
            &["quota", "pool-1", "glm-4.6", "2", "1"],
            &["transient", "pool-1", "glm-4.6", "2", "2"],
            &["auth", "pool-1", "glm-4.6", "1", "1"],
        ])
    );

    // No duplicate in the week: no rows, no summary. A section that is itself a count has none.
    assert_eq!(find(&sections, "duplicate_reconciliation").summary, None);
    assert_eq!(find(&sections, "refusal_by_code").summary, None);

    // Each summary's SQL runs as is and gives the same groups.
    for sec in &sections {
        if let Some(sum) = &sec.summary {
            assert_eq!(
                s.query(&sum.sql).await.unwrap().num_rows(),
                sum.total_rows,
                "{}",
                sec.id
            );
        }
    }

    // The review's text shows the counts above the rows.
    let text = laneledger_query::section_text(find(&sections, "pool_overload_episode"));
    let counts = text.find("  In all, by pool_id:\n").expect(&text);
    let rows_at = text.find("  The rows:\n").expect(&text);
    assert!(counts < rows_at, "{text}");
    assert!(text.contains("    pool-2   1         16             10\n"), "{text}");
}

#[tokio::test]
async fn a_clean_week_has_no_summaries() {
    let (_d, s) = incident().await;
    let sections = s.audit_sections("2026-W48").await.unwrap();
    for id in [
        "same_key_retry",
        "key_rest_violation",
        "pool_overload_episode",
        "attempt_bound_exceeded",
        "outcome_mismatch",
        "duplicate_reconciliation",
    ] {
        let sec = find(&sections, id);
        assert_eq!((sec.total_rows, &sec.summary), (0, &None), "{id}");
    }
}

/// `n` jobs `skr-000`… each retried once on the key that had just refused it (one same-key
/// retry a job), the keys `k0`…`k4` in turn.
fn same_key_retries(n: usize) -> (tempfile::TempDir, Ledger) {
    let mut text = String::new();
    for i in 0..n {
        let key = format!("k{}", i % 5);
        for (no, (second, status, outcome)) in [(0, 429, "retryable"), (30, 200, "ok")].into_iter().enumerate() {
            text += &format!(
                r#"{{"job_id":"skr-{i:03}","idem_key":"idem-skr-{i:03}","attempt_no":{},"lane":"free","started_at":"2026-10-13T10:{:02}:{second:02}Z","ended_at":"2026-10-13T10:{:02}:{:02}Z","outcome":"{outcome}","http_status":{status},"provider_code":{},"key_id":"{key}","pool_id":"pool-a","model":"m-1"}}"#,
                no + 1,
                i % 60,
                i % 60,
                second + 1,
                if status == 429 { "1302" } else { "null" }
            );
            text.push('\n');
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("t.redb")).unwrap();
    let report = ingest_reader(
        &ledger,
        "skr",
        std::io::Cursor::new(text),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
    assert_eq!(report.counters.accepted, 2 * n as u64);
    (dir, ledger)
}

#[tokio::test]
async fn a_sections_pages_hold_exact_row_ranges() {
    let (_d, ledger) = same_key_retries(250);
    let s = Session::new(ledger).await.unwrap();
    let first = s.section_page(INCIDENT, "same_key_retry", 1).await.unwrap().unwrap();
    assert_eq!((first.page, first.pages, first.first_row), (1, 3, 0));
    assert_eq!(first.section.total_rows, 250);
    let jobs = |p: &laneledger_query::SectionPage| -> Vec<String> {
        p.section.rows.iter().map(|r| r[0].clone().unwrap()).collect()
    };
    let expect = |range: std::ops::Range<usize>| -> Vec<String> { range.map(|i| format!("skr-{i:03}")).collect() };
    assert_eq!(jobs(&first), expect(0..100));
    let second = s.section_page(INCIDENT, "same_key_retry", 2).await.unwrap().unwrap();
    assert_eq!((second.page, second.first_row), (2, 100));
    assert_eq!(jobs(&second), expect(100..200));
    let third = s.section_page(INCIDENT, "same_key_retry", 3).await.unwrap().unwrap();
    assert_eq!(jobs(&third), expect(200..250));
    // Past the last page, the last; the summary counts every row, not the page's.
    let past = s.section_page(INCIDENT, "same_key_retry", 40).await.unwrap().unwrap();
    assert_eq!((past.page, past.first_row), (3, 200));
    assert_eq!(jobs(&past), expect(200..250));
    let (_, rows) = summary(&past.section);
    assert_eq!(
        rows,
        (0..5)
            .map(|k| vec![
                format!("k{k}"),
                "pool-a".into(),
                "m-1".into(),
                "transient".into(),
                "50".into(),
                "50".into()
            ])
            .collect::<Vec<_>>()
    );
    // A section whose rows all fit is one page; an unknown section is none.
    let one = s
        .section_page(INCIDENT, "attempt_bound_exceeded", 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((one.page, one.pages, one.section.total_rows), (1, 1, 0));
    assert!(s.section_page(INCIDENT, "no_such_section", 1).await.unwrap().is_none());
    // A job of a cut section's later page is still found.
    let found = s.job_findings("skr-217", &[INCIDENT.to_string()]).await.unwrap();
    let same: Vec<_> = found.iter().filter(|f| f.section == "same_key_retry").collect();
    assert_eq!(same.len(), 1);
    assert_eq!(same[0].attempt_no.as_deref(), Some("2"));
    assert_eq!(
        same[0].words,
        "sent to key k2 right after that key refused the previous attempt (transient, HTTP 429, code 1302)"
    );
}

#[tokio::test]
async fn a_flagged_job_lists_its_findings_and_a_clean_one_none() {
    let (_d, s) = incident().await;
    let weeks = [INCIDENT.to_string()];
    let found = s.job_findings("bee-9967", &weeks).await.unwrap();
    let got: Vec<(&str, &str, Option<&str>)> = found
        .iter()
        .map(|f| (f.section, f.week.as_str(), f.attempt_no.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("lane_policy_violation", INCIDENT, Some("3")),
            ("same_key_retry", INCIDENT, Some("2")),
            ("same_key_retry", INCIDENT, Some("3")),
            ("key_rest_violation", INCIDENT, Some("2")),
            ("key_rest_violation", INCIDENT, Some("3")),
        ]
    );
    assert_eq!(
        found[0].words,
        "a free attempt where the lane policy answers paid: past the free budget: 2 of 2 free attempts used"
    );
    let spin = s.job_findings("bee-spin", &weeks).await.unwrap();
    assert_eq!(spin.len(), 1);
    assert_eq!(spin[0].section, "attempt_bound_exceeded");
    assert_eq!(spin[0].words, "9 attempts, past the bound of 8; the last ended ok");
    // A job of the overload episode whose retry went elsewhere, and a job of a clean week: none.
    assert_eq!(s.job_findings("bee-1408-01", &weeks).await.unwrap(), []);
    assert_eq!(
        s.job_findings("pin-job-000000", &["2026-W48".to_string()])
            .await
            .unwrap(),
        []
    );
}
