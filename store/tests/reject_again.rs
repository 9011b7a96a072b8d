//! A bad line delivered again (the same file ingested twice) is reported again but kept once in
//! `ingest_reject`, and counted in the ledger's totals as a duplicate delivery.

use laneledger_store::{DEFAULT_BATCH, InputFormat, Ledger, ingest_decisions_reader, ingest_reader};

const GOOD: &str =
    r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-16T09:00:00Z"}"#;
const BAD: &str = r#"{"job_id":"j2","idem_key":"k2","attempt_no":1,"lane":"slow","started_at":"2026-11-16T09:00:00Z"}"#;

fn ledger() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path().join("l.redb")).unwrap();
    (dir, ledger)
}

fn ingest(ledger: &Ledger, name: &str, text: &str) -> laneledger_store::IngestReport {
    ingest_reader(
        ledger,
        name,
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap()
}

#[test]
fn the_same_bad_line_ingested_twice_is_kept_once() {
    let (_d, l) = ledger();
    let file = format!("{GOOD}\n{BAD}\n");
    let first = ingest(&l, "a.ndjson", &file);
    assert_eq!(
        first.counters.to_string(),
        "accepted 1, completed 0, duplicate deliveries 0, conflicts 0, rejected 1"
    );
    assert_eq!(first.problems, ["a.ndjson:2: lane: \"slow\" is not free or paid"]);

    let again = ingest(&l, "a.ndjson", &file);
    // Still a bad line, so still reported (and ingest still exits 3), with where it is kept.
    assert_eq!(
        again.counters.to_string(),
        "accepted 0, completed 0, duplicate deliveries 1, conflicts 0, rejected 1"
    );
    assert_eq!(
        again.problems,
        ["a.ndjson:2: lane: \"slow\" is not free or paid (delivered again: kept once, as ingest_reject 1)"]
    );
    let rejects = l.rejects().unwrap();
    assert_eq!(rejects.len(), 1);
    assert_eq!((rejects[0].source.as_str(), rejects[0].line), ("a.ndjson", 2));
    // The ledger's totals: one reject kept, the second delivery of it and of the good line counted
    // as duplicate deliveries.
    let totals = l.counters().unwrap();
    assert_eq!((totals.accepted, totals.duplicates, totals.rejected), (1, 2, 1));
    l.verify().unwrap();
}

#[test]
fn the_same_raw_text_from_another_source_or_line_is_a_new_reject() {
    let (_d, l) = ledger();
    ingest(&l, "a.ndjson", &format!("{BAD}\n"));
    ingest(&l, "b.ndjson", &format!("{BAD}\n"));
    ingest(&l, "a.ndjson", &format!("{GOOD}\n{BAD}\n"));
    let other = ingest(&l, "c.ndjson", &format!("{BAD}\n"));
    assert_eq!((other.counters.duplicates, other.counters.rejected), (0, 1));
    let rejects: Vec<(String, u64)> = l.rejects().unwrap().into_iter().map(|r| (r.source, r.line)).collect();
    assert_eq!(
        rejects,
        [
            ("a.ndjson".to_string(), 1),
            ("b.ndjson".to_string(), 1),
            ("a.ndjson".to_string(), 2),
            ("c.ndjson".to_string(), 1),
        ]
    );
}

#[test]
fn a_bad_decision_line_ingested_twice_is_kept_once() {
    let (_d, l) = ledger();
    let bad = r#"{"job_id":"j1","decided_at":"2026-11-16T09:00:00Z","decision":"maybe"}"#;
    let text = format!("{bad}\n");
    for _ in 0..2 {
        ingest_decisions_reader(
            &l,
            "d.ndjson",
            text.as_bytes(),
            InputFormat::Ndjson,
            DEFAULT_BATCH,
            |_| {},
        )
        .unwrap();
    }
    assert_eq!(l.rejects().unwrap().len(), 1);
    let totals = l.decision_counters().unwrap();
    assert_eq!((totals.duplicates, totals.rejected), (1, 1));
    l.verify().unwrap();
}
