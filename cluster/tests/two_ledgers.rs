//! Two ledgers' data read together on the cluster equal one ledger holding both: ledger A, part of
//! which a retention sweep moved to its archive, and ledger B, each exported to its own folder;
//! `--data` takes A's export, A's archive root and B's export.

mod common;

use common::*;
use laneledger_query::Session;
use laneledger_query::archive::retention::{SweepOptions, SweepOutcome, sweep};
use laneledger_store::storage::retention::{DAY_MICROS, RetentionRule};

#[test]
fn two_ledgers_and_an_archive_equal_one_ledger_holding_both() {
    on_runtime(two_ledgers_and_an_archive_equal_one_ledger_holding_both_body())
}

async fn two_ledgers_and_an_archive_equal_one_ledger_holding_both_body() {
    let dir = tempfile::tempdir().unwrap();
    let a = drill_attempts("a-", 11, 900);
    let b = drill_attempts("b-", 12, 900);
    let both: Vec<_> = a.iter().chain(&b).cloned().collect();
    let ledger_a = ledger_with(&dir.path().join("a.redb"), &a);
    let ledger_b = ledger_with(&dir.path().join("b.redb"), &b);
    let ledger_ab = ledger_with(&dir.path().join("ab.redb"), &both);

    // Sweep A 36 days after its first job with 30 days kept: its first days go to the archive.
    let session_a = Session::new(ledger_a.clone()).await.unwrap();
    let now = laneledger_store::parse_timestamp(START).unwrap() + 36 * DAY_MICROS;
    let mut opts = SweepOptions::new(RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    });
    let archive = dir.path().join("archive-a");
    opts.archive = Some(archive.clone());
    let SweepOutcome::Swept { record, .. } = sweep(&session_a, now, &opts).await.unwrap() else {
        panic!("the sweep ran")
    };
    assert!(
        record.rows_removed > 0 && record.rows_removed < a.len() as u64,
        "{record:?}"
    );

    let export_a = dir.path().join("export-a");
    let export_b = dir.path().join("export-b");
    let rows_a = export(&ledger_a, &export_a);
    assert_eq!(rows_a + record.rows_removed, a.len() as u64);
    assert_eq!(export(&ledger_b, &export_b), b.len() as u64);

    let folders = laneledger_cluster::data_folders(&[export_a.clone(), archive.clone(), export_b.clone()]).unwrap();
    assert_eq!(folders, vec![export_a, archive.join("sweep-000001"), export_b]);

    let session_ab = Session::new(ledger_ab).await.unwrap();
    let url = in_process_cluster(dir.path()).await;
    let ctx = laneledger_cluster::connect(&url, &folders, true).await.unwrap();
    let verdicts = tokio::time::timeout(
        QUERY_LIMIT,
        laneledger_cluster::differential(&ctx, |sql| embedded(&session_ab, sql)),
    )
    .await
    .expect("the differential finished in time")
    .unwrap();
    // weekly_metrics runs over one ledger's export only; gate_weekly over both (no decisions).
    assert_all_same(
        &verdicts,
        &["gate_weekly"],
        "A's export + A's archive + B's export against one ledger holding A and B",
    );
    assert_eq!((verdicts[2].name, verdicts[2].rows), ("job_rollup", 1_800));
}
