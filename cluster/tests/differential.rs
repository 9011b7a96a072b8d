//! The differential in one process: a Ballista scheduler and 2 executors (laneledger's own
//! `run_scheduler`/`run_executor`, on loopback), against the embedded session on the same ledger
//! and its Parquet export: seed 000's two queries, job_rollup, week_rollup, duplicate_artifact and a
//! per-day rollup, with adaptive planning on and off; weekly_metrics and gate_weekly over the
//! ledger's exported tables (gate decisions, a sweep's week snapshots). Also the refusals, which
//! need no cluster.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;
use laneledger_query::Session;
use laneledger_query::archive::retention::{SweepOptions, SweepOutcome, sweep};
use laneledger_store::storage::retention::RetentionRule;

/// Jobs in the drill: about 2,000 attempts over 12 days.
const JOBS: usize = 1_500;

#[test]
fn cluster_answers_equal_the_embedded_session() {
    on_runtime(cluster_answers_equal_the_embedded_session_body())
}

async fn cluster_answers_equal_the_embedded_session_body() {
    let dir = tempfile::tempdir().unwrap();
    let attempts = drill_attempts("g-", 7, JOBS);
    let ledger = ledger_with(&dir.path().join("l.redb"), &attempts);
    let export_dir = dir.path().join("export");
    assert_eq!(export(&ledger, &export_dir), attempts.len() as u64);
    let session = Session::new(ledger).await.unwrap();

    // What the data holds, counted here without SQL: idempotency keys with more than one artifact.
    let mut artifacts: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for a in &attempts {
        if let Some(art) = &a.artifact_id {
            artifacts.entry(&a.idem_key).or_default().insert(art);
        }
    }
    let duplicated_keys = artifacts.values().filter(|s| s.len() > 1).count();
    assert!(duplicated_keys > 0, "the no-pin drill writes duplicate artifacts");

    let url = in_process_cluster(dir.path()).await;
    let folders = laneledger_cluster::data_folders(std::slice::from_ref(&export_dir)).unwrap();
    for adaptive in [true, false] {
        let ctx = laneledger_cluster::connect(&url, &folders, adaptive).await.unwrap();
        let verdicts = tokio::time::timeout(
            QUERY_LIMIT,
            laneledger_cluster::differential(&ctx, |sql| embedded(&session, sql)),
        )
        .await
        .expect("the differential finished in time")
        .unwrap();
        // The export holds the ledger's tables (no decisions, no sweep here): both ledger views run.
        assert_all_same(
            &verdicts,
            &["weekly_metrics", "gate_weekly"],
            &format!("adaptive planning {adaptive}"),
        );
        let rows: Vec<(&str, usize)> = verdicts.iter().map(|v| (v.name, v.rows)).collect();
        assert_eq!(rows[0], ("q1 tokens per artifact", 1));
        assert_eq!(rows[1], ("q2 duplicates", duplicated_keys));
        assert_eq!(rows[2], ("job_rollup", JOBS));
        // 2026-11-02 … 2026-11-13: the Mondays of weeks 45 and 46.
        assert_eq!(rows[3], ("week_rollup", 2));
        assert_eq!(rows[6], ("weekly_metrics", 2));
        assert_eq!(rows[7], ("gate_weekly", 0));
    }
}

/// The text cells of `sql`'s answer on `ctx`, rows sorted.
async fn cells(ctx: &datafusion::prelude::SessionContext, sql: &str) -> Vec<Vec<String>> {
    let result = laneledger_cluster::run(ctx, sql).await.unwrap();
    laneledger_cluster::as_text(&result.batches, false).unwrap().1
}

#[test]
fn weekly_metrics_and_gate_weekly_run_on_the_exported_ledger_tables() {
    on_runtime(weekly_metrics_and_gate_weekly_run_on_the_exported_ledger_tables_body())
}

