//! Opening a ledger file that cannot be written (read-only), or whose pages are damaged.

use std::path::Path;

use laneledger_store::{DEFAULT_BATCH, Error, InputFormat, Ledger, ingest_reader, now_micros};

const ATTEMPTS: &str = r#"{"job_id":"j1","idem_key":"k1","attempt_no":1,"lane":"free","started_at":"2026-11-23T00:00:00Z","ended_at":"2026-11-23T00:00:05Z","outcome":"ok","tokens_in":500,"tokens_out":300,"artifact_id":"a1","key_id":"free-key-01"}
{"job_id":"j2","idem_key":"k2","attempt_no":1,"lane":"free","started_at":"2026-11-23T00:01:00Z","ended_at":"2026-11-23T00:01:02Z","outcome":"retryable","http_status":429,"key_id":"free-key-02"}
{"job_id":"j2","idem_key":"k2","attempt_no":2,"lane":"paid","started_at":"2026-11-23T00:01:10Z","ended_at":"2026-11-23T00:01:20Z","outcome":"ok","tokens_in":500,"tokens_out":300,"artifact_id":"a2","key_id":"paid-key-01"}
"#;

fn build(path: &Path, text: &str) {
    let ledger = Ledger::open(path).unwrap();
    ingest_reader(
        &ledger,
        "a.ndjson",
        text.as_bytes(),
        InputFormat::Ndjson,
        DEFAULT_BATCH,
        |_| {},
    )
    .unwrap();
}

#[test]
fn a_ledger_opened_read_only_answers_every_read_and_refuses_every_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    build(&path, ATTEMPTS);
    let (attempts, counters, report) = {
        let l = Ledger::open(&path).unwrap();
        assert!(!l.is_read_only());
        (
            l.job_attempts("j2").unwrap(),
            l.counters().unwrap(),
            l.verify().unwrap(),
        )
    };
    let l = Ledger::open_read_only(&path).unwrap();
    assert!(l.is_read_only());
    assert_eq!(l.job_attempts("j2").unwrap(), attempts);
    assert_eq!(l.attempts_by_idem_key("k2").unwrap(), attempts);
    assert_eq!(l.counters().unwrap(), counters);
    let again = l.verify().unwrap();
    assert_eq!((&again.tip, again.entries, &again.first_bad), (&report.tip, 3, &None));
    let read_only = |e: Error| matches!(e, Error::ReadOnly(p) if p == path);
    assert!(read_only(l.record_verify(now_micros(), &again).unwrap_err()));
    let more = ingest_reader(&l, "b.ndjson", ATTEMPTS.as_bytes(), InputFormat::Ndjson, 10, |_| {});
    let e = more.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "ledger {} is open read-only (the file cannot be written), so it takes no writes",
            path.display()
        )
    );
    assert!(read_only(e));
    drop(l);
    assert_eq!(
        Ledger::open(&path).unwrap().counters().unwrap(),
        counters,
        "nothing was written"
    );
}

/// Breaks every B-tree leaf page that holds `needle`: its entry count becomes 65,535, so reading
/// the page indexes past its end.
fn damage_leaves(path: &Path, needle: &[u8]) -> usize {
    let mut bytes = std::fs::read(path).unwrap();
    let mut damaged = 0;
    for page in bytes.chunks_mut(4096) {
        if page[0] == 1 && page.windows(needle.len()).any(|w| w == needle) {
            page[2..4].copy_from_slice(&[0xff, 0xff]);
            damaged += 1;
        }
    }
    std::fs::write(path, bytes).unwrap();
    damaged
}

#[test]
fn a_checked_open_reports_damaged_pages_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    build(&path, ATTEMPTS);
    assert!(Ledger::open_checked(&path).unwrap().verify().unwrap().is_clean());
    // The `counter` table's leaf (the attempt rows are packed, so no text of theirs shows).
    assert!(damage_leaves(&path, b"attempt_block_rows") > 0);
    match Ledger::open_checked(&path) {
        Err(Error::Damaged(reason)) => assert!(!reason.is_empty()),
        other => panic!("{other:?}"),
    }
}

/// `compact` needs the only handle of a writable file: a clone alive or a read-only open refuses,
/// and a compacted ledger holds the same attempts and chain.
#[test]
fn compact_refuses_a_shared_or_read_only_ledger_and_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    build(&path, ATTEMPTS);
    let l = Ledger::open(&path).unwrap();
    let (attempts, report) = (l.job_attempts("j2").unwrap(), l.verify().unwrap());
    let clone = l.clone();
    assert!(matches!(l.compact().unwrap_err(), Error::AlreadyOpen(p) if p == path));
    // The refused call closed its handle; the clone still reads.
    assert_eq!(clone.job_attempts("j2").unwrap(), attempts);
    clone.compact().unwrap();
    let l = Ledger::open_read_only(&path).unwrap();
    assert!(matches!(l.compact().unwrap_err(), Error::ReadOnly(p) if p == path));
    let l = Ledger::open(&path).unwrap();
    assert_eq!(l.job_attempts("j2").unwrap(), attempts);
    let again = l.verify().unwrap();
    assert_eq!((&again.tip, again.entries, &again.first_bad), (&report.tip, 3, &None));
}
