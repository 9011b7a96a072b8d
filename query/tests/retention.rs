//! The retention sweep (SPEC 6) on an injected clock: 60 days of drill attempts swept at 30 days,
//! with open attempts and attempts inside the reconcile window kept; interrupted sweeps converge;
//! the weekly figures of swept weeks stay as they were; `retention_sweep` in SQL.

use std::collections::BTreeMap;
use std::path::Path;

use datafusion::arrow::array::{Array, AsArray};
use datafusion::arrow::datatypes::{Int64Type, TimestampMicrosecondType};

use laneledger_query::Session;
use laneledger_query::archive::retention::{SweepOptions, SweepOutcome, SweepStep, sweep};
use laneledger_store::drill::{self, DrillConfig, Policy, SplitMix64};
use laneledger_store::storage::retention::{DAY_MICROS, RetentionRule};
use laneledger_store::{Attempt, Incoming, Lane, Ledger, Outcome, StoredAttempt, parse_timestamp};

const START: &str = "2026-08-03T00:00:00Z";
const MIN: i64 = 60_000_000;

fn start() -> i64 {
    parse_timestamp(START).unwrap()
}

/// The sweep's clock: 60 days after the first job.
fn now() -> i64 {
    start() + 60 * DAY_MICROS
}

fn cutoff() -> i64 {
    now() - 30 * DAY_MICROS
}

fn rule() -> RetentionRule {
    RetentionRule {
        days: 30,
        reconcile_window_s: 900,
    }
}

fn one(job_id: &str, idem_key: &str, started_at: i64, ended_at: Option<i64>) -> Attempt {
    Attempt {
        job_id: job_id.into(),
        idem_key: idem_key.into(),
        attempt_no: 1,
        lane: Lane::Free,
        started_at,
        ended_at,
        outcome: ended_at.map(|_| Outcome::Ok),
        tokens_in: Some(500),
        tokens_out: Some(300),
        artifact_id: ended_at.map(|_| format!("art-{job_id}")),
        http_status: None,
        provider_code: None,
        key_id: None,
        pool_id: None,
        model: None,
        attrs: None,
    }
}

/// 240 drill jobs over 60 days, plus the cases the rule must keep:
/// - `open-old`: started 3 days before the cutoff and never ended (an open attempt, within the
///   7-day grace period: kept);
/// - `open-lost`: started on day 1 and never ended: open longer than the grace period past the
///   cutoff, so abandoned, and it goes;
/// - `rec-old`: ended 5 minutes before the cutoff, and `rec-new` (same idem_key) started 2 minutes
///   after it: `rec-old` is inside the 900 s reconcile window of a newer attempt that stays;
/// - `far-old`: ended 2 hours before the cutoff, `far-new` (same idem_key) started after the
///   cutoff: outside the window, so `far-old` goes.
fn attempts() -> Vec<Attempt> {
    let cfg = DrillConfig {
        policy: Policy::NoPin,
        seed: 11,
        job_prefix: "d-".into(),
        ids: laneledger_store::drill::DrillIds::Sequential,
    };
    let mut all = drill::synthetic(&cfg, 240, start(), 60.0);
    let c = cutoff();
    all.push(one("open-old", "open", c - 3 * DAY_MICROS, None));
    all.push(one("open-lost", "lost", start() + DAY_MICROS, None));
    all.push(one("rec-old", "rec", c - 20 * MIN, Some(c - 5 * MIN)));
    all.push(one("rec-new", "rec", c - 3 * MIN, Some(c + MIN)));
    all.push(one("far-old", "far", c - 3 * 60 * MIN, Some(c - 120 * MIN)));
    all.push(one("far-new", "far", c + MIN, Some(c + 2 * MIN)));
    all
}

fn build(path: &Path) -> Vec<Attempt> {
    let ledger = Ledger::open(path).unwrap();
    let all = attempts();
    let batch = all
        .iter()
        .enumerate()
        .map(|(i, a)| Incoming::Attempt {
            source: "gen".into(),
            line: i as u64 + 1,
            raw: String::new(),
            attempt: a.clone(),
        })
        .collect();
    ledger.write_batch(batch).unwrap();
    all
}