async fn weekly_metrics_and_gate_weekly_run_on_the_exported_ledger_tables_body() {
    let dir = tempfile::tempdir().unwrap();
    let attempts = drill_attempts("w-", 5, 600);
    let ledger = ledger_with(&dir.path().join("l.redb"), &attempts);
    ingest_sample_decisions(&ledger);
    let session = Session::new(ledger.clone()).await.unwrap();
    // Week 45's figures before the sweep, counted here without SQL: its jobs (by first attempt).
    let monday_46 = laneledger_store::parse_timestamp("2026-11-09T00:00:00Z").unwrap();
    let mut first: BTreeMap<&str, i64> = BTreeMap::new();
    for a in &attempts {
        let t = first.entry(&a.job_id).or_insert(a.started_at);
        *t = (*t).min(a.started_at);
    }
    let jobs_45 = first.values().filter(|t| **t < monday_46).count();
    // Sweep 33 days after the first job with 30 kept: week 45's first days go, and week_snapshot
    // keeps week 45's figures from before.
    let now = laneledger_store::parse_timestamp(START).unwrap() + 33 * laneledger_store::storage::retention::DAY_MICROS;
    let mut opts = SweepOptions::new(RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    });
    let archive = dir.path().join("archive");
    opts.archive = Some(archive.clone());
    let SweepOutcome::Swept { record, .. } = sweep(&session, now, &opts).await.unwrap() else {
        panic!("the sweep ran")
    };
    assert!(record.rows_removed > 0, "{record:?}");
    assert_eq!(record.weeks_snapshotted, ["2026-W45"]);
    let export_dir = dir.path().join("export");
    export(&ledger, &export_dir);

    let url = in_process_cluster(dir.path()).await;
    let folders = laneledger_cluster::data_folders(std::slice::from_ref(&export_dir)).unwrap();
    let ctx = laneledger_cluster::connect(&url, &folders, true).await.unwrap();
    let verdicts = tokio::time::timeout(
        QUERY_LIMIT,
        laneledger_cluster::differential(&ctx, |sql| embedded(&session, sql)),
    )
    .await
    .expect("the differential finished in time")
    .unwrap();
    assert_all_same(
        &verdicts,
        &["weekly_metrics", "gate_weekly"],
        "after a sweep, with decisions",
    );
    let rows: Vec<(&str, usize)> = verdicts[6..].iter().map(|v| (v.name, v.rows)).collect();
    // Weeks 45 and 46 of the drill; week 48 of the decisions.
    assert_eq!(rows, [("weekly_metrics", 2), ("gate_weekly", 1)]);
    assert_eq!(
        laneledger_cluster::view_sql(&ctx, "weekly_metrics").unwrap(),
        "SELECT * FROM weekly_metrics"
    );

    // Week 45 shows the snapshot: every job of the week, though the sweep removed some of them.
    let weekly = cells(&ctx, "SELECT iso_week, jobs FROM weekly_metrics").await;
    assert_eq!(weekly[0], ["2026-W45".to_string(), jobs_45.to_string()]);
    let remaining = cells(&ctx, "SELECT jobs FROM week_rollup WHERE iso_week = '2026-W45'").await;
    assert!(remaining[0][0].parse::<usize>().unwrap() < jobs_45, "{remaining:?}");
    // gate_weekly: the sample week's figures (query/tests/gate.rs has them from seed 003).
    let gate_sql = "SELECT iso_week, decisions, admit_free, defer, reserved, free_admit_misses, \
                    free_admit_miss_rate, defers_that_fit_reserved, reserved_that_fit_free, decision_mismatches \
                    FROM gate_weekly";
    let expected_gate = vec![
        ["2026-W48", "41", "20", "12", "9", "4", "0.2", "6", "6", "4"]
            .map(String::from)
            .to_vec(),
    ];
    assert_eq!(cells(&ctx, gate_sql).await, expected_gate);

    // With the archive too, week_rollup sees every attempt again and weekly_metrics is unchanged.
    let folders = laneledger_cluster::data_folders(&[export_dir, archive]).unwrap();
    let ctx = laneledger_cluster::connect(&url, &folders, true).await.unwrap();
    let all = cells(&ctx, "SELECT jobs FROM week_rollup WHERE iso_week = '2026-W45'").await;
    assert_eq!(all, [[jobs_45.to_string()]]);
    let embedded_weekly = laneledger_cluster::as_text(
        &embedded(&session, "SELECT * FROM weekly_metrics").await.unwrap(),
        false,
    )
    .unwrap()
    .1;
    assert_eq!(cells(&ctx, "SELECT * FROM weekly_metrics").await, embedded_weekly);
    assert_eq!(cells(&ctx, gate_sql).await, expected_gate);
}

