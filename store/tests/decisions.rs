//! SPEC 2's write rules for gate decisions (SPEC 1.2, seed 003) through the ledger API, on a real
//! redb file, and the attempts' input framing for decision files.

use laneledger_store::policy::gate::GateDecision;
use laneledger_store::{
    DEFAULT_BATCH, IncomingDecision, InputFormat, Ledger, WriteResult, decision_reader, ingest_decisions_reader,
    parse_timestamp,
};

const ADMIT: &str = r#"{"job_id":"j1","decided_at":"2026-11-23T09:00:00Z","queue_age_s":12,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"decision":"admit_free"}"#;
/// The same decision from a router in UTC+2, with the slack miss sent when the job ended.
const ADMIT_ENDED: &str = r#"{"job_id":"j1","decided_at":"2026-11-23T11:00:00+02:00","queue_age_s":12.0,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":90,"decision":"admit_free","slack_miss":true,"retry_count":1}"#;
const CHANGED: &str = r#"{"job_id":"j1","decided_at":"2026-11-23T09:00:00Z","queue_age_s":12,"expected_service_s":8,"retry_tax_s":0,"deadline_slack_s":90,"decision":"reserved","slack_miss":false}"#;
const STUCK: &str = r#"{"job_id":"j2","decided_at":"2026-11-23T09:01:00Z","queue_age_s":50,"expected_service_s":8,"retry_tax_s":8,"deadline_slack_s":40,"decision":"defer"}"#;

fn ingest_as(ledger: &Ledger, name: &str, text: &str, format: InputFormat) -> laneledger_store::IngestReport {
    ingest_decisions_reader(ledger, name, text.as_bytes(), format, DEFAULT_BATCH, |_| {}).unwrap()
}

fn ingest(ledger: &Ledger, name: &str, text: &str) -> laneledger_store::IngestReport {
    ingest_as(ledger, name, text, InputFormat::Ndjson)
}

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    (dir, ledger)
}

fn at(t: &str) -> i64 {
    parse_timestamp(t).unwrap()
}

#[test]
fn reingesting_a_decision_file_changes_no_row_and_counts_duplicate_deliveries() {
    let (_d, l) = ledger();
    let file = format!("{ADMIT}\n{STUCK}\n");
    let first = ingest(&l, "d.ndjson", &file);
    assert_eq!((first.counters.accepted, first.counters.duplicates), (2, 0));
    let before = l.job_decisions("j1").unwrap();
    let again = ingest(&l, "d.ndjson", &file);
    assert_eq!(
        again.counters.to_string(),
        "accepted 0, completed 0, duplicate deliveries 2, conflicts 0, rejected 0"
    );
    assert_eq!(l.job_decisions("j1").unwrap(), before);
    assert_eq!(l.decision_count().unwrap(), 2);
    assert_eq!(l.decision_counters().unwrap().duplicates, 2);
    // Decisions keep their own totals; the attempts' stay untouched.
    assert_eq!(l.counters().unwrap().accepted, 0);
    assert_eq!(l.attempt_count().unwrap(), 0);
}

#[test]
fn a_slack_miss_sent_later_completes_the_row_and_z_and_offset_are_one_identity() {
    let (_d, l) = ledger();
    let r = ingest(&l, "s", &format!("{ADMIT}\n{ADMIT_ENDED}\n"));
    assert_eq!((r.counters.accepted, r.counters.completed), (1, 1));
    assert_eq!(l.decision_count().unwrap(), 1);
    let row = l.decision("j1", at("2026-11-23T09:00:00Z")).unwrap().unwrap();
    assert_eq!(row.seq, 1);
    assert_eq!(row.decision.slack_miss, Some(true));
    assert_eq!(row.decision.retry_count, Some(1));
    assert_eq!(row.decision.decision, GateDecision::AdmitFree);
    // Sending the earlier record again (without slack_miss) is a duplicate, not a change.
    assert_eq!(ingest(&l, "s", ADMIT).counters.duplicates, 1);
}

#[test]
fn a_changed_field_gives_a_decision_conflict_naming_it_and_the_first_row_stays() {
    let (_d, l) = ledger();
    ingest(&l, "s", &format!("{ADMIT_ENDED}\n"));
    let r = ingest(&l, "late.ndjson", &format!("\n{CHANGED}\n"));
    assert_eq!(r.counters.conflicts, 1);
    assert_eq!(
        r.problems,
        [
            "late.ndjson:2: conflict: job j1 decision at 2026-11-23T09:00:00Z differs in retry_tax_s, decision, slack_miss; the first row stays"
        ]
    );
    let conflicts = l.decision_conflicts().unwrap();
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].fields, ["retry_tax_s", "decision", "slack_miss"]);
    assert_eq!(conflicts[0].raw, CHANGED);
    assert_eq!(
        (conflicts[0].line, conflicts[0].decided_at),
        (2, at("2026-11-23T09:00:00Z"))
    );
    let row = l.decision("j1", at("2026-11-23T09:00:00Z")).unwrap().unwrap();
    assert_eq!(row.decision.retry_tax_s, 8.0);
    assert_eq!(row.decision.decision, GateDecision::AdmitFree);
    assert_eq!(row.decision.slack_miss, Some(true));
    // Attempt conflicts are a separate table.
    assert!(l.conflicts().unwrap().is_empty());
}