/// Every row of the Parquet files under `dir` (`day=YYYY-MM-DD/*.parquet`), read back with the
/// parquet crate's Arrow reader: (day folder, job_id, attempt_no, started_at, ended_at), sorted.
fn archived(dir: &Path) -> Vec<(String, String, i64, i64, Option<i64>)> {
    let mut out = Vec::new();
    for day in std::fs::read_dir(dir).unwrap() {
        let day = day.unwrap().path();
        let name = day.file_name().unwrap().to_string_lossy().into_owned();
        let day_label = name.strip_prefix("day=").expect("hive-style day folder").to_string();
        for file in std::fs::read_dir(&day).unwrap() {
            let file = file.unwrap().path();
            assert_eq!(file.extension().unwrap(), "parquet");
            let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(&file).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap();
            for b in reader {
                let b = b.unwrap();
                let job = b.column_by_name("job_id").unwrap().as_string::<i32>().clone();
                let no = b
                    .column_by_name("attempt_no")
                    .unwrap()
                    .as_primitive::<Int64Type>()
                    .clone();
                let started = b
                    .column_by_name("started_at")
                    .unwrap()
                    .as_primitive::<TimestampMicrosecondType>()
                    .clone();
                let ended = b
                    .column_by_name("ended_at")
                    .unwrap()
                    .as_primitive::<TimestampMicrosecondType>()
                    .clone();
                for i in 0..b.num_rows() {
                    out.push((
                        day_label.clone(),
                        job.value(i).to_string(),
                        no.value(i),
                        started.value(i),
                        ended.is_valid(i).then(|| ended.value(i)),
                    ));
                }
            }
        }
    }
    out.sort();
    out
}

/// The archive rows `attempts` should give.
fn as_archived(attempts: &[StoredAttempt]) -> Vec<(String, String, i64, i64, Option<i64>)> {
    let mut out: Vec<_> = attempts
        .iter()
        .map(|s| {
            let a = &s.attempt;
            (
                laneledger_store::format_timestamp(a.started_at)[..10].to_string(),
                a.job_id.clone(),
                i64::from(a.attempt_no),
                a.started_at,
                a.ended_at,
            )
        })
        .collect();
    out.sort();
    out
}

fn held(ledger: &Ledger) -> Vec<StoredAttempt> {
    let mut out = Vec::new();
    ledger.for_each_attempt(|a| out.push(a)).unwrap();
    out
}

/// Jobs the model says go: every attempt ended before the cutoff, and not kept by the
/// reconcile window (only `rec-old` is, by construction; checked below).
fn expected_removed(all: &[Attempt]) -> BTreeMap<String, usize> {
    let mut by_job: BTreeMap<String, Vec<&Attempt>> = BTreeMap::new();
    for a in all {
        by_job.entry(a.job_id.clone()).or_default().push(a);
    }
    by_job
        .into_iter()
        .filter(|(job, v)| {
            job != "rec-old"
                && v.iter().all(|a| {
                    a.ended_at.is_some_and(|e| e < cutoff())
                        || (a.ended_at.is_none() && a.started_at < cutoff() - 7 * DAY_MICROS)
                })
        })
        .map(|(job, v)| (job, v.len()))
        .collect()
}

