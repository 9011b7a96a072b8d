//! Long work tells a `Progress` how far it has come: ingest after each batch, verify and the
//! retention sweep every few thousand rows and at the end of each stage, with exact counts.

use std::sync::Mutex;

use laneledger_store::progress::EVERY;
use laneledger_store::storage::retention::RetentionRule;
use laneledger_store::{InputFormat, Ledger, Progress, ingest_reader_with_progress, parse_timestamp};

/// Every call, in order: `stage NAME TOTAL` or the rows done.
#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl Progress for Log {
    fn stage(&self, name: &'static str, total: Option<u64>) {
        self.0.lock().unwrap().push(format!("stage {name} {total:?}"));
    }
    fn done(&self, rows: u64) {
        self.0.lock().unwrap().push(rows.to_string());
    }
}

impl Log {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// Job `i` (attempt 1, its own idempotency key): the first 5,000 ended in September, the rest
/// in late October.
fn line(i: u32) -> String {
    let day = if i < 5_000 { "2026-09-10" } else { "2026-10-28" };
    format!(
        r#"{{"job_id":"job-{i:05}","idem_key":"k-{i:05}","attempt_no":1,"lane":"free","started_at":"{day}T10:00:00Z","ended_at":"{day}T10:00:05Z","outcome":"ok"}}"#
    )
}

/// A stage of `total` rows reported every [`EVERY`] rows and at its end.
fn stage(name: &str, total: u64) -> Vec<String> {
    let mut v = vec![format!("stage {name} Some({total})")];
    v.extend((1..=total / EVERY).map(|k| (k * EVERY).to_string()));
    v.push(total.to_string());
    v
}

#[test]
fn ingest_verify_and_a_sweep_report_their_rows_exactly() {
    assert_eq!(EVERY, 4096);
    let dir = tempfile::tempdir().unwrap();
    let l = Ledger::open(dir.path().join("l.redb")).unwrap();
    let text: Vec<String> = (0..10_000).map(line).collect();
    let log = Log::default();
    let report = ingest_reader_with_progress(
        &l,
        "a.ndjson",
        text.join("\n").as_bytes(),
        InputFormat::Ndjson,
        3_000,
        &log,
    )
    .unwrap();
    assert_eq!(report.counters.accepted, 10_000);
    assert_eq!(log.take(), ["3000", "6000", "9000", "10000"]);

    let v = l.verify_with_progress(&log).unwrap();
    assert_eq!((v.entries, v.records), (10_000, 10_000));
    // The chain is counted a block at a time, and each commit above wrote a block of 3,000.
    let chain = ["stage chain Some(10000)", "6000", "10000"].map(String::from).to_vec();
    assert_eq!(log.take(), [chain, stage("records", 10_000)].concat());

    let now = parse_timestamp("2026-11-01T00:00:00Z").unwrap();
    let rule = RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    };
    let plan = l.plan_sweep_with_progress(now, rule, &log).unwrap();
    assert_eq!(plan.attempts.len(), 5_000);
    assert_eq!(
        log.take(),
        [stage("planning", 10_000), stage("idempotency keys", 10_000)].concat()
    );
    let record = l.commit_sweep_with_progress(&plan, None, &[], &log).unwrap().unwrap();
    assert_eq!(record.rows_removed, 5_000);
    assert_eq!(
        log.take(),
        [
            stage("checking the plan", 10_000),
            stage("checking idempotency keys", 10_000),
            vec!["stage removing Some(5000)".into(), "5000".into()],
        ]
        .concat()
    );

    // Nothing left to sweep: the plan reads the 5,000 attempts kept, and finds no key to check.
    l.plan_sweep_with_progress(now, rule, &log).unwrap();
    assert_eq!(log.take(), stage("planning", 5_000));
}

/// Opening a format 5 file packs its attempt rows into blocks, and says how far it has come;
/// opening a current file reports nothing.
#[test]
fn a_migration_reports_the_rows_it_packs() {
    use laneledger_store::storage::tables::META;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v5.redb");
    {
        let l = Ledger::open(&path).unwrap();
        let text: Vec<String> = (0..10_000).map(line).collect();
        laneledger_store::ingest_reader(
            &l,
            "a.ndjson",
            text.join("\n").as_bytes(),
            InputFormat::Ndjson,
            3_000,
            |_| {},
        )
        .unwrap();
        let txn = l.database().begin_write().unwrap();
        laneledger_store::storage::attempt_store::write_as_format_5(&txn).unwrap();
        txn.open_table(META).unwrap().insert("format_version", 5).unwrap();
        txn.commit().unwrap();
    }
    let log = Log::default();
    let l = Ledger::open_with_progress(&path, &log).unwrap();
    assert_eq!(l.migrated_from(), Some(5));
    // One fold round of up to 65,536 rows: counted when it starts, and again at the stage's end;
    // then the chain's 10,000 entries packed, block by block (of 3,000 entries, the batches), told
    // when 4,096 more are done and at the end.
    assert_eq!(
        log.take(),
        [
            "stage packing attempt rows Some(10000)",
            "10000",
            "10000",
            "stage packing the chain Some(10000)",
            "6000",
            "10000"
        ]
    );
    assert_eq!(l.attempt_count().unwrap(), 10_000);
    drop(l);
    let l = Ledger::open_with_progress(&path, &log).unwrap();
    assert_eq!((l.migrated_from(), log.take()), (None, Vec::<String>::new()));
}