#[tokio::test]
async fn ledger_only_views_are_refused_naming_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let attempts = drill_attempts("r-", 3, 50);
    let ledger = ledger_with(&dir.path().join("l.redb"), &attempts);
    let export_dir = dir.path().join("export");
    export(&ledger, &export_dir);
    // Two exports of the ledger: weekly_metrics does not combine two ledgers' snapshots.
    let twice = dir.path().join("twice");
    export(&ledger, &twice);
    let both = laneledger_cluster::data_folders(&[export_dir.clone(), twice]).unwrap();
    // Refusals happen on the client, before anything is sent: no scheduler is listening here.
    let ctx = laneledger_cluster::connect("df://127.0.0.1:9", &both, true)
        .await
        .unwrap();
    let several = "weekly_metrics runs over one ledger's export only (with or without its archive): each ledger's \
                   week_snapshot holds its own figures of the weeks it swept, which do not add up with another's; \
                   query week_rollup over the exports and their archives instead";
    assert_eq!(
        laneledger_cluster::view_sql(&ctx, "weekly_metrics")
            .unwrap_err()
            .to_string(),
        several
    );
    let err = laneledger_cluster::run(&ctx, "SELECT * FROM weekly_metrics")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "this query reads what only the ledger holds; the cluster has job_attempt, gate_decision, week_snapshot, \
             retention_sweep (from the Parquet export) and the views job_rollup, job_week, week_rollup, \
             duplicate_artifact, gate_weekly:\n  {several}"
        )
    );
    assert_eq!(
        laneledger_cluster::view_sql(&ctx, "gate_weekly").unwrap(),
        "SELECT * FROM gate_weekly"
    );

    // An export without the ledger's tables (as written before export wrote them): refused.
    std::fs::remove_dir_all(export_dir.join("ledger")).unwrap();
    let folders = laneledger_cluster::data_folders(&[export_dir]).unwrap();
    let ctx = laneledger_cluster::connect("df://127.0.0.1:9", &folders, true)
        .await
        .unwrap();

    let err = laneledger_cluster::run(&ctx, "SELECT iso_week, decisions FROM gate_weekly")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "this query reads what only the ledger holds; the cluster has job_attempt (from the Parquet export) and \
         the views job_rollup, job_week, week_rollup, duplicate_artifact:\n  gate_weekly needs gate_decision \
         (the admission gate's decisions); every export folder given with --data must hold ledger/gate_decision/, \
         which `laneledger export --format parquet` writes"
    );
    let err = laneledger_cluster::run(
        &ctx,
        "SELECT w.iso_week FROM weekly_metrics w JOIN week_snapshot s ON w.iso_week = s.iso_week",
    )
    .await
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "this query reads what only the ledger holds; the cluster has job_attempt (from the Parquet export) and \
         the views job_rollup, job_week, week_rollup, duplicate_artifact:\n  weekly_metrics needs week_snapshot \
         (the weekly figures kept when a retention sweep removed attempts); every export folder given with --data \
         must hold ledger/week_snapshot/, which `laneledger export --format parquet` writes\n  week_snapshot needs \
         week_snapshot itself; every export folder given with --data must hold ledger/week_snapshot/, which \
         `laneledger export --format parquet` writes"
    );
    let err = laneledger_cluster::run(&ctx, "SELECT COUNT(*) FROM ingest_reject")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "this query reads what only the ledger holds; the cluster has job_attempt (from the Parquet export) and \
         the views job_rollup, job_week, week_rollup, duplicate_artifact:\n  ingest_reject needs ingest_reject \
         (lines that could not be read)"
    );
    assert_eq!(
        laneledger_cluster::view_sql(&ctx, "gate_weekly")
            .unwrap_err()
            .to_string(),
        "gate_weekly does not run on the cluster: it needs gate_decision (the admission gate's decisions), which \
         every export folder given with --data must hold as ledger/gate_decision/ (`laneledger export --format \
         parquet` writes it); the views on the cluster are job_rollup, job_week, week_rollup, duplicate_artifact"
    );
    assert_eq!(
        laneledger_cluster::view_sql(&ctx, "no_such").unwrap_err().to_string(),
        "no view \"no_such\"; the views on the cluster are job_rollup, job_week, week_rollup, duplicate_artifact"
    );
    assert_eq!(
        laneledger_cluster::view_sql(&ctx, "Week_Rollup").unwrap(),
        "SELECT * FROM week_rollup ORDER BY week_start"
    );
    assert_eq!(
        laneledger_cluster::view_sql(&ctx, "job_rollup").unwrap(),
        "SELECT * FROM job_rollup"
    );

    // A folder with no export in it is named.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = laneledger_cluster::data_folders(std::slice::from_ref(&empty)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}: holds no day=YYYY-MM-DD folders (write one with `laneledger export --format parquet DIR`) and no \
             sweep-NNNNNN folders (a `laneledger retain --archive DIR` root)",
            empty.display()
        )
    );
}

/// Pins Ballista's behaviour that `connect` works around: creating a Ballista context from a state
/// replaces the state's aggregate functions, so laneledger's `sum` registered before is lost and
/// `SUM(boolean)` no longer plans; registered after, it plans. If a Ballista upgrade changes this,
/// this test says so.
#[tokio::test]
async fn a_ballista_context_drops_functions_registered_before_it() {
    use ballista::prelude::{SessionConfigExt, SessionContextExt};
    use datafusion::execution::{FunctionRegistry, SessionStateBuilder};
    use datafusion::prelude::{SessionConfig, SessionContext};

    let dir = tempfile::tempdir().unwrap();
    let ledger = ledger_with(&dir.path().join("l.redb"), &drill_attempts("f-", 4, 20));
    let export_dir = dir.path().join("export");
    export(&ledger, &export_dir);
    let folders = laneledger_cluster::data_folders(&[export_dir]).unwrap();

    let mut state = SessionStateBuilder::new()
        .with_default_features()
        .with_config(SessionConfig::new_with_ballista())
        .build();
    state
        .register_udaf(std::sync::Arc::new(laneledger_query::sqlite_sum()))
        .unwrap();
    // Nothing listens there: planning happens on the client, before anything is sent.
    let ctx = SessionContext::remote_with_state("df://127.0.0.1:9", state)
        .await
        .unwrap();
    laneledger_cluster::register_job_attempt(&ctx, &folders).await.unwrap();
    let sql = "SELECT SUM(lane = 'free') AS free_attempts FROM job_attempt";

    let err = ctx.sql(sql).await.unwrap_err().to_string();
    assert!(
        err.contains("No function matches the given name and argument types 'sum(Boolean)'"),
        "{err}"
    );

    ctx.register_udaf(laneledger_query::sqlite_sum());
    let df = ctx.sql(sql).await.unwrap();
    ctx.state().optimize(df.logical_plan()).unwrap();
}