#[tokio::test]
async fn sweep_at_30_days_removes_exactly_the_finished_old_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    let all = build(&path);
    let ledger = Ledger::open(&path).unwrap();
    let session = Session::new(ledger.clone()).await.unwrap();
    let weeks_before = session.weeks().await.unwrap();
    let inside_before: Vec<StoredAttempt> = held(&ledger)
        .into_iter()
        .filter(|a| a.attempt.ended_at.is_none_or(|e| e >= cutoff()) && a.attempt.job_id != "open-lost")
        .collect();

    // A dry run writes nothing.
    let mut opts = SweepOptions::new(rule());
    opts.dry_run = true;
    let SweepOutcome::DryRun(plan) = sweep(&session, now(), &opts).await.unwrap() else {
        panic!("dry run")
    };
    assert_eq!(held(&ledger).len(), all.len());
    assert!(ledger.sweeps().unwrap().is_empty());

    let removed = expected_removed(&all);
    let rows: usize = removed.values().sum();
    assert!(rows > 100, "{rows}");
    assert_eq!(plan.jobs, removed.keys().cloned().collect::<Vec<_>>());
    assert_eq!(plan.attempts.len(), rows);
    assert_eq!((plan.kept_open, plan.abandoned, plan.kept_reconcile), (1, 1, 1));
    assert!(plan.jobs.contains(&"far-old".to_string()));
    assert!(plan.jobs.contains(&"open-lost".to_string()));

    opts.dry_run = false;
    let archive_root = dir.path().join("archive");
    opts.archive = Some(archive_root.clone());
    let before_rows = held(&ledger);
    let SweepOutcome::Swept { record, .. } = sweep(&session, now(), &opts).await.unwrap() else {
        panic!("sweep")
    };
    // The archive holds exactly the removed rows, each under the day it started.
    let archive_dir = archive_root.join("sweep-000001");
    assert_eq!(record.archive.as_deref(), Some(archive_dir.to_str().unwrap()));
    let gone: Vec<StoredAttempt> = before_rows
        .iter()
        .filter(|a| removed.contains_key(&a.attempt.job_id))
        .cloned()
        .collect();
    assert_eq!(gone.len(), rows);
    assert_eq!(archived(&archive_dir), as_archived(&gone));
    assert_eq!(record.rows_removed, rows as u64);
    assert_eq!(record.jobs_removed, removed.len() as u64);
    assert_eq!(record.jobs_abandoned, 1);
    assert_eq!(record.digest, plan.digest_hex());
    assert_eq!(record.cutoff, cutoff());

    let after = held(&ledger);
    assert_eq!(after.len(), all.len() - rows);
    // Rows of wholly finished jobs older than the cutoff left: only rec-old, kept by the window.
    let mut by_job: BTreeMap<&str, Vec<&StoredAttempt>> = BTreeMap::new();
    for a in &after {
        by_job.entry(a.attempt.job_id.as_str()).or_default().push(a);
    }
    let old_left: Vec<&str> = by_job
        .iter()
        .filter(|(_, v)| v.iter().all(|a| a.attempt.ended_at.is_some_and(|e| e < cutoff())))
        .map(|(j, _)| *j)
        .collect();
    assert_eq!(old_left, ["rec-old"]);
    assert!(by_job.contains_key("open-old"));
    // Rows inside the window removed: none.
    let inside_after: Vec<StoredAttempt> = after
        .iter()
        .filter(|a| a.attempt.ended_at.is_none_or(|e| e >= cutoff()))
        .cloned()
        .collect();
    assert_eq!(inside_after, inside_before);

    // The weeks index shows every week exactly as before, swept ones from their snapshots.
    assert_eq!(session.weeks().await.unwrap(), weeks_before);
    assert!(!record.weeks_snapshotted.is_empty());

    // SQL sees the sweep; the ledger still verifies; a second sweep finds nothing.
    let r = session
        .query("SELECT sweep_no, jobs_removed, rows_removed, digest FROM retention_sweep")
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 1);
    let text = laneledger_query::format_result(&r, laneledger_query::OutputFormat::Csv).unwrap();
    assert_eq!(
        text,
        format!(
            "sweep_no,jobs_removed,rows_removed,digest\r\n1,{},{rows},{}\r\n",
            removed.len(),
            plan.digest_hex()
        )
    );
    assert!(ledger.verify().unwrap().is_clean());
    assert!(matches!(
        sweep(&session, now(), &SweepOptions::new(rule())).await.unwrap(),
        SweepOutcome::NothingToRemove(_)
    ));
    assert_eq!(ledger.sweeps().unwrap().len(), 1);
}