#[test]
fn a_malformed_line_is_rejected_with_its_line_number_and_the_other_lines_land() {
    let (_d, l) = ledger();
    let bad_field = STUCK.replace("\"deadline_slack_s\":40", "\"deadline_slack_s\":\"forty\"");
    let r = ingest(
        &l,
        "mixed.ndjson",
        &format!("{ADMIT}\n{{\"job_id\": \n{bad_field}\n{STUCK}"),
    );
    assert_eq!((r.counters.accepted, r.counters.rejected), (2, 2));
    assert_eq!(r.problems.len(), 2);
    assert!(
        r.problems[0].starts_with("mixed.ndjson:2: bad JSON: EOF while parsing"),
        "{}",
        r.problems[0]
    );
    assert_eq!(
        r.problems[1],
        "mixed.ndjson:3: deadline_slack_s: expected a number, found a string"
    );
    let rejects = l.rejects().unwrap();
    assert_eq!(
        (rejects[0].source.as_str(), rejects[0].line, rejects[0].raw.as_str()),
        ("mixed.ndjson", 2, "{\"job_id\": ")
    );
    assert_eq!(rejects[1].field.as_deref(), Some("deadline_slack_s"));
    assert_eq!(l.decision_count().unwrap(), 2);
    assert_eq!(l.decision_counters().unwrap().rejected, 2);
}

#[test]
fn ndjson_framing_bom_crlf_blank_lines_and_no_final_newline() {
    let (_d, l) = ledger();
    let input = format!("\u{feff}{ADMIT}\r\n\r\n   \r\n{STUCK}");
    let r = ingest(&l, "f.ndjson", &input);
    assert_eq!(
        r.counters.to_string(),
        "accepted 2, completed 0, duplicate deliveries 0, conflicts 0, rejected 0"
    );
    let stuck = l.decision("j2", at("2026-11-23T09:01:00Z")).unwrap().unwrap().decision;
    assert_eq!(stuck.dwell_s(), 66.0);
    assert_eq!(stuck.expected_decision(30.0), GateDecision::Defer);
}

#[test]
fn csv_framing_bom_crlf_blank_lines_quoted_multiline_rows_and_no_final_newline() {
    let (_d, l) = ledger();
    let input = "\u{feff}job_id,decided_at,queue_age_s,expected_service_s,retry_tax_s,deadline_slack_s,decision,slack_miss,note\r\n\
                 j1,2026-11-23T09:00:00Z,12,8,8,90,admit_free,0,\"two\r\nlines\"\r\n\r\n\
                 j2,2026-11-23T11:01:00+02:00,50,8,8,40,defer,,plain\r\n\
                 j3,2026-11-23T09:02:00Z,10,8,8,-1,defer,maybe,x\r\n\
                 j4,2026-11-23T09:03:00Z,10,0,8,90,defer,1,\"a, b\"";
    let r = ingest_as(&l, "f.csv", input, InputFormat::Csv);
    assert_eq!((r.counters.accepted, r.counters.rejected), (3, 1));
    assert_eq!(
        r.problems,
        ["f.csv:6: slack_miss: expected true, false, 1 or 0, found \"maybe\""]
    );
    let j1 = l.job_decisions("j1").unwrap();
    assert_eq!(j1[0].decision.slack_miss, Some(false));
    assert_eq!(j1[0].decision.attrs.as_deref(), Some(r#"{"note":"two\nlines"}"#));
    let j2 = l.decision("j2", at("2026-11-23T09:01:00Z")).unwrap().unwrap();
    assert_eq!(j2.decision.slack_miss, None);
    let j4 = l.job_decisions("j4").unwrap();
    assert_eq!(j4[0].decision.slack_miss, Some(true));
    assert_eq!(j4[0].decision.attrs.as_deref(), Some(r#"{"note":"a, b"}"#));
}

#[test]
fn results_per_record_in_order_within_one_batch() {
    let (_d, l) = ledger();
    let text = format!("{ADMIT}\n{ADMIT}\n{ADMIT_ENDED}\n{CHANGED}\nnope\n");
    let batch: Vec<_> = decision_reader("b", text.as_bytes(), InputFormat::Ndjson)
        .map(|p| match p.unwrap() {
            laneledger_store::Framed::Record { line, raw, record } => IncomingDecision::Decision {
                source: "b".into(),
                line,
                raw,
                decision: record,
            },
            laneledger_store::Framed::Reject(r) => IncomingDecision::Reject(r),
        })
        .collect();
    let results = l.write_decisions(batch).unwrap();
    assert_eq!(results[0], WriteResult::Accepted);
    assert_eq!(results[1], WriteResult::Duplicate);
    assert_eq!(
        results[2],
        WriteResult::Completed {
            fields: vec!["retry_count".into(), "slack_miss".into()]
        }
    );
    assert!(matches!(&results[3], WriteResult::Conflict { fields } if fields.len() == 3));
    assert!(matches!(&results[4], WriteResult::Rejected { field: None, .. }));
}

#[test]
fn decisions_survive_a_reopen_beside_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    {
        let l = Ledger::open(&path).unwrap();
        ingest(&l, "s", &format!("{ADMIT}\n{STUCK}\n"));
    }
    let l = Ledger::open(&path).unwrap();
    assert_eq!(l.decision_count().unwrap(), 2);
    let mut jobs = Vec::new();
    l.for_each_decision(|d| jobs.push(d.decision.job_id)).unwrap();
    assert_eq!(jobs, ["j1", "j2"]);
    assert_eq!(l.decision_counters().unwrap().accepted, 2);
}