#[tokio::test]
async fn sweep_of_a_whole_drill_week_keeps_its_weekly_figures() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("l.redb");
    build(&path);
    let ledger = Ledger::open(&path).unwrap();
    let session = Session::new(ledger.clone()).await.unwrap();
    let before = session.weeks().await.unwrap();
    // Sweep far enough ahead that every finished job goes.
    let later = now() + 90 * DAY_MICROS;
    sweep(&session, later, &SweepOptions::new(rule())).await.unwrap();
    // By then every open attempt is abandoned (open 7 days past the cutoff), so nothing is left.
    let left = held(&ledger);
    assert!(left.is_empty(), "{left:?}");
    // The second week's rows are all swept.
    let first = &before[1];
    let r = session
        .query(&format!(
            "SELECT COUNT(*) AS n FROM job_attempt a JOIN job_week w ON a.job_id = w.job_id WHERE w.iso_week = '{}'",
            first.iso_week
        ))
        .await
        .unwrap();
    let text = laneledger_query::format_result(&r, laneledger_query::OutputFormat::Csv).unwrap();
    assert_eq!(text, "n\r\n0\r\n", "every row of {} swept", first.iso_week);
    assert_eq!(session.weeks().await.unwrap(), before);
    assert!(ledger.verify().unwrap().is_clean());
}

/// The ledger's content as compared between sweeps: attempts, sweeps (archive folder as a name
/// relative to its root), week snapshots.
fn state(ledger: &Ledger) -> String {
    let mut sweeps = ledger.sweeps().unwrap();
    for s in &mut sweeps {
        s.archive = s
            .archive
            .as_ref()
            .map(|a| Path::new(a).file_name().unwrap().to_string_lossy().into_owned());
    }
    format!(
        "{:?}\n{:?}\n{:?}",
        held(ledger),
        sweeps,
        ledger.week_snapshots().unwrap()
    )
}

#[tokio::test]
async fn ten_interrupted_sweeps_converge_to_the_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.redb");
    build(&base);
    let reference = {
        let path = dir.path().join("ref.redb");
        std::fs::copy(&base, &path).unwrap();
        let ledger = Ledger::open(&path).unwrap();
        let session = Session::new(ledger.clone()).await.unwrap();
        let mut opts = SweepOptions::new(rule());
        opts.archive = Some(dir.path().join("ref-archive"));
        sweep(&session, now(), &opts).await.unwrap();
        (state(&ledger), archived(&dir.path().join("ref-archive/sweep-000001")))
    };
    let steps = [SweepStep::Planned, SweepStep::ArchiveWritten, SweepStep::Archived];
    let mut rng = SplitMix64::new(5);
    for i in 0..10 {
        let path = dir.path().join(format!("k{i}.redb"));
        std::fs::copy(&base, &path).unwrap();
        let step = steps[(rng.next_u64() % steps.len() as u64) as usize];
        {
            let ledger = Ledger::open(&path).unwrap();
            let session = Session::new(ledger.clone()).await.unwrap();
            let mut opts = SweepOptions::new(rule());
            opts.archive = Some(dir.path().join(format!("archive-{i}")));
            opts.abort_after = Some(step);
            let err = sweep(&session, now(), &opts).await.unwrap_err();
            assert!(matches!(err, laneledger_query::Error::Aborted(s) if s == step));
            assert!(ledger.sweeps().unwrap().is_empty());
        }
        let ledger = Ledger::open(&path).unwrap();
        let session = Session::new(ledger.clone()).await.unwrap();
        let mut opts = SweepOptions::new(rule());
        opts.archive = Some(dir.path().join(format!("archive-{i}")));
        assert!(matches!(
            sweep(&session, now(), &opts).await.unwrap(),
            SweepOutcome::Swept { .. }
        ));
        assert_eq!(state(&ledger), reference.0, "run {i} stopped after {step:?}");
        let root = dir.path().join(format!("archive-{i}"));
        assert_eq!(archived(&root.join("sweep-000001")), reference.1, "run {i}");
        let left: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["sweep-000001"], "run {i}: no partial archive left");
        assert!(ledger.verify().unwrap().is_clean());
    }
}
